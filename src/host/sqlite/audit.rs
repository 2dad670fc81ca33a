//! The audit table: one row per proxy call, allowed or refused (§11).

use rusqlite::{Connection, Transaction, params};
use serde::Serialize;

use super::db_error;
use crate::host::{AuditEntry, HostResult};

/// An audit row as read back, with its position in the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    /// Position in the log; increases with every row.
    pub id: i64,
    /// The row itself.
    #[serde(flatten)]
    pub entry: AuditEntry,
}

pub(super) fn insert(tx: &Transaction<'_>, e: &AuditEntry) -> HostResult<()> {
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
