//! Writes that commit only while a condition holds: how a caller holding
//! a lease (the service's run on a shared queue) makes every write of its
//! run land only while it holds it. The host knows nothing of what the
//! condition means; it runs the caller's query first, in the write's own
//! transaction, and refuses the write when no row comes back.
//!
//! The row the query reads is locked `FOR SHARE` until the write commits,
//! so whoever ends the lease (an `UPDATE` of that row) waits for the
//! write, or the write waits for them and then finds no row: never a
//! write that lands after the lease was lost.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::db_error;
use crate::host::HostResult;
use crate::protocol::AgentAPIError;

/// The condition, as a query that returns a row while writes may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteGuard {
    /// The query (it should end in `FOR SHARE`); `$1`, `$2`, ... are
    /// `args`, as text (cast in the query where a column is not).
    pub sql: &'static str,
    /// Its arguments.
    pub args: Vec<String>,
    /// What a refused write tells its caller (`unauthorized`).
    pub refusal: String,
}

/// Run `guard`'s query in `tx` (the write's transaction); a write with no
/// guard always goes on.
pub(super) async fn check(tx: &impl GenericClient, guard: Option<&WriteGuard>) -> HostResult<()> {
    let Some(guard) = guard else {
        return Ok(());
    };
    let stmt = tx.prepare_cached(guard.sql).await.map_err(db_error)?;
    let args: Vec<&(dyn ToSql + Sync)> = guard
        .args
        .iter()
        .map(|a| a as &(dyn ToSql + Sync))
        .collect();
    match tx.query_opt(&stmt, &args).await.map_err(db_error)? {
        Some(_) => Ok(()),
        None => Err(AgentAPIError::unauthorized(guard.refusal.clone())),
    }
}
