//! Live sessions: one harness process per conversation, kept between
//! turns, for harnesses whose spec has a `live` driver. A turn then costs
//! a line on stdin instead of the CLI's cold start, and a cancel is the
//! harness's own interrupt, which keeps the session.
//!
//! A process is keyed by what it was started with — the workspace, the
//! harness, and a digest of its program, arguments, environment (the
//! binding, the instructions, the MCP tools) — so a turn reuses it only
//! when it would have started the same one. Idle processes are bounded
//! (`max_sessions`, least recently used first) and stopped after
//! `idle_timeout`; whatever ends one (eviction, a crash, a deadline it did
//! not honour) costs nothing but the warm start: the next turn resumes the
//! stored session id in a new process.
//!
//! The MCP token in the process's environment is the one minted for the
//! turn that started it; each later turn lends it its own grant
//! ([`crate::host::Grants::lend`]), so between turns every host call the
//! harness makes is refused and audited.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::spawn::{Stdin, Stdout};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::io::attempt::{self, AttemptEnd};
use super::io::engine::{self, Engine, Event, Live, Stop, Watch};
use crate::harness::decode::LineBuffer;
use crate::harness::live::{LiveDriver, PermissionRequest, Setup};
pub use crate::harness::live::{Prompt, PromptFile};
use crate::harness::{AdapterSpec, HarnessProcess, Launch};
use crate::host::RunToken;
use crate::interaction::Decision;
use crate::protocol::FailureCode;
use crate::protocol::{ResultPayload, RunCompleted, RunFailed};

/// How many live processes a bridge keeps, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct LiveLimits {
    /// Idle processes kept at most; the least recently used goes first.
    pub max_sessions: usize,
    /// An idle process is stopped after this long.
    pub idle_timeout: Duration,
}

