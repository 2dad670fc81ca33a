//! The Agent Client Protocol (stable schema v1): the bridge is the client
//! of any agent that speaks it over stdio (JSON-RPC 2.0, one object a
//! line). `initialize` (`protocolVersion: 1`) → `authenticate` when the
//! spec names a method → `session/resume` where the agent advertises it,
//! else `session/load` (its replayed history ignored), else `session/new`
//! — each with the workspace as `cwd` and the bridge's MCP server as an
//! HTTP server whose bearer header rides the message, never argv. A turn
//! is `session/prompt`, answered with its `stopReason` once the turn is
//! over; meanwhile `session/update` notifications carry the answer
//! (`agent_message_chunk` → `message.delta`) and tool calls (`tool_call`,
//! `tool_call_update` → `tool.call.*`, tolerated in any order). Cancel is
//! the `session/cancel` notification; the prompt then ends `cancelled`
//! and the session goes on. `session/request_permission` is answered by an
//! option chosen by its `kind`, never by a guessed id: asked of the person
//! under `approvals: chat`, else by the spec's policy. Any other request
//! of the agent's gets a method-not-found error; unknown notifications are
//! ignored.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use serde::Deserialize;

use crate::harness::decode::{object, token_usage};
use crate::harness::live::rpc::{self, Incoming, Rpc};
use crate::harness::live::{LiveDriver, PermissionRequest, Prompt, PromptFile, Setup, Step};
use crate::interaction::Decision;
use crate::protocol::FailureCode;
use crate::protocol::{
    Message, MessageChunk, MessageCompleted, MessageDelta, ResultPayload, RunCompleted, RunFailed,
    TokenUsage, ToolCallCompleted, ToolCallStarted,
};

/// What an ACP agent may do when no person is asked (without `approvals:
/// chat`): its permission requests are answered with an option of this
/// kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AcpPolicy {
    /// `allow_once` (else `allow_always`): the workspace is the agent's.
    #[default]
    Allow,
    /// `reject_once` (else `reject_always`).
    Deny,
}

/// How an ACP agent's stored session is continued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AcpResume {
    /// `session/resume` where the agent offers it, else `session/load`.
    #[default]
    Auto,
    /// `session/load` only (its replay ignored): for an agent whose
    /// `session/resume` is unreliable.
    Load,
}

/// Options of an agent driven over the Agent Client Protocol (`family:
/// acp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpSpec {
    /// `authenticate`'s `methodId` before the session, when the agent
    /// needs one (most take their key from the environment).
    #[serde(default)]
    pub auth_method: Option<String>,
    /// The answer to a permission request when no person is asked.
    #[serde(default)]
    pub permissions: AcpPolicy,
    /// How a stored session is continued.
    #[serde(default)]
    pub resume: AcpResume,
    /// The session mode to set (`session/set_mode`) when the agent offers
    /// it and starts in another: e.g. `default`, where an agent would
    /// otherwise start in a mode whose checks cannot run here.
    #[serde(default)]
    pub mode: Option<String>,
}

/// What a request of ours was, to read its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Initialize,
    Authenticate,
    New,
    Resume,
    Load,
    Mode,
    Prompt,
}

/// The driver; one per agent process.
#[derive(Debug, Default)]
pub struct Acp {
    spec: AcpSpec,
    rpc: Rpc<Sent>,
    resume: Option<String>,
    cwd: String,
    mcp_servers: Value,
    own_tools: Vec<String>,
    capabilities: Value,
    session_id: Option<String>,
    /// A turn waiting for the session.
    queued: Option<(String, Vec<PromptFile>)>,
    /// A turn is running (its prompt not yet answered).
    prompting: bool,
    /// `session/load` is replaying the history: its updates are the past.
    loading: bool,
    /// The answer's text since the last message the turn completed.
    text: String,
    /// The turn's last complete message.
    last_message: Option<String>,
    /// The turn's token usage (the prompt's answer).
    usage: Option<TokenUsage>,
    /// Tool calls started in this turn, and those already completed.
    started: HashMap<String, String>,
    finished: HashSet<String>,
    /// Ask the person before the agent acts (`approvals: chat`).
    ask: bool,
    /// Permission requests waiting for the person: their JSON-RPC id and
    /// the options they offer, by [`PermissionRequest::id`].
    waiting: HashMap<String, (Value, Vec<Value>)>,
}

