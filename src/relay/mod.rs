//! `harness-bridge relay`: the bridge behind a host plugin, over stdio.
//!
//! The plugin (a LangBot plugin's Runner) sends runs in; the bridge sends
//! each run's results out and asks the plugin to answer host API calls
//! (history, events, state, storage) through the host. Many runs share one
//! connection, told apart by `run_id`. When the plugin goes away (stdin
//! ends) or the bridge is told to stop, every run is cancelled and its
//! harness process group killed before the bridge exits (Protocol v1 §10:
//! fail fast, leave nothing behind). See `docs/relay-protocol.md`.

mod board;
mod frame;
mod host;
mod reader;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use frame::{Inbound, Outbound, PROTOCOL};
pub use host::RelayHost;
pub use reader::{Frames, Incoming, MAX_FRAME_BYTES, field_in_head};

use crate::harness::Adapters;
use crate::host::Api;
use crate::projection::Templates;
use crate::protocol::FailureCode;
use crate::protocol::{AgentAPIError, AgentRunResult, ResultPayload, RunFailed, checked_context};
use crate::repo::{OpenedProjects, Projects};
use crate::run::{Bridge, Deliver, Dispatch, RunOptions, Scheduler, Settings, Steer, SteerInbox};

/// How many turns the relay runs and holds: turns of one conversation run
/// one at a time in arrival order (they share its workspace), different
/// conversations in parallel up to a limit.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Turns running at once, across conversations.
    pub max_concurrent_runs: usize,
    /// Turns waiting per conversation before new ones are refused.
    pub max_queue_per_conversation: usize,
    /// Turns waiting across conversations before new ones are refused.
    pub max_queued_total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent_runs: 16,
            max_queue_per_conversation: 64,
            max_queued_total: 4096,
        }
    }
}

/// Why a relay session ended badly.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The plugin did not open with a hello this bridge speaks.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// Reading or writing stdio failed.
    #[error("relay i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// A run the relay has accepted and not yet seen end.
struct Running {
    /// Its context: a follow-up that is a chat command is asked in it.
    ctx: Arc<crate::protocol::AgentRunContext>,
    /// Set once its terminal result went to the plugin.
    ended: Arc<std::sync::atomic::AtomicBool>,
    /// Cancelled by the plugin's `cancel`, or when the relay ends.
    cancel: CancellationToken,
    /// Where its follow-ups go (the run's turn reads them).
    steer: mpsc::Sender<Steer>,
    /// Its harness: only a harness that takes input mid-turn is offered one.
    harness: String,
}

/// Offer `text` to a run's turn; whether the turn took it. A run still
/// queued, or past its turn, never reads the inbox: `false`.
async fn steer(inbox: &mpsc::Sender<Steer>, text: String) -> bool {
    let (taken, answer) = tokio::sync::oneshot::channel();
    if inbox.send(Steer { text, taken }).await.is_err() {
        return false;
    }
    answer.await.unwrap_or(false)
}

/// Write frames, one JSON line each, flushed: the plugin reads them as
/// they come.
async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut frames: mpsc::Receiver<Outbound>,
    gone: CancellationToken,
) {
    // Whatever ends the writer ends the session: nobody can hear us.
    let _gone = gone.drop_guard();
    while let Some(frame) = frames.recv().await {
        let mut line = match serde_json::to_vec(&frame) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!("cannot encode a relay frame: {e}");
                continue;
            }
        };
        line.push(b'\n');
        if writer.write_all(&line).await.is_err() || writer.flush().await.is_err() {
            tracing::warn!("the relay's output closed");
            return;
        }
    }
}

/// A run the relay cannot start (or could not finish): one `run.failed`,
/// numbered after the `sent` results the plugin already has.
fn failed_frame(
    run_id: &str,
    sent: u64,
    code: FailureCode,
    error: String,
    retryable: bool,
) -> Outbound {
    let failed = ResultPayload::RunFailed(RunFailed {
        code,
        error,
        retryable,
    });
    let mut result = AgentRunResult::new(run_id, failed);
    result.sequence = Some(sent + 1);
    result.timestamp = Some(crate::host::now_ms() / 1000);
    Outbound::Result {
        run_id: run_id.into(),
        result: Box::new(result),
    }
}

