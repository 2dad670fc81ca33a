//! Claude Code with `--input-format stream-json`: a user turn is one
//! `{"type":"user",...}` line on stdin, its output the same stream-json the
//! one-shot mode prints, ending in one `result` line per turn. An interrupt
//! is a `control_request` (`subtype: interrupt`), answered with a
//! `control_response`; the interrupted turn still ends with its `result`
//! (`error_during_execution`), and the next turn goes on in the same
//! session. With `--permission-prompt-tool stdio` a tool that needs
//! permission is a `control_request` (`subtype: can_use_tool`, `tool_name`,
//! `input`) that waits for its `control_response` (`behavior: allow` with
//! `updatedInput`, or `deny` with a `message`) for as long as it takes
//! (measured with the pinned CLI, see docs/harnesses/claude-code.md).

use serde_json::{Value, json};

use super::decode::ClaudeStreamJson;
use crate::harness::decode::{Decoder, Exit};
use crate::harness::live::{LiveDriver, PermissionRequest, Setup, Step};
use crate::interaction::Decision;

/// The driver; one per live process.
#[derive(Default)]
pub struct ClaudeLive {
    decode: ClaudeStreamJson,
    session_id: Option<String>,
    interrupts: u64,
    /// The process's cost so far as its last finished turn's `result`
    /// said it: `total_cost_usd` is the whole process's running total, so
    /// a turn's own cost is what it added.
    cost_before: f64,
}

impl ClaudeLive {
    /// The process's running cost as the current turn's `result` says it.
    fn process_cost(&self) -> Option<f64> {
        self.decode
            .usage()?
            .extra
            .get("total_cost_usd")
            .and_then(Value::as_f64)
    }
}

impl LiveDriver for ClaudeLive {
    fn open(&mut self, _resume: Option<&str>, _setup: &Setup) -> Vec<String> {
        // Resuming is `--resume` on the command line; nothing to say first.
        Vec::new()
    }

    fn turn(&mut self, prompt: &str) -> Vec<String> {
        if let Some(total) = self.process_cost() {
            self.cost_before = total;
        }
        // A fresh decoder per turn: its text and result belong to one turn.
        self.decode = ClaudeStreamJson::default();
        let line = json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        });
        vec![line.to_string()]
    }

    fn line(&mut self, line: &str) -> Step {
        let mut step = Step {
            results: self.decode.line(line),
            ..Step::default()
        };
        if let Some(id) = self.decode.session_id() {
            self.session_id = Some(id.to_string());
        }
        if line.contains("\"control_request\"") {
            step.permission = permission_request(line);
        }
        // Only the few lines that end a turn are parsed twice.
        if line.contains("\"result\"")
            && serde_json::from_str::<Value>(line).is_ok_and(|v| v["type"] == "result")
        {
            let mut end = self.decode.finish(Exit { code: Some(0) });
            step.ended = end.pop();
            step.results.extend(end);
        }
        step
    }

    fn interrupt(&mut self) -> Vec<String> {
        self.interrupts += 1;
        let line = json!({
            "type": "control_request",
            "request_id": format!("interrupt-{}", self.interrupts),
            "request": {"subtype": "interrupt"},
        });
        vec![line.to_string()]
    }

    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The turn's usage, its cost what it added to the process's running
    /// total (a total below the last one started over: all of it is the
    /// turn's).
    fn usage(&self) -> Option<crate::protocol::TokenUsage> {
        let mut usage = self.decode.usage()?;
        if let Some(total) = self.process_cost() {
            let own = if total >= self.cost_before {
                total - self.cost_before
            } else {
                total
            };
            usage.extra.insert("total_cost_usd".into(), json!(own));
        }
        Some(usage)
    }

    fn permit(&mut self, id: &str, decision: &Decision) -> Vec<String> {
        let line = json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": id, "response": decision.to_json()},
        });
        vec![line.to_string()]
    }
}

