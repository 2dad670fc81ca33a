//! The `HostApi` trait and the request/record types it speaks.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{EventQuery, HistoryQuery};
use crate::protocol::{
    AgentAPIError, AgentEventRecord, ArtifactMetadata, ArtifactReadResult, EventPage, HistoryPage,
    HistorySearchResult, JsonMap, StateScope, StorageKind, TranscriptItem,
};

/// Result of a host call: a §9 error on failure.
pub type HostResult<T> = Result<T, AgentAPIError>;

/// The identity a call is made under, frozen from the run's context when
/// the run is opened. The embedded host scopes by these ids; a remote host
/// (LangBot) scopes by `run_id` and checks again on its side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunScope {
    pub run_id: String,
    /// `plugin:author/name/runner`.
    pub runner_id: String,
    pub conversation_id: Option<String>,
    pub thread_id: Option<String>,
    pub actor_id: Option<String>,
    pub subject_id: Option<String>,
    pub bot_id: Option<String>,
    pub workspace_id: Option<String>,
}

impl RunScope {
    /// The scope of `ctx`'s run under `runner_id`: the ids its context
    /// names, frozen.
    pub fn of(ctx: &crate::protocol::AgentRunContext, runner_id: &str) -> RunScope {
        let conversation = ctx.conversation.clone().unwrap_or_default();
        RunScope {
            run_id: ctx.run_id.clone(),
            runner_id: runner_id.to_string(),
            conversation_id: ctx.conversation_id().map(str::to_string),
            thread_id: ctx.thread_id().map(str::to_string),
            actor_id: ctx.actor.as_ref().and_then(|a| a.actor_id.clone()),
            subject_id: ctx.subject.as_ref().and_then(|s| s.subject_id.clone()),
            bot_id: conversation.bot_id,
            workspace_id: conversation.workspace_id,
        }
    }

    /// The plugin that owns the runner (`author/name`), the owner of plugin
    /// storage. Falls back to the whole runner id when it is not in the
    /// `plugin:author/name/runner` form.
    pub fn plugin_id(&self) -> &str {
        let id = self
            .runner_id
            .strip_prefix("plugin:")
            .unwrap_or(&self.runner_id);
        match id.rsplit_once('/') {
            Some((plugin, _runner)) if plugin.contains('/') => plugin,
            _ => id,
        }
    }
}

/// Which way a history or event page walks.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Newest first: the latest items, then older ones.
    #[default]
    Backward,
    /// Oldest first: from the start of the conversation, then newer ones.
    Forward,
}

/// One state entry returned by `state_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateEntry {
    pub key: String,
    pub value: Value,
}

/// An event the host records (the bridge's own write, not a runner's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    pub event_id: String,
    pub event_type: String,
    pub event_time: Option<i64>,
    pub source: String,
    pub bot_id: Option<String>,
    pub workspace_id: Option<String>,
    pub conversation_id: Option<String>,
    pub thread_id: Option<String>,
    pub actor_type: Option<String>,
    pub actor_id: Option<String>,
    pub actor_name: Option<String>,
    pub subject_type: Option<String>,
    pub subject_id: Option<String>,
    pub input_summary: Option<String>,
    pub input_ref: Option<String>,
    pub raw_ref: Option<String>,
    pub metadata: JsonMap,
}

/// A transcript item the host records. `transcript_id` is generated when empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewTranscriptItem {
    pub transcript_id: Option<String>,
    pub event_id: String,
    pub conversation_id: String,
    pub thread_id: Option<String>,
    pub bot_id: Option<String>,
    pub workspace_id: Option<String>,
    pub role: String,
    pub item_type: String,
    pub content: Option<String>,
    pub content_json: Option<JsonMap>,
    pub artifact_refs: Vec<JsonMap>,
    pub metadata: JsonMap,
}

/// An artifact to store; its content is passed alongside.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewArtifact {
    /// Generated when empty.
    pub artifact_id: Option<String>,
    pub artifact_type: String,
    pub mime_type: Option<String>,
    pub name: Option<String>,
    pub source: String,
    pub conversation_id: Option<String>,
    pub run_id: Option<String>,
    pub runner_id: Option<String>,
    pub expires_at: Option<i64>,
    pub metadata: JsonMap,
}

