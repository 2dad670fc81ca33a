//! What a test starts from: a run's context (every pull API opened), the
//! permissions the bridge's runners request, a store with its grants, and
//! the transcript line ([`DECISION`]) the end-to-end tests expect a
//! harness to fetch.

use std::sync::Arc;

use harness_bridge::host::prelude::*;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants, NewTranscriptItem, OpenRun};
use harness_bridge::protocol::{AgentRunContext, AgentRunnerPermissions};
use serde_json::json;

pub const RUNNER: &str = "plugin:langbot/harness-bridge/claude-code";

/// A run that may ask the person anything: every tool is offered.
pub const ALL_ASKING: harness_bridge::interaction::Asking = harness_bridge::interaction::Asking {
    questions: true,
    approvals: true,
    publish: true,
};

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
    harness_bridge::harness::discovery(harness_bridge::harness::Adapters::builtin()).runners[0]
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
    let dir = crate::tempdir();
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

/// The transcript line the end-to-end tests expect a harness to fetch.
pub const DECISION: &str = "DECISION: we ship the release on Friday";

/// Put [`DECISION`] into `conversation`'s history in the store at `data`.
pub async fn seed_decision(data: &std::path::Path, conversation: &str) {
    let store = SqliteHost::open(data).expect("store opens");
    store
        .append_transcript(NewTranscriptItem {
            event_id: "old".into(),
            conversation_id: conversation.into(),
            role: "user".into(),
            content: Some(DECISION.into()),
            ..NewTranscriptItem::default()
        })
        .await
        .expect("seed transcript");
}

/// A conversation's transcript in the store at `data`, as `role: text`.
pub async fn transcript(data: &std::path::Path, conversation: &str) -> Vec<String> {
    let store = SqliteHost::open(data).expect("store opens");
    let history = store
        .conversation_history(conversation, None, 50)
        .await
        .expect("history");
    history
        .items
        .iter()
        .map(|i| format!("{}: {}", i.role, i.content.clone().unwrap_or_default()))
        .collect()
}

/// A 1×1 PNG, base64: what the tests' harnesses write to their outbox as an
/// image (under a name that does not say so, where the test wants it
/// recognised by its content).
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
