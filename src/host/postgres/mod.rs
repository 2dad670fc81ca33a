//! The host store on PostgreSQL, for many bridges on one database: the
//! embedded store's tables and rules (paging, owners, search words are
//! `host`'s, shared), a connection pool instead of one file, artifact
//! contents as `bytea` up to a cap, search over a stored `tsvector`.
//!
//! A store URL (`postgres://user@host:port/db`) may carry a password:
//! it is never logged, and errors name the database, not the URL.

mod artifacts;
mod audit;
mod guard;
mod history;
mod kv;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::Value;
use tokio_postgres::NoTls;

pub use artifacts::MAX_CONTENT_BYTES;
pub use guard::WriteGuard;

use super::migrations::{Migration, pending};
use super::owners::{state_owner, storage_owner};
use super::{
    Api, ArtifactStore, AuditEntry, AuditRow, AuditSink, CursorCodec, EventQuery, HistoryQuery,
    HostProxy, HostResult, NewArtifact, NewEvent, NewTranscriptItem, RunScope, StateEntry, TurnLog,
};
use crate::protocol::{
    AgentAPIError, AgentEventRecord, ArtifactMetadata, ArtifactReadResult, EventPage, HistoryPage,
    HistorySearchResult, StateScope, StorageKind, TranscriptItem,
};

/// The PostgreSQL store's schema, step by step (`schema_migrations` holds
/// the versions applied).
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

/// Connections a store keeps open at most: enough for a service's
/// concurrent turns and their host calls, few enough that several
/// instances stay well inside the server's `max_connections` (100).
const POOL_SIZE: usize = 16;

/// Why the store could not be opened: a message for the operator.
#[derive(Debug, thiserror::Error)]
pub enum PgOpenError {
    /// The URL does not parse.
    #[error("the store URL is not a PostgreSQL connection string: {0}")]
    Url(String),
    /// The server refused or is not there.
    #[error("cannot reach the PostgreSQL store (database {database}): {reason}")]
    Connect {
        /// The database named by the URL.
        database: String,
        /// What the server or the network said.
        reason: String,
    },
    /// A newer build migrated this database.
    #[error(
        "the PostgreSQL store's {component} tables have schema version {found}; this build knows up to {known} (upgrade harness-bridge)"
    )]
    Version {
        /// Whose tables.
        component: String,
        /// The version the database records.
        found: i64,
        /// The last this build has.
        known: i64,
    },
}

/// A PostgreSQL error as a sentence: the server's own message where it
/// gave one (`tokio_postgres::Error` alone says only "db error").
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

pub(crate) fn db_error(e: tokio_postgres::Error) -> AgentAPIError {
    AgentAPIError::runtime(format!("host store error: {}", describe(&e)))
}

/// A write error, where a unique-constraint violation means `duplicate`.
pub(crate) fn write_error(
    e: tokio_postgres::Error,
    duplicate: impl FnOnce() -> String,
) -> AgentAPIError {
    if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
        AgentAPIError::invalid_argument(duplicate())
    } else {
        db_error(e)
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> AgentAPIError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_error(e),
        other => AgentAPIError::runtime(format!("host store unavailable: {other}")),
    }
}

/// PostgreSQL rows read by position, for the shared record builders.
impl crate::host::rows::Columns for tokio_postgres::Row {
    type Error = tokio_postgres::Error;
    fn text(&self, i: usize) -> Result<Option<String>, Self::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error> {
        self.try_get(i)
    }
}

/// A pooled connection.
pub(crate) type Client = deadpool_postgres::Object;

struct Inner {
    pool: Pool,
    cursors: CursorCodec,
    audit: audit::AuditWriter,
}

/// The host store on PostgreSQL. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PgHost {
    inner: Arc<Inner>,
    /// What every write of this handle must find true ([`PgHost::guarded`]).
    guard: Option<Arc<WriteGuard>>,
}

/// Whether `store` (bridge.yaml's `store`, or `--store`) names a
/// PostgreSQL database rather than a folder.
pub fn is_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

/// How long the server lets one of this store's transactions sit open
/// with nothing asked: a bridge paused mid-transaction (a stopped process,
/// a frozen machine) would otherwise hold its row locks for as long as it
/// stays paused, and the other instances could neither take its
/// conversations nor end its turns. Its own transactions are a few
/// milliseconds of statements.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// How long opening a connection may take: the socket's connect (unless
/// the URL sets `connect_timeout`), and the whole of a pooled
/// connection's creation (connect, authenticate). A server that does not
/// answer is an error the caller sees, not a wait without end.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call waits for a free pooled connection.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// How long a dead peer may leave sent data unacknowledged before the
/// connection fails (unless the URL sets `tcp_user_timeout`): a server
/// gone from the network ends the calls on it instead of hanging them
/// for the system default (about a quarter of an hour).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection settings of `url` as the store uses them: its
/// sessions' limits and the timeouts above added to what the URL says.
pub fn connection_config(url: &str) -> Result<tokio_postgres::Config, PgOpenError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| PgOpenError::Url(e.to_string()))?;
    let limit = format!(
        "-c idle_in_transaction_session_timeout={}",
        IDLE_IN_TRANSACTION.as_millis()
    );
    let options = match config.get_options() {
        Some(given) if !given.is_empty() => format!("{given} {limit}"),
        _ => limit,
    };
    config.options(&options);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    Ok(config)
}

