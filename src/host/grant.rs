//! Run grants: the authorization snapshot a run is opened with (§4.4, §8).
//!
//! A grant is frozen when the run opens: the allowed APIs are the manifest
//! permissions ∩ the binding policy ∩ what the host's context opened
//! (`context.available_apis`), the scope is the run's own conversation and
//! thread, and the caps bound every call. The token that names the grant is
//! random, kept only as a hash, and dies the moment the run closes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::calls::{HostCall, bad_arguments};
use super::{AuditEntry, HostApi, HostResult, RunScope};
use crate::protocol::{
    AgentAPIError, AgentRunContext, AgentRunnerPermissions, ArtifactOperation, ErrorCode,
    EventOperation, HistoryOperation, KnowledgeBaseResource, KnowledgeOperation, StateScope,
    StorageKind, ToolOperation, ToolResource,
};
use crate::throttle::RefusalThrottle;

/// One runner-facing proxy API, the unit a grant allows or refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `history_page`: read the transcript page by page.
    HistoryPage,
    /// `history_search`: full-text search of the transcript.
    HistorySearch,
    /// `event_get`: one event record.
    EventGet,
    /// `event_page`: the event log page by page.
    EventPage,
    /// `artifact_metadata`: what an artifact is.
    ArtifactMetadata,
    /// `artifact_read`: an artifact's bytes, by range.
    ArtifactRead,
    /// `state_get/set/delete/list` in every scope of the run.
    State,
    /// The plugin's storage area.
    PluginStorage,
    /// The workspace's storage area.
    WorkspaceStorage,
    /// `get_tool_detail`: a granted host tool's description and parameters.
    ToolDetail,
    /// `list_tools`, `call_tool`: call a granted host tool.
    ToolCall,
    /// `list_knowledge_bases`: the granted knowledge bases.
    KnowledgeList,
    /// `retrieve_knowledge`: search a granted knowledge base.
    KnowledgeRetrieve,
}

impl Api {
    /// Every API, in a stable order.
    pub const ALL: [Api; 13] = [
        Api::HistoryPage,
        Api::HistorySearch,
        Api::EventGet,
        Api::EventPage,
        Api::ArtifactMetadata,
        Api::ArtifactRead,
        Api::State,
        Api::PluginStorage,
        Api::WorkspaceStorage,
        Api::ToolDetail,
        Api::ToolCall,
        Api::KnowledgeList,
        Api::KnowledgeRetrieve,
    ];

    /// The API named `name` (as [`Api::as_str`] spells it).
    pub fn named(name: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|api| api.as_str() == name)
    }

    /// The API's name as audited and as tools are named after it.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::HistoryPage => "history_page",
            Api::HistorySearch => "history_search",
            Api::EventGet => "event_get",
            Api::EventPage => "event_page",
            Api::ArtifactMetadata => "artifact_metadata",
            Api::ArtifactRead => "artifact_read",
            Api::State => "state",
            Api::PluginStorage => "plugin_storage",
            Api::WorkspaceStorage => "workspace_storage",
            Api::ToolDetail => "tool_detail",
            Api::ToolCall => "tool_call",
            Api::KnowledgeList => "knowledge_list",
            Api::KnowledgeRetrieve => "knowledge_retrieve",
        }
    }
}

/// The APIs a run may use: `permissions` (already manifest ∩ binding) ∩ the
/// flags the host opened in `ctx.context.available_apis` and `resources`.
pub fn allowed_apis(ctx: &AgentRunContext, permissions: &AgentRunnerPermissions) -> BTreeSet<Api> {
    granted_apis(ctx, permissions, &ctx.resources.knowledge_bases)
}