impl Acp {
    /// The bridge's own tool a call's title names: the tool's name, or
    /// the name and its arguments (`langbot__history_page: {…}`, as
    /// Cline titles a call).
    fn own_tool(&self, title: &str) -> Option<&str> {
        self.own_tools
            .iter()
            .find(|tool| {
                title == tool.as_str()
                    || title
                        .strip_prefix(tool.as_str())
                        .is_some_and(|rest| rest.starts_with(": "))
            })
            .map(String::as_str)
    }

    /// A driver for an agent described by `spec`.
    pub fn new(spec: AcpSpec) -> Self {
        Acp {
            spec,
            ..Acp::default()
        }
    }

    fn request(&mut self, kind: Sent, method: &str, params: Value) -> String {
        self.rpc.request(kind, method, params)
    }

    fn failed(error: String) -> Option<ResultPayload> {
        Some(ResultPayload::RunFailed(RunFailed {
            code: FailureCode::HarnessError,
            error,
            retryable: false,
        }))
    }

    /// The request that opens the session: resumed where the agent can,
    /// else loaded, else new.
    fn open_session(&mut self) -> String {
        let caps = &self.capabilities;
        let how = self.spec.resume;
        let can_resume =
            how == AcpResume::Auto && caps["sessionCapabilities"]["resume"].is_object();
        let can_load = caps["loadSession"].as_bool().unwrap_or(false);
        match self.resume.clone() {
            Some(id) if can_resume => {
                let params = self.session_params(Some(&id));
                self.request(Sent::Resume, "session/resume", params)
            }
            Some(id) if can_load => {
                self.loading = true;
                let params = self.session_params(Some(&id));
                self.request(Sent::Load, "session/load", params)
            }
            _ => {
                let params = self.session_params(None);
                self.request(Sent::New, "session/new", params)
            }
        }
    }

    fn session_params(&self, id: Option<&str>) -> Value {
        let mut params = json!({"cwd": self.cwd, "mcpServers": self.mcp_servers});
        if let Some(id) = id {
            params["sessionId"] = json!(id);
        }
        params
    }

    /// `session/set_mode` to the spec's mode, when the agent offers it and
    /// is in another.
    fn mode_change(&mut self, modes: &Value) -> Option<String> {
        let wanted = self.spec.mode.clone()?;
        let session = self.session_id.clone()?;
        let offered = modes["availableModes"]
            .as_array()
            .is_some_and(|all| all.iter().any(|m| m["id"] == wanted.as_str()));
        if !offered || modes["currentModeId"] == wanted.as_str() {
            return None;
        }
        let params = json!({"sessionId": session, "modeId": wanted});
        Some(self.request(Sent::Mode, "session/set_mode", params))
    }

    /// The turn that waited for the session, now sent.
    fn queued_prompt(&mut self) -> Option<String> {
        let session = self.session_id.clone()?;
        let (prompt, files) = self.queued.take()?;
        Some(self.prompt(&prompt, &files, &session))
    }

    /// The prompt's content blocks: its text, then each file as a link to
    /// the workspace copy (every agent takes those), or inline where it is
    /// an image and the agent takes images.
    fn blocks(&self, prompt: &str, files: &[PromptFile]) -> Value {
        let images = self.capabilities["promptCapabilities"]["image"] == true;
        let mut blocks = vec![json!({"type": "text", "text": prompt})];
        for file in files {
            blocks.push(match (&file.image, &file.mime_type) {
                (Some(data), Some(mime)) if images => {
                    json!({"type": "image", "data": data, "mimeType": mime, "uri": file.uri})
                }
                _ => {
                    let mut link =
                        json!({"type": "resource_link", "uri": file.uri, "name": file.name});
                    if let Some(mime) = &file.mime_type {
                        link["mimeType"] = json!(mime);
                    }
                    link
                }
            });
        }
        Value::Array(blocks)
    }

