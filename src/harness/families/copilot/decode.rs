//! GitHub Copilot CLI's `--output-format json`: one `{type, data, id,
//! timestamp}` object a line. Token deltas are
//! `assistant.message_delta {deltaContent}`; a finished message is
//! `assistant.message {content, toolRequests}`; tools run between
//! `tool.execution_start {toolCallId, toolName, arguments}` and
//! `tool.execution_complete {toolCallId, success, result}`; the last line
//! is `result {sessionId, exitCode}` (no token counts anywhere in the
//! stream). Session-level notices (`session.*`, `model.*`) are skipped.

use std::collections::HashMap;

use serde_json::Value;

use crate::harness::decode::{Decoder, Exit, json_line, object};
use crate::protocol::{
    Message, MessageChunk, MessageCompleted, MessageDelta, ResultPayload, TokenUsage,
    ToolCallCompleted, ToolCallStarted,
};

/// The decoder; one per turn.
#[derive(Debug, Default)]
pub struct CopilotJson {
    session_id: Option<String>,
    /// `result.exitCode`, once seen.
    exit_code: Option<i64>,
    last_message: Option<String>,
    /// Tool names by call id, to name a call's completion.
    tools: HashMap<String, String>,
    /// The last error the stream reported.
    error: Option<String>,
}