/// A frame the plugin must get even when its input is backed up: sent
/// from a task of its own, so the read loop never waits on the plugin.
fn send_later(out: &mpsc::Sender<Outbound>, frame: Outbound) {
    let out = out.clone();
    tokio::spawn(async move {
        let _ = out.send(frame).await;
    });
}

/// Answer a frame too long to read, when its first bytes say whose it
/// is: a run gets its `run.failed`, a host reply ends its call.
fn answer_too_long(
    head: &str,
    out: &mpsc::Sender<Outbound>,
    host: &RelayHost,
    runs: &HashMap<String, Running>,
) {
    let cap = MAX_FRAME_BYTES / (1024 * 1024);
    let kind = field_in_head::<String>(head, "type");
    tracing::warn!(
        kind = kind.as_deref().unwrap_or("?"),
        "a frame over {cap} MiB; dropped"
    );
    match kind.as_deref() {
        Some("run") => {
            if let Some(run_id) =
                field_in_head::<String>(head, "run_id").filter(|run_id| !runs.contains_key(run_id))
            {
                let why = format!(
                    "the run frame is over the relay's {cap} MiB limit; send large files as artifacts, not inline"
                );
                send_later(
                    out,
                    failed_frame(&run_id, 0, FailureCode::InvalidArgument, why, false),
                );
                return;
            }
        }
        Some("host_reply") => {
            if let Some(id) = field_in_head::<u64>(head, "id") {
                let why = format!("the plugin's reply is over the relay's {cap} MiB limit");
                host.answer(id, Err(AgentAPIError::too_large(why)));
                return;
            }
        }
        _ => {}
    }
    let _ = out.try_send(Outbound::Error {
        run_id: None,
        message: format!(
            "a frame over the relay's {cap} MiB limit, whose id could not be read; ignored"
        ),
    });
}

/// One run's results, as frames to the plugin.
struct ToPlugin {
    out: mpsc::Sender<Outbound>,
    run_id: String,
    /// Set when its turn begins, for `/status` and `/stop`.
    started_ms: Arc<std::sync::atomic::AtomicI64>,
    /// Set once its terminal result is on its way.
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl Deliver for ToPlugin {
    fn begins(&mut self, got_turn: bool) {
        if got_turn {
            self.started_ms
                .store(crate::host::now_ms(), std::sync::atomic::Ordering::Release);
        }
    }

    async fn deliver(&mut self, result: AgentRunResult) -> bool {
        if result.kind.is_terminal() {
            self.ended.store(true, std::sync::atomic::Ordering::Release);
        }
        let frame = Outbound::Result {
            run_id: self.run_id.clone(),
            result: Box::new(result),
        };
        self.out.send(frame).await.is_ok()
    }
}

/// What a relay session runs with: the operator's settings, specs and
/// templates, its queue limits, and the bridge's own store for the run
/// ledger and budgets (the host keeps neither).
pub struct Setup {
    /// The turns' settings.
    pub settings: Settings,
    /// The harness specs.
    pub adapters: Adapters,
    /// The projection's templates.
    pub templates: Templates,
    /// The queue's limits.
    pub limits: Limits,
    /// Where runs' usage is kept and turns are counted against budgets.
    pub ledger: Option<Arc<dyn host::Ledger>>,
}

/// Serve one relay session on `reader`/`writer` until the plugin goes away
/// or `stop` is cancelled; every run is over when this returns.
pub async fn serve<R, W>(
    reader: R,
    writer: W,
    setup: Setup,
    stop: CancellationToken,
) -> Result<(), RelayError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, frames_out) = mpsc::channel::<Outbound>(1024);
    let output_gone = CancellationToken::new();
    let writer = tokio::spawn(write_frames(writer, frames_out, output_gone.clone()));
    let mut frames = Frames::new(reader);
    let Setup {
        settings,
        adapters,
        templates,
        limits,
        ledger,
    } = setup;
    let answers = match handshake(&mut frames, &out, &adapters, &stop).await {
        Ok(answers) => answers,
        Err(e) => {
            drop(out);
            let _ = writer.await;
            return Err(e);
        }
    };
    let mut host = RelayHost::new(out.clone(), answers);
    if let Some(ledger) = ledger {
        host = host.with_ledger(ledger);
    }
    let host = Arc::new(host);
    let mut session =
        Session::start(out.clone(), host, settings, adapters, templates, limits).await?;
    let ended = session.read(&mut frames, &stop, &output_gone).await;
    session.end(ended).await;
    drop(out);
    if tokio::time::timeout(std::time::Duration::from_secs(5), writer)
        .await
        .is_err()
    {
        tracing::warn!("the relay's output did not drain; closing");
    }
    Ok(())
}

