//! The host store's contract, on every backend: the same checks run
//! against the embedded SQLite store and against PostgreSQL (a throwaway
//! server this binary starts on 127.0.0.1, a database per test) — exact
//! paging both ways (transcript and events), cursors tied to their
//! conversation and log, another conversation refused through a grant
//! unless its policy allows it, threads as streams of their own, search
//! ranking with stemming and CJK words, artifacts read in ranges, state
//! (every scope) and storage scopes and deletes, and two handles on one
//! store (two processes, or two bridge instances) agreeing on numbering
//! and cursors; and a PostgreSQL schema from a newer build refused.

use harness_bridge_testkit as common;

use std::sync::Arc;

use base64::Engine as _;
use common::RUNNER;
use harness_bridge::host::budget::{Admission, Limit, Limits, Per, Subject};
use harness_bridge::host::postgres::PgHost;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::store::StoreAt;
use harness_bridge::host::usage::{RunListQuery, UsageBy, UsageQuery, UsageRecord};
use harness_bridge::host::{
    Direction, EventQuery, HistoryQuery, HostApi, NewArtifact, NewEvent, NewTranscriptItem,
    RunScope,
};
use harness_bridge::protocol::{ErrorCode, StateScope, StorageKind};
use serde_json::{Value, json};

/// One store under test, which can be opened again (as a second process
/// or bridge instance would).
enum Backend {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl Backend {
    async fn sqlite() -> Self {
        Backend::Sqlite(common::tempdir())
    }

    async fn postgres() -> Self {
        Backend::Postgres(common::pg::database().await.url)
    }

    /// A new handle on the store.
    async fn open(&self) -> Arc<dyn HostApi> {
        match self {
            Backend::Sqlite(dir) => Arc::new(SqliteHost::open(dir.path()).expect("store opens")),
            Backend::Postgres(url) => Arc::new(PgHost::connect(url).await.expect("store connects")),
        }
    }

    /// The store as the `host` commands open it.
    async fn store(&self) -> harness_bridge::host::store::Store {
        let at = match self {
            Backend::Sqlite(dir) => StoreAt::Folder(dir.path().to_path_buf()),
            Backend::Postgres(url) => StoreAt::Postgres(url.clone()),
        };
        harness_bridge::host::store::Store::open(&at)
            .await
            .expect("store opens")
    }

    /// Items for the paging check: the embedded store takes 100k appends
    /// in seconds; a server round trip per append makes that minutes, and
    /// the rules under test do not change with size.
    fn paging_items(&self) -> usize {
        match self {
            Backend::Sqlite(_) => 100_000,
            Backend::Postgres(_) => 3_000,
        }
    }
}

/// Each check, once per backend.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Backend::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
                async fn $check() {
                    super::$check(&super::Backend::postgres().await).await;
                }
            )*
        }
    };
}

conformance!(
    usage_is_kept_once_per_run_and_summed_by_what_is_asked,
    turns_are_admitted_exactly_up_to_each_limit_through_two_handles,
    paging_is_exact_both_ways,
    search_ranks_within_the_conversation_only,
    events_page_and_filter_and_append_is_idempotent,
    event_pages_are_exact_both_ways,
    another_conversation_is_refused_unless_the_grant_allows_it,
    a_thread_is_a_stream_of_its_own,
    artifacts_are_read_in_ranges,
    state_and_storage_are_scoped,
    subject_and_runner_state_and_storage_deletes_are_scoped,
    caps_hold_through_a_grant,
    two_handles_number_one_conversation_and_share_cursors,
);

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

