//! `HostApi` over the relay: every call becomes a `host_call` frame that
//! the plugin answers through the real host (LangBot's `ctx.api`), so in
//! relay mode the host is the source of truth for history, events, state
//! and storage. Grants still check every runner-facing call on this side
//! first; the host checks again on its side.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::frame::Outbound;
use crate::host::{
    Api, AuditEntry, EventQuery, HistoryQuery, HostApi, HostResult, NewArtifact, NewEvent,
    NewTranscriptItem, RunScope, StateEntry,
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
        }
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

    async fn typed<T: DeserializeOwned>(
        &self,
        scope: &RunScope,
        action: &str,
        args: Value,
    ) -> HostResult<T> {
        let value = self.call(scope, action, args).await?;
        serde_json::from_value(value).map_err(|e| {
            AgentAPIError::runtime(format!(
                "the host's answer to {action} is not understood: {e}"
            ))
        })
    }
}

fn not_relayed(what: &str) -> AgentAPIError {
    AgentAPIError::runtime(format!("{what} is kept by the host itself in relay mode"))
}

#[async_trait]
impl HostApi for RelayHost {
    fn answers(&self, api: Api) -> bool {
        self.answers.contains(&api)
    }

    async fn history_page(
        &self,
        scope: &RunScope,
        query: &HistoryQuery,
    ) -> HostResult<HistoryPage> {
        self.typed(scope, "history_page", json!(query)).await
    }

    async fn history_search(
        &self,
        scope: &RunScope,
        conversation_id: Option<&str>,
        query: &str,
        top_k: u32,
    ) -> HostResult<HistorySearchResult> {
        let args = json!({"conversation_id": conversation_id, "query": query, "top_k": top_k});
        self.typed(scope, "history_search", args).await
    }

    async fn event_get(&self, scope: &RunScope, event_id: &str) -> HostResult<AgentEventRecord> {
        self.typed(scope, "event_get", json!({"event_id": event_id}))
            .await
    }

    async fn event_page(&self, scope: &RunScope, query: &EventQuery) -> HostResult<EventPage> {
        self.typed(scope, "event_page", json!(query)).await
    }

    async fn artifact_metadata(
        &self,
        scope: &RunScope,
        artifact_id: &str,
    ) -> HostResult<ArtifactMetadata> {
        self.typed(
            scope,
            "artifact_metadata",
            json!({"artifact_id": artifact_id}),
        )
        .await
    }

    async fn artifact_read(
        &self,
        scope: &RunScope,
        artifact_id: &str,
        offset: u64,
        length: u64,
    ) -> HostResult<ArtifactReadResult> {
        let args = json!({"artifact_id": artifact_id, "offset": offset, "length": length});
        self.typed(scope, "artifact_read", args).await
    }

    async fn state_get(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<Option<Value>> {
        let value: Value = self
            .call(scope, "state_get", json!({"scope": state, "key": key}))
            .await?;
        Ok((!value.is_null()).then_some(value))
    }

    async fn state_set(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
        value: &Value,
    ) -> HostResult<()> {
        let args = json!({"scope": state, "key": key, "value": value});
        self.call(scope, "state_set", args).await.map(drop)
    }

    async fn state_delete(
        &self,
        scope: &RunScope,
        state: StateScope,
        key: &str,
    ) -> HostResult<bool> {
        let existed = self
            .call(scope, "state_delete", json!({"scope": state, "key": key}))
            .await?;
        Ok(existed.as_bool().unwrap_or(true))
    }

    async fn state_list(
        &self,
        scope: &RunScope,
        state: StateScope,
        prefix: Option<&str>,
        limit: u32,
    ) -> HostResult<Vec<StateEntry>> {
        let args = json!({"scope": state, "prefix": prefix, "limit": limit});
        self.typed(scope, "state_list", args).await
    }

    async fn storage_get(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<Option<Vec<u8>>> {
        let value = self
            .call(scope, "storage_get", json!({"area": area, "key": key}))
            .await?;
        match value.as_str() {
            None => Ok(None),
            Some(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(Some)
                .map_err(|e| AgentAPIError::runtime(format!("storage value is not base64: {e}"))),
        }
    }

    async fn storage_set(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
        value: &[u8],
    ) -> HostResult<()> {
        let value = base64::engine::general_purpose::STANDARD.encode(value);
        let args = json!({"area": area, "key": key, "value_base64": value});
        self.call(scope, "storage_set", args).await.map(drop)
    }

    async fn storage_delete(
        &self,
        scope: &RunScope,
        area: StorageKind,
        key: &str,
    ) -> HostResult<bool> {
        let existed = self
            .call(scope, "storage_delete", json!({"area": area, "key": key}))
            .await?;
        Ok(existed.as_bool().unwrap_or(true))
    }

    async fn storage_keys(&self, scope: &RunScope, area: StorageKind) -> HostResult<Vec<String>> {
        self.typed(scope, "storage_keys", json!({"area": area}))
            .await
    }

    async fn append_event(&self, _event: NewEvent) -> HostResult<AgentEventRecord> {
        Err(not_relayed("the event log"))
    }

    async fn append_transcript(&self, _item: NewTranscriptItem) -> HostResult<TranscriptItem> {
        Err(not_relayed("the transcript"))
    }

    async fn put_artifact(
        &self,
        _artifact: NewArtifact,
        _content: Vec<u8>,
    ) -> HostResult<ArtifactMetadata> {
        Err(AgentAPIError::too_large(
            "the relay sends artifacts inline only (up to 1 MiB)",
        ))
    }

    async fn record_audit(&self, entry: AuditEntry) -> HostResult<()> {
        // The bridge's own checks are local by nature: they go to its log.
        tracing::info!(
            target: "audit",
            run_id = %entry.run_id,
            action = %entry.action,
            resource = %entry.resource,
            outcome = %entry.outcome,
            "{}",
            entry.detail
        );
        Ok(())
    }
}