impl Default for LiveLimits {
    fn default() -> Self {
        LiveLimits {
            max_sessions: 16,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Whose a live process is (a conversation's workspace and harness), and
/// what it was started with: a turn that would start another one replaces
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LiveKey {
    workspace: PathBuf,
    harness: String,
    digest: [u8; 32],
}

impl LiveKey {
    /// The slot: one process per conversation workspace and harness.
    fn slot(&self) -> (PathBuf, String) {
        (self.workspace.clone(), self.harness.clone())
    }
}

impl LiveKey {
    /// The key of a process for `workspace` started as `launch` with
    /// `tools`, asking the person before it acts or not; the MCP token and
    /// the values made of it are left out (each turn lends its own grant).
    pub fn new(
        spec: &AdapterSpec,
        launch: &Launch<'_>,
        tools: &[&str],
        asks: bool,
        token_env: &str,
    ) -> Self {
        let mut hash = Sha256::new();
        let mut part = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        };
        part(launch.program.as_os_str().as_encoded_bytes());
        for arg in launch.args {
            part(arg.as_bytes());
        }
        // The token, and what is made of it (the model keys' stand-ins
        // behind a door), are the process's first turn's.
        let token = launch.env.get(token_env).filter(|t| !t.is_empty());
        let own = |(name, value): &(&String, &String)| {
            *name != token_env && token.is_none_or(|token| !value.contains(token.as_str()))
        };
        for (name, value) in launch.env.iter().filter(own) {
            part(name.as_bytes());
            part(value.as_bytes());
        }
        for tool in tools {
            part(tool.as_bytes());
        }
        part(&[u8::from(asks)]);
        // Behind a door the endpoints and keys are the door's.
        if let Some(door) = launch.door {
            part(&door.identity());
        }
        LiveKey {
            workspace: launch.cwd.to_path_buf(),
            harness: spec.name.clone(),
            digest: hash.finalize().into(),
        }
    }
}

/// How long a live harness whose input ended may take to exit on its own
/// before it is signalled.
const EXIT_ON_EOF: Duration = Duration::from_secs(3);

/// A harness process that serves turns, with its stdio and its driver.
pub struct LiveProcess {
    process: HarnessProcess,
    /// The write end of its input; `None` once closed. Only dropping it
    /// closes the pipe: tokio's `shutdown` of a child's stdin flushes and
    /// leaves the descriptor open, so the harness would never see end of
    /// input.
    stdin: Option<Stdin>,
    stdout: Stdout,
    lines: LineBuffer,
    driver: Box<dyn LiveDriver>,
    /// The MCP token in its environment.
    pub token: RunToken,
    last_used: Instant,
    /// Turns it has served.
    pub turns: u64,
    /// The permission request its last turn ended on, still waiting for
    /// the person's answer.
    pub paused: Option<PermissionRequest>,
    /// The conversation workspace it runs in (what the console matches
    /// against a conversation's stored working directory).
    workspace: PathBuf,
    /// When it started (epoch milliseconds).
    started_ms: i64,
    /// The conversation whose turn it serves or served last.
    pub conversation: Option<String>,
}

impl LiveProcess {
    /// Start `launch` (stdin kept open) and open the driver's session.
    pub async fn spawn(
        launch: &Launch<'_>,
        mut driver: Box<dyn LiveDriver>,
        token: RunToken,
        resume: Option<&str>,
        setup: &Setup,
    ) -> std::io::Result<LiveProcess> {
        let (process, stdout, stdin) = HarnessProcess::spawn_live(launch).await?;
        let opening = driver.open(resume, setup);
        let mut live = LiveProcess {
            process,
            stdin: Some(stdin),
            stdout,
            lines: LineBuffer::default(),
            driver,
            token,
            last_used: Instant::now(),
            turns: 0,
            paused: None,
            workspace: launch.cwd.to_path_buf(),
            started_ms: crate::host::now_ms(),
            conversation: None,
        };
        if let Err(e) = live.write(&opening).await {
            return Err(live.died_at_start(e).await);
        }
        Ok(live)
    }

    /// Why a process that could not take its first words ended: its exit
    /// and the last of its stderr (what it said of a file it could not
    /// read, a flag it does not know), not the `Broken pipe` of writing
    /// to a process that is gone.
    async fn died_at_start(&mut self, error: std::io::Error) -> std::io::Error {
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            return error;
        }
        let status = tokio::time::timeout(Duration::from_secs(2), self.process.wait()).await;
        let exit = match status {
            Ok(Ok(status)) => format!("it exited at start ({status})"),
            _ => "it stopped reading its input at start".to_string(),
        };
        let said = self.process.stderr_tail().await;
        let said = said.iter().rev().take(3).rev().cloned().collect::<Vec<_>>();
        if said.is_empty() {
            std::io::Error::other(format!("{exit}, saying nothing on stderr"))
        } else {
            std::io::Error::other(format!("{exit}; its stderr ends: {}", said.join(" / ")))
        }
    }

    /// The harness's pid.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// The process group, and the turn marker, for a spawn hook.
    pub fn process(&self) -> &HarnessProcess {
        &self.process
    }

    /// The harness's session id, once it has named one.
    pub fn session_id(&self) -> Option<&str> {
        self.driver.session_id()
    }

    async fn write(&mut self, lines: &[String]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        for line in lines {
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
        }
        stdin.flush().await
    }

    /// Stop it: end of input, a moment to exit on its own (a harness saves
    /// its session as it goes: Kimi Code, stopped at once, loses the turn
    /// it just answered), then the group's SIGTERM and SIGKILL after
    /// `grace`, then whatever it left.
    pub async fn stop(mut self, grace: Duration) {
        // Dropped, not shut down: the pipe closes only with its last
        // descriptor, and the harness reads end of input only then.
        drop(self.stdin.take());
        let own = tokio::time::timeout(grace.min(EXIT_ON_EOF), self.process.wait()).await;
        if !matches!(own, Ok(Ok(_))) {
            let _ = self.process.terminate(grace).await;
        }
        self.process.clear().await;
    }

    /// Resident memory of the harness process, in bytes (Linux).
    fn rss_bytes(&self) -> u64 {
        self.pid().map_or(0, rss_bytes)
    }
}

/// Resident memory of process `pid`, in bytes (Linux; 0 when gone).
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// How a live turn ended, beyond its results.
pub struct LiveEnd {
    /// The terminal result and what the output said about the session.
    pub end: AttemptEnd,
    /// The process can serve the next turn.
    pub healthy: bool,
    /// It ended before it said anything of this turn (a process that died
    /// while idle, seen only now): the turn may be retried elsewhere.
    pub untouched: bool,
}

enum Over {
    /// The driver saw the turn's end.
    Ended(Box<ResultPayload>),
    /// The harness waits for a permission the person is asked for.
    Paused(PermissionRequest),
    /// The process exited (or closed its output) first.
    Exited,
    /// It did not honour the interrupt within the grace.
    Unresponsive,
}

/// The largest image sent inline with a prompt (base64 adds a third); a
/// larger one goes as a link to its workspace copy.
const MAX_INLINE_IMAGE: u64 = 4 * 1024 * 1024;

/// The turn's input files that have a workspace copy, as a prompt's files:
/// a `file://` link each, and an image small enough read to go inline
/// (through the workspace handle: a harness may have swapped the copy for
/// a link since, which is not followed).
pub fn prompt_files(projection: &crate::projection::Projection) -> Vec<PromptFile> {
    use base64::Engine as _;
    projection
        .input_files
        .iter()
        .filter_map(|file| {
            let relative = file.path.as_deref()?;
            let path = projection.workspace.join(relative);
            let is_image = file.kind == "image"
                && file
                    .mime_type
                    .as_deref()
                    .is_some_and(|m| m.starts_with("image/"))
                && file.size.is_none_or(|size| size <= MAX_INLINE_IMAGE);
            let image = is_image
                .then(|| {
                    projection
                        .dir
                        .read_head(Path::new(relative), MAX_INLINE_IMAGE + 1)
                        .ok()
                })
                .flatten()
                .filter(|head| head.size <= MAX_INLINE_IMAGE)
                .map(|head| base64::engine::general_purpose::STANDARD.encode(head.bytes));
            Some(PromptFile {
                uri: format!("file://{}", path.display()),
                name: file.name.clone(),
                mime_type: file.mime_type.clone(),
                image,
            })
        })
        .collect()
}

/// How a live turn begins.
pub enum Opening<'a> {
    /// A new prompt.
    Prompt(Prompt<'a>),
    /// The person's answer to the permission the last turn paused on: the
    /// paused tool call goes on (or is refused) in this turn.
    Permit(Decision),
}

/// What the turn answers when the harness asks for a permission: `Some`
/// to answer at once, `None` to pause the turn until the person answers.
pub type Decide<'a> = &'a (dyn Fn(&str, &serde_json::Value) -> Option<Decision> + Sync);

/// One turn on a live process: the prompt in, results out until the
/// driver sees the turn's end. Cancel and the deadline interrupt the turn
/// the harness's own way; only a harness that does not stop within the
/// grace is killed. A permission the person must give ends the turn with
/// the process paused on it.
pub async fn turn(
    spec: &AdapterSpec,
    process: &mut LiveProcess,
    opening: Opening<'_>,
    decide: Decide<'_>,
    live: &mut Live<'_>,
) -> LiveEnd {
    process.turns += 1;
    let opening = match opening {
        Opening::Prompt(prompt) => process.driver.turn_with(&prompt),
        Opening::Permit(decision) => match process.paused.take() {
            Some(request) => process.driver.permit(&request.id, &decision),
            None => Vec::new(),
        },
    };
    let writable = process.write(&opening).await.is_ok();
    let mut engine = LiveTurn {
        spec,
        process,
        decide,
        not_found: false,
        spoke: false,
        said: false,
        stop: None,
        interrupted_at: None,
        handed: std::collections::VecDeque::new(),
    };
    let over = if writable {
        engine::pump(&mut engine, live).await
    } else {
        Over::Exited
    };
    let LiveTurn {
        process,
        mut not_found,
        said,
        stop,
        ..
    } = engine;
    process.last_used = Instant::now();
    let untouched = matches!(over, Over::Exited) && stop.is_none() && !said;
    let session_id = process.session_id().map(str::to_string);
    // A turn paused on a question goes on in the run that answers it,
    // whose usage is the whole turn's: counted there, once.
    let paused = matches!(over, Over::Paused(_));
    let (terminal, healthy) = conclude(spec, process, over, stop, &mut not_found, live.grace).await;
    // A process whose session could not be opened serves no turn.
    let healthy = healthy && !not_found;
    if not_found && process.process.is_running() {
        let _ = process.process.terminate(live.grace).await;
        process.process.clear().await;
    }
    LiveEnd {
        end: AttemptEnd {
            terminal,
            session_id,
            session_not_found: not_found,
            usage: if paused { None } else { process.driver.usage() },
        },
        healthy,
        untouched,
    }
}

/// The turn's terminal result from how its loop ended, and whether the
/// process may serve the next turn. A process that did not stop, or
/// ended, is ended for good here (stderr quoted where it failed).
async fn conclude(
    spec: &AdapterSpec,
    process: &mut LiveProcess,
    over: Over,
    stop: Option<Stop>,
    not_found: &mut bool,
    grace: std::time::Duration,
) -> (ResultPayload, bool) {
    match (over, stop) {
        (Over::Ended(end), None) => (*end, true),
        (Over::Paused(request), _) => {
            // The card goes out with the run's end; the process waits.
            process.paused = Some(request);
            (
                ResultPayload::RunCompleted(RunCompleted {
                    finish_reason: "interaction_requested".into(),
                    message: None,
                }),
                true,
            )
        }
        (Over::Ended(_), Some(Stop::Cancelled)) => (
            attempt::failed(
                FailureCode::Cancelled,
                format!(
                    "the run was cancelled; {} stopped the turn and keeps the session",
                    spec.label
                ),
                false,
            ),
            true,
        ),
        (Over::Ended(_), Some(Stop::Deadline)) => (
            attempt::failed(
                FailureCode::DeadlineExceeded,
                format!(
                    "{} was still working at the run's deadline; the turn was interrupted",
                    spec.label
                ),
                true,
            ),
            true,
        ),
        (Over::Unresponsive, stop) => {
            let _ = process.process.terminate(grace).await;
            process.process.clear().await;
            let (code, why) = match stop {
                Some(Stop::Deadline) => (FailureCode::DeadlineExceeded, "at the run's deadline"),
                _ => (FailureCode::Cancelled, "when the run was cancelled"),
            };
            (
                {
                    let retryable = code == FailureCode::DeadlineExceeded;
                    attempt::failed(
                        code,
                        format!(
                            "{} did not stop its turn {why} and was stopped (grace {:.0}s before SIGKILL)",
                            spec.label,
                            grace.as_secs_f64()
                        ),
                        retryable,
                    )
                },
                false,
            )
        }
        (Over::Exited, stop) => (exited(spec, process, stop, not_found, grace).await, false),
    }
}

/// The turn of a live process that exited: stopped by the run (cancelled,
/// or at its deadline), else said as a harness run per turn says its
/// crash, with its stderr; whether the session was not found is noted.
async fn exited(
    spec: &AdapterSpec,
    process: &mut LiveProcess,
    stop: Option<Stop>,
    not_found: &mut bool,
    grace: std::time::Duration,
) -> ResultPayload {
    let status = process.process.terminate(grace).await;
    let exit = crate::harness::decode::Exit {
        code: status.ok().and_then(|s| s.code()),
    };
    process.process.clear().await;
    let stderr = process.process.stderr_tail().await;
    *not_found |= stderr.iter().any(|l| l.contains(&spec.session_not_found));
    match stop {
        Some(Stop::Cancelled) => attempt::failed(
            FailureCode::Cancelled,
            format!("the run was cancelled; {} was stopped", spec.label),
            false,
        ),
        Some(Stop::Deadline) => attempt::failed(
            FailureCode::DeadlineExceeded,
            format!(
                "{} was still working at the run's deadline and ended when interrupted",
                spec.label
            ),
            true,
        ),
        _ => {
            // Said as a harness run per turn says it: the same
            // crash reads the same in every front end.
            let mut failed = RunFailed {
                code: match exit.code {
                    Some(_) => FailureCode::HarnessError,
                    None => FailureCode::HarnessKilled,
                },
                error: exit.ended_early(&spec.label),
                retryable: false,
            };
            attempt::quote_stderr(&mut failed, &stderr);
            ResultPayload::RunFailed(failed)
        }
    }
}

/// One turn on a live process, over the shared loop.
struct LiveTurn<'p, 'd> {
    spec: &'p AdapterSpec,
    process: &'p mut LiveProcess,
    decide: Decide<'d>,
    /// The output said the session to resume does not exist.
    not_found: bool,
    /// The model (or a tool) has spoken: later text may quote anything.
    spoke: bool,
    /// The harness wrote anything this turn.
    said: bool,
    /// Why the run interrupted the turn, and when.
    stop: Option<Stop>,
    interrupted_at: Option<Instant>,
    /// Follow-ups written to the harness, waiting for it to take them; any
    /// left when the turn ends are dropped unanswered: the next turn's.
    handed: std::collections::VecDeque<super::Steer>,
}

impl Engine for LiveTurn<'_, '_> {
    type Over = Over;

    fn until(&self, io: &Live<'_>) -> Instant {
        match self.interrupted_at {
            Some(at) => at + io.grace,
            None => io.deadline,
        }
    }

    fn watch(&self) -> Watch {
        Watch {
            cancel: self.stop.is_none(),
            steer: self.stop.is_none(),
            output: true,
            exit: true,
        }
    }

    fn pipes(&mut self) -> (&mut Stdout, &mut HarnessProcess) {
        (&mut self.process.stdout, &mut self.process.process)
    }

    fn spent(&self) -> Option<crate::protocol::TokenUsage> {
        self.process.driver.usage()
    }

    async fn on(&mut self, event: Event<'_>, io: &mut Live<'_>) -> Option<Over> {
        match event {
            Event::Cancelled => self.interrupt(Stop::Cancelled).await,
            Event::Timer if self.interrupted_at.is_some() => Some(Over::Unresponsive),
            Event::Timer => self.interrupt(Stop::Deadline).await,
            Event::Steer(steer) => match self.process.driver.steer(&steer.text) {
                Some(lines) => {
                    if self.process.write(&lines).await.is_err() {
                        let _ = steer.taken.send(false);
                        return Some(Over::Exited);
                    }
                    // The turn's only once the harness says so.
                    self.handed.push_back(steer);
                    None
                }
                None => {
                    let _ = steer.taken.send(false);
                    None
                }
            },
            Event::Output([]) | Event::Exited(_) => Some(Over::Exited),
            Event::Output(bytes) => self.output(bytes, io).await,
        }
    }
}

impl LiveTurn<'_, '_> {
    /// Interrupt the turn the harness's own way; it then has the grace to
    /// end it.
    async fn interrupt(&mut self, why: Stop) -> Option<Over> {
        self.stop = Some(why);
        self.interrupted_at = Some(Instant::now());
        let lines = self.process.driver.interrupt();
        self.process.write(&lines).await.err().map(|_| Over::Exited)
    }

    /// Lines from the harness: results out, answers in (follow-ups taken,
    /// permissions decided), until the driver sees the turn's end or a
    /// permission the person must give.
    async fn output(&mut self, bytes: &[u8], io: &mut Live<'_>) -> Option<Over> {
        let spec = self.spec;
        let process = &mut *self.process;
        for line in process.lines.push(bytes) {
            let step = process.driver.line(&line);
            self.said = true;
            self.spoke = self.spoke
                || step
                    .results
                    .iter()
                    .any(|p| attempt::is_model_output(&p.kind()));
            if !self.spoke {
                self.not_found |=
                    !spec.session_not_found.is_empty() && line.contains(&spec.session_not_found);
            }
            self.not_found |= step.session_not_found;
            io.emit.push(step.results);
            if let Some(taken) = step.steered
                && let Some(steer) = self.handed.pop_front()
            {
                if taken {
                    io.emit.push(vec![steered(&steer.text)]);
                }
                let _ = steer.taken.send(taken);
            }
            if !step.write.is_empty() && process.write(&step.write).await.is_err() {
                return None;
            }
            if let Some(request) = step.permission {
                match (self.decide)(&request.tool, &request.input) {
                    Some(decision) => {
                        let answer = process.driver.permit(&request.id, &decision);
                        if process.write(&answer).await.is_err() {
                            return None;
                        }
                    }
                    None => return Some(Over::Paused(request)),
                }
            }
            if let Some(end) = step.ended {
                return Some(Over::Ended(Box::new(end)));
            }
        }
        None
    }
}

/// Longest part of a follow-up quoted in the stream.
const STEERED_QUOTE_CHARS: usize = 200;

/// What the stream says of a follow-up the running turn took: the turn's
/// results now answer two messages, and a reader sees which.
fn steered(text: &str) -> ResultPayload {
    let mut quote: String = text.chars().take(STEERED_QUOTE_CHARS).collect();
    if quote.len() < text.len() {
        quote.push('…');
    }
    ResultPayload::ProcessorLog(crate::protocol::ProcessorLog {
        level: "info".into(),
        text: format!("a follow-up went into this turn: {quote}"),
    })
}

/// The idle live processes of a bridge, and the pids of those serving a
/// turn (for the memory report).
pub struct LiveSessions {
    limits: LiveLimits,
    grace: Duration,
    idle: Mutex<HashMap<(PathBuf, String), (LiveKey, LiveProcess)>>,
    busy: Mutex<HashMap<u32, LiveSession>>,
}

/// One live harness process as an operator sees it (the console's live
/// list): which conversation workspace, since when, how much memory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LiveSession {
    /// The harness it runs.
    pub harness: String,
    /// Its pid.
    pub pid: u32,
    /// The conversation it serves, when its turns named one.
    pub conversation: Option<String>,
    /// The conversation workspace it runs in.
    pub workspace: PathBuf,
    /// When it started (epoch milliseconds).
    pub started_ms: i64,
    /// Turns it has served (the one it serves counted).
    pub turns: u64,
    /// Serving a turn now, else idle between turns.
    pub serving: bool,
    /// Resident memory, in bytes (Linux; 0 when unknown).
    pub rss_bytes: u64,
}

impl LiveProcess {
    /// What the live list shows of it.
    fn seen(&self, serving: bool) -> Option<LiveSession> {
        Some(LiveSession {
            harness: String::new(),
            pid: self.pid()?,
            conversation: self.conversation.clone(),
            workspace: self.workspace.clone(),
            started_ms: self.started_ms,
            turns: self.turns,
            serving,
            rss_bytes: 0,
        })
    }
}

/// A live process noted as serving a turn until this is dropped, so
/// `/metrics` reports its memory while it is out of the idle set.
pub struct Busy<'a> {
    sessions: &'a LiveSessions,
    pid: Option<u32>,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            self.sessions.busy().remove(&pid);
        }
    }
}

