//! The MCP server over streamable HTTP, driven by a real rmcp client against
//! the real SQLite store: the tool list follows the grant, tools return the
//! store's data, refusals carry their §9 code, and every call is audited.

use harness_bridge_testkit as common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::{RUNNER, all_permissions, context};
use harness_bridge::host::prelude::*;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantCaps, GrantPolicy, Grants, NewArtifact, NewTranscriptItem};
use harness_bridge::mcp::{McpHttpServer, RunFacts, RunTools};
use harness_bridge::protocol::AgentRunnerPermissions;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

struct Server {
    _dir: tempfile::TempDir,
    store: SqliteHost,
    grants: Arc<Grants>,
    tools: RunTools,
    http: McpHttpServer,
}

async fn server() -> Server {
    let dir = common::tempdir();
    let store = SqliteHost::open(dir.path()).unwrap();
    for (conv, text) in [
        ("c1", "we ship on friday"),
        ("c1", "the deploy failed"),
        ("c2", "other chat secret"),
    ] {
        store
            .append_transcript(NewTranscriptItem {
                event_id: "e".into(),
                conversation_id: conv.into(),
                role: "user".into(),
                content: Some(text.into()),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let grants = Arc::new(Grants::new(Arc::new(store.clone())));
    let tools = RunTools::default();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let http = McpHttpServer::start(grants.clone(), tools.clone(), addr)
        .await
        .unwrap();
    Server {
        _dir: dir,
        store,
        grants,
        tools,
        http,
    }
}

async fn client(url: &str, token: &str) -> Result<RunningService<RoleClient, ()>, String> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    ().serve(transport).await.map_err(|e| e.to_string())
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("args must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .expect("call transported")
}

fn error_text(result: &CallToolResult) -> String {
    assert_eq!(
        result.is_error,
        Some(true),
        "expected a tool error: {result:?}"
    );
    result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_follow_the_grant_and_return_store_data() {
    let s = server().await;
    let run = s
        .grants
        .open_run(
            &context("run-1", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    s.tools.set_facts(
        "run-1",
        RunFacts {
            current_event: json!({"event_type": "message.received"}),
            ..Default::default()
        },
    );
    let c = client(s.http.url(), run.token.expose()).await.unwrap();

    let names: Vec<String> = c
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    for expected in [
        "get_current_event",
        "read_files",
        "history_page",
        "history_search",
        "event_get",
        "artifact_read",
        "state_set",
        "plugin_storage_get",
        "workspace_storage_keys",
    ] {
        assert!(
            names.contains(&expected.to_string()),
            "{expected} missing from {names:?}"
        );
    }

    let page = call(&c, "history_page", json!({"limit": 10})).await;
    assert_ne!(page.is_error, Some(true), "{page:?}");
    let items = page.structured_content.as_ref().unwrap()["items"]
        .as_array()
        .unwrap()
        .clone();
    let texts: Vec<&str> = items
        .iter()
        .map(|i| i["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["we ship on friday", "the deploy failed"]);
    assert!(
        page.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("we ship on friday")
    );

    let hits = call(&c, "history_search", json!({"query": "deploy"})).await;
    assert_eq!(
        hits.structured_content.unwrap()["items"][0]["content"],
        "the deploy failed"
    );
    let event = call(&c, "get_current_event", json!({})).await;
    assert_eq!(
        event.structured_content.unwrap()["event_type"],
        "message.received"
    );

    let set = call(
        &c,
        "state_set",
        json!({"scope": "conversation", "key": "memory.note", "value": {"likes": "tea"}}),
    )
    .await;
    assert_ne!(set.is_error, Some(true), "{set:?}");
    let got = call(
        &c,
        "state_get",
        json!({"scope": "conversation", "key": "memory.note"}),
    )
    .await;
    assert_eq!(
        got.structured_content.unwrap()["value"],
        json!({"likes": "tea"})
    );
    call(&c, "plugin_storage_set", json!({"key": "k", "value": "v"})).await;
    let blob = call(&c, "plugin_storage_get", json!({"key": "k"})).await;
    assert_eq!(blob.structured_content.unwrap()["text"], "v");

    let art = s
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                mime_type: Some("text/plain".into()),
                source: "x".into(),
                conversation_id: Some("c1".into()),
                ..Default::default()
            },
            b"hello artifact".to_vec(),
        )
        .await
        .unwrap();
    let read = call(
        &c,
        "artifact_read",
        json!({"artifact_id": art.artifact_id, "offset": 6, "length": 100}),
    )
    .await;
    let read = read.structured_content.unwrap();
    assert_eq!(
        (read["text"].as_str(), read["has_more"].as_bool()),
        (Some("artifact"), Some(false))
    );

    let audit = s.store.audit_tail(Some("run-1".into()), 50).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|r| r.entry.action.as_str()).collect();
    for expected in [
        "history_page",
        "history_search",
        "state_set",
        "state_get",
        "storage_set",
        "storage_get",
        "artifact_read",
    ] {
        assert!(
            actions.contains(&expected),
            "no audit row for {expected}: {actions:?}"
        );
    }
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_their_code() {
    let s = server().await;
    let caps = GrantCaps {
        burst: 8,
        rate_per_second: 0.5,
        ..GrantCaps::default()
    };
    let run = s
        .grants
        .open_run(
            &context("run-2", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy {
                caps,
                ..Default::default()
            },
        )
        .unwrap();
    let c = client(s.http.url(), run.token.expose()).await.unwrap();

    let other = call(&c, "history_page", json!({"conversation_id": "c2"})).await;
    assert!(
        error_text(&other).starts_with("unauthorized: "),
        "{other:?}"
    );
    let forged = call(
        &c,
        "history_page",
        json!({"before_cursor": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}),
    )
    .await;
    assert!(error_text(&forged).starts_with("invalid_argument: "));
    let big = call(
        &c,
        "artifact_read",
        json!({"artifact_id": "a", "length": 100_000_000}),
    )
    .await;
    assert!(error_text(&big).starts_with("payload_too_large: "));
    let unknown = call(&c, "history_page", json!({"limit": 5, "sneaky": true})).await;
    assert!(
        error_text(&unknown).starts_with("invalid_argument: bad arguments"),
        "{unknown:?}"
    );
    // The burst is spent by now: the next calls are rate limited.
    let mut limited = false;
    for _ in 0..10 {
        let r = call(&c, "history_page", json!({})).await;
        if r.is_error == Some(true) && error_text(&r).starts_with("rate_limited: ") {
            limited = true;
            break;
        }
    }
    assert!(limited, "a burst over the limit is refused");
    let outcomes: Vec<String> = s
        .store
        .audit_tail(Some("run-2".into()), 50)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.entry.outcome)
        .collect();
    for code in [
        "unauthorized",
        "invalid_argument",
        "payload_too_large",
        "rate_limited",
    ] {
        assert!(
            outcomes.iter().any(|o| o == code),
            "no audit row with {code}: {outcomes:?}"
        );
    }
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrow_grant_lists_and_allows_only_its_tools() {
    let s = server().await;
    let only_page: AgentRunnerPermissions =
        serde_json::from_value(json!({"history": ["page"]})).unwrap();
    let run = s
        .grants
        .open_run(
            &context("run-3", "c1"),
            RUNNER,
            &only_page,
            &GrantPolicy::default(),
        )
        .unwrap();
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    let names: Vec<String> = c
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    // State has no permission key (§4.4): the host's `state` flag, open in
    // this context, grants it.
    assert_eq!(
        names,
        [
            "get_current_event",
            "read_files",
            "history_page",
            "state_get",
            "state_set",
            "state_delete",
            "state_list"
        ]
    );
    let search = call(&c, "history_search", json!({"query": "x"})).await;
    assert!(error_text(&search).starts_with("unauthorized: "));
    // A run not opened to ask the person (no conversation's answer can
    // reach it, or its binding says no) has no `ask_user` or `approve`:
    // calling one is calling an unknown tool.
    for (tool, args) in [
        ("ask_user", json!({"question": "Which?"})),
        (
            "approve",
            json!({"tool_name": "Bash", "input": {"command": "ls"}}),
        ),
    ] {
        let Value::Object(args) = args else {
            unreachable!()
        };
        let answer = c
            .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
            .await;
        match answer {
            Err(rmcp::ServiceError::McpError(e)) => {
                assert_eq!(e.code.0, -32602, "{e:?}");
                assert!(e.message.contains(tool), "{e:?}");
            }
            other => panic!("{tool}: expected a JSON-RPC error, got {other:?}"),
        }
    }
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_closed_tokens_get_401() {
    let s = server().await;
    let http = reqwest_like_post(s.http.url(), None).await;
    assert_eq!(http, 401);
    let http = reqwest_like_post(s.http.url(), Some("wrong")).await;
    assert_eq!(http, 401);
    assert!(client(s.http.url(), "wrong").await.is_err());

    let run = s
        .grants
        .open_run(
            &context("run-4", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    assert_ne!(
        call(&c, "history_page", json!({})).await.is_error,
        Some(true)
    );
    s.grants.close_run("run-4");
    let after = c
        .call_tool(CallToolRequestParams::new("history_page"))
        .await;
    assert!(
        after.is_err(),
        "a closed run's token is refused at the transport: {after:?}"
    );
    assert_eq!(
        reqwest_like_post(s.http.url(), Some(run.token.expose())).await,
        401
    );
    let rows = s.store.audit_tail(None, 50).await.unwrap();
    assert!(rows.iter().any(|r| r.entry.action == "authorize"
        && r.entry.run_id == "run-4"
        && r.entry.outcome == "unauthorized"));
    assert!(
        rows.iter()
            .any(|r| r.entry.action == "authorize" && r.entry.run_id.is_empty())
    );
    s.http.shutdown().await;
}

/// A bare HTTP POST of an `initialize` request: the status code only.
async fn reqwest_like_post(url: &str, token: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_returns_the_stores_data() {
    use harness_bridge::host::NewEvent;
    use harness_bridge::mcp::InputRef;
    let s = server().await;
    s.store
        .append_event(NewEvent {
            event_id: "ev-join".into(),
            event_type: "member.joined".into(),
            source: "platform".into(),
            conversation_id: Some("c1".into()),
            input_summary: Some("Grace joined".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let art = s
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                name: Some("notes.txt".into()),
                mime_type: Some("text/plain".into()),
                source: "platform".into(),
                conversation_id: Some("c1".into()),
                ..Default::default()
            },
            b"meeting notes".to_vec(),
        )
        .await
        .unwrap();
    let bin = s
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "image".into(),
                mime_type: Some("image/png".into()),
                source: "platform".into(),
                conversation_id: Some("c1".into()),
                ..Default::default()
            },
            vec![0x89, b'P', b'N', b'G', 0, 1],
        )
        .await
        .unwrap();
    // The run's workspace with its inline copies; the harness can replace
    // a copy with a link to something outside, which must not be read.
    let ws = common::tempdir();
    let outside = common::tempdir();
    std::fs::write(outside.path().join("secret"), "do not leak").unwrap();
    std::fs::create_dir_all(ws.path().join(".langbot/inputs")).unwrap();
    std::fs::write(ws.path().join(".langbot/inputs/up.txt"), "inline upload").unwrap();
    std::fs::write(
        ws.path().join(".langbot/inputs/big.txt"),
        "a".repeat(1536 * 1024),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        ws.path().join(".langbot/inputs/link.txt"),
    )
    .unwrap();
    let copy = |name: &str| InputRef {
        name: name.into(),
        artifact_id: None,
        copy: Some(format!(".langbot/inputs/{name}").into()),
    };
    let run = s
        .grants
        .open_run(
            &context("run-all", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let inputs = [
        (
            "f_artifact".to_string(),
            InputRef {
                name: "notes.txt".into(),
                artifact_id: Some(art.artifact_id.clone()),
                copy: None,
            },
        ),
        ("f_local".to_string(), copy("up.txt")),
        ("f_big".to_string(), copy("big.txt")),
        ("f_link".to_string(), copy("link.txt")),
    ];
    s.tools.set_facts(
        "run-all",
        RunFacts {
            current_event: json!({"event_id": "ev-now"}),
            input_files: inputs.into_iter().collect(),
            workspace: ws.path().to_path_buf(),
            publish: None,
        },
    );
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    let ok = |r: CallToolResult| {
        assert_ne!(r.is_error, Some(true), "{r:?}");
        r.structured_content.unwrap()
    };

    let files = ok(call(
        &c,
        "read_files",
        json!({"ids": ["f_artifact", "f_local", "f_nope"]}),
    )
    .await);
    assert_eq!(files["files"][0]["text"], "meeting notes");
    assert_eq!(files["files"][1]["text"], "inline upload");
    assert!(
        files["files"][2]["error"]
            .as_str()
            .unwrap()
            .starts_with("not_found")
    );
    assert_eq!(files["files"][1]["size_bytes"], 13);
    assert!(files["files"][1].get("truncated").is_none());

    // A long file comes back cut at 1 MiB and says so; a link is not followed.
    let files = ok(call(&c, "read_files", json!({"ids": ["f_big", "f_link"]})).await);
    assert_eq!(files["files"][0]["truncated"], true);
    assert_eq!(files["files"][0]["size_bytes"], 1536 * 1024);
    assert_eq!(
        files["files"][0]["text"].as_str().unwrap().len(),
        1024 * 1024
    );
    let refused = files["files"][1]["error"].as_str().unwrap();
    assert!(refused.starts_with("not_found"), "{refused}");
    assert!(!files.to_string().contains("do not leak"));

    // Ids repeat once; more than 16 distinct ids is refused whole.
    let once = ok(call(
        &c,
        "read_files",
        json!({"ids": ["f_local", "f_local", "f_local"]}),
    )
    .await);
    assert_eq!(once["files"].as_array().unwrap().len(), 1);
    let many: Vec<String> = (0..17).map(|i| format!("f_{i}")).collect();
    let r = call(&c, "read_files", json!({ "ids": many })).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["code"], "invalid_argument");
    assert_eq!(
        ok(call(&c, "get_current_event", json!({})).await)["event_id"],
        "ev-now"
    );
    let events = ok(call(&c, "event_page", json!({"event_types": ["member.joined"]})).await);
    assert_eq!(events["items"][0]["event_id"], "ev-join");
    assert_eq!(
        ok(call(&c, "event_get", json!({"event_id": "ev-join"})).await)["input_summary"],
        "Grace joined"
    );
    assert_eq!(
        ok(call(
            &c,
            "artifact_metadata",
            json!({"artifact_id": art.artifact_id})
        )
        .await)["name"],
        "notes.txt"
    );
    let png = ok(call(&c, "artifact_read", json!({"artifact_id": bin.artifact_id})).await);
    assert_eq!(
        png["content_base64"], "iVBORwAB",
        "binary comes back as base64"
    );
    assert!(png.get("text").is_none());

    ok(call(
        &c,
        "state_set",
        json!({"scope": "actor", "key": "pref.lang", "value": "en"}),
    )
    .await);
    ok(call(
        &c,
        "state_set",
        json!({"scope": "actor", "key": "pref.tz", "value": "UTC"}),
    )
    .await);
    let listed = ok(call(
        &c,
        "state_list",
        json!({"scope": "actor", "prefix": "pref."}),
    )
    .await);
    assert_eq!(listed["entries"].as_array().unwrap().len(), 2);
    assert_eq!(
        ok(call(
            &c,
            "state_delete",
            json!({"scope": "actor", "key": "pref.tz"})
        )
        .await)["deleted"],
        true
    );
    assert_eq!(
        ok(call(&c, "state_get", json!({"scope": "actor", "key": "pref.tz"})).await)["found"],
        false
    );

    for area in ["plugin", "workspace"] {
        ok(call(
            &c,
            &format!("{area}_storage_set"),
            json!({"key": "blob", "value": "AAEC", "base64": true}),
        )
        .await);
        assert_eq!(
            ok(call(&c, &format!("{area}_storage_get"), json!({"key": "blob"})).await)["base64"],
            "AAEC"
        );
        assert_eq!(
            ok(call(&c, &format!("{area}_storage_keys"), json!({})).await)["keys"],
            json!(["blob"])
        );
        assert_eq!(
            ok(call(
                &c,
                &format!("{area}_storage_delete"),
                json!({"key": "blob"})
            )
            .await)["deleted"],
            true
        );
    }
    let audited = s
        .store
        .audit_tail(Some("run-all".into()), 100)
        .await
        .unwrap();
    // One row per host call through the grant (get_current_event and the
    // local input file touch no host; read_files' artifact is one read),
    // and one per refusal: the unknown id, the link, the 17 ids.
    let mut actions: Vec<(&str, &str)> = audited
        .iter()
        .filter(|r| r.entry.outcome != "ok")
        .map(|r| (r.entry.action.as_str(), r.entry.outcome.as_str()))
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        [
            ("read_files", "invalid_argument"),
            ("read_files", "not_found"),
            ("read_files", "not_found"),
        ]
    );
    let mut actions: Vec<&str> = audited
        .iter()
        .filter(|r| r.entry.outcome == "ok")
        .map(|r| r.entry.action.as_str())
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        [
            "artifact_metadata",
            "artifact_read",
            "artifact_read",
            "event_get",
            "event_page",
            "state_delete",
            "state_get",
            "state_list",
            "state_set",
            "state_set",
            "storage_delete",
            "storage_delete",
            "storage_get",
            "storage_get",
            "storage_keys",
            "storage_keys",
            "storage_set",
            "storage_set",
        ]
    );
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

/// The audit rows of `run` written after row `after`.
async fn rows_after(s: &Server, run: &str, after: i64) -> Vec<harness_bridge::host::AuditRow> {
    let rows = s.store.audit_tail(Some(run.into()), 1000).await.unwrap();
    rows.into_iter().filter(|r| r.id > after).collect()
}

/// The id of the newest audit row, 0 when there is none.
async fn last_row_id(s: &Server) -> i64 {
    s.store
        .audit_tail(None, 1)
        .await
        .unwrap()
        .last()
        .map_or(0, |r| r.id)
}

/// A raw POST to the MCP endpoint: status (0 when the server closed the
/// connection before answering) and body.
async fn post_answer(url: &str, authorization: &str, body: Vec<u8>) -> (u16, String) {
    let sent = reqwest::Client::new()
        .post(url)
        .header("Authorization", authorization)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// The status of [`post_answer`].
async fn post_raw(url: &str, authorization: &str, body: Vec<u8>) -> u16 {
    post_answer(url, authorization, body).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_one_audit_row() {
    use harness_bridge::mcp::InputRef;
    let s = server().await;
    // History pages and workspace storage only: history_search is not granted.
    let narrow: AgentRunnerPermissions =
        serde_json::from_value(json!({"history": ["page"], "storage": ["workspace"]})).unwrap();
    let run = s
        .grants
        .open_run(
            &context("run-r", "c1"),
            RUNNER,
            &narrow,
            &GrantPolicy::default(),
        )
        .unwrap();
    // An input copy the harness replaced with a link: reading it is refused.
    let ws = common::tempdir();
    let outside = common::tempdir();
    std::fs::write(outside.path().join("secret"), "do not leak").unwrap();
    std::fs::create_dir_all(ws.path().join(".langbot/inputs")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        ws.path().join(".langbot/inputs/link.txt"),
    )
    .unwrap();
    let link = InputRef {
        name: "link.txt".into(),
        artifact_id: None,
        copy: Some(".langbot/inputs/link.txt".into()),
    };
    s.tools.set_facts(
        "run-r",
        RunFacts {
            current_event: json!({"event_id": "ev-now"}),
            input_files: [("f_link".to_string(), link)].into_iter().collect(),
            workspace: ws.path().to_path_buf(),
            publish: None,
        },
    );
    let c = client(s.http.url(), run.token.expose()).await.unwrap();

    let many: Vec<String> = (0..17).map(|i| format!("f_{i}")).collect();
    let refusals = [
        (
            "history_search",
            json!({"query": "x"}),
            "history_search",
            "unauthorized",
        ),
        (
            "history_page",
            json!({"limit": 5, "sneaky": true}),
            "history_page",
            "invalid_argument",
        ),
        (
            "get_current_event",
            json!({"extra": 1}),
            "get_current_event",
            "invalid_argument",
        ),
        (
            "read_files",
            json!({"ids": "f_link"}),
            "read_files",
            "invalid_argument",
        ),
        (
            "read_files",
            json!({ "ids": many }),
            "read_files",
            "invalid_argument",
        ),
        (
            "read_files",
            json!({"ids": ["f_nope"]}),
            "read_files",
            "not_found",
        ),
        (
            "read_files",
            json!({"ids": ["f_link"]}),
            "read_files",
            "not_found",
        ),
        (
            "workspace_storage_set",
            json!({"key": "k", "value": "not base64!", "base64": true}),
            "storage_set",
            "invalid_argument",
        ),
    ];
    for (tool, args, action, outcome) in refusals {
        let before = last_row_id(&s).await;
        let result = call(&c, tool, args.clone()).await;
        let refused = result.is_error == Some(true)
            || result.structured_content.as_ref().is_some_and(|v| {
                v["files"][0]["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with(outcome))
            });
        assert!(refused, "{tool} {args} was not refused: {result:?}");
        let rows = rows_after(&s, "run-r", before).await;
        let got: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.entry.action.as_str(), r.entry.outcome.as_str()))
            .collect();
        assert_eq!(got, [(action, outcome)], "{tool} {args}");
        assert!(!rows[0].entry.detail.is_empty(), "{rows:?}");
        assert_eq!(rows[0].entry.runner_id, RUNNER);
    }

    // Refused by the MCP transport before any tool runs: a body over the
    // limit, and JSON-RPC it cannot read. Still one row each, for the run.
    let bearer = format!("Bearer {}", run.token.expose());
    let before = last_row_id(&s).await;
    let status = post_raw(s.http.url(), &bearer, vec![b' '; 9 * 1024 * 1024]).await;
    assert!(matches!(status, 413 | 0), "{status}");
    let rows = rows_after(&s, "run-r", before).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            rows[0].entry.action.as_str(),
            rows[0].entry.outcome.as_str()
        ),
        ("unknown", "payload_too_large")
    );
    let before = last_row_id(&s).await;
    let malformed = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"#.to_vec();
    let (status, said) = post_answer(s.http.url(), &bearer, malformed).await;
    assert_eq!(status, 400, "{said}");
    // The client is told in JSON-RPC's words.
    let said: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(said["error"]["code"], -32700, "{said}");
    let rows = rows_after(&s, "run-r", before).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            rows[0].entry.action.as_str(),
            rows[0].entry.outcome.as_str()
        ),
        ("unknown", "invalid_argument")
    );
    assert!(rows[0].entry.detail.contains("-32700"), "{rows:?}");

    // A call that goes through is still one row, from the grant.
    let before = last_row_id(&s).await;
    let page = call(&c, "history_page", json!({"limit": 5})).await;
    assert_ne!(page.is_error, Some(true), "{page:?}");
    let rows = rows_after(&s, "run-r", before).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].entry.outcome, "ok");
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive() {
    let s = server().await;
    let run = s
        .grants
        .open_run(
            &context("run-b", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let status = post_raw(
            s.http.url(),
            &format!("{scheme} {}", run.token.expose()),
            initialize.to_vec(),
        )
        .await;
        assert_eq!(status, 200, "{scheme}");
    }
    assert_eq!(
        post_raw(
            s.http.url(),
            &format!("Basic {}", run.token.expose()),
            initialize.to_vec()
        )
        .await,
        401
    );
    s.http.shutdown().await;
}

/// A tool as `tools/list` shows it: name, description, argument schema.
fn shown(t: &rmcp::model::Tool) -> Value {
    json!({
        "name": t.name,
        "description": t.description,
        "inputSchema": Value::Object((*t.input_schema).clone()),
    })
}

/// Every tool a harness may be shown, against
/// `tests/snapshots/tools_list.json`: a change to any tool is a change to
/// that file, made on purpose (`HARNESS_BRIDGE_UPDATE_SNAPSHOTS=1`
/// rewrites it). What `tools/list` gives a fully granted run on the
/// embedded host is that list, less the host tools it has none of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_matches_its_snapshot() {
    let catalog: Vec<Value> = RunTools::catalog().iter().map(shown).collect();
    let text = serde_json::to_string_pretty(&catalog).unwrap() + "\n";
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tools_list.json");
    if std::env::var_os("HARNESS_BRIDGE_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        text == expected,
        "the tool list changed; if on purpose, rerun with HARNESS_BRIDGE_UPDATE_SNAPSHOTS=1 and review the diff of {}\n{text}",
        path.display()
    );

    let s = server().await;
    let run = s
        .grants
        .open_run(
            &context("run-snap", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    // A run that may ask the person anything (as `Bridge::run` opens one
    // under `approvals: chat`).
    s.tools
        .interactions()
        .open("run-snap", None, common::ALL_ASKING);
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    let listed: Vec<Value> = c
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(shown)
        .collect();
    let no_host_tools: Vec<Value> = catalog
        .into_iter()
        .filter(|t| {
            ![
                "list_tools",
                "get_tool_detail",
                "call_tool",
                "list_knowledge_bases",
                "retrieve_knowledge",
            ]
            .contains(&t["name"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(listed, no_host_tools);
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

/// A call whose arguments do not parse is still a call of its API: the
/// grant admits it first (so a run past its budget hears `rate_limited`,
/// not a parse error) and it counts against the run's budget, so a harness
/// cannot probe the host without limit by sending bad arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparseable_calls_count_against_the_budget() {
    let s = server().await;
    let mut policy = GrantPolicy::default();
    policy.caps.max_calls_per_run = 2;
    let run = s
        .grants
        .open_run(&context("run-b", "c1"), RUNNER, &all_permissions(), &policy)
        .unwrap();
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    for _ in 0..2 {
        let bad = call(&c, "history_page", json!({"limit": "many"})).await;
        assert!(error_text(&bad).starts_with("invalid_argument"), "{bad:?}");
    }
    let good = call(&c, "history_page", json!({"limit": 5})).await;
    assert!(error_text(&good).starts_with("rate_limited"), "{good:?}");
    let bad = call(&c, "history_page", json!({"limit": "many"})).await;
    assert!(error_text(&bad).starts_with("rate_limited"), "{bad:?}");
    let rows = s.store.audit_tail(Some("run-b".into()), 50).await.unwrap();
    let outcomes: Vec<&str> = rows.iter().map(|r| r.entry.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        [
            "invalid_argument",
            "invalid_argument",
            "rate_limited",
            "rate_limited"
        ]
    );
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

/// Copilot CLI sends a non-standard `server/discover` before `initialize`:
/// it gets an answer at once (an error), not a connection left hanging,
/// and the session that follows works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discover_request_before_initialize_is_answered_at_once() {
    let s = server().await;
    let run = s
        .grants
        .open_run(
            &context("run-d", "c1"),
            RUNNER,
            &AgentRunnerPermissions::default(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let bearer = format!("Bearer {}", run.token.expose());
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}});
    let answered = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        post_answer(s.http.url(), &bearer, discover.to_string().into_bytes()),
    )
    .await
    .expect("answered within 5 s");
    let (status, body) = answered;
    assert!(
        (400..500).contains(&status) || body.contains("\"error\""),
        "{status} {body}"
    );
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    assert!(!c.list_all_tools().await.unwrap().is_empty());
}

/// A run of conversation `c1` granted everything, with the default policy.
fn open_full(s: &Server, run_id: &str) -> harness_bridge::host::OpenRun {
    s.grants
        .open_run(
            &context(run_id, "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap()
}

/// A POST of `body` to the MCP endpoint with the run's bearer token and,
/// when given, an `Origin`: the status and the body as JSON (`null` when
/// it is not JSON).
async fn rpc_from(url: &str, token: &str, origin: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(origin) = origin {
        request = request.header("Origin", origin);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// [`rpc_from`] without an `Origin`, as harness CLIs send it.
async fn rpc(url: &str, token: &str, body: &str) -> (u16, Value) {
    rpc_from(url, token, None, body).await
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

/// The streamable HTTP transport's MUST against DNS rebinding: a present
/// `Origin` that is not the server's own (http on a loopback name at its
/// port) is refused with 403 before anything else is read, and audited
/// against the run; no `Origin` (what harness CLIs send) and the server's
/// own are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_audited() {
    let s = server().await;
    let run = open_full(&s, "run-o");
    let (url, token) = (s.http.url(), run.token.expose());
    let port = s.http.addr().port();
    let other = if port == 65535 { port - 1 } else { port + 1 };
    for own in [
        None,
        Some(format!("http://127.0.0.1:{port}")),
        Some(format!("http://localhost:{port}")),
        Some(format!("http://LOCALHOST:{port}")),
        Some(format!("http://[::1]:{port}")),
    ] {
        let (status, said) = rpc_from(url, token, own.as_deref(), INITIALIZE).await;
        assert_eq!(status, 200, "{own:?}: {said}");
        assert!(said["result"]["serverInfo"].is_object(), "{own:?}: {said}");
    }
    for foreign in [
        "http://evil.example.com".to_string(),
        format!("http://evil.example.com:{port}"),
        format!("https://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{other}"),
        "http://127.0.0.1".to_string(),
        "null".to_string(),
        "not an origin".to_string(),
    ] {
        let before = last_row_id(&s).await;
        // Even JSON that does not parse: the Origin is judged first.
        for body in [INITIALIZE, "{"] {
            let (status, said) = rpc_from(url, token, Some(&foreign), body).await;
            assert_eq!(status, 403, "{foreign}: {said}");
        }
        let rows = rows_after(&s, "run-o", before).await;
        let got: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.entry.action.as_str(), r.entry.outcome.as_str()))
            .collect();
        assert_eq!(got, [("unknown", "unauthorized"); 2], "{foreign}");
        assert!(rows[0].entry.detail.contains(&foreign), "{rows:?}");
    }
    s.http.shutdown().await;
}

/// Calling a tool that does not exist is a JSON-RPC error (-32602, the
/// spec's "Unknown tool" example), not a tool result; the refusal still
/// leaves its audit row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_a_json_rpc_error_and_audited() {
    let s = server().await;
    let run = open_full(&s, "run-u");
    let c = client(s.http.url(), run.token.expose()).await.unwrap();
    let before = last_row_id(&s).await;
    let answer = c
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await;
    match answer {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32602, "{e:?}");
            assert!(e.message.contains("no_such_tool"), "{e:?}");
        }
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
    let rows = rows_after(&s, "run-u", before).await;
    let got: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.entry.action.as_str(),
                r.entry.resource.as_str(),
                r.entry.outcome.as_str(),
            )
        })
        .collect();
    assert_eq!(got, [("unknown", "tool:no_such_tool", "not_found")]);
    // The session goes on: a real tool still answers.
    let page = call(&c, "history_page", json!({"limit": 1})).await;
    assert_ne!(page.is_error, Some(true), "{page:?}");
    c.cancel().await.unwrap();
    s.http.shutdown().await;
}

/// Requests of methods the server answers whose params do not fit them
/// are -32602 (invalid params) for that request, not -32601 (method not
/// found); a `tools/list` cursor the server never gave is one of them.
/// Each is audited as a refusal of the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_that_do_not_fit_are_invalid_params() {
    let s = server().await;
    let run = open_full(&s, "run-p");
    let (url, token) = (s.http.url(), run.token.expose());
    // Each with whether it leaves an audit row: what is turned down before
    // the handler does; a list with a cursor of the right type reaches the
    // handler, and listing is not audited.
    for (body, audited) in [
        (
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}),
            true,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call"}),
            true,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 7}}),
            true,
        ),
        (
            json!({"jsonrpc": "2.0", "id": "five", "method": "initialize"}),
            true,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": {}}),
            true,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"cursor": 7}}),
            true,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"cursor": "page-2"}}),
            false,
        ),
    ] {
        let before = last_row_id(&s).await;
        let (status, said) = rpc(url, token, &body.to_string()).await;
        assert_eq!(status, 200, "{body}: {said}");
        assert_eq!(said["id"], body["id"], "{body}: {said}");
        assert_eq!(said["error"]["code"], -32602, "{body}: {said}");
        let rows = rows_after(&s, "run-p", before).await;
        let got: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.entry.action.as_str(), r.entry.outcome.as_str()))
            .collect();
        let expected: &[(&str, &str)] = if audited {
            &[("unknown", "invalid_argument")]
        } else {
            &[]
        };
        assert_eq!(got, expected, "{body}");
    }
    // A cursor-less list is still the whole list.
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}});
    let (status, said) = rpc(url, token, &list.to_string()).await;
    assert_eq!(status, 200, "{said}");
    assert!(!said["result"]["tools"].as_array().unwrap().is_empty());
    s.http.shutdown().await;
}

