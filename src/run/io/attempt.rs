//! One harness process: launch it, decode its stdout into results as the
//! lines come, pick up outbox files as they are finished, stop the whole
//! process group at the deadline or on cancel, and end whatever it left
//! running before the attempt returns.
//!
//! The terminal result is *returned*, not sent: the run decides whether
//! the attempt stands or is retried as a fresh session, and sends the
//! state and artifacts that belong before the end.

use std::process::ExitStatus;
use std::time::Duration;

use crate::harness::spawn::Stdout;
use tokio::time::Instant;

use super::engine::{self, Engine, Event, Live, Stop, Watch};
use crate::harness::decode::{Decoder, Exit, LineBuffer};
use crate::harness::{AdapterSpec, HarnessProcess, Launch};
use crate::protocol::{FailureCode, ResultPayload, ResultType, RunFailed, TokenUsage};

/// How long stdout may stay open after the harness exited.
const STDOUT_DRAIN: Duration = Duration::from_secs(2);
/// How many stderr lines a harness failure quotes.
const QUOTED_STDERR_LINES: usize = 8;

/// How one attempt ended.
pub struct AttemptEnd {
    /// `run.completed` or `run.failed`.
    pub terminal: ResultPayload,
    /// The harness's session id, when its output named one.
    pub session_id: Option<String>,
    /// The output said the session to resume does not exist.
    pub session_not_found: bool,
    /// The turn's token usage, where the harness reported it.
    pub usage: Option<TokenUsage>,
}

pub(in crate::run) fn failed(code: FailureCode, error: String, retryable: bool) -> ResultPayload {
    ResultPayload::RunFailed(RunFailed {
        code,
        error,
        retryable,
    })
}

/// Run the harness once, streaming its results into `live.emit`.
pub async fn attempt(spec: &AdapterSpec, launch: &Launch<'_>, live: &mut Live<'_>) -> AttemptEnd {
    let decode = match spec.decoder {
        Some(format) => format.decoder(),
        None => {
            return AttemptEnd {
                terminal: failed(
                    FailureCode::HarnessError,
                    format!(
                        "adapter `{}` has no one-shot mode: it runs only live",
                        spec.name
                    ),
                    false,
                ),
                session_id: None,
                session_not_found: false,
                usage: None,
            };
        }
    };
    if live.cancel.is_cancelled() {
        return AttemptEnd {
            terminal: failed(
                FailureCode::Cancelled,
                "the run was cancelled before the harness started".into(),
                false,
            ),
            session_id: None,
            session_not_found: false,
            usage: None,
        };
    }
    let (process, stdout) = match HarnessProcess::spawn(launch).await {
        Ok(spawned) => spawned,
        Err(e) => {
            tracing::error!(program = %launch.program.display(), error = %e, "cannot start the harness");
            return AttemptEnd {
                terminal: failed(
                    FailureCode::HarnessError,
                    format!("cannot start {}: {e}", spec.label),
                    false,
                ),
                session_id: None,
                session_not_found: false,
                usage: None,
            };
        }
    };
    tracing::info!(harness = %spec.name, pgid = ?process.pgid(), "harness started");
    (live.bind)(&process);
    if let (Some(hook), Some(pgid)) = (live.on_spawn, process.pgid()) {
        (hook.0)(&crate::run::Spawned {
            pgid,
            workspace: launch.cwd,
            marker: process.marker(),
        });
    }
    let mut one = OneShot {
        spec,
        process,
        stdout,
        decode,
        lines: LineBuffer::default(),
        not_found: false,
        spoke: false,
        stdout_open: true,
        exited: None,
        drain_until: None,
    };
    let stop = engine::pump(&mut one, live).await;
    one.finish(stop, live).await
}

/// A harness process started for one turn: its output decoded line by
/// line, its end the turn's end.
struct OneShot<'s> {
    spec: &'s AdapterSpec,
    process: HarnessProcess,
    stdout: Stdout,
    decode: Box<dyn Decoder>,
    lines: LineBuffer,
    /// The output said the session to resume does not exist.
    not_found: bool,
    /// The model (or a tool) has spoken: later text may quote anything.
    spoke: bool,
    stdout_open: bool,
    exited: Option<std::io::Result<ExitStatus>>,
    /// Past its exit, how long output still in the pipe is waited for.
    drain_until: Option<Instant>,
}

