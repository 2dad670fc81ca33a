//! Running turns. The [`Bridge`] holds what lives across turns (the host,
//! the grants, the MCP server, the specs and templates); [`Bridge::run`]
//! does one turn and always ends the stream with exactly one
//! `run.completed` or `run.failed`. The folder is cut by that line: one
//! turn, end to end, is `turn/` (grant → workspace → resume pointer →
//! harness → results → what the host keeps); what spans turns is here
//! beside it — the front doors' one way in (`dispatch`), each
//! conversation's queue (`queue`), the processes kept between turns
//! (`live`), a session following its conversation to another instance
//! (`follow`), the chat commands answered between turns (`commands/`),
//! the destinations a person allowed (`destinations`), the operator's
//! budgets (`budget`) and a quick one-off context (`quick`).

mod budget;
mod commands;
mod destinations;
mod dispatch;
mod follow;
mod io;
mod live;
mod queue;
mod quick;
mod turn;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use turn::{ledger, record};

pub use commands::{Answer, Asking, NoTurns, Stopping, TurnNow, Turns, answer_results};
pub use dispatch::{Deliver, Dispatch, Dispatched};
pub use io::emit::Emitter;
pub use io::outbox::OUTBOX_DIR;
pub use live::{LiveLimits, LiveSession, LiveSessions};
pub use queue::{QueueFull, Scheduler, Ticket, Turn};
pub use quick::{QuickTurn, new_run_id, quick_context};

use crate::harness::Adapters;
use crate::host::{GrantPolicy, Grants, HostApi, HostResult};
use crate::mcp::{InputRef, McpHttpServer, RunFacts, RunTools};
use crate::projection::{McpCatalog, Projection, Templates};
use crate::protocol::{
    AgentRunContext, AgentRunResult, FailureCode, ResultPayload, ResultType, RunFailed,
};

/// A turn's timeout when neither the binding nor the context sets one.
pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest the bridge waits for one of its own host calls (the resume
/// pointer): the `state.updated` results carry the pointer anyway.
const HOST_CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the bridge's own host calls may still take once a turn's
/// deadline has passed.
const AFTER_DEADLINE: Duration = Duration::from_secs(2);
/// The MCP tool a harness's permission prompts go to under
/// `approvals: chat` (its spec passes it as `{permission_prompt_tool}`).
const PROMPT_TOOL: &str = "mcp__langbot__approve";
/// Time between SIGTERM and SIGKILL when a harness is stopped.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// What the operator decides, for every run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Folder under which conversation workspaces live.
    pub workspace_root: PathBuf,
    /// Caps and cross-conversation access for run grants.
    pub policy: GrantPolicy,
    /// Harness name → program path, instead of looking the spec's binary up on PATH.
    pub binaries: BTreeMap<String, PathBuf>,
    /// More variables (names, or prefixes ending in `*`) passed to every harness.
    pub pass_env: Vec<String>,
    /// Variables set for every harness.
    pub set_env: BTreeMap<String, String>,
    /// A turn's timeout when the binding sets none.
    pub turn_timeout: Duration,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Record each turn's event, user message and reply with the host.
    /// Off when the host records its own transcript (LangBot, via the relay).
    pub record_turns: bool,
    /// Extra MCP servers a binding may pick by name.
    pub mcp_servers: McpCatalog,
    /// Keep one harness process per conversation between turns, where the
    /// harness's spec has a live driver; `None`: one process per turn.
    pub live: Option<LiveLimits>,
    /// How harnesses are caged (by default: each to its conversation).
    pub cage: crate::harness::cage::CagePolicy,
    /// The operator's projects, checked, that a binding picks by name.
    pub projects: BTreeMap<String, crate::repo::Project>,
    /// On a store shared by instances: after each turn a copy of the
    /// session's files, up to this many bytes, is kept with the
    /// conversation, so its session follows it to the instance that takes
    /// it over. `None`: sessions stay where they ran.
    pub follow_sessions: Option<u64>,
    /// The operator's limits per person, conversation and bot; a turn
    /// over one is not started (`budget`).
    pub budgets: crate::host::budget::Budgets,
    /// What a model's tokens cost, for the ledger of a harness that
    /// reports no cost of its own.
    pub prices: crate::host::budget::Prices,
}

