//! The audit table on PostgreSQL: one task writes what calls queued, all
//! that queued while it was busy in one statement, so a call never waits
//! on the database for its audit row. Readers flush first.

use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::{Client, db_error, describe};
use crate::host::{AuditEntry, AuditRow, HostResult, now_ms};
use crate::protocol::AgentAPIError;

/// How often the writer prunes, once a retention is set.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Rows deleted per statement: a backlog is pruned in steps.
const PRUNE_BATCH: i64 = 10_000;

enum Message {
    Row(AuditEntry),
    Flush(oneshot::Sender<()>),
    Retain(Duration),
}

/// The handle to the audit writer task.
pub(super) struct AuditWriter {
    queue: mpsc::UnboundedSender<Message>,
}

impl AuditWriter {
    /// Start the writer on the current runtime.
    pub(super) fn start(pool: Pool) -> Self {
        let (queue, mut inbox) = mpsc::unbounded_channel::<Message>();
        tokio::spawn(async move {
            let mut keep: Option<(Duration, Option<Instant>)> = None;
            while let Some(first) = inbox.recv().await {
                let mut rows = Vec::new();
                let mut waiting = Vec::new();
                let mut next = Some(first);
                while let Some(message) = next {
                    match message {
                        Message::Row(row) => rows.push(row),
                        Message::Flush(done) => waiting.push(done),
                        Message::Retain(k) => keep = Some((k, None)),
                    }
                    next = inbox.try_recv().ok();
                }
                if !rows.is_empty()
                    && let Err(e) = write_batch(&pool, &rows).await
                {
                    tracing::error!(error = %e, rows = rows.len(), "could not write audit rows");
                }
                if let Some((k, last)) = keep.as_mut()
                    && last.is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
                {
                    *last = Some(Instant::now());
                    match prune(&pool, *k).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(rows = n, "pruned audit rows past retention"),
                        Err(e) => tracing::error!(error = %e, "could not prune audit rows"),
                    }
                }
                for done in waiting {
                    let _ = done.send(());
                }
            }
        });
        AuditWriter { queue }
    }

    fn send(&self, message: Message) -> HostResult<()> {
        self.queue
            .send(message)
            .map_err(|_| AgentAPIError::runtime("the audit writer has stopped"))
    }

    /// Queue one row.
    pub(super) fn record(&self, entry: AuditEntry) -> HostResult<()> {
        self.send(Message::Row(entry))
    }

    /// Keep rows for `keep`: older ones are pruned at once and then hourly.
    pub(super) fn keep_for(&self, keep: Duration) -> HostResult<()> {
        self.send(Message::Retain(keep))
    }

    /// Wait until every row queued before now is written.
    pub(super) async fn flush(&self) -> HostResult<()> {
        let (done, wait) = oneshot::channel();
        self.send(Message::Flush(done))?;
        wait.await
            .map_err(|_| AgentAPIError::runtime("the audit writer has stopped"))
    }
}

async fn write_batch(pool: &Pool, rows: &[AuditEntry]) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let column = |f: fn(&AuditEntry) -> &String| rows.iter().map(f).collect::<Vec<_>>();
    let at: Vec<i64> = rows.iter().map(|r| r.at_ms).collect();
    client
        .execute(
            "INSERT INTO audit (at_ms, run_id, runner_id, action, resource, scope, outcome, detail)
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::text[])",
            &[
                &at,
                &column(|r| &r.run_id),
                &column(|r| &r.runner_id),
                &column(|r| &r.action),
                &column(|r| &r.resource),
                &column(|r| &r.scope),
                &column(|r| &r.outcome),
                &column(|r| &r.detail),
            ],
        )
        .await
        .map_err(|e| describe(&e))?;
    Ok(())
}

async fn prune(pool: &Pool, keep: Duration) -> Result<u64, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let before = now_ms() - keep.as_millis() as i64;
    let mut total = 0;
    loop {
        let n = client
            .execute(
                "DELETE FROM audit WHERE id IN
                     (SELECT id FROM audit WHERE at_ms < $1 ORDER BY id LIMIT $2)",
                &[&before, &PRUNE_BATCH],
            )
            .await
            .map_err(|e| describe(&e))?;
        total += n;
        if n < PRUNE_BATCH as u64 {
            return Ok(total);
        }
    }
}

/// The newest `limit` rows (of one run, if given), oldest first.
pub(super) async fn tail(
    client: &Client,
    run_id: Option<&str>,
    limit: u32,
) -> HostResult<Vec<AuditRow>> {
    // One text per case: a run's rows are read through its index only
    // when the filter is not an `OR`.
    let sql = match run_id {
        Some(_) => {
            "SELECT id, at_ms, run_id, runner_id, action, resource, scope, outcome, detail \
             FROM audit WHERE run_id = $1 ORDER BY id DESC LIMIT $2"
        }
        None => {
            "SELECT id, at_ms, run_id, runner_id, action, resource, scope, outcome, detail \
             FROM audit WHERE $1::text IS NULL ORDER BY id DESC LIMIT $2"
        }
    };
    let rows = client
        .query(sql, &[&run_id, &i64::from(limit)])
        .await
        .map_err(db_error)?;
    let mut out = rows
        .iter()
        .map(|r| {
            Ok(AuditRow {
                id: r.try_get(0)?,
                entry: AuditEntry {
                    at_ms: r.try_get(1)?,
                    run_id: r.try_get(2)?,
                    runner_id: r.try_get(3)?,
                    action: r.try_get(4)?,
                    resource: r.try_get(5)?,
                    scope: r.try_get(6)?,
                    outcome: r.try_get(7)?,
                    detail: r.try_get(8)?,
                },
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        .map_err(db_error)?;
    out.reverse();
    Ok(out)
}
