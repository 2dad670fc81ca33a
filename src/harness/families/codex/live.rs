//! Codex's `app-server`: JSON-RPC 2.0 over stdio, one object a line
//! (responses carry no `jsonrpc` field). `initialize` → `initialized` →
//! `thread/start` (or `thread/resume {threadId}`; an unknown id is an
//! error, "no rollout found for thread id …") → per turn `turn/start
//! {threadId, input}`, answered with the turn's id, then notifications:
//! `item/started` / `item/completed` (camelCase items: `agentMessage`,
//! `commandExecution`, `mcpToolCall`, `fileChange`), token deltas as
//! `item/agentMessage/delta`, usage as `thread/tokenUsage/updated`, and
//! `turn/completed {turn: {status: completed|interrupted|failed, error}}`.
//! `turn/interrupt {threadId, turnId}` ends the turn `interrupted` and
//! keeps the thread; under `approvals: chat` the thread is started with
//! `approvalPolicy: "untrusted"` and a command or patch waits on
//! `item/commandExecution/requestApproval` / `item/fileChange/
//! requestApproval` (answered `accept`, or `decline`/`cancel`, whichever
//! the request offers); `turn/steer {threadId, expectedTurnId, input}` adds
//! the person's follow-up to the running turn (its next model request
//! carries it, one `turn/completed` for both). The server may also ask the client (approvals); a
//! request this driver does not serve is declined, never left waiting
//! (measured with the pinned CLI, see docs/harnesses/codex.md).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::decode::item_results;
use crate::harness::decode::token_usage;
use crate::harness::live::rpc::{self, Incoming, Rpc};
use crate::harness::live::{LiveDriver, PermissionRequest, Setup, Step};
use crate::interaction::Decision;
use crate::protocol::FailureCode;
use crate::protocol::{
    Message, MessageChunk, MessageDelta, ResultPayload, RunCompleted, RunFailed, TokenUsage,
};

/// What a request of ours was, to read its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Initialize,
    Thread,
    Turn,
    Interrupt,
    Steer,
}

/// The driver; one per `codex app-server` process.
#[derive(Debug, Default)]
pub struct CodexAppServer {
    rpc: Rpc<Sent>,
    resume: Option<String>,
    thread_id: Option<String>,
    turn_id: Option<String>,
    /// A turn waiting for the thread.
    queued: Option<String>,
    last_message: Option<String>,
    /// The running turn's token usage (`thread/tokenUsage/updated`).
    usage: Option<TokenUsage>,
    /// Ask the person before commands and patches (`approvals: chat`).
    ask: bool,
    /// Approval requests waiting for the person: their JSON-RPC id and the
    /// decisions they offer, by [`PermissionRequest::id`].
    waiting: HashMap<String, (Value, Vec<Value>)>,
}

impl CodexAppServer {
    fn request(&mut self, kind: Sent, method: &str, params: Value) -> String {
        self.rpc.request(kind, method, params)
    }

    fn start_turn(&mut self, prompt: &str, thread: &str) -> String {
        self.last_message = None;
        self.turn_id = None;
        self.usage = None;
        let params = json!({
            "threadId": thread,
            "input": [{"type": "text", "text": prompt, "text_elements": []}],
        });
        self.request(Sent::Turn, "turn/start", params)
    }

    fn failed(error: String) -> Option<ResultPayload> {
        Some(ResultPayload::RunFailed(RunFailed {
            code: FailureCode::HarnessError,
            error,
            retryable: false,
        }))
    }

