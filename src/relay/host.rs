//! `HostApi` over the relay: every call becomes a `host_call` frame that
//! the plugin answers through the real host (LangBot's `ctx.api`), so in
//! relay mode the host is the source of truth for history, events, state
//! and storage. Grants still check every runner-facing call on this side
//! first; the host checks again on its side.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::Engine as _;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::frame::Outbound;
use crate::host::calls::{
    ArtifactMetadataCall, ArtifactReadCall, CallToolCall, EventGetCall, HistorySearchCall,
    PluginStorageDelete, PluginStorageGet, PluginStorageKeys, PluginStorageSet,
    RetrieveKnowledgeCall, StateDeleteCall, StateGetCall, StateListCall, StateSetCall,
    ToolDetailCall, WorkspaceStorageDelete, WorkspaceStorageGet, WorkspaceStorageKeys,
    WorkspaceStorageSet,
};
use crate::host::{
    Api, ArtifactStore, AuditEntry, AuditSink, EventQuery, HistoryQuery, HostCall, HostProxy,
    HostResult, NewArtifact, NewEvent, NewTranscriptItem, RunScope, StateEntry, TurnLog,
};
use crate::protocol::{
    AgentAPIError, AgentEventRecord, ArtifactMetadata, ArtifactReadResult, EventPage, HistoryPage,
    HistorySearchResult, JsonMap, StateScope, StorageKind, TranscriptItem,
};

type Reply = Result<Value, AgentAPIError>;

/// The host on the other side of the relay.
pub struct RelayHost {
    out: mpsc::Sender<Outbound>,
    next_id: AtomicU64,
    /// Calls waiting for a reply; `None` once the plugin is gone, so a
    /// late call fails at once instead of waiting for a reply that
    /// cannot come.
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>,
    /// The APIs the plugin said it answers.
    answers: BTreeSet<Api>,
    /// The bridge's own store that keeps the run ledger and counts turns
    /// against the operator's budgets (the host keeps neither).
    ledger: Option<Arc<dyn Ledger>>,
}

/// Forgets a call's waiter however the call ends (answered, timed out by
/// the grant, or dropped), so abandoned calls do not pile up.
struct Waiting<'a> {
    host: &'a RelayHost,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(pending) = self.host.lock().as_mut() {
            pending.remove(&self.id);
        }
    }
}

fn gone() -> AgentAPIError {
    AgentAPIError::runtime("the host went away (the relay connection closed)")
}

impl RelayHost {
    /// A host whose calls are written to `out`, answering `answers`.
    pub fn new(out: mpsc::Sender<Outbound>, answers: BTreeSet<Api>) -> Self {
        RelayHost {
            out,
            next_id: AtomicU64::new(1),
            pending: Mutex::new(Some(HashMap::new())),
            answers,
            ledger: None,
        }
    }

    /// The same host, with `ledger` keeping what runs cost and counting
    /// turns against budgets.
    pub fn with_ledger(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<u64, oneshot::Sender<Reply>>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deliver the plugin's answer to call `id`; false when no call waits.
    pub fn answer(&self, id: u64, reply: Reply) -> bool {
        let waiter = self.lock().as_mut().and_then(|p| p.remove(&id));
        match waiter {
            Some(tx) => tx.send(reply).is_ok(),
            None => false,
        }
    }

    /// Fail every waiting call and every later one: the plugin is gone.
    pub fn close(&self) {
        let waiting = self.lock().take().unwrap_or_default();
        for (_, tx) in waiting {
            let _ = tx.send(Err(gone()));
        }
    }

    async fn call(&self, scope: &RunScope, action: &str, args: Value) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.lock().as_mut() {
            Some(pending) => pending.insert(id, tx),
            None => return Err(gone()),
        };
        let _waiting = Waiting { host: self, id };
        let args = match args {
            Value::Object(map) => map,
            _ => JsonMap::new(),
        };
        let frame = Outbound::HostCall {
            id,
            run_id: scope.run_id.clone(),
            action: action.into(),
            args,
        };
        if self.out.send(frame).await.is_err() {
            return Err(gone());
        }
        // The grant bounds the wait by the run's deadline.
        rx.await.unwrap_or_else(|_| Err(gone()))
    }

