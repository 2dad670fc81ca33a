//! Run grants: every denial path returns its §9 code and leaves an audit row.

use harness_bridge_testkit as common;

use std::time::Duration;

use common::{RUNNER, all_permissions, context, fixture};
use harness_bridge::host::calls::{
    ArtifactMetadataCall, ArtifactReadCall, EventGetCall, HistorySearchCall, PluginStorageKeys,
    PluginStorageSet, StateGetCall, StateSetCall,
};
use harness_bridge::host::prelude::*;
use harness_bridge::host::{
    Api, EventQuery, GrantCaps, GrantPolicy, Grants, HistoryQuery, NewArtifact, NewEvent,
};
use harness_bridge::protocol::{
    AgentRunnerPermissions, ErrorCode, HistoryOperation, StateScope, StorageKind,
};
use serde_json::json;

fn page(limit: u32) -> HistoryQuery {
    HistoryQuery {
        limit,
        ..HistoryQuery::default()
    }
}

fn search(conversation_id: Option<&str>, query: &str, top_k: u32) -> HistorySearchCall {
    HistorySearchCall {
        query: query.into(),
        conversation_id: conversation_id.map(str::to_string),
        top_k,
    }
}

fn state_get(scope: StateScope, key: &str) -> StateGetCall {
    StateGetCall {
        scope,
        key: key.into(),
    }
}

fn state_set(scope: StateScope, key: &str, value: &serde_json::Value) -> StateSetCall {
    StateSetCall {
        scope,
        key: key.into(),
        value: value.clone(),
    }
}

fn storage_keys(area: StorageKind) -> PluginStorageKeys {
    assert_eq!(area, StorageKind::Plugin);
    PluginStorageKeys {}
}

fn storage_set(area: StorageKind, key: &str, value: &[u8]) -> PluginStorageSet {
    assert_eq!(area, StorageKind::Plugin);
    PluginStorageSet {
        key: key.into(),
        value: String::from_utf8(value.to_vec()).unwrap(),
        base64: false,
    }
}

fn event_get(event_id: &str) -> EventGetCall {
    EventGetCall {
        event_id: event_id.into(),
    }
}

fn artifact_read(artifact_id: &str, offset: u64, length: u64) -> ArtifactReadCall {
    ArtifactReadCall {
        artifact_id: artifact_id.into(),
        offset,
        length,
    }
}

fn artifact_metadata(artifact_id: &str) -> ArtifactMetadataCall {
    ArtifactMetadataCall {
        artifact_id: artifact_id.into(),
    }
}

async fn last_audit(f: &common::Fixture) -> harness_bridge::host::AuditEntry {
    f.store
        .audit_tail(None, 1)
        .await
        .unwrap()
        .pop()
        .expect("an audit row")
        .entry
}

