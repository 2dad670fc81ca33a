//! The turn's second phase: the harness runs. One attempt on a one-shot
//! process or on the conversation's live one; when the stored session
//! turns out to be gone, one more attempt as a fresh session. Results
//! stream as they come; the terminal one is returned for `settle`.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::prepare::Prepared;
use super::usage::UsageCount;
use crate::harness::{AdapterSpec, Launch, Stdin, TurnValues};
use crate::interaction::{self, Decision, Reply};
use crate::projection::{TOKEN_ENV, paths};
use crate::protocol::{AgentRunContext, FailureCode, ResultPayload, RunFailed};
use crate::run::io::attempt::{self, AttemptEnd};
use crate::run::io::engine;
use crate::run::io::outbox::Outbox;
use crate::run::live::{self, LiveSessions};
use crate::run::{Bridge, PROMPT_TOOL, Spawned, fail};

/// How the harness phase ended.
pub(in crate::run) struct Driven {
    /// The last attempt's end, its terminal result not yet sent.
    pub end: AttemptEnd,
    /// Whether the turn continued an earlier session.
    pub resumed: bool,
    /// What to tell the person about the session (a fresh one, and why).
    pub notice: Option<String>,
    /// Which live process served the turn, for the operator's eyes.
    pub process: serde_json::Value,
}

/// What a live attempt needs of its turn.
struct LiveTurn<'a> {
    sessions: &'a LiveSessions,
    driver: crate::harness::families::LiveProtocol,
    program: &'a Path,
    workspace: &'a Path,
    env: &'a std::collections::BTreeMap<String, String>,
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
    /// Who answers its door, in a network of its own.
    door: Option<&'a Arc<dyn crate::harness::DoorKeeper>>,
    /// The MCP servers for a driver that names them in its protocol.
    mcp_session: Option<&'a serde_json::Value>,
}

impl<'a> LiveTurn<'a> {
    /// The live side of `turn`, on `sessions` with the spec's live driver.
    fn of(
        ctx: &'a AgentRunContext,
        turn: &'a Prepared<'_>,
        sessions: &'a LiveSessions,
        live_spec: &'a crate::harness::LiveSpec,
        files: &'a [live::PromptFile],
    ) -> LiveTurn<'a> {
        LiveTurn {
            sessions,
            driver: live_spec.driver,
            program: &turn.launch.program,
            workspace: &turn.workspace,
            env: &turn.env,
            tools: &turn.launch.tools,
            token: &turn.open.token,
            grant: &turn.open.grant,
            prompt: &turn.projection.turn_prompt,
            files,
            run_id: &ctx.run_id,
            answer: &turn.answer,
            prompt_tool: live_spec.permission_prompt_tool.as_deref(),
            mcp_session: turn.projection.mcp.session.as_ref(),
            wall: turn.launch.wall.as_ref(),
            quota: turn.launch.quota.as_ref(),
            door: turn.launch.door.as_ref(),
        }
    }
}

impl LiveTurn<'_> {
    /// How its process starts with `args` (no stdin: the driver writes).
    fn launch<'s>(&'s self, args: &'s [String]) -> Launch<'s> {
        Launch {
            program: self.program,
            args,
            cwd: self.workspace,
            env: self.env,
            stdin: None,
            wall: self.wall,
            quota: self.quota,
            door: self.door,
        }
    }
}

/// A live process's argv for `values` (none: the family's default).
/// Whether a turn that failed did so because the session it resumed is
/// gone, with time left to try a fresh one.
fn session_missing(end: &AttemptEnd, turn: &Prepared<'_>, cancel: &CancellationToken) -> bool {
    matches!(end.terminal, ResultPayload::RunFailed(_))
        && end.session_not_found
        && !cancel.is_cancelled()
        && Instant::now() < turn.deadline
}

/// How a kept process is known: by how a fresh one would start (on
/// whatever port of its own).
fn live_key(
    spec: &AdapterSpec,
    turn: &LiveTurn<'_>,
    values: &TurnValues<'_>,
) -> Result<live::LiveKey, RunFailed> {
    let fresh = TurnValues {
        session_id: None,
        own_port: None,
        ..values.clone()
    };
    let fresh_args = live_argv(spec, &fresh)?;
    let launch = turn.launch(&fresh_args);
    let asks = values.permission_prompt_tool.is_some();
    Ok(live::LiveKey::new(
        spec, &launch, turn.tools, asks, TOKEN_ENV,
    ))
}

fn live_argv(spec: &AdapterSpec, values: &TurnValues<'_>) -> Result<Vec<String>, RunFailed> {
    spec.live_args(values)
        .unwrap_or_else(|| Ok(Vec::new()))
        .map_err(|why| fail(FailureCode::InvalidArgument, why.to_string()))
}