    fn response(&mut self, kind: Sent, value: &Value) -> Step {
        let mut step = Step::default();
        let error = value["error"]["message"].as_str().map(str::to_string);
        match (kind, error) {
            (Sent::Initialize, None) => {
                step.write.push(rpc::notification("initialized", None));
                let mut params = json!({});
                if self.ask {
                    params["approvalPolicy"] = json!("untrusted");
                }
                let thread = match self.resume.clone() {
                    Some(id) => {
                        params["threadId"] = json!(id);
                        self.request(Sent::Thread, "thread/resume", params)
                    }
                    None => self.request(Sent::Thread, "thread/start", params),
                };
                step.write.push(thread);
            }
            (Sent::Thread, None) => {
                let id = value["result"]["thread"]["id"].as_str().map(str::to_string);
                self.thread_id = id.clone();
                if let (Some(prompt), Some(id)) = (self.queued.take(), id) {
                    step.write.push(self.start_turn(&prompt, &id));
                }
            }
            (Sent::Turn, None) => {
                self.turn_id = value["result"]["turn"]["id"].as_str().map(str::to_string);
            }
            (Sent::Interrupt, None) => {}
            (Sent::Steer, None) => step.steered = Some(true),
            (Sent::Interrupt, Some(error)) => {
                tracing::warn!("Codex did not take the interrupt: {error}");
            }
            (Sent::Steer, Some(error)) => {
                // The turn ended as the follow-up arrived: it goes to the
                // next turn instead.
                tracing::info!("Codex did not take the follow-up into its turn: {error}");
                step.steered = Some(false);
            }
            (Sent::Thread, Some(error)) => {
                step.session_not_found =
                    self.resume.is_some() && error.contains("no rollout found");
                self.queued = None;
                step.ended = Self::failed(format!("Codex could not open its thread: {error}"));
            }
            (kind, Some(error)) => {
                self.queued = None;
                step.ended = Self::failed(format!("Codex refused {kind:?}: {error}"));
            }
        }
        step
    }

    /// An approval request as the person is asked it: the tool and what it
    /// would do (the command as Codex parsed it, when it is one).
    fn approval(method: &str, params: &Value) -> Option<(String, Value)> {
        match method {
            "item/commandExecution/requestApproval" => {
                let actions = params["commandActions"].as_array();
                let command = match actions.map(Vec::as_slice) {
                    Some([one]) => one["command"].as_str(),
                    _ => None,
                }
                .or(params["command"].as_str())?;
                Some(("shell".into(), json!({"command": command})))
            }
            "item/fileChange/requestApproval" => Some((
                "apply_patch".into(),
                json!({"reason": params["reason"], "grant_root": params["grantRoot"]}),
            )),
            _ => None,
        }
    }

    /// A request from the server: every one this driver does not serve is
    /// declined in the form its method expects.
    fn server_request(id: &Value, method: &str) -> String {
        let result = match method {
            "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
                json!({"decision": "decline"})
            }
            "applyPatchApproval" | "execCommandApproval" => json!({"decision": "denied"}),
            _ => {
                let why = format!("{method} is not served by this client");
                return rpc::error(id, -32601, &why);
            }
        };
        rpc::result(id, result)
    }

    fn notification(&mut self, method: &str, params: &Value) -> Step {
        let mut step = Step::default();
        match method {
            "item/agentMessage/delta" => {
                let delta = params["delta"].as_str().unwrap_or("");
                if !delta.is_empty() {
                    step.results.push(ResultPayload::MessageDelta(MessageDelta {
                        chunk: MessageChunk::assistant_text(delta),
                    }));
                }
            }
            "item/started" | "item/completed" => {
                step.results = item_results(
                    method == "item/started",
                    &params["item"],
                    &mut self.last_message,
                );
            }
            "thread/tokenUsage/updated" => {
                self.usage = token_usage(
                    &params["tokenUsage"]["last"],
                    "inputTokens",
                    "outputTokens",
                    "totalTokens",
                );
            }
            "turn/completed" => {
                let turn = &params["turn"];
                step.ended = match turn["status"].as_str() {
                    Some("completed") => Some(ResultPayload::RunCompleted(RunCompleted {
                        finish_reason: "stop".into(),
                        message: self.last_message.take().map(Message::assistant),
                    })),
                    Some("interrupted") => Self::failed("Codex's turn was interrupted".into()),
                    _ => Self::failed(format!(
                        "Codex failed: {}",
                        turn["error"]["message"]
                            .as_str()
                            .unwrap_or("the turn failed")
                    )),
                };
                self.turn_id = None;
            }
            _ => {}
        }
        step
    }
}

