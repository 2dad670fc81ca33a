//! The runners the bridge offers, one per harness spec, and their manifests.
//!
//! Every runner asks for the same permissions: the context-pull APIs the
//! bridge serves to the harness as tools, and tool calling, which is what
//! LangBot asks before it grants the `event_reply` tool a runner sends its
//! reply with where the binding does not deliver results (Agent bindings).
//! The host still intersects them with each binding's policy (§4.4). The
//! LangBot plugin's runner manifests declare the same
//! (`tests/plugin_manifest.rs` holds them to it).

use super::adapter::{AdapterSpec, Adapters};
use crate::protocol::{
    AgentRunnerCapabilities, AgentRunnerDiscovery, AgentRunnerManifest, AgentRunnerPermissions,
    ArtifactOperation, DynamicFormItemSchema, EventOperation, HistoryOperation, I18nObject,
    InteractionOperation, JsonMap, KnowledgeOperation, ListAgentRunnersResponse, StorageKind,
    ToolOperation,
};

/// The plugin identity the bridge's runners are addressed under.
pub const PLUGIN_AUTHOR: &str = "langbot";
/// See [`PLUGIN_AUTHOR`].
pub const PLUGIN_NAME: &str = "harness-bridge";

/// The spec of the built-in harness called `name`.
pub fn find(name: &str) -> Option<&'static AdapterSpec> {
    Adapters::builtin().find(name)
}

/// `plugin:author/name/runner`, the id a host gives a runner (§4.1).
pub fn runner_id(runner_name: &str) -> String {
    format!("plugin:{PLUGIN_AUTHOR}/{PLUGIN_NAME}/{runner_name}")
}

fn i18n(en: &str) -> I18nObject {
    I18nObject::from([("en_US".to_string(), en.to_string())])
}

fn field(
    kind: &str,
    name: &str,
    label: &str,
    description: &str,
    default: serde_json::Value,
) -> DynamicFormItemSchema {
    DynamicFormItemSchema {
        kind: kind.into(),
        name: name.into(),
        label: i18n(label),
        description: Some(i18n(description)),
        required: false,
        default: (!default.is_null()).then_some(default),
        options: None,
        allow_custom: false,
        extra: JsonMap::new(),
    }
}

fn config_schema() -> Vec<DynamicFormItemSchema> {
    use serde_json::json;
    vec![
        field(
            "string",
            "model",
            "Model",
            "Model name passed to the harness; empty uses the harness default.",
            json!(null),
        ),
        field(
            "text",
            "prompt",
            "Instructions",
            "Static instructions added to the harness's system prompt every turn.",
            json!(null),
        ),
        field(
            "integer",
            "timeout_seconds",
            "Turn timeout (seconds)",
            "A turn still running after this is cancelled.",
            json!(600),
        ),
    ]
}

/// The permissions every bridge runner requests.
pub fn requested_permissions() -> AgentRunnerPermissions {
    AgentRunnerPermissions {
        tools: vec![ToolOperation::Detail, ToolOperation::Call],
        knowledge_bases: vec![KnowledgeOperation::List, KnowledgeOperation::Retrieve],
        history: vec![HistoryOperation::Page, HistoryOperation::Search],
        events: vec![EventOperation::Get, EventOperation::Page],
        artifacts: vec![ArtifactOperation::Metadata, ArtifactOperation::Read],
        storage: vec![StorageKind::Plugin, StorageKind::Workspace],
        // Questions and approvals go to the person as cards (`ask_user`,
        // `approvals: chat`).
        interactions: vec![InteractionOperation::Request],
        ..AgentRunnerPermissions::default()
    }
}

/// The discovery answer (`LIST_AGENT_RUNNERS`) for every harness in
/// force: the built-in specs and an operator's (`--adapters`), so a host
/// is offered exactly what the bridge will run.
pub fn discovery(adapters: &Adapters) -> ListAgentRunnersResponse {
    let runners = adapters
        .all()
        .iter()
        .map(|h| AgentRunnerDiscovery {
            plugin_author: PLUGIN_AUTHOR.into(),
            plugin_name: PLUGIN_NAME.into(),
            runner_name: h.name.clone(),
            runner_description: Some(i18n(&h.description)),
            manifest: AgentRunnerManifest {
                id: runner_id(&h.name),
                name: h.name.clone(),
                label: i18n(&h.label),
                description: Some(i18n(&h.description)),
                component_kind: Some("Runner".into()),
                usages: vec!["agent".into()],
                supported_event_patterns: Vec::new(),
                capabilities: AgentRunnerCapabilities {
                    streaming: true,
                    tool_calling: true,
                    knowledge_retrieval: true,
                    interrupt: true,
                    interactions: true,
                    // A follow-up sent while a turn works is pulled, whatever
                    // the harness: a chat command (`/stop`) is answered at
                    // once, the rest goes into the running turn where the
                    // live harness takes input mid-turn, else runs as the
                    // next turn of the same run (nothing is left unpulled,
                    // which LangBot would drop).
                    steering: true,
                    ..AgentRunnerCapabilities::default()
                },
                permissions: requested_permissions(),
                config_schema: config_schema(),
                metadata: JsonMap::new(),
            },
            config: config_schema(),
        })
        .collect();
    ListAgentRunnersResponse { runners }
}