/// [`allowed_apis`] with the run's knowledge bases as the host decides them.
fn granted_apis(
    ctx: &AgentRunContext,
    permissions: &AgentRunnerPermissions,
    knowledge_bases: &[KnowledgeBaseResource],
) -> BTreeSet<Api> {
    let open = &ctx.context.available_apis;
    let storage = &ctx.resources.storage;
    let mut apis = BTreeSet::new();
    let mut allow = |api, granted: bool| {
        if granted {
            apis.insert(api);
        }
    };
    allow(
        Api::HistoryPage,
        open.history_page && permissions.history.contains(&HistoryOperation::Page),
    );
    allow(
        Api::HistorySearch,
        open.history_search && permissions.history.contains(&HistoryOperation::Search),
    );
    allow(
        Api::EventGet,
        open.event_get && permissions.events.contains(&EventOperation::Get),
    );
    allow(
        Api::EventPage,
        open.event_page && permissions.events.contains(&EventOperation::Page),
    );
    allow(
        Api::ArtifactMetadata,
        open.artifact_metadata && permissions.artifacts.contains(&ArtifactOperation::Metadata),
    );
    allow(
        Api::ArtifactRead,
        open.artifact_read && permissions.artifacts.contains(&ArtifactOperation::Read),
    );
    // State has no permission key in §4.4: the host's `state` flag decides.
    allow(Api::State, open.state);
    allow(
        Api::PluginStorage,
        open.storage
            && storage.plugin_storage
            && permissions.storage.contains(&StorageKind::Plugin),
    );
    allow(
        Api::WorkspaceStorage,
        open.storage
            && storage.workspace_storage
            && permissions.storage.contains(&StorageKind::Workspace),
    );
    // Tools and knowledge bases: the permission, and at least one resource
    // of the run that allows the operation.
    let resources = &ctx.resources;
    let tool_allows = |op: &str| resources.tools.iter().any(|t| allows(&t.operations, op));
    let kb_allows = |op: &str| knowledge_bases.iter().any(|kb| allows(&kb.operations, op));
    allow(
        Api::ToolDetail,
        permissions.tools.contains(&ToolOperation::Detail) && tool_allows("detail"),
    );
    allow(
        Api::ToolCall,
        permissions.tools.contains(&ToolOperation::Call) && tool_allows("call"),
    );
    allow(
        Api::KnowledgeList,
        permissions
            .knowledge_bases
            .contains(&KnowledgeOperation::List)
            && kb_allows("list"),
    );
    allow(
        Api::KnowledgeRetrieve,
        permissions
            .knowledge_bases
            .contains(&KnowledgeOperation::Retrieve)
            && kb_allows("retrieve"),
    );
    apis
}

/// Whether a resource's `operations` allow `op`: an empty list allows
/// every operation of its kind, as the released SDK reads it.
pub fn allows(operations: &[String], op: &str) -> bool {
    operations.is_empty() || operations.iter().any(|o| o == op)
}

/// Hard limits on what one run may ask of the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrantCaps {
    /// Largest `limit` of a history or event page.
    pub max_page_limit: u32,
    /// Largest `top_k` of a history search.
    pub max_search_results: u32,
    /// Largest `length` of one artifact read, in bytes.
    pub max_read_length: u64,
    /// Largest state value, as JSON bytes (LangBot caps it at 256 KiB).
    pub max_state_value_bytes: usize,
    /// Largest storage value, in bytes.
    pub max_storage_value_bytes: usize,
    /// Longest state or storage key, in bytes.
    pub max_key_bytes: usize,
    /// Longest history search query, in bytes.
    pub max_query_bytes: usize,
    /// Most event types one event page may filter on.
    pub max_event_types: usize,
    /// Largest arguments of one host tool call, as JSON bytes.
    pub max_tool_parameters_bytes: usize,
    /// Calls allowed over the run's whole life.
    pub max_calls_per_run: u32,
    /// Sustained calls per second.
    pub rate_per_second: f64,
    /// Calls allowed in a burst above the sustained rate.
    pub burst: u32,
    /// Longest a run may live when the context sets no deadline.
    pub default_run_timeout: Duration,
}

