//! The audit table: one row per proxy call, allowed or refused (§11).
//!
//! Rows are written by one dedicated thread with its own connection. A
//! call only queues its row (no disk wait on the call's path); the thread
//! writes whatever queued while it was busy in one transaction, so under
//! load rows are batched and when idle each row lands within microseconds.
//! Readers flush first, so an audit read sees every row recorded before it.
//! What a crash can lose is the queue of that instant, never a written row.

use std::sync::mpsc;

use rusqlite::{Connection, Transaction, params};
use serde::Serialize;

use super::db_error;
use crate::host::{AuditEntry, HostResult};
use crate::protocol::AgentAPIError;

enum Message {
    Row(AuditEntry),
    /// Answer once every row queued before this one is written.
    Flush(mpsc::SyncSender<()>),
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
            while let Ok(first) = inbox.recv() {
                let mut rows = Vec::new();
                let mut waiting = Vec::new();
                for message in std::iter::once(first).chain(inbox.try_iter()) {
                    match message {
                        Message::Row(row) => rows.push(row),
                        Message::Flush(done) => waiting.push(done),
                    }
                }
                if !rows.is_empty()
                    && let Err(e) = write_batch(&mut conn, &rows)
                {
                    tracing::error!(error = %e, rows = rows.len(), "could not write audit rows");
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

fn write_batch(conn: &mut Connection, rows: &[AuditEntry]) -> HostResult<()> {
    let tx = conn.transaction().map_err(db_error)?;
    for row in rows {
        insert(&tx, row)?;
    }
    tx.commit().map_err(db_error)
}

/// An audit row as read back, with its position in the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    /// Position in the log; increases with every row.
    pub id: i64,
    /// The row itself.
    #[serde(flatten)]
    pub entry: AuditEntry,
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
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, at_ms, run_id, runner_id, action, resource, scope, outcome, detail FROM audit
             WHERE ?1 IS NULL OR run_id = ?1 ORDER BY id DESC LIMIT ?2",
        )
        .map_err(db_error)?;
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
