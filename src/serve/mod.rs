//! `harness-bridge serve`: the bridge as a long-running service. One
//! process holds the embedded host, the MCP server and an HTTP API; turns
//! of a conversation run one after another in arrival order, different
//! conversations in parallel up to a limit; results are kept per run so a
//! client that went away can fetch them; shutdown lets running turns
//! finish within a grace, then cancels them.

pub mod cluster;
mod config;
mod http;
mod journal;
mod leftovers;
pub mod tokens;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use crate::run::{QueueFull, Scheduler, Ticket};
pub use config::{ConfigError, ServeConfig};
pub use journal::{Interrupted, Journal, JournalError, JournalRun, own_store};
pub use leftovers::end_leftovers;

use crate::protocol::FailureCode;
use crate::protocol::{AgentRunContext, AgentRunResult, ResultPayload, RunFailed};
use crate::run::{Bridge, RunOptions, SpawnHook, Spawned, Steer, SteerInbox};
use cluster::{CancelOutcome, Claim, Cluster, ClusterError, ClusterEvent};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting for its conversation or a free slot.
    Queued,
    /// The harness is running.
    Running,
    /// Ended with `run.completed`.
    Completed,
    /// Ended with `run.failed`.
    Failed,
}

impl RunStatus {
    /// The name clients and the journal use.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
    }
}

/// One run's record while it is in flight: its results so far and how to
/// stop it. Once it ends, the journal has it.
pub struct RunEntry {
    /// The run's conversation.
    pub conversation_id: String,
    /// The harness it runs on.
    pub harness: String,
    status: Mutex<RunStatus>,
    results: Mutex<Vec<AgentRunResult>>,
    /// Counted in `runs_running` (and not yet taken off).
    counted: AtomicBool,
    /// Number of results so far; changes wake streaming clients.
    count: watch::Sender<usize>,
    cancel: CancellationToken,
    /// Bytes of results (as JSON) kept so far.
    kept_bytes: AtomicUsize,
    /// Set once the results passed the service's cap: the run was stopped
    /// and no more of its output is kept.
    over_cap: AtomicBool,
    /// Follow-ups for the running turn (`policy: steer`).
    steer: mpsc::Sender<Steer>,
    inbox: SteerInbox,
    /// This instance runs it (on a shared store, the entry may only
    /// mirror a run another instance runs).
    executing: AtomicBool,
    /// The sequence of the last result handed to the run's record: on a
    /// shared store a result reaches the entry only once written, so the
    /// entry's last can be behind it.
    sent: AtomicU64,
}

impl RunEntry {
    fn new(conversation_id: String, harness: String) -> Arc<RunEntry> {
        let (steer, inbox) = mpsc::channel(8);
        Arc::new(RunEntry {
            conversation_id,
            harness,
            status: Mutex::new(RunStatus::Queued),
            results: Mutex::new(Vec::new()),
            counted: AtomicBool::new(false),
            count: watch::channel(0).0,
            cancel: CancellationToken::new(),
            kept_bytes: AtomicUsize::new(0),
            over_cap: AtomicBool::new(false),
            steer,
            inbox: SteerInbox(Arc::new(tokio::sync::Mutex::new(inbox))),
            executing: AtomicBool::new(false),
            sent: AtomicU64::new(0),
        })
    }

