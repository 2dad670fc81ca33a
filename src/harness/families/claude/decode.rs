//! Claude Code `--output-format stream-json --verbose` (with
//! `--include-partial-messages` for token deltas).
//!
//! The terminal result waits for the process to exit: failure is judged by
//! `is_error` *and* the exit code, never by `subtype` alone (an API error
//! reports `subtype: "success"` with `is_error: true`).

use std::collections::HashMap;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::harness::decode::{Decoder, Exit, json_line, token_usage};
use crate::protocol::FailureCode;
use crate::protocol::{
    JsonMap, Message, MessageChunk, ProcessorLog, ResultPayload, RunCompleted, RunFailed,
    TokenUsage, ToolCallCompleted, ToolCallStarted,
};

/// Decoder state for one Claude Code run.
#[derive(Debug, Default)]
pub struct ClaudeStreamJson {
    session_id: Option<String>,
    /// tool_use id → tool name, to name completions.
    tools: HashMap<String, String>,
    /// The `result` line, held (unparsed) until the exit code is known.
    result: Option<String>,
    /// Its usage, once the turn finished.
    usage: Option<TokenUsage>,
    /// Each model call's counts so far (message id → input, output, cache
    /// read, cache write), the turn's usage while it runs: a budget can
    /// stop a turn mid-way, and a stopped turn's spending is kept.
    calls: HashMap<String, [u64; 4]>,
    /// What Claude Code said in place of a reply when the model could not
    /// be asked (`error` on its assistant line: not signed in, a refused
    /// request), and that error's kind: the turn's failure, not a reply.
    api_error: Option<(String, String)>,
}

fn text_chunk(text: &str) -> ResultPayload {
    ResultPayload::MessageDelta(crate::protocol::MessageDelta {
        chunk: MessageChunk::assistant_text(text),
    })
}

fn object(value: &Value) -> JsonMap {
    match value {
        Value::Object(map) => map.clone(),
        Value::Null => JsonMap::new(),
        other => JsonMap::from_iter([("value".to_string(), other.clone())]),
    }
}