/// Per-run choices of the trusted front end (the operator's relay plugin
/// config, the service's config) — never taken from the context, which a
/// less trusted caller may write.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Program to run instead of the spec's binary (or the settings' path).
    pub binary: Option<PathBuf>,
    /// Variables set for this run's harness.
    pub env: BTreeMap<String, String>,
    /// Extra MCP servers this run's binding may pick by name, besides the
    /// settings' (the plugin's runner settings, through the relay).
    pub mcp_servers: McpCatalog,
    /// Projects this run's binding may pick by name, besides the
    /// settings' (the plugin's settings, through the relay), opened.
    pub projects: BTreeMap<String, crate::repo::Project>,
    /// Told each harness as it starts, so a caller can note it somewhere
    /// that outlives the bridge (the service's journal).
    pub on_spawn: Option<SpawnHook>,
    /// Where follow-ups for this run's turn arrive (`serve`'s `steer`).
    pub steer: Option<SteerInbox>,
    /// The host this run reads and writes through, when not the bridge's
    /// own: `serve` on a shared store gives each run the store seen
    /// through its lease, so a run whose instance lost it writes nothing.
    pub host: Option<Arc<dyn HostApi>>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("binary", &self.binary)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("mcp_servers", &self.mcp_servers)
            .field("projects", &self.projects.keys().collect::<Vec<_>>())
            .field("on_spawn", &self.on_spawn)
            .field("steer", &self.steer)
            .field("host", &self.host.as_ref().map(|_| "its own"))
            .finish()
    }
}

/// A follow-up the person sent while their turn runs, for the running
/// harness, and where to say whether it took it.
pub struct Steer {
    /// What they said.
    pub text: String,
    /// `true`: the running turn has it; `false`: it is the caller's to
    /// queue as the next turn. Dropped unanswered (the run ended): `false`.
    pub taken: tokio::sync::oneshot::Sender<bool>,
}

/// The receiving end of a run's follow-ups, shared so the options stay
/// cloneable; the run holds it while it runs.
#[derive(Clone)]
pub struct SteerInbox(pub Arc<tokio::sync::Mutex<mpsc::Receiver<Steer>>>);

impl std::fmt::Debug for SteerInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SteerInbox")
    }
}

/// A harness that just started, as a [`SpawnHook`] is told it: what a
/// later bridge needs to end what it left if this one is killed outright.
#[derive(Debug, Clone, Copy)]
pub struct Spawned<'a> {
    /// Its process group id.
    pub pgid: i32,
    /// Its working directory (the conversation's workspace).
    pub workspace: &'a std::path::Path,
    /// The turn marker it and everything it starts carry
    /// (`harness::cage`).
    pub marker: &'a str,
}

/// What a [`SpawnHook`] calls.
pub type OnSpawn = dyn Fn(&Spawned<'_>) + Send + Sync;

/// A callback told each harness that starts.
#[derive(Clone)]
pub struct SpawnHook(pub Arc<OnSpawn>);

impl std::fmt::Debug for SpawnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpawnHook")
    }
}

impl Settings {
    /// Defaults with workspaces under `root` (made absolute: a harness
    /// runs in its workspace and reads the paths it is given from there).
    pub fn new(workspace_root: PathBuf) -> Self {
        Settings {
            workspace_root: std::path::absolute(&workspace_root).unwrap_or(workspace_root),
            policy: GrantPolicy::default(),
            binaries: BTreeMap::new(),
            pass_env: Vec::new(),
            set_env: BTreeMap::new(),
            turn_timeout: DEFAULT_TURN_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
            record_turns: true,
            mcp_servers: McpCatalog::new(),
            live: None,
            cage: Default::default(),
            projects: BTreeMap::new(),
            follow_sessions: None,
            budgets: Default::default(),
            prices: Default::default(),
        }
    }
}

/// What a finished run reports to its caller (the results carry the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// `run.completed` or `run.failed`.
    pub outcome: ResultType,
    /// The failure code, when it failed.
    pub failure_code: Option<FailureCode>,
    /// The external session this turn ran in.
    pub session_id: Option<String>,
    /// Whether it continued an earlier session.
    pub resumed: bool,
    /// The conversation's workspace, once known.
    pub workspace: Option<PathBuf>,
}

/// What lives across turns.
pub struct Bridge {
    grants: Arc<Grants>,
    tools: RunTools,
    mcp: McpHttpServer,
    adapters: Adapters,
    templates: Templates,
    settings: Settings,
    live: Option<Arc<LiveSessions>>,
    /// Destinations asked of the person while their connections wait.
    asks: Arc<destinations::Asks>,
}

