//! A fake Anthropic Messages API on 127.0.0.1 scripted for the Claude
//! Code tests: the first question gets a `history_page` tool call, its
//! result gets the answer (with a pause mid-stream), anything else the
//! follow-up answer; `hang` answers nothing, ever; `bash` makes the model
//! run one command with Claude's Bash tool, then say [`BASH_DONE`]; `calls`
//! makes it call the given tools in turn, then say [`CALLS_DONE`]; while
//! `fail` is set, every request gets an HTTP 500 (an upstream outage).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, StatusCode};
use axum::routing::{any, post};
use futures::StreamExt as _;
use serde_json::{Value, json};

pub const CONVERSATION: &str = "group-1";
pub const ASK: &str = "What did we decide?";
pub const ANSWER: &str = "You decided to ship on Friday.";
pub const FOLLOW_UP: &str = "And is that still the plan?";
pub const SECOND_ANSWER: &str = "Yes, still Friday.";
/// The pause inside the first answer: deltas sent before it must reach the
/// bridge's stdout before the run ends.
pub const PAUSE: Duration = Duration::from_millis(1500);

/// What the model says once it asked its question.
pub const WAITING: &str = "I asked; waiting for your answer.";
/// What the model says, before the answer, once it has it.
pub const GOING_WITH: &str = "Going with:";

/// What the model says once its Bash command has run.
pub const BASH_DONE: &str = "The command ran.";

#[derive(Clone, Default)]
pub struct Fake {
    pub requests: Arc<Mutex<Vec<Value>>>,
    pub hang: bool,
    /// A command the model runs with the Bash tool, whatever it is asked.
    pub bash: Option<String>,
    /// Answer every request with HTTP 500 while set.
    pub fail: Arc<AtomicBool>,
    /// A question (and its choices) the model asks with the bridge's
    /// `ask_user` tool; given the answer, it says [`GOING_WITH`] and it.
    pub ask: Option<(String, Vec<String>)>,
    /// Prompts the `bash` command was already run for (or the question
    /// asked for): a prompt gets the call once, then the done message.
    pub bashed: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Tool calls the model makes one after another (name, input) when
    /// its tools include the first, then it says [`CALLS_DONE`].
    pub calls: Vec<(String, Value)>,
    /// A word that makes the model never answer the turn whose prompt
    /// holds it (the other turns are answered as usual).
    pub hang_on: Option<String>,
    /// Requests left hanging so far.
    pub hanging: Arc<std::sync::atomic::AtomicUsize>,
    /// A word that makes the model take this long to answer the turn
    /// whose prompt holds it (a turn that works a while, then ends).
    pub pause_on: Option<(String, Duration)>,
    /// Tool calls the test sets between turns ([`Fake::set_script`]).
    pub script: Arc<Mutex<Script>>,
    /// The key each request came with (`x-api-key`, `authorization`).
    pub keys: Arc<Mutex<Vec<String>>>,
    /// The tokens its answers reported, summed (input, output).
    pub reported: Arc<Mutex<(u64, u64)>>,
}

/// Tool calls the model makes one after another from the first request
/// that offers the first of them, then [`CALLS_DONE`] (for every later
/// request too, until the test sets another script).
#[derive(Default)]
pub struct Script {
    calls: Vec<(String, Value)>,
    /// How many tool results the conversation held when the script began.
    base: Option<usize>,
}

/// Wait until one of `requests` (a fake model's) holds `text`; `false`
/// after `within`.
pub async fn until_asked(requests: &Mutex<Vec<Value>>, text: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let asked = requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.to_string().contains(text));
        if asked || tokio::time::Instant::now() >= deadline {
            return asked;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Fake {
    /// Wait until a request holding `text` came in; `false` after `within`.
    pub async fn until_asked(&self, text: &str, within: Duration) -> bool {
        until_asked(&self.requests, text, within).await
    }

    /// The person's words in every request the model got: the text blocks
    /// of user messages (not what a tool answered).
    pub fn people_said(&self) -> Vec<String> {
        people_said(&self.requests.lock().unwrap())
    }

    /// Make these calls from the next turn on.
    pub fn set_script(&self, calls: Vec<(&str, Value)>) {
        *self.script.lock().unwrap() = Script {
            calls: calls
                .into_iter()
                .map(|(name, input)| (name.to_string(), input))
                .collect(),
            base: None,
        };
    }
}

/// How many tool results a request's conversation holds.
fn tool_results(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .count()
}

/// What the model says once its scripted [`Fake::calls`] have answered.
pub const CALLS_DONE: &str = "I looked it up.";

/// What the fake says with its HTTP 500.
pub const OUTAGE: &str = "upstream model unavailable";

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {}\n\n",
                e["type"].as_str().unwrap_or("message"),
                e
            )
        })
        .collect()
}

