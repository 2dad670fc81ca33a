//! Host read latency on a store of 1,000,000 transcript items (100
//! conversations × 10,000 items): `history_page` of 50 items and
//! `history_search`, as a runner calls them through its grant; on the
//! embedded SQLite store and on PostgreSQL (a server the bench starts on
//! 127.0.0.1, the same items loaded into a fresh database).
//!
//! The SQLite store is built once under `target/bench-data/` and reused by
//! later runs (building it takes a minute); the PostgreSQL one is loaded
//! each run (about two minutes). Run: `cargo bench --bench host_store`
//! (`cargo bench --bench host_store -- store_1m/` for SQLite alone).

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use harness_bridge::host::calls::HistorySearchCall;
use harness_bridge::host::prelude::*;
use harness_bridge::host::{Grants, HistoryQuery};

mod support;
use harness_bridge::protocol::AgentRunContext;
use support::store_1m as store;

fn context(conversation: &str) -> AgentRunContext {
    support::context("bench-run", conversation)
}

fn bench(c: &mut Criterion) {
    let rt = support::runtime();
    let sqlite: Arc<dyn HostApi> = Arc::new(store(&rt));
    measure(c, &rt, "store_1m", sqlite);
    let postgres: Arc<dyn HostApi> = Arc::new(support::pg_store_1m(&rt));
    measure(c, &rt, "pg_store_1m", postgres);
}

/// The four reads, through a grant, on `store`, as criterion group `name`.
fn measure(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: Arc<dyn HostApi>) {
    let grants = Grants::new(store.clone());
    let permissions =
        harness_bridge::harness::discovery(harness_bridge::harness::Adapters::builtin()).runners[0]
            .manifest
            .permissions
            .clone();
    let policy = support::unlimited();
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
    // 100 pages deep; one in quick mode, whose store is small.
    let depth = if support::quick() { 1 } else { 100 };
    let middle_cursor = rt.block_on(async {
        let mut q = latest.clone();
        for _ in 0..depth {
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

    let mut group = c.benchmark_group(name);
    group.bench_function("history_page_50_latest", |b| {
        b.to_async(rt)
            .iter(|| async { assert_eq!(host.call(&latest).await.expect("page").items.len(), 50) })
    });
    group.bench_function("history_page_50_middle", |b| {
        b.to_async(rt)
            .iter(|| async { assert_eq!(host.call(&middle).await.expect("page").items.len(), 50) })
    });
    group.bench_function("history_search_top10", |b| {
        b.to_async(rt).iter(|| async {
            assert!(
                !host
                    .call(&HistorySearchCall {
                        query: "deploy timeout".into(),
                        conversation_id: None,
                        top_k: 10,
                    })
                    .await
                    .expect("search")
                    .items
                    .is_empty()
            )
        })
    });
    group.bench_function("history_search_cjk_top10", |b| {
        b.to_async(rt).iter(|| async {
            assert!(
                !host
                    .call(&HistorySearchCall {
                        query: "部署".into(),
                        conversation_id: None,
                        top_k: 10,
                    })
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