impl LiveDriver for CodexAppServer {
    fn open(&mut self, resume: Option<&str>, _setup: &Setup) -> Vec<String> {
        self.resume = resume.map(str::to_string);
        let hello = json!({"clientInfo": {"name": "harness-bridge", "version": env!("CARGO_PKG_VERSION")}, "capabilities": null});
        vec![self.request(Sent::Initialize, "initialize", hello)]
    }

    fn turn(&mut self, prompt: &str) -> Vec<String> {
        match self.thread_id.clone() {
            Some(thread) => vec![self.start_turn(prompt, &thread)],
            None => {
                self.queued = Some(prompt.to_string());
                Vec::new()
            }
        }
    }

    fn line(&mut self, line: &str) -> Step {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            return Step::default();
        };
        match self.rpc.read(&value) {
            Incoming::Request { id, method, params } => {
                match self.ask.then(|| Self::approval(method, params)).flatten() {
                    Some((tool, input)) => {
                        let key = id.to_string();
                        let offered = params["availableDecisions"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        self.waiting.insert(key.clone(), (id.clone(), offered));
                        Step {
                            permission: Some(PermissionRequest {
                                id: key,
                                tool,
                                input,
                            }),
                            ..Step::default()
                        }
                    }
                    None => Step {
                        write: vec![Self::server_request(id, method)],
                        ..Step::default()
                    },
                }
            }
            Incoming::Response { kind, message } => self.response(kind, message),
            Incoming::Notification { method, params } => self.notification(method, params),
            Incoming::Stray => Step::default(),
        }
    }

    fn interrupt(&mut self) -> Vec<String> {
        match (self.thread_id.clone(), self.turn_id.clone()) {
            (Some(thread), Some(turn)) => vec![self.request(
                Sent::Interrupt,
                "turn/interrupt",
                json!({"threadId": thread, "turnId": turn}),
            )],
            _ => Vec::new(),
        }
    }

    fn session_id(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }

    fn usage(&self) -> Option<TokenUsage> {
        self.usage.clone()
    }

    fn ask_permissions(&mut self) {
        self.ask = true;
    }

    fn permit(&mut self, id: &str, decision: &Decision) -> Vec<String> {
        let Some((rpc_id, offered)) = self.waiting.remove(id) else {
            return Vec::new();
        };
        let choice = match decision {
            Decision::Allow(_) => "accept",
            Decision::Deny { .. } if offered.is_empty() || offered.contains(&json!("decline")) => {
                "decline"
            }
            Decision::Deny { .. } => "cancel",
        };
        vec![rpc::result(&rpc_id, json!({"decision": choice}))]
    }

