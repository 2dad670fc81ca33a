//! The embedded host: LangBot's host-side stores on one SQLite file (WAL)
//! plus a folder of artifact contents, for running the bridge with no
//! LangBot at all (the CLI's default, and every test's).
//!
//! Reads run on a small pool of connections and writes on one writer, all
//! on tokio's blocking threads, so WAL readers never wait for the writer and
//! the async runtime never waits on disk.

mod artifacts;
mod audit;
mod events;
mod knowledge;
mod kv;
mod streams;
mod transcript;
mod usage;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use serde_json::Value;

pub use audit::DEFAULT_AUDIT_RETENTION;
pub use knowledge::{KnowledgeReport, MAX_FILE_BYTES as MAX_KNOWLEDGE_FILE_BYTES};

use super::migrations::{Migration, pending};
use super::owners::{state_owner, storage_owner};
use super::{
    Api, ArtifactStore, AuditEntry, AuditRow, AuditSink, CursorCodec, EventQuery, HistoryQuery,
    HostProxy, HostResult, NewArtifact, NewEvent, NewTranscriptItem, RunScope, StateEntry, TurnLog,
};
use crate::protocol::{
    AgentAPIError, AgentEventRecord, ArtifactMetadata, ArtifactReadResult, EventPage, HistoryPage,
    HistorySearchResult, KnowledgeBaseResource, StateScope, StorageKind, TranscriptItem,
};

/// The embedded store's schema, step by step (`PRAGMA user_version` is
/// the last one applied).
pub static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "run usage",
        sql: include_str!("migrations/0002_run_usage.sql"),
    },
    Migration {
        version: 3,
        name: "budgets",
        sql: include_str!("migrations/0003_budgets.sql"),
    },
];
const DB_FILE: &str = "host.db";
const MAX_IDLE_READERS: usize = 8;

/// Why the store could not be opened: a message for the operator.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // fields: the path involved and the underlying error
pub enum OpenError {
    /// The data folder cannot be created.
    #[error("cannot create data folder {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    /// SQLite refused the file (corrupt, locked, not a database).
    #[error("cannot open host store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// A newer build wrote this store.
    #[error(
        "host store {path} has schema version {found}; this build knows up to {known} (upgrade harness-bridge)"
    )]
    Version {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// The audit writer thread could not start.
    #[error("cannot start the audit writer: {0}")]
    Thread(std::io::Error),
    /// The OS gave no random bytes for the cursor secret.
    #[error("no randomness for the store secret: {0}")]
    Random(String),
}

enum MigrateError {
    Sqlite(rusqlite::Error),
    Newer { found: i64, known: i64 },
}

/// Apply the migrations the store lacks, one transaction each. The version
/// is read inside the write transaction: two processes opening one store
/// at once apply each step once.
fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(MigrateError::Sqlite)?;
        let found: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(MigrateError::Sqlite)?;
        let steps =
            pending(MIGRATIONS, found).map_err(|known| MigrateError::Newer { found, known })?;
        let Some(step) = steps.first() else {
            return Ok(());
        };
        tx.execute_batch(step.sql).map_err(MigrateError::Sqlite)?;
        tx.pragma_update(None, "user_version", step.version)
            .map_err(MigrateError::Sqlite)?;
        tx.commit().map_err(MigrateError::Sqlite)?;
        tracing::debug!(
            version = step.version,
            name = step.name,
            "host store migrated"
        );
    }
}

/// Run a statement through the connection's statement cache: the same few
/// statements run every turn, and parsing them anew each time showed up
/// in the service's profile.
pub(crate) fn execute_cached(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

pub(crate) fn db_error(e: rusqlite::Error) -> AgentAPIError {
    AgentAPIError::runtime(format!("host store error: {e}"))
}

/// A write error, where a unique-constraint violation means `duplicate`.
pub(crate) fn write_error(e: rusqlite::Error, duplicate: impl FnOnce() -> String) -> AgentAPIError {
    match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            AgentAPIError::invalid_argument(duplicate())
        }
        other => db_error(other),
    }
}

/// SQLite rows read by position, for the shared record builders.
impl crate::host::rows::Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
}

struct Inner {
    dir: PathBuf,
    db_path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    audit: audit::AuditWriter,
    cursors: CursorCodec,
    /// The operator's knowledge bases: id → folder.
    knowledge: std::sync::RwLock<BTreeMap<String, PathBuf>>,
}

/// The embedded SQLite host. Cheap to clone; clones share the store.
#[derive(Clone)]
pub struct SqliteHost {
    inner: Arc<Inner>,
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "cache_size", -16_000)?;
    Ok(())
}

