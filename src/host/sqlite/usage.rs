//! The run ledger in the embedded store (`host::usage`).

use rusqlite::{Connection, Transaction, params_from_iter, types::Value as Sql};

use super::{db_error, execute_cached};
use crate::host::HostResult;
use crate::host::budget::{
    ADD_SPENT_SQL, ADMIT_SQL, Admission, FORGET_SQL, Per, SPENT_SQL, Spent, Verdict, spent_adds,
    take_spent, turns_sql,
};
use crate::host::usage::{
    RunListQuery, TOTAL_COUNTS, UsageQuery, UsageRecord, UsageTotal, list_sql, totals_sql,
};

/// Record one run's usage, and add it to its subjects' running totals
/// (`host::budget`); a run recorded twice keeps its first row, counted
/// once.
pub(super) fn record(tx: &Transaction<'_>, row: &UsageRecord) -> HostResult<()> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let added = execute_cached(
        tx,
        "INSERT OR IGNORE INTO run_usage (run_id, bot_id, conversation_id, actor_id, harness, \
         model, started_ms, ended_ms, outcome, code, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, cost_usd) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        rusqlite::params![
            row.run_id,
            row.bot_id,
            row.conversation_id,
            row.actor_id,
            row.harness,
            row.model,
            row.started_ms,
            row.ended_ms,
            row.outcome,
            row.code,
            count(row.input_tokens),
            count(row.output_tokens),
            count(row.cache_read_tokens),
            count(row.cache_write_tokens),
            row.cost_usd,
        ],
    )
    .map_err(db_error)?;
    if added == 0 {
        return Ok(());
    }
    for add in spent_adds(row) {
        execute_cached(
            tx,
            ADD_SPENT_SQL,
            rusqlite::params![
                add.per,
                add.id,
                add.period,
                add.start_ms,
                add.tokens,
                add.cost_usd
            ],
        )
        .map_err(db_error)?;
    }
    Ok(())
}

/// The ledger summed as `query` asks, the latest group first.
pub(super) fn totals(conn: &Connection, query: &UsageQuery) -> HostResult<Vec<UsageTotal>> {
    let args: Vec<Sql> = [
        query.since_ms.map(Sql::Integer),
        query.actor.clone().map(Sql::Text),
        query.conversation.clone().map(Sql::Text),
        query.bot.clone().map(Sql::Text),
        query.harness.clone().map(Sql::Text),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut stmt = conn.prepare(&totals_sql(query)).map_err(db_error)?;
    let by = query.by;
    let rows = stmt
        .query_map(params_from_iter(args), |r| {
            let mut counts = [None; TOTAL_COUNTS];
            for (i, count) in counts.iter_mut().enumerate() {
                *count = r.get(i + 1)?;
            }
            Ok(UsageTotal::from_sums(
                by,
                r.get(0)?,
                counts,
                r.get(TOTAL_COUNTS + 1)?,
                r.get(TOTAL_COUNTS + 2)?,
            ))
        })
        .map_err(db_error)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(db_error)
}

/// The ledger's runs as `query` asks, newest first.
pub(super) fn runs(conn: &Connection, query: &RunListQuery) -> HostResult<Vec<UsageRecord>> {
    let mut args: Vec<Sql> = [
        &query.actor,
        &query.conversation,
        &query.harness,
        &query.run_id,
    ]
    .into_iter()
    .flatten()
    .map(|v| Sql::Text(v.clone()))
    .collect();
    if let Some((end, id)) = &query.before {
        args.extend([Sql::Integer(*end), Sql::Text(id.clone())]);
    }
    args.push(Sql::Integer(i64::from(query.limit)));
    let mut stmt = conn.prepare(&list_sql(query)).map_err(db_error)?;
    let rows = stmt
        .query_map(params_from_iter(args), |r| {
            let n = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
            Ok(UsageRecord {
                run_id: r.get(0)?,
                bot_id: r.get(1)?,
                conversation_id: r.get(2)?,
                actor_id: r.get(3)?,
                harness: r.get(4)?,
                model: r.get(5)?,
                started_ms: r.get(6)?,
                ended_ms: r.get(7)?,
                outcome: r.get(8)?,
                code: r.get(9)?,
                input_tokens: n(10)?,
                output_tokens: n(11)?,
                cache_read_tokens: n(12)?,
                cache_write_tokens: n(13)?,
                cost_usd: r.get(14)?,
            })
        })
        .map_err(db_error)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(db_error)
}

/// Admit a turn (`host::budget`): each subject's turns of the last minute
/// and spending this day and month, against its limits; the turn counted
/// when none is reached. The store's one writer makes it exact.
pub(super) fn admit(tx: &Transaction<'_>, admission: &Admission) -> HostResult<Verdict> {
    let periods = admission.periods();
    let minute_ago = admission.minute_ago_ms();
    let mut spent_by = Vec::new();
    for subject in &admission.subjects {
        let mut spent = Spent::default();
        if subject.limits.turns_per_minute.is_some() {
            let mut stmt = tx
                .prepare_cached(&turns_sql(subject.per))
                .map_err(db_error)?;
            let (turns, first): (i64, Option<i64>) = stmt
                .query_row(rusqlite::params![subject.id, minute_ago], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .map_err(db_error)?;
            spent.turns_last_minute = turns.max(0) as u64;
            spent.first_turn_ms = first;
        }
        if subject.limits.spends() {
            let mut stmt = tx.prepare_cached(SPENT_SQL).map_err(db_error)?;
            let rows = stmt
                .query_map(
                    rusqlite::params![
                        subject.per.key(),
                        subject.id,
                        periods.day_start_ms,
                        periods.month_start_ms
                    ],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, f64>(2)?,
                        ))
                    },
                )
                .map_err(db_error)?;
            for row in rows {
                let (period, tokens, cost) = row.map_err(db_error)?;
                take_spent(&mut spent, &period, tokens, cost);
            }
        }
        spent_by.push((subject, spent));
    }
    let verdict = Verdict::of(admission, &spent_by);
    if verdict.refused.is_some() {
        return Ok(verdict);
    }
    if admission.rated() {
        execute_cached(
            tx,
            FORGET_SQL,
            rusqlite::params![admission.forget_before_ms()],
        )
        .map_err(db_error)?;
        execute_cached(
            tx,
            ADMIT_SQL,
            rusqlite::params![
                admission.run_id,
                admission.id_of(Per::Actor),
                admission.id_of(Per::Conversation),
                admission.id_of(Per::Bot),
                admission.now_ms,
            ],
        )
        .map_err(db_error)?;
    }
    Ok(verdict)
}
