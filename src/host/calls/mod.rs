//! Each runner-facing host API, declared once.
//!
//! A declaration is a request type: its fields are the call's arguments
//! (their schema is what the harness is shown, their parse is what a call
//! is checked against), and its [`HostCall`] impl says which [`Api`] the
//! grant must allow, what the audit row names, what caps the arguments
//! must keep, how the call reaches a host, how it rides a relay frame and
//! how its answer reads for a model. The grant, the audit, the MCP tool
//! list and dispatch, and the relay all read that one declaration, so an
//! API cannot be checked one way and listed or relayed another.

mod artifacts;
mod events;
mod history;
mod knowledge;
mod state;
mod storage;
pub mod text;
mod tools;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Api, HostApi, HostResult, RunGrant};
use crate::protocol::AgentAPIError;

pub use artifacts::{ArtifactMetadataCall, ArtifactReadCall};
pub use events::{EventGetCall, EventQuery};
pub use history::{HistoryQuery, HistorySearchCall};
pub use knowledge::{ListKnowledgeCall, RetrieveKnowledgeCall};
pub use state::{BRIDGE_KEY_PREFIX, StateDeleteCall, StateGetCall, StateListCall, StateSetCall};
pub use storage::{
    PluginStorageDelete, PluginStorageGet, PluginStorageKeys, PluginStorageSet,
    WorkspaceStorageDelete, WorkspaceStorageGet, WorkspaceStorageKeys, WorkspaceStorageSet,
};
pub use tools::{CallToolCall, ListToolsCall, ToolDetailCall};

/// One runner-facing host API. Implemented by its request type.
#[async_trait]
pub trait HostCall: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// The tool a harness calls (`mcp__langbot__<TOOL>`).
    const TOOL: &'static str;
    /// The action audited and sent in a relay `host_call` frame.
    const ACTION: &'static str;
    /// What the grant must allow.
    const API: Api;
    /// How a model should use it: the tool's description.
    const DESCRIPTION: &'static str;
    /// What the host answers.
    type Output: Serialize + DeserializeOwned + Send;

    /// What the audit row names as the resource touched.
    fn resource(&self, grant: &RunGrant) -> String;

    /// The caps and scope the arguments must keep, checked after the grant
    /// admitted the call and before any host sees it.
    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        let _ = grant;
        Ok(())
    }

    /// The call made on `host` for `grant`'s run (with any check of what
    /// came back, such as visibility).
    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Self::Output>;

    /// The `args` of its relay frame.
    fn relay_args(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The relay's `data` as this call's answer.
    fn from_relay(data: Value) -> HostResult<Self::Output> {
        serde_json::from_value(data).map_err(|e| {
            AgentAPIError::runtime(format!(
                "the host's answer to {} is not understood: {e}",
                Self::ACTION
            ))
        })
    }

    /// The answer as a model reads it (a tool's structured content).
    fn reply(&self, output: Self::Output) -> HostResult<Value> {
        serde_json::to_value(output).map_err(|e| AgentAPIError::runtime(e.to_string()))
    }
}

/// Arguments that are not those of a call, as a refusal.
pub fn bad_arguments(e: impl std::fmt::Display) -> AgentAPIError {
    AgentAPIError::invalid_argument(format!("bad arguments: {e}"))
}

/// Calls the visitor once per declared host API, in the order a tool list
/// shows them: the one list of host APIs.
pub trait VisitCalls {
    /// One declared API.
    fn visit<C: HostCall>(&mut self);
}

/// Every host API, in a stable order.
pub fn each_call(v: &mut impl VisitCalls) {
    v.visit::<HistoryQuery>();
    v.visit::<HistorySearchCall>();
    v.visit::<EventGetCall>();
    v.visit::<EventQuery>();
    v.visit::<ArtifactMetadataCall>();
    v.visit::<ArtifactReadCall>();
    v.visit::<StateGetCall>();
    v.visit::<StateSetCall>();
    v.visit::<StateDeleteCall>();
    v.visit::<StateListCall>();
    v.visit::<PluginStorageGet>();
    v.visit::<PluginStorageSet>();
    v.visit::<PluginStorageDelete>();
    v.visit::<PluginStorageKeys>();
    v.visit::<WorkspaceStorageGet>();
    v.visit::<WorkspaceStorageSet>();
    v.visit::<WorkspaceStorageDelete>();
    v.visit::<WorkspaceStorageKeys>();
    v.visit::<ListToolsCall>();
    v.visit::<ToolDetailCall>();
    v.visit::<CallToolCall>();
    v.visit::<ListKnowledgeCall>();
    v.visit::<RetrieveKnowledgeCall>();
}
