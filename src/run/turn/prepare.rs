//! The turn's first phase: everything decided before a harness runs.
//!
//! In order: the spec and the binding (parsed once, here), the program,
//! the grant, the answer this input gives an open request, the workspace,
//! the harness's environment, the session to resume and the cage. Each
//! step either adds to the turn or refuses it with one `run.failed`;
//! nothing is started, so a refusal leaves no process behind.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::mcp_file::FilledMcpFile;
use super::{answers, publish, record};
use crate::harness::cage::{Counters, Network, Plan, Quota, Subject};
use crate::harness::{
    AdapterSpec, ResumePointer, child_env, env_pattern_matches, find_program,
    requested_permissions, runner_id,
};
use crate::host::{HostApi, OpenRun};
use crate::interaction::{self, Ask, Asking, Reply};
use crate::mcp::tool_names;
use crate::projection::{
    Approvals, Binding, NetworkChoice, ProjectNote, ProjectRequest, Projection, ProjectionError,
    TOKEN_ENV, URL_ENV, paths, safe_component, shared_workspace,
};
use crate::protocol::{
    AgentRunContext, FailureCode, InteractionSubmission, Message, ResultPayload, RunCompleted,
    RunFailed,
};
use crate::repo::{Checkout, Project, ProjectMode, Publishable, Snapshot};
use crate::run::io::outbox::Outbox;
use crate::run::{
    Bridge, Emitter, HOST_CALL_TIMEOUT, RunGuard, RunOptions, SessionPlan, facts, fail, follow,
};

/// What `prepare` hands the harness phases: the turn, decided. What both
/// phases read is here; what only `drive` reads (how the harness starts
/// and is watched) is [`LaunchPlan`], what only `settle` reads is the
/// checkout. (The outbox's watch comes beside it: `drive` reads it while
/// it reads this.)
pub(in crate::run) struct Prepared<'a> {
    pub spec: &'a AdapterSpec,
    pub binding: Binding<'a>,
    /// The harness's whole environment (token and MCP URL included).
    pub env: BTreeMap<String, String>,
    pub open: OpenRun,
    /// The host the turn's own reads and writes go to.
    pub host: &'a dyn HostApi,
    /// How this input answers the conversation's open request.
    pub answer: Reply,
    /// When the turn must be over.
    pub deadline: Instant,
    pub projection: Projection,
    pub workspace: PathBuf,
    /// How the harness starts and is watched: `drive`'s alone.
    pub launch: LaunchPlan<'a>,
    /// The conversation's worktree of its project, and how it was before
    /// the turn (what the turn changed is told at its end): `settle`'s.
    pub checkout: Option<(Checkout, Snapshot)>,
    /// A shared project's turn, held until this turn has ended.
    _shared_turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// The token-filled MCP file, removed when the turn ends.
    _filled: Option<FilledMcpFile>,
    /// Closes the grant however the turn ends.
    _guard: RunGuard<'a>,
}

/// How the harness starts and is watched, as `prepare` decided it.
pub(in crate::run) struct LaunchPlan<'a> {
    /// What the turn may spend before it is stopped (set once admitted).
    pub spend: Option<&'a crate::run::budget::SpendWatch>,
    /// `approvals: chat`: permission prompts go to the person.
    pub approvals: bool,
    pub program: PathBuf,
    /// The MCP tools the run offers.
    pub tools: Vec<&'static str>,
    /// The session to resume, and what to tell the person about it.
    pub session: SessionPlan,
    /// The harness's own loopback port, where it serves itself.
    pub own_port: Option<u16>,
    /// The wall the harness runs behind (`None`: uncaged).
    pub wall: Option<Plan>,
    /// Who answers its door, in a network of its own.
    pub door: Option<std::sync::Arc<dyn crate::harness::DoorKeeper>>,
    /// The `{config_overrides}` items: the MCP servers' and the model
    /// gateway's.
    pub config_overrides: Vec<String>,
    /// The conversation's resource limits, and their counts before the turn.
    pub quota: Option<Quota>,
    pub counted: Option<Counters>,
    /// The MCP configuration file the harness reads.
    pub mcp_config: PathBuf,
}

/// What the request and the operator's settings decide before any host
/// call: which harness, how bound, with what program.
struct Admitted<'a> {
    spec: &'a AdapterSpec,
    binding: Binding<'a>,
    project: Option<&'a Project>,
    approvals: bool,
    env: BTreeMap<String, String>,
    program: PathBuf,
}

