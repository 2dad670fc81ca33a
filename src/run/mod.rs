//! One turn, end to end: grant → workspace → resume pointer → harness →
//! results → what the host keeps. The [`Bridge`] holds what lives across
//! turns (the host, the grants, the MCP server, the specs and templates);
//! [`Bridge::run`] does one turn and always ends the stream with exactly
//! one `run.completed` or `run.failed`.

mod answers;
mod attempt;
mod emit;
mod live;
mod mcp_file;
mod outbox;
mod queue;
mod quick;
mod record;
mod usage;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use emit::Emitter;
pub use live::{LiveLimits, LiveSessions};
pub use outbox::OUTBOX_DIR;
pub use queue::{QueueFull, Scheduler, Ticket, Turn};
pub use quick::{QuickTurn, new_run_id, quick_context};

use crate::harness::{
    AdapterSpec, Adapters, Launch, ResumePointer, Stdin, TurnValues, child_env,
    env_pattern_matches, find_program, requested_permissions, runner_id,
};
use crate::host::{GrantPolicy, Grants, HostApi, HostResult};
use crate::interaction::{self, Decision, PENDING_KEY, Reply};
use crate::mcp::{InputRef, McpHttpServer, RunFacts, RunTools, tool_names};
use crate::projection::{
    Approvals, Binding, McpCatalog, ProjectRequest, Projection, ProjectionError, TOKEN_ENV,
    Templates, URL_ENV, paths, project,
};
use crate::protocol::FailureCode;
use crate::protocol::{
    ActionRequested, AgentRunContext, AgentRunResult, INTERACTION_REQUESTED, InteractionSubmission,
    Message, ResultPayload, ResultType, RunCompleted, RunFailed, StateScope, StateUpdated,
};
use mcp_file::FilledMcpFile;
use usage::UsageCount;

/// A turn's timeout when neither the binding nor the context sets one.
pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest the bridge waits for one of its own host calls (the resume
/// pointer): the `state.updated` results carry the pointer anyway.
const HOST_CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the bridge's own host calls may still take once a turn's
/// deadline has passed.
const AFTER_DEADLINE: Duration = Duration::from_secs(2);
/// The MCP tool a harness's permission prompts go to under
/// `approvals: chat`, and the spec placeholder that passes it.
const PROMPT_TOOL: &str = "mcp__langbot__approve";
const PROMPT_TOOL_PLACEHOLDER: &str = "permission_prompt_tool";
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

/// What a live attempt needs of its turn.
struct LiveTurn<'a> {
    sessions: &'a LiveSessions,
    driver: &'a str,
    program: &'a std::path::Path,
    workspace: &'a std::path::Path,
    env: &'a BTreeMap<String, String>,
    tools: &'a [&'a str],
    token: &'a crate::host::RunToken,
    grant: &'a Arc<crate::host::RunGrant>,
    prompt: &'a str,
    /// The files sent with the turn, for a protocol that takes them.
    files: &'a [live::PromptFile],
    run_id: &'a str,
    /// How this turn's input answers the conversation's open request.
    answer: &'a Reply,
    /// `{permission_prompt_tool}` in the live mode (`approvals: chat`).
    prompt_tool: Option<&'a str>,
    /// The wall the harness runs behind (`None`: uncaged).
    wall: Option<&'a crate::harness::cage::Plan>,
    /// The conversation's resource limits (`None`: none).
    quota: Option<&'a crate::harness::cage::Quota>,
    /// The MCP servers for a driver that names them in its protocol.
    mcp_session: Option<&'a serde_json::Value>,
}

/// How the turn picks its session.
struct SessionPlan {
    resume: Option<String>,
    notice: Option<String>,
}

