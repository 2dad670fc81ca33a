//! Two more fake model APIs on 127.0.0.1, scripted as the Anthropic fake
//! is: Gemini's `streamGenerateContent` (SSE) for Gemini CLI and OpenAI's
//! chat completions (SSE) for Qwen Code. The question [`ASK`] gets a call
//! of the bridge's `history_page` tool (found by its name's ending, as
//! each CLI names it its own way); the tool's result gets [`ANSWER`]
//! (then a [`PAUSE`] before the stream ends); anything else gets
//! [`SECOND_ANSWER`]; a turn whose prompt holds the `hang_on` word is
//! never answered.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, Uri};
use axum::routing::any;
use futures::StreamExt as _;
use serde_json::{Value, json};

pub use super::anthropic::{ANSWER, ASK, PAUSE, SECOND_ANSWER};

/// Which API the fake speaks.
#[derive(Clone, Copy, Debug)]
pub enum Wire {
    /// `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`.
    Gemini,
    /// `POST /v1/chat/completions` with `stream: true`.
    Chat,
}

#[derive(Clone)]
pub struct Fake {
    pub wire: Wire,
    pub requests: Arc<Mutex<Vec<Value>>>,
    pub hang_on: Option<String>,
    /// Requests left hanging so far.
    pub hanging: Arc<AtomicUsize>,
}

/// What the model does next.
enum Step {
    Call(String),
    Say(&'static str),
}

/// The script, from the turn so far: `answered` (the last message is a
/// tool's result), the last user text, the tool names offered.
fn step(answered: bool, prompt: &str, tools: &[String]) -> Step {
    let history = tools
        .iter()
        .find(|name| name.contains("langbot") && name.ends_with("history_page"));
    match history {
        _ if answered => Step::Say(ANSWER),
        Some(name) if prompt.contains(ASK) => Step::Call(name.clone()),
        _ => Step::Say(SECOND_ANSWER),
    }
}

/// (answered, prompt, tools) of a Gemini request.
fn read_gemini(request: &Value) -> (bool, String, Vec<String>) {
    let last = request["contents"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    let parts = last["parts"].as_array().cloned().unwrap_or_default();
    let answered = parts.iter().any(|p| p.get("functionResponse").is_some());
    let prompt = parts
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let tools = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["functionDeclarations"].as_array().into_iter().flatten())
        .filter_map(|f| f["name"].as_str().map(str::to_string))
        .collect();
    (answered, prompt, tools)
}

/// (answered, prompt, tools) of a chat-completions request.
fn read_chat(request: &Value) -> (bool, String, Vec<String>) {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let answered = messages.last().is_some_and(|m| m["role"] == "tool");
    let prompt = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    let tools = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect();
    (answered, prompt, tools)
}

/// The stream: chunks sent at once, then (after a pause when the answer
/// is [`ANSWER`]) the chunks that end it.
fn events(wire: Wire, step: &Step) -> (Vec<Value>, Vec<Value>) {
    static CALLS: AtomicUsize = AtomicUsize::new(1);
    let usage = json!({"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15});
    match (wire, step) {
        (Wire::Gemini, Step::Call(name)) => (
            vec![
                json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": name, "args": {"limit": 5}}}]}, "finishReason": "STOP", "index": 0}], "usageMetadata": usage}),
            ],
            Vec::new(),
        ),
        (Wire::Gemini, Step::Say(text)) => (
            vec![
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}]}),
            ],
            vec![
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}], "usageMetadata": usage}),
            ],
        ),
        (Wire::Chat, step) => {
            let chunk = |delta: Value, finish: Value| json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            let usage = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
            match step {
                Step::Call(name) => {
                    let id = format!("call_fake{}", CALLS.fetch_add(1, Ordering::Relaxed));
                    (
                        vec![
                            chunk(
                                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": "{\"limit\": 5}"}}]}),
                                Value::Null,
                            ),
                            chunk(json!({}), json!("tool_calls")),
                            usage,
                        ],
                        Vec::new(),
                    )
                }
                Step::Say(text) => (
                    vec![chunk(
                        json!({"role": "assistant", "content": text}),
                        Value::Null,
                    )],
                    vec![chunk(json!({}), json!("stop")), usage],
                ),
            }
        }
    }
}

/// Server-sent events; the chat stream's last part ends with `[DONE]`.
fn sse(wire: Wire, events: &[Value], last: bool) -> String {
    let mut out: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    if matches!(wire, Wire::Chat) && last {
        out.push_str("data: [DONE]\n\n");
    }
    out
}

async fn answer(State(fake): State<Fake>, uri: Uri, body: String) -> Response<Body> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let path = uri.path().to_string();
    let streams = match fake.wire {
        Wire::Gemini => path.ends_with(":streamGenerateContent"),
        Wire::Chat => path.ends_with("/chat/completions") && request["stream"] == true,
    };
    let (answered, prompt, tools) = match fake.wire {
        Wire::Gemini => read_gemini(&request),
        Wire::Chat => read_chat(&request),
    };
    if !path.ends_with("/chat/completions") && !path.contains(":") {
        // A model list or another lookup: nothing to script.
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(json!({"data": [], "models": []}).to_string()))
            .unwrap_or_default();
    }
    fake.requests.lock().unwrap().push(request.clone());
    if !answered
        && fake
            .hang_on
            .as_ref()
            .is_some_and(|w| prompt.contains(w.as_str()))
    {
        fake.hanging.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let step = step(answered, &prompt, &tools);
    if !streams {
        // A side request (a classifier, a suggestion): a plain answer.
        let text = match &step {
            Step::Say(text) => text,
            Step::Call(_) => SECOND_ANSWER,
        };
        let doc = match fake.wire {
            Wire::Gemini => {
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}]})
            }
            Wire::Chat => {
                json!({"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "fake-model", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
            }
        };
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(doc.to_string()))
            .unwrap_or_default();
    }
    let pause = if matches!(step, Step::Say(ANSWER)) {
        PAUSE
    } else {
        Duration::ZERO
    };
    let (head, tail) = events(fake.wire, &step);
    let parts = vec![
        (Duration::ZERO, sse(fake.wire, &head, tail.is_empty())),
        (pause, sse(fake.wire, &tail, !tail.is_empty())),
    ];
    let stream = futures::stream::iter(parts).then(|(delay, chunk)| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(chunk)
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

/// A fake model speaking `wire`; `hang_on`: a word whose turn is never
/// answered.
pub async fn fake_model(wire: Wire, hang_on: Option<&str>) -> (String, Fake) {
    let fake = Fake {
        wire,
        requests: Arc::default(),
        hang_on: hang_on.map(str::to_string),
        hanging: Arc::default(),
    };
    let app = Router::new().fallback(any(answer)).with_state(fake.clone());
    (super::serve_local(app).await, fake)
}