impl Default for GrantCaps {
    fn default() -> Self {
        GrantCaps {
            max_page_limit: 100,
            max_search_results: 50,
            max_read_length: 1024 * 1024,
            max_state_value_bytes: 256 * 1024,
            max_storage_value_bytes: 4 * 1024 * 1024,
            max_key_bytes: 512,
            max_query_bytes: 1024,
            max_event_types: 64,
            max_tool_parameters_bytes: 256 * 1024,
            max_calls_per_run: 5_000,
            rate_per_second: 50.0,
            burst: 100,
            default_run_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// Operator policy applied on top of the permissions when a run opens.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GrantPolicy {
    /// Hard limits per call and per run.
    pub caps: GrantCaps,
    /// Allow history/events/artifacts of *other* conversations (§11: off by default).
    pub cross_conversation: bool,
}

/// The secret that names a grant. Never logged: `Debug` prints it redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct RunToken(String);

impl RunToken {
    /// The bearer value, for the child's environment or a 0600 file only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for RunToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunToken(<redacted>)")
    }
}

fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// A run's frozen authorization snapshot.
pub struct RunGrant {
    /// Who the run is, frozen from its context.
    pub scope: RunScope,
    /// What it may call.
    pub apis: BTreeSet<Api>,
    /// How much it may ask for.
    pub caps: GrantCaps,
    /// Whether it may read other conversations.
    pub cross_conversation: bool,
    /// Artifacts this run may read whatever their conversation: its inputs.
    pub input_artifacts: HashSet<String>,
    /// The host tools the run was given (`resources.tools`).
    pub tools: Vec<ToolResource>,
    /// The knowledge bases the run was given (`resources.knowledge_bases`).
    pub knowledge_bases: Vec<KnowledgeBaseResource>,
    /// Epoch milliseconds after which every call fails `deadline_exceeded`.
    pub deadline_ms: i64,
    /// The host this run's calls go to when not the registry's: the
    /// shared store seen through the run's lease, so a run that lost it
    /// writes nothing.
    host: Option<Arc<dyn HostApi>>,
    closed: AtomicBool,
    calls: AtomicU32,
    bucket: Mutex<Bucket>,
    /// Artifacts already checked visible to this run.
    visible: Mutex<HashSet<String>>,
    /// Calls with this run's token after it closed, audited throttled.
    closed_refusals: Mutex<RefusalThrottle>,
    /// What its model calls through the gateway used.
    pub meter: super::meter::Meter,
    /// The models its harness may call through the gateway (the
    /// binding's `models` and its `model`); unset: any.
    models: std::sync::OnceLock<Vec<String>>,
}

impl std::fmt::Debug for RunGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunGrant")
            .field("scope", &self.scope)
            .field("apis", &self.apis)
            .field("deadline_ms", &self.deadline_ms)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Now, in epoch milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl RunGrant {
    /// The run this grant belongs to.
    pub fn run_id(&self) -> &str {
        &self.scope.run_id
    }

    /// Whether the run has closed (its token is dead).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Time left before the deadline (zero once past it).
    pub fn remaining(&self) -> Duration {
        Duration::from_millis((self.deadline_ms - now_ms()).max(0) as u64)
    }

    /// Bound the models its harness may call to `models` (set once, as
    /// the turn is decided; later calls change nothing).
    pub fn bound_models(&self, models: Vec<String>) {
        let _ = self.models.set(models);
    }

    /// The models its harness may call, when they are bounded.
    pub fn models(&self) -> Option<&[String]> {
        self.models.get().map(Vec::as_slice)
    }

    /// Calls made so far, refused ones included.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The checks every call passes first, in the order a person would
    /// want them reported: closed, expired, not granted, over budget.
    fn admit(&self, api: Api) -> HostResult<()> {
        if self.is_closed() {
            return Err(AgentAPIError::unauthorized(format!(
                "run {} is closed; its token is no longer valid",
                self.scope.run_id
            )));
        }
        if now_ms() >= self.deadline_ms {
            return Err(AgentAPIError::new(
                ErrorCode::DeadlineExceeded,
                format!("run {} is past its deadline", self.scope.run_id),
            ));
        }
        if !self.apis.contains(&api) {
            return Err(AgentAPIError::unauthorized(format!(
                "`{}` is not granted to this run",
                api.as_str()
            )));
        }
        let calls = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if calls > self.caps.max_calls_per_run {
            return Err(AgentAPIError::new(
                ErrorCode::RateLimited,
                format!(
                    "this run used its budget of {} host calls",
                    self.caps.max_calls_per_run
                ),
            )
            .with_detail("retryable_after_ms", Value::Null));
        }
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(bucket.last).as_secs_f64() * self.caps.rate_per_second;
        bucket.tokens = (bucket.tokens + refill).min(f64::from(self.caps.burst));
        bucket.last = now;
        if bucket.tokens < 1.0 {
            let wait_ms = ((1.0 - bucket.tokens) / self.caps.rate_per_second * 1000.0).ceil();
            return Err(AgentAPIError::new(
                ErrorCode::RateLimited,
                format!("too many host calls; retry in {wait_ms} ms"),
            )
            .with_detail("retry_after_ms", wait_ms));
        }
        bucket.tokens -= 1.0;
        Ok(())
    }

    /// `limit` within 1..=`max`.
    pub(super) fn check_limit(&self, limit: u32, max: u32, what: &str) -> HostResult<()> {
        if limit == 0 || limit > max {
            return Err(AgentAPIError::invalid_argument(format!(
                "{what} must be between 1 and {max}, got {limit}"
            )));
        }
        Ok(())
    }

    /// A state or storage key within the caps.
    pub(super) fn check_key(&self, key: &str) -> HostResult<()> {
        if key.is_empty() {
            return Err(AgentAPIError::invalid_argument("key must not be empty"));
        }
        if key.len() > self.caps.max_key_bytes {
            return Err(AgentAPIError::too_large(format!(
                "key is {} bytes; the limit is {}",
                key.len(),
                self.caps.max_key_bytes
            )));
        }
        Ok(())
    }

    /// Whether the run has the id `state` is kept under.
    pub(super) fn state_scope_id(&self, state: StateScope) -> HostResult<()> {
        let scope = &self.scope;
        let present = match state {
            StateScope::Conversation => scope.conversation_id.is_some(),
            StateScope::Actor => scope.actor_id.is_some(),
            StateScope::Subject => scope.subject_id.is_some(),
            StateScope::Runner => true,
        };
        if present {
            Ok(())
        } else {
            Err(AgentAPIError::invalid_argument(format!(
                "this run has no {} id, so it has no {} state",
                state.as_str(),
                state.as_str()
            )))
        }
    }

    /// The conversation a call touches, as an audit resource.
    pub(super) fn conversation_resource(&self, requested: Option<&str>) -> String {
        format!(
            "conversation:{}",
            requested
                .or(self.scope.conversation_id.as_deref())
                .unwrap_or("")
        )
    }

    /// The conversation a call targets, refusing other conversations
    /// unless the grant allows them.
    pub(super) fn target_conversation(&self, requested: Option<&str>) -> HostResult<()> {
        match (requested, self.scope.conversation_id.as_deref()) {
            (Some(other), own) if Some(other) != own && !self.cross_conversation => {
                Err(AgentAPIError::unauthorized(format!(
                    "this run may only read its own conversation, not `{other}`"
                )))
            }
            (None, None) => Err(AgentAPIError::invalid_argument(
                "this run has no conversation; pass conversation_id",
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn remember_visible(&self, artifact_id: &str) {
        self.visible
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(artifact_id.to_string());
    }

    pub(super) fn was_visible(&self, artifact_id: &str) -> bool {
        self.visible
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(artifact_id)
    }

    /// Whether a record of `conversation` (any thread) is visible to this run.
    pub(super) fn sees_conversation(&self, conversation: Option<&str>) -> bool {
        let own = self.scope.conversation_id.as_deref();
        self.cross_conversation || (own.is_some() && conversation == own)
    }

    /// Whether a record of `conversation`/`thread` is visible: a run in a
    /// thread sees that thread's records, as its history does.
    pub(super) fn sees(&self, conversation: Option<&str>, thread: Option<&str>) -> bool {
        self.sees_conversation(conversation)
            && (self.cross_conversation
                || self.scope.thread_id.is_none()
                || thread == self.scope.thread_id.as_deref())
    }
}

/// A freshly opened run: the token to hand to the harness, and the grant.
#[derive(Debug, Clone)]
pub struct OpenRun {
    /// The bearer secret for the harness (env or 0600 file, never argv).
    pub token: RunToken,
    /// The grant the token names.
    pub grant: Arc<RunGrant>,
}

/// How long a closed grant is remembered, so a late call with its token is
/// reported (and audited) as "run closed" rather than "unknown token".
const CLOSED_MEMORY: Duration = Duration::from_secs(3600);

/// A grant, once closed when it closed, and who may present its token.
type Slot = (Arc<RunGrant>, Option<Instant>, Option<Arc<dyn Holder>>);

/// Who may present a token: the harness process it was made for, and what
/// that process started. A token read by anyone else — another
/// conversation's agent reading `/proc/<pid>/environ`, say — opens
/// nothing, whichever run it names at that moment.
pub trait Holder: Send + Sync + 'static {
    /// Whether the TCP connection from `client` to `server` (on this
    /// machine) is held by the holder.
    fn holds(&self, client: SocketAddr, server: SocketAddr) -> bool;
}

/// The registry of run grants, keyed by token hash.
pub struct Grants {
    host: Arc<dyn HostApi>,
    runs: Mutex<HashMap<[u8; 32], Slot>>,
    /// Refusals of a token that never opened anything, audited at most
    /// once a second with a count: any local process can send one.
    unknown: Mutex<RefusalThrottle>,
}

impl Grants {
    /// A registry in front of `host`.
    pub fn new(host: Arc<dyn HostApi>) -> Self {
        Grants {
            host,
            runs: Mutex::new(HashMap::new()),
            unknown: Mutex::new(RefusalThrottle::default()),
        }
    }

    /// The unauthorized host behind the grants, for the bridge's own writes.
    pub fn host(&self) -> &Arc<dyn HostApi> {
        &self.host
    }

    /// Open a run: freeze its scope, APIs, caps and deadline, and mint its token.
    ///
    /// `permissions` is the effective set (manifest ∩ binding policy).
    pub fn open_run(
        &self,
        ctx: &AgentRunContext,
        runner_id: &str,
        permissions: &AgentRunnerPermissions,
        policy: &GrantPolicy,
    ) -> HostResult<OpenRun> {
        self.open_run_on(ctx, runner_id, permissions, policy, None)
    }

    /// [`Grants::open_run`], the run's calls going to `host` instead of
    /// the registry's when given (the same store, seen another way).
    pub fn open_run_on(
        &self,
        ctx: &AgentRunContext,
        runner_id: &str,
        permissions: &AgentRunnerPermissions,
        policy: &GrantPolicy,
        host: Option<Arc<dyn HostApi>>,
    ) -> HostResult<OpenRun> {
        if ctx.run_id.trim().is_empty() {
            return Err(AgentAPIError::invalid_argument("run_id must not be empty"));
        }
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.retain(|_, (_, closed, _)| closed.is_none_or(|at| at.elapsed() < CLOSED_MEMORY));
        if runs
            .values()
            .any(|(g, _, _)| g.run_id() == ctx.run_id && !g.is_closed())
        {
            return Err(AgentAPIError::invalid_argument(format!(
                "run {} is already open",
                ctx.run_id
            )));
        }

        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| AgentAPIError::runtime(format!("no randomness for a run token: {e}")))?;
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);

        let default_deadline = now_ms() + policy.caps.default_run_timeout.as_millis() as i64;
        let deadline_ms = ctx
            .runtime
            .deadline_at
            .filter(|d| d.is_finite() && *d > 0.0)
            .map_or(default_deadline, |d| {
                ((d * 1000.0) as i64).min(default_deadline)
            });
        let scope = RunScope::of(ctx, runner_id);
        // A host with knowledge bases of its own gives the run those (the
        // ones the context names, when it names any); otherwise the
        // context's are the host's grant.
        let knowledge_bases = match self.host.knowledge_bases() {
            None => ctx.resources.knowledge_bases.clone(),
            Some(own) => {
                let named = &ctx.resources.knowledge_bases;
                own.into_iter()
                    .filter(|kb| named.is_empty() || named.iter().any(|n| n.kb_id == kb.kb_id))
                    .collect()
            }
        };
        let grant = Arc::new(RunGrant {
            scope,
            apis: granted_apis(ctx, permissions, &knowledge_bases)
                .into_iter()
                .filter(|api| self.host.answers(*api))
                .collect(),
            caps: policy.caps.clone(),
            cross_conversation: policy.cross_conversation,
            input_artifacts: ctx
                .input
                .attachments
                .iter()
                .filter_map(|a| a.artifact_id.clone())
                .collect(),
            tools: ctx.resources.tools.clone(),
            knowledge_bases,
            deadline_ms,
            host,
            closed: AtomicBool::new(false),
            calls: AtomicU32::new(0),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(policy.caps.burst),
                last: Instant::now(),
            }),
            visible: Mutex::new(HashSet::new()),
            closed_refusals: Mutex::new(RefusalThrottle::default()),
            meter: super::meter::Meter::default(),
            models: std::sync::OnceLock::new(),
        });
        runs.insert(token_key(&token), (grant.clone(), None, None));
        tracing::info!(run_id = %ctx.run_id, apis = ?grant.apis, "run opened");
        Ok(OpenRun {
            token: RunToken(token),
            grant,
        })
    }