    /// One declared host call as a `host_call` frame: its action and
    /// arguments, and its answer read, as its declaration says.
    async fn forward<C: HostCall>(&self, scope: &RunScope, call: &C) -> HostResult<C::Output> {
        C::from_relay(self.call(scope, C::ACTION, call.relay_args()).await?)
    }
}

fn not_relayed(what: &str) -> AgentAPIError {
    AgentAPIError::runtime(format!("{what} is kept by the host itself in relay mode"))
}

#[async_trait]
impl HostProxy for RelayHost {
    fn answers(&self, api: Api) -> bool {
        self.answers.contains(&api)
    }

    async fn history_page(
        &self,
        scope: &RunScope,
        query: &HistoryQuery,
    ) -> HostResult<HistoryPage> {
        self.forward(scope, query).await
    }

    async fn history_search(
        &self,
        scope: &RunScope,
        conversation_id: Option<&str>,
        query: &str,
        top_k: u32,
    ) -> HostResult<HistorySearchResult> {
        let call = HistorySearchCall {
            query: query.to_string(),
            conversation_id: conversation_id.map(str::to_string),
            top_k,
        };
        self.forward(scope, &call).await
    }

    async fn event_get(&self, scope: &RunScope, event_id: &str) -> HostResult<AgentEventRecord> {
        let call = EventGetCall {
            event_id: event_id.to_string(),
        };
        self.forward(scope, &call).await
    }

    async fn event_page(&self, scope: &RunScope, query: &EventQuery) -> HostResult<EventPage> {
        self.forward(scope, query).await
    }

    async fn artifact_metadata(
        &self,
        scope: &RunScope,
        artifact_id: &str,
    ) -> HostResult<ArtifactMetadata> {
        let call = ArtifactMetadataCall {
            artifact_id: artifact_id.to_string(),
        };
        self.forward(scope, &call).await
    }

    async fn artifact_read(
        &self,
        scope: &RunScope,
        artifact_id: &str,
        offset: u64,
        length: u64,
    ) -> HostResult<ArtifactReadResult> {
        let call = ArtifactReadCall {
            artifact_id: artifact_id.to_string(),
            offset,
            length,
        };
        self.forward(scope, &call).await
    }