async fn say(store: &dyn HostApi, conversation: &str, role: &str, text: &str) {
    store
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

/// Load `n` items into one conversation through the public API (each
/// append its own transaction).
async fn load(store: &dyn HostApi, conversation: &str, n: usize) {
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

/// A turn rate and a day's tokens, per person, held exactly while two
/// handles on the store (two processes, or two instances) admit turns at
/// once: of 12 turns by one person under a rate of 5, exactly 5 start;
/// another person goes on; a person whose runs today reached their tokens
/// is refused until the day ends; a run admitted again counts once.
async fn turns_are_admitted_exactly_up_to_each_limit_through_two_handles(backend: &Backend) {
    let (a, b) = (backend.open().await, backend.open().await);
    let now = harness_bridge::host::now_ms();
    let admission = |run: usize, actor: &str, limits: &Limits| Admission {
        run_id: format!("run-{actor}-{run}"),
        now_ms: now,
        subjects: vec![Subject {
            per: Per::Actor,
            id: actor.into(),
            limits: limits.clone(),
        }],
    };
    let rate = Limits {
        turns_per_minute: Some(5),
        ..Limits::default()
    };
    let tries = (0..12).map(|i| {
        let host = if i % 2 == 0 { a.clone() } else { b.clone() };
        let admission = admission(i, "ann", &rate);
        tokio::spawn(async move { host.admit_run(admission).await.expect("admits").refused })
    });
    let mut admitted = 0;
    for outcome in futures::future::join_all(tries).await {
        match outcome.expect("joins") {
            None => admitted += 1,
            Some(hit) => {
                assert_eq!(
                    (hit.per, hit.limit, hit.allowed),
                    (Per::Actor, Limit::TurnsPerMinute, 5.0)
                );
                assert!(
                    hit.resets_ms > now && hit.resets_ms <= now + 60_000,
                    "{hit:?}"
                );
            }
        }
    }
    assert_eq!(admitted, 5, "exactly the rate's turns start");
    assert_eq!(
        a.admit_run(admission(0, "bob", &rate))
            .await
            .unwrap()
            .refused,
        None,
        "another person goes on"
    );
    assert_eq!(
        b.admit_run(admission(0, "bob", &rate))
            .await
            .unwrap()
            .refused,
        None,
        "the same run admitted again is counted once"
    );
    for i in 1..5 {
        assert_eq!(
            a.admit_run(admission(i, "bob", &rate))
                .await
                .unwrap()
                .refused,
            None,
            "bob's turn {i}"
        );
    }
    assert!(
        a.admit_run(admission(9, "bob", &rate))
            .await
            .unwrap()
            .refused
            .is_some(),
        "bob's sixth turn"
    );

    let tokens = Limits {
        tokens_per_day: Some(1000),
        ..Limits::default()
    };
    let spent = |run: &str, ended_ms: i64, input: u64| UsageRecord {
        run_id: run.into(),
        actor_id: Some("cy".into()),
        harness: "claude-code".into(),
        started_ms: ended_ms - 10,
        ended_ms,
        outcome: "completed".into(),
        input_tokens: input,
        output_tokens: 100,
        ..UsageRecord::default()
    };
    a.record_usage(spent("yesterday", now - 86_400_000, 5_000))
        .await
        .unwrap();
    a.record_usage(spent("today-1", now - 5, 400))
        .await
        .unwrap();
    // Recorded again (a retried write): kept once, counted once.
    b.record_usage(spent("today-1", now - 5, 400))
        .await
        .unwrap();
    assert_eq!(
        b.admit_run(admission(1, "cy", &tokens))
            .await
            .unwrap()
            .refused,
        None,
        "500 of 1,000"
    );
    a.record_usage(spent("today-2", now - 1, 400))
        .await
        .unwrap();
    let hit = b
        .admit_run(admission(2, "cy", &tokens))
        .await
        .unwrap()
        .refused
        .expect("1,000 of 1,000 tokens today");
    assert_eq!(
        (hit.limit, hit.used, hit.allowed),
        (Limit::TokensPerDay, 1000.0, 1000.0)
    );
    assert_eq!(hit.resets_ms % 86_400_000, 0, "at midnight UTC");
    assert!(hit.resets_ms > now);
}

/// One ledger row per run (a run recorded again keeps its first row),
/// summed by actor, harness or day, filtered by actor and time.
async fn usage_is_kept_once_per_run_and_summed_by_what_is_asked(backend: &Backend) {
    let host = backend.open().await;
    const DAY: i64 = 86_400_000;
    let run = |id: &str, actor: &str, harness: &str, day: i64, tokens: u64, cost: Option<f64>| {
        UsageRecord {
            run_id: id.into(),
            actor_id: Some(actor.into()),
            conversation_id: Some(format!("chat-{actor}")),
            bot_id: Some(format!("bot-{harness}")),
            harness: harness.into(),
            started_ms: day * DAY,
            ended_ms: day * DAY + 1000,
            outcome: if tokens == 0 { "failed" } else { "completed" }.into(),
            input_tokens: tokens,
            output_tokens: tokens / 10,
            cache_read_tokens: 1,
            cost_usd: cost,
            ..UsageRecord::default()
        }
    };
    for row in [
        run("r1", "ann", "claude-code", 20_000, 100, Some(0.25)),
        run("r2", "ann", "claude-code", 20_001, 0, None),
        run("r3", "bob", "codex", 20_001, 50, None),
        run("r1", "ann", "claude-code", 20_001, 999, Some(9.0)),
    ] {
        host.record_usage(row).await.unwrap();
    }
    let store = backend.store().await;
    let sum = |by, actor: Option<&str>, since_ms| {
        store.usage_totals(UsageQuery {
            by,
            since_ms,
            actor: actor.map(str::to_string),
            conversation: None,
            bot: None,
            harness: None,
        })
    };
    let by_actor = sum(UsageBy::Actor, None, None).await.unwrap();
    let ann = by_actor.iter().find(|t| t.key == "ann").unwrap();
    assert_eq!(
        (
            ann.runs,
            ann.failed,
            ann.input_tokens,
            ann.output_tokens,
            ann.cache_read_tokens
        ),
        (2, 1, 100, 10, 2),
        "{ann:?}"
    );
    assert_eq!(ann.cost_usd, Some(0.25));
    let bob = by_actor.iter().find(|t| t.key == "bob").unwrap();
    assert_eq!(
        (bob.runs, bob.input_tokens, bob.cost_usd),
        (1, 50, None),
        "{bob:?}"
    );
    let by_day = sum(UsageBy::Day, None, None).await.unwrap();
    let days: Vec<(&str, u64)> = by_day.iter().map(|t| (t.key.as_str(), t.runs)).collect();
    assert_eq!(days, [("2024-10-05", 2), ("2024-10-04", 1)], "latest first");
    let harness = sum(UsageBy::Harness, Some("ann"), Some(20_001 * DAY))
        .await
        .unwrap();
    assert_eq!(harness.len(), 1, "{harness:?}");
    assert_eq!(
        (harness[0].key.as_str(), harness[0].runs),
        ("claude-code", 1)
    );
    // A harness's conversations (the console's filter), and one run's
    // row by its id (the run view).
    let codex = store
        .usage_totals(UsageQuery {
            by: UsageBy::Conversation,
            harness: Some("codex".into()),
            ..UsageQuery::default()
        })
        .await
        .unwrap();
    let keys: Vec<&str> = codex.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["chat-bob"]);
    // A bot's runs (what `/usage` reads for a bot's budget).
    let bot = store
        .usage_totals(UsageQuery {
            by: UsageBy::Actor,
            bot: Some("bot-claude-code".into()),
            ..UsageQuery::default()
        })
        .await
        .unwrap();
    let keys: Vec<(&str, u64)> = bot.iter().map(|t| (t.key.as_str(), t.runs)).collect();
    assert_eq!(keys, [("ann", 2)], "{bot:?}");
    let one = host
        .usage_runs(RunListQuery {
            run_id: Some("r1".into()),
            limit: 5,
            ..RunListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(
        (one[0].input_tokens, one[0].actor_id.as_deref()),
        (100, Some("ann"))
    );
}

#[allow(non_snake_case)]
async fn paging_is_exact_both_ways(backend: &Backend) {
    let store = &*backend.open().await;
    let n = backend.paging_items();
    load(store, "big", n).await;
    load(store, "small", 3).await;
    let N = n as i64;
    let s = scope("big");

    // Backward from the newest, in pages of an odd size.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
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
        let page = store
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
    let latest = store
        .history_page(
            &s,
            &HistoryQuery {
                limit: 10,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    let older = store
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
    let back = store
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
    let small = store
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
    let err = store
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
    let err = store
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

async fn search_ranks_within_the_conversation_only(backend: &Backend) {
    let store = &*backend.open().await;
    say(store, "c1", "user", "the deploy failed with a timeout").await;
    say(store, "c1", "assistant", "I am deploying it again").await;
    say(store, "c1", "user", "部署失败了，请检查日志").await;
    say(store, "c2", "user", "deploy secrets of another chat").await;
    let s = scope("c1");

    let hits = store.history_search(&s, None, "deploy", 10).await.unwrap();
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

    let hits = store
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
    let hits = store
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
    say(store, "c1", "user", "deploy again please").await;
    let hits = store
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
    let hits = store
        .history_search(&s, None, "deploy timeout", 2)
        .await
        .unwrap();
    assert_eq!(hits.items.len(), 2);
    // A CJK word matches its characters side by side, not scattered.
    say(store, "c1", "user", "部门的署名").await;
    let hits = store.history_search(&s, None, "部署", 10).await.unwrap();
    let texts: Vec<_> = hits
        .items
        .iter()
        .map(|i| i.content.clone().unwrap())
        .collect();
    assert_eq!(texts, ["部署失败了，请检查日志"]);
    // Accents fold: "resume" finds "résumé".
    say(store, "c1", "user", "my résumé is attached").await;
    let hits = store.history_search(&s, None, "resume", 10).await.unwrap();
    assert_eq!(hits.items.len(), 1);
    assert_eq!(
        store
            .history_search(&s, None, "-- ...", 10)
            .await
            .unwrap_err()
            .code,
        ErrorCode::InvalidArgument
    );
}

async fn events_page_and_filter_and_append_is_idempotent(backend: &Backend) {
    let store = &*backend.open().await;
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
        let first = store.append_event(event.clone()).await.unwrap();
        let again = store.append_event(event).await.unwrap();
        assert_eq!(first, again);
    }
    let s = scope("c1");
    let page = store
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
    let page = store
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
    let got = store.event_get(&s, "e2").await.unwrap();
    assert_eq!(got.input_summary.as_deref(), Some("summary 2"));
    assert_eq!(
        store.event_get(&s, "nope").await.unwrap_err().code,
        ErrorCode::NotFound
    );
}

async fn artifacts_are_read_in_ranges(backend: &Backend) {
    let store = &*backend.open().await;
    let content = b"0123456789abcdef".repeat(10);
    let meta = store
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
    let s = scope("c1");
    let id = meta.artifact_id.clone();
    let part = store.artifact_read(&s, &id, 150, 64).await.unwrap();
    assert_eq!(part.length, Some(10));
    assert!(!part.has_more);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(part.content_base64.unwrap())
        .unwrap();
    assert_eq!(bytes, &content[150..]);
    let head = store.artifact_read(&s, &id, 0, 16).await.unwrap();
    assert!(head.has_more);
    assert_eq!(
        store.artifact_read(&s, &id, 161, 1).await.unwrap_err().code,
        ErrorCode::InvalidArgument
    );

    let expired = store
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
        store
            .artifact_metadata(&s, &expired.artifact_id)
            .await
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
}

async fn state_and_storage_are_scoped(backend: &Backend) {
    let store = &*backend.open().await;
    let a = scope("c1");
    let mut other_runner = a.clone();
    other_runner.runner_id = "plugin:x/y/z".into();
    let mut other_actor = a.clone();
    other_actor.actor_id = Some("user-2".into());

    store
        .state_set(
            &a,
            StateScope::Conversation,
            "external.session_id",
            &json!("s-1"),
        )
        .await
        .unwrap();
    store
        .state_set(
            &a,
            StateScope::Conversation,
            "external.harness",
            &json!("claude-code"),
        )
        .await
        .unwrap();
    store
        .state_set(&a, StateScope::Actor, "lang", &json!({"pref": "en"}))
        .await
        .unwrap();
    assert_eq!(
        store
            .state_get(&a, StateScope::Conversation, "external.session_id")
            .await
            .unwrap(),
        Some(json!("s-1"))
    );
    assert_eq!(
        store
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
        store
            .state_get(&other_actor, StateScope::Actor, "lang")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .state_get(
                &scope("c2"),
                StateScope::Conversation,
                "external.session_id"
            )
            .await
            .unwrap(),
        None
    );

    let listed = store
        .state_list(&a, StateScope::Conversation, Some("external."), 10)
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["external.harness", "external.session_id"]
    );
    assert!(
        store
            .state_delete(&a, StateScope::Conversation, "external.harness")
            .await
            .unwrap()
    );
    assert!(
        !store
            .state_delete(&a, StateScope::Conversation, "external.harness")
            .await
            .unwrap()
    );

    // Storage: plugin storage is shared by the plugin's runners; workspace by workspace.
    store
        .storage_set(&a, StorageKind::Plugin, "blob", &[0, 159, 146, 150])
        .await
        .unwrap();
    let mut sibling = a.clone();
    sibling.runner_id = "plugin:langbot/harness-bridge/codex".into();
    assert_eq!(
        store
            .storage_get(&sibling, StorageKind::Plugin, "blob")
            .await
            .unwrap(),
        Some(vec![0, 159, 146, 150])
    );
    assert_eq!(
        store
            .storage_get(&other_runner, StorageKind::Plugin, "blob")
            .await
            .unwrap(),
        None
    );
    store
        .storage_set(&a, StorageKind::Workspace, "w", b"1")
        .await
        .unwrap();
    assert_eq!(
        store
            .storage_keys(&a, StorageKind::Workspace)
            .await
            .unwrap(),
        ["w"]
    );
    assert!(
        store
            .storage_delete(&a, StorageKind::Workspace, "w")
            .await
            .unwrap()
    );
    assert!(
        store
            .storage_keys(&a, StorageKind::Workspace)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Two handles on one store (two processes on one folder, two bridge
/// instances on one database) appending to one conversation at once: every
/// item gets its own number, none lost; and a cursor one hands out is good
/// on the other.
async fn two_handles_number_one_conversation_and_share_cursors(backend: &Backend) {
    let writers: Vec<_> = (0..4)
        .map(|w| async move {
            let store = backend.open().await;
            for i in 0..50 {
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
        .collect();
    futures::future::join_all(writers).await;
    let (one, two) = (backend.open().await, backend.open().await);
    let mut seqs = Vec::new();
    let mut cursor = None;
    // Page alternately through both handles.
    for round in 0.. {
        let store = if round % 2 == 0 { &one } else { &two };
        let page = store
            .history_page(
                &scope("busy"),
                &HistoryQuery {
                    before_cursor: cursor.clone(),
                    limit: 30,
                    ..HistoryQuery::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(page.total_count, Some(200));
        seqs.extend(page.items.iter().rev().map(|i| i.seq.unwrap()));
        if !page.has_more {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(seqs, (1..=200).rev().collect::<Vec<i64>>());
}

/// A PostgreSQL store seen through a write guard (how a run of a shared
/// queue writes): its writes land while the guard's row is there and are
/// refused, with nothing written, once it is gone; reads go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn guarded_writes_land_only_while_the_guard_holds() {
    use harness_bridge::host::postgres::WriteGuard;
    use harness_bridge::host::prelude::*;
    let db = common::pg::database().await;
    let store = PgHost::connect(&db.url).await.expect("store connects");
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE leases (id TEXT PRIMARY KEY); INSERT INTO leases VALUES ('r1')",
        )
        .await
        .unwrap();
    let guarded = store.guarded(WriteGuard {
        sql: "SELECT 1 FROM leases WHERE id = $1 FOR SHARE",
        args: vec!["r1".into()],
        refusal: "the lease is gone".into(),
    });
    let s = scope("fenced");
    let item = |text: &str| NewTranscriptItem {
        event_id: format!("ev-{text}"),
        conversation_id: "fenced".into(),
        role: "user".into(),
        content: Some(text.into()),
        ..NewTranscriptItem::default()
    };
    guarded.append_transcript(item("while held")).await.unwrap();
    guarded
        .state_set(&s, StateScope::Conversation, "k", &json!(1))
        .await
        .unwrap();
    guarded
        .storage_set(&s, StorageKind::Plugin, "k", b"v")
        .await
        .unwrap();

    client.batch_execute("DELETE FROM leases").await.unwrap();
    let refused = guarded.append_transcript(item("after")).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::Unauthorized);
    assert_eq!(refused.message, "the lease is gone");
    for refused in [
        guarded
            .state_set(&s, StateScope::Conversation, "k", &json!(2))
            .await
            .unwrap_err(),
        guarded
            .state_delete(&s, StateScope::Conversation, "k")
            .await
            .map(|_| ())
            .unwrap_err(),
        guarded
            .storage_set(&s, StorageKind::Plugin, "k", b"w")
            .await
            .unwrap_err(),
        guarded
            .append_event(NewEvent {
                event_id: "ev-late".into(),
                event_type: "message.received".into(),
                source: "test".into(),
                conversation_id: Some("fenced".into()),
                ..NewEvent::default()
            })
            .await
            .map(|_| ())
            .unwrap_err(),
        guarded
            .put_artifact(
                NewArtifact {
                    artifact_type: "file".into(),
                    source: "test".into(),
                    ..NewArtifact::default()
                },
                b"late".to_vec(),
            )
            .await
            .map(|_| ())
            .unwrap_err(),
    ] {
        assert_eq!(refused.code, ErrorCode::Unauthorized, "{refused}");
    }
    // Nothing of the refused writes is there; the unguarded store reads
    // what landed.
    let page = store
        .conversation_history("fenced", None, 10)
        .await
        .unwrap();
    let texts: Vec<_> = page
        .items
        .iter()
        .filter_map(|i| i.content.clone())
        .collect();
    assert_eq!(texts, ["while held"]);
    assert_eq!(
        store
            .state_get(&s, StateScope::Conversation, "k")
            .await
            .unwrap(),
        Some(json!(1))
    );
    assert_eq!(
        store
            .storage_get(&s, StorageKind::Plugin, "k")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"v"[..])
    );
    assert!(guarded.event_get(&s, "ev-late").await.is_err());
}

/// The caps a run's grant keeps (value sizes, key length, page and search
/// sizes) hold whichever store is behind it, and nothing over a cap is
/// stored.
async fn caps_hold_through_a_grant(backend: &Backend) {
    use harness_bridge::host::calls::{
        HistorySearchCall, PluginStorageSet, StateGetCall, StateSetCall,
    };
    use harness_bridge::host::{GrantCaps, GrantPolicy, Grants};
    let store = backend.open().await;
    let grants = Grants::new(store.clone());
    let policy = GrantPolicy {
        caps: GrantCaps {
            max_state_value_bytes: 64,
            max_storage_value_bytes: 32,
            max_key_bytes: 16,
            max_page_limit: 5,
            max_search_results: 3,
            ..GrantCaps::default()
        },
        ..GrantPolicy::default()
    };
    let open = grants
        .open_run(
            &common::context("capped", "c-caps"),
            RUNNER,
            &common::all_permissions(),
            &policy,
        )
        .expect("run opens");
    let host = grants.granted(open.grant.clone());
    let refused = |result: Result<(), harness_bridge::protocol::AgentAPIError>, code: ErrorCode| {
        let e = result.expect_err("over the cap");
        assert_eq!(e.code, code, "{e}");
    };
    let big = json!("x".repeat(100));
    refused(
        host.call(&StateSetCall {
            scope: StateScope::Conversation,
            key: "k".into(),
            value: big,
        })
        .await,
        ErrorCode::PayloadTooLarge,
    );
    refused(
        host.call(&StateSetCall {
            scope: StateScope::Conversation,
            key: "k".repeat(17),
            value: json!(1),
        })
        .await,
        ErrorCode::PayloadTooLarge,
    );
    let over: Value = serde_json::from_value(json!({"key": "k", "value": "y".repeat(33)})).unwrap();
    let e = host
        .answer::<PluginStorageSet>(over)
        .await
        .expect_err("over the storage cap");
    assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{e}");
    let e = host
        .answer::<HistorySearchCall>(json!({"query": "x", "top_k": 4}))
        .await
        .expect_err("over the search cap");
    assert!(
        matches!(
            e.code,
            ErrorCode::InvalidArgument | ErrorCode::PayloadTooLarge
        ),
        "{e}"
    );
    // Nothing over a cap was kept; within the caps, calls go through.
    let kept = host
        .call(&StateGetCall {
            scope: StateScope::Conversation,
            key: "k".into(),
        })
        .await
        .expect("state_get");
    assert_eq!(kept, None);
    host.call(&StateSetCall {
        scope: StateScope::Conversation,
        key: "k".into(),
        value: json!("small"),
    })
    .await
    .expect("within the cap");
    assert_eq!(
        store
            .state_get(&open.grant.scope, StateScope::Conversation, "k")
            .await
            .unwrap(),
        Some(json!("small"))
    );
}

/// Record event `id` of `kind` in `conversation` (and `thread`).
async fn event(
    store: &dyn HostApi,
    id: &str,
    kind: &str,
    conversation: &str,
    thread: Option<&str>,
) {
    store
        .append_event(NewEvent {
            event_id: id.into(),
            event_type: kind.into(),
            source: "platform".into(),
            conversation_id: Some(conversation.into()),
            thread_id: thread.map(str::to_string),
            ..NewEvent::default()
        })
        .await
        .unwrap_or_else(|e| panic!("append event {id}: {e}"));
}

/// Every event id `query` reaches walking its direction page by page
/// from its cursors (as given), in the order walked; each page checked.
async fn walk_events(store: &dyn HostApi, s: &RunScope, mut query: EventQuery) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let page = store.event_page(s, &query).await.expect("event page");
        assert!(page.items.len() <= query.limit as usize);
        let ids: Vec<String> = page.items.iter().map(|e| e.event_id.clone()).collect();
        // Items come oldest first within a page, whichever way it walks.
        match query.direction {
            Direction::Backward => seen.extend(ids.into_iter().rev()),
            Direction::Forward => seen.extend(ids),
        }
        if !page.has_more {
            if query.direction == Direction::Backward {
                assert!(page.next_cursor.is_none(), "no cursor past the oldest");
            }
            return seen;
        }
        match query.direction {
            Direction::Backward => query.before_cursor = page.next_cursor,
            Direction::Forward => query.after_cursor = page.next_cursor,
        }
    }
}

/// `event_page` walks the event log as `history_page` walks the
/// transcript: exact both ways, filtered pages too, `prev_cursor` back
/// to the same items; a cursor of another conversation or of the
/// transcript is refused.
async fn event_pages_are_exact_both_ways(backend: &Backend) {
    let store = &*backend.open().await;
    const N: usize = 25;
    let id = |i: usize| format!("e{i:02}");
    let kind = |i: usize| {
        if i.is_multiple_of(3) {
            "member.joined"
        } else {
            "message.received"
        }
    };
    for i in 0..N {
        event(store, &id(i), kind(i), "c1", None).await;
    }
    event(store, "other-1", "message.received", "c2", None).await;
    say(store, "c1", "user", "a transcript item beside the events").await;
    let s = scope("c1");
    let all: Vec<String> = (0..N).map(id).collect();

    let backward = EventQuery {
        limit: 7,
        ..EventQuery::default()
    };
    let first = store.event_page(&s, &backward).await.unwrap();
    assert_eq!(first.total_count, Some(N as u64));
    assert!(first.has_more);
    assert_eq!(
        first
            .items
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["e18", "e19", "e20", "e21", "e22", "e23", "e24"],
        "the newest page, oldest first"
    );
    let mut newest_first = all.clone();
    newest_first.reverse();
    assert_eq!(walk_events(store, &s, backward.clone()).await, newest_first);
    let forward = EventQuery {
        limit: 7,
        direction: Direction::Forward,
        ..EventQuery::default()
    };
    assert_eq!(walk_events(store, &s, forward).await, all);

    // A page's prev_cursor walks back to exactly the page after it.
    let older = store
        .event_page(
            &s,
            &EventQuery {
                before_cursor: first.next_cursor.clone(),
                ..backward.clone()
            },
        )
        .await
        .unwrap();
    let back = store
        .event_page(
            &s,
            &EventQuery {
                after_cursor: older.prev_cursor.clone(),
                limit: 7,
                direction: Direction::Forward,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(back.items, first.items);
    // Between two cursors: just what lies between them.
    let between = store
        .event_page(
            &s,
            &EventQuery {
                after_cursor: older.prev_cursor.clone(),
                before_cursor: first.items.last().and_then(|_| first.prev_cursor.clone()),
                limit: 50,
                direction: Direction::Forward,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        between
            .items
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["e18", "e19", "e20", "e21", "e22", "e23"]
    );

    // Filtered, both ways: only the type asked for, none lost.
    let joined: Vec<String> = (0..N).filter(|i| i % 3 == 0).map(id).collect();
    let filter = vec!["member.joined".to_string()];
    let mut walked = walk_events(
        store,
        &s,
        EventQuery {
            event_types: filter.clone(),
            limit: 3,
            ..EventQuery::default()
        },
    )
    .await;
    walked.reverse();
    assert_eq!(walked, joined);
    let walked = walk_events(
        store,
        &s,
        EventQuery {
            event_types: filter,
            limit: 3,
            direction: Direction::Forward,
            ..EventQuery::default()
        },
    )
    .await;
    assert_eq!(walked, joined);

    // Another conversation's event cursor, and a transcript cursor of
    // this conversation, are not cursors of this event log.
    let foreign = store
        .event_page(
            &scope("c2"),
            &EventQuery {
                limit: 1,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(foreign.items.len(), 1);
    let transcript = store
        .history_page(
            &s,
            &HistoryQuery {
                limit: 1,
                ..HistoryQuery::default()
            },
        )
        .await
        .unwrap();
    for cursor in [foreign.prev_cursor, transcript.prev_cursor] {
        assert!(cursor.is_some());
        for query in [
            EventQuery {
                before_cursor: cursor.clone(),
                ..backward.clone()
            },
            EventQuery {
                after_cursor: cursor.clone(),
                direction: Direction::Forward,
                ..backward.clone()
            },
        ] {
            let err = store.event_page(&s, &query).await.unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
        }
    }
}

/// Through a run's grant, a page or search naming another conversation
/// is refused (`unauthorized`, saying which) unless the operator's policy
/// allows other conversations; then it reads that conversation and only
/// it. Naming the run's own conversation is as leaving it out.
async fn another_conversation_is_refused_unless_the_grant_allows_it(backend: &Backend) {
    use harness_bridge::host::calls::{EventGetCall, HistorySearchCall};
    use harness_bridge::host::{GrantPolicy, Grants};
    let store = backend.open().await;
    say(&*store, "c1", "user", "deploy the own chat").await;
    say(&*store, "c2", "user", "deploy secrets of the other chat").await;
    event(&*store, "ev-c1", "message.received", "c1", None).await;
    event(&*store, "ev-c2", "message.received", "c2", None).await;
    let grants = Grants::new(store.clone());
    let open = |run: &str, policy: &GrantPolicy| {
        let open = grants
            .open_run(
                &common::context(run, "c1"),
                RUNNER,
                &common::all_permissions(),
                policy,
            )
            .expect("run opens");
        grants.granted(open.grant)
    };
    let page_of = |conversation: &str| HistoryQuery {
        conversation_id: Some(conversation.into()),
        limit: 10,
        ..HistoryQuery::default()
    };
    let search_in = |conversation: Option<&str>| HistorySearchCall {
        query: "deploy".into(),
        conversation_id: conversation.map(str::to_string),
        top_k: 10,
    };
    let events_of = |conversation: &str| EventQuery {
        conversation_id: Some(conversation.into()),
        limit: 10,
        ..EventQuery::default()
    };
    let texts = |items: &[harness_bridge::protocol::TranscriptItem]| -> Vec<String> {
        items.iter().filter_map(|i| i.content.clone()).collect()
    };

    let own = open("own-only", &GrantPolicy::default());
    for refused in [
        own.call(&page_of("c2")).await.map(|_| ()),
        own.call(&search_in(Some("c2"))).await.map(|_| ()),
        own.call(&events_of("c2")).await.map(|_| ()),
    ] {
        let err = refused.expect_err("another conversation is refused");
        assert_eq!(err.code, ErrorCode::Unauthorized, "{err}");
        assert!(err.message.contains("`c2`"), "{err}");
    }
    // Its own conversation, named or not, and nothing of another's.
    let page = own.call(&page_of("c1")).await.unwrap();
    assert_eq!(texts(&page.items), ["deploy the own chat"]);
    for named in [None, Some("c1")] {
        let hits = own.call(&search_in(named)).await.unwrap();
        assert_eq!(texts(&hits.items), ["deploy the own chat"]);
    }
    let events = own.call(&events_of("c1")).await.unwrap();
    assert_eq!(
        events
            .items
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["ev-c1"]
    );
    // Another conversation's event reads as missing, not as forbidden.
    let err = own
        .call(&EventGetCall {
            event_id: "ev-c2".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");

    let wide = open(
        "cross",
        &GrantPolicy {
            cross_conversation: true,
            ..GrantPolicy::default()
        },
    );
    let page = wide.call(&page_of("c2")).await.unwrap();
    assert_eq!(texts(&page.items), ["deploy secrets of the other chat"]);
    let hits = wide.call(&search_in(Some("c2"))).await.unwrap();
    assert_eq!(texts(&hits.items), ["deploy secrets of the other chat"]);
    let events = wide.call(&events_of("c2")).await.unwrap();
    assert_eq!(
        events
            .items
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["ev-c2"]
    );
    // A cursor of the other conversation is good for it, not for the own one.
    let cursor = page.prev_cursor.clone();
    let err = wide
        .call(&HistoryQuery {
            before_cursor: cursor,
            limit: 10,
            ..HistoryQuery::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
}

/// A thread is a stream of its own: a run in it pages, searches and
/// reads events of that thread only, its conversation state is the
/// thread's, and a cursor of the thread is no cursor of the conversation's
/// main stream. Actor state follows the actor across threads.
async fn a_thread_is_a_stream_of_its_own(backend: &Backend) {
    let store = &*backend.open().await;
    let said = |text: &str, thread: Option<&str>| NewTranscriptItem {
        event_id: format!("ev-{text}"),
        conversation_id: "c1".into(),
        thread_id: thread.map(str::to_string),
        role: "user".into(),
        content: Some(text.into()),
        ..NewTranscriptItem::default()
    };
    for (text, thread) in [
        ("deploy in the main chat", None),
        ("deploy in the thread", Some("t1")),
        ("the thread goes on", Some("t1")),
        ("deploy in another thread", Some("t2")),
    ] {
        store.append_transcript(said(text, thread)).await.unwrap();
    }
    event(store, "ev-main", "message.received", "c1", None).await;
    event(store, "ev-t1", "message.received", "c1", Some("t1")).await;
    let main = scope("c1");
    let mut thread = scope("c1");
    thread.thread_id = Some("t1".into());
    let texts = |items: &[harness_bridge::protocol::TranscriptItem]| -> Vec<String> {
        items.iter().filter_map(|i| i.content.clone()).collect()
    };
    let all = HistoryQuery {
        limit: 10,
        ..HistoryQuery::default()
    };

    let page = store.history_page(&thread, &all).await.unwrap();
    assert_eq!(
        texts(&page.items),
        ["deploy in the thread", "the thread goes on"]
    );
    assert_eq!(page.total_count, Some(2));
    let page_main = store.history_page(&main, &all).await.unwrap();
    assert_eq!(texts(&page_main.items), ["deploy in the main chat"]);
    let hits = store
        .history_search(&thread, None, "deploy", 10)
        .await
        .unwrap();
    assert_eq!(texts(&hits.items), ["deploy in the thread"]);
    let hits = store
        .history_search(&main, None, "deploy", 10)
        .await
        .unwrap();
    assert_eq!(texts(&hits.items), ["deploy in the main chat"]);
    let events = store
        .event_page(
            &thread,
            &EventQuery {
                limit: 10,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        events
            .items
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["ev-t1"]
    );
    assert_eq!(events.items[0].thread_id.as_deref(), Some("t1"));
    // The thread's cursor is refused on the main stream.
    let err = store
        .history_page(
            &main,
            &HistoryQuery {
                before_cursor: page.prev_cursor.clone(),
                ..all.clone()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");

    // Conversation state is the thread's; actor state is the actor's.
    store
        .state_set(&thread, StateScope::Conversation, "k", &json!("thread"))
        .await
        .unwrap();
    store
        .state_set(&thread, StateScope::Actor, "lang", &json!("fr"))
        .await
        .unwrap();
    assert_eq!(
        store
            .state_get(&main, StateScope::Conversation, "k")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .state_get(&main, StateScope::Actor, "lang")
            .await
            .unwrap(),
        Some(json!("fr"))
    );
    store
        .state_set(&main, StateScope::Conversation, "k", &json!("main"))
        .await
        .unwrap();
    assert_eq!(
        store
            .state_get(&thread, StateScope::Conversation, "k")
            .await
            .unwrap(),
        Some(json!("thread"))
    );
}

/// Subject and runner state have their owners too (a subject's state is
/// its own, a runner's follows the runner across conversations and no
/// other runner's sees it); deletes touch only the owner's entry, and a
/// storage delete by another plugin or workspace deletes nothing.
async fn subject_and_runner_state_and_storage_deletes_are_scoped(backend: &Backend) {
    let store = &*backend.open().await;
    let mut a = scope("c1");
    a.subject_id = Some("msg-1".into());
    let mut other_subject = a.clone();
    other_subject.subject_id = Some("msg-2".into());
    let mut elsewhere = scope("c2");
    elsewhere.subject_id = Some("msg-1".into());
    let mut other_runner = a.clone();
    other_runner.runner_id = "plugin:x/y/z".into();

    store
        .state_set(&a, StateScope::Subject, "seen", &json!(true))
        .await
        .unwrap();
    store
        .state_set(&a, StateScope::Runner, "model", &json!("opus"))
        .await
        .unwrap();
    let get = |s: &RunScope, state: StateScope, key: &'static str| {
        let s = s.clone();
        async move { store.state_get(&s, state, key).await.unwrap() }
    };
    assert_eq!(
        get(&a, StateScope::Subject, "seen").await,
        Some(json!(true))
    );
    assert_eq!(get(&other_subject, StateScope::Subject, "seen").await, None);
    assert_eq!(
        get(&other_runner, StateScope::Subject, "seen").await,
        None,
        "another runner's subject state"
    );
    // The subject's id, not the conversation, owns it.
    assert_eq!(
        get(&elsewhere, StateScope::Subject, "seen").await,
        Some(json!(true))
    );
    assert_eq!(
        get(&elsewhere, StateScope::Runner, "model").await,
        Some(json!("opus")),
        "runner state follows the runner"
    );
    assert_eq!(get(&other_runner, StateScope::Runner, "model").await, None);
    assert_eq!(
        store
            .state_list(&a, StateScope::Runner, None, 10)
            .await
            .unwrap()
            .iter()
            .map(|e| e.key.as_str())
            .collect::<Vec<_>>(),
        ["model"]
    );
    assert!(
        store
            .state_list(&other_runner, StateScope::Runner, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Deletes: nothing of another owner's, then the owner's own.
    assert!(
        !store
            .state_delete(&other_runner, StateScope::Runner, "model")
            .await
            .unwrap()
    );
    assert!(
        !store
            .state_delete(&other_subject, StateScope::Subject, "seen")
            .await
            .unwrap()
    );
    assert_eq!(
        get(&a, StateScope::Runner, "model").await,
        Some(json!("opus"))
    );
    assert!(
        store
            .state_delete(&elsewhere, StateScope::Runner, "model")
            .await
            .unwrap()
    );
    assert_eq!(get(&a, StateScope::Runner, "model").await, None);
    assert!(
        store
            .state_delete(&a, StateScope::Subject, "seen")
            .await
            .unwrap()
    );
    assert_eq!(get(&a, StateScope::Subject, "seen").await, None);
    // A run without a subject has no subject state, said so.
    let err = store
        .state_get(&scope("c1"), StateScope::Subject, "seen")
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    assert!(err.message.contains("subject"), "{err}");

    // Storage deletes: another plugin's or workspace's delete finds
    // nothing and leaves the value; the owner's removes it for every
    // runner of the plugin (or the workspace).
    let mut sibling = a.clone();
    sibling.runner_id = "plugin:langbot/harness-bridge/codex".into();
    let mut other_workspace = a.clone();
    other_workspace.workspace_id = Some("ws-2".into());
    store
        .storage_set(&a, StorageKind::Plugin, "blob", b"p")
        .await
        .unwrap();
    store
        .storage_set(&a, StorageKind::Workspace, "w", b"w")
        .await
        .unwrap();
    assert!(
        !store
            .storage_delete(&other_runner, StorageKind::Plugin, "blob")
            .await
            .unwrap()
    );
    assert!(
        !store
            .storage_delete(&other_workspace, StorageKind::Workspace, "w")
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .storage_get(&other_workspace, StorageKind::Workspace, "w")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .storage_get(&a, StorageKind::Plugin, "blob")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"p"[..])
    );
    assert_eq!(
        store
            .storage_get(&a, StorageKind::Workspace, "w")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"w"[..])
    );
    assert!(
        store
            .storage_delete(&sibling, StorageKind::Plugin, "blob")
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .storage_get(&a, StorageKind::Plugin, "blob")
            .await
            .unwrap(),
        None
    );
    assert!(
        !store
            .storage_delete(&a, StorageKind::Plugin, "blob")
            .await
            .unwrap()
    );
    assert!(
        store
            .storage_keys(&sibling, StorageKind::Plugin)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A PostgreSQL store a newer build migrated further is refused with
/// what to do, for the host store's tables and for the run queue's, and
/// nothing is applied; once the database is back to what this build
/// knows, it opens as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn a_postgres_store_from_a_newer_build_is_refused() {
    use harness_bridge::host::postgres::{MIGRATIONS, migrate, migrate_component};
    use harness_bridge::host::prelude::*;
    use harness_bridge::serve::cluster::MIGRATIONS as QUEUE;
    let db = common::pg::database().await;
    let store = PgHost::connect(&db.url).await.expect("store connects");
    migrate_component(store.pool(), &db.name, "serve", QUEUE)
        .await
        .expect("the run queue migrates");
    say(&store, "kept", "user", "written by this build").await;
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let versions = |component: &'static str| {
        let client = &client;
        async move {
            client
                .query(
                    "SELECT version FROM schema_migrations WHERE component = $1 ORDER BY version",
                    &[&component],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>(0))
                .collect::<Vec<_>>()
        }
    };
    for (component, known) in [("host", MIGRATIONS.len()), ("serve", QUEUE.len())] {
        let (known, newer) = (known as i64, known as i64 + 1);
        client
            .execute(
                "INSERT INTO schema_migrations (component, version, name, applied_at)
                 VALUES ($1, $2, 'from a newer build', 0)",
                &[&component, &newer],
            )
            .await
            .unwrap();
        let refusals = if component == "host" {
            vec![
                migrate(&db.url).await.map(|_| ()).unwrap_err(),
                PgHost::connect(&db.url).await.map(|_| ()).unwrap_err(),
            ]
        } else {
            vec![
                migrate_component(store.pool(), &db.name, "serve", QUEUE)
                    .await
                    .map(|_| ())
                    .unwrap_err(),
            ]
        };
        for refused in refusals {
            let err = refused.to_string();
            assert!(
                err.contains(&format!("{component} tables have schema version {newer}")),
                "{err}"
            );
            assert!(err.contains(&format!("knows up to {known}")), "{err}");
            assert!(err.contains("upgrade harness-bridge"), "{err}");
        }
        // Nothing was applied or recorded over it.
        assert_eq!(versions(component).await, (1..=newer).collect::<Vec<_>>());
        client
            .execute(
                "DELETE FROM schema_migrations WHERE component = $1 AND version = $2",
                &[&component, &newer],
            )
            .await
            .unwrap();
    }
    drop(store);
    let store = PgHost::connect(&db.url).await.expect("a known store opens");
    let page = store.conversation_history("kept", None, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
}