impl Bridge {
    /// Run the harness for the prepared turn, retrying once as a fresh
    /// session when the one to resume is gone.
    pub(in crate::run) async fn drive(
        &self,
        turn_io: &mut super::TurnIo<'_, '_>,
        turn: &Prepared<'_>,
        outbox: &mut Outbox,
    ) -> Result<Driven, RunFailed> {
        let (ctx, options, cancel) = (turn_io.ctx, turn_io.options, turn_io.cancel);
        let emit = &mut *turn_io.emit;
        let mut inbox = match &options.steer {
            Some(inbox) => Some(inbox.0.lock().await),
            None => None,
        };
        let bind = |process: &crate::harness::HarnessProcess| {
            if let Some(holder) = process.holder() {
                self.grants.bind(&turn.open.token, holder);
            }
        };
        // What its door holds is asked of the person through this turn.
        let (_asking, mut notes) = self.ask_through(ctx, turn);
        let mut io = engine::Live {
            notices: &mut notes,
            emit,
            outbox,
            host: turn.host,
            scope: &turn.open.grant.scope,
            deadline: turn.deadline,
            cancel,
            grace: self.settings.kill_grace,
            on_spawn: options.on_spawn.as_ref(),
            bind: &bind,
            steer: inbox.as_deref_mut(),
            spend: turn.launch.spend,
            meter: &turn.open.grant.meter,
        };
        let spec = turn.spec;
        // A live-only harness (an ACP agent) where no processes are kept
        // (`harness-bridge run`): one process for this turn, stopped after.
        let prompt_files = live::prompt_files(&turn.projection);
        let usage_path = turn.workspace.join(paths::USAGE.join("/"));
        let once = (self.live.is_none() && spec.live_only())
            .then(|| LiveSessions::new(live::LiveLimits::default(), self.settings.kill_grace));
        let sessions = self.live.as_ref().or(once.as_ref());
        let mut resume = turn.launch.session.resume.clone();
        let mut notice = turn.launch.session.notice.clone();
        let mut process = serde_json::Value::Null;
        let (end, resumed) = loop {
            let values = self.values(turn, resume.as_deref(), &usage_path);
            let end = match (sessions, spec.live.as_ref()) {
                (Some(sessions), Some(live_spec)) => {
                    let live_turn = LiveTurn::of(ctx, turn, sessions, live_spec, &prompt_files);
                    let (end, warm, facts) = self
                        .live_attempt(spec, &live_turn, &values, &mut io)
                        .await?;
                    process = facts;
                    if warm {
                        // The process goes on from the last turn: the
                        // session continued whatever the pointer said.
                        resume = resume.or_else(|| end.session_id.clone());
                    }
                    end
                }
                _ => Self::one_shot(turn, &values, &mut io).await?,
            };
            let missing = session_missing(&end, turn, cancel);
            match resume.take() {
                Some(old) if missing => {
                    notice = Some(format!(
                        "The previous {} session ({old}) could not be resumed; this turn started a fresh session.",
                        spec.label
                    ));
                    tracing::info!("session {old} not found; retrying as a fresh session");
                }
                other => break (end, other.is_some()),
            }
        };
        if let Some(once) = once {
            once.shutdown().await;
        }
        let mut end = end;
        // The gateway counted every model call that passed it: its counts
        // are the turn's, whatever the harness said (or did not).
        Self::metered(turn, &mut end, cancel.is_cancelled()).await;
        if let Some(hit) = Self::limit_hit(turn) {
            tracing::warn!("{hit}");
            if !cancel.is_cancelled() {
                end.terminal = ResultPayload::RunFailed(fail(FailureCode::ResourceLimit, hit));
            }
        }
        for name in io.outbox.sweep() {
            engine::push_artifact(&mut io, name).await;
        }
        Ok(Driven {
            end,
            resumed,
            notice,
            process,
        })
    }

    /// The turn's usage: the gateway's counts of every model call that
    /// passed it (for a turn that completed, the answers still streaming
    /// at its end awaited a moment; a stopped one never waits), over what
    /// the harness said, or did not.
    async fn metered(turn: &Prepared<'_>, end: &mut AttemptEnd, cancelled: bool) {
        let meter = &turn.open.grant.meter;
        // No call after this one's count: what passed is what is counted.
        meter.close();
        if !cancelled && matches!(end.terminal, ResultPayload::RunCompleted(_)) {
            meter.settled(std::time::Duration::from_secs(2)).await;
        }
        end.usage = crate::host::meter::metered_over(end.usage.take(), meter.usage());
    }

    /// This turn asks the person about the destinations its harness's
    /// door holds (behind a door, in a conversation), until the guard
    /// is dropped; its cards come out of the receiver.
    fn ask_through(
        &self,
        ctx: &AgentRunContext,
        turn: &Prepared<'_>,
    ) -> (
        Option<crate::run::destinations::Registered>,
        tokio::sync::mpsc::UnboundedReceiver<ResultPayload>,
    ) {
        let (notices, cards) = tokio::sync::mpsc::unbounded_channel();
        (self.asking(ctx, turn, notices), cards)
    }