/// A tool_result's content as text (a string, or text blocks).
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl ClaudeStreamJson {
    /// Note one model call's counts (each of its content blocks repeats
    /// them: the largest seen is the call's).
    fn count_call(&mut self, message: &Value) {
        let (Some(id), Some(usage)) = (message["id"].as_str(), message["usage"].as_object()) else {
            return;
        };
        let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let counts = [
            n("input_tokens"),
            n("output_tokens"),
            n("cache_read_input_tokens"),
            n("cache_creation_input_tokens"),
        ];
        let kept = self.calls.entry(id.to_string()).or_default();
        for (kept, seen) in kept.iter_mut().zip(counts) {
            *kept = (*kept).max(seen);
        }
    }

    /// The model calls' counts summed: the turn's usage before its result.
    fn so_far(&self) -> Option<TokenUsage> {
        if self.calls.is_empty() {
            return None;
        }
        let mut sum = [0u64; 4];
        for call in self.calls.values() {
            for (sum, n) in sum.iter_mut().zip(call) {
                *sum = sum.saturating_add(*n);
            }
        }
        let [input, output, cache_read, cache_write] = sum;
        Some(TokenUsage {
            prompt_tokens: Some(input),
            completion_tokens: Some(output),
            total_tokens: Some(input.saturating_add(output)),
            extra: crate::protocol::JsonMap::from_iter([
                ("cache_read_input_tokens".to_string(), cache_read.into()),
                (
                    "cache_creation_input_tokens".to_string(),
                    cache_write.into(),
                ),
            ]),
        })
    }

    fn init(&mut self, line: &str) -> Vec<ResultPayload> {
        let Ok(init) = serde_json::from_str::<Init>(line) else {
            return Vec::new();
        };
        // A failed MCP server does not fail Claude's run: say so, loudly.
        init.mcp_servers
            .into_iter()
            .filter(|s| s.status.as_deref() != Some("connected"))
            .map(|s| {
                let text = format!(
                    "MCP server `{}` is {} in the harness: its tools are unavailable this turn",
                    s.name.as_deref().unwrap_or("?"),
                    s.status.as_deref().unwrap_or("not connected")
                );
                tracing::warn!("{text}");
                ResultPayload::ProcessorLog(ProcessorLog {
                    text,
                    level: "warning".into(),
                })
            })
            .collect()
    }

    fn assistant(&mut self, line: &Value) -> Vec<ResultPayload> {
        // Claude Code's own message in place of the model's ("Not logged
        // in · Please run /login"): the failure's sentence, never a reply
        // the host would keep as the assistant's.
        if let Some(kind) = line["error"].as_str() {
            let said: Vec<&str> = line["message"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect();
            self.api_error = Some((kind.to_string(), said.join(" ")));
            return Vec::new();
        }
        self.count_call(&line["message"]);
        let mut out = Vec::new();
        for block in line["message"]["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") => {
                    let text = block["text"].as_str().unwrap_or("");
                    if !text.is_empty() {
                        out.push(ResultPayload::MessageCompleted(
                            crate::protocol::MessageCompleted {
                                message: Message::assistant(text),
                                file_ids: Vec::new(),
                            },
                        ));
                    }
                }
                Some("tool_use") => {
                    let id = block["id"].as_str().unwrap_or("").to_string();
                    let name = block["name"].as_str().unwrap_or("").to_string();
                    self.tools.insert(id.clone(), name.clone());
                    out.push(ResultPayload::ToolCallStarted(ToolCallStarted {
                        tool_call_id: id,
                        tool_name: name,
                        parameters: object(&block["input"]),
                    }));
                }
                _ => {}
            }
        }
        out
    }

    fn user(&mut self, line: &Value) -> Vec<ResultPayload> {
        line["message"]["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                let id = b["tool_use_id"].as_str().unwrap_or("").to_string();
                let text = result_text(&b["content"]);
                let failed = b["is_error"].as_bool().unwrap_or(false);
                ResultPayload::ToolCallCompleted(ToolCallCompleted {
                    tool_name: self.tools.get(&id).cloned().unwrap_or_default(),
                    tool_call_id: id,
                    result: (!failed).then(|| {
                        JsonMap::from_iter([("text".to_string(), Value::String(text.clone()))])
                    }),
                    error: failed.then_some(text),
                })
            })
            .collect()
    }
}

/// The fields every line is routed by, read without building the rest:
/// most lines are token deltas, and a full `Value` per delta would be most
/// of the decoder's time.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    event: Option<&'a RawValue>,
}

/// The `init` line, as far as the MCP servers' status goes.
#[derive(Deserialize)]
struct Init {
    #[serde(default)]
    mcp_servers: Vec<McpStatus>,
}

#[derive(Deserialize)]
struct McpStatus {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

/// A `stream_event`'s event, as far as deltas need it.
#[derive(Deserialize)]
struct StreamEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

impl Decoder for ClaudeStreamJson {
    fn line(&mut self, line: &str) -> Vec<ResultPayload> {
        let Some(head) = json_line::<Head>(line) else {
            return Vec::new();
        };
        if head.kind.as_deref() == Some("stream_event") {
            let Some(event) = head
                .event
                .and_then(|raw| serde_json::from_str::<StreamEvent>(raw.get()).ok())
            else {
                return Vec::new();
            };
            return match (event.kind.as_deref(), event.delta) {
                (Some("content_block_delta"), Some(delta))
                    if delta.kind.as_deref() == Some("text_delta") =>
                {
                    vec![text_chunk(delta.text.as_deref().unwrap_or(""))]
                }
                _ => Vec::new(),
            };
        }
        if let Some(id) = head.session_id
            && self.session_id.as_deref() != Some(&id)
        {
            self.session_id = Some(id.into_owned());
        }
        match (head.kind.as_deref(), head.subtype.as_deref()) {
            (Some("system"), Some("init")) => self.init(line),
            (Some("result"), _) => {
                self.result = Some(line.to_string());
                Vec::new()
            }
            (Some("assistant" | "user"), _) => {
                // A few lines per turn, with content blocks: read them whole.
                let Ok(value) = serde_json::from_str::<Value>(line) else {
                    return Vec::new();
                };
                if head.kind.as_deref() == Some("assistant") {
                    self.assistant(&value)
                } else {
                    self.user(&value)
                }
            }
            _ => Vec::new(),
        }
    }

