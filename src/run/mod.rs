//! One turn, end to end: grant → workspace → resume pointer → harness →
//! results → what the host keeps. The [`Bridge`] holds what lives across
//! turns (the host, the grants, the MCP server, the specs and templates);
//! [`Bridge::run`] does one turn and always ends the stream with exactly
//! one `run.completed` or `run.failed`.

mod attempt;
mod emit;
mod outbox;
mod quick;
mod record;

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
pub use outbox::OUTBOX_DIR;
pub use quick::{QuickTurn, new_run_id, quick_context};

use crate::harness::{
    AdapterSpec, Adapters, Launch, ResumePointer, Stdin, TurnValues, child_env, find_program,
    requested_permissions, runner_id,
};
use crate::host::{GrantPolicy, Grants, HostApi};
use crate::mcp::{InputRef, McpHttpServer, RunFacts, RunTools, tool_names};
use crate::projection::{
    Binding, ProjectRequest, Projection, ProjectionError, TOKEN_ENV, Templates, paths, project,
};
use crate::protocol::{
    AgentRunContext, AgentRunResult, Message, ResultPayload, ResultType, RunFailed, StateScope,
    StateUpdated,
};

/// A turn's timeout when neither the binding nor the context sets one.
pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest the bridge waits for one of its own host calls (the resume
/// pointer): the `state.updated` results carry the pointer anyway.
const HOST_CALL_TIMEOUT: Duration = Duration::from_secs(15);
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
}

/// Per-run choices of the trusted front end (the operator's relay plugin
/// config, the service's config) — never taken from the context, which a
/// less trusted caller may write.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Program to run instead of the spec's binary (or the settings' path).
    pub binary: Option<PathBuf>,
    /// Variables set for this run's harness.
    pub env: BTreeMap<String, String>,
    /// Told each harness process group as it starts, so a caller can note
    /// it somewhere that outlives the bridge (the service's journal).
    pub on_spawn: Option<SpawnHook>,
}

/// What a [`SpawnHook`] calls: the process group id and the working
/// directory of a harness that just started.
pub type OnSpawn = dyn Fn(i32, &std::path::Path) + Send + Sync;

/// A callback told each harness that starts.
#[derive(Clone)]
pub struct SpawnHook(pub Arc<OnSpawn>);

impl std::fmt::Debug for SpawnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpawnHook")
    }
}

impl Settings {
    /// Defaults with workspaces under `root`.
    pub fn new(workspace_root: PathBuf) -> Self {
        Settings {
            workspace_root,
            policy: GrantPolicy::default(),
            binaries: BTreeMap::new(),
            pass_env: Vec::new(),
            set_env: BTreeMap::new(),
            turn_timeout: DEFAULT_TURN_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
            record_turns: true,
        }
    }
}

/// What a finished run reports to its caller (the results carry the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// `run.completed` or `run.failed`.
    pub outcome: ResultType,
    /// The failure code, when it failed.
    pub failure_code: Option<String>,
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
}