/// A body the server cannot take as a JSON-RPC request is answered in
/// JSON-RPC's words (HTTP 400 with -32700 parse error or -32600 invalid
/// request, `id` null unless it could be read), not a plain-text 415, and
/// audited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_rpc_gets_a_json_rpc_error() {
    let s = server().await;
    let run = open_full(&s, "run-m");
    let (url, token) = (s.http.url(), run.token.expose());
    for (body, code, id) in [
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"#,
            -32700,
            Value::Null,
        ),
        ("not json", -32700, Value::Null),
        ("", -32700, Value::Null),
        (r#"{"hello":"world"}"#, -32600, Value::Null),
        ("[]", -32600, Value::Null),
        ("42", -32600, Value::Null),
        (r#"{"jsonrpc":"2.0","id":3,"method":5}"#, -32600, json!(3)),
        (
            r#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#,
            -32600,
            json!("x"),
        ),
    ] {
        let before = last_row_id(&s).await;
        let (status, said) = rpc(url, token, body).await;
        assert_eq!(status, 400, "{body}: {said}");
        assert_eq!(said["jsonrpc"], "2.0", "{body}: {said}");
        assert_eq!(said["error"]["code"], code, "{body}: {said}");
        assert_eq!(said["id"], id, "{body}: {said}");
        let rows = rows_after(&s, "run-m", before).await;
        let got: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.entry.action.as_str(), r.entry.outcome.as_str()))
            .collect();
        assert_eq!(got, [("unknown", "invalid_argument")], "{body}");
    }
    s.http.shutdown().await;
}

/// The server declares the tools capability only: the list and complete
/// methods of resources, prompts and completions are "method not found"
/// (-32601), not empty answers that claim a capability it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_capabilities_are_method_not_found() {
    let s = server().await;
    let run = open_full(&s, "run-n");
    let (url, token) = (s.http.url(), run.token.expose());
    let (_, init) = rpc(url, token, INITIALIZE).await;
    let capabilities = init["result"]["capabilities"].as_object().unwrap();
    let declared: Vec<&str> = capabilities.keys().map(String::as_str).collect();
    assert_eq!(declared, ["tools"], "{init}");
    for (method, params) in [
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        ("resources/read", json!({"uri": "file:///etc/passwd"})),
        ("prompts/list", json!({})),
        ("prompts/get", json!({"name": "p"})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "b"}}),
        ),
        ("logging/setLevel", json!({"level": "info"})),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (status, said) = rpc(url, token, &body.to_string()).await;
        assert_eq!(status, 200, "{method}: {said}");
        assert_eq!(said["error"]["code"], -32601, "{method}: {said}");
    }
    s.http.shutdown().await;
}