    fn steer(&mut self, text: &str) -> Option<Vec<String>> {
        let (thread, turn) = (self.thread_id.clone()?, self.turn_id.clone()?);
        let params = json!({
            "threadId": thread,
            "expectedTurnId": turn,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        });
        Some(vec![self.request(Sent::Steer, "turn/steer", params)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResultType;

    const THREAD: &str = "01a20be0-f138-7a32-99aa-1ff7e3bd42cc";
    const TURN: &str = "01a20be0-f16c-7c12-a307-0e922d546ff8";

    fn sent(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    /// The handshake as the pinned CLI answers it; the driver's writes.
    fn opened(resume: Option<&str>) -> (CodexAppServer, Vec<String>) {
        let mut live = CodexAppServer::default();
        let hello = live.open(resume, &Setup::default());
        assert_eq!(sent(&hello[0])["method"], "initialize");
        let step = live.line(r#"{"id":1,"result":{"userAgent":"hb/0.169.0","codexHome":"/h","platformFamily":"unix","platformOs":"linux"}}"#);
        assert_eq!(sent(&step.write[0])["method"], "initialized");
        (live, step.write)
    }

    #[test]
    fn a_turn_waits_for_its_thread_then_streams_and_ends() {
        let (mut live, writes) = opened(None);
        assert_eq!(sent(&writes[1])["method"], "thread/start");
        // The turn comes before the thread exists: it is sent once it does.
        assert!(live.turn("hello one").is_empty());
        let step = live.line(&format!(
            r#"{{"id":2,"result":{{"thread":{{"id":"{THREAD}"}}}}}}"#
        ));
        let turn = sent(&step.write[0]);
        assert_eq!(turn["method"], "turn/start");
        assert_eq!(turn["params"]["threadId"], THREAD);
        assert_eq!(turn["params"]["input"][0]["text"], "hello one");
        assert_eq!(live.session_id(), Some(THREAD));
        live.line(&format!(
            r#"{{"id":3,"result":{{"turn":{{"id":"{TURN}","status":"inProgress"}}}}}}"#
        ));
        let delta = live.line(&format!(r#"{{"method":"item/agentMessage/delta","params":{{"threadId":"{THREAD}","turnId":"{TURN}","itemId":"msg_1","delta":"Echo "}}}}"#));
        assert_eq!(delta.results[0].kind(), ResultType::MessageDelta);
        let done = live.line(r#"{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"msg_1","text":"Echo 1"}}}"#);
        assert_eq!(done.results[0].kind(), ResultType::MessageCompleted);
        let tool = live.line(r#"{"method":"item/started","params":{"item":{"type":"mcpToolCall","id":"c1","server":"langbot","tool":"history_page","status":"inProgress","arguments":{"limit":5}}}}"#);
        assert_eq!(tool.results[0].kind(), ResultType::ToolCallStarted);
        let end = live.line(&format!(r#"{{"method":"turn/completed","params":{{"threadId":"{THREAD}","turn":{{"id":"{TURN}","status":"completed","error":null}}}}}}"#));
        let Some(ResultPayload::RunCompleted(done)) = end.ended else {
            panic!("{end:?}");
        };
        assert_eq!(done.message.unwrap().content.unwrap().to_text(), "Echo 1");
        // The next turn goes straight out.
        assert_eq!(
            sent(&live.turn("two")[0])["params"]["input"][0]["text"],
            "two"
        );
    }

    #[test]
    fn a_thread_resumes_by_id_and_an_unknown_one_says_so() {
        let (mut live, writes) = opened(Some(THREAD));
        let resume = sent(&writes[1]);
        assert_eq!(resume["method"], "thread/resume");
        assert_eq!(resume["params"]["threadId"], THREAD);
        live.turn("again");
        let step = live.line(&format!(r#"{{"error":{{"code":-32600,"message":"no rollout found for thread id {THREAD}"}},"id":2}}"#));
        assert!(step.session_not_found);
        assert!(matches!(step.ended, Some(ResultPayload::RunFailed(_))));
        assert!(step.write.is_empty(), "the queued turn is dropped");
    }

    #[test]
    fn interrupt_names_the_running_turn_and_the_turn_ends_interrupted() {
        let (mut live, _) = opened(None);
        live.line(&format!(
            r#"{{"id":2,"result":{{"thread":{{"id":"{THREAD}"}}}}}}"#
        ));
        assert!(live.interrupt().is_empty(), "no turn to interrupt");
        assert!(live.steer("too early").is_none(), "no turn to steer");
        live.turn("please HANG");
        live.line(&format!(
            r#"{{"id":3,"result":{{"turn":{{"id":"{TURN}"}}}}}}"#
        ));
        let steer = sent(&live.steer("and this too").expect("a turn runs")[0]);
        assert_eq!(steer["method"], "turn/steer");
        assert_eq!(steer["params"]["expectedTurnId"], TURN);
        assert_eq!(steer["params"]["input"][0]["text"], "and this too");
        let taken = live.line(&format!(r#"{{"id":{},"result":{{}}}}"#, steer["id"]));
        assert_eq!(taken.steered, Some(true));
        let late = sent(&live.steer("one more").expect("a turn runs")[0]);
        let refused = live.line(&format!(
            r#"{{"id":{},"error":{{"code":-32600,"message":"no active turn"}}}}"#,
            late["id"]
        ));
        assert_eq!(
            refused.steered,
            Some(false),
            "a refused follow-up is the next turn"
        );
        assert!(
            refused.ended.is_none(),
            "a refused follow-up does not end the turn"
        );
        let interrupt = sent(&live.interrupt()[0]);
        assert_eq!(interrupt["method"], "turn/interrupt");
        assert_eq!(interrupt["params"]["turnId"], TURN);
        assert!(live.line(r#"{"id":6,"result":{}}"#).ended.is_none());
        let end = live.line(&format!(r#"{{"method":"turn/completed","params":{{"threadId":"{THREAD}","turn":{{"id":"{TURN}","status":"interrupted","error":null}}}}}}"#));
        assert!(matches!(end.ended, Some(ResultPayload::RunFailed(_))));
    }

    #[test]
    fn asked_approvals_wait_for_the_person_and_get_their_answer() {
        let mut live = CodexAppServer::default();
        live.ask_permissions();
        live.open(None, &Setup::default());
        let step = live.line(r#"{"id":1,"result":{}}"#);
        assert_eq!(
            sent(&step.write[1])["params"]["approvalPolicy"],
            "untrusted"
        );
        let step = live.line(r#"{"method":"item/commandExecution/requestApproval","id":0,"params":{"command":"/bin/bash -lc 'touch x'","commandActions":[{"type":"unknown","command":"touch x"}],"availableDecisions":["accept","cancel"]}}"#);
        assert!(step.write.is_empty(), "it waits for the person");
        let request = step.permission.expect("a permission request");
        assert_eq!(
            (request.tool.as_str(), &request.input),
            ("shell", &json!({"command": "touch x"}))
        );
        let allow = sent(&live.permit(&request.id, &Decision::Allow(request.input.clone()))[0]);
        assert_eq!(
            (allow["id"].clone(), allow["result"]["decision"].clone()),
            (json!(0), json!("accept"))
        );
        // A denial is what the request offers; an unknown id gets nothing.
        let step = live.line(r#"{"method":"item/commandExecution/requestApproval","id":1,"params":{"command":"rm x","availableDecisions":["accept","decline","cancel"]}}"#);
        let request = step.permission.unwrap();
        let deny = Decision::Deny {
            message: "no".into(),
            interrupt: false,
        };
        assert_eq!(
            sent(&live.permit(&request.id, &deny)[0])["result"]["decision"],
            "decline"
        );
        assert!(live.permit(&request.id, &deny).is_empty());
        // A patch waits the same way, as `apply_patch` with its reason; one
        // that offers no `decline` is cancelled when refused.
        let step = live.line(r#"{"method":"item/fileChange/requestApproval","id":2,"params":{"itemId":"p1","reason":"write notes.md","grantRoot":null,"availableDecisions":["accept","cancel"]}}"#);
        let request = step.permission.expect("a patch asks too");
        assert_eq!(request.tool, "apply_patch");
        assert_eq!(request.input["reason"], "write notes.md");
        assert_eq!(
            sent(&live.permit(&request.id, &deny)[0])["result"]["decision"],
            "cancel"
        );
    }

    #[test]
    fn server_requests_are_declined_and_garbage_is_ignored() {
        let (mut live, _) = opened(None);
        let step = live.line(r#"{"id":7,"method":"item/commandExecution/requestApproval","params":{"command":"rm -rf /"}}"#);
        let answer = sent(&step.write[0]);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["result"]["decision"], "decline");
        let step = live.line(r#"{"id":"x","method":"item/tool/call","params":{}}"#);
        assert_eq!(sent(&step.write[0])["error"]["code"], -32601);
        for garbage in [
            "",
            "not json",
            "[1,2]",
            r#"{"id":99,"result":{}}"#,
            r#"{"method":7}"#,
        ] {
            let step = live.line(garbage);
            assert!(step.results.is_empty() && step.ended.is_none() && step.write.is_empty());
        }
    }
}
