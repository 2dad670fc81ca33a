//! The run ledger on PostgreSQL (`host::usage`).

use futures_util::future::try_join_all;
use tokio_postgres::types::ToSql;

use super::{Client, db_error, guard};
use crate::host::HostResult;
use crate::host::budget::{
    ADD_SPENT_SQL, ADMIT_SQL, Admission, FORGET_SQL, Per, SPENT_SQL, Spent, Subject, Verdict,
    spent_adds, take_spent, turns_sql,
};
use crate::host::usage::{
    RunListQuery, TOTAL_COUNTS, UsageQuery, UsageRecord, UsageTotal, list_sql, totals_sql,
};

/// Record one run's usage, and add it to its subjects' running totals
/// (`host::budget`), if `write_guard` still holds; a run recorded twice
/// keeps its first row, counted once.
pub(super) async fn record(
    client: &mut Client,
    write_guard: Option<&guard::WriteGuard>,
    row: &UsageRecord,
) -> HostResult<()> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, write_guard).await?;
    let added = tx
        .execute(
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
    if added > 0 {
        // Sent at once, run in one order (actor, conversation, bot; day,
        // month) for every run, so two runs' transactions never wait on
        // each other crosswise.
        let add = tx.prepare_cached(ADD_SPENT_SQL).await.map_err(db_error)?;
        let adds = spent_adds(row);
        let (txr, add) = (&tx, &add);
        try_join_all(adds.iter().map(|a| async move {
            let row: [&(dyn ToSql + Sync); 6] = [
                &a.per,
                &a.id,
                &a.period,
                &a.start_ms,
                &a.tokens,
                &a.cost_usd,
            ];
            txr.execute(add, &row).await
        }))
        .await
        .map_err(db_error)?;
    }
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
    if let Some(bot) = &query.bot {
        args.push(bot);
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
            let mut counts = [None; TOTAL_COUNTS];
            for (i, count) in counts.iter_mut().enumerate() {
                *count = r.try_get(i + 1)?;
            }
            Ok(UsageTotal::from_sums(
                query.by,
                r.try_get(0)?,
                counts,
                r.try_get(TOTAL_COUNTS + 1)?,
                r.try_get(TOTAL_COUNTS + 2)?,
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
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, write_guard).await?;
    let mut names: Vec<String> = admission.subjects.iter().map(|s| s.lock_name()).collect();
    names.sort();
    // Each batch sent at once (the server runs it in order): a round trip
    // for the locks, one for the reads, one for the writes.
    let lock = tx
        .prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .await
        .map_err(db_error)?;
    let (txr, lock) = (&tx, &lock);
    try_join_all(
        names
            .iter()
            .map(|name| async move { txr.execute(lock, &[name]).await }),
    )
    .await
    .map_err(db_error)?;
    let spent = try_join_all(
        admission
            .subjects
            .iter()
            .map(|subject| spent_by(txr, admission, subject)),
    )
    .await?;
    let spent_by: Vec<_> = admission.subjects.iter().zip(spent).collect();
    let verdict = Verdict::of(admission, &spent_by);
    if verdict.refused.is_some() {
        return Ok(verdict);
    }
    if admission.rated() {
        let forget = tx.prepare_cached(FORGET_SQL).await.map_err(db_error)?;
        let admit = tx.prepare_cached(ADMIT_SQL).await.map_err(db_error)?;
        let (actor, conversation, bot) = (
            admission.id_of(Per::Actor),
            admission.id_of(Per::Conversation),
            admission.id_of(Per::Bot),
        );
        let before = admission.forget_before_ms();
        let forgotten = async { txr.execute(&forget, &[&before]).await };
        let admitted = async {
            let row: [&(dyn ToSql + Sync); 5] = [
                &admission.run_id,
                &actor,
                &conversation,
                &bot,
                &admission.now_ms,
            ];
            txr.execute(&admit, &row).await
        };
        futures_util::try_join!(forgotten, admitted).map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(verdict)
}

/// What `subject` spent, as [`admit`] reads it: its last minute's turns
/// and its running totals, both asked at once.
async fn spent_by(
    tx: &deadpool_postgres::Transaction<'_>,
    admission: &Admission,
    subject: &Subject,
) -> HostResult<Spent> {
    let periods = admission.periods();
    let minute_ago = admission.minute_ago_ms();
    let turns = async {
        if subject.limits.turns_per_minute.is_none() {
            return Ok(None);
        }
        let stmt = tx.prepare_cached(&turns_sql(subject.per)).await?;
        tx.query_one(&stmt, &[&subject.id, &minute_ago])
            .await
            .map(Some)
    };
    let totals = async {
        if !subject.limits.spends() {
            return Ok(Vec::new());
        }
        let stmt = tx.prepare_cached(SPENT_SQL).await?;
        let per = subject.per.key();
        tx.query(
            &stmt,
            &[
                &per,
                &subject.id,
                &periods.day_start_ms,
                &periods.month_start_ms,
            ],
        )
        .await
    };
    let (turns, totals) = futures_util::try_join!(turns, totals).map_err(db_error)?;
    let mut spent = Spent::default();
    if let Some(row) = turns {
        spent.turns_last_minute = row.try_get::<_, i64>(0).map_err(db_error)?.max(0) as u64;
        spent.first_turn_ms = row.try_get(1).map_err(db_error)?;
    }
    for row in totals {
        let period: String = row.try_get(0).map_err(db_error)?;
        take_spent(
            &mut spent,
            &period,
            row.try_get(1).map_err(db_error)?,
            row.try_get(2).map_err(db_error)?,
        );
    }
    Ok(spent)
}