    fn finish(&mut self, exit: Exit) -> Vec<ResultPayload> {
        let result = self
            .result
            .take()
            .and_then(|line| serde_json::from_str::<Value>(&line).ok());
        self.usage = result.as_ref().and_then(|result| {
            let mut usage = token_usage(
                &result["usage"],
                "input_tokens",
                "output_tokens",
                "total_tokens",
            )?;
            if let Some(cost) = result.get("total_cost_usd").filter(|c| c.is_number()) {
                usage.extra.insert("total_cost_usd".into(), cost.clone());
            }
            Some(usage)
        });
        let is_error = result
            .as_ref()
            .is_none_or(|r| r["is_error"].as_bool().unwrap_or(true));
        if !is_error && exit.success() {
            let result = result.unwrap_or_default();
            let text = result["result"].as_str().unwrap_or("");
            return vec![ResultPayload::RunCompleted(RunCompleted {
                finish_reason: result["stop_reason"].as_str().unwrap_or("stop").to_string(),
                message: (!text.is_empty()).then(|| Message::assistant(text)),
            })];
        }
        if let Some((kind, said)) = self.api_error.take() {
            let (code, error) = if kind == "authentication_failed" {
                (
                    FailureCode::NotSignedIn,
                    format!("Claude Code is not signed in (it says: {said})"),
                )
            } else {
                (
                    FailureCode::HarnessError,
                    format!("Claude Code could not ask its model ({kind}): {said}"),
                )
            };
            return vec![ResultPayload::RunFailed(RunFailed {
                code,
                error,
                retryable: false,
            })];
        }
        let error = match &result {
            Some(r) => {
                let errors: Vec<&str> = r["errors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let detail = if errors.is_empty() {
                    r["result"].as_str().unwrap_or("").to_string()
                } else {
                    errors.join("; ")
                };
                // An API error is `subtype: success` with `is_error`: the
                // subtype then names nothing worth telling (the person in
                // a chat reads this line).
                match r["subtype"].as_str() {
                    Some("success") => format!("Claude Code failed: {detail}"),
                    subtype => format!(
                        "Claude Code failed ({}): {detail}",
                        subtype.unwrap_or("error")
                    ),
                }
            }
            None => exit.ended_early("Claude Code"),
        };
        let code = match result.as_ref().and_then(|r| r["subtype"].as_str()) {
            Some("error_max_turns") => FailureCode::MaxTurns,
            Some(_) | None if exit.code.is_none() => FailureCode::HarnessKilled,
            _ => FailureCode::HarnessError,
        };
        vec![ResultPayload::RunFailed(RunFailed {
            code,
            error,
            retryable: false,
        })]
    }

    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The result's usage; before it (a turn stopped mid-way), the sum
    /// of the model calls seen.
    fn usage(&self) -> Option<TokenUsage> {
        self.usage.clone().or_else(|| self.so_far())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResultType;

    fn kinds(out: &[ResultPayload]) -> Vec<ResultType> {
        out.iter().map(ResultPayload::kind).collect()
    }

    #[test]
    fn a_turn_stopped_mid_way_has_the_usage_of_its_model_calls_so_far() {
        let mut decode = ClaudeStreamJson::default();
        for line in [
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"a"}],"usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":100}}}"#,
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t","name":"x","input":{}}],"usage":{"input_tokens":10,"output_tokens":7,"cache_read_input_tokens":100}}}"#,
            r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"b"}],"usage":{"input_tokens":20,"output_tokens":5}}}"#,
        ] {
            decode.line(line);
        }
        let so_far = decode.usage().expect("the calls' counts");
        assert_eq!(
            (so_far.prompt_tokens, so_far.completion_tokens),
            (Some(30), Some(12)),
            "each call once, at its largest"
        );
        assert_eq!(so_far.extra["cache_read_input_tokens"], 100);
        decode.line(r#"{"type":"result","subtype":"success","is_error":false,"result":"b","usage":{"input_tokens":31,"output_tokens":13},"total_cost_usd":0.5}"#);
        decode.finish(Exit { code: Some(0) });
        let done = decode.usage().expect("the result's counts");
        assert_eq!(done.prompt_tokens, Some(31), "the result's own count wins");
    }

    #[test]
    fn a_turn_with_a_tool_call_decodes_in_order() {
        let mut d = ClaudeStreamJson::default();
        let mut out = Vec::new();
        for line in [
            r#"{"type":"system","subtype":"init","session_id":"s-1","mcp_servers":[{"name":"langbot","status":"connected"},{"name":"extra","status":"failed"}]}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"mcp__langbot__history_page","input":{"limit":5}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"items"}]}]}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Fri"}}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Friday."}]}}"#,
            "not json at all",
            r#"{"type":"mystery"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Friday.","session_id":"s-1","stop_reason":"end_turn"}"#,
        ] {
            out.extend(d.line(line));
        }
        assert_eq!(d.session_id(), Some("s-1"));
        out.extend(d.finish(Exit { code: Some(0) }));
        assert_eq!(
            kinds(&out),
            [
                ResultType::ProcessorLog,
                ResultType::ToolCallStarted,
                ResultType::ToolCallCompleted,
                ResultType::MessageDelta,
                ResultType::MessageCompleted,
                ResultType::RunCompleted
            ]
        );
        let ResultPayload::ToolCallCompleted(done) = &out[2] else {
            panic!()
        };
        assert_eq!(done.tool_name, "mcp__langbot__history_page");
        let ResultPayload::RunCompleted(end) = &out[5] else {
            panic!()
        };
        assert_eq!(end.finish_reason, "end_turn");
    }

    #[test]
    fn not_signed_in_is_a_failure_that_says_so_not_a_reply() {
        let mut d = ClaudeStreamJson::default();
        let out = d.line(
            r#"{"type":"assistant","message":{"model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"Not logged in · Please run /login"}]},"session_id":"s-1","error":"authentication_failed"}"#,
        );
        assert!(out.is_empty(), "{out:?}");
        d.line(r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","session_id":"s-1"}"#);
        let end = d.finish(Exit { code: Some(1) });
        let [ResultPayload::RunFailed(failed)] = end.as_slice() else {
            panic!("{end:?}");
        };
        assert_eq!(failed.code, FailureCode::NotSignedIn);
        assert_eq!(
            failed.error,
            "Claude Code is not signed in (it says: Not logged in · Please run /login)"
        );
    }

    #[test]
    fn failure_is_judged_by_is_error_and_exit_code() {
        // An API error says `subtype: success` but `is_error: true`.
        let mut d = ClaudeStreamJson::default();
        d.line(
            r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 401"}"#,
        );
        let out = d.finish(Exit { code: Some(1) });
        let ResultPayload::RunFailed(failed) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(failed.error, "Claude Code failed: API Error: 401");
        // A success line but a non-zero exit still fails.
        let mut d = ClaudeStreamJson::default();
        d.line(r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#);
        assert!(matches!(
            d.finish(Exit { code: Some(2) })[0],
            ResultPayload::RunFailed(_)
        ));
        // No result line at all.
        let mut d = ClaudeStreamJson::default();
        let out = d.finish(Exit { code: None });
        let ResultPayload::RunFailed(failed) = &out[0] else {
            panic!()
        };
        assert_eq!(failed.code, "harness_killed");
        // Resume of a missing session.
        let mut d = ClaudeStreamJson::default();
        d.line(r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["No conversation found with session ID: x"]}"#);
        let ResultPayload::RunFailed(failed) = &d.finish(Exit { code: Some(1) })[0] else {
            panic!()
        };
        assert!(failed.error.contains("No conversation found"));
    }
}
