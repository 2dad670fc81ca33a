//! The run ledger on PostgreSQL (`host::usage`).

use tokio_postgres::types::ToSql;

use super::{Client, db_error, guard};
use crate::host::HostResult;
use crate::host::usage::{UsageQuery, UsageRecord, UsageTotal, totals_sql};

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
