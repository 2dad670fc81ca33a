//! The real Codex CLI, offline, against a fake Responses API on 127.0.0.1:
//! it reaches the bridge's MCP server through the `-c mcp_servers.langbot`
//! overrides the projection rendered (bearer token by env var name, tools
//! approved), calls `history_page` as a namespace tool when the fake model
//! asks, and the next model request carries the store's transcript text.

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

fn events(request: &Value) -> Vec<Value> {
    let saw_output = request["input"]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i["type"] == "function_call_output"));
    let offers_tool = request["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t["name"] == "mcp__langbot" || t["name"] == "mcp__langbot__history_page")
    });
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15});
    let created = json!({"type": "response.created", "response": {"id": "resp_fake", "status": "in_progress"}});
    let completed = json!({"type": "response.completed", "response": {"id": "resp_fake", "status": "completed", "usage": usage}});
    if offers_tool && !saw_output {
        let call = json!({"type": "function_call", "id": "fc_fake", "call_id": "call_fake", "namespace": "mcp__langbot", "name": "history_page", "arguments": "{\"limit\":5}", "status": "completed"});
        vec![
            created,
            json!({"type": "response.output_item.added", "output_index": 0, "item": call}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
            completed,
        ]
    } else {
        let text = "You decided to ship on Friday.";
        let message = json!({"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        vec![
            created,
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_fake", "role": "assistant", "status": "in_progress", "content": []}}),
            json!({"type": "response.content_part.added", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": text}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
            completed,
        ]
    }
}

async fn responses(State(requests): State<Requests>, body: String) -> Response<Body> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    requests.lock().unwrap().push(request.clone());
    let body: String = events(&request)
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {}\n\n",
                e["type"].as_str().unwrap_or("message"),
                e
            )
        })
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_calls_the_history_tool_through_the_bridge() {
    let codex = common::cli("codex");
    let e2e = common::E2e::new("codex", "run-codex").await;
    let requests: Requests = Arc::default();
    let app = Router::new()
        .route("/v1/responses", post(responses))
        .fallback(any(|| async { StatusCode::NOT_FOUND }))
        .with_state(requests.clone());
    let model_url = common::serve_local(app).await;
    let (projection, run) = (&e2e.projection, &e2e.run);
    assert!(
        projection
            .mcp
            .overrides
            .iter()
            .all(|o| !o.contains(run.token.expose())),
        "no token on argv"
    );

    let home = tempfile::tempdir().unwrap();
    let provider = format!(
        "model_providers.fake={{name=\"fake\",base_url=\"{model_url}/v1\",env_key=\"FAKE_KEY\",wire_api=\"responses\",stream_max_retries=0,request_max_retries=0}}"
    );
    let spec = harness_bridge::harness::find("codex").unwrap();
    let mut overrides = vec!["model_provider=fake".to_string(), provider];
    overrides.extend(projection.mcp.overrides.iter().cloned());
    let args = spec.args(&TurnValues {
        prompt: &projection.turn_prompt,
        model: Some("gpt-5-codex"),
        config_overrides: &overrides,
        ..TurnValues::default()
    });
    let output = tokio::process::Command::new(&codex)
        .current_dir(&projection.workspace)
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path())
        .env("FAKE_KEY", "test-key")
        .env(TOKEN_ENV, run.token.expose())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), output)
        .await
        .expect("codex finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let call = lines
        .iter()
        .find(|l| l["type"] == "item.completed" && l["item"]["type"] == "mcp_tool_call")
        .unwrap_or_else(|| panic!("no mcp_tool_call item; stdout:\n{stdout}\nstderr:\n{stderr}"));
    assert_eq!(call["item"]["server"], "langbot", "{call}");
    assert_eq!(call["item"]["tool"], "history_page", "{call}");
    assert_eq!(call["item"]["status"], "completed", "{call}");
    assert!(
        lines.iter().any(|l| l["type"] == "turn.completed"),
        "{stdout}"
    );
    assert!(output.status.success(), "{stderr}");

    let requests = requests.lock().unwrap().clone();
    let with_output = requests
        .iter()
        .find(|r| r.to_string().contains("function_call_output"))
        .unwrap_or_else(|| {
            panic!(
                "no request carried the tool output: {} requests",
                requests.len()
            )
        });
    assert!(
        with_output.to_string().contains(common::DECISION),
        "the tool output did not carry the transcript"
    );
    e2e.assert_history_read().await;

    // The bridge's decoder reads this real output as the run's results.
    let results = common::decode("codex-jsonl", &stdout, output.status.code());
    let kinds: Vec<&str> = results.iter().map(|r| r.kind.as_str()).collect();
    let started = kinds
        .iter()
        .position(|k| *k == "tool.call.started")
        .expect("tool.call.started");
    assert_eq!(
        results[started].data["tool_name"],
        "mcp__langbot__history_page"
    );
    assert!(kinds.contains(&"tool.call.completed"), "{kinds:?}");
    let answer = results
        .iter()
        .find(|r| r.kind.as_str() == "message.completed")
        .expect("message.completed");
    assert_eq!(
        answer.data["message"]["content"],
        "You decided to ship on Friday."
    );
    assert_eq!(kinds.last(), Some(&"run.completed"), "{kinds:?}");
    e2e.finish().await;
}