/// One audit row: who did what to which resource, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Epoch milliseconds.
    pub at_ms: i64,
    /// Empty when the caller could not be tied to a run (a wrong token).
    pub run_id: String,
    pub runner_id: String,
    pub action: String,
    pub resource: String,
    pub scope: String,
    /// `ok`, or the §9 error code.
    pub outcome: String,
    pub detail: String,
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

/// The host proxy surface (§8): what a run's harness may ask of the host.
///
/// Implementations do storage and scoping by the ids they are given; they do
/// not authorize. Runner-facing callers use [`super::GrantedHost`].
#[async_trait]
pub trait HostProxy: Send + Sync + 'static {
    /// Whether this host can answer `api` at all. A grant never includes
    /// what its host cannot do, so a harness is not shown tools that could
    /// only fail (a plugin host may lack some APIs).
    fn answers(&self, api: super::Api) -> bool {
        let _ = api;
        true
    }

    /// The knowledge bases this host has of its own, when it has its own
    /// (the embedded host's folders): a run is given those, never ones a
    /// context names that the host does not have. `None`: the run's
    /// `resources.knowledge_bases` are the host's (LangBot's) own grant.
    fn knowledge_bases(&self) -> Option<Vec<crate::protocol::KnowledgeBaseResource>> {
        None
    }

    /// A page of a conversation's transcript (§8 `history_page`).
    async fn history_page(&self, scope: &RunScope, query: &HistoryQuery)
    -> HostResult<HistoryPage>;

    /// Transcript of a conversation for a person (`host history`), oldest
    /// first, without going through a grant.
    async fn conversation_history(
        &self,
        conversation_id: &str,
        thread_id: Option<&str>,
        limit: u32,
    ) -> HostResult<HistoryPage> {
        let scope = RunScope {
            conversation_id: Some(conversation_id.to_string()),
            thread_id: thread_id.map(str::to_string),
            ..RunScope::default()
        };
        let query = HistoryQuery {
            limit,
            include_artifacts: true,
            ..HistoryQuery::default()
        };
        self.history_page(&scope, &query).await
    }
    /// Transcript items matching `query`, best first (§8 `history_search`).
    async fn history_search(
        &self,
        scope: &RunScope,
        conversation_id: Option<&str>,
        query: &str,
        top_k: u32,
    ) -> HostResult<HistorySearchResult>;
    /// One event record by id (§8 `event_get`).
    async fn event_get(&self, scope: &RunScope, event_id: &str) -> HostResult<AgentEventRecord>;
    /// A page of a conversation's event log (§8 `event_page`).
    async fn event_page(&self, scope: &RunScope, query: &EventQuery) -> HostResult<EventPage>;
    /// What is known about an artifact, without its content.
    async fn artifact_metadata(
        &self,
        scope: &RunScope,
        artifact_id: &str,
    ) -> HostResult<ArtifactMetadata>;
    /// `length` bytes of an artifact from `offset`.
    async fn artifact_read(
        &self,
        scope: &RunScope,
        artifact_id: &str,
        offset: u64,
        length: u64,
    ) -> HostResult<ArtifactReadResult>;

    /// One state value of the run's `state` scope; `None` when unset.
    async fn state_get(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<Option<Value>>;
    /// Set one state value (small JSON; large data belongs in storage).
    async fn state_set(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
        value: &Value,
    ) -> HostResult<()>;
    /// Returns whether the key existed.
    async fn state_delete(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<bool>;
    /// State entries whose key starts with `prefix`, by key.
    async fn state_list(
        &self,
        scope: &RunScope,
        state: StateScope,
        prefix: Option<&str>,
        limit: u32,
    ) -> HostResult<Vec<StateEntry>>;

    /// One storage value; `None` when unset.
    async fn storage_get(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<Option<Vec<u8>>>;
    /// Set one storage value (bytes).
    async fn storage_set(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
        value: &[u8],
    ) -> HostResult<()>;
    /// Returns whether the key existed.
    async fn storage_delete(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<bool>;
    /// Every key in the run's storage area.
    async fn storage_keys(&self, scope: &RunScope, area: StorageKind) -> HostResult<Vec<String>>;

    /// A host tool's description and parameters schema (§8
    /// `get_tool_detail`). The bridge's own stores have no tools: they
    /// are a host's (LangBot's, through the relay).
    async fn tool_detail(&self, _scope: &RunScope, tool_name: &str) -> HostResult<Value> {
        Err(no_tool(tool_name))
    }
    /// Call a host tool; its result as the host gives it (§8 `call_tool`).
    async fn call_tool(
        &self,
        _scope: &RunScope,
        tool_name: &str,
        _parameters: &JsonMap,
    ) -> HostResult<Value> {
        Err(no_tool(tool_name))
    }
    /// Passages of a knowledge base that match `query`, best first, as
    /// LangBot's retrieval entries (`id`, `content`, `metadata`,
    /// `distance`, `score`). A store without knowledge bases has none.
    async fn retrieve_knowledge(
        &self,
        _scope: &RunScope,
        kb_id: &str,
        _query: &str,
        _top_k: u32,
    ) -> HostResult<Vec<Value>> {
        Err(no_knowledge_base(kb_id))
    }
}

/// Why a store answers no tool: its tools are a host's.
fn no_tool(tool_name: &str) -> AgentAPIError {
    AgentAPIError::not_found(format!(
        "this bridge's store has no tool `{tool_name}` (host tools are LangBot's, through the relay)"
    ))
}

/// Why a store answers no knowledge base of that id.
pub(super) fn no_knowledge_base(kb_id: &str) -> AgentAPIError {
    AgentAPIError::not_found(format!(
        "this bridge's store has no knowledge base `{kb_id}`"
    ))
}

/// The bridge's record of a turn: the event that started it and what was
/// said. Only the bridge writes here; a runner reads it back through
/// [`HostProxy`].
#[async_trait]
pub trait TurnLog: Send + Sync + 'static {
    /// Record an event (idempotent by `event_id`).
    async fn append_event(&self, event: NewEvent) -> HostResult<AgentEventRecord>;
    /// Record a transcript item, numbered next in its conversation.
    async fn append_transcript(&self, item: NewTranscriptItem) -> HostResult<TranscriptItem>;
    /// Record what a run cost, with who asked (the ledger `host usage`
    /// reads; a run recorded twice keeps its first row).
    async fn record_usage(&self, usage: super::usage::UsageRecord) -> HostResult<()>;
    /// The ledger summed (`host usage`, the service's conversation list).
    async fn usage_totals(
        &self,
        query: super::usage::UsageQuery,
    ) -> HostResult<Vec<super::usage::UsageTotal>>;
    /// The ledger's runs, newest first (the service's run list).
    async fn usage_runs(
        &self,
        query: super::usage::RunListQuery,
    ) -> HostResult<Vec<super::usage::UsageRecord>>;
    /// Admit a turn against the operator's limits (`host::budget`): the
    /// first limit it would cross, or its headroom with the turn counted,
    /// in one transaction (exact across instances sharing the store).
    async fn admit_run(
        &self,
        admission: super::budget::Admission,
    ) -> HostResult<super::budget::Verdict>;
}

/// Artifact contents the bridge keeps (a harness's outbox files): bytes
/// in, metadata out; a runner reads them back through [`HostProxy`].
#[async_trait]
pub trait ArtifactStore: Send + Sync + 'static {
    /// Store an artifact's content and metadata.
    async fn put_artifact(
        &self,
        artifact: NewArtifact,
        content: Vec<u8>,
    ) -> HostResult<ArtifactMetadata>;
}

/// Where every host call and refusal is recorded (§11). An
/// implementation should queue rather than wait for disk: a row is
/// written on every call's path.
#[async_trait]
pub trait AuditSink: Send + Sync + 'static {
    /// Append one audit row.
    async fn record_audit(&self, entry: AuditEntry) -> HostResult<()>;

    /// The newest audit rows (of one run, when `run_id` is set), oldest
    /// first: what `host audit` and the console's run view show. A sink
    /// that keeps none here (a relay's host keeps them upstream) has none.
    async fn audit_rows(&self, run_id: Option<String>, limit: u32) -> HostResult<Vec<AuditRow>> {
        let _ = (run_id, limit);
        Ok(Vec::new())
    }
}

/// A whole host: the proxy, the turn log, artifact contents and the audit
/// sink, composed. What the bridge holds; each backend implements the
/// roles and gets this for free.
pub trait HostApi: HostProxy + TurnLog + ArtifactStore + AuditSink {}

impl<T: HostProxy + TurnLog + ArtifactStore + AuditSink> HostApi for T {}
