//! Codex `exec --json` lines: `thread.started`, `item.*` (agent messages,
//! commands, MCP tool calls, file changes), `turn.completed|failed`,
//! `error`. As for Claude, the terminal result waits for the exit code.

use serde_json::Value;

use crate::harness::decode::{Decoder, Exit, json_line, token_usage};
use crate::protocol::{
    JsonMap, Message, MessageCompleted, ResultPayload, TokenUsage, ToolCallCompleted,
    ToolCallStarted,
};

/// Decoder state for one Codex run.
#[derive(Debug, Default)]
pub struct CodexJsonl {
    thread_id: Option<String>,
    last_message: Option<String>,
    failure: Option<String>,
    completed: bool,
    usage: Option<TokenUsage>,
}

/// An item's type in `exec --json`'s spelling; the app-server spells the
/// same items in camelCase.
fn kind(item: &Value) -> &str {
    match item["type"].as_str().unwrap_or("") {
        "agentMessage" => "agent_message",
        "commandExecution" => "command_execution",
        "mcpToolCall" => "mcp_tool_call",
        "fileChange" => "file_change",
        other => other,
    }
}

/// A tool item's name and parameters, or `None` for other item types.
fn tool(item: &Value) -> Option<(String, JsonMap)> {
    let mut params = JsonMap::new();
    let name = match kind(item) {
        "command_execution" => {
            params.insert("command".into(), item["command"].clone());
            "shell".to_string()
        }
        "mcp_tool_call" => {
            if let Value::Object(args) = &item["arguments"] {
                params = args.clone();
            }
            format!(
                "mcp__{}__{}",
                item["server"].as_str().unwrap_or("?"),
                item["tool"].as_str().unwrap_or("?")
            )
        }
        "file_change" => {
            params.insert("changes".into(), item["changes"].clone());
            "apply_patch".to_string()
        }
        _ => return None,
    };
    Some((name, params))
}

/// The results of one item event of either Codex stream (`started` or
/// completed): a finished agent message (its text also kept in
/// `last_message`), or a tool call's start or end.
pub(crate) fn item_results(
    started: bool,
    item: &Value,
    last_message: &mut Option<String>,
) -> Vec<ResultPayload> {
    let id = item["id"].as_str().unwrap_or("").to_string();
    if kind(item) == "agent_message" {
        if started {
            return Vec::new();
        }
        let text = item["text"].as_str().unwrap_or("").to_string();
        *last_message = Some(text.clone());
        return vec![ResultPayload::MessageCompleted(MessageCompleted {
            message: Message::assistant(text),
            file_ids: Vec::new(),
        })];
    }
    let Some((name, params)) = tool(item) else {
        return Vec::new();
    };
    if started {
        return vec![ResultPayload::ToolCallStarted(ToolCallStarted {
            tool_call_id: id,
            tool_name: name,
            parameters: params,
        })];
    }
    let failed = matches!(item["status"].as_str(), Some("failed" | "declined"));
    let mut result = JsonMap::new();
    for (key, camel) in [
        ("aggregated_output", "aggregatedOutput"),
        ("exit_code", "exitCode"),
        ("result", "result"),
        ("status", "status"),
    ] {
        let value = if item[key].is_null() {
            &item[camel]
        } else {
            &item[key]
        };
        if !value.is_null() {
            result.insert(key.into(), value.clone());
        }
    }
    let error = item["error"]["message"]
        .as_str()
        .or(item["error"].as_str())
        .map(str::to_string);
    vec![ResultPayload::ToolCallCompleted(ToolCallCompleted {
        tool_call_id: id,
        tool_name: name,
        result: (!failed).then_some(result),
        error: if failed {
            Some(error.unwrap_or_else(|| "tool call failed".into()))
        } else {
            None
        },
    })]
}

impl Decoder for CodexJsonl {
    fn line(&mut self, line: &str) -> Vec<ResultPayload> {
        let Some(value) = json_line::<Value>(line) else {
            return Vec::new();
        };
        match value["type"].as_str() {
            Some("thread.started") => {
                self.thread_id = value["thread_id"].as_str().map(str::to_string);
                Vec::new()
            }
            Some(event @ ("item.started" | "item.completed")) => item_results(
                event == "item.started",
                &value["item"],
                &mut self.last_message,
            ),
            Some("turn.completed") => {
                self.completed = true;
                self.usage = token_usage(
                    &value["usage"],
                    "input_tokens",
                    "output_tokens",
                    "total_tokens",
                );
                Vec::new()
            }
            Some("turn.failed") => {
                self.failure = value["error"]["message"]
                    .as_str()
                    .map(str::to_string)
                    .or(Some("turn failed".into()));
                Vec::new()
            }
            Some("error") => {
                // Codex also reports non-fatal notices as `error`; a failed
                // turn follows with `turn.failed` when it is fatal.
                tracing::warn!(message = %value["message"], "codex reported an error");
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn finish(&mut self, exit: Exit) -> Vec<ResultPayload> {
        let completed = self.completed && self.failure.is_none();
        vec![exit.ending(
            "Codex",
            completed,
            self.last_message.take(),
            self.failure.take(),
        )]
    }

    fn session_id(&self) -> Option<&str> {
        self.thread_id.as_deref()
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
    fn a_turn_with_an_mcp_call_decodes_in_order() {
        let mut d = CodexJsonl::default();
        let mut out = Vec::new();
        for line in [
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"i1","type":"mcp_tool_call","server":"langbot","tool":"history_page","arguments":{"limit":5},"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"mcp_tool_call","server":"langbot","tool":"history_page","arguments":{"limit":5},"result":{"content":[]},"status":"completed"}}"#,
            r#"{"type":"item.started","item":{"id":"i2","type":"command_execution","command":"ls","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i2","type":"command_execution","command":"ls","aggregated_output":"x","exit_code":1,"status":"failed"}}"#,
            r#"{"type":"item.completed","item":{"id":"i3","type":"agent_message","text":"Friday."}}"#,
            "garbage",
            r#"{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":5}}"#,
        ] {
            out.extend(d.line(line));
        }
        out.extend(d.finish(Exit { code: Some(0) }));
        assert_eq!(d.session_id(), Some("th-1"));
        let kinds: Vec<ResultType> = out.iter().map(ResultPayload::kind).collect();
        assert_eq!(
            kinds,
            [
                ResultType::ToolCallStarted,
                ResultType::ToolCallCompleted,
                ResultType::ToolCallStarted,
                ResultType::ToolCallCompleted,
                ResultType::MessageCompleted,
                ResultType::RunCompleted
            ]
        );
        let ResultPayload::ToolCallStarted(call) = &out[0] else {
            panic!()
        };
        assert_eq!(call.tool_name, "mcp__langbot__history_page");
        let ResultPayload::ToolCallCompleted(failed) = &out[3] else {
            panic!()
        };
        assert!(failed.error.is_some() && failed.result.is_none());
    }

    #[test]
    fn failures_become_run_failed() {
        let mut d = CodexJsonl::default();
        d.line(r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#);
        let ResultPayload::RunFailed(failed) = &d.finish(Exit { code: Some(1) })[0] else {
            panic!()
        };
        assert!(failed.error.contains("stream disconnected"));
        let mut d = CodexJsonl::default();
        d.line(r#"{"type":"turn.completed"}"#);
        assert!(matches!(
            d.finish(Exit { code: Some(1) })[0],
            ResultPayload::RunFailed(_)
        ));
    }
}