    fn prompt(&mut self, prompt: &str, files: &[PromptFile], session: &str) -> String {
        self.text.clear();
        self.last_message = None;
        self.usage = None;
        self.started.clear();
        self.finished.clear();
        self.prompting = true;
        let params = json!({
            "sessionId": session,
            "prompt": self.blocks(prompt, files),
        });
        self.request(Sent::Prompt, "session/prompt", params)
    }

    /// The text said since the last complete message, as one.
    fn complete_text(&mut self, results: &mut Vec<ResultPayload>) {
        let text = std::mem::take(&mut self.text);
        if text.trim().is_empty() {
            return;
        }
        results.push(ResultPayload::MessageCompleted(MessageCompleted {
            message: Message::assistant(text.clone()),
            file_ids: Vec::new(),
        }));
        self.last_message = Some(text);
    }

    fn response(&mut self, kind: Sent, value: &Value) -> Step {
        let mut step = Step::default();
        let error = value.get("error").map(|e| {
            e["message"]
                .as_str()
                .map_or_else(|| e.to_string(), str::to_string)
        });
        match (kind, error) {
            (Sent::Initialize, None) => {
                self.capabilities = value["result"]["agentCapabilities"].clone();
                let next = match self.spec.auth_method.clone() {
                    Some(method) => self.request(
                        Sent::Authenticate,
                        "authenticate",
                        json!({"methodId": method}),
                    ),
                    None => self.open_session(),
                };
                step.write.push(next);
            }
            (Sent::Authenticate, None) => step.write.push(self.open_session()),
            (Sent::New | Sent::Resume | Sent::Load, None) => {
                self.loading = false;
                self.session_id = match kind {
                    Sent::New => value["result"]["sessionId"].as_str().map(str::to_string),
                    _ => self.resume.clone(),
                };
                match self.mode_change(&value["result"]["modes"]) {
                    Some(change) => step.write.push(change),
                    None => step.write.extend(self.queued_prompt()),
                }
            }
            (Sent::Mode, error) => {
                if let Some(error) = error {
                    tracing::warn!("the agent did not take the session mode: {error}");
                }
                step.write.extend(self.queued_prompt());
            }
            (Sent::Prompt, None) => {
                self.prompting = false;
                self.usage = token_usage(
                    &value["result"]["usage"],
                    "inputTokens",
                    "outputTokens",
                    "totalTokens",
                );
                self.complete_text(&mut step.results);
                let reason = value["result"]["stopReason"].as_str().unwrap_or("end_turn");
                step.ended = match reason {
                    "cancelled" => Self::failed("the agent's turn was cancelled".into()),
                    _ => Some(ResultPayload::RunCompleted(RunCompleted {
                        finish_reason: match reason {
                            "end_turn" => "stop",
                            "max_tokens" => "length",
                            other => other,
                        }
                        .into(),
                        message: self.last_message.take().map(Message::assistant),
                    })),
                };
            }
            (Sent::Resume | Sent::Load, Some(error)) => {
                // The stored session is gone (or this agent cannot take
                // it back): the session manager starts a fresh one.
                self.loading = false;
                self.queued = None;
                step.session_not_found = true;
                step.ended =
                    Self::failed(format!("the agent could not resume its session: {error}"));
            }
            (Sent::Prompt, Some(error)) => {
                self.prompting = false;
                step.ended = Self::failed(format!("the agent failed the turn: {error}"));
            }
            (kind, Some(error)) => {
                self.queued = None;
                step.ended = Self::failed(format!("the agent refused {kind:?}: {error}"));
            }
        }
        step
    }

