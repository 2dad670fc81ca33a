//! Shared fixtures for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants, HostApi, NewTranscriptItem, OpenRun};
use harness_bridge::protocol::{AgentRunContext, AgentRunnerPermissions};
use serde_json::json;

pub const RUNNER: &str = "plugin:langbot/harness-bridge/claude-code";

/// A context for `conversation`, with every pull API opened by the host.
pub fn context(run_id: &str, conversation: &str) -> AgentRunContext {
    serde_json::from_value(json!({
        "run_id": run_id,
        "trigger": {"type": "message.received", "source": "platform"},
        "event": {"event_id": format!("ev-{run_id}"), "event_type": "message.received", "source": "platform"},
        "conversation": {"conversation_id": conversation, "bot_id": "bot-1", "workspace_id": "ws-1"},
        "actor": {"actor_type": "user", "actor_id": "user-1", "actor_name": "Ada"},
        "subject": {"subject_type": "message", "subject_id": "msg-1"},
        "input": {"text": "hello"},
        "delivery": {"surface": "platform"},
        "resources": {"storage": {"plugin_storage": true, "workspace_storage": true}},
        "context": {"available_apis": {
            "history_page": true, "history_search": true, "event_get": true, "event_page": true,
            "artifact_metadata": true, "artifact_read": true, "state": true, "storage": true
        }},
        "runtime": {"trace_id": "t"}
    }))
    .expect("fixture context parses")
}

/// Every permission the bridge's runners request.
pub fn all_permissions() -> AgentRunnerPermissions {
    harness_bridge::harness::discovery().runners[0]
        .manifest
        .permissions
        .clone()
}

pub struct Fixture {
    pub _dir: tempfile::TempDir,
    pub store: SqliteHost,
    pub grants: Grants,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteHost::open(dir.path()).expect("store opens");
    let grants = Grants::new(Arc::new(store.clone()));
    Fixture {
        _dir: dir,
        store,
        grants,
    }
}

impl Fixture {
    pub fn open(&self, run_id: &str, conversation: &str, policy: &GrantPolicy) -> OpenRun {
        self.grants
            .open_run(
                &context(run_id, conversation),
                RUNNER,
                &all_permissions(),
                policy,
            )
            .expect("run opens")
    }

    pub async fn say(&self, conversation: &str, role: &str, text: &str) {
        self.store
            .append_transcript(NewTranscriptItem {
                event_id: format!("ev-{text}"),
                conversation_id: conversation.into(),
                role: role.into(),
                content: Some(text.into()),
                ..NewTranscriptItem::default()
            })
            .await
            .expect("append transcript");
    }
}

/// A pinned harness CLI installed by `scripts/test` (`npm ci` in `tests/clis`).
/// Missing means the set-up did not run: fail with how to fix it.
pub fn cli(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clis/node_modules/.bin")
        .join(name);
    assert!(
        path.exists(),
        "{name} is not installed at {}: run `scripts/test` (it runs `npm ci` in tests/clis), \
         or `npm ci --prefix tests/clis`",
        path.display()
    );
    path
}

/// Serve `app` on an OS-chosen 127.0.0.1 port; returns `http://127.0.0.1:PORT`.
pub async fn serve_local(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("fake server") });
    url
}

/// The transcript line the end-to-end tests expect a harness to fetch.
pub const DECISION: &str = "DECISION: we ship the release on Friday";

/// Everything a real-harness test needs: a store holding [`DECISION`] in
/// conversation `group-1`, the MCP server, an open run, and its projected
/// workspace for `harness`.
pub struct E2e {
    pub fixture: Fixture,
    pub grants: Arc<Grants>,
    pub http: harness_bridge::mcp::McpHttpServer,
    pub run: OpenRun,
    pub projection: harness_bridge::projection::Projection,
    pub _root: tempfile::TempDir,
}

impl E2e {
    pub async fn new(harness: &str, run_id: &str) -> E2e {
        use harness_bridge::projection::{ProjectRequest, Templates, project};
        let fixture = fixture();
        fixture
            .store
            .append_transcript(NewTranscriptItem {
                event_id: "old".into(),
                conversation_id: "group-1".into(),
                role: "user".into(),
                content: Some(DECISION.into()),
                ..NewTranscriptItem::default()
            })
            .await
            .expect("seed transcript");
        let grants = Arc::new(Grants::new(Arc::new(fixture.store.clone())));
        let tools = harness_bridge::mcp::RunTools::default();
        let http = harness_bridge::mcp::McpHttpServer::start(
            grants.clone(),
            tools,
            "127.0.0.1:0".parse().expect("addr"),
        )
        .await
        .expect("MCP server");
        let ctx = context(run_id, "group-1");
        let run = grants
            .open_run(&ctx, RUNNER, &all_permissions(), &GrantPolicy::default())
            .expect("open run");
        let root = tempfile::tempdir().expect("root");
        let target = harness_bridge::harness::find(harness)
            .expect("harness")
            .target();
        let names = harness_bridge::mcp::tool_names(&run.grant.apis);
        let request = ProjectRequest {
            ctx: &ctx,
            target: &target,
            runner: harness,
            root: root.path(),
            tools: &names,
            mcp_url: http.url(),
            host: None,
        };
        let projection = project(&request, &Templates::load(None).expect("templates"))
            .await
            .expect("projection");
        E2e {
            fixture,
            grants,
            http,
            run,
            projection,
            _root: root,
        }
    }

    /// The harness's history call reached the store through the grant.
    pub async fn assert_history_read(&self) {
        let run_id = self.run.grant.run_id().to_string();
        let audit = self
            .fixture
            .store
            .audit_tail(Some(run_id), 20)
            .await
            .expect("audit");
        assert!(
            audit
                .iter()
                .any(|r| r.entry.action == "history_page" && r.entry.outcome == "ok"),
            "{audit:?}"
        );
    }

    pub async fn finish(self) {
        self.grants.close_run(self.run.grant.run_id());
        self.http.shutdown().await;
    }
}

/// Decode a harness's real stdout with `decoder` and return the result
/// types in order, checking the stream's invariants on the way.
pub fn decode(
    decoder: &str,
    stdout: &str,
    exit_code: Option<i32>,
) -> Vec<harness_bridge::protocol::AgentRunResult> {
    use harness_bridge::harness::decode::{Exit, LineBuffer, ResultStream};
    let mut d = harness_bridge::harness::decode::decoder(decoder).expect("known decoder");
    let mut lines = LineBuffer::default();
    let mut stream = ResultStream::new("run-decoded");
    let mut out = Vec::new();
    // Feed in small uneven chunks, as pipes deliver them.
    for chunk in stdout.as_bytes().chunks(97) {
        for line in lines.push(chunk) {
            out.extend(stream.stamp(d.line(&line)));
        }
    }
    if let Some(line) = lines.finish() {
        out.extend(stream.stamp(d.line(&line)));
    }
    out.extend(stream.stamp(d.finish(Exit { code: exit_code })));
    let sequences: Vec<u64> = out.iter().filter_map(|r| r.sequence).collect();
    assert_eq!(
        sequences,
        (1..=out.len() as u64).collect::<Vec<_>>(),
        "sequence runs 1, 2, 3…"
    );
    for result in &out {
        assert!(
            result.check().is_ok(),
            "decoded result fails validation: {result:?}"
        );
    }
    out
}