    async fn state_get(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<Option<Value>> {
        let call = StateGetCall {
            scope: state,
            key: key.to_string(),
        };
        self.forward(scope, &call).await
    }

    async fn state_set(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
        value: &Value,
    ) -> HostResult<()> {
        let call = StateSetCall {
            scope: state,
            key: key.to_string(),
            value: value.clone(),
        };
        self.forward(scope, &call).await
    }

    async fn state_delete(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<bool> {
        let call = StateDeleteCall {
            scope: state,
            key: key.to_string(),
        };
        self.forward(scope, &call).await
    }

    async fn state_list(
        &self,
        scope: &RunScope,
        state: StateScope,
        prefix: Option<&str>,
        limit: u32,
    ) -> HostResult<Vec<StateEntry>> {
        let call = StateListCall {
            scope: state,
            prefix: prefix.map(str::to_string),
            limit,
        };
        self.forward(scope, &call).await
    }

    async fn storage_get(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<Option<Vec<u8>>> {
        let key = key.to_string();
        match area {
            StorageKind::Plugin => self.forward(scope, &PluginStorageGet { key }).await,
            StorageKind::Workspace => self.forward(scope, &WorkspaceStorageGet { key }).await,
        }
    }

    async fn storage_set(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
        value: &[u8],
    ) -> HostResult<()> {
        let key = key.to_string();
        let value = base64::engine::general_purpose::STANDARD.encode(value);
        match area {
            StorageKind::Plugin => {
                let call = PluginStorageSet {
                    key,
                    value,
                    base64: true,
                };
                self.forward(scope, &call).await
            }
            StorageKind::Workspace => {
                let call = WorkspaceStorageSet {
                    key,
                    value,
                    base64: true,
                };
                self.forward(scope, &call).await
            }
        }
    }

    async fn storage_delete(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<bool> {
        let key = key.to_string();
        match area {
            StorageKind::Plugin => self.forward(scope, &PluginStorageDelete { key }).await,
            StorageKind::Workspace => self.forward(scope, &WorkspaceStorageDelete { key }).await,
        }
    }

    async fn storage_keys(&self, scope: &RunScope, area: StorageKind) -> HostResult<Vec<String>> {
        match area {
            StorageKind::Plugin => self.forward(scope, &PluginStorageKeys {}).await,
            StorageKind::Workspace => self.forward(scope, &WorkspaceStorageKeys {}).await,
        }
    }

    async fn tool_detail(&self, scope: &RunScope, tool_name: &str) -> HostResult<Value> {
        let call = ToolDetailCall {
            tool_name: tool_name.to_string(),
        };
        self.forward(scope, &call).await
    }

    async fn call_tool(
        &self,
        scope: &RunScope,
        tool_name: &str,
        parameters: &JsonMap,
    ) -> HostResult<Value> {
        let call = CallToolCall {
            tool_name: tool_name.to_string(),
            parameters: parameters.clone(),
        };
        self.forward(scope, &call).await
    }

    async fn retrieve_knowledge(
        &self,
        scope: &RunScope,
        kb_id: &str,
        query: &str,
        top_k: u32,
    ) -> HostResult<Vec<Value>> {
        let call = RetrieveKnowledgeCall {
            kb_id: kb_id.to_string(),
            query: query.to_string(),
            top_k,
        };
        self.forward(scope, &call).await
    }
}

#[async_trait]
impl TurnLog for RelayHost {
    async fn append_event(&self, _event: NewEvent) -> HostResult<AgentEventRecord> {
        Err(not_relayed("the event log"))
    }

    async fn append_transcript(&self, _item: NewTranscriptItem) -> HostResult<TranscriptItem> {
        Err(not_relayed("the transcript"))
    }

    /// The host has no ledger: what a run cost goes to the bridge's own
    /// store, when it was given one.
    async fn record_usage(&self, usage: crate::host::usage::UsageRecord) -> HostResult<()> {
        match &self.ledger {
            Some(ledger) => ledger.record_usage(usage).await,
            None => Ok(()),
        }
    }

    async fn usage_totals(
        &self,
        query: crate::host::usage::UsageQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageTotal>> {
        match &self.ledger {
            Some(ledger) => ledger.usage_totals(query).await,
            None => Ok(Vec::new()),
        }
    }

    async fn usage_runs(
        &self,
        query: crate::host::usage::RunListQuery,
    ) -> HostResult<Vec<crate::host::usage::UsageRecord>> {
        match &self.ledger {
            Some(ledger) => ledger.usage_runs(query).await,
            None => Ok(Vec::new()),
        }
    }

    async fn admit_run(
        &self,
        admission: crate::host::budget::Admission,
    ) -> HostResult<crate::host::budget::Verdict> {
        match &self.ledger {
            Some(ledger) => ledger.admit_run(admission).await,
            None => Ok(Default::default()),
        }
    }
}

#[async_trait]
impl ArtifactStore for RelayHost {
    async fn put_artifact(
        &self,
        _artifact: NewArtifact,
        _content: Vec<u8>,
    ) -> HostResult<ArtifactMetadata> {
        Err(AgentAPIError::too_large(
            "the relay sends artifacts inline only (up to 1 MiB)",
        ))
    }
}

#[async_trait]
impl AuditSink for RelayHost {
    async fn record_audit(&self, entry: AuditEntry) -> HostResult<()> {
        // The bridge's own checks are local by nature: they go to its log,
        // and to its own store where it keeps one (`host audit`).
        tracing::info!(
            target: "audit",
            run_id = %entry.run_id,
            action = %entry.action,
            resource = %entry.resource,
            outcome = %entry.outcome,
            "{}",
            entry.detail
        );
        match &self.ledger {
            Some(ledger) => ledger.record_audit(entry).await,
            None => Ok(()),
        }
    }

    async fn audit_rows(
        &self,
        run_id: Option<String>,
        limit: u32,
    ) -> HostResult<Vec<crate::host::AuditRow>> {
        match &self.ledger {
            Some(ledger) => ledger.audit_rows(run_id, limit).await,
            None => Ok(Vec::new()),
        }
    }
}

/// The bridge's own store behind a relay: the run ledger, budgets, and
/// the audit rows of its own checks (budgets, chat commands).
pub trait Ledger: TurnLog + crate::host::AuditSink {}

impl<T: TurnLog + crate::host::AuditSink> Ledger for T {}