/// The turn being prepared, once admitted and its grant open: what every
/// later step reads, decided once (the binding parsed once, here, and
/// handed to the projection).
struct Turn<'t> {
    ctx: &'t AgentRunContext,
    spec: &'t AdapterSpec,
    binding: &'t Binding<'t>,
    project: Option<&'t Project>,
    open: &'t OpenRun,
    /// The host the turn's own reads and writes go to.
    host: &'t dyn HostApi,
    options: &'t RunOptions,
    cancel: &'t CancellationToken,
}

/// What the cage phase decides for one turn.
struct Caged {
    own_port: Option<u16>,
    wall: Option<Plan>,
    quota: Option<Quota>,
}

/// The resume pointer the host keeps for the conversation. The bridge's
/// own host calls are bounded too: a host that does not answer must not
/// hold the turn past its deadline.
async fn lookup_pointer(
    turn: &Turn<'_>,
    deadline: Instant,
) -> Result<Option<ResumePointer>, RunFailed> {
    let host_wait = (Instant::now() + HOST_CALL_TIMEOUT).min(deadline);
    let scope = &turn.open.grant.scope;
    let cancel = turn.cancel;
    tokio::select! {
        found = tokio::time::timeout_at(host_wait, record::pointer(turn.host, scope, turn.ctx)) => {
            Ok(found.unwrap_or_else(|_| {
                tracing::warn!("the host did not answer the resume pointer lookup; starting fresh");
                None
            }))
        }
        () = cancel.cancelled() => Err(fail(FailureCode::Cancelled, "the run was cancelled before the harness started")),
    }
}

/// Whether the harness's `program` can be run by `owner`, the user a
/// root bridge's caged harness is outside its namespace: passage given
/// through folders shut to others on the way (an entry for that user
/// alone); where it still cannot, the turn fails saying so (the paths in
/// the log).
fn runnable_by(
    owner: &crate::owner::Owner,
    program: &std::path::Path,
    spec: &AdapterSpec,
) -> Result<(), RunFailed> {
    owner.let_pass(program, "to run the harness");
    let Some(blocked) = owner.cannot_reach(program, crate::owner::Want::Run) else {
        return Ok(());
    };
    tracing::error!(
        program = %program.display(),
        "{} cannot run the harness: {blocked}; install it where every user may run it \
         (e.g. `npm install -g` as root, into /usr/local), or run the bridge as an ordinary user",
        owner.describe()
    );
    Err(fail(
        FailureCode::HarnessNotFound,
        format!(
            "{} cannot be run by the user the bridge's caged harnesses are ({}): the bridge's log \
             says where it is kept and how to fix it",
            spec.label,
            owner.describe()
        ),
    ))
}

/// What the turn's harness may call through the gateway, when its binding
/// lists models and one is picked (its `model`, or a person's `/model`):
/// those a person may pick here, the picked one among them. With none
/// picked the harness runs on its own default, which no list names.
fn bound_models(binding: &Binding<'_>, open: &OpenRun) {
    let Some(picked) = &binding.model else {
        return;
    };
    if binding.models.is_empty() {
        return;
    }
    let mut models = binding.models.clone();
    if !models.contains(picked) {
        models.push(picked.clone());
    }
    open.grant.bound_models(models);
}

