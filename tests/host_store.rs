//! The embedded SQLite host: exact paging, full-text search, artifacts,
//! state and storage, all on a real store file.

mod common;

use base64::Engine as _;
use common::{RUNNER, fixture};
use harness_bridge::host::{
    Direction, EventQuery, HistoryQuery, HostApi, NewArtifact, NewEvent, NewTranscriptItem,
    RunScope,
};
use harness_bridge::protocol::{ErrorCode, StateScope, StorageKind};
use serde_json::json;

fn scope(conversation: &str) -> RunScope {
    RunScope {
        run_id: "run".into(),
        runner_id: RUNNER.into(),
        conversation_id: Some(conversation.into()),
        actor_id: Some("user-1".into()),
        workspace_id: Some("ws-1".into()),
        ..RunScope::default()
    }
}

/// Bulk-load `n` items into one conversation, in one transaction-free loop
/// through the public API (each append is its own transaction).
async fn load(store: &harness_bridge::host::sqlite::SqliteHost, conversation: &str, n: usize) {
    for i in 1..=n {
        store
            .append_transcript(NewTranscriptItem {
                event_id: format!("ev-{i}"),
                conversation_id: conversation.into(),
                role: if i % 2 == 0 { "assistant" } else { "user" }.into(),
                content: Some(format!("message number {i}")),
                ..NewTranscriptItem::default()
            })
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_is_exact_over_100k_items_both_ways() {
    const N: i64 = 100_000;
    let f = fixture();
    load(&f.store, "big", N as usize).await;
    load(&f.store, "small", 3).await;
    let s = scope("big");

    // Backward from the newest, in pages of an odd size.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = f
            .store
            .history_page(
                &s,
                &HistoryQuery {
                    before_cursor: cursor.clone(),
                    limit: 97,
                    ..HistoryQuery::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(page.total_count, Some(N as u64));
        let seqs: Vec<i64> = page.items.iter().map(|i| i.seq.unwrap()).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "items come oldest first"
        );
        seen.extend(seqs.into_iter().rev());
        if !page.has_more {
            assert!(page.next_cursor.is_none());
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(
        seen,
        (1..=N).rev().collect::<Vec<_>>(),
        "no gaps, no duplicates"
    );

    // Forward from the start.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = f
            .store
            .history_page(
                &s,
                &HistoryQuery {
                    after_cursor: cursor.clone(),
                    limit: 100,
                    direction: Direction::Forward,
                    ..HistoryQuery::default()
                },
            )
            .await
            .unwrap();
        seen.extend(page.items.iter().map(|i| i.seq.unwrap()));
        if !page.has_more {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(seen, (1..=N).collect::<Vec<_>>());

    // prev_cursor of a backward page goes forward to exactly the next items.
    let latest = f
        .store
        .history_page(
            &s,
            &HistoryQuery {
                limit: 10,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    let older = f
        .store
        .history_page(
            &s,
            &HistoryQuery {
                before_cursor: latest.next_cursor.clone(),
                limit: 10,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    let back = f
        .store
        .history_page(
            &s,
            &HistoryQuery {
                after_cursor: older.prev_cursor.clone(),
                limit: 10,
                direction: Direction::Forward,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(back.items, latest.items);

    // A cursor from another conversation, or a forged one, is refused.
    let small = f
        .store
        .history_page(
            &scope("small"),
            &HistoryQuery {
                limit: 1,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    let foreign = small.items[0].cursor.clone();
    let err = f
        .store
        .history_page(
            &s,
            &HistoryQuery {
                before_cursor: foreign,
                limit: 5,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    let err = f
        .store
        .history_page(
            &s,
            &HistoryQuery {
                before_cursor: Some("500".into()),
                limit: 5,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
}

#[tokio::test]
async fn search_ranks_within_the_conversation_only() {
    let f = fixture();
    f.say("c1", "user", "the deploy failed with a timeout")
        .await;
    f.say("c1", "assistant", "I am deploying it again").await;
    f.say("c1", "user", "部署失败了，请检查日志").await;
    f.say("c2", "user", "deploy secrets of another chat").await;
    let s = scope("c1");

    let hits = f
        .store
        .history_search(&s, None, "deploy", 10)
        .await
        .unwrap();
    let texts: Vec<_> = hits
        .items
        .iter()
        .map(|i| i.content.clone().unwrap())
        .collect();
    // Porter stemming: "deploy" also finds "deploying"; never c2's row.
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts.iter().all(|t| !t.contains("another chat")));
    assert_eq!(hits.query, "deploy");
    assert!(hits.items[0].cursor.is_some());

    let hits = f
        .store
        .history_search(&s, None, "部署 日志", 10)
        .await
        .unwrap();
    assert_eq!(hits.items.len(), 1);
    assert!(
        hits.items[0]
            .content
            .as_deref()
            .unwrap()
            .starts_with("部署")
    );

    // Operators in the query are plain words, not FTS5 syntax: no row has
    // all of "timeout OR NOT", so the one with some of them comes back.
    let hits = f
        .store
        .history_search(&s, None, "timeout OR NOT \"x", 10)
        .await
        .unwrap();
    assert_eq!(hits.items.len(), 1);
    assert!(
        hits.items[0]
            .content
            .as_deref()
            .unwrap()
            .contains("timeout")
    );

    // Ranking: rows with every word first, then rows with some; newest first.
    f.say("c1", "user", "deploy again please").await;
    let hits = f
        .store
        .history_search(&s, None, "deploy timeout", 10)
        .await
        .unwrap();
    let texts: Vec<_> = hits
        .items
        .iter()
        .map(|i| i.content.clone().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "the deploy failed with a timeout",
            "deploy again please",
            "I am deploying it again"
        ]
    );
    let hits = f
        .store
        .history_search(&s, None, "deploy timeout", 2)
        .await
        .unwrap();
    assert_eq!(hits.items.len(), 2);
}

#[tokio::test]
async fn events_page_and_filter_and_append_is_idempotent() {
    let f = fixture();
    for (i, kind) in ["message.received", "member.joined", "message.received"]
        .iter()
        .enumerate()
    {
        let event = NewEvent {
            event_id: format!("e{i}"),
            event_type: kind.to_string(),
            source: "platform".into(),
            conversation_id: Some("c1".into()),
            input_summary: Some(format!("summary {i}")),
            ..NewEvent::default()
        };
        let first = f.store.append_event(event.clone()).await.unwrap();
        let again = f.store.append_event(event).await.unwrap();
        assert_eq!(first, again);
    }
    let s = scope("c1");
    let page = f
        .store
        .event_page(
            &s,
            &EventQuery {
                limit: 10,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 3);
    assert_eq!(page.total_count, Some(3));
    let page = f
        .store
        .event_page(
            &s,
            &EventQuery {
                limit: 10,
                event_types: vec!["member.joined".into()],
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].event_id, "e1");
    let got = f.store.event_get(&s, "e2").await.unwrap();
    assert_eq!(got.input_summary.as_deref(), Some("summary 2"));
    assert_eq!(
        f.store.event_get(&s, "nope").await.unwrap_err().code,
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn artifacts_store_content_by_digest_and_read_in_ranges() {
    let f = fixture();
    let content = b"0123456789abcdef".repeat(10);
    let meta = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                name: Some("../../etc/passwd".into()),
                mime_type: Some("text/plain".into()),
                source: "runner".into(),
                conversation_id: Some("c1".into()),
                ..NewArtifact::default()
            },
            content.clone(),
        )
        .await
        .unwrap();
    assert_eq!(meta.size_bytes, Some(160));
    let expected_sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&content))
    };
    assert_eq!(meta.sha256.as_deref(), Some(expected_sha.as_str()));
    // The file is named by digest under the store, whatever the artifact's name.
    assert!(
        f.store
            .dir()
            .join("artifacts")
            .join(&expected_sha[..2])
            .join(&expected_sha)
            .is_file()
    );

    let s = scope("c1");
    let id = meta.artifact_id.clone();
    let part = f.store.artifact_read(&s, &id, 150, 64).await.unwrap();
    assert_eq!(part.length, Some(10));
    assert!(!part.has_more);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(part.content_base64.unwrap())
        .unwrap();
    assert_eq!(bytes, &content[150..]);
    let head = f.store.artifact_read(&s, &id, 0, 16).await.unwrap();
    assert!(head.has_more);
    assert_eq!(
        f.store
            .artifact_read(&s, &id, 161, 1)
            .await
            .unwrap_err()
            .code,
        ErrorCode::InvalidArgument
    );

    let expired = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                source: "runner".into(),
                expires_at: Some(1),
                ..NewArtifact::default()
            },
            b"old".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(
        f.store
            .artifact_metadata(&s, &expired.artifact_id)
            .await
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn state_is_scoped_by_runner_and_scope_id() {
    let f = fixture();
    let a = scope("c1");
    let mut other_runner = a.clone();
    other_runner.runner_id = "plugin:x/y/z".into();
    let mut other_actor = a.clone();
    other_actor.actor_id = Some("user-2".into());

    f.store
        .state_set(
            &a,
            StateScope::Conversation,
            "external.session_id",
            &json!("s-1"),
        )
        .await
        .unwrap();
    f.store
        .state_set(
            &a,
            StateScope::Conversation,
            "external.harness",
            &json!("claude-code"),
        )
        .await
        .unwrap();
    f.store
        .state_set(&a, StateScope::Actor, "lang", &json!({"pref": "en"}))
        .await
        .unwrap();
    assert_eq!(
        f.store
            .state_get(&a, StateScope::Conversation, "external.session_id")
            .await
            .unwrap(),
        Some(json!("s-1"))
    );
    assert_eq!(
        f.store
            .state_get(
                &other_runner,
                StateScope::Conversation,
                "external.session_id"
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        f.store
            .state_get(&other_actor, StateScope::Actor, "lang")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        f.store
            .state_get(
                &scope("c2"),
                StateScope::Conversation,
                "external.session_id"
            )
            .await
            .unwrap(),
        None
    );

    let listed = f
        .store
        .state_list(&a, StateScope::Conversation, Some("external."), 10)
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["external.harness", "external.session_id"]
    );
    assert!(
        f.store
            .state_delete(&a, StateScope::Conversation, "external.harness")
            .await
            .unwrap()
    );
    assert!(
        !f.store
            .state_delete(&a, StateScope::Conversation, "external.harness")
            .await
            .unwrap()
    );

    // Storage: plugin storage is shared by the plugin's runners; workspace by workspace.
    f.store
        .storage_set(&a, StorageKind::Plugin, "blob", &[0, 159, 146, 150])
        .await
        .unwrap();
    let mut sibling = a.clone();
    sibling.runner_id = "plugin:langbot/harness-bridge/codex".into();
    assert_eq!(
        f.store
            .storage_get(&sibling, StorageKind::Plugin, "blob")
            .await
            .unwrap(),
        Some(vec![0, 159, 146, 150])
    );
    assert_eq!(
        f.store
            .storage_get(&other_runner, StorageKind::Plugin, "blob")
            .await
            .unwrap(),
        None
    );
    f.store
        .storage_set(&a, StorageKind::Workspace, "w", b"1")
        .await
        .unwrap();
    assert_eq!(
        f.store
            .storage_keys(&a, StorageKind::Workspace)
            .await
            .unwrap(),
        ["w"]
    );
    assert!(
        f.store
            .storage_delete(&a, StorageKind::Workspace, "w")
            .await
            .unwrap()
    );
    assert!(
        f.store
            .storage_keys(&a, StorageKind::Workspace)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn store_reopens_with_its_data_and_cursor_secret() {
    let dir = tempfile::tempdir().unwrap();
    let cursor = {
        let store = harness_bridge::host::sqlite::SqliteHost::open(dir.path()).unwrap();
        load(&store, "c1", 5).await;
        let page = store
            .history_page(
                &scope("c1"),
                &HistoryQuery {
                    limit: 2,
                    ..HistoryQuery::default()
                },
            )
            .await
            .unwrap();
        page.next_cursor.unwrap()
    };
    let store = harness_bridge::host::sqlite::SqliteHost::open(dir.path()).unwrap();
    let page = store
        .history_page(
            &scope("c1"),
            &HistoryQuery {
                before_cursor: Some(cursor),
                limit: 10,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.seq.unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

/// Two stores on one folder (two processes: a `serve` and a `run`, a
/// bridge and `host history`) writing at once all succeed: each waits for
/// the other's write lock rather than failing with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_folder_never_find_it_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let path = path.clone();
            tokio::spawn(async move {
                let store = harness_bridge::host::sqlite::SqliteHost::open(&path)
                    .unwrap_or_else(|e| panic!("open {w}: {e}"));
                for i in 0..150 {
                    store
                        .append_transcript(NewTranscriptItem {
                            event_id: format!("ev-{w}-{i}"),
                            conversation_id: "busy".into(),
                            role: "user".into(),
                            content: Some(format!("message {w} {i}")),
                            ..NewTranscriptItem::default()
                        })
                        .await
                        .unwrap_or_else(|e| panic!("append {w}/{i}: {e}"));
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let store = harness_bridge::host::sqlite::SqliteHost::open(&path).unwrap();
    let page = store
        .history_page(
            &scope("busy"),
            &HistoryQuery {
                limit: 100,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 100);
}