/// Put the store in WAL mode (kept in the file: once made, a look). A new
/// store's first openings race for it, and SQLite answers that change
/// with "database is locked" at once rather than through the busy
/// timeout: so it is tried again, for as long as the timeout.
fn into_wal(conn: &Connection) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    loop {
        let tried =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0));
        match tried {
            Ok(_) => return Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < std::time::Duration::from_secs(10) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}

impl SqliteHost {
    /// Open (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        std::fs::create_dir_all(dir.join("artifacts")).map_err(|source| OpenError::Folder {
            path: dir.to_path_buf(),
            source,
        })?;
        let db_path = dir.join(DB_FILE);
        let sqlite = |source| OpenError::Sqlite {
            path: db_path.clone(),
            source,
        };
        let mut writer = Connection::open(&db_path).map_err(sqlite)?;
        // The busy timeout first: another process may be opening the store.
        configure(&writer).map_err(sqlite)?;
        into_wal(&writer).map_err(sqlite)?;
        migrate(&mut writer).map_err(|e| match e {
            MigrateError::Sqlite(source) => OpenError::Sqlite {
                path: db_path.clone(),
                source,
            },
            MigrateError::Newer { found, known } => OpenError::Version {
                path: db_path.clone(),
                found,
                known,
            },
        })?;
        // Made by whichever opening comes first (another process may be
        // opening the store too): the one kept is the one read back.
        let mut fresh = vec![0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| OpenError::Random(e.to_string()))?;
        writer
            .execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('cursor_secret', ?1)",
                [&fresh],
            )
            .map_err(sqlite)?;
        let secret: Vec<u8> = writer
            .query_row(
                "SELECT value FROM meta WHERE key = 'cursor_secret'",
                [],
                |r| r.get(0),
            )
            .map_err(sqlite)?;
        let audit_conn = Connection::open(&db_path).map_err(sqlite)?;
        configure(&audit_conn).map_err(sqlite)?;
        let audit = audit::AuditWriter::start(audit_conn).map_err(OpenError::Thread)?;
        Ok(SqliteHost {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                db_path,
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
                audit,
                cursors: CursorCodec::new(&secret),
                knowledge: Default::default(),
            }),
        })
    }

    /// The data folder this store lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Serve `bases` (id → folder) as this host's knowledge bases, each
    /// indexed first: only what changed since the last pass is read into
    /// the index again. A folder that cannot be read fails the whole call,
    /// naming its base; the bases are served from then on either way.
    pub async fn index_knowledge(
        &self,
        bases: BTreeMap<String, PathBuf>,
    ) -> HostResult<Vec<(String, KnowledgeReport)>> {
        *self
            .inner
            .knowledge
            .write()
            .unwrap_or_else(|p| p.into_inner()) = bases.clone();
        let mut reports = Vec::with_capacity(bases.len());
        for (kb_id, folder) in bases {
            let id = kb_id.clone();
            let report = self
                .write(move |tx, _| knowledge::index(tx, &id, &folder))
                .await?;
            reports.push((kb_id, report));
        }
        Ok(reports)
    }

    fn knowledge_ids(&self) -> Vec<String> {
        self.inner
            .knowledge
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Run `f` on a pooled read connection, on a blocking thread.
    async fn read<T, F>(&self, f: F) -> HostResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Inner) -> HostResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            let conn = match pooled {
                Some(conn) => conn,
                None => {
                    let conn = Connection::open_with_flags(
                        &inner.db_path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(db_error)?;
                    configure(&conn).map_err(db_error)?;
                    conn
                }
            };
            let result = f(&conn, &inner);
            let mut readers = inner.readers.lock().unwrap_or_else(|p| p.into_inner());
            if readers.len() < MAX_IDLE_READERS {
                readers.push(conn);
            }
            result
        })
        .await
        .map_err(|e| AgentAPIError::runtime(format!("host store task failed: {e}")))?
    }

    /// Run `f` in a transaction on the writer, on a blocking thread.
    async fn write<T, F>(&self, f: F) -> HostResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>, &Inner) -> HostResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.writer.lock().unwrap_or_else(|p| p.into_inner());
            // Immediate: the write lock is taken (waiting out the busy
            // timeout) when the transaction begins. A deferred one that
            // reads first cannot become a writer once the audit thread's
            // connection has committed in between, and fails at once with
            // "database is locked" whatever the timeout.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db_error)?;
            let value = f(&tx, &inner)?;
            tx.commit().map_err(db_error)?;
            Ok(value)
        })
        .await
        .map_err(|e| AgentAPIError::runtime(format!("host store task failed: {e}")))?
    }

    /// Every state entry under one scope owner, for a person (`host state`).
    pub async fn state_dump(
        &self,
        scope: StateScope,
        owner: String,
    ) -> HostResult<Vec<StateEntry>> {
        self.read(move |conn, _| kv::state_dump(conn, scope, &owner))
            .await
    }

    /// Keep audit rows for `keep`: older ones are pruned now and about once
    /// an hour after, by the audit writer. Set by the commands that run
    /// turns (`run`, `serve`); a store only read (`host audit`) prunes nothing.
    pub fn keep_audit_for(&self, keep: std::time::Duration) -> HostResult<()> {
        self.inner.audit.keep_for(keep, audit::PRUNE_EVERY)
    }

    /// The newest audit rows, oldest first (`host audit`).
    pub async fn audit_tail(
        &self,
        run_id: Option<String>,
        limit: u32,
    ) -> HostResult<Vec<AuditRow>> {
        self.read(move |conn, inner| {
            inner.audit.flush_blocking()?;
            audit::tail(conn, run_id.as_deref(), limit)
        })
        .await
    }
}