    /// Let `token` (a live harness session's, minted for the run that
    /// started it) name `grant` too, until that run closes: a harness that
    /// serves many turns keeps the token in its environment, and each
    /// turn's calls are that turn's, checked against its grant. Between
    /// turns the token names a closed run and every call is refused.
    pub fn lend(&self, token: &RunToken, grant: Arc<RunGrant>) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let key = token_key(token.expose());
        let holder = runs.get(&key).and_then(|(_, _, h)| h.clone());
        runs.insert(key, (grant, None, holder));
    }

    /// From now on only `holder` may present `token` (the harness process
    /// it went to, once that has started): a call from anywhere else is
    /// refused whatever run the token names.
    pub fn bind(&self, token: &RunToken, holder: Arc<dyn Holder>) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = runs.get_mut(&token_key(token.expose())) {
            slot.2 = Some(holder);
        }
    }

    /// Who may present `token`, if it is bound to a holder.
    pub fn holder(&self, token: &str) -> Option<Arc<dyn Holder>> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.get(&token_key(token)).and_then(|(_, _, h)| h.clone())
    }

    /// Close a run: its token stops working at once. Returns whether it was open.
    pub fn close_run(&self, run_id: &str) -> bool {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let mut closed = false;
        for (grant, closed_at, _) in runs.values_mut() {
            if grant.run_id() == run_id && closed_at.is_none() {
                grant.closed.store(true, Ordering::Release);
                *closed_at = Some(Instant::now());
                closed = true;
            }
        }
        if closed {
            tracing::info!(run_id, "run closed");
        }
        closed
    }

    /// The host as seen through the grant a bearer token names. A wrong
    /// token is refused (and audited) before anything else happens.
    pub async fn authorize(&self, token: &str) -> HostResult<GrantedHost> {
        let found = {
            let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.get(&token_key(token)).map(|(g, _, _)| g.clone())
        };
        match found {
            Some(grant) if !grant.is_closed() => Ok(self.granted(grant)),
            Some(grant) => {
                let err = AgentAPIError::unauthorized(format!(
                    "run {} is closed; its token is no longer valid",
                    grant.run_id()
                ));
                let due = grant
                    .closed_refusals
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .refused(now_ms());
                if let Some(count) = due {
                    let mut row = err.clone();
                    if count > 1 {
                        row.message = format!(
                            "run {} is closed; {count} calls with its token since the last such row",
                            grant.run_id()
                        );
                    }
                    audit(&self.host, Some(&grant), "authorize", "token", Some(&row)).await;
                }
                Err(err)
            }
            None => {
                let err = AgentAPIError::unauthorized("unknown run token");
                let due = self
                    .unknown
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .refused(now_ms());
                if let Some(count) = due {
                    let mut row = err.clone();
                    if count > 1 {
                        row.message = format!("{count} unknown run tokens since the last such row");
                    }
                    audit(&self.host, None, "authorize", "token", Some(&row)).await;
                }
                Err(err)
            }
        }
    }

    /// The host as seen through a grant the caller already holds.
    pub fn granted(&self, grant: Arc<RunGrant>) -> GrantedHost {
        let host = grant.host.clone().unwrap_or_else(|| self.host.clone());
        GrantedHost { grant, host }
    }
}

