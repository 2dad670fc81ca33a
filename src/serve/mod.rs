//! `harness-bridge serve`: the bridge as a long-running service. One
//! process holds the embedded host, the MCP server and an HTTP API; turns
//! of a conversation run one after another in arrival order, different
//! conversations in parallel up to a limit; results are kept per run so a
//! client that went away can fetch them; shutdown lets running turns
//! finish within a grace, then cancels them.

mod backlog;
pub mod cluster;
mod config;
mod console;
mod http;
mod journal;
mod leftovers;
mod listing;
mod local;
mod programs;
mod sessions;
mod shared;
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
pub use journal::{Interrupted, Journal, JournalError, JournalRun, own_store, served_by};
pub use leftovers::end_leftovers;
pub use programs::{ProgramCheck, check_programs};
pub use sessions::{LINK_LIFETIME, link_url};

use crate::protocol::FailureCode;
use crate::protocol::{AgentRunContext, AgentRunResult, ResultPayload, RunFailed};
use crate::run::{Bridge, Deliver, Dispatch, RunOptions, Steer, SteerInbox};
use backlog::Backlog;
use cluster::{Cluster, ClusterError, ClusterEvent};

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
    /// When this instance took it (epoch milliseconds).
    pub accepted_ms: i64,
    /// When its turn began (epoch milliseconds; 0: not yet).
    started_ms: std::sync::atomic::AtomicI64,
    /// Who asked, and for which model, once this instance runs it.
    who: std::sync::OnceLock<RunWho>,
}

/// Who asked for a run in flight, and the model the binding named: what
/// the run view shows before the ledger has its row.
#[derive(Debug, Clone, Default)]
pub struct RunWho {
    /// The actor, when the request named one.
    pub actor: Option<String>,
    /// The model, when the binding named one.
    pub model: Option<String>,
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
            accepted_ms: crate::host::now_ms(),
            started_ms: std::sync::atomic::AtomicI64::new(0),
            who: std::sync::OnceLock::new(),
        })
    }

    /// When its turn began (epoch milliseconds), once it has.
    pub fn started_ms(&self) -> Option<i64> {
        Some(self.started_ms.load(Ordering::Acquire)).filter(|ms| *ms > 0)
    }

    /// Who asked, once this instance runs it.
    pub fn who(&self) -> Option<&RunWho> {
        self.who.get()
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

/// Where one run's record goes as it runs: the service's own journal, or
/// the shared store's result sink.
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

    /// The run got its turn: the journal notes when it started (the
    /// shared store's claim did so already).
    fn begins(&self, run_id: &str) {
        if let Record::Journal(journal) = self {
            journal.started(run_id);
        }
    }
}

/// One run's results as the service keeps them, handed over by the run's
/// [`Dispatch`].
struct Keep<'a> {
    service: &'a Service,
    run: &'a Arc<RunEntry>,
    run_id: String,
    record: Record<'a>,
    started: std::time::Instant,
}

impl Deliver for Keep<'_> {
    fn begins(&mut self, got_turn: bool) {
        // A run cancelled while it waited still runs through the bridge,
        // which ends it at once: counted, but never started in the record.
        if got_turn {
            self.record.begins(&self.run_id);
        }
        crate::metrics::global().run_started();
        self.run.counted.store(true, Ordering::Release);
        self.started = std::time::Instant::now();
        self.run
            .started_ms
            .store(crate::host::now_ms(), Ordering::Release);
        self.run.set_status(RunStatus::Running);
    }

    async fn deliver(&mut self, result: AgentRunResult) -> bool {
        self.service
            .keep(&self.run_id, self.run, result, &self.record);
        true
    }
}

