//! The audit table: one row per proxy call, allowed or refused (§11).
//!
//! Rows are written by one dedicated thread with its own connection. A
//! call only queues its row (no disk wait on the call's path); the thread
//! writes whatever queued while it was busy in one transaction, so under
//! load rows are batched and when idle each row lands within microseconds.
//! Readers flush first, so an audit read sees every row recorded before it.
//! What a crash can lose is the queue of that instant, never a written row.
//!
//! Rows older than the retention the store's user sets (`keep_for`) are
//! pruned by the same thread: at once, then after a batch now and then.
//! A store opened without one (a read with `host audit`) prunes nothing.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::db_error;
use crate::host::{AuditEntry, AuditRow, HostResult, now_ms};
use crate::protocol::AgentAPIError;

/// How long audit rows are kept when the operator says nothing: long
/// enough to look back on an incident, short enough that the table of a
/// busy bridge does not grow without end.
pub const DEFAULT_AUDIT_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

/// How often the writer prunes, once a retention is set.
pub(super) const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Rows deleted per statement: a large backlog is pruned in steps, so the
/// store's other writer never waits long for the lock.
const PRUNE_BATCH: i64 = 10_000;

enum Message {
    Row(AuditEntry),
    /// Answer once every row queued before this one is written.
    Flush(mpsc::SyncSender<()>),
    /// Keep rows for `keep`; prune now and every `every` after.
    Retain {
        keep: Duration,
        every: Duration,
    },
}

/// When and what the writer prunes.
struct Retention {
    keep: Duration,
    every: Duration,
    last: Option<Instant>,
}

impl Retention {
    fn due(&self) -> bool {
        self.last.is_none_or(|at| at.elapsed() >= self.every)
    }
}

/// The handle to the audit writer thread.
pub(super) struct AuditWriter {
    queue: mpsc::Sender<Message>,
}

impl AuditWriter {
    /// Start the writer thread on its own connection.
    pub(super) fn start(mut conn: Connection) -> std::io::Result<Self> {
        let (queue, inbox) = mpsc::channel::<Message>();
        std::thread::Builder::new().name("audit-writer".into()).spawn(move || {
            let mut retention: Option<Retention> = None;
            while let Ok(first) = inbox.recv() {
                let mut rows = Vec::new();
                let mut waiting = Vec::new();
                for message in std::iter::once(first).chain(inbox.try_iter()) {
                    match message {
                        Message::Row(row) => rows.push(row),
                        Message::Flush(done) => waiting.push(done),
                        Message::Retain { keep, every } => {
                            retention = Some(Retention {
                                keep,
                                every,
                                last: None,
                            });
                        }
                    }
                }
                if !rows.is_empty()
                    && let Err(e) = write_batch(&mut conn, &rows)
                {
                    tracing::error!(error = %e, rows = rows.len(), "could not write audit rows");
                }
                if let Some(retention) = retention.as_mut().filter(|r| r.due()) {
                    retention.last = Some(Instant::now());
                    match prune(&conn, retention.keep) {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(rows = n, "pruned audit rows past retention"),
                        Err(e) => tracing::error!(error = %e, "could not prune audit rows"),
                    }
                }
                for done in waiting {
                    let _ = done.send(());
                }
            }
        })?;
        Ok(AuditWriter { queue })
    }

    /// Queue one row.
    pub(super) fn record(&self, entry: AuditEntry) -> HostResult<()> {
        self.queue
            .send(Message::Row(entry))
            .map_err(|_| AgentAPIError::runtime("the audit writer has stopped"))
    }

    /// Keep rows for `keep` from now on: older ones are pruned at once and
    /// then every `every`.
    pub(super) fn keep_for(&self, keep: Duration, every: Duration) -> HostResult<()> {
        self.queue
            .send(Message::Retain { keep, every })
            .map_err(|_| AgentAPIError::runtime("the audit writer has stopped"))
    }

    /// Wait (blocking) until every row queued so far is written.
    pub(super) fn flush_blocking(&self) -> HostResult<()> {
        let (done, wait) = mpsc::sync_channel(1);
        self.queue
            .send(Message::Flush(done))
            .map_err(|_| AgentAPIError::runtime("the audit writer has stopped"))?;
        wait.recv()
            .map_err(|_| AgentAPIError::runtime("the audit writer has stopped"))
    }
}

impl Drop for AuditWriter {
    /// The last handle going away (a CLI command ending, a server shutting
    /// down) writes what is queued before the process can exit.
    fn drop(&mut self) {
        let _ = self.flush_blocking();
    }
}

