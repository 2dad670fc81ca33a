//! `harness-bridge serve`: the bridge as a long-running service. One
//! process holds the embedded host, the MCP server and an HTTP API; turns
//! of a conversation run one after another in arrival order, different
//! conversations in parallel up to a limit; results are kept per run so a
//! client that went away can fetch them; shutdown lets running turns
//! finish within a grace, then cancels them.

mod config;
mod http;
mod journal;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use crate::run::{QueueFull, Scheduler, Ticket};
pub use config::ServeConfig;
pub use journal::{INTERRUPTED, Interrupted, Journal, JournalRun};

use crate::protocol::{AgentRunContext, AgentRunResult, ResultPayload, RunFailed};
use crate::run::{Bridge, RunOptions, SpawnHook, Spawned, Steer, SteerInbox};

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

    fn push(&self, result: AgentRunResult) {
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        results.push(result);
        let n = results.len();
        drop(results);
        self.count.send_replace(n);
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

/// The service: the bridge, the scheduler, the runs in flight and the
/// journal of every run.
pub struct Service {
    bridge: Arc<Bridge>,
    scheduler: Arc<Scheduler>,
    runs: Mutex<HashMap<String, Arc<RunEntry>>>,
    journal: Journal,
    tasks: tokio_util::task::TaskTracker,
    /// Set once shutdown begins: new runs are refused.
    closing: AtomicBool,
    config: ServeConfig,
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
    UnknownHarness(String),
}

impl Service {
    /// A service around a started bridge and an opened journal.
    pub fn new(bridge: Bridge, journal: Journal, config: ServeConfig) -> Arc<Service> {
        Arc::new(Service {
            scheduler: Scheduler::new(
                config.max_concurrent_runs,
                config.max_queue_per_conversation,
                config.max_queued_total,
            ),
            bridge: Arc::new(bridge),
            runs: Mutex::new(HashMap::new()),
            journal,
            tasks: tokio_util::task::TaskTracker::new(),
            closing: AtomicBool::new(false),
            config,
        })
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RunEntry>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A run in flight, by id.
    pub fn run(&self, run_id: &str) -> Option<Arc<RunEntry>> {
        self.runs().get(run_id).cloned()
    }

    /// A run that has ended (or was interrupted), by id, from the journal
    /// (read on the blocking pool).
    pub async fn past_run(self: &Arc<Self>, run_id: &str) -> Option<JournalRun> {
        let service = self.clone();
        let run_id = run_id.to_string();
        tokio::task::spawn_blocking(move || service.journal.get(&run_id))
            .await
            .ok()
            .flatten()
    }

    /// Hand `text` to the running turn of `conversation` when its harness
    /// takes input mid-turn; the run it went to, else `None` (the caller
    /// queues it as the next turn: nothing is dropped).
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
    /// only once the journal has it.
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
        // Runs that ended are in the journal (read off the async workers);
        // runs in flight are in memory, checked below under the lock.
        let ended = {
            let service = self.clone();
            let run_id = ctx.run_id.clone();
            tokio::task::spawn_blocking(move || service.journal.contains(&run_id))
                .await
                .map_err(|e| Refused::Unavailable(format!("cannot read the run journal: {e}")))?
                .map_err(Refused::Unavailable)?
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
            let ticket = self
                .scheduler
                .enqueue(&conversation)
                .map_err(Refused::Busy)?;
            let entry = RunEntry::new(conversation.clone(), harness.clone());
            runs.insert(ctx.run_id.clone(), entry.clone());
            (entry, ticket)
        };
        // A run the journal cannot record (a full disk) is refused, not
        // run unrecorded: its id would be accepted again, and a crash
        // would leave no trace of it.
        if let Err(why) = self
            .journal
            .queued(&ctx.run_id, &conversation, &harness)
            .await
        {
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

    /// One run, from its place in the queue to its record in the journal.
    async fn execute(self: Arc<Self>, ctx: AgentRunContext, run: Arc<RunEntry>, ticket: Ticket) {
        let turn = tokio::select! {
            turn = ticket.start() => Some(turn),
            () = run.cancel.cancelled() => None,
        };
        // A run cancelled while queued goes through the bridge too, which
        // sees the cancel before doing anything and sends the run's one
        // `run.failed` (`cancelled`): no workspace, no records, no harness.
        if turn.is_some() {
            self.journal.started(&ctx.run_id);
        }
        let metrics = crate::metrics::global();
        metrics.run_started();
        run.counted.store(true, Ordering::Release);
        let started = std::time::Instant::now();
        let (tx, mut rx) = mpsc::channel::<AgentRunResult>(256);
        let forward = {
            let run = run.clone();
            let service = self.clone();
            let run_id = ctx.run_id.clone();
            tokio::spawn(async move {
                while let Some(result) = rx.recv().await {
                    service.keep(&run_id, &run, result);
                }
            })
        };
        run.set_status(RunStatus::Running);
        let spawned = SpawnHook(Arc::new({
            let service = self.clone();
            let run_id = ctx.run_id.clone();
            move |spawned: &Spawned<'_>| service.journal.spawned(&run_id, spawned)
        }));
        let summary = self
            .bridge
            .run(
                &ctx,
                &run.harness,
                &RunOptions {
                    on_spawn: Some(spawned),
                    steer: Some(run.inbox.clone()),
                    ..RunOptions::default()
                },
                tx,
                run.cancel.clone(),
            )
            .await;
        let _ = forward.await;
        drop(turn);
        let status = match summary.outcome {
            crate::protocol::ResultType::RunCompleted => RunStatus::Completed,
            _ => RunStatus::Failed,
        };
        if run.counted.swap(false, Ordering::AcqRel) {
            let over = run
                .over_cap
                .load(Ordering::Acquire)
                .then_some(OUTPUT_TOO_LARGE);
            metrics.run_ended(
                &run.harness,
                over.or(summary.failure_code.as_deref()),
                started.elapsed().as_secs_f64(),
            );
        }
        let code = if run.over_cap.load(Ordering::Acquire) {
            Some(OUTPUT_TOO_LARGE.to_string())
        } else {
            summary.failure_code.clone()
        };
        let status = if code.is_some() {
            RunStatus::Failed
        } else {
            status
        };
        // Journal first, then out of memory: a lookup always finds it. Its
        // results are journaled already, one by one as they came.
        let journaled = self
            .journal
            .ended(&ctx.run_id, status, code.as_deref())
            .await;
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

    /// A run's task died (a bug): end the run for its client, the journal
    /// and the metrics, and say so in the log.
    fn abandon(&self, run_id: &str, run: &RunEntry, why: &str) {
        tracing::error!(run_id, "the run's task failed: {why}");
        if !run.ended() {
            let mut failed = AgentRunResult::new(
                run_id,
                ResultPayload::RunFailed(RunFailed {
                    code: "internal_error".into(),
                    error: "the bridge failed while running this turn; see its log".into(),
                    retryable: true,
                }),
            );
            failed.sequence = Some(run.results_from(0).len() as u64 + 1);
            failed.timestamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| i64::try_from(d.as_secs()).ok());
            if let Ok(body) = serde_json::to_string(&failed) {
                self.journal
                    .result(run_id, failed.sequence.unwrap_or_default(), body);
            }
            run.push(failed);
            self.journal
                .ended_later(run_id, RunStatus::Failed, Some("internal_error"));
            run.set_status(RunStatus::Failed);
        }
        if run.counted.swap(false, Ordering::AcqRel) {
            crate::metrics::global().run_ended(&run.harness, Some("internal_error"), 0.0);
        }
        self.runs().remove(run_id);
    }

    /// Keep one result of a run: in memory for its streams, in the journal
    /// for good. Past `max_run_output_bytes` the run is stopped and nothing
    /// more is kept but its end, which then says why
    /// ([`OUTPUT_TOO_LARGE`]): memory stays bounded whatever a harness
    /// prints, and the run's status does not pretend it completed.
    fn keep(&self, run_id: &str, run: &RunEntry, mut result: AgentRunResult) {
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
        self.journal
            .result(run_id, result.sequence.unwrap_or_default(), body);
        run.push(result);
    }

    /// Turns waiting across conversations.
    pub fn queued(&self) -> usize {
        self.scheduler.queued()
    }

    /// Forget finished runs older than the retention.
    async fn prune(&self) {
        let retention = Duration::from_secs(self.config.retention_hours.saturating_mul(3600));
        match self.journal.prune(retention).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "pruned finished runs past retention"),
            Err(e) => tracing::error!("cannot prune the run journal: {e}"),
        }
    }

    /// Stop: new runs are refused, queued ones cancelled at once (they
    /// have not started), running turns get `shutdown_grace_seconds` to
    /// finish (or until `hurry` fires: a second signal), then every run
    /// left is cancelled (its harness group killed).
    pub async fn shutdown(&self, hurry: impl std::future::Future<Output = ()>) {
        {
            let runs = self.runs();
            self.closing.store(true, Ordering::Release);
            for run in runs.values() {
                if run.status() == RunStatus::Queued {
                    run.cancel();
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
                run.cancel();
            }
            self.tasks.wait().await;
        }
        if let Some(live) = self.bridge.live_sessions() {
            live.shutdown().await;
        }
    }
}

/// The failure code of a run stopped because its results passed the
/// service's `max_run_output_bytes`.
pub const OUTPUT_TOO_LARGE: &str = "output_too_large";

/// A run's terminal result, once its output passed the cap: the run
/// failed, and says why, whatever the harness's own end was.
fn output_too_large(terminal: AgentRunResult, cap: usize) -> AgentRunResult {
    let mut failed = AgentRunResult::new(
        &terminal.run_id,
        ResultPayload::RunFailed(RunFailed {
            code: OUTPUT_TOO_LARGE.into(),
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