    /// One `session/update`: results of the running turn.
    fn update(&mut self, update: &Value) -> Vec<ResultPayload> {
        let mut results = Vec::new();
        if self.loading || !self.prompting {
            return results;
        }
        match update["sessionUpdate"].as_str() {
            Some("agent_message_chunk") => {
                if let Some(text) = update["content"]["text"].as_str().filter(|t| !t.is_empty()) {
                    self.text.push_str(text);
                    results.push(ResultPayload::MessageDelta(MessageDelta {
                        chunk: MessageChunk::assistant_text(text),
                    }));
                }
            }
            Some(kind @ ("tool_call" | "tool_call_update")) => {
                let Some(id) = update["toolCallId"].as_str() else {
                    return results;
                };
                if self.finished.contains(id) {
                    return results;
                }
                if !self.started.contains_key(id) {
                    if kind == "tool_call_update" && update["status"].is_null() {
                        return results;
                    }
                    // What was said before the call is a message of its own.
                    self.complete_text(&mut results);
                    let title = update["title"].as_str();
                    let name = title
                        .and_then(|t| self.own_tool(t))
                        .or(title)
                        .or(update["kind"].as_str())
                        .unwrap_or("tool")
                        .to_string();
                    results.push(ResultPayload::ToolCallStarted(ToolCallStarted {
                        tool_call_id: id.into(),
                        tool_name: name.clone(),
                        parameters: object(&update["rawInput"]),
                    }));
                    self.started.insert(id.into(), name);
                }
                let status = update["status"].as_str();
                if matches!(status, Some("completed" | "failed")) {
                    self.finished.insert(id.into());
                    let name = self.started.get(id).cloned().unwrap_or_default();
                    let output = &update["rawOutput"];
                    results.push(ResultPayload::ToolCallCompleted(ToolCallCompleted {
                        tool_call_id: id.into(),
                        tool_name: name,
                        result: (!output.is_null()).then(|| object(output)),
                        error: (status == Some("failed"))
                            .then(|| "the tool call failed".to_string()),
                    }));
                }
            }
            _ => {}
        }
        results
    }

    /// The option of `options` whose kind is the first of `kinds` offered.
    fn option<'a>(options: &'a [Value], kinds: &[&str]) -> Option<&'a str> {
        kinds.iter().find_map(|kind| {
            options
                .iter()
                .find(|o| o["kind"] == *kind)
                .and_then(|o| o["optionId"].as_str())
        })
    }

    fn permission_answer(id: &Value, options: &[Value], allow: bool) -> String {
        let kinds: &[&str] = if allow {
            &["allow_once", "allow_always"]
        } else {
            &["reject_once", "reject_always"]
        };
        let outcome = match Self::option(options, kinds) {
            Some(option) => json!({"outcome": "selected", "optionId": option}),
            None => json!({"outcome": "cancelled"}),
        };
        rpc::result(id, json!({"outcome": outcome}))
    }

    /// A request of the agent's.
    fn agent_request(&mut self, id: &Value, method: &str, params: &Value) -> Step {
        if method != "session/request_permission" {
            let why = format!("{method} is not served by this client");
            return Step {
                write: vec![rpc::error(id, -32601, &why)],
                ..Step::default()
            };
        }
        let options = params["options"].as_array().cloned().unwrap_or_default();
        let call = &params["toolCall"];
        let own = call["title"]
            .as_str()
            .is_some_and(|title| self.own_tool(title).is_some());
        if own || !self.ask {
            let allow = own || self.spec.permissions == AcpPolicy::Allow;
            return Step {
                write: vec![Self::permission_answer(id, &options, allow)],
                ..Step::default()
            };
        }
        let tool = call["title"]
            .as_str()
            .or(call["kind"].as_str())
            .unwrap_or("a tool")
            .to_string();
        let input = match &call["rawInput"] {
            Value::Null => json!({}),
            other => other.clone(),
        };
        let key = id.to_string();
        self.waiting.insert(key.clone(), (id.clone(), options));
        Step {
            permission: Some(PermissionRequest {
                id: key,
                tool,
                input,
            }),
            ..Step::default()
        }
    }
}

impl LiveDriver for Acp {
    fn open(&mut self, resume: Option<&str>, setup: &Setup) -> Vec<String> {
        self.resume = resume.map(str::to_string);
        self.cwd = setup.cwd.to_string_lossy().into_owned();
        self.mcp_servers = setup.mcp_servers.clone();
        self.own_tools = setup.own_tools.clone();
        let hello = json!({
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
            "clientInfo": {"name": "harness-bridge", "version": env!("CARGO_PKG_VERSION")},
        });
        vec![self.request(Sent::Initialize, "initialize", hello)]
    }

    fn turn(&mut self, prompt: &str) -> Vec<String> {
        self.turn_with(&Prompt {
            text: prompt,
            files: &[],
        })
    }

