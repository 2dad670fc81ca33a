//! Where a service's accepted turns wait and where their record is kept:
//! the one seam between a service alone on its store ([`Local`]: the
//! in-memory scheduler and the SQLite journal) and one instance of
//! several on a shared store ([`Shared`]: PostgreSQL's queue and record).
//! Everything else about a run (its entry, its results, the cap on its
//! output, its metrics, shutdown) is the service's, the same for both.
//!
//! [`Local`]: super::local::Local
//! [`Shared`]: super::shared::Shared

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::cluster::ClusterError;
use super::{Cancelled, JournalError, JournalRun, Refused, RunEntry, Service};
use crate::protocol::AgentRunContext;

/// A backlog of turns and the record of runs.
#[async_trait]
pub(super) trait Backlog: Send + Sync {
    /// Accept a turn: its place taken and the record holding it before
    /// this returns; it then runs whatever happens to the caller.
    async fn submit(
        &self,
        service: &Arc<Service>,
        ctx: AgentRunContext,
        harness: String,
    ) -> Result<Arc<RunEntry>, Refused>;

    /// A run that is not in memory here, from the record.
    async fn past_run(&self, run_id: &str) -> Option<JournalRun>;

    /// A run that is not in memory here, to stream: one another instance
    /// runs or will run, followed from the record. `None` when the record
    /// cannot be followed (the embedded store: a run not in memory ended).
    async fn watch(&self, service: &Arc<Service>, run_id: &str) -> Option<Arc<RunEntry>>;

    /// Cancel a run that does not run here; `here` is its entry when this
    /// service has one (queued here, or mirrored from another instance).
    async fn cancel(
        &self,
        run_id: &str,
        here: Option<Arc<RunEntry>>,
    ) -> Result<Cancelled, ClusterError>;

    /// A conversation's turns that wait or run, when the record knows
    /// more than this service's memory (on a shared store: every
    /// instance's); `None`: the memory is the whole truth.
    async fn in_flight(
        &self,
        conversation: &str,
    ) -> Result<Option<Vec<crate::run::TurnNow>>, ClusterError> {
        let _ = conversation;
        Ok(None)
    }

    /// Turns waiting across conversations.
    fn queued(&self) -> usize;

    /// Forget finished runs older than `retention`; how many went.
    async fn prune(&self, retention: Duration) -> Result<u64, PruneError>;

    /// Start what runs beside the listener until `drained` (on a shared
    /// store: the claim loop, the heartbeat, the cluster's events).
    fn start(&self, service: &Arc<Service>, drained: CancellationToken);

    /// Shutdown began: `runs` are in memory here, new ones refused.
    fn closing(&self, runs: &HashMap<String, Arc<RunEntry>>);

    /// Every run here has ended: let the record know this service left.
    async fn leave(&self);
}

/// Why finished runs could not be forgotten: the record's own error.
#[derive(Debug, thiserror::Error)]
pub(super) enum PruneError {
    /// The service's journal.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The shared store.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}
