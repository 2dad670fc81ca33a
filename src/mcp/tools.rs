//! The tools: typed arguments (unknown ones rejected), one dispatch, and
//! results as structured content plus a text rendering. A failure is a
//! tool error whose text starts with its §9 code, so a model can act on it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use tracing::Instrument;

use crate::host::{Api, Direction, EventQuery, GrantedHost, HistoryQuery, StateEntry};
use crate::interaction::Interactions;
use crate::projection::{HeadRead, read_beneath};
use crate::protocol::{AgentAPIError, StateScope, StorageKind};

/// The server name harnesses see: tools are `mcp__langbot__<tool>`.
pub const SERVER_NAME: &str = "langbot";

/// What the bridge knows about a run besides its grant: the current event
/// (for `get_current_event`) and its input files (for `read_files`).
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// The current event as projected for the harness (scoped, redacted).
    pub current_event: Value,
    /// Input file id → (artifact id, inline copy path, display name).
    pub input_files: HashMap<String, InputRef>,
    /// The run's workspace: inline copies are read beneath it only.
    pub workspace: std::path::PathBuf,
}

/// Where an input file's bytes are.
#[derive(Debug, Clone, Default)]
pub struct InputRef {
    /// The file name as the user sent it.
    pub name: String,
    /// Artifact id in the host store, when there is one.
    pub artifact_id: Option<String>,
    /// Workspace copy (relative to the workspace), when the artifact is
    /// not in the store.
    pub copy: Option<std::path::PathBuf>,
}