fn pool(url: &str) -> Result<Pool, PgOpenError> {
    let config = connection_config(url)?;
    let create = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT)
        .max(CONNECT_TIMEOUT);
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(create))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| PgOpenError::Url(e.to_string()))
}

/// Whether a store URL carries a password (then it must not ride argv).
pub fn has_password(url: &str) -> bool {
    url.parse::<tokio_postgres::Config>()
        .is_ok_and(|c| c.get_password().is_some())
}

/// A store URL as logs may show it: host, port and database, never the
/// user's password.
pub fn describe_url(url: &str) -> String {
    match url.parse::<tokio_postgres::Config>() {
        Ok(c) => {
            let host = c
                .get_hosts()
                .first()
                .map(|h| match h {
                    tokio_postgres::config::Host::Tcp(name) => name.clone(),
                    tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                })
                .unwrap_or_default();
            let port = c.get_ports().first().copied().unwrap_or(5432);
            format!(
                "postgres://{host}:{port}/{}",
                c.get_dbname().unwrap_or_default()
            )
        }
        Err(_) => "postgres://(unreadable URL)".into(),
    }
}

/// The database a URL names, for messages.
pub fn database_of(url: &str) -> String {
    url.parse::<tokio_postgres::Config>()
        .ok()
        .and_then(|c| c.get_dbname().map(str::to_string))
        .unwrap_or_else(|| "(default)".into())
}

/// `meta`'s value under `key`, set to `fresh` when there was none.
///
/// One upsert that always returns the row: `DO UPDATE` (setting the value
/// to itself) makes PostgreSQL lock and return the committed row even
/// when another instance inserted it after this statement's snapshot was
/// taken. `DO NOTHING` with a `SELECT` beside it returns no row then: the
/// insert waits for the other's commit and skips, and the `SELECT` reads
/// the snapshot from before it (instances started together on an empty
/// database failed to start, 2 starts in 60). Chosen over a retry loop:
/// one round trip, no bound on tries to pick, and correct under READ
/// COMMITTED, the isolation every transaction of the store runs at.
async fn first_value(
    client: &Client,
    key: &str,
    fresh: &[u8],
) -> Result<Vec<u8>, tokio_postgres::Error> {
    client
        .query_one(
            "INSERT INTO meta (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = meta.value
             RETURNING value",
            &[&key, &fresh],
        )
        .await
        .and_then(|r| r.try_get(0))
}

/// Apply what the database lacks of [`MIGRATIONS`] (the host store's
/// tables); the versions applied now, in order.
pub async fn migrate(url: &str) -> Result<Vec<&'static Migration>, PgOpenError> {
    migrate_component(&pool(url)?, &database_of(url), "host", MIGRATIONS).await
}

/// Apply what the database lacks of `list`, the migrations of one
/// `component` of the schema (the host store's tables, the service's run
/// queue: each owns its own and numbers them 1, 2, 3...), under a
/// transaction lock so that instances starting at once migrate it once;
/// the versions applied now, in order.
pub async fn migrate_component(
    pool: &Pool,
    database: &str,
    component: &str,
    list: &'static [Migration],
) -> Result<Vec<&'static Migration>, PgOpenError> {
    let connect = |reason: String| PgOpenError::Connect {
        database: database.to_string(),
        reason,
    };
    let mut client = pool.get().await.map_err(|e| connect(e.to_string()))?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| connect(describe(&e)))?;
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(7245019283);
         CREATE TABLE IF NOT EXISTS schema_migrations (
             component TEXT NOT NULL, version BIGINT NOT NULL, name TEXT NOT NULL,
             applied_at BIGINT NOT NULL, PRIMARY KEY (component, version))",
    )
    .await
    .map_err(|e| connect(describe(&e)))?;
    let found: i64 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations WHERE component = $1",
            &[&component],
        )
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| connect(describe(&e)))?;
    let steps = pending(list, found).map_err(|known| PgOpenError::Version {
        component: component.to_string(),
        found,
        known,
    })?;
    for step in steps {
        tx.batch_execute(step.sql).await.map_err(|e| {
            connect(format!(
                "{component} migration {} ({}): {}",
                step.version,
                step.name,
                describe(&e)
            ))
        })?;
        tx.execute(
            "INSERT INTO schema_migrations (component, version, name, applied_at)
             VALUES ($1, $2, $3, $4)",
            &[&component, &step.version, &step.name, &super::now_ms()],
        )
        .await
        .map_err(|e| connect(describe(&e)))?;
    }
    tx.commit().await.map_err(|e| connect(describe(&e)))?;
    Ok(steps.iter().collect())
}