impl LiveSessions {
    /// An empty set; `grace` is what a stopped process gets before SIGKILL.
    pub fn new(limits: LiveLimits, grace: Duration) -> Arc<LiveSessions> {
        Arc::new(LiveSessions {
            limits,
            grace,
            idle: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashMap::new()),
        })
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashMap<u32, LiveSession>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Note `process` (of `harness`) as serving a turn, until the guard is
    /// dropped.
    pub fn serving(&self, harness: &str, process: &LiveProcess) -> Busy<'_> {
        let pid = process.pid();
        if let Some(seen) = process.seen(true) {
            self.busy().insert(
                seen.pid,
                LiveSession {
                    harness: harness.to_string(),
                    // The turn it serves now.
                    turns: seen.turns + 1,
                    ..seen
                },
            );
        }
        Busy {
            sessions: self,
            pid,
        }
    }

    fn idle(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(PathBuf, String), (LiveKey, LiveProcess)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an idle process of `harness` is kept for the conversation
    /// in `workspace`. Its session is that process's: the harness may not
    /// have written it out yet (Claude Code writes its transcript a moment
    /// after the turn), and does when the process is taken or stopped.
    pub fn holds(&self, workspace: &Path, harness: &str) -> bool {
        self.idle()
            .contains_key(&(workspace.to_path_buf(), harness.to_string()))
    }

    /// The idle process for `key`, if one is still running (it is the
    /// caller's until it is [`LiveSessions::put`] back). The conversation's
    /// process started some other way (another binding, other
    /// instructions) is stopped: the turn starts one of its own.
    pub async fn take(&self, key: &LiveKey) -> Option<LiveProcess> {
        let (started, mut found) = self.idle().remove(&key.slot())?;
        if started != *key {
            tracing::info!(
                harness = %key.harness,
                "the conversation's binding changed; its live harness process is replaced"
            );
            crate::metrics::global().live_evicted("changed");
            found.stop(self.grace).await;
            self.report();
            return None;
        }
        if found.process.is_running() {
            return Some(found);
        }
        tracing::info!(
            harness = %key.harness,
            "the live harness process exited while idle; the turn resumes its session in a new one"
        );
        found.process.clear().await;
        None
    }

    /// Keep `process` for the next turn of `key`; past `max_sessions`, the
    /// least recently used idle process is stopped.
    pub async fn put(&self, key: LiveKey, process: LiveProcess) {
        let evicted = {
            let mut idle = self.idle();
            let replaced = idle.insert(key.slot(), (key, process));
            let mut evicted: Vec<LiveProcess> = replaced.into_iter().map(|(_, p)| p).collect();
            while idle.len() > self.limits.max_sessions {
                let Some(oldest) = idle
                    .iter()
                    .min_by_key(|(_, (_, p))| p.last_used)
                    .map(|(slot, _)| slot.clone())
                else {
                    break;
                };
                evicted.extend(idle.remove(&oldest).map(|(_, p)| p));
            }
            evicted
        };
        for process in evicted {
            tracing::info!("a live harness process was evicted (max_live_sessions)");
            crate::metrics::global().live_evicted("max_sessions");
            process.stop(self.grace).await;
        }
        self.report();
    }

    /// Stop the processes idle for longer than `idle_timeout`.
    pub async fn evict_idle(&self) {
        let expired: Vec<LiveProcess> = {
            let mut idle = self.idle();
            let old: Vec<(PathBuf, String)> = idle
                .iter()
                .filter(|(_, (_, p))| p.last_used.elapsed() >= self.limits.idle_timeout)
                .map(|(slot, _)| slot.clone())
                .collect();
            old.iter()
                .filter_map(|slot| idle.remove(slot))
                .map(|(_, p)| p)
                .collect()
        };
        for process in expired {
            tracing::info!("a live harness process was idle past idle_timeout_seconds; stopped");
            crate::metrics::global().live_evicted("idle");
            process.stop(self.grace).await;
        }
        self.report();
    }

    /// Stop the idle processes that serve `conversation` (`/new`,
    /// `/resume`: the next turn starts its own); how many.
    pub async fn end_conversation(&self, conversation: &str) -> usize {
        let ended: Vec<LiveProcess> = {
            let mut idle = self.idle();
            let slots: Vec<(PathBuf, String)> = idle
                .iter()
                .filter(|(_, (_, p))| p.conversation.as_deref() == Some(conversation))
                .map(|(slot, _)| slot.clone())
                .collect();
            slots
                .iter()
                .filter_map(|slot| idle.remove(slot))
                .map(|(_, p)| p)
                .collect()
        };
        let count = ended.len();
        for process in ended {
            process.stop(self.grace).await;
        }
        self.report();
        count
    }

    /// Run [`LiveSessions::evict_idle`] every few seconds while `self` lives.
    pub fn start_reaper(self: &Arc<Self>) {
        let sessions = Arc::downgrade(self);
        let every = (self.limits.idle_timeout / 4)
            .clamp(Duration::from_millis(200), Duration::from_secs(30));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                sessions.evict_idle().await;
            }
        });
    }

    /// Stop every idle process (the bridge is shutting down).
    pub async fn shutdown(&self) {
        let all: Vec<LiveProcess> = self.idle().drain().map(|(_, (_, p))| p).collect();
        let stops = all.into_iter().map(|p| p.stop(self.grace));
        futures_util::future::join_all(stops).await;
        self.report();
    }

    /// Idle processes now.
    pub fn len(&self) -> usize {
        self.idle().len()
    }

    /// Whether none is idle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gauges in `/metrics`: idle processes, and the resident memory
    /// of each live process, idle or serving a turn.
    fn report(&self) {
        let idle: Vec<(String, u32, u64)> = self
            .idle()
            .iter()
            .filter_map(|((_, harness), (_, p))| Some((harness.clone(), p.pid()?, p.rss_bytes())))
            .collect();
        let busy: Vec<(String, u32, u64)> = self
            .busy()
            .iter()
            .map(|(pid, seen)| (seen.harness.clone(), *pid, rss_bytes(*pid)))
            .collect();
        crate::metrics::global().set_live(&idle, &busy);
    }

    /// Every live process now, serving a turn or idle, with the memory
    /// `/metrics` counts: what the console's live list shows.
    pub fn list(&self) -> Vec<LiveSession> {
        let mut all: Vec<LiveSession> = self
            .idle()
            .iter()
            .filter_map(|((_, harness), (_, p))| {
                let seen = p.seen(false)?;
                Some(LiveSession {
                    harness: harness.clone(),
                    ..seen
                })
            })
            .collect();
        all.extend(self.busy().values().cloned());
        for seen in &mut all {
            seen.rss_bytes = rss_bytes(seen.pid);
        }
        all.sort_by_key(|s| s.started_ms);
        all
    }

    /// Refresh the gauges (before `/metrics` is read).
    pub fn refresh_metrics(&self) {
        self.report();
    }
}