/// Refuse, in words, a start the cage would refuse with a bare error: a
/// file the harness needs to start (its program, a script's interpreter,
/// a file its command line names) that its wall would not let it read.
fn readable_start(
    spec: &AdapterSpec,
    wall: &crate::harness::cage::Plan,
    needs: &[PathBuf],
    workspace: &std::path::Path,
) -> Result<(), RunFailed> {
    let Some(blocked) = crate::harness::cage::unreadable(wall, needs, workspace) else {
        return Ok(());
    };
    let fix = blocked.fix();
    tracing::error!(
        file = %blocked.path.display(),
        "{} cannot start in its cage, which would not let it read {}: {fix}",
        spec.label,
        blocked.path.display()
    );
    let name = blocked.path.file_name().map_or_else(
        || blocked.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let key = if blocked.holds_workspaces {
        "install it outside the folder that holds the workspaces and point `harness_binaries` there"
    } else {
        "add its folder to `cage.read_only`"
    };
    Err(fail(
        FailureCode::HarnessNotFound,
        format!(
            "{} cannot start in its cage, which would not let it read `{name}`: {key} (the bridge's \
             log says where it is)",
            spec.label
        ),
    ))
}

/// A turn in a project's worktree: its git's variables for the harness,
/// and what the `publish` tool reads when the run may ask to publish.
fn in_worktree(
    project: Option<&Project>,
    checkout: Option<&(Checkout, Snapshot)>,
    asking: Asking,
    env: &mut BTreeMap<String, String>,
) -> Option<Publishable> {
    let (project, (checkout, _)) = project.zip(checkout)?;
    env.extend(
        checkout
            .git_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    asking.publish.then(|| Publishable {
        project: project.clone(),
        checkout: checkout.clone(),
    })
}

/// The branch of `ctx`'s conversation (and thread) in `project`, for
/// `harness`: what its worktree checks out, and what `/status` and every
/// message name. The conversation's id is made a safe name with its
/// digest, so two ids never share a branch and none climbs out of
/// `chat/`.
pub(in crate::run) fn conversation_branch(
    ctx: &AgentRunContext,
    project: &Project,
    harness: &str,
) -> String {
    let conversation = match ctx.thread_id() {
        Some(thread) => format!("{}/{thread}", ctx.conversation_id().unwrap_or_default()),
        None => ctx.conversation_id().unwrap_or_default().to_string(),
    };
    project.branch_for(&safe_component(&conversation), harness)
}

/// What the run may ask the person: the binding's choices, and to
/// publish where the project publishes.
fn asking(binding: &Binding<'_>, project: Option<&Project>, open: &OpenRun) -> Asking {
    let has_conversation = open.grant.scope.conversation_id.is_some();
    Asking {
        publish: has_conversation && project.is_some_and(|p| p.publish.is_some()),
        ..binding.asking(has_conversation)
    }
}

/// A shared project's turn waits for the one before it, whichever
/// conversation that is; a cancel, or the turn's deadline, while waiting
/// ends it before anything of it ran.
async fn wait_for_project(
    project: Option<&Project>,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>, RunFailed> {
    let Some(project) = project else {
        return Ok(None);
    };
    tokio::select! {
        guard = project.take_turn() => Ok(guard),
        () = cancel.cancelled() => Err(fail(FailureCode::Cancelled, "the run was cancelled while it waited for the project's previous turn")),
        () = tokio::time::sleep_until(deadline) => Err(fail(
            FailureCode::DeadlineExceeded,
            format!(
                "the turn's time ran out while it waited for another turn on the shared project `{}` to end; nothing of it ran",
                project.name
            ),
        )),
    }
}

/// The MCP configuration file the harness reads, in its workspace.
fn mcp_config_path(projection: &Projection) -> PathBuf {
    let file = projection.mcp.file.as_ref();
    let path = file.map_or(&paths::MCP_CONFIG[..], |f| f.path);
    projection.workspace.join(path.join("/"))
}

impl Bridge {
    /// Decide the whole turn, or refuse it. `Ok(None)`: the input was an
    /// answer that is not this person's to give, or came too late; the
    /// person has been told and nothing runs.
    pub(in crate::run) async fn prepare<'a>(
        &'a self,
        turn_io: &mut super::TurnIo<'a, '_>,
        harness: &str,
    ) -> Result<Option<(Prepared<'a>, Outbox)>, RunFailed> {
        let (ctx, options, cancel) = (turn_io.ctx, turn_io.options, turn_io.cancel);
        let (emit, summary) = (&mut *turn_io.emit, &mut *turn_io.summary);
        let Admitted {
            spec,
            binding,
            project,
            approvals,
            mut env,
            program,
        } = self.admit(ctx, harness, options, cancel)?;
        let (open, guard) = self.open_grant(ctx, spec, &binding, options)?;
        let host = options
            .host
            .as_deref()
            .unwrap_or_else(|| self.grants.host().as_ref());
        let turn = Turn {
            ctx,
            spec,
            binding: &binding,
            project,
            open: &open,
            host,
            options,
            cancel,
        };
        let Some((answer, answered)) = self.answer(&turn, emit).await? else {
            return Ok(None);
        };
        let asking = asking(&binding, project, &open);
        let deadline = self.deadline(&binding, &open);

        let tools = tool_names(&open.grant.apis, asking);
        let turn_ctx = answered.as_ref().unwrap_or(ctx);
        let shared_turn = wait_for_project(project, deadline, cancel).await?;
        let door = self.behind_door(&binding);
        let mcp_url = self.mcp_url(door);
        let projection = self
            .project_turn(&turn, turn_ctx, &tools, &env, &mcp_url)
            .await?;
        let workspace = projection.workspace.clone();
        summary.workspace = Some(workspace.clone());
        let checkout = self.check_out(&turn, &projection).await?;
        let publishable = in_worktree(project, checkout.as_ref(), asking, &mut env);
        self.tools
            .set_facts(&ctx.run_id, facts(&projection, publishable));
        self.record_inbound(&turn).await?;
        let filled = self.harness_env(spec, &mut env, &projection, &open, &mcp_url)?;
        let (door, config_overrides) =
            self.door_keeper(door, spec, &binding, &mut env, &projection, &open);

        let session = self.session(&turn, &env, &workspace, deadline).await?;
        let Caged {
            own_port,
            wall,
            quota,
        } = self.cage_turn(
            spec,
            &binding,
            &mut env,
            &projection,
            &program,
            checkout.as_ref().map(|(c, _)| c),
        )?;
        let outbox = self.ready_to_start(spec, &env, &projection)?;
        let prepared = Prepared {
            launch: LaunchPlan {
                spend: None,
                counted: quota.as_ref().map(Quota::counters),
                mcp_config: mcp_config_path(&projection),
                approvals,
                program,
                tools,
                session,
                own_port,
                wall,
                door,
                config_overrides,
                quota,
            },
            spec,
            binding,
            env,
            open,
            host,
            answer,
            deadline,
            projection,
            workspace,
            checkout,
            _shared_turn: shared_turn,
            _filled: filled,
            _guard: guard,
        };
        Ok(Some((prepared, outbox)))
    }

    /// The last writes before the harness starts, from its environment
    /// as it will start: the files it reads its model endpoint from; and
    /// the outbox it sends files through, watched.
    fn ready_to_start(
        &self,
        spec: &AdapterSpec,
        env: &BTreeMap<String, String>,
        projection: &Projection,
    ) -> Result<Outbox, RunFailed> {
        self.write_model_files(spec, env, projection)?;
        self.watch_outbox(projection)
    }

    /// The files a CLI reads its model endpoint from (its family's), made
    /// from its environment as it will start, in its home.
    fn write_model_files(
        &self,
        spec: &AdapterSpec,
        env: &BTreeMap<String, String>,
        projection: &Projection,
    ) -> Result<(), RunFailed> {
        let Some(files) = spec.family.model_files else {
            return Ok(());
        };
        for (path, bytes) in files(env) {
            let parts: Vec<&str> = paths::HOME.iter().copied().chain(path.split('/')).collect();
            projection.dir.write(&parts, &bytes).map_err(|e| {
                let root = &self.settings.workspace_root;
                fail(FailureCode::WorkspaceError, e.within(root).to_string())
            })?;
        }
        Ok(())
    }

    /// The turn's event and the person's message in the host's record
    /// (where the host does not keep its own).
    async fn record_inbound(&self, turn: &Turn<'_>) -> Result<(), RunFailed> {
        if !self.settings.record_turns {
            return Ok(());
        }
        record::inbound(turn.host, turn.ctx).await.map_err(|e| {
            fail(
                FailureCode::RuntimeError,
                format!("cannot record the turn: {e}"),
            )
        })
    }

    /// The watch on the workspace's outbox, where the harness leaves files
    /// for the person.
    fn watch_outbox(&self, projection: &Projection) -> Result<Outbox, RunFailed> {
        Outbox::watch(&projection.dir).map_err(|e| {
            tracing::error!(workspace = %projection.workspace.display(), error = %e, "cannot watch the outbox");
            let root = &self.settings.workspace_root;
            fail(FailureCode::WorkspaceError, format!("outbox: {}", e.within(root)))
        })
    }

    /// The harness, the binding and the program, before any host call: a
    /// request the bridge cannot run is refused here, and one cancelled
    /// before it began (while queued) writes, records and starts nothing.
    fn admit<'a>(
        &'a self,
        ctx: &'a AgentRunContext,
        harness: &str,
        options: &'a RunOptions,
        cancel: &CancellationToken,
    ) -> Result<Admitted<'a>, RunFailed> {
        if cancel.is_cancelled() {
            return Err(fail(
                FailureCode::Cancelled,
                "the run was cancelled before it started",
            ));
        }
        let spec = self
            .adapters
            .require(harness)
            .map_err(|why| fail(FailureCode::InvalidArgument, why.to_string()))?;
        let binding = Binding::from_config(&ctx.config)
            .map_err(|e| fail(FailureCode::InvalidArgument, e.to_string()))?;
        // A project is the operator's, picked by name: an unknown one is
        // refused before anything is written or started.
        let project = binding
            .project
            .as_deref()
            .map(|name| match options.projects.get(name) {
                Some(project) => Ok(project),
                None => self.project(name),
            })
            .transpose()
            .map_err(|e| fail(FailureCode::InvalidArgument, e.to_string()))?;
        if project.is_some() && ctx.conversation_id().is_none() {
            return Err(fail(
                FailureCode::InvalidArgument,
                "a project needs a conversation: each conversation works on a branch of its own",
            ));
        }
        // A mode the harness does not know would fail at its start. One it
        // has no setting for may come from defaults meant for another
        // harness: the front ends refuse it where a client named it.
        if let Some(mode) = binding.permission_mode.as_deref()
            && !spec.permission_modes.is_empty()
        {
            spec.check_permission_mode(mode)
                .map_err(|why| fail(FailureCode::InvalidArgument, why.to_string()))?;
        }
        let approvals = binding.approvals == Approvals::Chat;
        // A live harness may ask in its own protocol (Codex's app-server).
        if approvals && !spec.hands_over_approvals(self.live.is_some()) {
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
        if let Some(project) = project {
            env.extend(
                project
                    .git_env()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v)),
            );
            // The push token is the bridge's alone, whatever the operator
            // lets harnesses inherit.
            if let Some(var) = project.publish.as_ref().and_then(|p| p.token_env.as_ref()) {
                env.remove(var);
            }
        }
        let program = self.program(spec, options, &env)?;
        Ok(Admitted {
            spec,
            binding,
            project,
            approvals,
            env,
            program,
        })
    }

    /// The run's grant (closed again however the turn ends), the models
    /// its harness may call bounded by its binding; a turn whose
    /// deadline passed while it waited (in a host's queue, in ours) starts
    /// nothing: its answer would come too late anyway.
    fn open_grant(
        &self,
        ctx: &AgentRunContext,
        spec: &AdapterSpec,
        binding: &Binding<'_>,
        options: &RunOptions,
    ) -> Result<(OpenRun, RunGuard<'_>), RunFailed> {
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
        bound_models(binding, &open);
        let guard = RunGuard {
            bridge: self,
            run_id: ctx.run_id.clone(),
        };
        if open.grant.remaining().is_zero() {
            return Err(RunFailed {
                code: FailureCode::DeadlineExceeded,
                error: "the run's deadline (runtime.deadline_at) had passed before it began; \
                        nothing was started"
                    .into(),
                retryable: true,
            });
        }
        Ok((open, guard))
    }

    /// How this turn's input answers the conversation's open request (the
    /// bridge's own record of it), audited; with the context the harness
    /// gets when it is an answer, and the approval it carries opened for
    /// the run. `None`: the answer was not this person's to give, or came
    /// too late; they have been told, and nothing runs.
    async fn answer(
        &self,
        turn: &Turn<'_>,
        emit: &mut Emitter,
    ) -> Result<Option<(Reply, Option<AgentRunContext>)>, RunFailed> {
        let Turn {
            ctx,
            binding,
            project,
            open,
            host,
            cancel,
            ..
        } = *turn;
        let scope = &open.grant.scope;
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
        let (answered, approved) = match &answer {
            Reply::Stale(sentence) | Reply::NotYours(sentence) => {
                // A card answered after its time, or someone else's
                // request: the person is told, and nothing runs.
                emit.send(vec![ResultPayload::RunCompleted(RunCompleted {
                    finish_reason: "stop".into(),
                    message: Some(Message::assistant(sentence.clone())),
                })])
                .await;
                return Ok(None);
            }
            Reply::Answer { prompt, approved } => {
                let mut with_answer = ctx.clone();
                let publish = match pending.as_ref().map(|p| &p.ask) {
                    Some(Ask::Publish(request)) => Some(request),
                    _ => None,
                };
                let (prompt, approved) = match (publish, approved) {
                    (Some(request), Some(_)) => {
                        let granted = self.grants.granted(open.grant.clone());
                        let told = publish::approved(request, project, &granted, emit).await;
                        (told, None)
                    }
                    _ => (prompt.clone(), approved.clone()),
                };
                with_answer.input.text = Some(prompt);
                (Some(with_answer), approved)
            }
            Reply::Unrelated { .. } => (None, None),
        };
        let asking = asking(binding, project, open);
        self.tools
            .interactions()
            .open(&ctx.run_id, approved, asking);
        Ok(Some((answer, answered)))
    }

    /// Write the conversation's workspace for this turn.
    async fn project_turn(
        &self,
        turn: &Turn<'_>,
        ctx: &AgentRunContext,
        tools: &[&str],
        env: &BTreeMap<String, String>,
        mcp_url: &str,
    ) -> Result<Projection, RunFailed> {
        let Turn {
            spec,
            project,
            open,
            options,
            binding,
            ..
        } = *turn;
        let granted = self.grants.granted(open.grant.clone());
        let mut servers = self.settings.mcp_servers.clone();
        servers.extend(options.mcp_servers.clone());
        let shared = project
            .filter(|p| p.mode == ProjectMode::Shared)
            .map(|p| shared_workspace(&p.name));
        let project_note = project.map(|p| ProjectNote {
            name: p.name.clone(),
            branch: conversation_branch(ctx, p, &spec.name),
            base: p.base.clone(),
            publishes: tools.contains(&"publish"),
        });
        crate::projection::project(
            &ProjectRequest {
                ctx,
                binding,
                target: &spec.target(),
                runner: &spec.name,
                shared: shared.as_deref(),
                root: &self.settings.workspace_root,
                tools,
                project: project_note.as_ref(),
                mcp_url,
                mcp_servers: &servers,
                host: Some(&granted),
                env,
                owner: self.settings.cage.owner(),
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
        })
    }

    /// The conversation's worktree of its project, made on its first turn,
    /// and how it is before the harness runs. The person is told what
    /// went wrong in a sentence; the paths and git's words go to the log.
    async fn check_out(
        &self,
        turn: &Turn<'_>,
        projection: &Projection,
    ) -> Result<Option<(Checkout, Snapshot)>, RunFailed> {
        let Some(project) = turn.project else {
            return Ok(None);
        };
        let spec = turn.spec;
        let branch = conversation_branch(turn.ctx, project, &spec.name);
        let target = spec.target();
        let mut bridge_paths = vec![
            format!("{}/", paths::DIR),
            format!("{}/", crate::run::io::outbox::OUTBOX_DIR),
            format!("{}/", target.skills_dir.join("/")),
        ];
        bridge_paths.extend(projection.mcp.file.as_ref().map(|f| f.path.join("/")));
        bridge_paths.extend(
            target
                .instructions_file
                .as_ref()
                .filter(|f| f.first().map(String::as_str) != Some(paths::DIR))
                .map(|f| f.join("/")),
        );
        let refused = |e: crate::repo::ProjectError| {
            tracing::error!(project = %project.name, error = %e, "cannot use the project's worktree");
            let said = e.for_person().unwrap_or_else(|| {
                format!(
                    "project `{}`: the conversation's worktree could not be made ready; \
                     the bridge's log says why",
                    project.name
                )
            });
            fail(FailureCode::WorkspaceError, said)
        };
        let checkout = Checkout::ensure(project, &projection.workspace, branch, &bridge_paths)
            .await
            .map_err(refused)?;
        let before = checkout.before().await.map_err(refused)?;
        Ok(Some((checkout, before)))
    }

    /// The harness's environment once the workspace is written: the
    /// conversation's home, the extra MCP servers' variables, the run's
    /// token and URL; and the token-filled MCP file for a harness that
    /// cannot expand variables.
    fn harness_env(
        &self,
        spec: &AdapterSpec,
        env: &mut BTreeMap<String, String>,
        projection: &Projection,
        open: &OpenRun,
        mcp_url: &str,
    ) -> Result<Option<FilledMcpFile>, RunFailed> {
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
        env.insert(URL_ENV.into(), mcp_url.to_string());
        // A harness that cannot expand `${VAR}` in its MCP file reads the
        // token from the file itself, for this turn only.
        match &projection.mcp.file {
            Some(file) if file.fill_env => FilledMcpFile::write(&projection.dir, file, env)
                .map(Some)
                .map_err(|e| {
                    let root = &self.settings.workspace_root;
                    fail(FailureCode::WorkspaceError, e.within(root).to_string())
                }),
            _ => Ok(None),
        }
    }

    /// The operator's cage with the binding's choice of network for its
    /// own harness.
    pub(in crate::run) fn cage_policy(
        &self,
        binding: &Binding<'_>,
    ) -> crate::harness::cage::CagePolicy {
        let mut cage = self.settings.cage.clone();
        cage.ports.extend(&binding.network_ports);
        if let Some(egress) = &binding.egress {
            cage.egress.allow.extend(egress.allow.iter().cloned());
            cage.egress.deny.extend(egress.deny.iter().cloned());
        }
        match binding.network {
            None => {}
            Some(NetworkChoice::Ports) => cage.network = Network::Ports,
            Some(NetworkChoice::Allowlist) => cage.network = Network::Isolated,
            Some(NetworkChoice::None) => {
                cage.network = Network::Isolated;
                cage.egress.allow.clear();
                cage.egress.ask = crate::harness::cage::Ask::Off;
            }
            Some(NetworkChoice::Open) => {
                cage.network = Network::Isolated;
                cage.egress.allow.push("*:*".into());
            }
        }
        cage
    }

    /// Whether the turn's harness runs in a network of its own, reaching
    /// out only through its door (the MCP endpoint and the model gateway
    /// there).
    fn behind_door(&self, binding: &Binding<'_>) -> bool {
        let cage = self.cage_policy(binding);
        cage.enabled && cage.network == Network::Isolated
    }

    /// When the turn must be over: the binding's time, else the bridge's,
    /// and never past its grant.
    fn deadline(&self, binding: &Binding<'_>, open: &OpenRun) -> Instant {
        let timeout = binding
            .timeout_seconds
            .filter(|s| *s > 0)
            .map_or(self.settings.turn_timeout, std::time::Duration::from_secs);
        Instant::now() + timeout.min(open.grant.remaining())
    }

    /// Where the harness reaches the run's MCP endpoint: its door, or the
    /// bridge's own port.
    fn mcp_url(&self, door: bool) -> String {
        if door {
            crate::door::mcp_url()
        } else {
            self.mcp.url().to_string()
        }
    }

    /// Who answers the door of a harness in a network of its own: its MCP
    /// endpoint; its model endpoints (in `env`) made the gateway's, its
    /// keys stand-ins (the keys stay here); its proxy variables the door,
    /// to the operator's destinations; none when it is not `behind` one.
    /// Returns the config overrides too: the MCP servers' and the
    /// gateway's.
    fn door_keeper(
        &self,
        behind: bool,
        spec: &AdapterSpec,
        binding: &Binding<'_>,
        env: &mut BTreeMap<String, String>,
        projection: &Projection,
        open: &OpenRun,
    ) -> (
        Option<std::sync::Arc<dyn crate::harness::DoorKeeper>>,
        Vec<String>,
    ) {
        let mut overrides = projection.mcp.overrides.clone();
        if !behind {
            return (None, overrides);
        }
        let token = open.token.expose();
        let carried = projection.home.as_ref().map_or(&[][..], |h| &h.carried[..]);
        let (gateway, more) =
            crate::door::Gateway::prepare(spec, carried, env, token, self.grants.clone());
        overrides.extend(more);
        for (name, value) in crate::door::proxy_env() {
            env.insert(name.to_string(), value);
        }
        let egress = self.cage_policy(binding).egress;
        let asks = egress.ask == crate::harness::cage::Ask::On;
        let mut proxy = crate::door::Proxy::new(egress, token, self.grants.clone())
            .with_own_traffic(&spec.label, &spec.own_traffic);
        if asks {
            proxy = proxy.with_approver(std::sync::Arc::new(
                crate::run::destinations::DoorApprover {
                    asks: self.asks.clone(),
                    grants: self.grants.clone(),
                    token: token.to_string(),
                },
            ));
        }
        let keeper = crate::door::Keeper::new(self.mcp.door_app(), gateway, proxy);
        (Some(keeper.shared()), overrides)
    }

    /// The cage for this turn: its own temp folder, its own port where it
    /// serves itself, the wall (with the binding's network choice) and the
    /// conversation's resource limits.
    fn cage_turn(
        &self,
        spec: &AdapterSpec,
        binding: &Binding<'_>,
        env: &mut BTreeMap<String, String>,
        projection: &Projection,
        program: &std::path::Path,
        checkout: Option<&Checkout>,
    ) -> Result<Caged, RunFailed> {
        let workspace = &projection.workspace;
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
        let cage = self.cage_policy(binding);
        cage.egress.check_rules().map_err(|e| {
            fail(
                FailureCode::InvalidArgument,
                format!("the binding's egress (over the bridge's): {e}"),
            )
        })?;
        let (repo_read, repo_write) = checkout.map(Checkout::cage_paths).unwrap_or_default();
        let named = spec.named_paths();
        let subject = Subject {
            workspace,
            program,
            env,
            carried: projection
                .home
                .as_ref()
                .map_or(&[][..], |home| home.carried.as_slice()),
            named: &named,
            own_port,
            project: (&repo_read, &repo_write),
        };
        let wall = cage.plan(&subject);
        if let Some(wall) = &wall {
            readable_start(spec, wall, &cage.needs(&subject), workspace)?;
        }
        if let Some(owner) = cage.owner() {
            runnable_by(owner, program, spec)?;
        }
        // Every process of the conversation, in its limits; a turn that
        // hits one fails `resource_limit`, named by the group's counters.
        let quota = crate::harness::cage::quota(workspace, &self.settings.cage.limits)
            .map_err(|e| {
                tracing::error!(workspace = %workspace.display(), error = %e, "cannot apply the conversation's limits");
                fail(
                    FailureCode::HarnessError,
                    "cannot apply the conversation's resource limits (see the bridge's log)",
                )
            })?;
        Ok(Caged {
            own_port,
            wall,
            quota,
        })
    }

    /// The harness program: the operator's path, else the spec's binary on
    /// the child's PATH; missing → `harness_not_found` with the install hint.
    fn program(
        &self,
        spec: &AdapterSpec,
        options: &RunOptions,
        env: &BTreeMap<String, String>,
    ) -> Result<PathBuf, RunFailed> {
        let wanted = self.wanted_program(spec, options.binary.as_ref());
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

    /// The program a turn of `spec` asks for: the run's own path, else
    /// the operator's, else the spec's binary name.
    fn wanted_program(&self, spec: &AdapterSpec, binary: Option<&PathBuf>) -> String {
        binary
            .or_else(|| self.settings.binaries.get(&spec.name))
            .map_or_else(|| spec.binary.clone(), |p| p.to_string_lossy().into_owned())
    }

    /// Whether a turn of `spec` would find its program (the operator's
    /// path, else the binary on the PATH the harness gets), so a client
    /// offers only the harnesses that can run here.
    pub fn installed(&self, spec: &AdapterSpec) -> bool {
        let vars: Vec<(String, String)> = std::env::var("PATH")
            .map(|path| vec![("PATH".to_string(), path)])
            .unwrap_or_default();
        let env = child_env(
            &spec.env,
            &self.settings.pass_env,
            &self.settings.set_env,
            &BTreeMap::new(),
            &vars,
        );
        let path = env.get("PATH").map(String::as_str);
        find_program(&self.wanted_program(spec, None), path).is_some()
    }

    /// The session the turn resumes: the host's pointer, followed here
    /// from another workspace where it can be, and checked.
    async fn session(
        &self,
        turn: &Turn<'_>,
        env: &BTreeMap<String, String>,
        workspace: &std::path::Path,
        deadline: Instant,
    ) -> Result<SessionPlan, RunFailed> {
        let pointer = lookup_pointer(turn, deadline).await?;
        let (pointer, not_followed) = self
            .follow_session(turn, env, workspace, pointer, deadline)
            .await;
        Ok(self.plan_session(turn.spec, pointer.as_ref(), env, workspace, not_followed))
    }

    /// A pointer to this harness's session in another workspace, on a
    /// shared store: the session's kept copy is written here and the
    /// pointer moves with it; or why it could not follow.
    async fn follow_session(
        &self,
        turn: &Turn<'_>,
        env: &BTreeMap<String, String>,
        workspace: &std::path::Path,
        pointer: Option<ResumePointer>,
        deadline: Instant,
    ) -> (Option<ResumePointer>, Option<follow::NotFollowed>) {
        let Turn {
            host, open, spec, ..
        } = *turn;
        let Some(found) = pointer else {
            return (None, None);
        };
        let elsewhere = found.harness == spec.name
            && std::path::Path::new(&found.working_directory) != workspace;
        if self.settings.follow_sessions.is_none() || !elsewhere {
            return (Some(found), None);
        }
        let wait = (Instant::now() + HOST_CALL_TIMEOUT).min(deadline);
        let scope = &open.grant.scope;
        let brought = tokio::time::timeout_at(
            wait,
            follow::bring(
                host,
                scope,
                spec,
                env,
                workspace,
                &found,
                self.settings.cage.owner(),
            ),
        )
        .await
        .unwrap_or_else(|_| Err("the store did not answer in time".into()));
        match brought {
            Ok(here) => (Some(here), None),
            Err(why) => {
                tracing::warn!("the session did not follow the conversation here: {why}");
                (Some(found), Some(why))
            }
        }
    }

    /// Which session the turn resumes: the stored pointer's, when it is
    /// this harness's, in this workspace, well-formed and still on disk;
    /// else a fresh one, with a sentence saying why (`not_followed`: why
    /// a session kept elsewhere could not follow).
    fn plan_session(
        &self,
        spec: &AdapterSpec,
        pointer: Option<&ResumePointer>,
        env: &BTreeMap<String, String>,
        workspace: &std::path::Path,
        not_followed: Option<follow::NotFollowed>,
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
                let why = not_followed.map_or_else(String::new, |why| {
                    format!(" and could not follow it here: {why}")
                });
                format!(
                    "The previous {} session was kept in another workspace (another bridge \
                     instance ran this conversation){why}; this turn started a fresh session, \
                     and the conversation's history is still there.",
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
        // A session its kept process holds counts as there: the process
        // writes it out when the turn takes (or replaces) it.
        let held = self
            .live
            .as_ref()
            .is_some_and(|live| live.holds(workspace, &spec.name));
        if !held
            && !spec
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