fn fail(code: &str, error: impl Into<String>) -> RunFailed {
    RunFailed {
        code: code.into(),
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
    }
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
        Ok(Bridge {
            grants,
            tools,
            mcp,
            adapters,
            templates,
            settings,
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

    /// Stop the MCP server.
    pub async fn shutdown(self) {
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
            return Err(fail("cancelled", "the run was cancelled before it started"));
        }
        let spec = self
            .adapters
            .require(harness)
            .map_err(|why| fail("invalid_argument", why))?;
        let binding = Binding::from_config(&ctx.config)
            .map_err(|e| fail("invalid_argument", e.to_string()))?;

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
            .open_run(
                ctx,
                &runner_id(&spec.name),
                &requested_permissions(),
                &self.settings.policy,
            )
            .map_err(|e| fail("invalid_argument", e.message))?;
        let _guard = RunGuard {
            bridge: self,
            run_id: ctx.run_id.clone(),
        };
        let timeout = binding
            .timeout_seconds
            .filter(|s| *s > 0)
            .map_or(self.settings.turn_timeout, Duration::from_secs);
        let deadline = Instant::now() + timeout.min(open.grant.remaining());

        let granted = self.grants.granted(open.grant.clone());
        let target = spec.target();
        let names = tool_names(&open.grant.apis);
        let projection = project(
            &ProjectRequest {
                ctx,
                target: &target,
                runner: &spec.name,
                root: &self.settings.workspace_root,
                tools: &names,
                mcp_url: self.mcp.url(),
                host: Some(&granted),
            },
            &self.templates,
        )
        .await
        .map_err(|e| match e {
            ProjectionError::Binding(_) => fail("invalid_argument", e.to_string()),
            _ => fail("workspace_error", e.to_string()),
        })?;
        let workspace = projection.workspace.clone();
        summary.workspace = Some(workspace.clone());
        self.tools.set_facts(&ctx.run_id, facts(&projection));

        let host = self.grants.host().as_ref();
        if self.settings.record_turns {
            record::inbound(host, ctx)
                .await
                .map_err(|e| fail("runtime_error", format!("cannot record the turn: {e}")))?;
        }

        env.extend(projection.mcp.child_env.clone());
        env.insert(TOKEN_ENV.into(), open.token.expose().to_string());

        let scope = &open.grant.scope;
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
            () = cancel.cancelled() => return Err(fail("cancelled", "the run was cancelled before the harness started")),
        };
        let plan = self.plan_session(spec, pointer.as_ref(), &env, &workspace);
        let mut notice = plan.notice;

        let mut outbox = outbox::Outbox::watch(&projection.dir)
            .map_err(|e| fail("workspace_error", format!("outbox: {e}")))?;
        let mcp_config = workspace.join(paths::MCP_CONFIG.join("/"));
        let mut resume = plan.resume;
        let mut live = attempt::Live {
            emit,
            outbox: &mut outbox,
            host,
            scope,
            deadline,
            cancel,
            grace: self.settings.kill_grace,
            on_spawn: options.on_spawn.as_ref(),
        };
        let end = loop {
            let args = spec.args(&TurnValues {
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
                config_overrides: &projection.mcp.overrides,
            });
            let launch = Launch {
                program: &program,
                args: &args,
                cwd: &workspace,
                env: &env,
                stdin: (spec.stdin == Stdin::Prompt).then_some(projection.turn_prompt.as_str()),
            };
            let end = attempt::attempt(spec, &launch, &mut live).await;
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

        for name in live.outbox.sweep() {
            attempt::send_artifact(&mut live, name).await;
        }
        let emit = live.emit;

        if let Some(session_id) = &end.session_id {
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
            let stored = tokio::time::timeout(
                HOST_CALL_TIMEOUT,
                record::store_pointer(host, scope, &pointer),
            )
            .await;
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
        if self.settings.record_turns {
            if let Err(e) = record::reply(host, ctx, &spec.name, &emit.reply()).await {
                tracing::warn!("cannot record the reply: {e}");
            }
        }

        let terminal = match end.terminal {
            ResultPayload::RunCompleted(mut done) => {
                let mut message = done
                    .message
                    .take()
                    .unwrap_or_else(|| Message::assistant(emit.reply()));
                message.extra.insert(
                    "metadata".into(),
                    json!({"session": {
                        "harness": spec.name,
                        "session_id": end.session_id,
                        "resumed": summary.resumed,
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
            fail(
                "harness_not_found",
                format!(
                    "{} (`{wanted}`) was not found{}: {}",
                    spec.label,
                    if wanted.contains('/') {
                        String::new()
                    } else {
                        " on PATH".to_string()
                    },
                    spec.install_hint
                ),
            )
        })
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
            return SessionPlan {
                resume: None,
                notice: (pointer.harness != spec.name).then(|| {
                    format!(
                        "This conversation switched to {}; it starts a fresh session.",
                        spec.label
                    )
                }),
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