/// Longest resource or detail an audit row keeps, in bytes: both may quote
/// what a caller sent (a conversation id, a tool name, a parser's message),
/// and a row is a record of the call, not a copy of it.
const AUDIT_FIELD_BYTES: usize = 512;

/// `text` cut to at most `max` bytes on a character boundary, marked `…`.
fn clipped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Write one audit row: `refusal` is `None` for a call that went through.
async fn audit(
    host: &Arc<dyn HostApi>,
    grant: Option<&RunGrant>,
    action: &str,
    resource: &str,
    refusal: Option<&AgentAPIError>,
) {
    let (outcome, detail) = match refusal {
        None => ("ok".to_string(), String::new()),
        Some(e) => (e.code.to_string(), e.message.clone()),
    };
    audit_row(host, grant, action, resource, outcome, &detail).await;
}

/// Write one audit row as given.
async fn audit_row(
    host: &Arc<dyn HostApi>,
    grant: Option<&RunGrant>,
    action: &str,
    resource: &str,
    outcome: String,
    detail: &str,
) {
    let detail = clipped(detail, AUDIT_FIELD_BYTES);
    let scope = grant.map_or(String::new(), |g| {
        match (&g.scope.conversation_id, &g.scope.thread_id) {
            (Some(c), Some(t)) => format!("conversation:{c}#{t}"),
            (Some(c), None) => format!("conversation:{c}"),
            _ => String::new(),
        }
    });
    let entry = AuditEntry {
        at_ms: now_ms(),
        run_id: grant.map_or(String::new(), |g| g.scope.run_id.clone()),
        runner_id: grant.map_or(String::new(), |g| g.scope.runner_id.clone()),
        action: action.to_string(),
        resource: clipped(resource, AUDIT_FIELD_BYTES),
        scope,
        outcome,
        detail,
    };
    if let Err(e) = host.record_audit(entry).await {
        tracing::error!(error = %e, action, "could not write audit row");
    }
}