    fn asking(
        &self,
        ctx: &AgentRunContext,
        turn: &Prepared<'_>,
        notices: tokio::sync::mpsc::UnboundedSender<ResultPayload>,
    ) -> Option<crate::run::destinations::Registered> {
        turn.launch.door.as_ref()?;
        let conversation = ctx.conversation_id()?;
        let asked_by = ctx.actor.as_ref().and_then(|a| {
            Some(interaction::Asker {
                id: a.actor_id.clone()?,
                name: a.actor_name.clone(),
            })
        });
        let asking = crate::run::destinations::Turn {
            notices,
            conversation: conversation.to_string(),
            asked_by,
            harness: turn.spec.label.clone(),
            prefix: turn.binding.commands.prefix.clone(),
            deadline: turn.deadline,
        };
        Some(self.asks.register(&ctx.run_id, asking))
    }

    /// The conversation's limit the turn hit, if it hit one: its group's
    /// counts, read after the harness (one-shot) and all it left are gone,
    /// or after the live turn: they are this turn's.
    fn limit_hit(turn: &Prepared<'_>) -> Option<String> {
        let (quota, before) = turn
            .launch
            .quota
            .as_ref()
            .zip(turn.launch.counted.as_ref())?;
        quota.hit_since(before)
    }

    /// What the spec's argv templates are filled with for this attempt.
    fn values<'t>(
        &self,
        turn: &'t Prepared<'_>,
        resume: Option<&'t str>,
        usage_path: &'t Path,
    ) -> TurnValues<'t> {
        let spec = turn.spec;
        TurnValues {
            prompt: &turn.projection.turn_prompt,
            instructions: Some(&turn.projection.instructions),
            mcp_config: turn
                .projection
                .mcp
                .file
                .is_some()
                .then_some(turn.launch.mcp_config.as_path()),
            session_id: resume,
            model: turn.binding.model.as_deref(),
            permission_mode: turn.binding.permission_mode.as_deref(),
            permission_prompt_tool: turn.launch.approvals.then_some(PROMPT_TOOL),
            config_overrides: &turn.launch.config_overrides,
            own_port: turn.launch.own_port,
            sandbox: spec.family.sandbox.map(|modes| {
                if self.settings.cage.enabled {
                    modes.caged
                } else {
                    modes.uncaged
                }
            }),
            usage_file: spec.family.usage_file.is_some().then_some(usage_path),
        }
    }

    /// One attempt on a process of its own, started for this turn alone.
    async fn one_shot(
        turn: &Prepared<'_>,
        values: &TurnValues<'_>,
        io: &mut engine::Live<'_>,
    ) -> Result<AttemptEnd, RunFailed> {
        let spec = turn.spec;
        let args = spec
            .args(values)
            .map_err(|why| fail(FailureCode::InvalidArgument, why.to_string()))?;
        let dir = &turn.projection.dir;
        let counted = spec
            .family
            .usage_file
            .map(|file| (file, UsageCount::before(dir)));
        let launch = Launch {
            program: &turn.launch.program,
            args: &args,
            cwd: &turn.workspace,
            env: &turn.env,
            stdin: (spec.stdin == Stdin::Prompt).then_some(turn.projection.turn_prompt.as_str()),
            wall: turn.launch.wall.as_ref(),
            quota: turn.launch.quota.as_ref(),
            door: turn.launch.door.as_ref(),
        };
        let mut end = attempt::attempt(spec, &launch, io).await;
        if let Some((file, before)) = counted {
            end.usage = end.usage.or_else(|| before.after(file, dir));
        }
        Ok(end)
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
        live: &mut engine::Live<'_>,
    ) -> Result<(AttemptEnd, bool, serde_json::Value), RunFailed> {
        // A live harness asks its permissions its own way, where it can.
        let values = &TurnValues {
            permission_prompt_tool: values
                .permission_prompt_tool
                .map(|tool| turn.prompt_tool.unwrap_or(tool)),
            ..values.clone()
        };
        let key = live_key(spec, turn, values)?;
        let mut kept = turn.sessions.take(&key).await;
        // The conversation's pointer says which session the turn goes on
        // with: a kept process holding another (put aside by `/new` or
        // `/resume`, on whichever instance) is not it.
        if let Some(process) = kept.take_if(|p| {
            p.session_id()
                .is_some_and(|held| Some(held) != values.session_id)
        }) {
            tracing::info!(
                "the kept process holds a session the conversation left; a new one starts"
            );
            process.stop(self.settings.kill_grace).await;
        }
        // A process paused on a permission takes only the answer to it;
        // anything else (the request lapsed, another message) starts over
        // in a new process, resuming the session without the paused call.
        let permit = kept
            .as_ref()
            .and_then(|p| p.paused.as_ref())
            .map(|paused| self.permit(turn, paused));
        if matches!(permit, Some(None))
            && let Some(process) = kept.take()
        {
            tracing::info!("the paused request was not answered; the turn starts a new process");
            process.stop(self.settings.kill_grace).await;
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
            process.conversation = turn.grant.scope.conversation_id.clone();
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
        live: &engine::Live<'_>,
    ) -> Result<live::LiveProcess, RunFailed> {
        let args = live_argv(spec, values)?;
        let launch = turn.launch(&args);
        let mut driver = turn.driver.driver(spec.acp.as_ref());
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
}