    /// The run's status.
    pub fn status(&self) -> RunStatus {
        *self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_status(&self, status: RunStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = status;
        self.count.send_modify(|_| {});
    }

    /// Keep a result; one numbered at or below the last kept is a copy
    /// (a mirrored run's result read from the store as well as made here)
    /// and is dropped.
    fn push(&self, result: AgentRunResult) {
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        let last = results.last().and_then(|r| r.sequence);
        if let (Some(last), Some(seq)) = (last, result.sequence)
            && seq <= last
        {
            return;
        }
        results.push(result);
        let n = results.len();
        drop(results);
        self.count.send_replace(n);
    }

    /// The sequence of the last result kept (0: none).
    fn last_sequence(&self) -> u64 {
        let results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        results.last().and_then(|r| r.sequence).unwrap_or(0)
    }

    /// Results from index `from` on.
    pub fn results_from(&self, from: usize) -> Vec<AgentRunResult> {
        let results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        results.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }

    /// Whether the run has ended.
    pub fn ended(&self) -> bool {
        matches!(self.status(), RunStatus::Completed | RunStatus::Failed)
    }

    /// Ask the run to stop.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

/// Where accepted turns wait, and where their record is kept.
enum Backlog {
    /// The one service on its store: turns wait in memory, and the SQLite
    /// journal beside the store keeps every run.
    Local {
        scheduler: Arc<Scheduler>,
        journal: Journal,
    },
    /// One of several instances on a PostgreSQL store: turns wait in the
    /// database's queue, whichever instance runs them, and the database
    /// keeps every run.
    Shared(Arc<Cluster>),
}

/// Where one run's record goes as it runs.
enum Record<'a> {
    Journal(&'a Journal),
    Shared(&'a cluster::ResultSink),
}

impl Record<'_> {
    /// Record one result and let the run's clients have it: at once on
    /// the embedded store (this service is the only one, and its record
    /// is its own); on a shared store once the store holds it (the sink
    /// hands it to the entry), since another instance may have taken the
    /// run over and what the record says is what every client is told.
    fn result(&self, run_id: &str, run: &RunEntry, result: AgentRunResult, body: String) {
        let seq = result.sequence.unwrap_or_default();
        run.sent.fetch_max(seq, Ordering::AcqRel);
        match self {
            Record::Journal(journal) => {
                journal.result(run_id, seq, body);
                run.push(result);
            }
            Record::Shared(sink) => sink.send(result, body),
        }
    }
}

/// The service: the bridge, the backlog of turns, the runs in flight and
/// their record.
pub struct Service {
    bridge: Arc<Bridge>,
    backlog: Backlog,
    runs: Mutex<HashMap<String, Arc<RunEntry>>>,
    tasks: tokio_util::task::TaskTracker,
    /// Set once shutdown begins: new runs are refused.
    closing: AtomicBool,
    config: ServeConfig,
    /// What the cluster says, until [`serve`] starts listening to it.
    events: Mutex<Option<mpsc::UnboundedReceiver<ClusterEvent>>>,
}

/// Why a run was not accepted.
#[derive(Debug)]
pub enum Refused {
    /// A queue is full (429).
    Busy(QueueFull),
    /// A run with this id exists or existed (409).
    Duplicate,
    /// The service is shutting down, or cannot check its journal (503).
    Unavailable(String),
    /// No harness of this name (422); the message names the known ones.
    UnknownHarness(crate::harness::AdapterError),
}

/// What cancelling a run by id came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// Asked to stop (or dropped, when it waited); its status then.
    Asked(RunStatus),
    /// It had ended already.
    Ended(RunStatus),
    /// No such run.
    Unknown,
}

/// How often a claim loop or a follower looks again without being told:
/// notifications are hints.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

impl Service {
    /// A service around a started bridge and an opened journal: the one
    /// service on its store.
    pub fn new(bridge: Bridge, journal: Journal, config: ServeConfig) -> Arc<Service> {
        let backlog = Backlog::Local {
            scheduler: Scheduler::new(
                config.max_concurrent_runs,
                config.max_queue_per_conversation,
                config.max_queued_total,
            ),
            journal,
        };
        Service::with(bridge, backlog, config, None)
    }

    /// A service that is one instance of several on a shared store; its
    /// claim loop and the cluster's heartbeat start with [`serve`].
    pub fn shared(
        bridge: Bridge,
        cluster: Arc<Cluster>,
        events: mpsc::UnboundedReceiver<ClusterEvent>,
        config: ServeConfig,
    ) -> Arc<Service> {
        Service::with(bridge, Backlog::Shared(cluster), config, Some(events))
    }

    fn with(
        bridge: Bridge,
        backlog: Backlog,
        config: ServeConfig,
        events: Option<mpsc::UnboundedReceiver<ClusterEvent>>,
    ) -> Arc<Service> {
        Arc::new(Service {
            bridge: Arc::new(bridge),
            backlog,
            runs: Mutex::new(HashMap::new()),
            tasks: tokio_util::task::TaskTracker::new(),
            closing: AtomicBool::new(false),
            config,
            events: Mutex::new(events),
        })
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RunEntry>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A run in flight (or mirrored) here, by id.
    pub fn run(&self, run_id: &str) -> Option<Arc<RunEntry>> {
        self.runs().get(run_id).cloned()
    }

    /// The entry of `run_id`, made when there is none yet (a run accepted
    /// here, or claimed here, whichever comes first).
    fn entry(&self, run_id: &str, conversation: &str, harness: &str) -> Arc<RunEntry> {
        self.runs()
            .entry(run_id.to_string())
            .or_insert_with(|| RunEntry::new(conversation.to_string(), harness.to_string()))
            .clone()
    }

    /// A run that is not in memory here, by id: one that ended (or was
    /// interrupted), from the journal; on a shared store, any run, from
    /// the database.
    pub async fn past_run(self: &Arc<Self>, run_id: &str) -> Option<JournalRun> {
        match &self.backlog {
            Backlog::Local { .. } => {
                let service = self.clone();
                let run_id = run_id.to_string();
                tokio::task::spawn_blocking(move || match &service.backlog {
                    Backlog::Local { journal, .. } => journal.get(&run_id),
                    Backlog::Shared(_) => None,
                })
                .await
                .ok()
                .flatten()
            }
            Backlog::Shared(cluster) => match cluster.record(run_id).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::error!(run_id, "cannot read the run: {e}");
                    None
                }
            },
        }
    }