/// The plugin speaks first: a hello in this bridge's protocol, naming the
/// host APIs it answers; the bridge answers with its own. Returns the APIs
/// the plugin answers.
async fn handshake<R: AsyncRead + Unpin>(
    frames: &mut Frames<R>,
    out: &mpsc::Sender<Outbound>,
    adapters: &Adapters,
    stop: &CancellationToken,
) -> Result<BTreeSet<Api>, RelayError> {
    let hello = tokio::select! {
        line = frames.next() => line?,
        () = stop.cancelled() => None,
    };
    let hello = hello.map(|line| match line {
        Incoming::Line(line) => line,
        Incoming::TooLong(head) => head,
    });
    let (client, apis) = match hello.as_deref().map(serde_json::from_str::<Inbound>) {
        Some(Ok(Inbound::Hello {
            protocol,
            client,
            apis,
        })) if protocol == PROTOCOL => (client, apis),
        other => {
            let why = match other {
                None => "the plugin closed the connection before its hello".to_string(),
                Some(Ok(Inbound::Hello { protocol, .. })) => {
                    format!("the plugin speaks `{protocol}`, this bridge `{PROTOCOL}`")
                }
                Some(Ok(_)) => "the first frame must be a hello".to_string(),
                Some(Err(e)) => format!("the first frame is not a relay frame: {e}"),
            };
            let _ = out
                .send(Outbound::Error {
                    run_id: None,
                    message: why.clone(),
                })
                .await;
            return Err(RelayError::Handshake(why));
        }
    };
    let answers: BTreeSet<Api> = match &apis {
        None => Api::ALL.into_iter().collect(),
        Some(names) => names.iter().filter_map(|name| Api::named(name)).collect(),
    };
    for unknown in apis
        .iter()
        .flatten()
        .filter(|name| Api::named(name).is_none())
    {
        tracing::warn!(api = %unknown, "the plugin names a host API this bridge does not know; ignored");
    }
    tracing::info!(%client, answers = ?answers, "relay connected");
    let _ = out
        .send(Outbound::Hello {
            protocol: PROTOCOL.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            harnesses: adapters.all().iter().map(|s| s.name.clone()).collect(),
        })
        .await;
    Ok(answers)
}

/// One connected plugin: its runs, their tasks and their queue.
struct Session {
    out: mpsc::Sender<Outbound>,
    host: Arc<RelayHost>,
    bridge: Arc<Bridge>,
    runs: HashMap<String, Running>,
    /// Each run's task; it returns the run's id even when the run panicked.
    tasks: JoinSet<String>,
    scheduler: Arc<Scheduler>,
    /// The projects runs declared, opened once for the session.
    projects: Arc<OpenedProjects>,
    /// The runs in flight as the chat commands see them.
    board: Arc<board::Board>,
}

