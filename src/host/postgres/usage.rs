//! The run ledger on PostgreSQL (`host::usage`).

use tokio_postgres::types::ToSql;

use super::{Client, db_error, guard};
use crate::host::HostResult;
use crate::host::budget::{
    ADMIT_SQL, Admission, FORGET_SQL, Per, Spent, Verdict, spent_sql, turns_sql,
};
use crate::host::usage::{RunListQuery, UsageQuery, UsageRecord, UsageTotal, list_sql, totals_sql};

/// Record one run's usage, if `write_guard` still holds; a run recorded
/// twice keeps its first row.
pub(super) async fn record(
    client: &mut Client,
    write_guard: Option<&guard::WriteGuard>,
    row: &UsageRecord,
) -> HostResult<()> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, write_guard).await?;
    tx.execute(
        "INSERT INTO run_usage (run_id, bot_id, conversation_id, actor_id, harness, model, \
         started_ms, ended_ms, outcome, code, input_tokens, output_tokens, cache_read_tokens, \
         cache_write_tokens, cost_usd) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (run_id) DO NOTHING",
        &[
            &row.run_id,
            &row.bot_id,
            &row.conversation_id,
            &row.actor_id,
            &row.harness,
            &row.model,
            &row.started_ms,
            &row.ended_ms,
            &row.outcome,
            &row.code,
            &count(row.input_tokens),
            &count(row.output_tokens),
            &count(row.cache_read_tokens),
            &count(row.cache_write_tokens),
            &row.cost_usd,
        ],
    )
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}

/// The ledger summed as `query` asks, the latest group first.
pub(super) async fn totals(client: &Client, query: &UsageQuery) -> HostResult<Vec<UsageTotal>> {
    let mut args: Vec<&(dyn ToSql + Sync)> = Vec::new();
    if let Some(since) = &query.since_ms {
        args.push(since);
    }
    if let Some(actor) = &query.actor {
        args.push(actor);
    }
    if let Some(conversation) = &query.conversation {
        args.push(conversation);
    }
    if let Some(harness) = &query.harness {
        args.push(harness);
    }
    let rows = client
        .query(&totals_sql(query), &args)
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|r| {
            let mut counts = [None; 6];
            for (i, count) in counts.iter_mut().enumerate() {
                *count = r.try_get(i + 1)?;
            }
            Ok(UsageTotal::from_sums(
                query.by,
                r.try_get(0)?,
                counts,
                r.try_get(7)?,
                r.try_get(8)?,
            ))
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        .map_err(db_error)
}

/// The ledger's runs as `query` asks, newest first.
pub(super) async fn runs(client: &Client, query: &RunListQuery) -> HostResult<Vec<UsageRecord>> {
    let mut args: Vec<&(dyn ToSql + Sync)> = Vec::new();
    for value in [
        &query.actor,
        &query.conversation,
        &query.harness,
        &query.run_id,
    ]
    .into_iter()
    .flatten()
    {
        args.push(value);
    }
    if let Some((end, id)) = &query.before {
        args.push(end);
        args.push(id);
    }
    let limit = i64::from(query.limit);
    args.push(&limit);
    let rows = client
        .query(&list_sql(query), &args)
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|r| {
            let n = |i| r.try_get::<_, i64>(i).map(|v| v.max(0) as u64);
            Ok(UsageRecord {
                run_id: r.try_get(0)?,
                bot_id: r.try_get(1)?,
                conversation_id: r.try_get(2)?,
                actor_id: r.try_get(3)?,
                harness: r.try_get(4)?,
                model: r.try_get(5)?,
                started_ms: r.try_get(6)?,
                ended_ms: r.try_get(7)?,
                outcome: r.try_get(8)?,
                code: r.try_get(9)?,
                input_tokens: n(10)?,
                output_tokens: n(11)?,
                cache_read_tokens: n(12)?,
                cache_write_tokens: n(13)?,
                cost_usd: r.try_get(14)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        .map_err(db_error)
}

/// Admit a turn (`host::budget`), if `write_guard` still holds: each
/// subject locked by name for the transaction (in one order, so two
/// instances never wait on each other crosswise), then counted as in the
/// embedded store. The lock makes it exact across instances: the turn
/// that would cross a limit is admitted by none of them.
pub(super) async fn admit(
    client: &mut Client,
    write_guard: Option<&guard::WriteGuard>,
    admission: &Admission,
) -> HostResult<Verdict> {
    let periods = admission.periods();
    let minute_ago = admission.minute_ago_ms();
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, write_guard).await?;
    let mut names: Vec<String> = admission.subjects.iter().map(|s| s.lock_name()).collect();
    names.sort();
    for name in &names {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[name],
        )
        .await
        .map_err(db_error)?;
    }
    let mut spent_by = Vec::new();
    for subject in &admission.subjects {
        let mut spent = Spent::default();
        if subject.limits.turns_per_minute.is_some() {
            let row = tx
                .query_one(&turns_sql(subject.per), &[&subject.id, &minute_ago])
                .await
                .map_err(db_error)?;
            spent.turns_last_minute = row.try_get::<_, i64>(0).map_err(db_error)?.max(0) as u64;
            spent.first_turn_ms = row.try_get(1).map_err(db_error)?;
        }
        if subject.limits.spends() {
            let row = tx
                .query_one(
                    &spent_sql(subject.per),
                    &[&periods.day_start_ms, &subject.id, &periods.month_start_ms],
                )
                .await
                .map_err(db_error)?;
            let tokens = |i| row.try_get::<_, i64>(i).map(|n| n.max(0) as u64);
            spent.tokens_today = tokens(0).map_err(db_error)?;
            spent.tokens_this_month = tokens(1).map_err(db_error)?;
            spent.cost_today = row.try_get(2).map_err(db_error)?;
            spent.cost_this_month = row.try_get(3).map_err(db_error)?;
        }
        spent_by.push((subject, spent));
    }
    let verdict = Verdict::of(admission, &spent_by);
    if verdict.refused.is_some() {
        return Ok(verdict);
    }
    if admission.rated() {
        tx.execute(FORGET_SQL, &[&minute_ago])
            .await
            .map_err(db_error)?;
        tx.execute(
            ADMIT_SQL,
            &[
                &admission.run_id,
                &admission.id_of(Per::Actor),
                &admission.id_of(Per::Conversation),
                &admission.id_of(Per::Bot),
                &admission.now_ms,
            ],
        )
        .await
        .map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(verdict)
}
