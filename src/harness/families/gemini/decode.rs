//! Gemini CLI's `--output-format stream-json`: one `{type, timestamp, …}`
//! object a line. `init {session_id, model}` opens the turn; the model's
//! text comes as `message {role: "assistant", content, delta: true}`
//! (real token deltas, no "message done" event: a message ends where a
//! tool call or the result begins); tools run between `tool_use
//! {tool_name, tool_id, parameters}` and `tool_result {tool_id, status,
//! output, error}`; `error {severity, message}` reports a problem and the
//! last line is `result {status, error?, stats}`.

use std::collections::HashMap;

use serde_json::Value;

use crate::harness::decode::{Decoder, Exit, json_line, object, token_usage};
use crate::protocol::{
    Message, MessageChunk, MessageCompleted, MessageDelta, ResultPayload, TokenUsage,
    ToolCallCompleted, ToolCallStarted,
};

/// The decoder; one per turn.
#[derive(Debug, Default)]
pub struct GeminiStreamJson {
    session_id: Option<String>,
    /// `result.status`, once seen.
    status: Option<String>,
    /// The assistant text since the last message ended.
    text: String,
    last_message: Option<String>,
    /// Tool names by call id, to name a call's completion.
    tools: HashMap<String, String>,
    /// The last error the stream reported.
    error: Option<String>,
    /// `result.stats`' counts.
    usage: Option<TokenUsage>,
}

impl GeminiStreamJson {
    /// The message the deltas so far make, ended by what comes next.
    fn end_message(&mut self) -> Vec<ResultPayload> {
        let text = std::mem::take(&mut self.text);
        if text.trim().is_empty() {
            return Vec::new();
        }
        self.last_message = Some(text.clone());
        vec![ResultPayload::MessageCompleted(MessageCompleted {
            message: Message::assistant(text),
            file_ids: Vec::new(),
        })]
    }
}

fn error_text(value: &Value) -> Option<String> {
    value["message"]
        .as_str()
        .or(value.as_str())
        .filter(|m| !m.is_empty())
        .map(str::to_string)
}

impl Decoder for GeminiStreamJson {
    fn line(&mut self, line: &str) -> Vec<ResultPayload> {
        let Some(value) = json_line::<Value>(line) else {
            return Vec::new();
        };
        match value["type"].as_str() {
            Some("init") => {
                self.session_id = value["session_id"].as_str().map(str::to_string);
                Vec::new()
            }
            Some("message") if value["role"] == "assistant" => match value["content"].as_str() {
                Some(text) if !text.is_empty() => {
                    self.text.push_str(text);
                    vec![ResultPayload::MessageDelta(MessageDelta {
                        chunk: MessageChunk::assistant_text(text),
                    })]
                }
                _ => Vec::new(),
            },
            Some("tool_use") => {
                let (Some(id), Some(name)) =
                    (value["tool_id"].as_str(), value["tool_name"].as_str())
                else {
                    return Vec::new();
                };
                self.tools.insert(id.into(), name.into());
                let mut out = self.end_message();
                out.push(ResultPayload::ToolCallStarted(ToolCallStarted {
                    tool_call_id: id.into(),
                    tool_name: name.into(),
                    parameters: object(&value["parameters"]),
                }));
                out
            }
            Some("tool_result") => {
                let Some(id) = value["tool_id"].as_str() else {
                    return Vec::new();
                };
                let Some(name) = self.tools.remove(id) else {
                    return Vec::new();
                };
                let ok = value["status"] != "error";
                vec![ResultPayload::ToolCallCompleted(ToolCallCompleted {
                    tool_call_id: id.into(),
                    tool_name: name,
                    result: ok.then(|| object(&value["output"])),
                    error: (!ok).then(|| {
                        error_text(&value["error"]).unwrap_or_else(|| "tool call failed".into())
                    }),
                })]
            }
            Some("error") => {
                if value["severity"] != "warning" {
                    self.error = error_text(&value);
                }
                Vec::new()
            }
            Some("result") => {
                self.status = value["status"].as_str().map(str::to_string);
                self.usage = token_usage(
                    &value["stats"],
                    "input_tokens",
                    "output_tokens",
                    "total_tokens",
                );
                if let Some(error) = error_text(&value["error"]) {
                    self.error = Some(error);
                }
                self.end_message()
            }
            _ => Vec::new(),
        }
    }

