//! What recording a run's usage and checking the operator's budgets add
//! to a turn: the admission before it starts (`admit_run`: a person's,
//! a conversation's and a bot's turn rate and spending this day and
//! month, the turn counted), one ledger row written at the run's end
//! (`record_usage`), and the sum `host usage` reads, on the embedded
//! SQLite store and on PostgreSQL (a server the bench starts on
//! 127.0.0.1), side by side in one run. The ledger holds 10,000 runs of
//! 100 actors when the sum and the admission are measured (the record
//! measurement, after them, adds its own). Run: `cargo bench --bench ledger`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use harness_bridge::host::budget::{Admission, Budgets, Limits};
use harness_bridge::host::prelude::*;
use harness_bridge::host::store::{Store, StoreAt};
use harness_bridge::host::usage::{UsageBy, UsageQuery, UsageRecord};

mod support;

const RUNS: u64 = 10_000;

fn row(n: u64) -> UsageRecord {
    UsageRecord {
        run_id: format!("run-{n}"),
        actor_id: Some(format!("actor-{}", n % 100)),
        bot_id: Some("bot-1".into()),
        conversation_id: Some(format!("conv-{}", n % 1000)),
        harness: "claude-code".into(),
        started_ms: 1_795_900_000_000 + n as i64 * 1000,
        ended_ms: 1_795_900_000_000 + n as i64 * 1000 + 500,
        outcome: "completed".into(),
        input_tokens: 1200,
        output_tokens: 300,
        cache_read_tokens: 9000,
        cost_usd: Some(0.012),
        ..UsageRecord::default()
    }
}

/// Every limit on every subject, none ever reached: the most an
/// admission reads and writes.
fn budgets() -> Budgets {
    let limits = Limits {
        turns_per_minute: Some(1_000_000),
        tokens_per_day: Some(u64::MAX / 2),
        tokens_per_month: Some(u64::MAX / 2),
        cost_usd_per_day: Some(1e12),
        cost_usd_per_month: Some(1e12),
    };
    Budgets {
        actor: limits.clone(),
        conversation: limits.clone(),
        bot: limits,
        ..Budgets::default()
    }
}

/// Turn `n`'s admission: a bot taking 100 turns a minute from 100 people
/// in 1,000 conversations, in the month of the ledger's runs.
fn admission(budgets: &Budgets, n: u64) -> Admission {
    let actor = format!("actor-{}", n % 100);
    let conversation = format!("conv-{}", n % 1000);
    Admission {
        run_id: format!("admit-{n}"),
        now_ms: 1_795_900_000_000 + RUNS as i64 * 1000 + n as i64 * 600,
        subjects: budgets.subjects(Some(&actor), Some(&conversation), Some("bot-1")),
    }
}

fn bench(c: &mut Criterion) {
    let rt = support::runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let db = rt.block_on(support::pg::database());
    for (name, at) in [
        ("sqlite", StoreAt::Folder(dir.path().to_path_buf())),
        ("postgres", StoreAt::Postgres(db.url.clone())),
    ] {
        let store = rt.block_on(Store::open(&at)).expect("the store opens");
        let host: Arc<dyn HostApi> = store.host();
        rt.block_on(async {
            for n in 0..RUNS {
                host.record_usage(row(n)).await.expect("recorded");
            }
        });
        let next = AtomicU64::new(RUNS);
        let mut group = c.benchmark_group(format!("ledger_{name}"));
        group.bench_function("usage_by_actor_10k_runs", |b| {
            b.to_async(&rt).iter(|| async {
                store
                    .usage_totals(UsageQuery {
                        by: UsageBy::Actor,
                        ..UsageQuery::default()
                    })
                    .await
                    .expect("summed")
            })
        });
        let budgets = budgets();
        let admitted = AtomicU64::new(0);
        group.bench_function("admit_run_every_limit", |b| {
            b.to_async(&rt).iter(|| {
                let admission = admission(&budgets, admitted.fetch_add(1, Ordering::Relaxed));
                let host = host.clone();
                async move {
                    let hit = host.admit_run(admission).await.expect("admitted").refused;
                    assert!(hit.is_none(), "no limit is reached: {hit:?}");
                }
            })
        });
        group.bench_function("record_usage", |b| {
            b.to_async(&rt).iter(|| {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let host = host.clone();
                async move { host.record_usage(row(n)).await.expect("recorded") }
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
