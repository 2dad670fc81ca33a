//! The host side of the protocol: the proxy API a runner may call (§8),
//! the run grants that authorize each call, and the embedded SQLite host.
//!
//! [`HostApi`] is deliberately *unauthorized*: it is the storage surface.
//! Every runner-facing call goes through a [`GrantedHost`], which checks the
//! run's grant (active, API allowed, scope, size, rate, deadline) and writes
//! an audit row, so the same checks apply whichever host sits behind it.

// Request and record fields mirror the protocol types they feed (see
// `protocol`); only non-obvious ones are documented.
#[allow(missing_docs)]
mod api;
pub mod budget;
pub mod calls;
mod cursor;
mod grant;
pub mod meter;
pub mod migrations;
pub mod owners;
pub mod paging;
pub mod postgres;
pub mod rows;
pub mod sqlite;
pub mod store;
pub mod usage;
pub mod words;

pub use api::*;

/// The host's roles in one import, for calling their methods on a concrete
/// store (a `dyn HostApi` has them all already).
pub mod prelude {
    pub use super::{ArtifactStore, AuditSink, HostApi, HostProxy, TurnLog};
}
pub use calls::{EventQuery, HistoryQuery, HostCall};
pub use cursor::{Cursor, CursorCodec, CursorKind};
pub use grant::*;