#[async_trait]
impl HostProxy for SqliteHost {
    /// The embedded host has no tools of its own to offer.
    fn answers(&self, api: Api) -> bool {
        !matches!(api, Api::ToolDetail | Api::ToolCall)
    }

    /// The operator's folders, and only those.
    fn knowledge_bases(&self) -> Option<Vec<KnowledgeBaseResource>> {
        Some(
            self.knowledge_ids()
                .into_iter()
                .map(|kb_id| KnowledgeBaseResource {
                    kb_name: Some(kb_id.clone()),
                    kb_id,
                    kb_type: Some("folder".into()),
                    operations: Vec::new(),
                    extra: Default::default(),
                })
                .collect(),
        )
    }

    async fn history_page(
        &self,
        scope: &RunScope,
        query: &HistoryQuery,
    ) -> HostResult<HistoryPage> {
        let (scope, query) = (scope.clone(), query.clone());
        self.read(move |conn, inner| transcript::page(conn, &inner.cursors, &scope, &query))
            .await
    }

    async fn history_search(
        &self,
        scope: &RunScope,
        conversation_id: Option<&str>,
        query: &str,
        top_k: u32,
    ) -> HostResult<HistorySearchResult> {
        let scope = scope.clone();
        let conversation = conversation_id.map(str::to_string);
        let query = query.to_string();
        self.read(move |conn, inner| {
            transcript::search(
                conn,
                &inner.cursors,
                &scope,
                conversation.as_deref(),
                &query,
                top_k,
            )
        })
        .await
    }

    async fn event_get(&self, _scope: &RunScope, event_id: &str) -> HostResult<AgentEventRecord> {
        let event_id = event_id.to_string();
        self.read(move |conn, inner| events::get(conn, &inner.cursors, &event_id))
            .await
    }

    async fn event_page(&self, scope: &RunScope, query: &EventQuery) -> HostResult<EventPage> {
        let (scope, query) = (scope.clone(), query.clone());
        self.read(move |conn, inner| events::page(conn, &inner.cursors, &scope, &query))
            .await
    }

    async fn artifact_metadata(
        &self,
        _scope: &RunScope,
        artifact_id: &str,
    ) -> HostResult<ArtifactMetadata> {
        let id = artifact_id.to_string();
        self.read(move |conn, _| artifacts::metadata(conn, &id))
            .await
    }

    async fn artifact_read(
        &self,
        _scope: &RunScope,
        artifact_id: &str,
        offset: u64,
        length: u64,
    ) -> HostResult<ArtifactReadResult> {
        let id = artifact_id.to_string();
        self.read(move |conn, inner| artifacts::read(conn, &inner.dir, &id, offset, length))
            .await
    }