/// Add what an answer's events report to [`Fake::reported`]: the input
/// its start says, the output at its largest (it grows as it streams).
fn report<'e>(fake: &Fake, events: impl IntoIterator<Item = &'e Value>) {
    let (mut input, mut output) = (0, 0);
    for event in events {
        let usage = [&event["usage"], &event["message"]["usage"]];
        for usage in usage {
            input = input.max(usage["input_tokens"].as_u64().unwrap_or(0));
            output = output.max(usage["output_tokens"].as_u64().unwrap_or(0));
        }
    }
    let mut reported = fake.reported.lock().unwrap();
    reported.0 += input;
    reported.1 += output;
}

/// A message id of its own per answer, as a real model gives: a harness
/// counts each model call's usage by it.
fn message_id() -> String {
    static MESSAGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!("msg_fake{}", MESSAGES.fetch_add(1, Ordering::Relaxed))
}

fn text_events(text: &str) -> (Vec<Value>, Vec<Value>) {
    let start = json!({"type": "message_start", "message": {"id": message_id(), "type": "message", "role": "assistant", "model": "fake-model", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}});
    (
        vec![
            start,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ],
        vec![
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ],
    )
}

fn tool_call_events(name: &str, input: &Value) -> Vec<Value> {
    // Each call its own id, as a real model gives: a harness keeps tool
    // results by id, and a resumed session holds earlier ones.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = format!("toolu_fake{}", CALLS.fetch_add(1, Ordering::Relaxed));
    tool_call_events_with_id(&id, name, input)
}

fn tool_call_events_with_id(id: &str, name: &str, input: &Value) -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": message_id(), "type": "message", "role": "assistant", "model": "fake-model", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]
}

/// `input` with `{cwd}` in its text replaced by the working directory the
/// agent's system prompt names (`Working directory: …`), as a model
/// writes the absolute paths its file tools take.
fn in_working_directory(input: &Value, request: &Value) -> Value {
    let text = input.to_string();
    if !text.contains("{cwd}") {
        return input.clone();
    }
    let system: Vec<&str> = match &request["system"] {
        Value::String(text) => vec![text.as_str()],
        blocks => blocks
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["text"].as_str())
            .collect(),
    };
    let cwd = system
        .iter()
        .flat_map(|text| text.lines())
        .find_map(|line| Some(line.split_once("orking directory: ")?.1.trim()))
        .expect("the system prompt names the working directory");
    serde_json::from_str(&text.replace("{cwd}", cwd)).expect("the input stays JSON")
}