impl Session {
    /// The bridge for this plugin: host calls go to it, and it records no
    /// turns itself (the host keeps its own history).
    async fn start(
        out: mpsc::Sender<Outbound>,
        host: Arc<RelayHost>,
        mut settings: Settings,
        adapters: Adapters,
        templates: Templates,
        limits: Limits,
    ) -> Result<Session, RelayError> {
        settings.record_turns = false;
        let projects = Arc::new(OpenedProjects::new(settings.cage.owner()));
        let bridge = Arc::new(Bridge::start(host.clone(), adapters, templates, settings).await?);
        let scheduler = Scheduler::new(
            limits.max_concurrent_runs.max(1),
            limits.max_queue_per_conversation,
            limits.max_queued_total,
        );
        Ok(Session {
            out,
            host,
            bridge,
            runs: HashMap::new(),
            projects,
            board: Arc::default(),
            tasks: JoinSet::new(),
            scheduler,
        })
    }

    /// Read and act on frames until the plugin goes away or the bridge is
    /// told to stop; says which.
    async fn read<R: AsyncRead + Unpin>(
        &mut self,
        frames: &mut Frames<R>,
        stop: &CancellationToken,
        output_gone: &CancellationToken,
    ) -> &'static str {
        let mut hourly = tokio::time::interval(std::time::Duration::from_secs(3600));
        hourly.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let line = tokio::select! {
                line = frames.next() => line,
                _ = hourly.tick() => {
                    // Beside the frames: a large worktree takes a while.
                    let projects = self.projects.clone();
                    tokio::spawn(async move { projects.put_away_idle().await });
                    continue;
                }
                Some(done) = self.tasks.join_next() => {
                    if let Ok(run_id) = done {
                        self.runs.remove(&run_id);
                        self.board.remove(&run_id);
                    }
                    continue;
                }
                () = stop.cancelled() => return "the bridge was told to stop",
                () = output_gone.cancelled() => return "the plugin stopped reading",
            };
            match line {
                Ok(Some(Incoming::Line(line))) => self.frame(&line),
                Ok(Some(Incoming::TooLong(head))) => {
                    answer_too_long(&head, &self.out, &self.host, &self.runs);
                }
                Ok(None) => return "the plugin closed the connection",
                Err(e) => {
                    tracing::warn!("relay input failed: {e}");
                    return "the relay input failed";
                }
            }
        }
    }

    /// Act on one frame.
    fn frame(&mut self, line: &str) {
        let frame = match serde_json::from_str::<Inbound>(line) {
            Ok(frame) => frame,
            Err(e) => return self.malformed(line, &e),
        };
        match frame {
            Inbound::Hello { .. } => {
                let _ = self.out.try_send(Outbound::Error {
                    run_id: None,
                    message: "hello was already received; ignored".into(),
                });
            }
            Inbound::HostReply { id, data, error } => {
                let reply = match error {
                    Some(error) => Err(error),
                    None => Ok(data.unwrap_or(serde_json::Value::Null)),
                };
                if !self.host.answer(id, reply) {
                    tracing::debug!(id, "a host reply nobody waits for (late, or unknown id)");
                }
            }
            Inbound::Cancel { run_id } => match self.runs.get(&run_id) {
                Some(run) => run.cancel.cancel(),
                None => tracing::debug!(%run_id, "cancel for a run that is not running"),
            },
            Inbound::Steer {
                run_id,
                id,
                text,
                actor,
                only_command,
            } => self.steer(run_id, id, text, actor, only_command),
            Inbound::Run {
                run_id,
                harness,
                context,
                binary,
                env,
                mcp_servers,
                projects,
            } => {
                let options = RunOptions {
                    binary: binary.map(Into::into),
                    env,
                    mcp_servers,
                    ..RunOptions::default()
                };
                self.run(run_id, harness, &context, options, projects);
            }
        }
    }

    /// A frame that is not well-formed: a run frame still gets its one
    /// terminal result, and a host reply still ends its call, when the id
    /// can be read.
    fn malformed(&self, line: &str, e: &serde_json::Error) {
        let value = serde_json::from_str::<serde_json::Value>(line).unwrap_or_default();
        let why = format!(
            "not a valid {} frame: {e}",
            value["type"].as_str().unwrap_or("relay")
        );
        match (value["type"].as_str(), &value["run_id"], &value["id"]) {
            (Some("run"), serde_json::Value::String(run_id), _)
                if !self.runs.contains_key(run_id) =>
            {
                send_later(
                    &self.out,
                    failed_frame(run_id, 0, FailureCode::InvalidArgument, why, false),
                );
            }
            (Some("host_reply"), _, id) if id.is_u64() => {
                let id = id.as_u64().unwrap_or_default();
                self.host.answer(
                    id,
                    Err(AgentAPIError::runtime(format!("the plugin's reply: {why}"))),
                );
            }
            _ => {
                let _ = self.out.try_send(Outbound::Error {
                    run_id: None,
                    message: format!("{why}; ignored"),
                });
            }
        }
    }

    /// Offer a follow-up to a running turn; the plugin hears whether the
    /// turn took it. A chat command is the bridge's: answered in the run's
    /// stream and taken, whatever the harness.
    fn steer(
        &self,
        run_id: String,
        id: u64,
        text: String,
        actor: Option<String>,
        only_command: bool,
    ) {
        let ended = |run: &Running| run.ended.load(std::sync::atomic::Ordering::Acquire);
        if self.runs.get(&run_id).is_some_and(ended) {
            // The host has ended that run: the plugin sends it as a turn.
            let out = self.out.clone();
            let taken = Outbound::Steered {
                run_id,
                id,
                taken: false,
            };
            tokio::spawn(async move { out.send(taken).await });
            return;
        }
        if let Some(run) = self.runs.get(&run_id)
            && Bridge::command_in(&run.ctx, &text).is_some()
        {
            let asked = SteeredCommand {
                bridge: self.bridge.clone(),
                ctx: follow_up(&run.ctx, text, actor),
                harness: run.harness.clone(),
                board: self.board.clone(),
                out: self.out.clone(),
                id,
            };
            tokio::spawn(asked.answer());
            return;
        }
        let inbox = self
            .runs
            .get(&run_id)
            .filter(|run| !only_command && self.bridge.steers(&run.harness))
            .map(|run| run.steer.clone());
        let out = self.out.clone();
        tokio::spawn(async move {
            let taken = match inbox {
                Some(inbox) => steer(&inbox, text).await,
                None => false,
            };
            tracing::debug!(%run_id, id, taken, "a follow-up for a running turn");
            let _ = out.send(Outbound::Steered { run_id, id, taken }).await;
        });
    }

    /// Accept a run (checked, its place in its conversation's queue taken
    /// now, in the order the frames arrived) and start its task; or refuse
    /// it with its one `run.failed`.
    fn run(
        &mut self,
        run_id: String,
        harness: String,
        context: &serde_json::Value,
        mut options: RunOptions,
        projects: Projects,
    ) {
        if self.runs.contains_key(&run_id) {
            let _ = self.out.try_send(Outbound::Error {
                run_id: Some(run_id),
                message: "this run is already running; ignored".into(),
            });
            return;
        }
        let checked = crate::projection::check_mcp_catalog(&options.mcp_servers)
            .map_err(|e| e.to_string())
            .and_then(|()| checked_context(context).map_err(|e| e.to_string()))
            .and_then(|ctx| {
                if ctx.run_id == run_id {
                    Ok(ctx)
                } else {
                    Err(format!(
                        "the frame's run_id `{run_id}` is not the context's `{}`",
                        ctx.run_id
                    ))
                }
            });
        let refuse = |code, why, retryable| {
            send_later(&self.out, failed_frame(&run_id, 0, code, why, retryable));
        };
        let ctx = match checked {
            Ok(ctx) => ctx,
            Err(why) => return refuse(FailureCode::InvalidArgument, why, false),
        };
        let text = ctx.input.to_text();
        if Bridge::command_in(&ctx, &text).is_some() {
            // Answered at once, beside the conversation's queue: a command
            // waits on host calls the read loop answers.
            let (bridge, out, board) = (self.bridge.clone(), self.out.clone(), self.board.clone());
            self.tasks.spawn(async move {
                command(&bridge, &ctx, &harness, &board, out).await;
                ctx.run_id
            });
            return;
        }
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        let ticket = match self.scheduler.enqueue(&conversation) {
            Ok(ticket) => ticket,
            Err(full) => return refuse(FailureCode::RateLimited, full.to_string(), true),
        };
        let cancel = CancellationToken::new();
        let (steer, inbox) = mpsc::channel(16);
        options.steer = Some(SteerInbox(Arc::new(tokio::sync::Mutex::new(inbox))));
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let running = Running {
            ctx: Arc::new(ctx.clone()),
            ended: ended.clone(),
            cancel: cancel.clone(),
            steer,
            harness: harness.clone(),
        };
        self.runs.insert(run_id.clone(), running);
        let started_ms = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let on_board = board::OnBoard {
            conversation,
            harness: harness.clone(),
            actor: ctx.actor.as_ref().and_then(|a| a.actor_id.clone()),
            started_ms: started_ms.clone(),
            accepted_ms: crate::host::now_ms(),
            cancel: cancel.clone(),
            ended: ended.clone(),
        };
        self.board.add(run_id.clone(), on_board);
        let turn = RelayTurn {
            bridge: self.bridge.clone(),
            out: self.out.clone(),
            ctx,
            harness,
            options,
            projects: (projects, self.projects.clone()),
            ticket,
            cancel,
            started_ms,
            ended,
        };
        self.tasks.spawn(turn.run());
    }

    /// End the session: every run cancelled, its harness stopped, the
    /// bridge shut down.
    async fn end(mut self, ended: &str) {
        tracing::info!(runs = self.runs.len(), "relay ending: {ended}");
        self.host.close();
        for run in self.runs.values() {
            run.cancel.cancel();
        }
        // Cancelled runs stop their harness within the kill grace. A run
        // still here after that is stuck delivering to a plugin that
        // stopped reading: dropping it kills whatever it still holds.
        let patience = self.bridge.kill_grace() + std::time::Duration::from_secs(5);
        if tokio::time::timeout(patience, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            tracing::warn!("runs still delivering results after the grace; dropped");
            self.tasks.shutdown().await;
        }
        if let Ok(bridge) = Arc::try_unwrap(self.bridge) {
            bridge.shutdown().await;
        }
    }
}

