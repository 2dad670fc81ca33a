//! Stream decoders: a harness's stdout lines → Protocol v1 results.
//!
//! One decoder per output format, behind one trait, each in its family's
//! folder (`harness/families/<name>/decode.rs`), so a new CLI that speaks
//! a known format is a new adapter spec and no new code. Decoders
//! never fail: a malformed or unknown line is logged and skipped. The
//! [`ResultStream`] around them numbers results 1, 2, 3… and stamps them,
//! and [`LineBuffer`] reassembles lines split across reads.

mod lines;

pub use lines::{LineBuffer, Piece};

use crate::host::now_ms;
use serde_json::Value;

use crate::protocol::{AgentRunResult, ResultPayload, TokenUsage};

/// How the harness process ended, as the decoder needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The exit code; `None` when killed by a signal.
    pub code: Option<i32>,
}

impl Exit {
    /// Whether the process reported success.
    pub fn success(self) -> bool {
        self.code == Some(0)
    }

    /// What the person reads when the harness ended before the turn did:
    /// one sentence for every harness, run per turn or kept alive.
    pub fn ended_early(self, label: &str) -> String {
        match self.code {
            Some(code) => format!("{label} exited with code {code} without completing the turn"),
            None => format!("{label} was killed without completing the turn"),
        }
    }

    /// The terminal result of a harness whose output said whether the
    /// turn `completed`: completed (with its last `message`) when the
    /// process also succeeded; else failed, in the harness's own words
    /// (`said`) or by how the process ended, killed or in error.
    pub fn ending(
        self,
        label: &str,
        completed: bool,
        message: Option<String>,
        said: Option<String>,
    ) -> ResultPayload {
        if completed && self.success() {
            return ResultPayload::RunCompleted(crate::protocol::RunCompleted {
                finish_reason: "stop".into(),
                message: message.map(crate::protocol::Message::assistant),
            });
        }
        let error = match said {
            Some(said) => format!("{label} failed: {said}"),
            None => self.ended_early(label),
        };
        ResultPayload::RunFailed(crate::protocol::RunFailed {
            code: match self.code {
                None => crate::protocol::FailureCode::HarnessKilled,
                Some(_) => crate::protocol::FailureCode::HarnessError,
            },
            error,
            retryable: false,
        })
    }
}

/// A harness output format.
pub trait Decoder: Send {
    /// Payloads for one complete output line (without its newline).
    fn line(&mut self, line: &str) -> Vec<ResultPayload>;
    /// Payloads once the process has exited: the terminal result, if the
    /// output did not already carry one.
    fn finish(&mut self, exit: Exit) -> Vec<ResultPayload>;
    /// The harness's session id, once the output has named it.
    fn session_id(&self) -> Option<&str>;
    /// The turn's token usage, where the output reports it.
    fn usage(&self) -> Option<TokenUsage> {
        None
    }
}

/// Token usage from the counts a harness reports, under its own names:
/// `input`, `output` and `total` (the sum when absent) become the SDK's
/// counters; every other number in `counts` rides along under its own
/// name (cache reads, reasoning tokens, cost). `None` without input or
/// output counts.
pub fn token_usage(counts: &Value, input: &str, output: &str, total: &str) -> Option<TokenUsage> {
    let map = counts.as_object()?;
    let prompt = map.get(input).and_then(Value::as_u64);
    let completion = map.get(output).and_then(Value::as_u64);
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    let total_tokens = map
        .get(total)
        .and_then(Value::as_u64)
        .or(Some(prompt.unwrap_or(0) + completion.unwrap_or(0)));
    let extra = map
        .iter()
        .filter(|(k, v)| ![input, output, total].contains(&k.as_str()) && v.is_number())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(TokenUsage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens,
        extra,
    })
}

/// One output line as JSON of type `T`; a line that is not (a stray log
/// line, a banner) is skipped with a debug note, never an error.
pub(crate) fn json_line<'a, T: serde::Deserialize<'a>>(line: &'a str) -> Option<T> {
    let parsed = serde_json::from_str::<T>(line).ok();
    if parsed.is_none() && !line.trim().is_empty() {
        tracing::debug!(line = %line.chars().take(200).collect::<String>(), "skipping a non-JSON output line");
    }
    parsed
}

/// A JSON value as the object a tool result or its arguments carry:
/// an object as it is, nothing as empty, anything else as `{"value": …}`.
pub(crate) fn object(value: &serde_json::Value) -> crate::protocol::JsonMap {
    match value {
        serde_json::Value::Object(map) => map.clone(),
        serde_json::Value::Null => crate::protocol::JsonMap::new(),
        other => {
            let mut map = crate::protocol::JsonMap::new();
            map.insert("value".into(), other.clone());
            map
        }
    }
}

/// A run's ordered result stream: sequence from 1, a timestamp on each,
/// and nothing after the terminal result.
pub struct ResultStream {
    run_id: String,
    next: u64,
    ended: bool,
}

impl ResultStream {
    /// A stream for `run_id`.
    pub fn new(run_id: impl Into<String>) -> Self {
        ResultStream {
            run_id: run_id.into(),
            next: 1,
            ended: false,
        }
    }

    /// Stamp payloads into results; anything after a terminal result is dropped.
    pub fn stamp(&mut self, payloads: Vec<ResultPayload>) -> Vec<AgentRunResult> {
        let mut out = Vec::with_capacity(payloads.len());
        for payload in payloads {
            if self.ended {
                tracing::warn!(run_id = %self.run_id, kind = %payload.kind(), "result after the run ended; dropped");
                continue;
            }
            self.ended = payload.kind().is_terminal();
            let mut result = AgentRunResult::new(self.run_id.clone(), payload);
            result.sequence = Some(self.next);
            // Epoch seconds, as the protocol and the released SDK have it.
            result.timestamp = Some(now_ms() / 1000);
            self.next += 1;
            out.push(result);
        }
        out
    }

    /// Whether the terminal result has been emitted.
    pub fn ended(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{RunCompleted, RunFailed};

    #[test]
    fn sequence_is_strict_and_nothing_follows_the_end() {
        let mut stream = ResultStream::new("r");
        let done = ResultPayload::RunCompleted(RunCompleted {
            finish_reason: "stop".into(),
            message: None,
        });
        let failed = ResultPayload::RunFailed(RunFailed {
            code: "x".into(),
            error: "y".into(),
            retryable: false,
        });
        let out = stream.stamp(vec![done.clone()]);
        assert_eq!(out[0].sequence, Some(1));
        assert!(stream.ended());
        assert!(stream.stamp(vec![failed]).is_empty());
    }
}