/// A `can_use_tool` control request, if the line is one.
fn permission_request(line: &str) -> Option<PermissionRequest> {
    let value: Value = serde_json::from_str(line).ok()?;
    if value["type"] != "control_request" || value["request"]["subtype"] != "can_use_tool" {
        return None;
    }
    Some(PermissionRequest {
        id: value["request_id"].as_str()?.to_string(),
        tool: value["request"]["tool_name"].as_str()?.to_string(),
        input: value["request"]["input"].clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ResultPayload, ResultType};

    const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"5141442b-f577-42a1-9f0b-d35fad3522d7","tools":[],"mcp_servers":[]}"#;

    fn kinds(out: &[ResultPayload]) -> Vec<ResultType> {
        out.iter().map(ResultPayload::kind).collect()
    }

    #[test]
    fn each_turn_costs_what_it_added_to_the_process_running_total() {
        let mut driver = ClaudeLive::default();
        let result = |total: f64| {
            format!(
                r#"{{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s","usage":{{"input_tokens":10,"output_tokens":5}},"total_cost_usd":{total}}}"#
            )
        };
        let cost = |driver: &ClaudeLive| driver.usage().unwrap().extra["total_cost_usd"].as_f64();
        driver.turn("one");
        driver.line(&result(0.25));
        assert_eq!(cost(&driver), Some(0.25));
        driver.turn("two");
        driver.line(&result(0.75));
        assert_eq!(cost(&driver), Some(0.5), "the second turn's own cost");
        driver.turn("three");
        driver.line(&result(0.125));
        assert_eq!(
            cost(&driver),
            Some(0.125),
            "a total that started over is the turn's"
        );
    }

    #[test]
    fn each_turn_ends_at_its_result_line_and_the_session_goes_on() {
        let mut live = ClaudeLive::default();
        assert!(live.open(None, &Setup::default()).is_empty());
        let write = live.turn("hello \"one\"");
        let sent: Value = serde_json::from_str(&write[0]).unwrap();
        assert_eq!(sent["type"], "user");
        assert_eq!(sent["message"]["content"][0]["text"], "hello \"one\"");

        assert!(live.line(INIT).ended.is_none());
        let step = live.line(r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Echo"}}}"#);
        assert_eq!(kinds(&step.results), [ResultType::MessageDelta]);
        let step = live.line(r#"{"type":"result","subtype":"success","is_error":false,"result":"Echo","stop_reason":"end_turn","session_id":"5141442b-f577-42a1-9f0b-d35fad3522d7"}"#);
        let Some(ResultPayload::RunCompleted(done)) = step.ended else {
            panic!("the turn ends completed: {step:?}");
        };
        assert_eq!(done.message.unwrap().content.unwrap().to_text(), "Echo");
        assert_eq!(
            live.session_id(),
            Some("5141442b-f577-42a1-9f0b-d35fad3522d7")
        );

        // The next turn starts clean: an interrupted one ends failed.
        live.turn("two");
        let interrupt: Value = serde_json::from_str(&live.interrupt()[0]).unwrap();
        assert_eq!(interrupt["request"]["subtype"], "interrupt");
        assert!(
            live.line(r#"{"type":"control_response","response":{"subtype":"success","request_id":"interrupt-1"}}"#)
                .ended
                .is_none()
        );
        let step = live.line(r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"5141442b-f577-42a1-9f0b-d35fad3522d7"}"#);
        assert!(
            matches!(step.ended, Some(ResultPayload::RunFailed(_))),
            "{step:?}"
        );
        // A permission request pauses the turn until it is answered.
        live.turn("four");
        let step = live.line(r#"{"type":"control_request","request_id":"p-1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"touch x"}}}"#);
        assert_eq!(
            step.permission,
            Some(PermissionRequest {
                id: "p-1".into(),
                tool: "Bash".into(),
                input: serde_json::json!({"command": "touch x"}),
            })
        );
        let answer: Value = serde_json::from_str(
            &live.permit(
                "p-1",
                &Decision::Allow(serde_json::json!({"command": "touch x"})),
            )[0],
        )
        .unwrap();
        assert_eq!(answer["response"]["request_id"], "p-1");
        assert_eq!(answer["response"]["response"]["behavior"], "allow");
        assert_eq!(
            answer["response"]["response"]["updatedInput"]["command"],
            "touch x"
        );
        // A tool's text that says "result" does not end the turn.
        live.turn("three");
        let step = live.line(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"the \"result\" is"}]}}"#);
        assert!(step.ended.is_none());
    }
}
