//! Why the shared queue could not do what was asked: the database's own
//! error kept as the source, its message as the sentence.

use crate::host::postgres::{PgOpenError, describe};

/// A queue or results operation that did not go through. Each caller
/// logs it, or answers with it, once.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No connection could be had from the pool.
    #[error("the shared store is unavailable: {0}")]
    Unavailable(#[source] deadpool_postgres::PoolError),
    /// A statement failed, or the server went away (the server's own
    /// message where it gave one).
    #[error("{}", describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The store URL gives no connection to listen on.
    #[error(transparent)]
    Url(#[from] PgOpenError),
    /// Another `serve` registered under this instance's id.
    #[error(
        "another serve runs as instance `{0}` on this database; give each instance its own instance_id"
    )]
    InstanceTaken(String),
    /// What a previous start of this instance left running could not be
    /// ended, so this start does not register.
    #[error("cannot end the previous start's runs: {0}")]
    PreviousStart(#[source] Box<ClusterError>),
    /// The run no longer holds its fence: its instance was declared dead.
    #[error(
        "run {0} lost its fence (this instance was declared dead); its results are no longer kept"
    )]
    FenceLost(String),
    /// A batch of results was not written after a few tries.
    #[error("cannot write the run's results: {0}")]
    Results(#[source] Box<ClusterError>),
    /// The notification connection closed while it subscribed.
    #[error("the connection closed")]
    Closed,
}
