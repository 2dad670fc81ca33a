//! The stdio shim (`harness-bridge mcp-stdio`) driven by a real rmcp client
//! over a real child process: it relays to the HTTP server with the run's
//! token from its environment, and exits once the run has ended.

use harness_bridge_testkit as common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::{RUNNER, all_permissions, context};
use harness_bridge::host::prelude::*;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants, NewTranscriptItem};
use harness_bridge::mcp::{McpHttpServer, RunTools};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shim_relays_and_exits_when_the_run_ends() {
    let dir = common::tempdir();
    let store = SqliteHost::open(dir.path()).unwrap();
    store
        .append_transcript(NewTranscriptItem {
            event_id: "e".into(),
            conversation_id: "c1".into(),
            role: "user".into(),
            content: Some("relayed line".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let grants = Arc::new(Grants::new(Arc::new(store.clone())));
    let http = McpHttpServer::start(
        grants.clone(),
        RunTools::default(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let run = grants
        .open_run(
            &context("run-s", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();

    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness-bridge"));
    cmd.arg("mcp-stdio")
        .env("LANGBOT_MCP_URL", http.url())
        .env("LANGBOT_MCP_TOKEN", run.token.expose());
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("langbot")
    );
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "history_page"));
    // It declares tools only, as the server it relays to: other
    // capabilities' methods are not found, and no cursor is its own.
    let code = |answer: Result<_, rmcp::ServiceError>| match answer {
        Err(rmcp::ServiceError::McpError(e)) => e.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    };
    assert_eq!(code(client.list_resources(None).await.map(drop)), -32601);
    assert_eq!(code(client.list_prompts(None).await.map(drop)), -32601);
    let cursor = rmcp::model::PaginatedRequestParams::default().with_cursor(Some("x".into()));
    assert_eq!(
        code(client.list_tools(Some(cursor)).await.map(drop)),
        -32602
    );
    let page = client
        .call_tool(CallToolRequestParams::new("history_page"))
        .await
        .unwrap();
    assert_eq!(
        page.structured_content.unwrap()["items"][0]["content"],
        "relayed line"
    );

    // A value at the grant's cap (4 MiB, base64 in JSON) gets through the
    // shim and the server; a request larger than the server reads fails
    // that call only, and the tools stay for the rest of the turn.
    let store_blob = |bytes: usize| {
        let value = base64::engine::general_purpose::STANDARD.encode(vec![7u8; bytes]);
        let args = json!({"key": "blob", "value": value, "base64": true});
        let serde_json::Value::Object(args) = args else {
            unreachable!()
        };
        CallToolRequestParams::new("workspace_storage_set").with_arguments(args)
    };
    let stored = client.call_tool(store_blob(4 * 1024 * 1024)).await.unwrap();
    assert_ne!(stored.is_error, Some(true), "{stored:?}");
    let too_big = client.call_tool(store_blob(7 * 1024 * 1024)).await;
    let refused = match too_big {
        Err(e) => e.to_string(),
        Ok(r) => {
            assert_eq!(r.is_error, Some(true), "{r:?}");
            format!("{r:?}")
        }
    };
    assert!(!refused.contains("run has ended"), "{refused}");
    let still = client
        .call_tool(CallToolRequestParams::new("history_page"))
        .await
        .unwrap();
    assert_ne!(still.is_error, Some(true), "{still:?}");

    grants.close_run("run-s");
    let after = client
        .call_tool(CallToolRequestParams::new("history_page"))
        .await;
    assert!(after.is_err(), "{after:?}");
    // The shim exits on its own: the client sees its transport close.
    let quit = tokio::time::timeout(Duration::from_secs(10), client.waiting()).await;
    assert!(quit.is_ok(), "the shim did not exit after the run ended");
    http.shutdown().await;
}

#[test]
fn shim_without_its_environment_says_what_is_missing() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .arg("mcp-stdio")
        .env_remove("LANGBOT_MCP_URL")
        .env_remove("LANGBOT_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LANGBOT_MCP_URL is not set"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shim_sends_the_token_only_to_plain_http_on_a_loopback_address() {
    use tokio::io::AsyncReadExt;
    // Something listening on every address: 0.0.0.0 and `localhost` reach
    // it, but neither is a loopback address the bridge would give.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heard = tokio::spawn(async move {
        let mut heard = Vec::new();
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let n = conn.read(&mut buf).await.unwrap_or(0);
            heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        heard
    });
    for url in [
        format!("http://0.0.0.0:{port}/mcp"),
        format!("http://localhost:{port}/mcp"),
        format!("https://127.0.0.1:{port}/mcp"),
    ] {
        let shim = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
            .arg("mcp-stdio")
            .env("LANGBOT_MCP_URL", &url)
            .env("LANGBOT_MCP_TOKEN", "secret-run-token")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), shim)
            .await
            .expect("the shim refuses at once")
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{url}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("loopback"), "{url}: {said}");
        assert!(!said.contains("secret-run-token"), "{said}");
    }
    heard.abort();
    let heard = heard.await.unwrap_or_default();
    assert!(heard.is_empty(), "the shim connected: {heard:?}");
}