impl PgHost {
    /// Open the store at `url`, migrating it first.
    pub async fn connect(url: &str) -> Result<Self, PgOpenError> {
        migrate(url).await?;
        let pool = pool(url)?;
        let connect = |reason: String| PgOpenError::Connect {
            database: database_of(url),
            reason,
        };
        let client = pool.get().await.map_err(|e| connect(e.to_string()))?;
        let mut fresh = vec![0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| connect(format!("no randomness: {e}")))?;
        // The first instance's secret wins; every instance signs and checks
        // cursors with it, so a cursor from one is good on another.
        let secret = first_value(&client, "cursor_secret", &fresh)
            .await
            .map_err(|e| connect(describe(&e)))?;
        drop(client);
        let audit = audit::AuditWriter::start(pool.clone());
        Ok(PgHost {
            inner: Arc::new(Inner {
                pool,
                cursors: CursorCodec::new(&secret),
                audit,
            }),
            guard: None,
        })
    }

    /// This store, its writes made only while `guard` holds (each in a
    /// transaction that checks it first); reads and audit rows as before.
    /// Audit rows are not guarded: they record what a run tried, and a
    /// run that lost its lease trying is worth a row.
    pub fn guarded(&self, guard: WriteGuard) -> PgHost {
        PgHost {
            inner: self.inner.clone(),
            guard: Some(Arc::new(guard)),
        }
    }

    /// The value kept under `key` in the store, `fresh` when there was
    /// none: the first of the instances sharing the store to ask sets it,
    /// every other one gets that (a secret they must agree on).
    pub async fn shared_secret(&self, key: &str, fresh: &[u8]) -> HostResult<Vec<u8>> {
        let client = self.client().await?;
        first_value(&client, key, fresh).await.map_err(db_error)
    }

    /// The store's connection pool, for the service's own tables in the
    /// same database (its shared run queue).
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    async fn client(&self) -> HostResult<Client> {
        self.inner.pool.get().await.map_err(pool_error)
    }

    /// A transaction for one write, its guard checked first.
    async fn write<'c>(
        &self,
        client: &'c mut Client,
    ) -> HostResult<deadpool_postgres::Transaction<'c>> {
        let tx = client.transaction().await.map_err(db_error)?;
        guard::check(&tx, self.guard.as_deref()).await?;
        Ok(tx)
    }

    /// Every state entry under one scope owner, for a person (`host state`).
    pub async fn state_dump(
        &self,
        scope: StateScope,
        owner: String,
    ) -> HostResult<Vec<StateEntry>> {
        kv::state_list(&self.client().await?, scope, &owner, None, u32::MAX).await
    }

    /// Keep audit rows for `keep`: older ones are pruned now and about once
    /// an hour after.
    pub fn keep_audit_for(&self, keep: Duration) -> HostResult<()> {
        self.inner.audit.keep_for(keep)
    }

    /// The newest audit rows, oldest first (`host audit`).
    pub async fn audit_tail(
        &self,
        run_id: Option<String>,
        limit: u32,
    ) -> HostResult<Vec<AuditRow>> {
        self.inner.audit.flush().await?;
        audit::tail(&self.client().await?, run_id.as_deref(), limit).await
    }
}

#[async_trait]
impl HostProxy for PgHost {
    /// No tools and no knowledge bases of its own (the embedded store's
    /// folders are indexed on one machine).
    fn answers(&self, api: Api) -> bool {
        !matches!(
            api,
            Api::ToolDetail | Api::ToolCall | Api::KnowledgeList | Api::KnowledgeRetrieve
        )
    }

    fn knowledge_bases(&self) -> Option<Vec<crate::protocol::KnowledgeBaseResource>> {
        Some(Vec::new())
    }

    async fn history_page(
        &self,
        scope: &RunScope,
        query: &HistoryQuery,
    ) -> HostResult<HistoryPage> {
        history::page(&self.client().await?, &self.inner.cursors, scope, query).await
    }

    async fn history_search(
        &self,
        scope: &RunScope,
        conversation_id: Option<&str>,
        query: &str,
        top_k: u32,
    ) -> HostResult<HistorySearchResult> {
        let client = self.client().await?;
        history::search(
            &client,
            &self.inner.cursors,
            scope,
            conversation_id,
            query,
            top_k,
        )
        .await
    }