impl Decoder for CopilotJson {
    fn line(&mut self, line: &str) -> Vec<ResultPayload> {
        let Some(value) = json_line::<Value>(line) else {
            return Vec::new();
        };
        let data = &value["data"];
        match value["type"].as_str() {
            Some("assistant.message_delta") => match data["deltaContent"].as_str() {
                Some(text) if !text.is_empty() => {
                    vec![ResultPayload::MessageDelta(MessageDelta {
                        chunk: MessageChunk::assistant_text(text),
                    })]
                }
                _ => Vec::new(),
            },
            Some("assistant.message") => match data["content"].as_str() {
                Some(text) if !text.trim().is_empty() => {
                    self.last_message = Some(text.to_string());
                    vec![ResultPayload::MessageCompleted(MessageCompleted {
                        message: Message::assistant(text),
                        file_ids: Vec::new(),
                    })]
                }
                _ => Vec::new(),
            },
            Some("tool.execution_start") => {
                let (Some(id), Some(name)) =
                    (data["toolCallId"].as_str(), data["toolName"].as_str())
                else {
                    return Vec::new();
                };
                self.tools.insert(id.into(), name.into());
                vec![ResultPayload::ToolCallStarted(ToolCallStarted {
                    tool_call_id: id.into(),
                    tool_name: name.into(),
                    parameters: object(&data["arguments"]),
                })]
            }
            Some("tool.execution_complete") => {
                let Some(id) = data["toolCallId"].as_str() else {
                    return Vec::new();
                };
                let Some(name) = self.tools.remove(id) else {
                    return Vec::new();
                };
                let ok = data["success"].as_bool().unwrap_or(true);
                vec![ResultPayload::ToolCallCompleted(ToolCallCompleted {
                    tool_call_id: id.into(),
                    tool_name: name,
                    result: ok.then(|| object(&data["result"])),
                    error: (!ok).then(|| {
                        data["error"]["message"]
                            .as_str()
                            .or(data["error"].as_str())
                            .unwrap_or("tool call failed")
                            .to_string()
                    }),
                })]
            }
            Some("session.error") => {
                self.error = data["message"].as_str().map(str::to_string);
                Vec::new()
            }
            Some("result") => {
                self.session_id = value["sessionId"].as_str().map(str::to_string);
                self.exit_code = value["exitCode"].as_i64();
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn finish(&mut self, exit: Exit) -> Vec<ResultPayload> {
        let completed = self.exit_code == Some(0);
        vec![exit.ending(
            "Copilot",
            completed,
            self.last_message.take(),
            self.error.take(),
        )]
    }

    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
}

/// The counts summed over every model in a `--usage-output-file`
/// document: (input, output, cache read, cache write).
fn file_counts(doc: &Value) -> [u64; 4] {
    let mut sums = [0; 4];
    for model in doc["modelMetrics"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
    {
        let usage = &model["usage"];
        for (sum, key) in sums.iter_mut().zip([
            "inputTokens",
            "outputTokens",
            "cacheReadTokens",
            "cacheWriteTokens",
        ]) {
            *sum += usage[key].as_u64().unwrap_or(0);
        }
    }
    sums
}

/// A turn's usage from Copilot's `--usage-output-file`, which counts the
/// whole session: `after` this turn less `before` it, when both are of one
/// session (the same `sessionStartTime`), else all of `after` (a fresh
/// session).
pub fn usage_from_file(before: Option<&Value>, after: &Value) -> Option<TokenUsage> {
    let start = after["sessionStartTime"].as_str()?;
    let now = file_counts(after);
    let then = before
        .filter(|b| b["sessionStartTime"].as_str() == Some(start))
        .map(file_counts)
        .unwrap_or_default();
    let [input, output, cache_read, cache_write] =
        std::array::from_fn(|i| now[i].saturating_sub(then[i]));
    let mut extra = crate::protocol::JsonMap::new();
    extra.insert("cache_read_tokens".into(), cache_read.into());
    extra.insert("cache_write_tokens".into(), cache_write.into());
    Some(TokenUsage {
        prompt_tokens: Some(input),
        completion_tokens: Some(output),
        total_tokens: Some(input + output),
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResultType;

    #[test]
    fn a_turn_with_a_tool_call_decodes_in_order() {
        let lines = [
            r#"{"type":"session.mcp_servers_loaded","data":{"servers":[]}}"#,
            r#"{"type":"assistant.message_delta","data":{"messageId":"m","deltaContent":"Let me look."}}"#,
            r#"{"type":"assistant.message","data":{"messageId":"m","content":"Let me look.","toolRequests":[{"toolCallId":"t1"}]}}"#,
            r#"{"type":"tool.execution_start","data":{"toolCallId":"t1","toolName":"langbot-history_page","arguments":{"limit":5}}}"#,
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"t1","success":true,"result":{"content":"DECISION"}}}"#,
            r#"{"type":"assistant.message_delta","data":{"messageId":"n","deltaContent":"Friday."}}"#,
            r#"{"type":"assistant.message","data":{"messageId":"n","content":"Friday.","toolRequests":[]}}"#,
            r#"{"type":"result","sessionId":"393b90a8-3e3e-4044-8073-1851d1651f40","exitCode":0,"usage":{"premiumRequests":0}}"#,
        ];
        let mut decode = CopilotJson::default();
        let mut results: Vec<ResultPayload> = lines.iter().flat_map(|l| decode.line(l)).collect();
        results.extend(decode.finish(Exit { code: Some(0) }));
        let kinds: Vec<ResultType> = results.iter().map(ResultPayload::kind).collect();
        assert_eq!(
            kinds,
            [
                ResultType::MessageDelta,
                ResultType::MessageCompleted,
                ResultType::ToolCallStarted,
                ResultType::ToolCallCompleted,
                ResultType::MessageDelta,
                ResultType::MessageCompleted,
                ResultType::RunCompleted,
            ]
        );
        assert_eq!(
            decode.session_id(),
            Some("393b90a8-3e3e-4044-8073-1851d1651f40")
        );
    }

    #[test]
    fn a_turns_usage_is_the_sessions_file_less_the_last_turns() {
        let file = |start: &str, input: u64, output: u64| {
            serde_json::json!({"sessionStartTime": start, "modelMetrics": {
                "a": {"usage": {"inputTokens": input, "outputTokens": output, "cacheReadTokens": 1}},
                "b": {"usage": {"inputTokens": 1, "outputTokens": 1}},
            }})
        };
        let first = usage_from_file(None, &file("t1", 10, 7)).unwrap();
        assert_eq!(
            (first.prompt_tokens, first.completion_tokens),
            (Some(11), Some(8))
        );
        let before = file("t1", 10, 7);
        let second = usage_from_file(Some(&before), &file("t1", 25, 12)).unwrap();
        assert_eq!(
            (second.prompt_tokens, second.completion_tokens),
            (Some(15), Some(5))
        );
        assert_eq!(second.total_tokens, Some(20));
        // Another session (the old one could not be resumed): all of it.
        let fresh = usage_from_file(Some(&before), &file("t2", 3, 2)).unwrap();
        assert_eq!(fresh.prompt_tokens, Some(4));
        assert!(usage_from_file(None, &serde_json::json!({})).is_none());
    }

    #[test]
    fn an_exit_without_a_result_fails_with_the_reason() {
        let mut decode = CopilotJson::default();
        decode.line(r#"{"type":"session.error","data":{"message":"model unavailable"}}"#);
        match decode.finish(Exit { code: Some(1) }).pop() {
            Some(ResultPayload::RunFailed(failed)) => {
                assert_eq!(failed.code, "harness_error");
                assert!(
                    failed.error.contains("model unavailable"),
                    "{}",
                    failed.error
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