/// The bridge's own keys (`external.*`: the open request, the resume
/// pointer) are read-only to a run in every scope and any case: a write or
/// a delete is `unauthorized`, audited, and changes nothing.
#[tokio::test]
async fn the_bridges_own_keys_are_read_only_to_a_run() {
    use harness_bridge::host::calls::StateDeleteCall;
    let f = fixture();
    let run = f.open("run-keys", "c1", &GrantPolicy::default());
    let scope = run.grant.scope.clone();
    f.store
        .state_set(
            &scope,
            StateScope::Conversation,
            "external.session_id",
            &json!("kept"),
        )
        .await
        .unwrap();
    let host = f.grants.authorize(run.token.expose()).await.unwrap();
    for key in [
        "external.pending_interaction",
        "external.session_id",
        "External.Session_Id",
        " external.harness",
    ] {
        for scope in [
            StateScope::Conversation,
            StateScope::Actor,
            StateScope::Runner,
        ] {
            let err = host
                .call(&state_set(scope, key, &json!({"forged": true})))
                .await
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::Unauthorized, "{key}: {err:?}");
            assert!(err.message.contains("bridge's own keys"), "{err:?}");
            let audit = last_audit(&f).await;
            assert_eq!(
                (audit.action.as_str(), audit.outcome.as_str()),
                ("state_set", "unauthorized")
            );
        }
        let err = host
            .call(&StateDeleteCall {
                scope: StateScope::Conversation,
                key: key.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Unauthorized, "{key}: {err:?}");
    }
    // Read as ever, and unchanged.
    assert_eq!(
        host.call(&state_get(StateScope::Conversation, "external.session_id"))
            .await
            .unwrap(),
        Some(json!("kept"))
    );
    // A key that only looks alike is the run's own.
    host.call(&state_set(
        StateScope::Conversation,
        "externals.notes",
        &json!(1),
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn allowed_calls_read_real_data_and_are_audited() {
    let f = fixture();
    f.say("c1", "user", "hello from c1").await;
    let run = f.open("run-1", "c1", &GrantPolicy::default());
    let host = f.grants.authorize(run.token.expose()).await.unwrap();
    let got = host.call(&page(10)).await.unwrap();
    assert_eq!(got.items[0].content.as_deref(), Some("hello from c1"));
    host.call(&state_set(
        StateScope::Conversation,
        "notes.session_id",
        &json!("s"),
    ))
    .await
    .unwrap();
    assert_eq!(
        host.call(&state_get(StateScope::Conversation, "notes.session_id"))
            .await
            .unwrap(),
        Some(json!("s"))
    );

    let rows = f.store.audit_tail(Some("run-1".into()), 10).await.unwrap();
    let actions: Vec<_> = rows
        .iter()
        .map(|r| (r.entry.action.as_str(), r.entry.outcome.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("history_page", "ok"),
            ("state_set", "ok"),
            ("state_get", "ok")
        ]
    );
    assert_eq!(rows[0].entry.runner_id, RUNNER);
    assert_eq!(rows[0].entry.resource, "conversation:c1");
    assert_eq!(rows[0].entry.scope, "conversation:c1");
    assert!(
        format!("{:?}", run.token).contains("redacted"),
        "tokens never print"
    );
}

#[tokio::test]
async fn wrong_and_closed_tokens_are_unauthorized() {
    let f = fixture();
    let err = f.grants.authorize("not-a-token").await.err().unwrap();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    let row = last_audit(&f).await;
    assert_eq!(
        (
            row.action.as_str(),
            row.outcome.as_str(),
            row.run_id.as_str()
        ),
        ("authorize", "unauthorized", "")
    );

    let run = f.open("run-2", "c1", &GrantPolicy::default());
    let host = f.grants.authorize(run.token.expose()).await.unwrap();
    assert!(f.grants.close_run("run-2"));
    // A token in hand dies at once, and so does a fresh authorization.
    let err = host.call(&page(5)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert!(err.message.contains("closed"));
    let row = last_audit(&f).await;
    assert_eq!(
        (row.run_id.as_str(), row.outcome.as_str()),
        ("run-2", "unauthorized")
    );
    let err = f.grants.authorize(run.token.expose()).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert_eq!(last_audit(&f).await.run_id, "run-2");
}

#[tokio::test]
async fn a_closed_runs_token_is_audited_at_most_once_a_second_with_a_count() {
    let f = fixture();
    let run = f.open("run-c", "c1", &GrantPolicy::default());
    assert!(f.grants.close_run("run-c"));
    let started = std::time::Instant::now();
    for _ in 0..50 {
        let err = f.grants.authorize(run.token.expose()).await.err().unwrap();
        assert_eq!(err.code, ErrorCode::Unauthorized);
        assert!(err.message.contains("closed"), "{err:?}");
    }
    let seconds = started.elapsed().as_secs();
    let rows = f.store.audit_tail(Some("run-c".into()), 100).await.unwrap();
    assert!(
        !rows.is_empty() && rows.len() as u64 <= seconds + 1,
        "{} rows in {seconds} s",
        rows.len()
    );
    assert_eq!(
        (
            rows[0].entry.action.as_str(),
            rows[0].entry.outcome.as_str()
        ),
        ("authorize", "unauthorized")
    );
    // A second later the next refusal is a row again, counting the ones
    // that had none.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    f.grants.authorize(run.token.expose()).await.err().unwrap();
    let last = last_audit(&f).await;
    assert_eq!(last.run_id, "run-c");
    let counted: u64 = f
        .store
        .audit_tail(Some("run-c".into()), 100)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            r.entry
                .detail
                .split_whitespace()
                .find_map(|w| w.parse::<u64>().ok())
                .unwrap_or(1)
        })
        .sum();
    assert_eq!(counted, 51, "every refusal is counted in some row");
}

#[tokio::test]
async fn apis_not_granted_are_refused() {
    let f = fixture();
    // Manifest ∩ binding: only history page survives.
    let binding: AgentRunnerPermissions =
        serde_json::from_value(json!({"history": ["page"]})).unwrap();
    let effective = all_permissions().intersect(&binding);
    assert_eq!(effective.history, vec![HistoryOperation::Page]);
    let mut ctx = context("run-3", "c1");
    ctx.context.available_apis.state = false;
    let run = f
        .grants
        .open_run(&ctx, RUNNER, &effective, &GrantPolicy::default())
        .unwrap();
    assert_eq!(
        run.grant.apis.iter().copied().collect::<Vec<_>>(),
        [Api::HistoryPage]
    );
    let host = f.grants.granted(run.grant.clone());

    let err = host.call(&search(None, "x", 5)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert_eq!(last_audit(&f).await.outcome, "unauthorized");
    assert_eq!(
        host.call(&state_get(StateScope::Actor, "k"))
            .await
            .unwrap_err()
            .code,
        ErrorCode::Unauthorized
    );
    assert_eq!(
        host.call(&storage_keys(StorageKind::Plugin))
            .await
            .unwrap_err()
            .code,
        ErrorCode::Unauthorized
    );
    assert_eq!(
        host.call(&event_get("e")).await.unwrap_err().code,
        ErrorCode::Unauthorized
    );
    assert_eq!(
        host.call(&artifact_read("a", 0, 1)).await.unwrap_err().code,
        ErrorCode::Unauthorized
    );
    assert!(host.call(&page(5)).await.is_ok());
}

#[tokio::test]
async fn other_conversations_are_out_of_scope() {
    let f = fixture();
    f.say("c2", "user", "secret in c2").await;
    f.store
        .append_event(NewEvent {
            event_id: "e-c2".into(),
            event_type: "message.received".into(),
            source: "platform".into(),
            conversation_id: Some("c2".into()),
            ..NewEvent::default()
        })
        .await
        .unwrap();
    let art = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                source: "runner".into(),
                conversation_id: Some("c2".into()),
                ..NewArtifact::default()
            },
            b"c2 data".to_vec(),
        )
        .await
        .unwrap();
    let run = f.open("run-4", "c1", &GrantPolicy::default());
    let host = f.grants.granted(run.grant.clone());

    let err = host
        .call(&HistoryQuery {
            conversation_id: Some("c2".into()),
            ..page(5)
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    let row = last_audit(&f).await;
    assert_eq!(
        (row.resource.as_str(), row.outcome.as_str()),
        ("conversation:c2", "unauthorized")
    );
    assert_eq!(
        host.call(&search(Some("c2"), "secret", 5))
            .await
            .unwrap_err()
            .code,
        ErrorCode::Unauthorized
    );
    // Records of other conversations read as missing: no existence oracle.
    assert_eq!(
        host.call(&event_get("e-c2")).await.unwrap_err().code,
        ErrorCode::NotFound
    );
    assert_eq!(
        host.call(&artifact_metadata(&art.artifact_id))
            .await
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
    assert_eq!(last_audit(&f).await.outcome, "not_found");

    // With a cross-conversation grant, the same calls succeed.
    let open = GrantPolicy {
        cross_conversation: true,
        ..GrantPolicy::default()
    };
    let run = f.open("run-5", "c1", &open);
    let host = f.grants.granted(run.grant.clone());
    let got = host
        .call(&HistoryQuery {
            conversation_id: Some("c2".into()),
            ..page(5)
        })
        .await
        .unwrap();
    assert_eq!(got.items[0].content.as_deref(), Some("secret in c2"));
    assert!(host.call(&event_get("e-c2")).await.is_ok());
}

#[tokio::test]
async fn caps_are_enforced() {
    let f = fixture();
    let caps = GrantCaps {
        max_state_value_bytes: 64,
        max_read_length: 8,
        max_storage_value_bytes: 4,
        ..GrantCaps::default()
    };
    let run = f.open(
        "run-6",
        "c1",
        &GrantPolicy {
            caps,
            ..GrantPolicy::default()
        },
    );
    let host = f.grants.granted(run.grant.clone());
    let art = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                source: "runner".into(),
                conversation_id: Some("c1".into()),
                ..NewArtifact::default()
            },
            b"0123456789".to_vec(),
        )
        .await
        .unwrap();

    assert_eq!(
        host.call(&page(101)).await.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        host.call(&page(0)).await.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    let big = json!("x".repeat(100));
    assert_eq!(
        host.call(&state_set(StateScope::Conversation, "k", &big))
            .await
            .unwrap_err()
            .code,
        ErrorCode::PayloadTooLarge
    );
    assert_eq!(last_audit(&f).await.outcome, "payload_too_large");
    assert_eq!(
        host.call(&artifact_read(&art.artifact_id, 0, 9))
            .await
            .unwrap_err()
            .code,
        ErrorCode::PayloadTooLarge
    );
    assert!(
        host.call(&artifact_read(&art.artifact_id, 0, 8))
            .await
            .unwrap()
            .has_more
    );
    assert_eq!(
        host.call(&storage_set(StorageKind::Plugin, "k", b"12345"))
            .await
            .unwrap_err()
            .code,
        ErrorCode::PayloadTooLarge
    );
    let long_key = "k".repeat(600);
    assert_eq!(
        host.call(&state_get(StateScope::Conversation, &long_key))
            .await
            .unwrap_err()
            .code,
        ErrorCode::PayloadTooLarge
    );
    // A search query and an event-type filter are bounded too; a NUL in a
    // query is a word break, not an FTS5 syntax error.
    let long_query = "word ".repeat(300);
    assert_eq!(
        host.call(&search(None, &long_query, 5))
            .await
            .unwrap_err()
            .code,
        ErrorCode::InvalidArgument
    );
    assert!(host.call(&search(None, "foo\u{0}bar", 5)).await.is_ok());
    let types = EventQuery {
        event_types: (0..65).map(|i| format!("type.{i}")).collect(),
        limit: 10,
        ..EventQuery::default()
    };
    assert_eq!(
        host.call(&types).await.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
}

#[tokio::test]
async fn rate_and_call_budget_are_enforced() {
    let f = fixture();
    let caps = GrantCaps {
        rate_per_second: 1.0,
        burst: 3,
        ..GrantCaps::default()
    };
    let run = f.open(
        "run-7",
        "c1",
        &GrantPolicy {
            caps,
            ..GrantPolicy::default()
        },
    );
    let host = f.grants.granted(run.grant.clone());
    for _ in 0..3 {
        host.call(&page(1)).await.unwrap();
    }
    let err = host.call(&page(1)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::RateLimited);
    assert!(err.retryable);
    assert_eq!(last_audit(&f).await.outcome, "rate_limited");

    let caps = GrantCaps {
        max_calls_per_run: 2,
        ..GrantCaps::default()
    };
    let run = f.open(
        "run-8",
        "c1",
        &GrantPolicy {
            caps,
            ..GrantPolicy::default()
        },
    );
    let host = f.grants.granted(run.grant.clone());
    host.call(&page(1)).await.unwrap();
    host.call(&page(1)).await.unwrap();
    let err = host.call(&page(1)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::RateLimited);
    assert!(err.message.contains("budget"));
}

#[tokio::test]
async fn deadline_is_enforced() {
    let f = fixture();
    let mut ctx = context("run-9", "c1");
    ctx.runtime.deadline_at = Some(1.0); // long past
    let run = f
        .grants
        .open_run(&ctx, RUNNER, &all_permissions(), &GrantPolicy::default())
        .unwrap();
    let host = f.grants.granted(run.grant.clone());
    assert_eq!(
        host.call(&page(1)).await.unwrap_err().code,
        ErrorCode::DeadlineExceeded
    );
    assert_eq!(last_audit(&f).await.outcome, "deadline_exceeded");

    let caps = GrantCaps {
        default_run_timeout: Duration::from_millis(50),
        ..GrantCaps::default()
    };
    let run = f.open(
        "run-10",
        "c1",
        &GrantPolicy {
            caps,
            ..GrantPolicy::default()
        },
    );
    let host = f.grants.granted(run.grant.clone());
    assert!(host.call(&page(1)).await.is_ok());
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        host.call(&page(1)).await.unwrap_err().code,
        ErrorCode::DeadlineExceeded
    );
}

#[tokio::test]
async fn a_run_id_cannot_be_opened_twice_while_open() {
    let f = fixture();
    let _run = f.open("run-11", "c1", &GrantPolicy::default());
    let again = f.grants.open_run(
        &context("run-11", "c1"),
        RUNNER,
        &all_permissions(),
        &GrantPolicy::default(),
    );
    assert_eq!(again.unwrap_err().code, ErrorCode::InvalidArgument);
    f.grants.close_run("run-11");
    assert!(
        f.grants
            .open_run(
                &context("run-11", "c1"),
                RUNNER,
                &all_permissions(),
                &GrantPolicy::default()
            )
            .is_ok()
    );
}

#[tokio::test]
async fn audit_rows_are_written_before_the_store_closes() {
    let dir = common::tempdir();
    {
        let store = harness_bridge::host::sqlite::SqliteHost::open(dir.path()).unwrap();
        let grants = harness_bridge::host::Grants::new(std::sync::Arc::new(store));
        let run = grants
            .open_run(
                &context("run-a", "c1"),
                RUNNER,
                &all_permissions(),
                &GrantPolicy::default(),
            )
            .unwrap();
        let host = grants.granted(run.grant.clone());
        for _ in 0..50 {
            host.call(&page(1)).await.unwrap();
        }
    }
    let store = harness_bridge::host::sqlite::SqliteHost::open(dir.path()).unwrap();
    let rows = store.audit_tail(Some("run-a".into()), 100).await.unwrap();
    assert_eq!(rows.len(), 50);
    assert!(rows.windows(2).all(|w| w[0].id < w[1].id));
}

/// Host tools and knowledge bases are granted per operation: the
/// manifest permission and a resource of the run that allows it (an empty
/// `operations` allows every one). The embedded host has no tools, so a
/// run there is never granted them, whatever the context says.
#[tokio::test]
async fn tools_and_knowledge_need_the_permission_and_a_resource() {
    use harness_bridge::host::allowed_apis;
    let mut ctx = context("run-tk", "c1");
    ctx.resources = serde_json::from_value(json!({
        "tools": [{"tool_name": "weather", "operations": ["call"]}],
        "knowledge_bases": [{"kb_id": "kb-1", "operations": []}],
    }))
    .unwrap();
    let tool_and_kb = [
        Api::ToolDetail,
        Api::ToolCall,
        Api::KnowledgeList,
        Api::KnowledgeRetrieve,
    ];
    let granted = |perms: &AgentRunnerPermissions, ctx| {
        let apis = allowed_apis(ctx, perms);
        tool_and_kb
            .into_iter()
            .filter(|api| apis.contains(api))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        granted(&all_permissions(), &ctx),
        [Api::ToolCall, Api::KnowledgeList, Api::KnowledgeRetrieve]
    );
    let narrow: AgentRunnerPermissions =
        serde_json::from_value(json!({"knowledge_bases": ["retrieve"]})).unwrap();
    assert_eq!(granted(&narrow, &ctx), [Api::KnowledgeRetrieve]);
    let bare = context("run-tk2", "c1");
    assert!(granted(&all_permissions(), &bare).is_empty());

    let f = fixture();
    let run = f
        .grants
        .open_run(&ctx, RUNNER, &all_permissions(), &GrantPolicy::default())
        .unwrap();
    assert!(
        !run.grant.apis.contains(&Api::ToolCall),
        "{:?}",
        run.grant.apis
    );
}

/// A live harness keeps the token of the turn that started it; each later
/// turn lends it its own grant. Between turns the token names a closed run:
/// every call is refused and audited against that run.
#[tokio::test]
async fn a_lent_token_serves_each_turn_and_nothing_between_them() {
    let f = fixture();
    let first = f.open("live-1", "c1", &GrantPolicy::default());
    let session_token = first.token.clone();
    assert_eq!(
        f.grants
            .authorize(session_token.expose())
            .await
            .unwrap()
            .grant()
            .run_id(),
        "live-1"
    );
    assert!(f.grants.close_run("live-1"));
    let err = f
        .grants
        .authorize(session_token.expose())
        .await
        .err()
        .unwrap();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    let row = last_audit(&f).await;
    assert_eq!(
        (row.run_id.as_str(), row.outcome.as_str()),
        ("live-1", "unauthorized")
    );

    // The next turn lends the process its grant: the calls are that turn's.
    let second = f.open("live-2", "c1", &GrantPolicy::default());
    f.grants.lend(&session_token, second.grant.clone());
    let host = f.grants.authorize(session_token.expose()).await.unwrap();
    assert_eq!(host.grant().run_id(), "live-2");
    host.call(&page(5)).await.unwrap();
    assert!(f.grants.close_run("live-2"));
    let err = f
        .grants
        .authorize(session_token.expose())
        .await
        .err()
        .unwrap();
    assert!(
        err.message.contains("live-2") && err.message.contains("closed"),
        "{err:?}"
    );
    // The turn's own token died with it too.
    assert!(f.grants.authorize(second.token.expose()).await.is_err());
}

/// A harness behind its door holds a stand-in made of its run's token:
/// while the run is open the gateway turns it into the operator's key on
/// the way to the model; once the run has closed, the same call (and the
/// same token at the door's proxy) reaches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_read_during_a_turn_is_dead_at_the_door_after_it() {
    use harness_bridge::door::{Gateway, Keeper, Proxy};
    use harness_bridge::harness::Adapters;
    use harness_bridge::harness::DoorKeeper as _;
    use harness_bridge::harness::cage::Egress;
    use std::sync::{Arc, Mutex};

    // The model: records the key each call came with.
    let keys = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = keys.clone();
    let model = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let key = headers
                    .get("x-api-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                seen.lock().unwrap().push(key);
                "{}"
            }
        }),
    );
    let model_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let model_url = format!("http://{}", model_listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(model_listener, model).await });

    let dir = common::tempdir();
    let store = harness_bridge::host::sqlite::SqliteHost::open(dir.path()).unwrap();
    let grants = Arc::new(Grants::new(Arc::new(store)));
    let run = grants
        .open_run(
            &context("door-run", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let token = run.token.expose().to_string();
    let mut env = std::collections::BTreeMap::from([
        (
            "ANTHROPIC_API_KEY".to_string(),
            "sk-the-operators".to_string(),
        ),
        ("ANTHROPIC_BASE_URL".to_string(), model_url),
    ]);
    let spec = Adapters::builtin().find("claude-code").unwrap();
    let (gateway, _) = Gateway::prepare(spec, &[], &mut env, &token, grants.clone());
    let stand_in = env["ANTHROPIC_API_KEY"].clone();
    assert_ne!(stand_in, "sk-the-operators");
    let allow_all = Egress {
        allow: vec!["*".into()],
        deny: Vec::new(),
        ..Default::default()
    };
    let proxy = Proxy::new(allow_all, &token, grants.clone());
    let door = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = door.local_addr().unwrap();
    let _open = Keeper::new(axum::Router::new(), gateway, proxy).open(door);

    let call = || {
        reqwest::Client::new()
            .post(format!("http://{at}/model/anthropic/v1/messages"))
            .header("x-api-key", &stand_in)
            .body("{}")
            .send()
    };
    assert_eq!(call().await.unwrap().status(), 200);
    assert_eq!(*keys.lock().unwrap(), ["sk-the-operators"]);

    assert!(grants.close_run("door-run"));
    let after = call().await.unwrap();
    assert_eq!(after.status(), 401);
    let said = after.text().await.unwrap();
    assert!(said.contains("only during a turn"), "{said}");
    assert_eq!(
        keys.lock().unwrap().len(),
        1,
        "the model heard nothing more"
    );
    // Nor does the door's proxy take it anywhere.
    let mut tunnel = tokio::net::TcpStream::connect(at).await.unwrap();
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    tunnel
        .write_all(b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0u8; 512];
    let n = tunnel.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("between turns"), "{answer}");
}
