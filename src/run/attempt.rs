//! One harness process: launch it, decode its stdout into results as the
//! lines come, pick up outbox files as they are finished, stop the whole
//! process group at the deadline or on cancel, and end whatever it left
//! running before the attempt returns.
//!
//! The terminal result is *returned*, not sent: the run decides whether
//! the attempt stands or is retried as a fresh session, and sends the
//! state and artifacts that belong before the end.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::emit::Emitter;
use super::outbox::{self, Outbox};
use crate::harness::decode::{Exit, LineBuffer, decoder};
use crate::harness::{AdapterSpec, HarnessProcess, Launch};
use crate::host::{HostApi, RunScope};
use crate::protocol::FailureCode;
use crate::protocol::{ResultPayload, ResultType, RunFailed, TokenUsage};

/// How long stdout may stay open after the harness exited.
const STDOUT_DRAIN: Duration = Duration::from_secs(2);
/// How many stderr lines a harness failure quotes.
const QUOTED_STDERR_LINES: usize = 8;

/// What the run needs while the process lives.
pub struct Live<'a> {
    /// Where results go.
    pub emit: &'a mut Emitter,
    /// The workspace's outbox.
    pub outbox: &'a mut Outbox,
    /// For outbox files too large to send inline.
    pub host: &'a dyn HostApi,
    /// Who the run is, for stored artifacts.
    pub scope: &'a RunScope,
    /// When the run must be over.
    pub deadline: Instant,
    /// Set when the run is cancelled.
    pub cancel: &'a CancellationToken,
    /// How long the group gets between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Told each harness that starts.
    pub on_spawn: Option<&'a super::SpawnHook>,
    /// Binds the run's token to each harness that starts (its only
    /// holder from then on).
    pub bind: &'a (dyn Fn(&HarnessProcess) + Send + Sync),
    /// Follow-ups for the running turn (a live harness that takes them).
    pub steer: Option<&'a mut tokio::sync::mpsc::Receiver<super::Steer>>,
}

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

enum Stop {
    Deadline,
    Cancelled,
}

pub(super) fn failed(code: FailureCode, error: String, retryable: bool) -> ResultPayload {
    ResultPayload::RunFailed(RunFailed {
        code,
        error,
        retryable,
    })
}

/// Queue one outbox file as `artifact.created` (a file that cannot be read
/// is logged and skipped: it never fails the run).
pub async fn push_artifact(live: &mut Live<'_>, name: String) {
    match outbox::artifact(live.outbox.dir(), name, live.scope, live.host).await {
        Ok(created) => live
            .emit
            .push(vec![ResultPayload::ArtifactCreated(created)]),
        Err(e) => tracing::warn!("{e}"),
    }
}

/// Run the harness once, streaming its results into `live.emit`.
pub async fn attempt(spec: &AdapterSpec, launch: &Launch<'_>, live: &mut Live<'_>) -> AttemptEnd {
    let mut decode = match decoder(&spec.decoder) {
        Some(d) => d,
        None => {
            return AttemptEnd {
                terminal: failed(
                    FailureCode::HarnessError,
                    format!(
                        "adapter `{}` names unknown decoder `{}`",
                        spec.name, spec.decoder
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
    let (mut process, mut stdout) = match HarnessProcess::spawn(launch) {
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
        (hook.0)(&super::Spawned {
            pgid,
            workspace: launch.cwd,
            marker: process.marker(),
        });
    }
    let mut lines = LineBuffer::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut not_found = false;
    let mut spoke = false;
    let mut stdout_open = true;
    let mut exited = None;
    let mut drain_until: Option<Instant> = None;
    // The deadline and cancel are watched in every state, also while
    // results wait for a consumer that stopped reading: back-pressure
    // pauses reading the harness's output, never its stop.
    let stop = loop {
        // Past its exit, the harness gets a short window for output still
        // in the pipe; a consumer that holds results back does not use it up.
        let until = match drain_until {
            Some(drain) if !live.emit.pending() => drain.min(live.deadline),
            _ => live.deadline,
        };
        tokio::select! {
            biased;
            () = live.cancel.cancelled() => break Some(Stop::Cancelled),
            () = tokio::time::sleep_until(until) => {
                // Past the drain window the harness has ended on its own;
                // only a harness still running has missed the deadline.
                break if exited.is_some() { None } else { Some(Stop::Deadline) };
            }
            () = live.emit.flush(), if live.emit.pending() => {}
            read = stdout.read(&mut buf), if stdout_open && !live.emit.pending() => match read {
                Ok(0) | Err(_) => {
                    stdout_open = false;
                    if exited.is_some() {
                        break None;
                    }
                }
                Ok(n) => {
                    if exited.is_some() {
                        drain_until = Some(Instant::now() + STDOUT_DRAIN);
                    }
                    for line in lines.push(&buf[..n]) {
                        let payloads = decode.line(&line);
                        // A harness that cannot resume says so before the
                        // model speaks; after that, the text is the model's
                        // or a tool's, and may quote anything.
                        spoke = spoke || payloads.iter().any(|p| is_model_output(&p.kind()));
                        if !spoke {
                            not_found |= line.contains(&spec.session_not_found);
                        }
                        live.emit.push(payloads);
                    }
                }
            },
            status = process.wait(), if exited.is_none() => {
                // Whatever the harness left running ends with it.
                process.clear().await;
                exited = Some(status);
                if !stdout_open {
                    break None;
                }
                // Everything that could hold stdout open is gone, so it
                // ends soon; what is still in the pipe is read first.
                drain_until = Some(Instant::now() + STDOUT_DRAIN);
            }
            Some(name) = live.outbox.next(), if !live.emit.pending() => push_artifact(live, name).await,
        }
    };
    // A harness that already exited ended the turn on its own, whatever
    // came after (what it left is gone; do not signal it again).
    let (stop, status) = match exited {
        Some(status) => (None, status),
        None => {
            let status = process.terminate(live.grace).await;
            process.clear().await;
            (stop, status)
        }
    };
    if let Some(line) = lines.finish() {
        not_found |= !spoke && line.contains(&spec.session_not_found);
        let payloads = decode.line(&line);
        live.emit.send(payloads).await;
    }
    let stderr = process.stderr_tail().await;
    not_found |= stderr.iter().any(|l| l.contains(&spec.session_not_found));
    let session_id = decode.session_id().map(str::to_string);
    let seconds = |d: Duration| d.as_secs_f64();
    let terminal = match stop {
        Some(Stop::Deadline) => failed(
            FailureCode::DeadlineExceeded,
            format!(
                "{} was still running at the run's deadline and was stopped (grace {:.0}s before SIGKILL)",
                spec.label,
                seconds(live.grace)
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
            let mut payloads = decode.finish(exit);
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
                    format!("{} ended without a result", spec.label),
                    false,
                ),
            }
        }
    };
    AttemptEnd {
        terminal,
        session_id,
        session_not_found: not_found,
        usage: decode.usage(),
    }
}

/// Add the last stderr lines to a failure's sentence.
pub(super) fn quote_stderr(failed: &mut RunFailed, stderr: &[String]) {
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
pub(super) fn is_model_output(kind: &ResultType) -> bool {
    matches!(
        kind,
        ResultType::MessageDelta
            | ResultType::MessageCompleted
            | ResultType::ToolCallStarted
            | ResultType::ToolCallCompleted
    )
}