impl Bridge {
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
                .and_then(|spec| spec.live.as_ref())
                .and_then(|live| crate::harness::live::driver(&live.driver))
                .is_some_and(|driver| driver.steers())
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
        async {
            tracing::info!("run started");
            if let Err(failure) = self
                .turn(ctx, harness, options, &mut emit, &cancel, &mut summary)
                .await
            {
                tracing::warn!(code = %failure.code, "run failed: {}", failure.error);
                emit.send(vec![ResultPayload::RunFailed(failure)]).await;
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
        summary
    }

    async fn turn(
        &self,
        ctx: &AgentRunContext,
        harness: &str,
        options: &RunOptions,
        emit: &mut Emitter,
        cancel: &CancellationToken,
        summary: &mut RunSummary,
    ) -> Result<(), RunFailed> {
        // Cancelled before it began (while queued): nothing is written,
        // recorded or started.
        if cancel.is_cancelled() {
            return Err(fail(
                FailureCode::Cancelled,
                "the run was cancelled before it started",
            ));
        }
        let spec = self
            .adapters
            .require(harness)
            .map_err(|why| fail(FailureCode::InvalidArgument, why))?;
        let binding = Binding::from_config(&ctx.config)
            .map_err(|e| fail(FailureCode::InvalidArgument, e.to_string()))?;
        let approvals = binding.approvals == Approvals::Chat;
        // A live harness may ask in its own protocol (Codex's app-server).
        let asks_live = (self.live.is_some() || spec.live_only())
            && spec
                .live
                .as_ref()
                .and_then(|live| crate::harness::live::driver(&live.driver))
                .is_some_and(|driver| driver.asks());
        if approvals && !spec.takes(PROMPT_TOOL_PLACEHOLDER) && !asks_live {
            return Err(fail(
                FailureCode::InvalidArgument,
                format!(
                    "`approvals: chat` needs a harness that hands its permission prompts to \
                     the bridge, and {} does not here; choose what it may do with \
                     `permission_mode` instead",
                    spec.label
                ),
            ));
        }

        // `vars()` would panic on a variable that is not UTF-8; such a
        // variable is simply not passed on.
        let vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let mut env = child_env(
            &spec.env,
            &self.settings.pass_env,
            &self.settings.set_env,
            &options.env,
            &vars,
        );
        let program = self.program(spec, options, &env)?;

        let open = self
            .grants
            .open_run_on(
                ctx,
                &runner_id(&spec.name),
                &requested_permissions(),
                &self.settings.policy,
                options.host.clone(),
            )
            .map_err(|e| fail(FailureCode::InvalidArgument, e.message))?;
        let _guard = RunGuard {
            bridge: self,
            run_id: ctx.run_id.clone(),
        };
        // A turn whose deadline passed while it waited (in a host's queue,
        // in ours) starts nothing: its answer would come too late anyway.
        if open.grant.remaining().is_zero() {
            return Err(RunFailed {
                code: FailureCode::DeadlineExceeded,
                error: "the run's deadline (runtime.deadline_at) had passed before it began; \
                        nothing was started"
                    .into(),
                retryable: true,
            });
        }
        let scope = &open.grant.scope;
        let host = options
            .host
            .as_deref()
            .unwrap_or_else(|| self.grants.host().as_ref());
        let pending = tokio::select! {
            found = tokio::time::timeout(HOST_CALL_TIMEOUT, record::pending(host, scope)) => {
                found.unwrap_or_else(|_| {
                    tracing::warn!("the host did not answer the open request lookup");
                    None
                })
            }
            () = cancel.cancelled() => return Err(fail(FailureCode::Cancelled, "the run was cancelled before the harness started")),
        };
        let submission = InteractionSubmission::from_input(&ctx.input.extra);
        let actor = ctx.actor.as_ref().and_then(|a| a.actor_id.as_deref());
        let answer = interaction::reply(
            pending.as_ref(),
            submission.as_ref(),
            &ctx.input.to_text(),
            interaction::Answerer {
                id: actor,
                approvers: &binding.approvers,
            },
            crate::host::now_ms() / 1000,
        );
        if let Some(pending) = &pending {
            answers::audit(
                &self.grants.granted(open.grant.clone()),
                pending,
                &answer,
                actor,
            )
            .await;
        }
        let mut answered = None;
        let approved = match &answer {
            Reply::Stale(sentence) | Reply::NotYours(sentence) => {
                // A card answered after its time, or someone else's
                // request: the person is told, and nothing runs.
                emit.send(vec![ResultPayload::RunCompleted(RunCompleted {
                    finish_reason: "stop".into(),
                    message: Some(Message::assistant(sentence.clone())),
                })])
                .await;
                return Ok(());
            }
            Reply::Answer { prompt, approved } => {
                let mut with_answer = ctx.clone();
                with_answer.input.text = Some(prompt.clone());
                answered = Some(with_answer);
                approved.clone()
            }
            Reply::Unrelated { .. } => None,
        };
        let turn_ctx = answered.as_ref().unwrap_or(ctx);
        let asking = binding.asking(scope.conversation_id.is_some());
        self.tools
            .interactions()
            .open(&ctx.run_id, approved, asking);

        let timeout = binding
            .timeout_seconds
            .filter(|s| *s > 0)
            .map_or(self.settings.turn_timeout, Duration::from_secs);
        let deadline = Instant::now() + timeout.min(open.grant.remaining());

        let granted = self.grants.granted(open.grant.clone());
        let target = spec.target();
        let names = tool_names(&open.grant.apis, asking);
        let mut servers = self.settings.mcp_servers.clone();
        servers.extend(options.mcp_servers.clone());
        let projection = project(
            &ProjectRequest {
                ctx: turn_ctx,
                target: &target,
                runner: &spec.name,
                root: &self.settings.workspace_root,
                tools: &names,
                mcp_url: self.mcp.url(),
                mcp_servers: &servers,
                host: Some(&granted),
                env: &env,
            },
            &self.templates,
        )
        .await
        .map_err(|e| match e {
            ProjectionError::Binding(_) => fail(FailureCode::InvalidArgument, e.to_string()),
            _ => {
                tracing::error!(error = %e, "cannot write the workspace");
                let root = &self.settings.workspace_root;
                fail(FailureCode::WorkspaceError, e.within(root).to_string())
            }
        })?;
        let workspace = projection.workspace.clone();
        summary.workspace = Some(workspace.clone());
        self.tools.set_facts(&ctx.run_id, facts(&projection));

        if self.settings.record_turns {
            record::inbound(host, ctx).await.map_err(|e| {
                fail(
                    FailureCode::RuntimeError,
                    format!("cannot record the turn: {e}"),
                )
            })?;
        }

        // The conversation's own home replaces the operator's (`HOME`,
        // `CODEX_HOME`…): before anything reads `env` for the harness's
        // files (the session check), and before the extra servers' check,
        // which then refuses a server variable that would move the home.
        if let Some(home) = &projection.home {
            for (var, path) in &home.vars {
                env.insert(var.clone(), path.to_string_lossy().into_owned());
            }
        }
        // Extra servers' secrets ride the child's environment (Codex reads
        // them by name); they must never change a variable the harness
        // itself reads (`CODEX_HOME`, a key, `PATH`).
        if let Some(name) = projection.mcp.child_env.keys().find(|name| {
            env.contains_key(*name)
                || *name == TOKEN_ENV
                || spec
                    .env
                    .pass
                    .iter()
                    .chain(&self.settings.pass_env)
                    .any(|pattern| env_pattern_matches(pattern, name))
        }) {
            return Err(fail(
                FailureCode::InvalidArgument,
                format!(
                    "an extra MCP server's environment sets `{name}`, which {} reads itself; \
                     the operator must give that server's variable another name",
                    spec.label
                ),
            ));
        }
        env.extend(projection.mcp.child_env.clone());
        env.insert(TOKEN_ENV.into(), open.token.expose().to_string());
        env.insert(URL_ENV.into(), self.mcp.url().to_string());
        // A harness that cannot expand `${VAR}` in its MCP file reads the
        // token from the file itself, for this turn only.
        let _filled = match &projection.mcp.file {
            Some(file) if file.fill_env => Some(
                FilledMcpFile::write(&projection.dir, file, &env).map_err(|e| {
                    let root = &self.settings.workspace_root;
                    fail(FailureCode::WorkspaceError, e.within(root).to_string())
                })?,
            ),
            _ => None,
        };

        // The bridge's own host calls are bounded too: a host that does not
        // answer must not hold the turn past its deadline.
        let host_wait = (Instant::now() + HOST_CALL_TIMEOUT).min(deadline);
        let pointer = tokio::select! {
            found = tokio::time::timeout_at(host_wait, record::pointer(host, scope, ctx)) => {
                found.unwrap_or_else(|_| {
                    tracing::warn!("the host did not answer the resume pointer lookup; starting fresh");
                    None
                })
            }
            () = cancel.cancelled() => return Err(fail(FailureCode::Cancelled, "the run was cancelled before the harness started")),
        };
        let plan = self.plan_session(spec, pointer.as_ref(), &env, &workspace);
        // A caged harness cannot write the shared `/tmp`: its own instead.
        if self.settings.cage.enabled {
            projection.dir.ensure_dir(&paths::TMP).map_err(|e| {
                let root = &self.settings.workspace_root;
                fail(
                    FailureCode::WorkspaceError,
                    format!("temp folder: {}", e.within(root)),
                )
            })?;
            env.insert(
                "TMPDIR".into(),
                workspace
                    .join(paths::TMP.join("/"))
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        // A harness that serves itself gets one port for it.
        let own_port = if spec.mentions("own_port") {
            Some(crate::harness::cage::free_loopback_port().map_err(|e| {
                fail(
                    FailureCode::RuntimeError,
                    format!("no free loopback port for {}: {e}", spec.label),
                )
            })?)
        } else {
            None
        };
        // The binding may choose the network of its own harness.
        let mut cage = self.settings.cage.clone();
        if let Some(choice) = binding.network {
            cage.network = match choice {
                crate::projection::NetworkChoice::Ports => crate::harness::cage::Network::Ports,
                crate::projection::NetworkChoice::Open => crate::harness::cage::Network::Open,
            };
        }
        cage.ports.extend(&binding.network_ports);
        let wall = cage.plan(&crate::harness::cage::Subject {
            workspace: &workspace,
            program: &program,
            env: &env,
            carried: projection
                .home
                .as_ref()
                .map_or(&[][..], |home| home.carried.as_slice()),
            own_port,
        });
        // Every process of the conversation, in its limits; a turn that
        // hits one fails `resource_limit`, named by the group's counters.
        let quota = crate::harness::cage::quota(&workspace, &self.settings.cage.limits)
            .map_err(|e| {
                tracing::error!(workspace = %workspace.display(), error = %e, "cannot apply the conversation's limits");
                fail(
                    FailureCode::HarnessError,
                    "cannot apply the conversation's resource limits (see the bridge's log)",
                )
            })?;
        let counted = quota.as_ref().map(crate::harness::cage::Quota::counters);
        let mut notice = plan.notice;
        // Which live process served the turn, for the operator's eyes.
        let mut process_facts = serde_json::Value::Null;

        let mut outbox = outbox::Outbox::watch(&projection.dir).map_err(|e| {
            tracing::error!(workspace = %workspace.display(), error = %e, "cannot watch the outbox");
            let root = &self.settings.workspace_root;
            fail(FailureCode::WorkspaceError, format!("outbox: {}", e.within(root)))
        })?;
        let mcp_config = workspace.join(
            projection
                .mcp
                .file
                .as_ref()
                .map_or(paths::MCP_CONFIG, |f| f.path)
                .join("/"),
        );
        let mut resume = plan.resume;
        let mut inbox = match &options.steer {
            Some(inbox) => Some(inbox.0.lock().await),
            None => None,
        };
        let token = &open.token;
        let bind = |process: &crate::harness::HarnessProcess| {
            if let Some(holder) = process.holder() {
                self.grants.bind(token, holder);
            }
        };
        let mut live = attempt::Live {
            emit,
            outbox: &mut outbox,
            host,
            scope,
            deadline,
            cancel,
            grace: self.settings.kill_grace,
            on_spawn: options.on_spawn.as_ref(),
            bind: &bind,
            steer: inbox.as_deref_mut(),
        };
        // A live-only harness (an ACP agent) where no processes are kept
        // (`harness-bridge run`): one process for this turn, stopped after.
        let prompt_files = live::prompt_files(&projection);
        let usage_path = workspace.join(paths::USAGE.join("/"));
        let once = (self.live.is_none() && spec.live_only())
            .then(|| LiveSessions::new(live::LiveLimits::default(), self.settings.kill_grace));
        let sessions = self.live.as_ref().or(once.as_ref());
        let end = loop {
            let values = TurnValues {
                prompt: &projection.turn_prompt,
                instructions: Some(&projection.instructions),
                mcp_config: projection
                    .mcp
                    .file
                    .is_some()
                    .then_some(mcp_config.as_path()),
                session_id: resume.as_deref(),
                model: binding.model.as_deref(),
                permission_mode: binding.permission_mode.as_deref(),
                permission_prompt_tool: approvals.then_some(PROMPT_TOOL),
                config_overrides: &projection.mcp.overrides,
                own_port,
                sandbox: spec.family.sandbox.map(|modes| {
                    if self.settings.cage.enabled {
                        modes.caged
                    } else {
                        modes.uncaged
                    }
                }),
                usage_file: spec
                    .family
                    .usage_file
                    .is_some()
                    .then_some(usage_path.as_path()),
            };
            let end = match (sessions, spec.live.as_ref()) {
                (Some(sessions), Some(live_spec)) => {
                    let turn = LiveTurn {
                        sessions,
                        driver: &live_spec.driver,
                        program: &program,
                        workspace: &workspace,
                        env: &env,
                        tools: &names,
                        token: &open.token,
                        grant: &open.grant,
                        prompt: &projection.turn_prompt,
                        files: &prompt_files,
                        run_id: &ctx.run_id,
                        answer: &answer,
                        prompt_tool: live_spec.permission_prompt_tool.as_deref(),
                        mcp_session: projection.mcp.session.as_ref(),
                        wall: wall.as_ref(),
                        quota: quota.as_ref(),
                    };
                    let (end, warm, facts) =
                        self.live_attempt(spec, &turn, &values, &mut live).await?;
                    process_facts = facts;
                    if warm {
                        // The process goes on from the last turn: the
                        // session continued whatever the pointer said.
                        resume = resume.or_else(|| end.session_id.clone());
                    }
                    end
                }
                _ => {
                    let args = spec
                        .args(&values)
                        .map_err(|why| fail(FailureCode::InvalidArgument, why))?;
                    let counted = spec
                        .family
                        .usage_file
                        .map(|file| (file, UsageCount::before(&projection.dir)));
                    let launch = Launch {
                        program: &program,
                        args: &args,
                        cwd: &workspace,
                        env: &env,
                        stdin: (spec.stdin == Stdin::Prompt)
                            .then_some(projection.turn_prompt.as_str()),
                        wall: wall.as_ref(),
                        quota: quota.as_ref(),
                    };
                    let mut end = attempt::attempt(spec, &launch, &mut live).await;
                    if let Some((file, before)) = counted {
                        end.usage = end.usage.or_else(|| before.after(file, &projection.dir));
                    }
                    end
                }
            };
            let missing = matches!(end.terminal, ResultPayload::RunFailed(_))
                && end.session_not_found
                && !cancel.is_cancelled()
                && Instant::now() < deadline;
            match resume.take() {
                Some(old) if missing => {
                    notice = Some(format!(
                        "The previous {} session ({old}) could not be resumed; this turn started a fresh session.",
                        spec.label
                    ));
                    tracing::info!("session {old} not found; retrying as a fresh session");
                }
                other => {
                    summary.resumed = other.is_some();
                    break end;
                }
            }
        };

        if let Some(once) = once {
            once.shutdown().await;
        }
        let mut end = end;
        if let (Some(quota), Some(before)) = (&quota, &counted) {
            // Read after the harness (one-shot) and all it left are gone,
            // or after the live turn: the counts are this turn's.
            if let Some(hit) = quota.hit_since(before) {
                tracing::warn!("{hit}");
                if !cancel.is_cancelled() {
                    end.terminal = ResultPayload::RunFailed(fail(FailureCode::ResourceLimit, hit));
                }
            }
        }
        for name in live.outbox.sweep() {
            attempt::push_artifact(&mut live, name).await;
        }
        let emit = live.emit;
        emit.set_usage(end.usage.clone());

        // A session id the harness printed is kept only in the form the
        // spec says its ids take: the pointer is passed back to it.
        let session_id = end.session_id.clone().filter(|id| {
            let fits = spec.session_id_format.accepts(id);
            if !fits {
                tracing::warn!(
                    "{} named its session `{}`, which is not {}; it is not kept",
                    spec.label,
                    id.escape_debug().take(80).collect::<String>(),
                    spec.session_id_format.describe()
                );
            }
            fits
        });
        if let Some(session_id) = &session_id {
            summary.session_id = Some(session_id.clone());
            let pointer = ResumePointer {
                harness: spec.name.clone(),
                session_id: session_id.clone(),
                working_directory: workspace.to_string_lossy().into_owned(),
            };
            let updates = pointer
                .entries()
                .into_iter()
                .map(|(key, value)| {
                    ResultPayload::StateUpdated(StateUpdated {
                        scope: StateScope::Conversation,
                        key: key.into(),
                        value,
                    })
                })
                .collect();
            emit.send(updates).await;
            // Bounded by the deadline too: a host that does not answer must
            // not hold a stopped turn's answer back (the `state.updated`
            // results above carry the pointer anyway).
            let wait = (Instant::now() + HOST_CALL_TIMEOUT).min(deadline + AFTER_DEADLINE);
            let stored =
                tokio::time::timeout_at(wait, record::store_pointer(host, scope, &pointer)).await;
            match stored {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!("cannot store the resume pointer: {e}")
                }
                Err(_) => {
                    tracing::warn!("the host did not answer storing the resume pointer")
                }
            }
        }
        // What this turn asked the person goes out as a card and stays in
        // the conversation's state until answered; an answered or lapsed
        // request is cleared.
        let asked = self.tools.interactions().close(&ctx.run_id).map(|mut p| {
            p.asked_by = ctx.actor.as_ref().and_then(|a| {
                Some(interaction::Asker {
                    id: a.actor_id.clone()?,
                    name: a.actor_name.clone(),
                })
            });
            p
        });
        let kept = match &asked {
            Some(pending) => {
                if let Some(whole) = answers::attachment(pending) {
                    emit.send(vec![ResultPayload::ArtifactCreated(whole)]).await;
                }
                let request = pending.request(&spec.label);
                let payload = serde_json::to_value(&request)
                    .ok()
                    .and_then(|v| v.as_object().cloned());
                emit.send(vec![ResultPayload::ActionRequested(ActionRequested {
                    action: INTERACTION_REQUESTED.into(),
                    target: None,
                    payload,
                })])
                .await;
                serde_json::to_value(pending).ok()
            }
            None => answer.clears().then_some(serde_json::Value::Null),
        };
        if let Some(value) = kept {
            emit.send(vec![ResultPayload::StateUpdated(StateUpdated {
                scope: StateScope::Conversation,
                key: PENDING_KEY.into(),
                value: value.clone(),
            })])
            .await;
            let wait = (Instant::now() + HOST_CALL_TIMEOUT).min(deadline + AFTER_DEADLINE);
            let stored =
                tokio::time::timeout_at(wait, record::store_pending(host, scope, value)).await;
            if !matches!(stored, Ok(Ok(()))) {
                tracing::warn!("cannot keep the open request in the conversation's state");
            }
        }
        if self.settings.record_turns {
            if let Err(e) = record::reply(host, ctx, &spec.name, &emit.reply()).await {
                tracing::warn!("cannot record the reply: {e}");
            }
        }

        let terminal = match end.terminal {
            // A turn that asked the person ends with the question, even
            // when the harness was interrupted to stop it going on.
            ResultPayload::RunFailed(failed)
                if asked.is_some() && failed.code == "harness_error" && !cancel.is_cancelled() =>
            {
                tracing::info!(
                    "the harness stopped after asking the person: {}",
                    failed.error
                );
                ResultPayload::RunCompleted(RunCompleted {
                    finish_reason: "interaction_requested".into(),
                    message: None,
                })
            }
            other => other,
        };
        let terminal = match terminal {
            ResultPayload::RunCompleted(mut done) => {
                let mut message = done
                    .message
                    .take()
                    .unwrap_or_else(|| Message::assistant(emit.reply()));
                message.extra.insert(
                    "metadata".into(),
                    json!({"session": {
                        "harness": spec.name,
                        "session_id": session_id,
                        "resumed": summary.resumed,
                        "process": process_facts,
                        "notice": notice,
                    }}),
                );
                done.message = Some(message);
                ResultPayload::RunCompleted(done)
            }
            ResultPayload::RunFailed(mut failed) => {
                if let Some(notice) = notice {
                    failed.error = format!("{}\n({notice})", failed.error);
                }
                ResultPayload::RunFailed(failed)
            }
            other => other,
        };
        emit.send(vec![terminal]).await;
        Ok(())
    }

    /// The harness program: the operator's path, else the spec's binary on
    /// the child's PATH; missing → `harness_not_found` with the install hint.
    fn program(
        &self,
        spec: &AdapterSpec,
        options: &RunOptions,
        env: &BTreeMap<String, String>,
    ) -> Result<PathBuf, RunFailed> {
        let wanted = options
            .binary
            .as_ref()
            .or_else(|| self.settings.binaries.get(&spec.name))
            .map_or_else(|| spec.binary.clone(), |p| p.to_string_lossy().into_owned());
        find_program(&wanted, env.get("PATH").map(String::as_str)).ok_or_else(|| {
            // A configured path is the operator's, named in the log; the
            // client is told which program, not where it was looked for.
            let place = match wanted.rsplit_once('/') {
                Some((_, name)) => {
                    tracing::warn!(program = %wanted, "the configured harness program is not there");
                    format!("`{name}`) was not found where configured")
                }
                None => format!("`{wanted}`) was not found on PATH"),
            };
            fail(
                FailureCode::HarnessNotFound,
                format!("{} ({place}: {}", spec.label, spec.install_hint),
            )
        })
    }

    /// One attempt on a live process: the conversation's kept one when it
    /// would have been started the same way, else a new one (resuming the
    /// stored session) that is kept afterwards if it stays healthy.
    /// Returns whether the process was a kept (warm) one, and what to show
    /// of it.
    async fn live_attempt(
        &self,
        spec: &AdapterSpec,
        turn: &LiveTurn<'_>,
        values: &TurnValues<'_>,
        live: &mut attempt::Live<'_>,
    ) -> Result<(attempt::AttemptEnd, bool, serde_json::Value), RunFailed> {
        // A live harness asks its permissions its own way, where it can.
        let values = &TurnValues {
            permission_prompt_tool: values
                .permission_prompt_tool
                .map(|tool| turn.prompt_tool.unwrap_or(tool)),
            ..values.clone()
        };
        // A process is known by how a fresh one would start (on whatever
        // port of its own).
        let fresh = TurnValues {
            session_id: None,
            own_port: None,
            ..values.clone()
        };
        let fresh_args = spec
            .live_args(&fresh)
            .unwrap_or_else(|| Ok(Vec::new()))
            .map_err(|why| fail(FailureCode::InvalidArgument, why))?;
        let key_launch = Launch {
            program: turn.program,
            args: &fresh_args,
            cwd: turn.workspace,
            env: turn.env,
            stdin: None,
            wall: turn.wall,
            quota: turn.quota,
        };
        let asks = values.permission_prompt_tool.is_some();
        let key = live::LiveKey::new(spec, &key_launch, turn.tools, asks, TOKEN_ENV);
        let mut kept = turn.sessions.take(&key).await;
        // A process paused on a permission takes only the answer to it;
        // anything else (the request lapsed, another message) starts over
        // in a new process, resuming the session without the paused call.
        let permit = kept
            .as_ref()
            .and_then(|p| p.paused.as_ref())
            .map(|paused| self.permit(turn, paused));
        if matches!(permit, Some(None)) {
            if let Some(process) = kept.take() {
                tracing::info!(
                    "the paused request was not answered; the turn starts a new process"
                );
                process.stop(self.settings.kill_grace).await;
            }
        }
        let mut permit = permit.flatten();
        let mut warm = kept.is_some();
        let interactions = self.tools.interactions();
        let now = crate::host::now_ms() / 1000;
        let decide = |tool: &str, input: &serde_json::Value| {
            interactions.decide_live(turn.run_id, tool, input, now)
        };
        loop {
            let mut process = match kept.take() {
                Some(process) => {
                    self.grants.lend(&process.token, turn.grant.clone());
                    crate::metrics::global().live_turn("warm");
                    process
                }
                None => self.spawn_live(spec, turn, values, live).await?,
            };
            let opening = match permit.take() {
                Some(decision) => live::Opening::Permit(decision),
                None => live::Opening::Prompt(live::Prompt {
                    text: turn.prompt,
                    files: turn.files,
                }),
            };
            let serving = turn.sessions.serving(&spec.name, &process);
            let ended = live::turn(spec, &mut process, opening, &decide, live).await;
            drop(serving);
            if warm && ended.untouched {
                // It died while idle and is found only now: the turn goes
                // to a new process, resuming the session, as if it had
                // been found dead.
                tracing::info!(
                    "the live harness process had ended; the turn resumes its session in a new one"
                );
                warm = false;
                continue;
            }
            let facts = json!({
                "pid": process.pid(),
                "turn": process.turns,
                "warm": warm,
                "kept": ended.healthy,
            });
            if ended.healthy {
                // The process stays for the next turn; what this turn
                // detached from it does not.
                process.process().clear_detached().await;
                turn.sessions.put(key, process).await;
            }
            return Ok((ended.end, warm, facts));
        }
    }

    /// The answer a paused live process gets from this turn: the approved
    /// call goes on (once), anything the person said otherwise refuses it
    /// with their words; `None` when the turn does not answer it.
    fn permit(
        &self,
        turn: &LiveTurn<'_>,
        paused: &crate::harness::live::PermissionRequest,
    ) -> Option<Decision> {
        let Reply::Answer { prompt, approved } = turn.answer else {
            return None;
        };
        let fingerprint = interaction::fingerprint(&paused.tool, &paused.input);
        if approved.is_some()
            && self
                .tools
                .interactions()
                .take_approved(turn.run_id, &fingerprint)
        {
            return Some(Decision::Allow(paused.input.clone()));
        }
        Some(Decision::Deny {
            message: prompt.clone(),
            interrupt: false,
        })
    }

    /// A new live process for `turn`, resuming `values.session_id`.
    async fn spawn_live(
        &self,
        spec: &AdapterSpec,
        turn: &LiveTurn<'_>,
        values: &TurnValues<'_>,
        live: &attempt::Live<'_>,
    ) -> Result<live::LiveProcess, RunFailed> {
        let args = spec
            .live_args(values)
            .unwrap_or_else(|| Ok(Vec::new()))
            .map_err(|why| fail(FailureCode::InvalidArgument, why))?;
        let launch = Launch {
            program: turn.program,
            args: &args,
            cwd: turn.workspace,
            env: turn.env,
            stdin: None,
            wall: turn.wall,
            quota: turn.quota,
        };
        let mut driver = crate::harness::live::driver_for(spec).ok_or_else(|| {
            fail(
                FailureCode::HarnessError,
                format!("unknown live driver `{}`", turn.driver),
            )
        })?;
        if values.permission_prompt_tool.is_some() {
            driver.ask_permissions();
        }
        let pattern = spec.target().tool_name;
        let setup = crate::harness::live::Setup {
            own_tools: turn
                .tools
                .iter()
                .map(|tool| {
                    pattern
                        .replace("{server}", crate::projection::BRIDGE_SERVER)
                        .replace("{tool}", tool)
                })
                .collect(),
            cwd: turn.workspace.to_path_buf(),
            mcp_servers: turn
                .mcp_session
                .map_or(serde_json::Value::Array(Vec::new()), |servers| {
                    crate::projection::fill_mcp_env(servers, turn.env)
                }),
        };
        let process = live::LiveProcess::spawn(&launch, driver, turn.token.clone(), values.session_id, &setup)
            .await
            .map_err(|e| {
                tracing::error!(program = %turn.program.display(), error = %e, "cannot start the harness");
                fail(FailureCode::HarnessError, format!("cannot start {}: {e}", spec.label))
            })?;
        tracing::info!(harness = %spec.name, pid = ?process.pid(), "live harness started");
        (live.bind)(process.process());
        if let (Some(hook), Some(pgid)) = (live.on_spawn, process.process().pgid()) {
            (hook.0)(&Spawned {
                pgid,
                workspace: turn.workspace,
                marker: process.process().marker(),
            });
        }
        crate::metrics::global().live_turn("cold");
        Ok(process)
    }

    fn plan_session(
        &self,
        spec: &AdapterSpec,
        pointer: Option<&ResumePointer>,
        env: &BTreeMap<String, String>,
        workspace: &std::path::Path,
    ) -> SessionPlan {
        let Some(pointer) = pointer else {
            return SessionPlan {
                resume: None,
                notice: None,
            };
        };
        if !pointer.fits(&spec.name, workspace) {
            // Another harness (or workspace) owned the conversation: a
            // fresh session, and no error.
            // Or the session was kept in another workspace: another bridge
            // instance's, which ran the conversation until it went away.
            let notice = if pointer.harness != spec.name {
                format!(
                    "This conversation switched to {}; it starts a fresh session.",
                    spec.label
                )
            } else {
                format!(
                    "The previous {} session was kept in another workspace (another bridge \
                     instance ran this conversation); this turn started a fresh session, and \
                     the conversation's history is still there.",
                    spec.label
                )
            };
            return SessionPlan {
                resume: None,
                notice: Some(notice),
            };
        }
        if !spec.session_id_format.accepts(&pointer.session_id) {
            tracing::warn!(
                "the stored session id is not {}; starting a fresh session",
                spec.session_id_format.describe()
            );
            return SessionPlan {
                resume: None,
                notice: Some(format!(
                    "The stored session id is not a {} session id ({}); this turn started a fresh session.",
                    spec.label,
                    spec.session_id_format.describe()
                )),
            };
        }
        if !spec
            .session_store
            .has_session(env, workspace, &pointer.session_id)
        {
            return SessionPlan {
                resume: None,
                notice: Some(format!(
                    "The previous {} session ({}) no longer exists; this turn started a fresh session.",
                    spec.label, pointer.session_id
                )),
            };
        }
        SessionPlan {
            resume: Some(pointer.session_id.clone()),
            notice: None,
        }
    }
}

/// What the run's MCP tools answer about the turn itself.
fn facts(projection: &Projection) -> RunFacts {
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
    }
}
