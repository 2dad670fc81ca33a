//! `AgentRunContext` (§5.2–§6): everything a host hands over for one run.
//!
//! Protocol v1 is event-first: the context carries the current event and
//! its input, plus *handles* (cursors, available APIs) to pull more; never a
//! history window. Every object keeps fields it does not know in `extra`, so
//! a context from a newer host survives parse → project → serialize intact.

use serde::{Deserialize, Serialize};

use super::{ContentElement, JsonMap, is_false};

/// `RUN_AGENT` (§5.1): which runner, with which context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRunRequest {
    pub runner_id: String,
    pub runner_name: String,
    pub context: AgentRunContext,
}

/// The one authoritative run context (§5.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRunContext {
    pub run_id: String,
    pub trigger: AgentTrigger,
    pub event: AgentEventContext,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<ActorContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<SubjectContext>,
    pub input: AgentInput,
    pub delivery: DeliveryContext,
    pub resources: AgentResources,
    /// Required by the protocol document; the released SDK defaults it.
    #[serde(default)]
    pub context: ContextAccess,
    #[serde(default)]
    pub state: AgentRunState,
    pub runtime: AgentRuntimeContext,
    /// Released-SDK addition: public invocation variables.
    #[serde(default)]
    pub variables: JsonMap,
    /// The Agent's runner configuration (the binding), not plugin state.
    #[serde(default)]
    pub config: JsonMap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<AdapterContext>,
    #[serde(default)]
    pub metadata: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl AgentRunContext {
    /// The conversation this run belongs to, from `conversation` or, failing
    /// that, from `context` (hosts fill one or both).
    pub fn conversation_id(&self) -> Option<&str> {
        self.conversation
            .as_ref()
            .and_then(|c| c.conversation_id.as_deref())
            .or(self.context.conversation_id.as_deref())
    }

    /// The thread within the conversation, where the platform has threads.
    pub fn thread_id(&self) -> Option<&str> {
        self.conversation
            .as_ref()
            .and_then(|c| c.thread_id.as_deref())
            .or(self.context.thread_id.as_deref())
    }
}

/// Where a trigger came from (§5.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerSource {
    Platform,
    Webui,
    Api,
    Scheduler,
    System,
    #[default]
    HostAdapter,
}