fn fail(code: FailureCode, error: impl Into<String>) -> RunFailed {
    RunFailed {
        code,
        error: error.into(),
        retryable: false,
    }
}

/// Closes the run's grant and forgets its tool facts however the run ends.
struct RunGuard<'a> {
    bridge: &'a Bridge,
    run_id: String,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        self.bridge.grants.close_run(&self.run_id);
        self.bridge.tools.forget(&self.run_id);
        self.bridge.tools.interactions().close(&self.run_id);
    }
}

/// What the front end gave a turn, and what its admission left it.
#[derive(Clone, Copy)]
struct Run<'a> {
    options: &'a RunOptions,
    cancel: &'a CancellationToken,
    /// What it may spend before it is stopped (`mid_turn: stop`).
    spend: Option<&'a budget::SpendWatch>,
}

/// How the turn picks its session.
struct SessionPlan {
    resume: Option<String>,
    notice: Option<String>,
}

impl Bridge {
    /// The operator's project a binding names: the front doors refuse an
    /// unknown one before a turn queues, the turn before it starts.
    pub fn project(&self, name: &str) -> Result<&crate::repo::Project, crate::repo::ProjectError> {
        crate::repo::pick(&self.settings.projects, name)
    }

    /// Put away the worktrees of the operator's projects that have gone
    /// without a turn for their retention; how many.
    pub async fn put_away_idle_worktrees(&self) -> usize {
        let mut put_away = 0;
        for project in self.settings.projects.values() {
            put_away += project.put_away_idle().await;
        }
        put_away
    }

    /// Start the bridge's MCP server (127.0.0.1, a free port) in front of `host`.
    pub async fn start(
        host: Arc<dyn HostApi>,
        adapters: Adapters,
        templates: Templates,
        settings: Settings,
    ) -> std::io::Result<Bridge> {
        let grants = Arc::new(Grants::new(host));
        let tools = RunTools::default();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let mcp = McpHttpServer::start(grants.clone(), tools.clone(), addr).await?;
        let live = settings.live.map(|limits| {
            let sessions = LiveSessions::new(limits, settings.kill_grace);
            sessions.start_reaper();
            sessions
        });
        Ok(Bridge {
            grants,
            tools,
            mcp,
            adapters,
            templates,
            settings,
            live,
            asks: Arc::default(),
        })
    }

    /// The host the bridge records turns with.
    pub fn host(&self) -> &Arc<dyn HostApi> {
        self.grants.host()
    }

    /// The harnesses this bridge can launch.
    pub fn adapters(&self) -> &Adapters {
        &self.adapters
    }

    /// How long a stopped harness gets between SIGTERM and SIGKILL.
    pub fn kill_grace(&self) -> Duration {
        self.settings.kill_grace
    }

    /// Whether a turn of `harness` can take a follow-up while it runs: it
    /// runs live, with a driver whose harness takes input mid-turn.
    pub fn steers(&self, harness: &str) -> bool {
        self.live.is_some()
            && self
                .adapters
                .find(harness)
                .is_some_and(|spec| spec.steers())
    }

    /// Record a follow-up that went into a running turn as the turn's own
    /// message is recorded (when the bridge records turns), so the
    /// conversation's history has every message the harness answered.
    pub async fn record_follow_up(&self, ctx: &AgentRunContext) -> HostResult<()> {
        if !self.settings.record_turns {
            return Ok(());
        }
        record::inbound(self.host().as_ref(), ctx).await
    }

    /// The live harness processes kept between turns, when kept.
    pub fn live_sessions(&self) -> Option<&Arc<LiveSessions>> {
        self.live.as_ref()
    }

    /// Stop the live harness processes and the MCP server.
    pub async fn shutdown(self) {
        if let Some(live) = &self.live {
            live.shutdown().await;
        }
        self.mcp.shutdown().await;
    }