/// The service: the bridge, the backlog of turns, the runs in flight and
/// their record.
pub struct Service {
    bridge: Arc<Bridge>,
    backlog: Box<dyn Backlog>,
    runs: Mutex<HashMap<String, Arc<RunEntry>>>,
    tasks: tokio_util::task::TaskTracker,
    /// Set once shutdown begins: new runs are refused.
    closing: AtomicBool,
    config: ServeConfig,
    /// The console's one-time links and the tabs' sessions they became.
    sessions: sessions::ConsoleSessions,
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
        let backlog = local::Local {
            scheduler: Scheduler::new(
                config.max_concurrent_runs,
                config.max_queue_per_conversation,
                config.max_queued_total,
            ),
            journal: Arc::new(journal),
        };
        Service::with(bridge, Box::new(backlog), config)
    }

    /// A service that is one instance of several on a shared store; its
    /// claim loop and the cluster's heartbeat start with [`serve`].
    pub fn shared(
        bridge: Bridge,
        cluster: Arc<Cluster>,
        events: mpsc::UnboundedReceiver<ClusterEvent>,
        config: ServeConfig,
    ) -> Arc<Service> {
        let backlog = shared::Shared {
            cluster,
            events: Mutex::new(Some(events)),
        };
        Service::with(bridge, Box::new(backlog), config)
    }

    fn with(bridge: Bridge, backlog: Box<dyn Backlog>, config: ServeConfig) -> Arc<Service> {
        Arc::new(Service {
            bridge: Arc::new(bridge),
            backlog,
            runs: Mutex::new(HashMap::new()),
            tasks: tokio_util::task::TaskTracker::new(),
            closing: AtomicBool::new(false),
            config,
            sessions: sessions::ConsoleSessions::default(),
        })
    }

    /// A one-time link's code for the console (`/#link=CODE`), when the
    /// API takes tokens: opened once within [`sessions::LINK_LIFETIME`],
    /// it becomes a session of the tab that opened it.
    pub fn console_link(&self) -> Option<Result<String, tokens::TokenError>> {
        self.takes_tokens().then(|| self.sessions.link())
    }

    /// Whether the API asks for a token (not `no_auth`).
    pub fn takes_tokens(&self) -> bool {
        !self.config.api_tokens.is_empty()
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
        self.backlog.past_run(run_id).await
    }

    /// A run to stream from here: in memory, or (on a shared store) one
    /// that another instance runs or will run, followed from the database.
    pub async fn watch(self: &Arc<Self>, run_id: &str) -> Option<Arc<RunEntry>> {
        if let Some(run) = self.run(run_id) {
            return Some(run);
        }
        self.backlog.watch(self, run_id).await
    }

    /// Cancel a run by id, wherever it runs; an error means the shared
    /// store could not be asked (a cancel on one machine always goes
    /// through).
    pub async fn cancel(self: &Arc<Self>, run_id: &str) -> Result<Cancelled, ClusterError> {
        let here = self.run(run_id);
        if let Some(run) = &here
            && run.executing.load(Ordering::Acquire)
        {
            run.cancel();
            return Ok(Cancelled::Asked(run.status()));
        }
        self.backlog.cancel(run_id, here).await
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

    /// Answer the command `ctx`'s message gives (`/stop`, `/status`, …),
    /// before anything queues; `None`: the message is a turn's.
    pub async fn command(
        self: &Arc<Self>,
        ctx: &AgentRunContext,
        harness: &str,
    ) -> Option<crate::run::Answer> {
        let fixed: Vec<String> = self.config.fixed_config.0.keys().cloned().collect();
        let asking = crate::run::Asking {
            ctx,
            harness,
            turns: &ServiceTurns(self),
            fixed: &fixed,
        };
        self.bridge.answer_command(&asking).await
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
        self.backlog.submit(self, ctx, harness).await
    }

    /// The turn itself, however it was scheduled: it waits for its place
    /// (`ticket`, when the backlog gave one), the bridge runs it, its
    /// results kept (memory, record) as they come; its status and failure
    /// code.
    async fn run_turn(
        &self,
        ctx: AgentRunContext,
        run: &Arc<RunEntry>,
        options: RunOptions,
        ticket: Option<Ticket>,
        record: Record<'_>,
    ) -> (RunStatus, Option<FailureCode>) {
        let _ = run.who.set(RunWho {
            actor: ctx.actor.as_ref().and_then(|a| a.actor_id.clone()),
            model: ctx
                .config
                .get("model")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
        });
        let mut keep = Keep {
            service: self,
            run,
            run_id: ctx.run_id.clone(),
            record,
            started: std::time::Instant::now(),
        };
        let dispatch = Dispatch {
            bridge: self.bridge.clone(),
            ctx,
            harness: run.harness.clone(),
            options,
            cancel: run.cancel.clone(),
        };
        let summary = dispatch.run(ticket, &mut keep).await.summary;
        let over_cap = run.over_cap.load(Ordering::Acquire);
        if run.counted.swap(false, Ordering::AcqRel) {
            let over = over_cap.then_some(FailureCode::OutputTooLarge.as_str());
            crate::metrics::global().run_ended(
                &run.harness,
                over.or(summary.failure_code.as_ref().map(FailureCode::as_str)),
                keep.started.elapsed().as_secs_f64(),
            );
        }
        let code = if over_cap {
            Some(FailureCode::OutputTooLarge)
        } else {
            summary.failure_code
        };
        let status = match summary.outcome {
            _ if code.is_some() => RunStatus::Failed,
            crate::protocol::ResultType::RunCompleted => RunStatus::Completed,
            _ => RunStatus::Failed,
        };
        (status, code)
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
            // The run's failure, logged as every other failure is.
            let why = result.data.get("error").and_then(serde_json::Value::as_str);
            tracing::warn!(
                run_id,
                code = %FailureCode::OutputTooLarge,
                "run failed: {}",
                why.unwrap_or_default()
            );
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
        self.backlog.queued()
    }

    /// Forget finished runs older than the retention, and put away the
    /// worktrees of projects' conversations that went without a turn for
    /// theirs.
    async fn prune(&self) {
        let retention = Duration::from_secs(self.config.retention_hours.saturating_mul(3600));
        match self.backlog.prune(retention).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "pruned finished runs past retention"),
            Err(e) => tracing::error!("cannot prune the run journal: {e}"),
        }
        let put_away = self.bridge.put_away_idle_worktrees().await;
        if put_away > 0 {
            tracing::info!(
                worktrees = put_away,
                "put away worktrees past their retention"
            );
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
            // Running or queued here; on a shared store, `in_flight`
            // counts those other instances run too.
            let here = runs
                .values()
                .filter(|run| run.executing.load(Ordering::Acquire))
                .count();
            tracing::info!(
                runs_here = here,
                in_flight = runs.len(),
                grace_seconds = self.config.shutdown_grace_seconds,
                "shutting down"
            );
            self.closing.store(true, Ordering::Release);
            self.backlog.closing(&runs);
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
        self.backlog.leave().await;
    }
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
    let limits = crate::http_server::Limits {
        max_connections: service.config.max_connections,
        header_timeout: Duration::from_secs(service.config.header_timeout_seconds.max(1)),
        // Every run has ended and is journaled once the listener stops; a
        // client that stopped reading could still hold its stream open for
        // good: it gets a moment to take the rest.
        drain: STREAM_DRAIN,
    };
    let drained = CancellationToken::new();
    // On a shared store: the claim loop, the heartbeat and the cluster's
    // events.
    service.backlog.start(&service, drained.clone());
    let server = crate::http_server::serve(listener, app, limits, drained.clone());
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
    tracing::info!("stopped: every turn has ended and is journaled");
    Ok(())
}