    /// A run to stream from here: in memory, or (on a shared store) one
    /// that another instance runs or will run, followed from the database.
    pub async fn watch(self: &Arc<Self>, run_id: &str) -> Option<Arc<RunEntry>> {
        if let Some(run) = self.run(run_id) {
            return Some(run);
        }
        let Backlog::Shared(cluster) = &self.backlog else {
            return None;
        };
        let (status, _, conversation, harness) = cluster.status(run_id).await.ok().flatten()?;
        let entry = self.entry(run_id, &conversation, &harness);
        if matches!(status, RunStatus::Completed | RunStatus::Failed) {
            // Ended: its results, once, from the store.
            self.runs().remove(run_id);
            for result in cluster.results_after(run_id, 0).await.ok()? {
                entry.push(result);
            }
            entry.set_status(status);
            return Some(entry);
        }
        tokio::spawn(
            self.clone()
                .follow(cluster.clone(), run_id.to_string(), entry.clone()),
        );
        Some(entry)
    }

    /// Cancel a run by id, wherever it runs; an error means the shared
    /// store could not be asked (a cancel on one machine always goes
    /// through).
    pub async fn cancel(self: &Arc<Self>, run_id: &str) -> Result<Cancelled, ClusterError> {
        if let Some(run) = self.run(run_id)
            && (run.executing.load(Ordering::Acquire)
                || matches!(self.backlog, Backlog::Local { .. }))
        {
            run.cancel();
            return Ok(Cancelled::Asked(run.status()));
        }
        match &self.backlog {
            Backlog::Local { .. } => Ok(match self.past_run(run_id).await {
                Some(past) => Cancelled::Ended(past.status),
                None => Cancelled::Unknown,
            }),
            Backlog::Shared(cluster) => Ok(match cluster.cancel(run_id).await? {
                CancelOutcome::NotFound => Cancelled::Unknown,
                CancelOutcome::Ended(status) => Cancelled::Ended(status),
                CancelOutcome::Dropped => Cancelled::Asked(RunStatus::Failed),
                CancelOutcome::Requested => Cancelled::Asked(RunStatus::Running),
            }),
        }
    }

    /// Hand `text` to the running turn of `conversation` when its harness
    /// takes input mid-turn and the turn runs here; the run it went to,
    /// else `None` (the caller queues it as the next turn: nothing is
    /// dropped).
    pub async fn steer(&self, conversation: &str, harness: &str, text: &str) -> Option<String> {
        if !self.bridge.steers(harness) {
            return None;
        }
        let (run_id, run) = self
            .runs()
            .iter()
            .find(|(_, run)| {
                run.conversation_id == conversation
                    && run.harness == harness
                    && run.status() == RunStatus::Running
                    && run.executing.load(Ordering::Acquire)
            })
            .map(|(id, run)| (id.clone(), run.clone()))?;
        let (taken, answer) = tokio::sync::oneshot::channel();
        let steer = Steer {
            text: text.to_string(),
            taken,
        };
        run.steer.send(steer).await.ok()?;
        answer.await.unwrap_or(false).then_some(run_id)
    }

    /// Queue a turn; it runs in the background whatever happens to the
    /// caller, and its results are kept under its run id. The turn's place
    /// in its conversation is taken before this returns; it is accepted
    /// only once the journal (or the shared queue) has it.
    pub async fn submit(
        self: &Arc<Self>,
        ctx: AgentRunContext,
        harness: String,
    ) -> Result<Arc<RunEntry>, Refused> {
        // Refused before it takes a place: an unknown name would otherwise
        // queue, fail, and stay in the metrics as a label for good.
        self.bridge
            .adapters()
            .require(&harness)
            .map_err(Refused::UnknownHarness)?;
        match &self.backlog {
            Backlog::Local { scheduler, journal } => {
                self.submit_local(ctx, harness, scheduler, journal).await
            }
            Backlog::Shared(cluster) => self.submit_shared(ctx, harness, cluster).await,
        }
    }

