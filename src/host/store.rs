//! Which host store a command uses: the embedded SQLite store in a folder
//! (the default, no server), or PostgreSQL (a `postgres://` URL) for
//! several bridges sharing one store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::postgres::PgHost;
use super::sqlite::SqliteHost;
use super::{AuditRow, HostApi, HostResult, StateEntry};
use crate::protocol::StateScope;

/// Where the store is, as the operator named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAt {
    /// The embedded store's folder.
    Folder(PathBuf),
    /// A PostgreSQL connection URL (may hold a password: never printed).
    Postgres(String),
}

impl StoreAt {
    /// `text` as a store: a `postgres://` or `postgresql://` URL, else a
    /// folder, relative ones taken from `base`.
    pub fn parse(text: &str, base: &Path) -> StoreAt {
        if super::postgres::is_url(text) {
            StoreAt::Postgres(text.to_string())
        } else {
            StoreAt::Folder(base.join(text))
        }
    }

    /// How logs and messages name it: a folder's path, or the database
    /// (without user or password).
    pub fn describe(&self) -> String {
        match self {
            StoreAt::Folder(dir) => dir.display().to_string(),
            StoreAt::Postgres(url) => super::postgres::describe_url(url),
        }
    }
}

/// Why a store did not open, as its kind said it: the operator's message.
#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    /// The embedded store.
    #[error(transparent)]
    Sqlite(#[from] super::sqlite::OpenError),
    /// The PostgreSQL store.
    #[error(transparent)]
    Postgres(#[from] super::postgres::PgOpenError),
}

/// An open store of either kind.
#[derive(Clone)]
pub enum Store {
    /// The embedded store.
    Sqlite(SqliteHost),
    /// PostgreSQL.
    Postgres(PgHost),
}

impl Store {
    /// Open (and migrate) the store at `at`.
    pub async fn open(at: &StoreAt) -> Result<Store, StoreOpenError> {
        Ok(match at {
            StoreAt::Folder(dir) => Store::Sqlite(SqliteHost::open(dir)?),
            StoreAt::Postgres(url) => Store::Postgres(PgHost::connect(url).await?),
        })
    }

    /// The store as the bridge holds it.
    pub fn host(&self) -> Arc<dyn HostApi> {
        match self {
            Store::Sqlite(s) => Arc::new(s.clone()),
            Store::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// Keep audit rows for `keep`; older ones are pruned now and hourly.
    pub fn keep_audit_for(&self, keep: Duration) -> HostResult<()> {
        match self {
            Store::Sqlite(s) => s.keep_audit_for(keep),
            Store::Postgres(s) => s.keep_audit_for(keep),
        }
    }

    /// Every state entry under one owner (`host state`).
    pub async fn state_dump(
        &self,
        scope: StateScope,
        owner: String,
    ) -> HostResult<Vec<StateEntry>> {
        match self {
            Store::Sqlite(s) => s.state_dump(scope, owner).await,
            Store::Postgres(s) => s.state_dump(scope, owner).await,
        }
    }

    /// The run ledger summed as `query` asks (`host usage`).
    pub async fn usage_totals(
        &self,
        query: crate::host::usage::UsageQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageTotal>> {
        self.host().usage_totals(query).await
    }

    /// The newest audit rows, oldest first (`host audit`).
    pub async fn audit_tail(
        &self,
        run_id: Option<String>,
        limit: u32,
    ) -> HostResult<Vec<AuditRow>> {
        match self {
            Store::Sqlite(s) => s.audit_tail(run_id, limit).await,
            Store::Postgres(s) => s.audit_tail(run_id, limit).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_databases_and_the_rest_folders() {
        let base = Path::new("/etc/hb");
        assert_eq!(
            StoreAt::parse("postgres://u:secret@db:5432/hb", base),
            StoreAt::Postgres("postgres://u:secret@db:5432/hb".into())
        );
        assert_eq!(
            StoreAt::parse("./store", base),
            StoreAt::Folder(base.join("./store"))
        );
        assert_eq!(
            StoreAt::parse("/var/hb", base),
            StoreAt::Folder("/var/hb".into())
        );
        let shown = StoreAt::parse("postgres://u:secret@db:5432/hb", base).describe();
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("hb"), "{shown}");
    }
}