    async fn state_get(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<Option<Value>> {
        let owner = state_owner(scope, state)?;
        let key = key.to_string();
        self.read(move |conn, _| kv::state_get(conn, state, &owner, &key))
            .await
    }

    async fn state_set(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
        value: &Value,
    ) -> HostResult<()> {
        let owner = state_owner(scope, state)?;
        let (key, value) = (key.to_string(), value.clone());
        self.write(move |tx, _| kv::state_set(tx, state, &owner, &key, &value))
            .await
    }

    async fn state_delete(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<bool> {
        let owner = state_owner(scope, state)?;
        let key = key.to_string();
        self.write(move |tx, _| kv::state_delete(tx, state, &owner, &key))
            .await
    }

    async fn state_list(
        &self,
        scope: &RunScope,
        state: StateScope,
        prefix: Option<&str>,
        limit: u32,
    ) -> HostResult<Vec<StateEntry>> {
        let owner = state_owner(scope, state)?;
        let prefix = prefix.map(str::to_string);
        self.read(move |conn, _| kv::state_list(conn, state, &owner, prefix.as_deref(), limit))
            .await
    }

    async fn storage_get(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<Option<Vec<u8>>> {
        let owner = storage_owner(scope, area);
        let key = key.to_string();
        self.read(move |conn, _| kv::storage_get(conn, area, &owner, &key))
            .await
    }

    async fn storage_set(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
        value: &[u8],
    ) -> HostResult<()> {
        let owner = storage_owner(scope, area);
        let (key, value) = (key.to_string(), value.to_vec());
        self.write(move |tx, _| kv::storage_set(tx, area, &owner, &key, &value))
            .await
    }

    async fn storage_delete(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<bool> {
        let owner = storage_owner(scope, area);
        let key = key.to_string();
        self.write(move |tx, _| kv::storage_delete(tx, area, &owner, &key))
            .await
    }

    async fn storage_keys(&self, scope: &RunScope, area: StorageKind) -> HostResult<Vec<String>> {
        let owner = storage_owner(scope, area);
        self.read(move |conn, _| kv::storage_keys(conn, area, &owner))
            .await
    }

    async fn retrieve_knowledge(
        &self,
        _scope: &RunScope,
        kb_id: &str,
        query: &str,
        top_k: u32,
    ) -> HostResult<Vec<Value>> {
        if !self.knowledge_ids().iter().any(|id| id == kb_id) {
            return Err(crate::host::api::no_knowledge_base(kb_id));
        }
        let (kb_id, query) = (kb_id.to_string(), query.to_string());
        self.read(move |conn, _| knowledge::retrieve(conn, &kb_id, &query, top_k))
            .await
    }
}

#[async_trait]
impl TurnLog for SqliteHost {
    async fn append_event(&self, event: NewEvent) -> HostResult<AgentEventRecord> {
        self.write(move |tx, inner| events::append(tx, &inner.cursors, &event))
            .await
    }

    async fn append_transcript(&self, item: NewTranscriptItem) -> HostResult<TranscriptItem> {
        self.write(move |tx, inner| transcript::append(tx, &inner.cursors, &item))
            .await
    }

    async fn record_usage(&self, row: crate::host::usage::UsageRecord) -> HostResult<()> {
        self.write(move |tx, _| usage::record(tx, &row)).await
    }

    async fn usage_totals(
        &self,
        query: crate::host::usage::UsageQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageTotal>> {
        self.read(move |conn, _| usage::totals(conn, &query)).await
    }

    async fn usage_runs(
        &self,
        query: crate::host::usage::RunListQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageRecord>> {
        self.read(move |conn, _| usage::runs(conn, &query)).await
    }

    async fn admit_run(
        &self,
        admission: crate::host::budget::Admission,
    ) -> HostResult<crate::host::budget::Verdict> {
        self.write(move |tx, _| usage::admit(tx, &admission)).await
    }
}

#[async_trait]
impl ArtifactStore for SqliteHost {
    async fn put_artifact(
        &self,
        artifact: NewArtifact,
        content: Vec<u8>,
    ) -> HostResult<ArtifactMetadata> {
        let dir = self.inner.dir.clone();
        // Content goes to disk before the row exists, so a row never names
        // a file that is not there.
        let stored = tokio::task::spawn_blocking(move || artifacts::store_content(&dir, &content))
            .await
            .map_err(|e| AgentAPIError::runtime(format!("artifact write task failed: {e}")))??;
        self.write(move |tx, _| artifacts::insert(tx, &artifact, &stored))
            .await
    }
}

#[async_trait]
impl AuditSink for SqliteHost {
    async fn record_audit(&self, entry: AuditEntry) -> HostResult<()> {
        self.inner.audit.record(entry)
    }

    async fn audit_rows(&self, run_id: Option<String>, limit: u32) -> HostResult<Vec<AuditRow>> {
        self.audit_tail(run_id, limit).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_numbered_in_order() {
        crate::host::migrations::assert_numbered(super::MIGRATIONS);
    }
}