    async fn submit_local(
        self: &Arc<Self>,
        ctx: AgentRunContext,
        harness: String,
        scheduler: &Arc<Scheduler>,
        journal: &Journal,
    ) -> Result<Arc<RunEntry>, Refused> {
        // Runs that ended are in the journal (read off the async workers);
        // runs in flight are in memory, checked below under the lock.
        let ended = {
            let service = self.clone();
            let run_id = ctx.run_id.clone();
            tokio::task::spawn_blocking(move || match &service.backlog {
                Backlog::Local { journal, .. } => journal.contains(&run_id),
                Backlog::Shared(_) => Ok(false),
            })
            .await
            .map_err(|e| Refused::Unavailable(format!("cannot read the run journal: {e}")))?
            .map_err(|e| Refused::Unavailable(e.to_string()))?
        };
        if ended {
            return Err(Refused::Duplicate);
        }
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        let (entry, ticket) = {
            // Under the runs lock, as shutdown sets it: a turn is either
            // refused here or in the map (and tracked) before shutdown looks.
            let mut runs = self.runs();
            if self.closing.load(Ordering::Acquire) {
                return Err(Refused::Unavailable(
                    "the bridge is shutting down; send the turn again when it is back".into(),
                ));
            }
            if runs.contains_key(&ctx.run_id) {
                return Err(Refused::Duplicate);
            }
            let ticket = scheduler.enqueue(&conversation).map_err(Refused::Busy)?;
            let entry = RunEntry::new(conversation.clone(), harness.clone());
            runs.insert(ctx.run_id.clone(), entry.clone());
            (entry, ticket)
        };
        // A run the journal cannot record (a full disk) is refused, not
        // run unrecorded: its id would be accepted again, and a crash
        // would leave no trace of it.
        if let Err(why) = journal.queued(&ctx.run_id, &conversation, &harness).await {
            self.runs().remove(&ctx.run_id);
            drop(ticket);
            return Err(Refused::Unavailable(format!(
                "{why}; the turn was not accepted"
            )));
        }
        let service = self.clone();
        let run = entry.clone();
        self.tasks.spawn(async move {
            let run_id = ctx.run_id.clone();
            // Its own task, so that a panic in a run is caught here and the
            // run still ends properly for its client and the journal.
            let turn = tokio::spawn(service.clone().execute(ctx, run.clone(), ticket));
            if let Err(e) = turn.await {
                service.abandon(&run_id, &run, &e.to_string());
            }
        });
        Ok(entry)
    }

    async fn submit_shared(
        self: &Arc<Self>,
        ctx: AgentRunContext,
        harness: String,
        cluster: &Arc<Cluster>,
    ) -> Result<Arc<RunEntry>, Refused> {
        if self.closing.load(Ordering::Acquire) {
            return Err(Refused::Unavailable(
                "this bridge instance is shutting down; send the turn to another one".into(),
            ));
        }
        if self.runs().contains_key(&ctx.run_id) {
            return Err(Refused::Duplicate);
        }
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        let context = serde_json::to_string(&ctx)
            .map_err(|e| Refused::Unavailable(format!("cannot keep the turn's context: {e}")))?;
        match cluster
            .enqueue(&ctx.run_id, &conversation, &harness, &context)
            .await
        {
            Ok(cluster::Enqueued::Accepted) => {}
            Ok(cluster::Enqueued::Duplicate) => return Err(Refused::Duplicate),
            Ok(cluster::Enqueued::Busy(full)) => return Err(Refused::Busy(full)),
            Err(why) => {
                return Err(Refused::Unavailable(format!(
                    "{why}; the turn was not accepted"
                )));
            }
        }
        let entry = self.entry(&ctx.run_id, &conversation, &harness);
        tokio::spawn(
            self.clone()
                .follow(cluster.clone(), ctx.run_id.clone(), entry.clone()),
        );
        Ok(entry)
    }

