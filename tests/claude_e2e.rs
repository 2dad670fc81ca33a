//! The real Claude Code CLI, offline, against a fake Messages API on
//! 127.0.0.1: it loads the MCP config the projection wrote, connects to the
//! bridge's MCP server with the run token from its environment, calls
//! `mcp__langbot__history_page` when the fake model asks it to, and the
//! next model request carries the transcript text from the real store.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, StatusCode};
use axum::routing::{any, post};
use harness_bridge::harness::TurnValues;
use harness_bridge::projection::TOKEN_ENV;
use serde_json::{Value, json};

type Requests = Arc<Mutex<Vec<Value>>>;

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

/// One scripted reply: ask for the history tool until a tool result comes
/// back, then answer with text.
fn reply(request: &Value) -> Vec<Value> {
    let saw_result = request["messages"].as_array().is_some_and(|messages| {
        messages.iter().any(|m| {
            m["content"]
                .as_array()
                .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
        })
    });
    let offers_tool = request["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t["name"] == "mcp__langbot__history_page")
    });
    let start = json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake-model", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}});
    if offers_tool && !saw_result {
        vec![
            start,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_fake1", "name": "mcp__langbot__history_page", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"limit\": 5}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 5}}),
            json!({"type": "message_stop"}),
        ]
    } else {
        vec![
            start,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "You decided to ship on Friday."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ]
    }
}

async fn messages(State(requests): State<Requests>, body: String) -> Response<Body> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    requests.lock().unwrap().push(request.clone());
    let events = reply(&request);
    if request["stream"] == true {
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from(sse(&events)))
            .unwrap()
    } else {
        let text = events
            .iter()
            .find_map(|e| e["delta"]["text"].as_str())
            .unwrap_or("ok");
        let message = json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake-model", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 7}});
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(message.to_string()))
            .unwrap()
    }
}

async fn fake_model() -> (String, Requests) {
    let requests: Requests = Arc::default();
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .fallback(any(|| async { StatusCode::OK }))
        .with_state(requests.clone());
    (common::serve_local(app).await, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_calls_the_history_tool_through_the_bridge() {
    let claude = common::cli("claude");
    let e2e = common::E2e::new("claude-code", "run-e2e").await;
    let (model_url, requests) = fake_model().await;
    let workspace = &e2e.projection.workspace;
    let home = tempfile::tempdir().unwrap();
    let spec = harness_bridge::harness::find("claude-code").unwrap();
    let mcp_config = workspace.join(".langbot/mcp.json");
    let args = spec.args(&TurnValues {
        prompt: &e2e.projection.turn_prompt,
        instructions: Some(&e2e.projection.instructions),
        mcp_config: Some(&mcp_config),
        ..TurnValues::default()
    });
    let output = tokio::process::Command::new(&claude)
        .current_dir(workspace)
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CLAUDE_CONFIG_DIR", home.path().join(".claude"))
        .env("ANTHROPIC_BASE_URL", &model_url)
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env(TOKEN_ENV, e2e.run.token.expose())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), output)
        .await
        .expect("claude finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let init = lines
        .iter()
        .find(|l| l["type"] == "system" && l["subtype"] == "init")
        .unwrap_or_else(|| {
            panic!(
                "no init line; stdout:\n{stdout}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let langbot = init["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "langbot")
        .expect("langbot server listed");
    assert_eq!(langbot["status"], "connected", "{init}");
    let result = lines
        .iter()
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line:\n{stdout}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert!(
        result["result"]
            .as_str()
            .unwrap_or("")
            .contains("ship on Friday"),
        "{result}"
    );

    // The model's second request carried the tool result: the store's text.
    let requests = requests.lock().unwrap().clone();
    let with_result = requests
        .iter()
        .find(|r| r.to_string().contains("tool_result"))
        .unwrap_or_else(|| {
            panic!(
                "no request carried a tool result: {} requests",
                requests.len()
            )
        });
    assert!(
        with_result.to_string().contains(common::DECISION),
        "the tool result did not carry the transcript"
    );
    // The stable instructions reached the system prompt (`--append-system-prompt`).
    assert!(
        requests
            .iter()
            .any(|r| r["system"].to_string().contains("harness-bridge")),
        "instructions missing from the system prompt"
    );
    e2e.assert_history_read().await;

    // The bridge's decoder reads this real output as the run's results.
    let results = common::decode("claude-stream-json", &stdout, output.status.code());
    let kinds: Vec<&str> = results.iter().map(|r| r.kind.as_str()).collect();
    let started = kinds
        .iter()
        .position(|k| *k == "tool.call.started")
        .expect("tool.call.started");
    let completed = kinds
        .iter()
        .position(|k| *k == "tool.call.completed")
        .expect("tool.call.completed");
    assert!(started < completed, "{kinds:?}");
    assert_eq!(
        results[started].data["tool_name"],
        "mcp__langbot__history_page"
    );
    assert!(
        results[completed].data["result"]["text"]
            .as_str()
            .unwrap_or("")
            .contains(common::DECISION)
    );
    assert!(kinds.contains(&"message.completed"), "{kinds:?}");
    // `--include-partial-messages` is on: the stream has token deltas.
    assert!(kinds.contains(&"message.delta"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run.completed"), "{kinds:?}");
    e2e.finish().await;
}
