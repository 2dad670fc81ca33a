//! A fake OpenAI Responses API on 127.0.0.1 scripted for the Codex
//! tests: the question [`ASK`] gets a `history_page` tool call, its result
//! the answer (after [`PAUSE`]); a prompt that says MAKEFILE runs
//! `touch approved-ran` with Codex's shell tool, then says [`MADE`]; one
//! that holds [`RUN`] runs the rest of its text as a shell command; HANG
//! is never answered; SLOW takes its time unless a STEERED follow-up is in
//! the request; anything else gets [`SECOND_ANSWER`].

use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, StatusCode};
use axum::routing::{any, post};
use serde_json::{Value, json};

pub const ASK: &str = "What did we decide?";
pub const LOOKING: &str = "Let me look at the history.";
pub const ANSWER: &str = "You decided to ship on Friday.";
pub const FOLLOW_UP: &str = "And is that still the plan?";
pub const SECOND_ANSWER: &str = "Yes, still Friday.";
/// What the model says once its command has run.
pub const MADE: &str = "The file is there.";
/// A prompt holding this runs the text after it with Codex's shell tool.
pub const RUN: &str = "RUNCMD:";
/// How long a SLOW turn's first request takes.
pub const SLOW: Duration = Duration::from_secs(5);
/// The fake model thinks this long before answering the tool output: the
/// message sent before it must reach the bridge's stdout that much earlier.
pub const PAUSE: Duration = Duration::from_millis(1500);

#[derive(Clone, Default)]
pub struct Fake {
    pub requests: Arc<Mutex<Vec<Value>>>,
    pub hang: bool,
    /// The `authorization` header of each request, as it came.
    pub keys: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    /// Wait until a request holding `text` came in; `false` after `within`.
    pub async fn until_asked(&self, text: &str, within: Duration) -> bool {
        super::anthropic::until_asked(&self.requests, text, within).await
    }

    /// The person's words in every request (the input items of the
    /// user's role).
    pub fn people_said(&self) -> Vec<String> {
        people_said(&self.requests.lock().unwrap())
    }
}

/// The user's input texts in `requests`.
pub fn people_said(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .flat_map(|r| r["input"].as_array().cloned().unwrap_or_default())
        .filter(|item| item["role"] == "user")
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect()
}

fn message(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": id, "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn events(request: &Value) -> (Duration, Vec<Value>) {
    let input = request["input"].as_array().cloned().unwrap_or_default();
    let last = input.last().cloned().unwrap_or_default();
    let offers_tool = request["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t["name"] == "mcp__langbot" || t["name"] == "mcp__langbot__history_page")
    });
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15});
    let created = json!({"type": "response.created", "response": {"id": "resp_fake", "status": "in_progress"}});
    let completed = json!({"type": "response.completed", "response": {"id": "resp_fake", "status": "completed", "model": "gpt-5-codex", "usage": usage}});
    let say = |text: &str| {
        let m = message("msg_fake", text);
        vec![
            created.clone(),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_fake", "role": "assistant", "status": "in_progress", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": text}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": m}),
            completed.clone(),
        ]
    };
    if last["type"] == "function_call_output" {
        if last["call_id"] == "call_make" || last["call_id"] == "call_run" {
            return (Duration::ZERO, say(MADE));
        }
        return (PAUSE, say(ANSWER));
    }
    // A turn that says RUNCMD: runs what follows with Codex's shell tool.
    let command = last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .find_map(|text| text.split_once(RUN).map(|(_, command)| command.to_string()));
    if let Some(command) = command {
        let arguments = json!({ "cmd": command }).to_string();
        let call = json!({"type": "function_call", "id": "fc_run", "call_id": "call_run", "name": "exec_command", "arguments": arguments, "status": "completed"});
        return (
            Duration::ZERO,
            vec![
                created,
                json!({"type": "response.output_item.added", "output_index": 0, "item": call}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
                completed,
            ],
        );
    }
    // A turn that says MAKEFILE runs a command with Codex's own shell tool.
    if last.to_string().contains("MAKEFILE") {
        let call = json!({"type": "function_call", "id": "fc_make", "call_id": "call_make", "name": "exec_command", "arguments": "{\"cmd\":\"touch approved-ran\"}", "status": "completed"});
        return (
            Duration::ZERO,
            vec![
                created,
                json!({"type": "response.output_item.added", "output_index": 0, "item": call}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
                completed,
            ],
        );
    }
    if offers_tool && last.to_string().contains(ASK) {
        let call = json!({"type": "function_call", "id": "fc_fake", "call_id": "call_fake", "namespace": "mcp__langbot", "name": "history_page", "arguments": "{\"limit\":5}", "status": "completed"});
        let note = message("msg_look", LOOKING);
        return (
            Duration::ZERO,
            vec![
                created,
                json!({"type": "response.output_item.added", "output_index": 0, "item": note}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": note}),
                json!({"type": "response.output_item.added", "output_index": 1, "item": call}),
                json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
                completed,
            ],
        );
    }
    (Duration::ZERO, say(SECOND_ANSWER))
}

async fn responses(
    State(fake): State<Fake>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response<Body> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    fake.requests.lock().unwrap().push(request.clone());
    if let Some(key) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        fake.keys.lock().unwrap().push(key.to_string());
    }
    // A turn whose prompt says HANG is never answered (the last input
    // item is the turn's own message).
    let last = request["input"]
        .as_array()
        .and_then(|items| items.last())
        .map(Value::to_string)
        .unwrap_or_default();
    if fake.hang || last.contains("HANG") {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    // A turn that says SLOW takes its time, until a follow-up is in it.
    // (Long enough for a follow-up to come through a chat platform.)
    if last.contains("SLOW") && !body.contains("STEERED") {
        tokio::time::sleep(SLOW).await;
    }
    let (pause, events) = events(&request);
    let body: String = events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {}\n\n",
                e["type"].as_str().unwrap_or("message"),
                e
            )
        })
        .collect();
    let stream = futures::stream::once(async move {
        tokio::time::sleep(pause).await;
        Ok::<_, Infallible>(body)
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

pub async fn fake_model(hang: bool) -> (String, Fake) {
    let fake = Fake {
        hang,
        ..Fake::default()
    };
    let app = Router::new()
        .route("/v1/responses", post(responses))
        .fallback(any(|| async { StatusCode::NOT_FOUND }))
        .with_state(fake.clone());
    (super::serve_local(app).await, fake)
}

/// A `CODEX_HOME` at `home` whose config.toml points Codex at the fake
/// model (the operator's way: a provider of its own).
pub fn codex_home(home: &Path, model_url: &str) {
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\nbase_url = \"{model_url}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\nstream_max_retries = 0\nrequest_max_retries = 0\n"
        ),
    )
    .unwrap();
}