/// What started the run (§5.3); `type` matches or coarsens `event.event_type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTrigger {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub source: TriggerSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Reference to a large raw platform payload kept by the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawEventRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ref_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_key: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// The current event (§5.4), named with LangBot's stable event names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentEventContext {
    pub event_id: String,
    pub event_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time: Option<i64>,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_ref: Option<RawEventRef>,
    #[serde(default)]
    pub data: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Conversation identity (§5.5). Ids come from IM platforms: opaque text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_id: Option<String>,
    /// Released-SDK addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    /// Released-SDK addition: the entry adapter's own session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Who caused the event (§5.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActorContext {
    pub actor_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_name: Option<String>,
    #[serde(default)]
    pub metadata: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// What the event is about (§5.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectContext {
    pub subject_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_id: Option<String>,
    #[serde(default)]
    pub data: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// The current event's input (§5.6): not history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default)]
    pub contents: Vec<ContentElement>,
    #[serde(default)]
    pub attachments: Vec<ArtifactRef>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl AgentInput {
    /// The input as plain text: `text`, else the text elements joined.
    pub fn to_text(&self) -> String {
        if let Some(text) = &self.text {
            return text.clone();
        }
        self.contents
            .iter()
            .filter(|c| c.kind == "text")
            .filter_map(|c| c.text.as_deref())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A file or media item of the current input. The protocol document calls
/// it `ArtifactRef`; the released SDK's `InputAttachment` has the same role
/// with these field names (and forbids others), so both are modelled here and
/// anything else a host sends is kept in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// Host artifact id, when the attachment lives in the artifact store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
    /// Host-issued reference for importing the input.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// `image`, `file`, `voice`, ...
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Base64 or data URL for small attachments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Platform-native attachment id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// What the output surface can do (§5.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryContext {
    pub surface: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_target: Option<JsonMap>,
    #[serde(default)]
    pub supports_streaming: bool,
    #[serde(default)]
    pub supports_edit: bool,
    #[serde(default)]
    pub supports_reaction: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_size: Option<u64>,
    #[serde(default)]
    pub platform_capabilities: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// What the host inlined and how to pull more (§5.8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextAccess {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_seq: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_seq: Option<i64>,
    #[serde(default)]
    pub has_history_before: bool,
    #[serde(default)]
    pub inline_policy: InlineContextPolicy,
    #[serde(default)]
    pub available_apis: ContextAPICapabilities,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// How much context the host put inline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InlineMode {
    None,
    #[default]
    CurrentEvent,
    RecentTail,
    SummaryTail,
}

/// The host's inline policy for this run (§5.8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InlineContextPolicy {
    #[serde(default)]
    pub mode: InlineMode,
    #[serde(default)]
    pub delivered_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_total_count: Option<u64>,
    #[serde(default)]
    pub messages_complete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Which pull APIs the host opened for this run (§5.8). Flags the released
/// SDK added (`prompt_get`, `steering_pull`, `run_*`, `box`, ...) are kept in
/// `extra`; the bridge grants none of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextAPICapabilities {
    #[serde(default)]
    pub history_page: bool,
    #[serde(default)]
    pub history_search: bool,
    #[serde(default)]
    pub event_get: bool,
    #[serde(default)]
    pub event_page: bool,
    /// In the protocol document, absent from the released SDK.
    #[serde(default, skip_serializing_if = "is_false")]
    pub artifact_metadata: bool,
    /// In the protocol document, absent from the released SDK.
    #[serde(default, skip_serializing_if = "is_false")]
    pub artifact_read: bool,
    #[serde(default)]
    pub state: bool,
    #[serde(default)]
    pub storage: bool,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Host and deadline facts (§5.9). `deadline_at` is epoch seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentRuntimeContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub langbot_version: Option<String>,
    /// Required by the protocol document; optional in the released SDK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<f64>,
    #[serde(default)]
    pub metadata: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Host-owned state snapshot, one map per scope (§5.10).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentRunState {
    #[serde(default)]
    pub conversation: JsonMap,
    #[serde(default)]
    pub actor: JsonMap,
    #[serde(default)]
    pub subject: JsonMap,
    #[serde(default)]
    pub runner: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Entry-adapter metadata; runners should not build on it (§12).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdapterContext {
    #[serde(default)]
    pub extra: JsonMap,
    #[serde(flatten)]
    pub other: JsonMap,
}

/// The run's authorized resources (§6).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentResources {
    #[serde(default)]
    pub models: Vec<ModelResource>,
    #[serde(default)]
    pub tools: Vec<ToolResource>,
    #[serde(default)]
    pub knowledge_bases: Vec<KnowledgeBaseResource>,
    #[serde(default)]
    pub skills: Vec<SkillResource>,
    /// In the protocol document, absent from the released SDK.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileResource>,
    #[serde(default)]
    pub storage: StorageResource,
    #[serde(default)]
    pub platform_capabilities: JsonMap,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A model the run may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResource {
    pub model_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A host tool the run may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResource {
    pub tool_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<JsonMap>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A knowledge base the run may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeBaseResource {
    pub kb_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kb_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kb_type: Option<String>,
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A skill visible to this run (facts only; content comes from the binding).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillResource {
    pub skill_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A host file the run may read (the document names it, without fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Which storage areas the run may use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageResource {
    #[serde(default)]
    pub plugin_storage: bool,
    #[serde(default)]
    pub workspace_storage: bool,
    #[serde(flatten)]
    pub extra: JsonMap,
}