    /// Mirror a run of the shared queue into `entry` for the clients
    /// streaming it here, until it ends: its results as the instance that
    /// runs it writes them, its status, and a cancel asked here passed on.
    /// Once this instance runs it itself, the run feeds its entry directly.
    async fn follow(self: Arc<Self>, cluster: Arc<Cluster>, run_id: String, entry: Arc<RunEntry>) {
        let watch = cluster.watch(&run_id);
        let mut cancel_sent = false;
        loop {
            if entry.executing.load(Ordering::Acquire) {
                break;
            }
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if entry.cancel.is_cancelled() && !cancel_sent {
                cancel_sent = true;
                if let Err(e) = cluster.cancel(&run_id).await {
                    tracing::error!(run_id, "cannot pass the cancel on: {e}");
                }
            }
            let status = match cluster.status(&run_id).await {
                Ok(Some((status, ..))) => status,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(run_id, "cannot follow the run: {e}");
                    tokio::time::sleep(LOOK_AGAIN).await;
                    continue;
                }
            };
            match cluster.results_after(&run_id, entry.last_sequence()).await {
                Ok(results) => {
                    for result in results {
                        entry.push(result);
                    }
                }
                Err(e) => tracing::warn!(run_id, "cannot read the run's results: {e}"),
            }
            if entry.executing.load(Ordering::Acquire) {
                break;
            }
            match status {
                RunStatus::Completed | RunStatus::Failed => {
                    entry.set_status(status);
                    break;
                }
                RunStatus::Running if entry.status() == RunStatus::Queued => {
                    entry.set_status(RunStatus::Running);
                }
                _ => {}
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(LOOK_AGAIN) => {}
                () = entry.cancel.cancelled(), if !cancel_sent => {}
            }
        }
        cluster.forget(&run_id);
        if !entry.executing.load(Ordering::Acquire) {
            let mut runs = self.runs();
            if runs.get(&run_id).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
                runs.remove(&run_id);
            }
        }
    }

    /// Take turns from the shared queue while this instance has free
    /// slots, until shutdown.
    async fn claim_loop(self: Arc<Self>, cluster: Arc<Cluster>) {
        let slots = Arc::new(tokio::sync::Semaphore::new(
            self.config.max_concurrent_runs.max(1),
        ));
        'slots: loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            loop {
                if self.closing.load(Ordering::Acquire) {
                    return;
                }
                let work = cluster.work().notified();
                tokio::pin!(work);
                work.as_mut().enable();
                match cluster.claim().await {
                    Ok(Some(claim)) => {
                        let service = self.clone();
                        let cluster = cluster.clone();
                        self.tasks.spawn(async move {
                            service.execute_claimed(cluster, claim).await;
                            drop(permit);
                        });
                        continue 'slots;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!("cannot take a turn from the shared queue: {e}"),
                }
                tokio::select! {
                    () = &mut work => {}
                    () = tokio::time::sleep(LOOK_AGAIN) => {}
                }
            }
        }
    }

    /// What the cluster says: cancels for runs here, and the loss of this
    /// instance's lease (every harness stops; the store takes none of
    /// their writes anyway).
    async fn cluster_events(self: Arc<Self>, mut events: mpsc::UnboundedReceiver<ClusterEvent>) {
        while let Some(event) = events.recv().await {
            match event {
                ClusterEvent::Cancel(run_id) => {
                    if let Some(run) = self.run(&run_id)
                        && run.executing.load(Ordering::Acquire)
                    {
                        tracing::info!(run_id, "cancel asked on another instance");
                        run.cancel();
                    }
                }
                ClusterEvent::Fenced => {
                    let running: Vec<Arc<RunEntry>> = self
                        .runs()
                        .values()
                        .filter(|r| r.executing.load(Ordering::Acquire))
                        .cloned()
                        .collect();
                    for run in &running {
                        run.cancel();
                    }
                    // Once they have ended (their processes back among the
                    // kept ones), stop every kept process: the sessions
                    // they hold may have gone on elsewhere meanwhile.
                    let grace =
                        Duration::from_secs(self.config.kill_grace_seconds) + LOOK_AGAIN * 10;
                    let deadline = tokio::time::Instant::now() + grace;
                    while running.iter().any(|r| !r.ended())
                        && tokio::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    if let Some(live) = self.bridge.live_sessions() {
                        live.shutdown().await;
                    }
                }
            }
        }
    }

    /// One run of the shared queue that this instance claimed, from its
    /// claim to its end in the database; a panic in it still ends it.
    async fn execute_claimed(self: Arc<Self>, cluster: Arc<Cluster>, claim: Claim) {
        let run = self.entry(&claim.run_id, &claim.conversation_id, &claim.harness);
        run.executing.store(true, Ordering::Release);
        let turn = tokio::spawn(self.clone().run_claimed(
            cluster.clone(),
            claim.clone(),
            run.clone(),
        ));
        if let Err(e) = turn.await {
            tracing::error!(run_id = %claim.run_id, "the run's task failed: {e}");
            // Unless it was ended (or handed to its record) before the
            // task failed.
            if !run.ended() && run.executing.load(Ordering::Acquire) {
                let sink = cluster.sink(&claim, CancellationToken::new(), run.clone());
                let last = run.sent.load(Ordering::Acquire).max(run.last_sequence());
                let failed = internal_failure(&claim.run_id, last + 1);
                self.fail_claimed(
                    &cluster,
                    &claim,
                    &run,
                    &sink,
                    failed,
                    FailureCode::InternalError,
                )
                .await;
            }
            if run.counted.swap(false, Ordering::AcqRel) {
                crate::metrics::global().run_ended(
                    &run.harness,
                    Some(FailureCode::InternalError.as_str()),
                    0.0,
                );
            }
        }
    }

    /// End a claimed run with `failed` (failure `code`), a terminal result
    /// the bridge made itself: the turn never ran, or its task failed.
    async fn fail_claimed(
        self: &Arc<Self>,
        cluster: &Arc<Cluster>,
        claim: &Claim,
        run: &Arc<RunEntry>,
        sink: &cluster::ResultSink,
        failed: AgentRunResult,
        code: FailureCode,
    ) {
        if let Ok(body) = serde_json::to_string(&failed) {
            sink.send(failed, body);
        }
        self.finish_claimed(cluster, claim, run, sink, RunStatus::Failed, Some(code))
            .await;
    }

    /// End a claimed run in the shared record, and its entry here with
    /// what the record says. When every result was written and the end
    /// recorded, that is what this instance made; when not (the run was
    /// lost: the instance was declared dead, its writes refused, and
    /// another instance ended the run `interrupted`), the entry stops
    /// being fed from here and follows the record like any other
    /// instance's mirror: its clients get the record's own terminal
    /// result, never the one this instance made and could not write.
    async fn finish_claimed(
        self: &Arc<Self>,
        cluster: &Arc<Cluster>,
        claim: &Claim,
        run: &Arc<RunEntry>,
        sink: &cluster::ResultSink,
        status: RunStatus,
        code: Option<FailureCode>,
    ) {
        // Every result is in before the end is: a follower that sees the
        // end has them all.
        let written = sink.flush().await;
        let recorded = cluster.end(claim, status, code.as_ref()).await;
        match &recorded {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                run_id = %claim.run_id,
                "the run ended after this instance lost its lease; its end was not recorded \
                 (another instance marked it interrupted); its clients are told what the \
                 record says"
            ),
            Err(e) => tracing::error!(run_id = %claim.run_id, "cannot record the run's end: {e}"),
        }
        if written && matches!(recorded, Ok(true)) {
            run.set_status(status);
            self.runs().remove(&claim.run_id);
            return;
        }
        run.executing.store(false, Ordering::Release);
        tokio::spawn(
            self.clone()
                .follow(cluster.clone(), claim.run_id.clone(), run.clone()),
        );
    }

    async fn run_claimed(self: Arc<Self>, cluster: Arc<Cluster>, claim: Claim, run: Arc<RunEntry>) {
        let sink = cluster.sink(&claim, run.cancel.clone(), run.clone());
        let ctx: AgentRunContext = match serde_json::from_str(&claim.context) {
            Ok(ctx) => ctx,
            Err(e) => {
                // Checked when it was accepted; a store that changed it is
                // the store's fault, said so.
                let mut failed = AgentRunResult::new(
                    &claim.run_id,
                    ResultPayload::RunFailed(RunFailed {
                        code: FailureCode::InvalidArgument,
                        error: format!(
                            "the turn's context, as the store kept it, does not read: {e}"
                        ),
                        retryable: false,
                    }),
                );
                failed.sequence = Some(1);
                self.fail_claimed(
                    &cluster,
                    &claim,
                    &run,
                    &sink,
                    failed,
                    FailureCode::InvalidArgument,
                )
                .await;
                return;
            }
        };
        if claim.cancel_requested {
            run.cancel();
        }
        let host: Arc<dyn crate::host::HostApi> = Arc::new(cluster.host_for(&claim));
        let spawned = SpawnHook(Arc::new({
            let cluster = cluster.clone();
            let (run_id, fence) = (claim.run_id.clone(), claim.fence);
            move |spawned: &Spawned<'_>| {
                let cluster = cluster.clone();
                let run_id = run_id.clone();
                let pgid = spawned.pgid;
                let workspace = spawned.workspace.to_string_lossy().into_owned();
                let marker = spawned.marker.to_string();
                tokio::spawn(async move {
                    if let Err(e) = cluster
                        .spawned(&run_id, fence, pgid, &workspace, &marker)
                        .await
                    {
                        tracing::warn!(run_id, "cannot note the harness's process: {e}");
                    }
                });
            }
        }));
        let options = RunOptions {
            on_spawn: Some(spawned),
            steer: Some(run.inbox.clone()),
            host: Some(host),
            ..RunOptions::default()
        };
        let (status, code) = self
            .run_turn(&ctx, &run, &options, &Record::Shared(&sink))
            .await;
        self.finish_claimed(&cluster, &claim, &run, &sink, status, code)
            .await;
    }

    /// One run, from its place in the queue to its record in the journal.
    async fn execute(self: Arc<Self>, ctx: AgentRunContext, run: Arc<RunEntry>, ticket: Ticket) {
        let Backlog::Local { journal, .. } = &self.backlog else {
            return;
        };
        run.executing.store(true, Ordering::Release);
        let turn = tokio::select! {
            turn = ticket.start() => Some(turn),
            () = run.cancel.cancelled() => None,
        };
        // A run cancelled while queued goes through the bridge too, which
        // sees the cancel before doing anything and sends the run's one
        // `run.failed` (`cancelled`): no workspace, no records, no harness.
        if turn.is_some() {
            journal.started(&ctx.run_id);
        }
        let spawned = SpawnHook(Arc::new({
            let service = self.clone();
            let run_id = ctx.run_id.clone();
            move |spawned: &Spawned<'_>| {
                if let Backlog::Local { journal, .. } = &service.backlog {
                    journal.spawned(&run_id, spawned);
                }
            }
        }));
        let options = RunOptions {
            on_spawn: Some(spawned),
            steer: Some(run.inbox.clone()),
            ..RunOptions::default()
        };
        let (status, code) = self
            .run_turn(&ctx, &run, &options, &Record::Journal(journal))
            .await;
        drop(turn);
        // Journal first, then out of memory: a lookup always finds it. Its
        // results are journaled already, one by one as they came.
        let journaled = journal.ended(&ctx.run_id, status, code).await;
        run.set_status(status);
        match journaled {
            Ok(()) => {
                self.runs().remove(&ctx.run_id);
            }
            // Kept in memory instead, so lookups tell the truth until the
            // service restarts (the journal then calls it interrupted).
            Err(e) => tracing::error!(run_id = %ctx.run_id, "{e}; the run stays in memory"),
        }
    }

    /// The turn itself, however it was scheduled: the bridge runs it, its
    /// results kept (memory, record) as they come; its status and failure
    /// code.
    async fn run_turn(
        &self,
        ctx: &AgentRunContext,
        run: &Arc<RunEntry>,
        options: &RunOptions,
        record: &Record<'_>,
    ) -> (RunStatus, Option<FailureCode>) {
        let metrics = crate::metrics::global();
        metrics.run_started();
        run.counted.store(true, Ordering::Release);
        let started = std::time::Instant::now();
        let (tx, mut rx) = mpsc::channel::<AgentRunResult>(256);
        run.set_status(RunStatus::Running);
        let bridge_run = self
            .bridge
            .run(ctx, &run.harness, options, tx, run.cancel.clone());
        let keep = async {
            while let Some(result) = rx.recv().await {
                self.keep(&ctx.run_id, run, result, record);
            }
        };
        let (summary, ()) = tokio::join!(bridge_run, keep);
        let status = match summary.outcome {
            crate::protocol::ResultType::RunCompleted => RunStatus::Completed,
            _ => RunStatus::Failed,
        };
        if run.counted.swap(false, Ordering::AcqRel) {
            let over = run
                .over_cap
                .load(Ordering::Acquire)
                .then_some(FailureCode::OutputTooLarge.as_str());
            metrics.run_ended(
                &run.harness,
                over.or(summary.failure_code.as_ref().map(FailureCode::as_str)),
                started.elapsed().as_secs_f64(),
            );
        }
        let code = if run.over_cap.load(Ordering::Acquire) {
            Some(FailureCode::OutputTooLarge)
        } else {
            summary.failure_code.clone()
        };
        let status = if code.is_some() {
            RunStatus::Failed
        } else {
            status
        };
        (status, code)
    }

    /// A run's task died (a bug): end the run for its client, the journal
    /// and the metrics, and say so in the log.
    fn abandon(&self, run_id: &str, run: &RunEntry, why: &str) {
        tracing::error!(run_id, "the run's task failed: {why}");
        let Backlog::Local { journal, .. } = &self.backlog else {
            return;
        };
        if !run.ended() {
            let failed = internal_failure(run_id, run.results_from(0).len() as u64 + 1);
            if let Ok(body) = serde_json::to_string(&failed) {
                journal.result(run_id, failed.sequence.unwrap_or_default(), body);
            }
            run.push(failed);
            journal.ended_later(run_id, RunStatus::Failed, Some(FailureCode::InternalError));
            run.set_status(RunStatus::Failed);
        }
        if run.counted.swap(false, Ordering::AcqRel) {
            crate::metrics::global().run_ended(
                &run.harness,
                Some(FailureCode::InternalError.as_str()),
                0.0,
            );
        }
        self.runs().remove(run_id);
    }

    /// Keep one result of a run: in memory for its streams, in its record
    /// for good. Past `max_run_output_bytes` the run is stopped and nothing
    /// more is kept but its end, which then says why
    /// (`output_too_large`): memory stays bounded whatever a harness
    /// prints, and the run's status does not pretend it completed.
    fn keep(&self, run_id: &str, run: &RunEntry, mut result: AgentRunResult, record: &Record<'_>) {
        if run.over_cap.load(Ordering::Acquire) {
            if !result.kind.is_terminal() {
                return;
            }
            result = output_too_large(result, self.config.max_run_output_bytes);
        }
        let body = serde_json::to_string(&result).unwrap_or_default();
        let kept = run.kept_bytes.fetch_add(body.len(), Ordering::AcqRel) + body.len();
        if kept > self.config.max_run_output_bytes
            && !result.kind.is_terminal()
            && !run.over_cap.swap(true, Ordering::AcqRel)
        {
            tracing::warn!(
                run_id,
                cap = self.config.max_run_output_bytes,
                "the run's results passed max_run_output_bytes; stopping it"
            );
            run.cancel();
            return;
        }
        record.result(run_id, run, result, body);
    }

    /// Turns waiting across conversations (on a shared store: across every
    /// instance, as of the last heartbeat).
    pub fn queued(&self) -> usize {
        match &self.backlog {
            Backlog::Local { scheduler, .. } => scheduler.queued(),
            Backlog::Shared(cluster) => cluster.waiting(),
        }
    }

    /// Forget finished runs older than the retention.
    async fn prune(&self) {
        let retention = Duration::from_secs(self.config.retention_hours.saturating_mul(3600));
        let pruned = match &self.backlog {
            Backlog::Local { journal, .. } => journal
                .prune(retention)
                .await
                .map(|n| n as u64)
                .map_err(|e| e.to_string()),
            Backlog::Shared(cluster) => cluster.prune(retention).await.map_err(|e| e.to_string()),
        };
        match pruned {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "pruned finished runs past retention"),
            Err(e) => tracing::error!("cannot prune the run journal: {e}"),
        }
    }

    /// Stop: new runs are refused, queued ones cancelled at once (they
    /// have not started; on a shared store they stay queued for the other
    /// instances), running turns get `shutdown_grace_seconds` to finish
    /// (or until `hurry` fires: a second signal), then every run left is
    /// cancelled (its harness group killed).
    pub async fn shutdown(&self, hurry: impl std::future::Future<Output = ()>) {
        {
            let runs = self.runs();
            self.closing.store(true, Ordering::Release);
            if let Backlog::Local { .. } = &self.backlog {
                for run in runs.values() {
                    if run.status() == RunStatus::Queued {
                        run.cancel();
                    }
                }
            }
        }
        self.tasks.close();
        let grace = Duration::from_secs(self.config.shutdown_grace_seconds);
        let finished = tokio::select! {
            waited = tokio::time::timeout(grace, self.tasks.wait()) => waited.is_ok(),
            () = hurry => false,
        };
        if !finished {
            tracing::warn!("turns still running; cancelling them");
            for run in self.runs().values() {
                if run.executing.load(Ordering::Acquire) {
                    run.cancel();
                }
            }
            self.tasks.wait().await;
        }
        if let Some(live) = self.bridge.live_sessions() {
            live.shutdown().await;
        }
        if let Backlog::Shared(cluster) = &self.backlog {
            cluster.leave().await;
        }
    }
}

