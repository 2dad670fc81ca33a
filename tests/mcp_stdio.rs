//! The stdio shim (`harness-bridge mcp-stdio`) driven by a real rmcp client
//! over a real child process: it relays to the HTTP server with the run's
//! token from its environment, and exits once the run has ended.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{RUNNER, all_permissions, context};
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants, HostApi, NewTranscriptItem};
use harness_bridge::mcp::{McpHttpServer, RunTools};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shim_relays_and_exits_when_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
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
    let page = client
        .call_tool(CallToolRequestParams::new("history_page"))
        .await
        .unwrap();
    assert_eq!(
        page.structured_content.unwrap()["items"][0]["content"],
        "relayed line"
    );

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