/// The host seen through one run's grant: every call is checked, bounded by
/// the deadline, and audited, whatever host implementation is behind it.
#[derive(Clone)]
pub struct GrantedHost {
    grant: Arc<RunGrant>,
    host: Arc<dyn HostApi>,
}

impl GrantedHost {
    /// The grant every call is checked against.
    pub fn grant(&self) -> &Arc<RunGrant> {
        &self.grant
    }

    /// Whether the grant allows `api` (what a tool list should show).
    pub fn allows(&self, api: Api) -> bool {
        self.grant.apis.contains(&api)
    }

    /// One audit row for something the bridge did on the run's behalf
    /// that no host call records (a person's answer to a request): `ok`,
    /// or the refusal, with `detail` saying who and what.
    pub async fn note(
        &self,
        action: &str,
        resource: &str,
        refusal: Option<ErrorCode>,
        detail: &str,
    ) {
        let outcome = refusal.map_or_else(|| "ok".to_string(), |code| code.to_string());
        audit_row(
            &self.host,
            Some(&self.grant),
            action,
            resource,
            outcome,
            detail,
        )
        .await;
    }

    /// Audit a refusal decided in front of the grant (an unknown tool, a
    /// tool not granted, arguments that do not parse, a request the MCP
    /// transport turned down): one row, as for any call, so every refusal
    /// of this run is in the audit whichever layer made it.
    pub async fn refused(&self, action: &str, resource: &str, refusal: &AgentAPIError) {
        audit(
            &self.host,
            Some(&self.grant),
            action,
            resource,
            Some(refusal),
        )
        .await;
    }