/// Delete the rows older than `keep`. Rows are appended in time order, so
/// the old ones are those below the first row young enough: found by a walk
/// from the oldest, as long as what is pruned, with no index on time to
/// keep up on every write.
fn prune(conn: &Connection, keep: Duration) -> rusqlite::Result<usize> {
    let cutoff = now_ms().saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX));
    let first_kept: Option<i64> = conn
        .query_row(
            "SELECT id FROM audit WHERE at_ms >= ?1 ORDER BY id LIMIT 1",
            [cutoff],
            |r| r.get(0),
        )
        .optional()?;
    let below = first_kept.unwrap_or(i64::MAX);
    let mut pruned = 0;
    loop {
        let n = conn.execute(
            "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE id < ?1 ORDER BY id LIMIT ?2)",
            params![below, PRUNE_BATCH],
        )?;
        pruned += n;
        if (n as i64) < PRUNE_BATCH {
            return Ok(pruned);
        }
    }
}

fn write_batch(conn: &mut Connection, rows: &[AuditEntry]) -> HostResult<()> {
    // Immediate, as the store's writer: see `SqliteHost::write`.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db_error)?;
    for row in rows {
        insert(&tx, row)?;
    }
    tx.commit().map_err(db_error)
}

fn insert(tx: &Transaction<'_>, e: &AuditEntry) -> HostResult<()> {
    tx.prepare_cached(
        "INSERT INTO audit (at_ms, run_id, runner_id, action, resource, scope, outcome, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut s| {
        s.execute(params![
            e.at_ms,
            e.run_id,
            e.runner_id,
            e.action,
            e.resource,
            e.scope,
            e.outcome,
            e.detail
        ])
    })
    .map_err(db_error)?;
    Ok(())
}

/// The newest `limit` rows (of one run, if given), oldest first.
pub(super) fn tail(
    conn: &Connection,
    run_id: Option<&str>,
    limit: u32,
) -> HostResult<Vec<AuditRow>> {
    // One text per case: SQLite reads a run's rows through its index only
    // when the filter is not an `OR`.
    let sql = match run_id {
        Some(_) => {
            "SELECT id, at_ms, run_id, runner_id, action, resource, scope, outcome, detail \
             FROM audit WHERE run_id = ?1 ORDER BY id DESC LIMIT ?2"
        }
        None => {
            "SELECT id, at_ms, run_id, runner_id, action, resource, scope, outcome, detail \
             FROM audit WHERE ?1 IS NULL ORDER BY id DESC LIMIT ?2"
        }
    };
    let mut stmt = conn.prepare_cached(sql).map_err(db_error)?;
    let mut rows = stmt
        .query_map(params![run_id, i64::from(limit)], |r| {
            Ok(AuditRow {
                id: r.get(0)?,
                entry: AuditEntry {
                    at_ms: r.get(1)?,
                    run_id: r.get(2)?,
                    runner_id: r.get(3)?,
                    action: r.get(4)?,
                    resource: r.get(5)?,
                    scope: r.get(6)?,
                    outcome: r.get(7)?,
                    detail: r.get(8)?,
                },
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(db_error)?;
    rows.reverse();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(at_ms: i64, action: &str) -> AuditEntry {
        AuditEntry {
            at_ms,
            run_id: "r".into(),
            runner_id: String::new(),
            action: action.into(),
            resource: String::new(),
            scope: String::new(),
            outcome: "ok".into(),
            detail: String::new(),
        }
    }

    fn actions(dir: &std::path::Path) -> Vec<String> {
        let conn = Connection::open(dir.join("host.db")).unwrap();
        tail(&conn, None, 100)
            .unwrap()
            .into_iter()
            .map(|r| r.entry.action)
            .collect()
    }

    #[test]
    fn rows_past_the_retention_are_pruned_at_once_and_then_now_and_then() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::SqliteHost::open(dir.path()).unwrap();
        drop(store);
        let writer =
            AuditWriter::start(Connection::open(dir.path().join("host.db")).unwrap()).unwrap();
        let day = 24 * 3600 * 1000;
        let now = now_ms();
        writer.record(row(now - 40 * day, "old")).unwrap();
        writer.record(row(now - 2 * day, "recent")).unwrap();
        writer.flush_blocking().unwrap();
        // Without a retention, nothing goes.
        assert_eq!(actions(dir.path()), ["old", "recent"]);

        let keep = |days: u64, every: Duration| {
            writer
                .keep_for(Duration::from_secs(days * 24 * 3600), every)
                .unwrap();
            writer.flush_blocking().unwrap();
        };
        let hour = Duration::from_secs(3600);
        keep(30, Duration::ZERO);
        assert_eq!(actions(dir.path()), ["recent"]);
        // A new retention applies at once...
        keep(1, hour);
        assert!(actions(dir.path()).is_empty());
        // ...then only when the interval has passed...
        writer.record(row(now - 35 * day, "old2")).unwrap();
        writer.flush_blocking().unwrap();
        assert_eq!(actions(dir.path()), ["old2"]);
        // ...after a batch (here every batch: the interval is zero).
        keep(30, Duration::ZERO);
        writer.record(row(now - 35 * day, "old3")).unwrap();
        writer.record(row(now, "new")).unwrap();
        writer.flush_blocking().unwrap();
        assert_eq!(actions(dir.path()), ["new"]);
    }
}
