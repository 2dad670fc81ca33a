//! MCP tools/call round trips on the 1,000,000-item store: `history_page`
//! (50 items) over streamable HTTP with a real rmcp client, the same through
//! the stdio shim (a real `harness-bridge mcp-stdio` child), and 64 clients
//! (64 runs) calling at once. Run: `cargo bench --bench mcp`.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use harness_bridge::host::Grants;
use harness_bridge::mcp::{McpHttpServer, RunTools};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};

mod support;

const RUNNER: &str = "plugin:langbot/harness-bridge/claude-code";

fn page_call() -> CallToolRequestParams {
    let args = serde_json::json!({"limit": 50});
    CallToolRequestParams::new("history_page")
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

fn check(result: &CallToolResult) {
    assert_ne!(result.is_error, Some(true), "tool failed: {result:?}");
    let items = result
        .structured_content
        .as_ref()
        .and_then(|v| v["items"].as_array())
        .map_or(0, Vec::len);
    assert_eq!(items, 50);
}

async fn http_client(url: &str, token: &str) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("client connects")
}

fn bench(c: &mut Criterion) {
    let rt = support::runtime();
    let store = support::store_1m(&rt);
    let grants = Arc::new(Grants::new(Arc::new(store)));
    let permissions = harness_bridge::harness::requested_permissions();
    let server = rt
        .block_on(McpHttpServer::start(
            grants.clone(),
            RunTools::default(),
            "127.0.0.1:0".parse().expect("addr"),
        ))
        .expect("server");
    let url = server.url().to_string();

    let run = grants
        .open_run(
            &support::context("bench-http", "conv-42"),
            RUNNER,
            &permissions,
            &support::unlimited(),
        )
        .expect("open");
    let client = rt.block_on(http_client(&url, run.token.expose()));
    let mut group = c.benchmark_group("mcp_history_page_50_store_1m");
    group.bench_function("http", |b| {
        b.to_async(&rt)
            .iter(|| async { check(&client.call_tool(page_call()).await.expect("call")) })
    });
    // The same call from a plain HTTP client: the server's share of the
    // round trip, without an rmcp client's message decoding.
    let http = reqwest::Client::new();
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "history_page", "arguments": {"limit": 50}}}).to_string();
    let plain = |token: String| {
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        async move {
            let response = http
                .post(&url)
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .body(body)
                .send()
                .await
                .expect("post");
            assert!(response.status().is_success(), "{}", response.status());
            let bytes = response.bytes().await.expect("body");
            assert!(bytes.len() > 1000);
        }
    };
    group.bench_function("http_plain_client", |b| {
        b.to_async(&rt)
            .iter(|| plain(run.token.expose().to_string()))
    });
    // The same with the token bound to its holder (here this process), as
    // every harness's is: each call asks the kernel who holds the socket.
    let bound = grants
        .open_run(
            &support::context("bench-bound", "conv-44"),
            RUNNER,
            &permissions,
            &support::unlimited(),
        )
        .expect("open");
    grants.bind(
        &bound.token,
        harness_bridge::harness::cage::process_holder(std::process::id() as i32),
    );
    group.bench_function("http_plain_client_holder_checked", |b| {
        b.to_async(&rt)
            .iter(|| plain(bound.token.expose().to_string()))
    });
    // The transport's floor: a tool that touches no store.
    group.bench_function("http_trivial_tool", |b| {
        b.to_async(&rt).iter(|| async {
            let r = client
                .call_tool(CallToolRequestParams::new("get_current_event"))
                .await
                .expect("call");
            assert_ne!(r.is_error, Some(true));
        })
    });

    let shim_run = grants
        .open_run(
            &support::context("bench-stdio", "conv-43"),
            RUNNER,
            &permissions,
            &support::unlimited(),
        )
        .expect("open");
    let shim = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness-bridge"));
        cmd.arg("mcp-stdio")
            .env("LANGBOT_MCP_URL", &url)
            .env("LANGBOT_MCP_TOKEN", shim_run.token.expose());
        ().serve(TokioChildProcess::new(cmd).expect("spawn shim"))
            .await
            .expect("shim connects")
    });
    group.bench_function("stdio_shim", |b| {
        b.to_async(&rt)
            .iter(|| async { check(&shim.call_tool(page_call()).await.expect("call")) })
    });

    // 64 conversations' harnesses calling at the same moment.
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let ctx = support::context(&format!("bench-c{i}"), &format!("conv-{i}"));
            let run = grants
                .open_run(&ctx, RUNNER, &permissions, &support::unlimited())
                .expect("open");
            rt.block_on(http_client(&url, run.token.expose()))
        })
        .collect();
    let peers: Vec<_> = clients.iter().map(|client| client.peer().clone()).collect();
    group.bench_function("http_64_concurrent_clients", |b| {
        b.to_async(&rt).iter(|| {
            let peers = peers.clone();
            async move {
                let calls: Vec<_> = peers
                    .into_iter()
                    .map(|peer| tokio::spawn(async move { peer.call_tool(page_call()).await }))
                    .collect();
                for call in calls {
                    check(
                        &call
                            .await
                            .expect("task")
                            .expect("no client errors under 64-way concurrency"),
                    );
                }
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