    /// One host API call for this run: admitted by the grant (closed,
    /// deadline, granted, budget), its arguments checked against the caps,
    /// asked of the host within the deadline, and audited as one row.
    pub async fn call<C: HostCall>(&self, call: &C) -> HostResult<C::Output> {
        let outcome = match self.grant.admit(C::API) {
            Err(e) => Err(e),
            Ok(()) => self.checked(call).await,
        };
        audit(
            &self.host,
            Some(&self.grant),
            C::ACTION,
            &call.resource(&self.grant),
            outcome.as_ref().err(),
        )
        .await;
        outcome
    }

    /// [`GrantedHost::call`] from arguments as a caller sent them, answered
    /// as a model reads it. The grant admits the call first, so an API not
    /// granted is refused as such whatever its arguments; arguments that are
    /// not the call's are refused next; either refusal is this call's one
    /// audit row.
    pub async fn answer<C: HostCall>(&self, args: Value) -> HostResult<Value> {
        match serde_json::from_value::<C>(args) {
            Ok(call) => {
                let output = self.call(&call).await?;
                call.reply(output)
            }
            Err(e) => {
                let err = match self.grant.admit(C::API) {
                    Err(refusal) => refusal,
                    Ok(()) => bad_arguments(e),
                };
                let resource = format!("tool:{}", C::TOOL);
                audit(
                    &self.host,
                    Some(&self.grant),
                    C::ACTION,
                    &resource,
                    Some(&err),
                )
                .await;
                Err(err)
            }
        }
    }

    async fn checked<C: HostCall>(&self, call: &C) -> HostResult<C::Output> {
        call.check(&self.grant)?;
        match tokio::time::timeout(
            self.grant.remaining(),
            call.ask(self.host.as_ref(), &self.grant),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(AgentAPIError::new(
                ErrorCode::DeadlineExceeded,
                format!("`{}` did not finish before the run's deadline", C::ACTION),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_fields_are_clipped_on_a_character_boundary() {
        assert_eq!(clipped("short", 8), "short");
        assert_eq!(clipped("abcdefgh", 8), "abcdefgh");
        assert_eq!(clipped("abcdefghi", 8), "abcdefgh…");
        // "部" is three bytes: a cut inside it stops before it.
        assert_eq!(clipped("ab部署", 4), "ab…");
    }
}