    async fn event_get(&self, _scope: &RunScope, event_id: &str) -> HostResult<AgentEventRecord> {
        history::event_get(&self.client().await?, &self.inner.cursors, event_id).await
    }

    async fn event_page(&self, scope: &RunScope, query: &EventQuery) -> HostResult<EventPage> {
        history::event_page(&self.client().await?, &self.inner.cursors, scope, query).await
    }

    async fn artifact_metadata(
        &self,
        _scope: &RunScope,
        artifact_id: &str,
    ) -> HostResult<ArtifactMetadata> {
        artifacts::metadata(&self.client().await?, artifact_id).await
    }

    async fn artifact_read(
        &self,
        _scope: &RunScope,
        artifact_id: &str,
        offset: u64,
        length: u64,
    ) -> HostResult<ArtifactReadResult> {
        artifacts::read(&self.client().await?, artifact_id, offset, length).await
    }

    async fn state_get(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<Option<Value>> {
        let owner = state_owner(scope, state)?;
        kv::state_get(&self.client().await?, state, &owner, key).await
    }

    async fn state_set(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
        value: &Value,
    ) -> HostResult<()> {
        let owner = state_owner(scope, state)?;
        let mut client = self.client().await?;
        let tx = self.write(&mut client).await?;
        let done = kv::state_set(&tx, state, &owner, key, value).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    async fn state_delete(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<bool> {
        let owner = state_owner(scope, state)?;
        let mut client = self.client().await?;
        let tx = self.write(&mut client).await?;
        let done = kv::state_delete(&tx, state, &owner, key).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    async fn state_list(
        &self,
        scope: &RunScope,
        state: StateScope,
        prefix: Option<&str>,
        limit: u32,
    ) -> HostResult<Vec<StateEntry>> {
        let owner = state_owner(scope, state)?;
        kv::state_list(&self.client().await?, state, &owner, prefix, limit).await
    }

    async fn storage_get(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<Option<Vec<u8>>> {
        let owner = storage_owner(scope, area);
        kv::storage_get(&self.client().await?, area, &owner, key).await
    }

    async fn storage_set(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
        value: &[u8],
    ) -> HostResult<()> {
        let owner = storage_owner(scope, area);
        let mut client = self.client().await?;
        let tx = self.write(&mut client).await?;
        let done = kv::storage_set(&tx, area, &owner, key, value).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    async fn storage_delete(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<bool> {
        let owner = storage_owner(scope, area);
        let mut client = self.client().await?;
        let tx = self.write(&mut client).await?;
        let done = kv::storage_delete(&tx, area, &owner, key).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    async fn storage_keys(&self, scope: &RunScope, area: StorageKind) -> HostResult<Vec<String>> {
        let owner = storage_owner(scope, area);
        kv::storage_keys(&self.client().await?, area, &owner).await
    }
}

#[async_trait]
impl TurnLog for PgHost {
    async fn append_event(&self, event: NewEvent) -> HostResult<AgentEventRecord> {
        history::append_event(
            &mut self.client().await?,
            &self.inner.cursors,
            self.guard.as_deref(),
            &event,
        )
        .await
    }

    async fn append_transcript(&self, item: NewTranscriptItem) -> HostResult<TranscriptItem> {
        history::append_transcript(
            &mut self.client().await?,
            &self.inner.cursors,
            self.guard.as_deref(),
            &item,
        )
        .await
    }

    async fn record_usage(&self, row: crate::host::usage::UsageRecord) -> HostResult<()> {
        usage::record(&mut self.client().await?, self.guard.as_deref(), &row).await
    }

    async fn usage_totals(
        &self,
        query: crate::host::usage::UsageQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageTotal>> {
        usage::totals(&self.client().await?, &query).await
    }

    async fn usage_runs(
        &self,
        query: crate::host::usage::RunListQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageRecord>> {
        usage::runs(&self.client().await?, &query).await
    }

    async fn admit_run(
        &self,
        admission: crate::host::budget::Admission,
    ) -> HostResult<crate::host::budget::Verdict> {
        usage::admit(&mut self.client().await?, self.guard.as_deref(), &admission).await
    }
}

#[async_trait]
impl ArtifactStore for PgHost {
    async fn put_artifact(
        &self,
        artifact: NewArtifact,
        content: Vec<u8>,
    ) -> HostResult<ArtifactMetadata> {
        artifacts::put(
            &mut self.client().await?,
            self.guard.as_deref(),
            &artifact,
            &content,
        )
        .await
    }
}

#[async_trait]
impl AuditSink for PgHost {
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

    #[test]
    fn store_urls_are_told_from_folders() {
        assert!(super::is_url("postgres://u@127.0.0.1:5432/db"));
        assert!(super::is_url("postgresql://u@h/db"));
        assert!(!super::is_url("./postgres"));
    }
}