fn fifty() -> u32 {
    50
}
fn ten() -> u32 {
    10
}
fn hundred() -> u32 {
    100
}
fn chunk() -> u64 {
    64 * 1024
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HistoryPageArgs {
    /// Another conversation's id; leave out for this conversation.
    conversation_id: Option<String>,
    /// Items older than this cursor (from an item's or page's cursor).
    before_cursor: Option<String>,
    /// Items newer than this cursor.
    after_cursor: Option<String>,
    /// How many items, 1-100.
    #[serde(default = "fifty")]
    limit: u32,
    /// `backward` (newest first, the default) or `forward` (oldest first).
    #[serde(default)]
    direction: Direction,
    /// Include artifact references of each item.
    #[serde(default)]
    include_artifacts: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HistorySearchArgs {
    /// Words to find; items with every word come first, newest first.
    query: String,
    /// Another conversation's id; leave out for this conversation.
    conversation_id: Option<String>,
    /// How many items, 1-50.
    #[serde(default = "ten")]
    top_k: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EventGetArgs {
    /// The event's id.
    event_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EventPageArgs {
    /// Another conversation's id; leave out for this conversation.
    conversation_id: Option<String>,
    /// Only these event types (e.g. `message.received`).
    #[serde(default)]
    event_types: Vec<String>,
    /// Events older than this cursor.
    before_cursor: Option<String>,
    /// Events newer than this cursor.
    after_cursor: Option<String>,
    /// How many events, 1-100.
    #[serde(default = "fifty")]
    limit: u32,
    /// `backward` (newest first, the default) or `forward`.
    #[serde(default)]
    direction: Direction,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ArtifactIdArgs {
    /// The artifact's id.
    artifact_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ArtifactReadArgs {
    /// The artifact's id.
    artifact_id: String,
    /// Byte offset to start at.
    #[serde(default)]
    offset: u64,
    /// How many bytes (default 64 KiB); read on with `offset` while `has_more`.
    #[serde(default = "chunk")]
    length: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFilesArgs {
    /// File ids from `# Input Files` (e.g. `f_3a9c0e12b4d7`), at most 16.
    ids: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StateKeyArgs {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    scope: StateScope,
    /// The key, e.g. `memory.summary`.
    key: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StateSetArgs {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    scope: StateScope,
    /// The key, e.g. `memory.summary`.
    key: String,
    /// Any JSON value (at most 256 KiB as JSON).
    value: Value,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StateListArgs {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    scope: StateScope,
    /// Only keys starting with this.
    prefix: Option<String>,
    /// How many entries, 1-1000.
    #[serde(default = "hundred")]
    limit: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StorageKeyArgs {
    /// The key.
    key: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StorageSetArgs {
    /// The key.
    key: String,
    /// The value: text, or base64 when `base64` is true.
    value: String,
    /// Whether `value` is base64-encoded bytes.
    #[serde(default)]
    base64: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AskUserArgs {
    /// The question, as the person should read it.
    question: String,
    /// Answers to pick from (at most 10); leave out for a free answer.
    #[serde(default)]
    choices: Vec<String>,
}

/// Claude Code's permission prompt call (`--permission-prompt-tool`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ApproveArgs {
    /// The tool the harness wants to use.
    tool_name: String,
    /// Its arguments.
    #[serde(default)]
    input: Value,
    /// The harness's id for the call.
    #[allow(dead_code)]
    tool_use_id: Option<String>,
}

/// One call's arguments, typed: what the dispatch acts on. Storage tools
/// carry the area their name chose.
enum Call {
    CurrentEvent,
    AskUser(AskUserArgs),
    Approve(ApproveArgs),
    ReadFiles(ReadFilesArgs),
    HistoryPage(HistoryPageArgs),
    HistorySearch(HistorySearchArgs),
    EventGet(EventGetArgs),
    EventPage(EventPageArgs),
    ArtifactMetadata(ArtifactIdArgs),
    ArtifactRead(ArtifactReadArgs),
    StateGet(StateKeyArgs),
    StateSet(StateSetArgs),
    StateDelete(StateKeyArgs),
    StateList(StateListArgs),
    StorageGet(StorageKind, StorageKeyArgs),
    StorageSet(StorageKind, StorageSetArgs),
    StorageDelete(StorageKind, StorageKeyArgs),
    StorageKeys(StorageKind),
}

/// One tool: its name, what gates it, how a model should use it, and its
/// arguments (one type gives both the schema and the parse).
struct ToolSpec {
    name: &'static str,
    /// `None`: every run has it (it reads only this run's own event/inputs).
    api: Option<Api>,
    description: &'static str,
    schema: fn() -> Arc<rmcp::model::JsonObject>,
    args: fn(Value) -> Result<Call, AgentAPIError>,
}

macro_rules! tool {
    ($name:literal, $api:expr, $args:ty => $call:expr, $description:literal) => {
        ToolSpec {
            name: $name,
            api: $api,
            description: $description,
            schema: schema_for_type::<$args>,
            args: |args| parse::<$args>(args).map($call),
        }
    };
}

const TOOLS: &[ToolSpec] = &[
    tool!(
        "get_current_event",
        None,
        NoArgs => |_| Call::CurrentEvent,
        "The event this turn answers: its type, sender, subject and input, as the host delivered it. Call first when unsure what the user asked."
    ),
    tool!(
        "ask_user",
        None,
        AskUserArgs => Call::AskUser,
        "Ask the person in the chat a question you cannot answer yourself (a choice, a missing detail). The question goes to them and this turn ends: call it last, then stop. Their answer comes as the next message, in this same session."
    ),
    tool!(
        "approve",
        None,
        ApproveArgs => Call::Approve,
        "The harness's permission prompt (not for the model): asks the person in the chat to approve one action, or allows the one they approved."
    ),
    tool!(
        "read_files",
        None,
        ReadFilesArgs => Call::ReadFiles,
        "Text of this conversation's input files by id (ids from `# Input Files`), up to 1 MiB of each and 4 MiB per call; a longer file says `truncated`. Binary files come back base64-encoded."
    ),
    tool!(
        "history_page",
        Some(Api::HistoryPage),
        HistoryPageArgs => Call::HistoryPage,
        "Earlier messages of this conversation, page by page: newest first by default; pass a returned cursor as before_cursor to go further back. Items come oldest first within a page."
    ),
    tool!(
        "history_search",
        Some(Api::HistorySearch),
        HistorySearchArgs => Call::HistorySearch,
        "Find earlier messages of this conversation by words (any language). Items containing every word come first, then items with some; newest first."
    ),
    tool!(
        "event_get",
        Some(Api::EventGet),
        EventGetArgs => Call::EventGet,
        "One event of this conversation by id: type, sender, subject, time and a short input summary."
    ),
    tool!(
        "event_page",
        Some(Api::EventPage),
        EventPageArgs => Call::EventPage,
        "Events of this conversation page by page (joins, leaves, messages, system events), optionally of given types."
    ),
    tool!(
        "artifact_metadata",
        Some(Api::ArtifactMetadata),
        ArtifactIdArgs => Call::ArtifactMetadata,
        "What an artifact (a file the host stores) is: name, type, size, digest."
    ),
    tool!(
        "artifact_read",
        Some(Api::ArtifactRead),
        ArtifactReadArgs => Call::ArtifactRead,
        "Bytes of an artifact by range: text comes back as text, binary as base64. Continue with offset while has_more is true."
    ),
    tool!(
        "state_get",
        Some(Api::State),
        StateKeyArgs => Call::StateGet,
        "Read one value the host keeps for you across turns (e.g. notes, preferences)."
    ),
    tool!(
        "state_set",
        Some(Api::State),
        StateSetArgs => Call::StateSet,
        "Keep a small JSON value across turns in a scope: conversation, actor (the user), subject, or runner."
    ),
    tool!(
        "state_delete",
        Some(Api::State),
        StateKeyArgs => Call::StateDelete,
        "Forget one kept value."
    ),
    tool!(
        "state_list",
        Some(Api::State),
        StateListArgs => Call::StateList,
        "List kept values of a scope, optionally by key prefix. Values past the first 1 MiB come back as keys only (`value_omitted`): read those with state_get."
    ),
    tool!(
        "plugin_storage_get",
        Some(Api::PluginStorage),
        StorageKeyArgs => |a| Call::StorageGet(StorageKind::Plugin, a),
        "Read a blob from this plugin's storage (text, or base64 for binary)."
    ),
    tool!(
        "plugin_storage_set",
        Some(Api::PluginStorage),
        StorageSetArgs => |a| Call::StorageSet(StorageKind::Plugin, a),
        "Store a blob in this plugin's storage."
    ),
    tool!(
        "plugin_storage_delete",
        Some(Api::PluginStorage),
        StorageKeyArgs => |a| Call::StorageDelete(StorageKind::Plugin, a),
        "Delete a blob from this plugin's storage."
    ),
    tool!(
        "plugin_storage_keys",
        Some(Api::PluginStorage),
        NoArgs => |_| Call::StorageKeys(StorageKind::Plugin),
        "List the keys of this plugin's storage."
    ),
    tool!(
        "workspace_storage_get",
        Some(Api::WorkspaceStorage),
        StorageKeyArgs => |a| Call::StorageGet(StorageKind::Workspace, a),
        "Read a blob from the workspace's shared storage (text, or base64 for binary)."
    ),
    tool!(
        "workspace_storage_set",
        Some(Api::WorkspaceStorage),
        StorageSetArgs => |a| Call::StorageSet(StorageKind::Workspace, a),
        "Store a blob in the workspace's shared storage."
    ),
    tool!(
        "workspace_storage_delete",
        Some(Api::WorkspaceStorage),
        StorageKeyArgs => |a| Call::StorageDelete(StorageKind::Workspace, a),
        "Delete a blob from the workspace's shared storage."
    ),
    tool!(
        "workspace_storage_keys",
        Some(Api::WorkspaceStorage),
        NoArgs => |_| Call::StorageKeys(StorageKind::Workspace),
        "List the keys of the workspace's shared storage."
    ),
];

/// Every tool a run with `apis` may call, in the order `tools/list` gives
/// them: the one table of tool names, shared by the server and by the
/// projection that tells the harness about them.
pub fn tool_names(apis: &BTreeSet<Api>) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| t.api.is_none_or(|api| apis.contains(&api)))
        .map(|t| t.name)
        .collect()
}

/// Where a call finds its run: the grant, and the run's facts.
pub(crate) struct RunAccess {
    pub host: GrantedHost,
    pub facts: Arc<RunFacts>,
    pub interactions: Arc<Interactions>,
}

impl RunAccess {
    /// A refusal this layer makes itself (the grant audits its own): audited
    /// as one row against the run, then returned.
    async fn refuse(&self, action: &str, resource: &str, err: AgentAPIError) -> AgentAPIError {
        self.host.refused(action, resource, &err).await;
        err
    }
}

/// The MCP handler. Over HTTP each request carries the run it belongs to
/// (resolved from its bearer token before it reaches here).
#[derive(Clone, Default)]
pub struct RunTools {
    facts: Arc<Mutex<HashMap<String, Arc<RunFacts>>>>,
    interactions: Arc<Interactions>,
}

impl RunTools {
    /// What live runs asked the person in the chat, and what was approved
    /// for them.
    pub fn interactions(&self) -> &Interactions {
        &self.interactions
    }

    /// Register what a run's `get_current_event` and `read_files` return.
    pub fn set_facts(&self, run_id: &str, facts: RunFacts) {
        self.facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.to_string(), Arc::new(facts));
    }

    /// Forget a run's facts (its run has ended).
    pub fn forget(&self, run_id: &str) {
        self.facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
    }

    pub(crate) fn facts_of(&self, run_id: &str) -> Arc<RunFacts> {
        self.facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned()
            .unwrap_or_default()
    }

    fn access(&self, context: &RequestContext<RoleServer>) -> Result<RunAccess, McpError> {
        let host = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<GrantedHost>())
            .cloned()
            .ok_or_else(|| McpError::invalid_request("no run is attached to this request", None))?;
        let facts = self.facts_of(host.grant().run_id());
        Ok(RunAccess {
            host,
            facts,
            interactions: self.interactions.clone(),
        })
    }

    /// The tools a run may see.
    pub fn list_for(host: &GrantedHost) -> Vec<Tool> {
        TOOLS
            .iter()
            .filter(|t| t.api.is_none_or(|api| host.allows(api)))
            .map(|t| Tool::new(t.name, t.description, (t.schema)()))
            .collect()
    }

    /// Run one tool call for a run: the whole tool surface in one place.
    pub(crate) async fn call(
        access: &RunAccess,
        name: &str,
        args: Option<rmcp::model::JsonObject>,
    ) -> CallToolResult {
        let args = Value::Object(args.unwrap_or_default());
        let tool = TOOLS
            .iter()
            .find(|t| t.name == name)
            .map_or("unknown", |t| t.name);
        let scope = &access.host.grant().scope;
        let span = tracing::info_span!(
            "mcp",
            run_id = %scope.run_id,
            conversation = scope.conversation_id.as_deref().unwrap_or(""),
            tool
        );
        match dispatch(access, name, args).instrument(span).await {
            Ok(value) if tool == "approve" => {
                // The permission prompt contract: one text block holding
                // the decision's JSON, and nothing else (a client reads
                // structured content first when there is some).
                crate::metrics::global().mcp_call(tool, "ok");
                CallToolResult::success(vec![ContentBlock::text(value.to_string())])
            }
            Ok(value) => {
                crate::metrics::global().mcp_call(tool, "ok");
                success(value)
            }
            Err(err) => {
                crate::metrics::global().mcp_call(tool, &err.code.to_string());
                failure(&err)
            }
        }
    }
}

fn unix_now() -> i64 {
    crate::host::now_ms() / 1000
}

fn parse<T: DeserializeOwned>(args: Value) -> Result<T, AgentAPIError> {
    serde_json::from_value(args)
        .map_err(|e| AgentAPIError::invalid_argument(format!("bad arguments: {e}")))
}

fn to_json<T: serde::Serialize>(value: T) -> Result<Value, AgentAPIError> {
    serde_json::to_value(value).map_err(|e| AgentAPIError::runtime(e.to_string()))
}

/// Text a model can read: UTF-8 with no control characters but whitespace.
fn as_text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok().filter(|text| {
        !text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    })
}

fn storage_value(bytes: Option<Vec<u8>>) -> Value {
    match bytes {
        None => json!({"found": false}),
        Some(bytes) => match as_text(&bytes) {
            Some(text) => json!({"found": true, "text": text}),
            None => {
                json!({"found": true, "base64": base64::engine::general_purpose::STANDARD.encode(&bytes)})
            }
        },
    }
}

/// `bytes` as text when they are text, allowing a character cut off at the
/// end when the bytes are only the first part of a file (`cut`): the text
/// then stops before it. A range of CJK text almost always ends mid-character.
fn text_head(bytes: &[u8], cut: bool) -> Option<&str> {
    match std::str::from_utf8(bytes) {
        Err(e) if cut && e.error_len().is_none() => as_text(&bytes[..e.valid_up_to()]),
        _ => as_text(bytes),
    }
}

fn is_text(mime: Option<&str>, bytes: &[u8]) -> bool {
    let declared_binary = mime.is_some_and(|m| {
        !(m.starts_with("text/")
            || m.contains("json")
            || m.contains("xml")
            || m.contains("yaml")
            || m.contains("javascript"))
    });
    !declared_binary && as_text(bytes).is_some()
}

/// The arguments of a call to tool `name`, checked exactly as a call
/// checks them (types, names, no unknown fields) without reaching a host:
/// `not_found` for a tool that does not exist, `invalid_argument` saying
/// what is wrong otherwise. For a client or a test that wants to know
/// whether a call is well-formed before making it.
pub fn check_arguments(name: &str, args: &rmcp::model::JsonObject) -> Result<(), AgentAPIError> {
    (tool_spec(name)?.args)(Value::Object(args.clone())).map(drop)
}

fn tool_spec(name: &str) -> Result<&'static ToolSpec, AgentAPIError> {
    TOOLS
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| AgentAPIError::not_found(format!("no tool `{name}`")))
}

/// One tool call. Refusals made here (unknown tool, not granted, bad
/// arguments, `read_files`' own) are audited here; everything that reaches
/// the host goes through the grant, which audits it.
async fn dispatch(access: &RunAccess, name: &str, args: Value) -> Result<Value, AgentAPIError> {
    let host = &access.host;
    let spec = match tool_spec(name) {
        Ok(spec) => spec,
        Err(err) => return Err(access.refuse("unknown", &format!("tool:{name}"), err).await),
    };
    // Refused again here, whatever the tool list said.
    if let Some(api) = spec.api
        && !host.allows(api)
    {
        let err = AgentAPIError::unauthorized(format!("`{name}` is not granted to this run"));
        return Err(access.refuse(name, &format!("tool:{name}"), err).await);
    }
    let call = match (spec.args)(args) {
        Ok(call) => call,
        Err(err) => return Err(access.refuse(name, &format!("tool:{name}"), err).await),
    };
    match call {
        Call::CurrentEvent => Ok(access.facts.current_event.clone()),
        Call::AskUser(a) => {
            let run_id = host.grant().run_id();
            match access
                .interactions
                .ask(run_id, &a.question, &a.choices, unix_now())
            {
                Ok(said) => Ok(json!({"asked": true, "next": said})),
                Err(why) => {
                    let err = AgentAPIError::invalid_argument(why);
                    Err(access.refuse(name, "tool:ask_user", err).await)
                }
            }
        }
        Call::Approve(a) => {
            let run_id = host.grant().run_id();
            Ok(access
                .interactions
                .decide(run_id, &a.tool_name, &a.input, unix_now())
                .to_json())
        }
        Call::ReadFiles(a) => read_files(access, &a.ids).await,
        Call::HistoryPage(a) => {
            let query = HistoryQuery {
                conversation_id: a.conversation_id,
                before_cursor: a.before_cursor,
                after_cursor: a.after_cursor,
                limit: a.limit,
                direction: a.direction,
                include_artifacts: a.include_artifacts,
            };
            to_json(host.history_page(&query).await?)
        }
        Call::HistorySearch(a) => to_json(
            host.history_search(a.conversation_id.as_deref(), &a.query, a.top_k)
                .await?,
        ),
        Call::EventGet(a) => to_json(host.event_get(&a.event_id).await?),
        Call::EventPage(a) => {
            let query = EventQuery {
                conversation_id: a.conversation_id,
                event_types: a.event_types,
                before_cursor: a.before_cursor,
                after_cursor: a.after_cursor,
                limit: a.limit,
                direction: a.direction,
            };
            to_json(host.event_page(&query).await?)
        }
        Call::ArtifactMetadata(a) => to_json(host.artifact_metadata(&a.artifact_id).await?),
        Call::ArtifactRead(a) => {
            let read = host
                .artifact_read(&a.artifact_id, a.offset, a.length)
                .await?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(read.content_base64.as_deref().unwrap_or(""))
                .map_err(|e| AgentAPIError::runtime(format!("host sent invalid base64: {e}")))?;
            let mut out = json!({
                "artifact_id": read.artifact_id,
                "mime_type": read.mime_type,
                "size_bytes": read.size_bytes,
                "offset": read.offset,
                "length": read.length,
                "has_more": read.has_more,
            });
            let text = text_head(&bytes, read.has_more)
                .filter(|text| is_text(read.mime_type.as_deref(), text.as_bytes()));
            match text {
                Some(text) => {
                    // A character cut at the end is left for the next read.
                    out["length"] = json!(text.len());
                    out["text"] = Value::String(text.to_string());
                }
                None => {
                    out["content_base64"] = Value::String(read.content_base64.unwrap_or_default())
                }
            }
            Ok(out)
        }
        Call::StateGet(a) => {
            let value = host.state_get(a.scope, &a.key).await?;
            Ok(json!({"key": a.key, "found": value.is_some(), "value": value}))
        }
        Call::StateSet(a) => {
            host.state_set(a.scope, &a.key, &a.value).await?;
            Ok(json!({"key": a.key, "stored": true}))
        }
        Call::StateDelete(a) => {
            let existed = host.state_delete(a.scope, &a.key).await?;
            Ok(json!({"key": a.key, "deleted": existed}))
        }
        Call::StateList(a) => {
            let entries = host
                .state_list(a.scope, a.prefix.as_deref(), a.limit)
                .await?;
            Ok(json!({"entries": entries_within(entries, STATE_LIST_VALUE_BYTES)}))
        }
        Call::StorageGet(area, a) => Ok(storage_value(host.storage_get(area, &a.key).await?)),
        Call::StorageSet(area, a) => {
            let bytes = if a.base64 {
                match base64::engine::general_purpose::STANDARD.decode(&a.value) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        let err =
                            AgentAPIError::invalid_argument(format!("value is not base64: {e}"));
                        return Err(access.refuse(name, &format!("tool:{name}"), err).await);
                    }
                }
            } else {
                a.value.into_bytes()
            };
            host.storage_set(area, &a.key, &bytes).await?;
            Ok(json!({"key": a.key, "stored": true}))
        }
        Call::StorageDelete(area, a) => {
            Ok(json!({"key": a.key, "deleted": host.storage_delete(area, &a.key).await?}))
        }
        Call::StorageKeys(area) => Ok(json!({"keys": host.storage_keys(area).await?})),
    }
}

/// Most bytes of values one `state_list` answer carries: a thousand values
/// of 256 KiB would flood the model's context.
const STATE_LIST_VALUE_BYTES: usize = 1024 * 1024;

/// State entries with their values while the values fit in `budget` bytes
/// (as JSON), and by key only after that.
fn entries_within(entries: Vec<StateEntry>, mut budget: usize) -> Vec<Value> {
    entries
        .into_iter()
        .map(|entry| {
            let size = serde_json::to_string(&entry.value).map_or(usize::MAX, |t| t.len());
            if size <= budget {
                budget -= size;
                json!({"key": entry.key, "value": entry.value})
            } else {
                budget = 0;
                json!({"key": entry.key, "value_omitted": true, "value_bytes": size})
            }
        })
        .collect()
}

/// Most ids one `read_files` call takes.
const READ_FILES_MAX_IDS: usize = 16;
/// Most bytes of one file a `read_files` call returns.
const READ_FILES_PER_FILE: u64 = 1024 * 1024;
/// Most bytes all files of one `read_files` call return together.
const READ_FILES_PER_CALL: u64 = 4 * 1024 * 1024;

/// `read_files`: the run's own input files by id, through the grant when
/// they are artifacts (so each read is checked and audited). Bounded per
/// file and per call; inline copies are read beneath the workspace only,
/// following no link, since the harness can replace them. A file refused
/// here (unknown id, over the call's budget, a copy that cannot be read)
/// is one audit row of its own, as a refused artifact read is.
async fn read_files(access: &RunAccess, ids: &[String]) -> Result<Value, AgentAPIError> {
    // Repeats count once; the list is refused as soon as it is too long,
    // before any work that grows with it.
    let mut seen = std::collections::HashSet::new();
    let mut unique: Vec<&String> = Vec::new();
    for id in ids {
        if seen.insert(id.as_str()) {
            if unique.len() == READ_FILES_MAX_IDS {
                let err = AgentAPIError::invalid_argument(format!(
                    "more than {READ_FILES_MAX_IDS} different ids in one call; ask in several calls"
                ));
                return Err(access.refuse("read_files", "tool:read_files", err).await);
            }
            unique.push(id);
        }
    }
    let mut budget = READ_FILES_PER_CALL;
    let mut files = Vec::with_capacity(unique.len());
    for id in unique {
        let resource = format!("input:{id}");
        let Some(input) = access.facts.input_files.get(id) else {
            let err = AgentAPIError::not_found("no input file with this id in this conversation");
            let err = access.refuse("read_files", &resource, err).await;
            files.push(json!({"id": id, "error": err.to_string()}));
            continue;
        };
        let max = READ_FILES_PER_FILE.min(budget);
        let read = if max == 0 {
            let err = AgentAPIError::too_large(format!(
                "this call already returned {READ_FILES_PER_CALL} bytes; ask for this file in another call"
            ));
            Err(access.refuse("read_files", &resource, err).await)
        } else {
            read_input(access, &resource, input, max).await
        };
        files.push(match read {
            Ok(read) => {
                budget = budget.saturating_sub(read.bytes.len() as u64);
                let truncated = (read.bytes.len() as u64) < read.size;
                let mut file = json!({"id": id, "name": input.name, "size_bytes": read.size});
                if truncated {
                    file["truncated"] = Value::Bool(true);
                }
                match text_head(&read.bytes, truncated) {
                    Some(text) => file["text"] = Value::String(text.to_string()),
                    None => {
                        file["content_base64"] = Value::String(
                            base64::engine::general_purpose::STANDARD.encode(&read.bytes),
                        )
                    }
                }
                file
            }
            Err(e) => json!({"id": id, "name": input.name, "error": e.to_string()}),
        });
    }
    Ok(json!({"files": files}))
}

/// The first `max` bytes of one input file, from the store (the grant
/// audits the read) or its workspace copy (a refusal is audited here, as
/// `resource`).
async fn read_input(
    access: &RunAccess,
    resource: &str,
    input: &InputRef,
    max: u64,
) -> Result<HeadRead, AgentAPIError> {
    if let Some(artifact_id) = &input.artifact_id {
        let length = max.min(access.host.grant().caps.max_read_length);
        let read = access.host.artifact_read(artifact_id, 0, length).await?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(read.content_base64.unwrap_or_default())
            .map_err(|e| AgentAPIError::runtime(format!("host sent invalid base64: {e}")))?;
        let size = read.size_bytes.unwrap_or(bytes.len() as u64);
        return Ok(HeadRead { bytes, size });
    }
    let read = match &input.copy {
        Some(copy) => {
            let root = access.facts.workspace.clone();
            let copy = copy.clone();
            match tokio::task::spawn_blocking(move || read_beneath(&root, &copy, max)).await {
                Ok(Ok(read)) => Ok(read),
                Ok(Err(e)) => Err(AgentAPIError::not_found(format!(
                    "the workspace copy cannot be read: {e}"
                ))),
                Err(e) => Err(AgentAPIError::runtime(format!("read stopped: {e}"))),
            }
        }
        None => Err(AgentAPIError::not_found(
            "this file has no readable content",
        )),
    };
    match read {
        Ok(read) => Ok(read),
        Err(err) => Err(access.refuse("read_files", resource, err).await),
    }
}

fn success(value: Value) -> CallToolResult {
    // Compact: the text is for the model, and the same data rides in
    // structured content; pretty-printing would double what goes over the wire.
    let text = serde_json::to_string(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

fn failure(err: &AgentAPIError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        err.code, err.message
    ))]);
    result.structured_content = serde_json::to_value(err).ok();
    result
}

impl ServerHandler for RunTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions("LangBot host facts for this conversation: history, events, artifacts, state and storage, scoped to the current run.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let access = self.access(&context)?;
        Ok(ListToolsResult::with_all_items(Self::list_for(
            &access.host,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let access = self.access(&context)?;
        Ok(Self::call(&access, &request.name, request.arguments)
            .await
            .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorCode;

    #[test]
    fn text_cut_mid_character_stops_before_it() {
        let text = "部署完成".as_bytes();
        // 7 bytes: two characters and the first byte of the third.
        assert_eq!(text_head(&text[..7], true), Some("部署"));
        assert_eq!(
            text_head(&text[..7], false),
            None,
            "a whole file must be whole"
        );
        assert_eq!(text_head(text, false), Some("部署完成"));
        assert_eq!(text_head(&[0xff, b'a'], true), None, "invalid is not cut");
        assert_eq!(text_head(b"a\x00b", true), None, "control bytes are binary");
    }

    #[test]
    fn arguments_are_checked_as_a_call_checks_them() {
        let args = |value: Value| value.as_object().cloned().unwrap_or_default();
        assert!(check_arguments("history_page", &args(json!({"limit": 5}))).is_ok());
        assert!(check_arguments("plugin_storage_keys", &args(json!({}))).is_ok());
        let unknown = check_arguments("history_page", &args(json!({"limt": 5}))).unwrap_err();
        assert_eq!(unknown.code, ErrorCode::InvalidArgument);
        assert!(unknown.message.contains("limt"), "{unknown}");
        let wrong = check_arguments("state_get", &args(json!({"scope": "everyone", "key": "k"})))
            .unwrap_err();
        assert_eq!(wrong.code, ErrorCode::InvalidArgument);
        let missing = check_arguments("no_such_tool", &args(json!({}))).unwrap_err();
        assert_eq!(missing.code, ErrorCode::NotFound);
    }

    #[test]
    fn state_list_values_stop_at_the_budget_and_keys_go_on() {
        let entry = |key: &str, text: &str| StateEntry {
            key: key.into(),
            value: Value::String(text.into()),
        };
        // Each value is its text plus two quotes as JSON.
        let listed = entries_within(
            vec![
                entry("a", "12345678"),
                entry("b", "12345678"),
                entry("c", "1"),
            ],
            15,
        );
        assert_eq!(listed[0], json!({"key": "a", "value": "12345678"}));
        assert_eq!(
            listed[1],
            json!({"key": "b", "value_omitted": true, "value_bytes": 10})
        );
        assert_eq!(listed[2]["value_omitted"], true, "{listed:?}");
    }
}
