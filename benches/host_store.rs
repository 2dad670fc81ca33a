//! Embedded host read latency on a store of 1,000,000 transcript items
//! (100 conversations × 10,000 items): `history_page` of 50 items and
//! `history_search`, as a runner calls them through its grant.
//!
//! The store is built once under `target/bench-data/` and reused by later
//! runs (building it takes a minute). Run: `cargo bench --bench host_store`.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants, HistoryQuery, HostApi, NewTranscriptItem};
use harness_bridge::protocol::AgentRunContext;
use serde_json::json;

const CONVERSATIONS: usize = 100;
const PER_CONVERSATION: usize = 10_000;
const WORDS: [&str; 16] = [
    "deploy", "build", "error", "timeout", "database", "review", "merge", "branch", "test",
    "release", "config", "cache", "latency", "memory", "部署", "日志",
];

fn text(i: usize) -> String {
    let pick = |k: usize| WORDS[(i.wrapping_mul(2654435761) >> k) % WORDS.len()];
    format!(
        "message {i}: the {} step hit a {} while checking the {} on {}",
        pick(3),
        pick(7),
        pick(11),
        pick(15)
    )
}

fn store(rt: &tokio::runtime::Runtime) -> SqliteHost {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data/store-1m");
    let ready = dir.join("READY");
    let store = SqliteHost::open(&dir).expect("bench store opens");
    if !ready.exists() {
        eprintln!("building the 1M-item bench store in {} ...", dir.display());
        rt.block_on(async {
            for i in 0..CONVERSATIONS * PER_CONVERSATION {
                store
                    .append_transcript(NewTranscriptItem {
                        event_id: format!("ev-{i}"),
                        conversation_id: format!("conv-{}", i % CONVERSATIONS),
                        role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
                        content: Some(text(i)),
                        ..NewTranscriptItem::default()
                    })
                    .await
                    .expect("append");
            }
        });
        std::fs::write(&ready, "1000000").expect("mark ready");
    }
    store
}

fn context(conversation: &str) -> AgentRunContext {
    serde_json::from_value(json!({
        "run_id": "bench-run", "trigger": {"type": "message.received"},
        "event": {"event_id": "e", "event_type": "message.received", "source": "api"},
        "conversation": {"conversation_id": conversation},
        "input": {"text": "x"}, "delivery": {"surface": "api"}, "resources": {}, "runtime": {},
        "context": {"available_apis": {"history_page": true, "history_search": true}}
    }))
    .expect("bench context")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = store(&rt);
    let grants = Grants::new(Arc::new(store.clone()));
    let permissions = harness_bridge::harness::discovery().runners[0]
        .manifest
        .permissions
        .clone();
    let policy = GrantPolicy {
        caps: harness_bridge::host::GrantCaps {
            rate_per_second: 1e9,
            burst: u32::MAX,
            max_calls_per_run: u32::MAX,
            ..Default::default()
        },
        ..GrantPolicy::default()
    };
    let run = grants
        .open_run(
            &context("conv-42"),
            "plugin:langbot/harness-bridge/claude-code",
            &permissions,
            &policy,
        )
        .expect("open");
    let host = grants.granted(run.grant.clone());
    let latest = HistoryQuery {
        limit: 50,
        ..HistoryQuery::default()
    };
    let middle_cursor = rt.block_on(async {
        let mut q = latest.clone();
        for _ in 0..100 {
            let page = store
                .history_page(&run.grant.scope, &q)
                .await
                .expect("page");
            q.before_cursor = page.next_cursor;
        }
        q.before_cursor
    });
    let middle = HistoryQuery {
        before_cursor: middle_cursor,
        ..latest.clone()
    };

    let mut group = c.benchmark_group("store_1m");
    group.bench_function("history_page_50_latest", |b| {
        b.to_async(&rt).iter(|| async {
            assert_eq!(
                host.history_page(&latest).await.expect("page").items.len(),
                50
            )
        })
    });
    group.bench_function("history_page_50_middle", |b| {
        b.to_async(&rt).iter(|| async {
            assert_eq!(
                host.history_page(&middle).await.expect("page").items.len(),
                50
            )
        })
    });
    group.bench_function("history_search_top10", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(
                !host
                    .history_search(None, "deploy timeout", 10)
                    .await
                    .expect("search")
                    .items
                    .is_empty()
            )
        })
    });
    group.bench_function("history_search_cjk_top10", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(
                !host
                    .history_search(None, "部署", 10)
                    .await
                    .expect("search")
                    .items
                    .is_empty()
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
