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
