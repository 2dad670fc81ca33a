//! `harness-bridge serve`: the bridge as a long-running service. One
//! process holds the embedded host, the MCP server and an HTTP API; turns
//! of a conversation run one after another in arrival order, different
//! conversations in parallel up to a limit; results are kept per run so a
//! client that went away can fetch them; shutdown lets running turns
//! finish within a grace, then cancels them.

mod config;
mod http;
mod journal;
mod queue;

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use config::ServeConfig;
pub use journal::{INTERRUPTED, Interrupted, Journal, JournalRun};
pub use queue::{QueueFull, Scheduler, Ticket};

use crate::protocol::{AgentRunContext, AgentRunResult, ResultPayload, RunFailed};
use crate::run::{Bridge, RunOptions, SpawnHook, Spawned};

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
}

impl RunEntry {
    fn new(conversation_id: String, harness: String) -> Arc<RunEntry> {
        Arc::new(RunEntry {
            conversation_id,
            harness,
            status: Mutex::new(RunStatus::Queued),
            results: Mutex::new(Vec::new()),
            counted: AtomicBool::new(false),
            count: watch::channel(0).0,
            cancel: CancellationToken::new(),
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

    /// A run that has ended (or was interrupted), by id, from the journal.
    pub fn past_run(&self, run_id: &str) -> Option<JournalRun> {
        self.journal.get(run_id)
    }

    /// Queue a turn; it runs in the background whatever happens to the
    /// caller, and its results are kept under its run id.
    pub fn submit(
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
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        // Under the runs lock, as shutdown sets it: a turn is either refused
        // here or in the map (and tracked) before shutdown looks.
        let mut runs = self.runs();
        if self.closing.load(Ordering::Acquire) {
            return Err(Refused::Unavailable(
                "the bridge is shutting down; send the turn again when it is back".into(),
            ));
        }
        let known = runs.contains_key(&ctx.run_id)
            || self
                .journal
                .contains(&ctx.run_id)
                .map_err(Refused::Unavailable)?;
        if known {
            return Err(Refused::Duplicate);
        }
        let ticket = self
            .scheduler
            .enqueue(&conversation)
            .map_err(Refused::Busy)?;
        self.journal.queued(&ctx.run_id, &conversation, &harness);
        let entry = RunEntry::new(conversation, harness);
        runs.insert(ctx.run_id.clone(), entry.clone());
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
        drop(runs);
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
            tokio::spawn(async move {
                while let Some(result) = rx.recv().await {
                    run.push(result);
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
            metrics.run_ended(
                &run.harness,
                summary.failure_code.as_deref(),
                started.elapsed().as_secs_f64(),
            );
        }
        // Journal first, then out of memory: a lookup always finds it. The
        // write (every result, as JSON) is blocking SQLite work: off the
        // async workers, so a long run's record does not stall the others.
        let journal = {
            let service = self.clone();
            let run_id = ctx.run_id.clone();
            let code = summary.failure_code.clone();
            let results = run.results_from(0);
            tokio::task::spawn_blocking(move || {
                service
                    .journal
                    .ended(&run_id, status, code.as_deref(), &results);
            })
        };
        if let Err(e) = journal.await {
            tracing::error!("the run's journal write failed: {e}");
        }
        run.set_status(status);
        self.runs().remove(&ctx.run_id);
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
            run.push(failed);
            self.journal.ended(
                run_id,
                RunStatus::Failed,
                Some("internal_error"),
                &run.results_from(0),
            );
            run.set_status(RunStatus::Failed);
        }
        if run.counted.swap(false, Ordering::AcqRel) {
            crate::metrics::global().run_ended(&run.harness, Some("internal_error"), 0.0);
        }
        self.runs().remove(run_id);
    }

    /// Turns waiting across conversations.
    pub fn queued(&self) -> usize {
        self.scheduler.queued()
    }

    /// Forget finished runs older than the retention.
    fn prune(&self) {
        let retention = Duration::from_secs(self.config.retention_hours.saturating_mul(3600));
        match self.journal.prune(retention) {
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
    }
}

/// How long result streams may stay open after every run has ended.
const STREAM_DRAIN: Duration = Duration::from_secs(5);

/// Serve until `stop` is cancelled, then shut down gracefully; `hurry`
/// (a second signal) cuts the grace short.
pub async fn serve(
    service: Arc<Service>,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
    hurry: CancellationToken,
) -> std::io::Result<()> {
    let app = http::router(service.clone());
    let shutdown = stop.clone();
    // Results are small writes: without TCP_NODELAY a run's last lines can
    // wait for the client's delayed ACK (40 ms on Linux) before they leave.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
    });
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .into_future();
    // Streams of running turns hold their connections open: the turns are
    // wound down alongside, and the server returns once they have ended.
    let drained = CancellationToken::new();
    let drain = async {
        stop.cancelled().await;
        service.shutdown(hurry.cancelled()).await;
        drained.cancel();
    };
    // Every run has ended and is journaled once `drain` is done; a client
    // that stopped reading could still hold its stream open for good. It
    // gets a moment to take the rest, then the server stops waiting.
    let serve = async {
        tokio::select! {
            served = server => served,
            () = async {
                drained.cancelled().await;
                tokio::time::sleep(STREAM_DRAIN).await;
            } => {
                tracing::warn!("a client still holds a result stream open; closing it");
                Ok(())
            }
        }
    };
    let prune = async {
        let mut hourly = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tokio::select! {
                _ = hourly.tick() => service.prune(),
                () = stop.cancelled() => return,
            }
        }
    };
    let (served, (), ()) = tokio::join!(serve, drain, prune);
    served
}