/// The terminal result of a run whose task failed.
fn internal_failure(run_id: &str, sequence: u64) -> AgentRunResult {
    let mut failed = AgentRunResult::new(
        run_id,
        ResultPayload::RunFailed(RunFailed {
            code: FailureCode::InternalError,
            error: "the bridge failed while running this turn; see its log".into(),
            retryable: true,
        }),
    );
    failed.sequence = Some(sequence);
    failed.timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok());
    failed
}

/// A run's terminal result, once its output passed the cap: the run
/// failed, and says why, whatever the harness's own end was.
fn output_too_large(terminal: AgentRunResult, cap: usize) -> AgentRunResult {
    let mut failed = AgentRunResult::new(
        &terminal.run_id,
        ResultPayload::RunFailed(RunFailed {
            code: FailureCode::OutputTooLarge,
            error: format!(
                "the run's results passed {} MiB (max_run_output_bytes); the harness was stopped \
                 and the rest of its output was not kept",
                cap / (1024 * 1024)
            ),
            retryable: false,
        }),
    );
    failed.sequence = terminal.sequence;
    failed.timestamp = terminal.timestamp;
    failed
}

/// How long result streams may stay open after every run has ended.
const STREAM_DRAIN: Duration = Duration::from_secs(5);

/// Serve until `stop` is cancelled, then shut down gracefully; `hurry`
/// (a second signal) cuts the grace short.
///
/// The listener stays open while running turns wind down, so a client
/// that calls meanwhile hears why (`503` for a new run) instead of finding
/// the port closed; it closes once every run has ended and is journaled.
pub async fn serve(
    service: Arc<Service>,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
    hurry: CancellationToken,
) -> std::io::Result<()> {
    let app = http::router(service.clone());
    let limits = crate::listen::Limits {
        max_connections: service.config.max_connections,
        header_timeout: Duration::from_secs(service.config.header_timeout_seconds.max(1)),
        // Every run has ended and is journaled once the listener stops; a
        // client that stopped reading could still hold its stream open for
        // good: it gets a moment to take the rest.
        drain: STREAM_DRAIN,
    };
    let drained = CancellationToken::new();
    // On a shared store: the claim loop, the heartbeat (kept up through
    // the shutdown grace: the running turns still hold their lease) and
    // the cluster's events.
    if let Backlog::Shared(cluster) = &service.backlog {
        tokio::spawn(service.clone().claim_loop(cluster.clone()));
        tokio::spawn(cluster.clone().keep_alive(drained.clone()));
        let events = service
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(events) = events {
            tokio::spawn(service.clone().cluster_events(events));
        }
    }
    let server = crate::listen::serve(listener, app, limits, drained.clone());
    let drain = async {
        stop.cancelled().await;
        service.shutdown(hurry.cancelled()).await;
        drained.cancel();
    };
    let prune = async {
        let mut hourly = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tokio::select! {
                _ = hourly.tick() => service.prune().await,
                () = stop.cancelled() => return,
            }
        }
    };
    tokio::join!(server, drain, prune);
    Ok(())
}