/// One accepted run, as its task runs it.
struct RelayTurn {
    bridge: Arc<Bridge>,
    out: mpsc::Sender<Outbound>,
    ctx: crate::protocol::AgentRunContext,
    harness: String,
    options: RunOptions,
    /// The projects the run's frame declared, and the session's opened ones.
    projects: (Projects, Arc<OpenedProjects>),
    ticket: crate::run::Ticket,
    cancel: CancellationToken,
    started_ms: Arc<std::sync::atomic::AtomicI64>,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl RelayTurn {
    /// Wait for its turn, run it, forward its results (ending with one
    /// terminal, whatever happens to the run's task). Returns its id.
    async fn run(self) -> String {
        let RelayTurn {
            bridge,
            out,
            ctx,
            harness,
            mut options,
            projects: (declared, opened),
            ticket,
            cancel,
            started_ms,
            ended,
        } = self;
        let run_id = ctx.run_id.clone();
        // The project the binding names, when the run declared it: opened
        // (checked) on its first use; one the operator declared wrong
        // fails the run that picks it, not the others.
        let named = ctx
            .config
            .get("project")
            .and_then(serde_json::Value::as_str);
        if let Some((name, spec)) = named.and_then(|name| declared.get_key_value(name)) {
            match opened.open(name, spec).await {
                Ok(project) => {
                    options.projects.insert(name.clone(), project);
                }
                Err(e) => {
                    tracing::error!(%run_id, error = %e, "cannot use a declared project");
                    let why = e.to_string();
                    let _ = out
                        .send(failed_frame(
                            &run_id,
                            0,
                            FailureCode::InvalidArgument,
                            why,
                            false,
                        ))
                        .await;
                    return run_id;
                }
            }
        }
        let mut sink = ToPlugin {
            out,
            run_id: run_id.clone(),
            started_ms,
            ended,
        };
        let dispatch = Dispatch {
            bridge,
            ctx,
            harness,
            options,
            cancel,
        };
        dispatch.run(Some(ticket), &mut sink).await;
        run_id
    }
}

/// Answer a run whose message is a chat command: its results, as any
/// run's, to the plugin.
async fn command(
    bridge: &Bridge,
    ctx: &crate::protocol::AgentRunContext,
    harness: &str,
    board: &board::Board,
    out: mpsc::Sender<Outbound>,
) {
    let asking = crate::run::Asking {
        ctx,
        harness,
        turns: board,
        fixed: &[],
    };
    let Some(answer) = bridge.answer_command(&asking).await else {
        return;
    };
    for result in crate::run::answer_results(&ctx.run_id, &answer) {
        let frame = Outbound::Result {
            run_id: ctx.run_id.clone(),
            result: Box::new(result),
        };
        if out.send(frame).await.is_err() {
            return;
        }
    }
}

/// The context a follow-up's command is asked in: its run's, with the
/// follow-up's words and the person who sent them (none named: no one,
/// never the run's asker), and no state snapshot (it predates the turn:
/// a command reads the store).
fn follow_up(
    ctx: &crate::protocol::AgentRunContext,
    text: String,
    actor: Option<String>,
) -> crate::protocol::AgentRunContext {
    let mut asked = ctx.clone();
    asked.input = crate::protocol::AgentInput {
        text: Some(text),
        ..Default::default()
    };
    asked.state = Default::default();
    let asker = asked.actor.take();
    let same = |a: &crate::protocol::ActorContext| a.actor_id.as_deref() == actor.as_deref();
    if let Some(asker) = asker.filter(|a| actor.is_some() && same(a)) {
        asked.actor = Some(asker);
        return asked;
    }
    asked.actor = actor.map(|actor| crate::protocol::ActorContext {
        actor_type: "user".into(),
        actor_id: Some(actor),
        actor_name: None,
        metadata: Default::default(),
        extra: Default::default(),
    });
    asked
}

/// A chat command that came as a follow-up to a running run (LangBot's
/// steering): answered in that run's stream, before anything it stops.
struct SteeredCommand {
    bridge: Arc<Bridge>,
    ctx: crate::protocol::AgentRunContext,
    harness: String,
    board: Arc<board::Board>,
    out: mpsc::Sender<Outbound>,
    id: u64,
}

impl SteeredCommand {
    async fn answer(self) {
        let run_id = self.ctx.run_id.clone();
        // A stop is made once the answer is on its way: the person reads
        // it before the stopped run's end.
        let turns = board::Deferred::new(&self.board, &run_id);
        let asking = crate::run::Asking {
            ctx: &self.ctx,
            harness: &self.harness,
            turns: &turns,
            fixed: &[],
        };
        let answer = self.bridge.answer_command(&asking).await;
        if let Some(answer) = &answer {
            let said = crate::run::answer_results(&run_id, answer)
                .into_iter()
                .find(|r| r.kind == crate::protocol::ResultType::MessageCompleted);
            if let Some(mut said) = said {
                said.sequence = None;
                // Said in another turn's stream: the plugin gives it at
                // once rather than hold it as that turn's words.
                if let Some(meta) = said
                    .data
                    .get_mut("message")
                    .and_then(|m| m.get_mut("metadata"))
                    .and_then(serde_json::Value::as_object_mut)
                {
                    meta.insert("in_turn".into(), true.into());
                }
                let frame = Outbound::Result {
                    run_id: run_id.clone(),
                    result: Box::new(said),
                };
                let _ = self.out.send(frame).await;
            }
        }
        turns.stop_now();
        let taken = Outbound::Steered {
            run_id,
            id: self.id,
            taken: answer.is_some(),
        };
        let _ = self.out.send(taken).await;
    }
}

/// Start a relay session on the process's stdin and stdout; cancelling
/// `stop` (SIGTERM, Ctrl-C) ends it like the plugin going away.
pub async fn serve_stdio(setup: Setup, stop: CancellationToken) -> Result<(), RelayError> {
    serve(tokio::io::stdin(), tokio::io::stdout(), setup, stop).await
}