    /// Run one turn of `harness`, sending its results to `out`. The stream
    /// always ends with one terminal result; `cancel` stops the harness.
    pub async fn run(
        &self,
        ctx: &AgentRunContext,
        harness: &str,
        options: &RunOptions,
        out: mpsc::Sender<AgentRunResult>,
        cancel: CancellationToken,
    ) -> RunSummary {
        let mut emit = Emitter::new(&ctx.run_id, out);
        let mut summary = RunSummary {
            outcome: ResultType::RunFailed,
            failure_code: None,
            session_id: None,
            resumed: false,
            workspace: None,
        };
        // Every line logged during the turn, in whatever task, names the run
        // and its conversation: an operator greps one id and sees the turn.
        let span = tracing::info_span!(
            "run",
            run_id = %ctx.run_id,
            conversation = ctx.conversation_id().unwrap_or(""),
            harness
        );
        let started = std::time::Instant::now();
        let started_ms = crate::host::now_ms();
        let host = options
            .host
            .as_deref()
            .unwrap_or_else(|| self.host().as_ref());
        // The model and mode a person chose with `/model`, `/mode`.
        let chosen = commands::with_overrides(host, ctx, harness).await;
        let ctx = chosen.as_ref().unwrap_or(ctx);
        // A turn the budgets refuse never started: its ledger row says
        // `refused`, counted apart from the runs.
        let mut admitted = true;
        async {
            tracing::info!("run started");
            let admitted_turn = budget::admit(host, &self.settings, ctx, harness).await;
            let turn = match admitted_turn {
                Ok(spend) => {
                    let run = Run {
                        options,
                        cancel: &cancel,
                        spend: spend.as_ref(),
                    };
                    self.turn(ctx, harness, run, &mut emit, &mut summary).await
                }
                Err(refused) => {
                    admitted = false;
                    Err(refused)
                }
            };
            if let Err(failure) = turn {
                emit.send(vec![ResultPayload::RunFailed(failure)]).await;
            }
            // Every failure, whichever phase sent it, is one line saying
            // why. A cancel is not the harness failing: whoever cancelled
            // (a person's /stop, the host, serve past a cap) says why.
            match emit.failure() {
                Some(f) if f.code == FailureCode::Cancelled => {
                    tracing::info!(code = %f.code, "run cancelled: {}", f.error)
                }
                Some(f) => tracing::warn!(code = %f.code, "run failed: {}", f.error),
                None => {}
            }
            tracing::info!(
                outcome = emit.outcome().map_or("none", |o| o.as_str()),
                ms = started.elapsed().as_millis() as u64,
                "run ended"
            );
        }
        .instrument(span)
        .await;
        summary.outcome = emit.outcome().cloned().unwrap_or(ResultType::RunFailed);
        summary.failure_code = emit.failure().map(|f| f.code.clone());
        let mut row = ledger::row(
            ctx,
            harness,
            started_ms,
            emit.outcome(),
            emit.failure(),
            emit.usage(),
        );
        if admitted {
            self.settings.prices.price(&mut row);
        } else {
            row.outcome = "refused".into();
        }
        ledger::record(host, row).await;
        summary
    }

    /// One turn in its three phases, as ARCHITECTURE's "one turn" tells
    /// it: [`prepare`](Bridge::prepare) decides everything a harness
    /// needs, [`drive`](Bridge::drive) runs it, [`settle`](Bridge::settle)
    /// keeps what the host keeps and sends the terminal result.
    async fn turn(
        &self,
        ctx: &AgentRunContext,
        harness: &str,
        run: Run<'_>,
        emit: &mut Emitter,
        summary: &mut RunSummary,
    ) -> Result<(), RunFailed> {
        let Run {
            options,
            cancel,
            spend,
        } = run;
        let mut turn_io = turn::TurnIo {
            ctx,
            options,
            cancel,
            emit,
            summary,
        };
        let Some((mut turn, mut outbox)) = self.prepare(&mut turn_io, harness).await? else {
            return Ok(());
        };
        turn.launch.spend = spend;
        let driven = self.drive(&mut turn_io, &turn, &mut outbox).await?;
        self.settle(&mut turn_io, &turn, driven).await;
        Ok(())
    }
}

/// What the run's MCP tools answer about the turn itself.
fn facts(projection: &Projection, publish: Option<crate::repo::Publishable>) -> RunFacts {
    let input_files = projection
        .input_files
        .iter()
        .map(|f| {
            (
                f.id.clone(),
                InputRef {
                    name: f.name.clone(),
                    artifact_id: f.artifact_id.clone(),
                    copy: f.path.as_ref().map(std::path::PathBuf::from),
                },
            )
        })
        .collect();
    RunFacts {
        current_event: projection.current_event.clone(),
        input_files,
        workspace: projection.workspace.clone(),
        publish,
    }
}
