//! Discovery (§4): how a host learns which runners the bridge offers, what
//! they can do (capabilities) and the most they may touch (permissions).
//!
//! Capabilities and permissions are closed sets: an unknown key is an error,
//! never silently dropped, because a dropped permission key would mean the
//! runner is authorized for something other than what its author wrote.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::JsonMap;

/// Locale code → text, e.g. `{"en_US": "Claude Code", "zh_Hans": "..."}`.
pub type I18nObject = BTreeMap<String, String>;

/// Response of `LIST_AGENT_RUNNERS` (`list_runners` in the released SDK).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListAgentRunnersResponse {
    pub runners: Vec<AgentRunnerDiscovery>,
}

/// One runner as a plugin runtime announces it to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRunnerDiscovery {
    pub plugin_author: String,
    pub plugin_name: String,
    pub runner_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_description: Option<I18nObject>,
    pub manifest: AgentRunnerManifest,
    #[serde(default)]
    pub config: Vec<DynamicFormItemSchema>,
}

/// The typed runner manifest (§4.2). `id` is `plugin:author/name/runner`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRunnerManifest {
    pub id: String,
    pub name: String,
    pub label: I18nObject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<I18nObject>,
    /// Released-SDK addition: always `Runner` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_kind: Option<String>,
    /// Released-SDK addition (`agent`, `event`); the SDK requires at least one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usages: Vec<String>,
    /// Released-SDK addition: which event types the runner accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_event_patterns: Vec<String>,
    #[serde(default)]
    pub capabilities: AgentRunnerCapabilities,
    #[serde(default)]
    pub permissions: AgentRunnerPermissions,
    #[serde(default)]
    pub config_schema: Vec<DynamicFormItemSchema>,
    #[serde(default)]
    pub metadata: JsonMap,
}

/// What the runner can do (§4.3); a UI and projection hint, not a grant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRunnerCapabilities {
    #[serde(default)]
    pub streaming: bool,
    #[serde(default)]
    pub tool_calling: bool,
    #[serde(default)]
    pub knowledge_retrieval: bool,
    #[serde(default)]
    pub multimodal_input: bool,
    #[serde(default)]
    pub skill_authoring: bool,
    #[serde(default)]
    pub interrupt: bool,
    /// Released-SDK addition.
    #[serde(default)]
    pub steering: bool,
    /// Released-SDK addition.
    #[serde(default)]
    pub interactions: bool,
}

macro_rules! operation_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $wire)] $variant),+
        }
    };
}

operation_enum!(
    /// Model operations a runner may request.
    ModelOperation { Invoke = "invoke", Stream = "stream", Rerank = "rerank", CountTokens = "count_tokens" }
);
operation_enum!(
    /// Host tool operations.
    ToolOperation { Detail = "detail", Call = "call" }
);
operation_enum!(
    /// Knowledge-base operations.
    KnowledgeOperation { List = "list", Retrieve = "retrieve" }
);
operation_enum!(
    /// Transcript history operations.
    HistoryOperation { Page = "page", Search = "search" }
);
operation_enum!(
    /// Event-log operations.
    EventOperation { Get = "get", Page = "page" }
);
operation_enum!(
    /// Artifact operations.
    ArtifactOperation { Metadata = "metadata", Read = "read" }
);
operation_enum!(
    /// The two storage areas: the plugin's own and the workspace's.
    StorageKind { Plugin = "plugin", Workspace = "workspace" }
);
operation_enum!(
    /// Host file operations.
    FileOperation { Config = "config", Knowledge = "knowledge" }
);
operation_enum!(
    /// Released-SDK addition: interactive requests to the user.
    InteractionOperation { Request = "request" }
);

/// The most a runner may touch (§4.4). The host intersects it with the
/// binding's policy; the result is what a run is actually granted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRunnerPermissions {
    #[serde(default)]
    pub models: Vec<ModelOperation>,
    #[serde(default)]
    pub tools: Vec<ToolOperation>,
    #[serde(default)]
    pub knowledge_bases: Vec<KnowledgeOperation>,
    #[serde(default)]
    pub history: Vec<HistoryOperation>,
    #[serde(default)]
    pub events: Vec<EventOperation>,
    /// In the protocol document, absent from the released SDK: omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactOperation>,
    #[serde(default)]
    pub storage: Vec<StorageKind>,
    /// In the protocol document, absent from the released SDK: omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileOperation>,
    /// Released-SDK addition.
    #[serde(default)]
    pub interactions: Vec<InteractionOperation>,
}

fn intersect<T: PartialEq + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().copied().filter(|item| b.contains(item)).collect()
}

impl AgentRunnerPermissions {
    /// `self ∩ other`, key by key: effective access is never wider than
    /// either the manifest or the binding policy (§4.4).
    pub fn intersect(&self, other: &Self) -> Self {
        AgentRunnerPermissions {
            models: intersect(&self.models, &other.models),
            tools: intersect(&self.tools, &other.tools),
            knowledge_bases: intersect(&self.knowledge_bases, &other.knowledge_bases),
            history: intersect(&self.history, &other.history),
            events: intersect(&self.events, &other.events),
            artifacts: intersect(&self.artifacts, &other.artifacts),
            storage: intersect(&self.storage, &other.storage),
            files: intersect(&self.files, &other.files),
            interactions: intersect(&self.interactions, &other.interactions),
        }
    }
}

/// One field of a runner's configuration form, rendered by the host's UI.
/// Form items are open-ended in the SDK (`extra="allow"`), so extras are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicFormItemSchema {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub label: I18nObject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<I18nObject>,
    #[serde(default)]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<JsonMap>>,
    #[serde(default)]
    pub allow_custom: bool,
    #[serde(flatten)]
    pub extra: JsonMap,
}