/// The script: the first question gets a history tool call, its result
/// gets the answer (with a pause mid-stream), anything else the follow-up
/// answer. With a `bash` command: the command, then [`BASH_DONE`].
fn script(fake: &Fake, request: &Value) -> (Vec<Value>, Vec<Value>) {
    let last_user = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .cloned()
        .unwrap_or_default();
    // On resume Claude Code appends the new prompt to the last user
    // message (after turn 1's tool result): the last block decides.
    // (Some agents send a user message's content as one string.)
    let last_block = match &last_user["content"] {
        Value::String(text) => json!({"type": "text", "text": text}),
        content => content
            .as_array()
            .and_then(|blocks| blocks.last())
            .cloned()
            .unwrap_or_default(),
    };
    let answers_tool = last_block["type"] == "tool_result";
    let last_user_value = last_user.clone();
    // The blocks since the last tool result: the prompt, and what an agent
    // adds after it (a reminder block).
    let last_user = match last_user["content"].as_array() {
        Some(blocks) if !answers_tool => {
            let from = blocks
                .iter()
                .rposition(|b| b["type"] == "tool_result")
                .map_or(0, |i| i + 1);
            Value::Array(blocks[from..].to_vec()).to_string()
        }
        _ => last_block.to_string(),
    };
    // The bridge's history tool, as the harness names it (Claude Code:
    // `mcp__langbot__history_page`; other agents their own way).
    let history_tool = request["tools"].as_array().and_then(|tools| {
        tools
            .iter()
            .filter_map(|t| t["name"].as_str())
            .find(|name| name.contains("langbot") && name.ends_with("history_page"))
            .map(str::to_string)
    });
    let offers_tool = history_tool.is_some();
    if let Some((question, choices)) = &fake.ask {
        let prompt = last_user_value["content"]
            .as_array()
            .and_then(|blocks| blocks.iter().rev().find(|b| b["type"] == "text"))
            .and_then(|b| b["text"].as_str())
            .unwrap_or_default()
            .to_string();
        return match prompt.split_once("Their answer: ") {
            Some((_, answer)) => {
                let answer = answer.lines().next().unwrap_or_default();
                text_events(&format!("{GOING_WITH} {answer}"))
            }
            // Asked once per prompt (the prompt stays the last text block
            // of a user message that gathers tool results).
            None if answers_tool || !fake.bashed.lock().unwrap().insert(prompt.clone()) => {
                text_events(WAITING)
            }
            None => {
                let input = json!({"question": question, "choices": choices});
                (
                    tool_call_events("mcp__langbot__ask_user", &input),
                    Vec::new(),
                )
            }
        };
    }
    let offers = |name: &str| {
        request["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == name))
    };
    {
        let mut script = fake.script.lock().unwrap();
        if let Some((first, _)) = script.calls.first()
            && offers(first)
        {
            let answered = tool_results(request);
            let base = *script.base.get_or_insert(answered);
            let next = answered.saturating_sub(base);
            return match script.calls.get(next) {
                Some((name, input)) => (
                    tool_call_events_with_id(
                        &format!("toolu_script{answered}"),
                        name,
                        &in_working_directory(input, request),
                    ),
                    Vec::new(),
                ),
                None => text_events(CALLS_DONE),
            };
        }
    }
    if let Some((first, _)) = fake.calls.first()
        && offers(first)
    {
        // Each answered call is one tool result in the conversation so far.
        let answered = tool_results(request);
        return match fake.calls.get(answered) {
            Some((name, input)) => (
                tool_call_events_with_id(
                    &format!("toolu_call{answered}"),
                    name,
                    &in_working_directory(input, request),
                ),
                Vec::new(),
            ),
            None => text_events(CALLS_DONE),
        };
    }
    if let Some(command) = &fake.bash {
        // Claude Code keeps the turn's prompt last in a user message that
        // gathers tool results, so the prompt says which turn this is.
        let prompt = last_user_value["content"]
            .as_array()
            .and_then(|blocks| blocks.iter().rev().find(|b| b["type"] == "text"))
            .map(|b| b["text"].to_string())
            .unwrap_or_default();
        let fresh = !prompt.is_empty() && fake.bashed.lock().unwrap().insert(prompt);
        if answers_tool || !fresh {
            text_events(BASH_DONE)
        } else {
            let input = json!({"command": command, "description": "Run the command"});
            (tool_call_events("Bash", &input), Vec::new())
        }
    } else if answers_tool {
        text_events(ANSWER)
    } else if offers_tool && last_user.contains(ASK) {
        let input = json!({"limit": 5});
        (
            tool_call_events(history_tool.as_deref().unwrap_or_default(), &input),
            Vec::new(),
        )
    } else {
        text_events(SECOND_ANSWER)
    }
}

/// The turn's prompt: the last text block of the last user message
/// (Claude Code keeps it last, also after tool results), passing over a
/// reminder block an agent adds after it (Kilo's `<environment_details>`
/// too); or the message itself when an agent sends one string.
fn last_prompt(request: &Value) -> String {
    let content = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].clone())
        .unwrap_or_default();
    match content {
        Value::String(text) => text,
        Value::Array(blocks) => blocks
            .iter()
            .rev()
            .filter_map(|b| b["text"].as_str())
            .find(|text| {
                let text = text.trim_start();
                !text.starts_with("<system-reminder>")
                    && !text.starts_with("<system_reminder>")
                    && !text.starts_with("<environment_details>")
            })
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// A model that answers as [`fake_model`] does, except that it takes
/// `pause` to answer a turn whose prompt holds `word`.
pub async fn fake_model_pausing_on(word: &str, pause: Duration) -> (String, Fake) {
    serve_fake(Fake {
        pause_on: Some((word.to_string(), pause)),
        ..Fake::default()
    })
    .await
}

/// A model that answers as [`fake_model`] does, except that a turn whose
/// prompt holds `word` is never answered.
pub async fn fake_model_hanging_on(word: &str) -> (String, Fake) {
    serve_fake(Fake {
        hang_on: Some(word.to_string()),
        ..Fake::default()
    })
    .await
}

async fn messages(
    State(fake): State<Fake>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response<Body> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    fake.requests.lock().unwrap().push(request.clone());
    for name in ["x-api-key", "authorization"] {
        if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
            fake.keys.lock().unwrap().push(value.to_string());
        }
    }
    if fake.fail.load(Ordering::SeqCst) {
        let error = json!({"type": "error", "error": {"type": "api_error", "message": OUTAGE}});
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .header("content-type", "application/json")
            .body(Body::from(error.to_string()))
            .unwrap();
    }
    let prompt = last_prompt(&request);
    if fake.hang
        || fake
            .hang_on
            .as_ref()
            .is_some_and(|w| prompt.contains(w.as_str()))
    {
        fake.hanging.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if let Some((_, pause)) = fake
        .pause_on
        .as_ref()
        .filter(|(w, _)| prompt.contains(w.as_str()))
    {
        tokio::time::sleep(*pause).await;
    }
    let (head, tail) = script(&fake, &request);
    if request["stream"] != true {
        let text = head
            .iter()
            .find_map(|e| e["delta"]["text"].as_str())
            .unwrap_or("ok");
        let message = json!({"id": message_id(), "type": "message", "role": "assistant", "model": "fake-model", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 7}});
        report(&fake, [&message]);
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(message.to_string()))
            .unwrap();
    }
    let pause = if head.iter().any(|e| e["delta"]["text"] == ANSWER) {
        PAUSE
    } else {
        Duration::ZERO
    };
    report(&fake, head.iter().chain(&tail));
    let parts = vec![(Duration::ZERO, sse(&head)), (pause, sse(&tail))];
    let stream = futures::stream::iter(parts).then(|(delay, chunk)| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(chunk)
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

pub async fn fake_model(hang: bool) -> (String, Fake) {
    serve_fake(Fake {
        hang,
        ..Fake::default()
    })
    .await
}

/// A model that runs `command` with Claude's Bash tool.
pub async fn fake_model_running(command: &str) -> (String, Fake) {
    serve_fake(Fake {
        bash: Some(command.to_string()),
        ..Fake::default()
    })
    .await
}

/// A model that asks the person `question` with the bridge's `ask_user`
/// tool, then goes on with the answer.
pub async fn fake_model_asking(question: &str, choices: &[&str]) -> (String, Fake) {
    serve_fake(Fake {
        ask: Some((
            question.to_string(),
            choices.iter().map(|c| c.to_string()).collect(),
        )),
        ..Fake::default()
    })
    .await
}

/// A model that makes `calls` (tool name, input) in turn, then says
/// [`CALLS_DONE`].
pub async fn fake_model_calling(calls: Vec<(String, Value)>) -> (String, Fake) {
    serve_fake(Fake {
        calls,
        ..Fake::default()
    })
    .await
}

/// Serve `fake` on 127.0.0.1 as the Messages API; its URL and itself (for
/// a model made of several of the behaviours above).
pub async fn serve_fake(fake: Fake) -> (String, Fake) {
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .fallback(any(|| async { StatusCode::OK }))
        .with_state(fake.clone());
    (super::serve_local(app).await, fake)
}

/// The text blocks of the user messages in `requests`.
pub fn people_said(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(text) => vec![text.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}