/// An API answer that is not a run's stream: the status and a sentence,
/// as `{"error": ...}`.
/// A request refused before it reached the API (a wrong token, another
/// site's page, not JSON): answered, and logged at most once a second with
/// a count, since anyone who can reach the port can send them in a loop.
pub(super) fn refuse(
    status: axum::http::StatusCode,
    message: impl Into<String>,
) -> axum::response::Response {
    static REFUSALS: crate::throttle::SharedThrottle = crate::throttle::SharedThrottle::new();
    let message = message.into();
    if let Some(count) = REFUSALS.refused() {
        tracing::warn!(
            status = status.as_u16(),
            refused = count,
            "request refused: {message}"
        );
    }
    error(status, message)
}

fn error(status: axum::http::StatusCode, message: impl Into<String>) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        axum::Json(serde_json::json!({"error": message.into()})),
    )
        .into_response()
}

/// The service's turns as the chat commands see them (`/stop`,
/// `/status`): on a shared store every instance's, from the store.
struct ServiceTurns<'a>(&'a Arc<Service>);

impl ServiceTurns<'_> {
    /// The turns in memory here: the running one first, then the rest as
    /// they came.
    fn here(&self, conversation: &str) -> Vec<crate::run::TurnNow> {
        let mut turns: Vec<(i64, crate::run::TurnNow)> = self
            .0
            .runs()
            .iter()
            .filter(|(_, run)| run.conversation_id == conversation && !run.ended())
            .map(|(run_id, run)| {
                let started_ms = run
                    .started_ms()
                    .filter(|_| run.status() == RunStatus::Running);
                let turn = crate::run::TurnNow {
                    run_id: run_id.clone(),
                    harness: run.harness.clone(),
                    started_ms,
                    actor: run.who().and_then(|w| w.actor.clone()),
                };
                (started_ms.map_or(run.accepted_ms, |_| i64::MIN), turn)
            })
            .collect();
        turns.sort_by_key(|(order, _)| *order);
        turns.into_iter().map(|(_, turn)| turn).collect()
    }
}

#[async_trait::async_trait]
impl crate::run::Turns for ServiceTurns<'_> {
    async fn in_flight(&self, conversation: &str) -> Result<Vec<crate::run::TurnNow>, String> {
        match self.0.backlog.in_flight(conversation).await {
            Ok(Some(turns)) => Ok(turns),
            Ok(None) => Ok(self.here(conversation)),
            Err(e) => {
                tracing::warn!("cannot read the conversation's turns from the store: {e}");
                Err(e.to_string())
            }
        }
    }

    async fn stop(&self, conversation: &str) -> crate::run::Stopping {
        use crate::run::Stopping;
        let running = match self.in_flight(conversation).await {
            Ok(turns) => turns.into_iter().next(),
            Err(why) => return Stopping::Failed(why),
        };
        let Some(running) = running.filter(|t| t.started_ms.is_some()) else {
            return Stopping::Nothing;
        };
        match self.0.cancel(&running.run_id).await {
            Ok(Cancelled::Asked(_)) => Stopping::Asked(running),
            Ok(_) => Stopping::Nothing,
            Err(e) => {
                tracing::warn!(run_id = %running.run_id, "cannot stop the turn: {e}");
                Stopping::Failed(e.to_string())
            }
        }
    }
}