    fn finish(&mut self, exit: Exit) -> Vec<ResultPayload> {
        // Text after the last message ended (no result line came): the
        // deltas carried it; it is the final message if any is.
        let text = std::mem::take(&mut self.text);
        if !text.trim().is_empty() {
            self.last_message = Some(text);
        }
        let completed = self.status.as_deref() == Some("success");
        vec![exit.ending(
            "Gemini CLI",
            completed,
            self.last_message.take(),
            self.error.take(),
        )]
    }

    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    fn usage(&self) -> Option<TokenUsage> {
        self.usage.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResultType;

    #[test]
    fn a_turn_with_a_tool_call_decodes_in_order() {
        let lines = [
            r#"{"type":"init","session_id":"740e951b-459d-44b0-9927-d639351218d1","model":"gemini-2.5-flash"}"#,
            r#"{"type":"message","role":"user","content":"What did we decide?"}"#,
            r#"{"type":"message","role":"assistant","content":"Let me ","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"look.","delta":true}"#,
            r#"{"type":"tool_use","tool_name":"mcp_langbot_history_page","tool_id":"t1","parameters":{"limit":5}}"#,
            r#"{"type":"tool_result","tool_id":"t1","status":"success","output":"DECISION"}"#,
            r#"{"type":"message","role":"assistant","content":"Friday.","delta":true}"#,
            r#"{"type":"result","status":"success","stats":{"total_tokens":15,"input_tokens":10,"output_tokens":5,"cached":2,"models":{}}}"#,
        ];
        let mut decode = GeminiStreamJson::default();
        let mut results: Vec<ResultPayload> = lines.iter().flat_map(|l| decode.line(l)).collect();
        results.extend(decode.finish(Exit { code: Some(0) }));
        let kinds: Vec<ResultType> = results.iter().map(ResultPayload::kind).collect();
        assert_eq!(
            kinds,
            [
                ResultType::MessageDelta,
                ResultType::MessageDelta,
                ResultType::MessageCompleted,
                ResultType::ToolCallStarted,
                ResultType::ToolCallCompleted,
                ResultType::MessageDelta,
                ResultType::MessageCompleted,
                ResultType::RunCompleted,
            ]
        );
        match results.last() {
            Some(ResultPayload::RunCompleted(done)) => {
                let message = serde_json::to_string(&done.message).unwrap_or_default();
                assert!(
                    message.contains("Friday.") && !message.contains("look"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            decode.session_id(),
            Some("740e951b-459d-44b0-9927-d639351218d1")
        );
        let usage = decode.usage().expect("the stats' counts");
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.total_tokens
            ),
            (Some(10), Some(5), Some(15))
        );
        assert_eq!(usage.extra.get("cached"), Some(&serde_json::json!(2)));
        assert!(
            !usage.extra.contains_key("models"),
            "only counts ride along"
        );
    }

    #[test]
    fn an_exit_mid_message_gives_the_terminal_result_alone() {
        // Found by the fuzz target: text, then the process ends with no
        // result line. The deltas carried the text; the exit gives one
        // terminal result and nothing else.
        let mut decode = GeminiStreamJson::default();
        decode.line(r#"{"type":"message","role":"assistant","content":"Friday.","delta":true}"#);
        let end = decode.finish(Exit { code: Some(123) });
        assert_eq!(end.len(), 1, "{end:?}");
        assert!(matches!(&end[0], ResultPayload::RunFailed(_)), "{end:?}");
    }

    #[test]
    fn an_error_result_fails_with_its_reason() {
        let mut decode = GeminiStreamJson::default();
        decode.line(r#"{"type":"error","severity":"error","message":"quota exceeded"}"#);
        decode.line(r#"{"type":"result","status":"error","error":{"type":"FatalError","message":"the model refused"}}"#);
        match decode.finish(Exit { code: Some(1) }).pop() {
            Some(ResultPayload::RunFailed(failed)) => {
                assert_eq!(failed.code, "harness_error");
                assert!(
                    failed.error.contains("the model refused"),
                    "{}",
                    failed.error
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