    fn turn_with(&mut self, prompt: &Prompt<'_>) -> Vec<String> {
        match self.session_id.clone() {
            Some(session) => vec![self.prompt(prompt.text, prompt.files, &session)],
            None => {
                self.queued = Some((prompt.text.to_string(), prompt.files.to_vec()));
                Vec::new()
            }
        }
    }

    fn line(&mut self, line: &str) -> Step {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            return Step::default();
        };
        match self.rpc.read(&value) {
            Incoming::Request { id, method, params } => self.agent_request(id, method, params),
            Incoming::Response { kind, message } => self.response(kind, message),
            Incoming::Notification {
                method: "session/update",
                params,
            } => Step {
                results: self.update(&params["update"]),
                ..Step::default()
            },
            Incoming::Notification { .. } | Incoming::Stray => Step::default(),
        }
    }

    fn interrupt(&mut self) -> Vec<String> {
        let Some(session) = self.session_id.clone() else {
            return Vec::new();
        };
        // Requests still waiting are answered `cancelled`, as the protocol
        // asks of a client that cancels.
        let mut lines: Vec<String> = self
            .waiting
            .drain()
            .map(|(_, (id, _))| rpc::result(&id, json!({"outcome": {"outcome": "cancelled"}})))
            .collect();
        lines.push(rpc::notification(
            "session/cancel",
            Some(json!({"sessionId": session})),
        ));
        lines
    }

    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    fn usage(&self) -> Option<TokenUsage> {
        self.usage.clone()
    }

    fn ask_permissions(&mut self) {
        self.ask = true;
    }

    fn permit(&mut self, id: &str, decision: &Decision) -> Vec<String> {
        let Some((rpc_id, options)) = self.waiting.remove(id) else {
            return Vec::new();
        };
        let allow = matches!(decision, Decision::Allow(_));
        vec![Self::permission_answer(&rpc_id, &options, allow)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResultType;

    fn sent(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    fn setup() -> Setup {
        Setup {
            cwd: "/ws/conv".into(),
            mcp_servers: json!([{"type": "http", "name": "langbot", "url": "http://127.0.0.1:1/mcp", "headers": [{"name": "Authorization", "value": "Bearer t"}]}]),
            own_tools: vec!["mcp__langbot__history_page".into()],
        }
    }

    fn init_response(caps: Value) -> String {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1, "agentCapabilities": caps}})
            .to_string()
    }

    fn kinds(results: &[ResultPayload]) -> Vec<ResultType> {
        results.iter().map(ResultPayload::kind).collect()
    }

    #[test]
    fn files_go_as_links_and_images_inline_where_the_agent_takes_them() {
        let files = [
            PromptFile {
                uri: "file:///ws/conv/inputs/r1/report.pdf".into(),
                name: "report.pdf".into(),
                mime_type: Some("application/pdf".into()),
                image: None,
            },
            PromptFile {
                uri: "file:///ws/conv/inputs/r1/cat.png".into(),
                name: "cat.png".into(),
                mime_type: Some("image/png".into()),
                image: Some("iVBORw0KGgo=".into()),
            },
        ];
        for (caps, second) in [
            (json!({"promptCapabilities": {"image": true}}), "image"),
            (json!({}), "resource_link"),
        ] {
            let mut acp = Acp::default();
            acp.open(None, &setup());
            let prompt = Prompt {
                text: "look",
                files: &files,
            };
            assert!(acp.turn_with(&prompt).is_empty());
            acp.line(&init_response(caps));
            let step = acp.line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-1"}}"#);
            let blocks = sent(&step.write[0])["params"]["prompt"].clone();
            assert_eq!(blocks[0], json!({"type": "text", "text": "look"}));
            assert_eq!(blocks[1]["type"], "resource_link");
            assert_eq!(blocks[1]["uri"], "file:///ws/conv/inputs/r1/report.pdf");
            assert_eq!(blocks[1]["mimeType"], "application/pdf");
            assert_eq!(blocks[2]["type"], second);
            if second == "image" {
                assert_eq!(blocks[2]["data"], "iVBORw0KGgo=");
                assert_eq!(blocks[2]["mimeType"], "image/png");
            } else {
                assert_eq!(blocks[2]["name"], "cat.png");
            }
        }
    }

    #[test]
    fn a_new_session_carries_the_cwd_and_the_servers_and_a_turn_streams() {
        let mut acp = Acp::default();
        let hello = sent(&acp.open(None, &setup())[0]);
        assert_eq!(hello["method"], "initialize");
        assert_eq!(hello["params"]["protocolVersion"], 1);
        // The turn waits for the session.
        assert!(acp.turn("hi").is_empty());
        let step = acp.line(&init_response(json!({"loadSession": true})));
        let new = sent(&step.write[0]);
        assert_eq!(new["method"], "session/new");
        assert_eq!(new["params"]["cwd"], "/ws/conv");
        assert_eq!(
            new["params"]["mcpServers"][0]["headers"][0]["value"],
            "Bearer t"
        );
        let step = acp.line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-1"}}"#);
        let prompt = sent(&step.write[0]);
        assert_eq!(prompt["method"], "session/prompt");
        assert_eq!(prompt["params"]["sessionId"], "s-1");
        assert_eq!(prompt["params"]["prompt"][0]["text"], "hi");
        assert_eq!(acp.session_id(), Some("s-1"));

        let chunk = |text: &str| {
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}).to_string()
        };
        assert_eq!(
            kinds(&acp.line(&chunk("Let me look.")).results),
            [ResultType::MessageDelta]
        );
        // An update for a call never announced, then its announcement:
        // started once, completed once, in that order.
        let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "rawOutput": {"items": []}}}}).to_string();
        let step = acp.line(&update);
        assert_eq!(
            kinds(&step.results),
            [
                ResultType::MessageCompleted,
                ResultType::ToolCallStarted,
                ResultType::ToolCallCompleted
            ]
        );
        let late = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "history_page", "status": "pending"}}}).to_string();
        assert!(acp.line(&late).results.is_empty());
        assert!(
            acp.line(r#"{"jsonrpc":"2.0","method":"_vendor/thing","params":{}}"#)
                .results
                .is_empty()
        );
        acp.line(&chunk("Friday."));
        let step = acp.line(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#);
        assert_eq!(kinds(&step.results), [ResultType::MessageCompleted]);
        match step.ended {
            Some(ResultPayload::RunCompleted(done)) => {
                assert_eq!(done.finish_reason, "stop");
                assert_eq!(
                    serde_json::to_value(done.message).unwrap()["content"],
                    "Friday."
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_specs_mode_is_set_before_the_first_prompt() {
        let mut acp = Acp::new(AcpSpec {
            mode: Some("default".into()),
            ..AcpSpec::default()
        });
        acp.open(None, &setup());
        acp.turn("hi");
        acp.line(&init_response(json!({})));
        let modes =
            json!({"currentModeId": "auto", "availableModes": [{"id": "auto"}, {"id": "default"}]});
        let created =
            json!({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s-1", "modes": modes}});
        let step = acp.line(&created.to_string());
        let set = sent(&step.write[0]);
        assert_eq!(set["method"], "session/set_mode");
        assert_eq!(set["params"]["modeId"], "default");
        let step = acp.line(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#);
        assert_eq!(sent(&step.write[0])["method"], "session/prompt");
    }

    #[test]
    fn a_stored_session_is_resumed_else_loaded_and_a_lost_one_is_not_found() {
        let mut acp = Acp::default();
        acp.open(Some("s-9"), &setup());
        let step = acp.line(&init_response(
            json!({"sessionCapabilities": {"resume": {}}, "loadSession": true}),
        ));
        let resume = sent(&step.write[0]);
        assert_eq!(resume["method"], "session/resume");
        assert_eq!(resume["params"]["sessionId"], "s-9");

        let mut acp = Acp::default();
        acp.open(Some("s-9"), &setup());
        acp.turn("again");
        let step = acp.line(&init_response(json!({"loadSession": true})));
        assert_eq!(sent(&step.write[0])["method"], "session/load");
        // The replay is the past: no results.
        let replay = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-9", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "old"}}}}).to_string();
        assert!(acp.line(&replay).results.is_empty());
        let step = acp.line(
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"Resource not found"}}"#,
        );
        assert!(step.session_not_found);
        assert!(matches!(step.ended, Some(ResultPayload::RunFailed(_))));

        // A spec that says `resume: load` loads even where resume is offered.
        let mut acp = Acp::new(AcpSpec {
            resume: AcpResume::Load,
            ..AcpSpec::default()
        });
        acp.open(Some("s-9"), &setup());
        let step = acp.line(&init_response(
            json!({"sessionCapabilities": {"resume": {}}, "loadSession": true}),
        ));
        assert_eq!(sent(&step.write[0])["method"], "session/load");
    }

    #[test]
    fn permissions_are_chosen_by_kind_and_other_requests_refused() {
        let ask = json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": {"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "touch x", "rawInput": {"command": "touch x"}}, "options": [
            {"optionId": "yes-forever", "name": "Always", "kind": "allow_always"},
            {"optionId": "no", "name": "No", "kind": "reject_once"},
            {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
        ]}})
        .to_string();
        // By policy: allowed once.
        let mut acp = Acp::default();
        let answer = sent(&acp.line(&ask).write[0]);
        assert_eq!(answer["result"]["outcome"]["optionId"], "yes");
        let mut acp = Acp::new(AcpSpec {
            permissions: AcpPolicy::Deny,
            ..AcpSpec::default()
        });
        assert_eq!(
            sent(&acp.line(&ask).write[0])["result"]["outcome"]["optionId"],
            "no"
        );

        // Asked of the person: the turn pauses, the answer picks by kind.
        let mut acp = Acp::default();
        acp.ask_permissions();
        let step = acp.line(&ask);
        let request = step.permission.expect("asked");
        assert_eq!(request.input["command"], "touch x");
        let answer = sent(&acp.permit(&request.id, &Decision::Allow(request.input.clone()))[0]);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["result"]["outcome"]["optionId"], "yes");

        // The bridge's own tool is allowed whatever the policy: the grant
        // authorizes its calls.
        let mut acp = Acp::new(AcpSpec {
            permissions: AcpPolicy::Deny,
            ..AcpSpec::default()
        });
        acp.open(None, &setup());
        let own = ask.replace(
            r#""title":"touch x""#,
            r#""title":"mcp__langbot__history_page""#,
        );
        assert_ne!(own, ask);
        assert_eq!(
            sent(&acp.line(&own).write[0])["result"]["outcome"]["optionId"],
            "yes"
        );
        // Titled with its arguments (Cline's way) it is still the bridge's;
        // a tool whose name merely begins with one of the bridge's is not.
        for (title, allowed) in [
            (r#"mcp__langbot__history_page: {\"limit\":5}"#, "yes"),
            ("mcp__langbot__history_pagex", "no"),
            ("mcp__langbot__history_page:x", "no"),
        ] {
            let call = ask.replace(r#""title":"touch x""#, &format!(r#""title":"{title}""#));
            assert_ne!(call, ask);
            assert_eq!(
                sent(&acp.line(&call).write[0])["result"]["outcome"]["optionId"],
                allowed,
                "{title}"
            );
        }

        let fs = acp.line(r#"{"jsonrpc":"2.0","id":8,"method":"fs/read_text_file","params":{}}"#);
        assert_eq!(sent(&fs.write[0])["error"]["code"], -32601);
    }

    #[test]
    fn cancel_answers_waiting_requests_and_the_turn_ends_cancelled() {
        let mut acp = Acp::default();
        acp.ask_permissions();
        acp.open(None, &setup());
        acp.line(&init_response(json!({})));
        acp.line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-1"}}"#);
        acp.turn("go");
        acp.line(r#"{"jsonrpc":"2.0","id":"p1","method":"session/request_permission","params":{"options":[]}}"#);
        let lines: Vec<Value> = acp.interrupt().iter().map(|l| sent(l)).collect();
        assert_eq!(lines[0]["result"]["outcome"]["outcome"], "cancelled");
        assert_eq!(lines[1]["method"], "session/cancel");
        assert!(lines[1].get("id").is_none(), "a notification");
        let step = acp.line(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#);
        assert!(matches!(step.ended, Some(ResultPayload::RunFailed(_))));
    }
}