impl Engine for OneShot<'_> {
    /// Why the run stopped the harness; `None`: it ended on its own.
    type Over = Option<Stop>;

    fn until(&self, io: &Live<'_>) -> Instant {
        // Past its exit, the harness gets a short window for output still
        // in the pipe; a consumer that holds results back does not use it up.
        match self.drain_until {
            Some(drain) if !io.emit.pending() => drain.min(io.deadline),
            _ => io.deadline,
        }
    }

    fn watch(&self) -> Watch {
        Watch {
            cancel: true,
            steer: false,
            output: self.stdout_open,
            exit: self.exited.is_none(),
        }
    }

    fn pipes(&mut self) -> (&mut Stdout, &mut HarnessProcess) {
        (&mut self.stdout, &mut self.process)
    }

    fn spent(&self) -> Option<crate::protocol::TokenUsage> {
        self.decode.usage()
    }

    async fn on(&mut self, event: Event<'_>, io: &mut Live<'_>) -> Option<Option<Stop>> {
        match event {
            Event::Cancelled => Some(Some(Stop::Cancelled)),
            // Past the drain window the harness has ended on its own;
            // only a harness still running has missed the deadline.
            Event::Timer => Some(self.exited.is_none().then_some(Stop::Deadline)),
            Event::Output([]) => {
                self.stdout_open = false;
                self.exited.is_some().then_some(None)
            }
            Event::Output(bytes) => {
                if self.exited.is_some() {
                    self.drain_until = Some(Instant::now() + STDOUT_DRAIN);
                }
                for line in self.lines.push(bytes) {
                    let payloads = self.decode.line(&line);
                    // A harness that cannot resume says so before the
                    // model speaks; after that, the text is the model's
                    // or a tool's, and may quote anything.
                    self.spoke = self.spoke || payloads.iter().any(|p| is_model_output(&p.kind()));
                    if !self.spoke {
                        self.not_found |= line.contains(&self.spec.session_not_found);
                    }
                    io.emit.push(payloads);
                }
                None
            }
            Event::Exited(status) => {
                // Whatever the harness left running ends with it.
                self.process.clear().await;
                self.exited = Some(status);
                if !self.stdout_open {
                    return Some(None);
                }
                // Everything that could hold stdout open is gone, so it
                // ends soon; what is still in the pipe is read first.
                self.drain_until = Some(Instant::now() + STDOUT_DRAIN);
                None
            }
            Event::Steer(_) => None,
        }
    }
}

impl OneShot<'_> {
    /// End the process if it still runs, read what is left, and say how
    /// the attempt ended.
    async fn finish(mut self, stop: Option<Stop>, live: &mut Live<'_>) -> AttemptEnd {
        let spec = self.spec;
        // A harness that already exited ended the turn on its own, whatever
        // came after (what it left is gone; do not signal it again).
        let (stop, status) = match self.exited.take() {
            Some(status) => (None, status),
            None => {
                let status = self.process.terminate(live.grace).await;
                self.process.clear().await;
                (stop, status)
            }
        };
        if let Some(line) = self.lines.finish() {
            self.not_found |= !self.spoke && line.contains(&spec.session_not_found);
            let payloads = self.decode.line(&line);
            live.emit.send(payloads).await;
        }
        let stderr = self.process.stderr_tail().await;
        self.not_found |= stderr.iter().any(|l| l.contains(&spec.session_not_found));
        let session_id = self.decode.session_id().map(str::to_string);
        let terminal = match stop {
            Some(Stop::Deadline) => failed(
                FailureCode::DeadlineExceeded,
                format!(
                    "{} was still running at the run's deadline and was stopped (grace {:.0}s before SIGKILL)",
                    spec.label,
                    live.grace.as_secs_f64()
                ),
                true,
            ),
            Some(Stop::Cancelled) => failed(
                FailureCode::Cancelled,
                format!("the run was cancelled; {} was stopped", spec.label),
                false,
            ),
            None => {
                let exit = Exit {
                    code: status.ok().and_then(|s| s.code()),
                };
                let mut payloads = self.decode.finish(exit);
                let terminal = payloads
                    .iter()
                    .rposition(|p| p.kind().is_terminal())
                    .map(|i| payloads.remove(i));
                live.emit.send(payloads).await;
                match terminal {
                    Some(ResultPayload::RunFailed(mut f)) => {
                        if !exit.success() {
                            quote_stderr(&mut f, &stderr);
                        }
                        ResultPayload::RunFailed(f)
                    }
                    Some(other) => other,
                    None => failed(
                        FailureCode::HarnessError,
                        exit.ended_early(&spec.label),
                        false,
                    ),
                }
            }
        };
        AttemptEnd {
            terminal,
            session_id,
            session_not_found: self.not_found,
            usage: self.decode.usage(),
        }
    }
}

/// Add the last stderr lines to a failure's sentence.
pub(in crate::run) fn quote_stderr(failed: &mut RunFailed, stderr: &[String]) {
    let from = stderr.len().saturating_sub(QUOTED_STDERR_LINES);
    if stderr[from..].is_empty() {
        return;
    }
    failed.error.push_str("\nlast stderr lines:");
    for line in &stderr[from..] {
        failed.error.push_str("\n  ");
        failed.error.push_str(line);
    }
}

/// Results that carry the model's (or a tool's) words.
pub(in crate::run) fn is_model_output(kind: &ResultType) -> bool {
    matches!(
        kind,
        ResultType::MessageDelta
            | ResultType::MessageCompleted
            | ResultType::ToolCallStarted
            | ResultType::ToolCallCompleted
    )
}
