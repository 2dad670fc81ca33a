//! What is the embedded SQLite store's own: its folder (artifact files,
//! reopening with the cursor secret, several processes on one file) and
//! its migrations. The contract every backend keeps is `host_conformance.rs`.

use harness_bridge_testkit as common;

use common::{RUNNER, fixture};
use harness_bridge::host::prelude::*;
use harness_bridge::host::{HistoryQuery, NewArtifact, NewTranscriptItem, RunScope};

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

/// Contents are files named by their digest under the store, whatever the
/// artifact's name (the contract the backends share is in
/// `host_conformance.rs`).
#[tokio::test]
async fn artifact_contents_are_files_named_by_digest() {
    let f = fixture();
    let content = b"0123456789abcdef".repeat(10);
    let meta = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                name: Some("../../etc/passwd".into()),
                source: "runner".into(),
                ..NewArtifact::default()
            },
            content.clone(),
        )
        .await
        .unwrap();
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&content))
    };
    assert_eq!(meta.sha256.as_deref(), Some(sha.as_str()));
    let file = f.store.dir().join("artifacts").join(&sha[..2]).join(&sha);
    assert_eq!(std::fs::read(file).unwrap(), content);
}

/// A store a newer build migrated further is refused with what to do,
/// not opened and guessed at; one this build knows opens as it was.
#[tokio::test]
async fn a_store_from_a_newer_build_is_refused() {
    let dir = common::tempdir();
    drop(harness_bridge::host::sqlite::SqliteHost::open(dir.path()).unwrap());
    let db = rusqlite::Connection::open(dir.path().join("host.db")).unwrap();
    let known: i64 = db
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(known, harness_bridge::host::sqlite::MIGRATIONS.len() as i64);
    db.pragma_update(None, "user_version", known + 1).unwrap();
    drop(db);
    let err = harness_bridge::host::sqlite::SqliteHost::open(dir.path())
        .err()
        .expect("a newer store is refused")
        .to_string();
    assert!(
        err.contains(&format!("schema version {}", known + 1)),
        "{err}"
    );
    assert!(err.contains("upgrade harness-bridge"), "{err}");
}

#[tokio::test]
async fn store_reopens_with_its_data_and_cursor_secret() {
    let dir = common::tempdir();
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
    let dir = common::tempdir();
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
