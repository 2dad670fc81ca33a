//! `list_tools`, `get_tool_detail`, `call_tool`: the host's own tools
//! (`resources.tools`), offered to the harness as LangBot's own runners
//! offer them. Only a tool the run was given, for an operation its
//! resource allows, is reached.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::HostCall;
use crate::host::{Api, HostApi, HostResult, RunGrant, allows};
use crate::protocol::{AgentAPIError, JsonMap, ToolResource};

/// The run's tool `name` when its resource allows `op`; otherwise
/// `unauthorized`, whether or not the host has such a tool.
fn granted_tool<'a>(grant: &'a RunGrant, name: &str, op: &str) -> HostResult<&'a ToolResource> {
    grant
        .tools
        .iter()
        .find(|t| t.tool_name == name && allows(&t.operations, op))
        .ok_or_else(|| {
            AgentAPIError::unauthorized(format!(
                "tool `{name}` is not granted to this run for `{op}`"
            ))
        })
}

/// Arguments of `list_tools` (none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListToolsCall {}

#[async_trait]
impl HostCall for ListToolsCall {
    const TOOL: &'static str = "list_tools";
    const ACTION: &'static str = "list_tools";
    const API: Api = Api::ToolCall;
    const DESCRIPTION: &'static str = "The host's tools you may call with call_tool: name, description, type and JSON parameters schema.";
    type Output = Vec<Value>;

    fn resource(&self, _grant: &RunGrant) -> String {
        "tool:*".into()
    }

    /// The grant's own list, as the host's runner API answers it: frozen
    /// when the run opened, so no host call.
    async fn ask(&self, _host: &dyn HostApi, grant: &RunGrant) -> HostResult<Vec<Value>> {
        Ok(grant
            .tools
            .iter()
            .filter(|t| allows(&t.operations, "call"))
            .map(|t| {
                json!({
                    "name": t.tool_name,
                    "description": t.description,
                    "type": t.tool_type,
                    "parameters": t.parameters,
                })
            })
            .collect())
    }

    fn reply(&self, tools: Vec<Value>) -> HostResult<Value> {
        Ok(json!({ "tools": tools }))
    }
}

/// Arguments of `get_tool_detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolDetailCall {
    /// The tool's name, as `list_tools` gives it.
    pub tool_name: String,
}

#[async_trait]
impl HostCall for ToolDetailCall {
    const TOOL: &'static str = "get_tool_detail";
    const ACTION: &'static str = "get_tool_detail";
    const API: Api = Api::ToolDetail;
    const DESCRIPTION: &'static str =
        "One host tool in full: its description and the JSON schema of its parameters.";
    type Output = Value;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!("tool:{}", self.tool_name)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        granted_tool(grant, &self.tool_name, "detail").map(drop)
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Value> {
        host.tool_detail(&grant.scope, &self.tool_name).await
    }
}

/// Arguments of `call_tool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallToolCall {
    /// The tool's name, as `list_tools` gives it.
    pub tool_name: String,
    /// The tool's arguments, as its parameters schema describes them.
    #[serde(default)]
    pub parameters: JsonMap,
}

#[async_trait]
impl HostCall for CallToolCall {
    const TOOL: &'static str = "call_tool";
    const ACTION: &'static str = "call_tool";
    const API: Api = Api::ToolCall;
    const DESCRIPTION: &'static str = "Call one of the host's tools (see list_tools) with its parameters; returns the tool's result.";
    type Output = Value;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!("tool:{}", self.tool_name)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        granted_tool(grant, &self.tool_name, "call")?;
        let size = serde_json::to_vec(&self.parameters).map_or(usize::MAX, |v| v.len());
        let max = grant.caps.max_tool_parameters_bytes;
        if size > max {
            return Err(AgentAPIError::too_large(format!(
                "parameters are {size} bytes of JSON; the limit is {max}"
            )));
        }
        Ok(())
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Value> {
        host.call_tool(&grant.scope, &self.tool_name, &self.parameters)
            .await
    }

    fn reply(&self, result: Value) -> HostResult<Value> {
        Ok(json!({ "tool_name": self.tool_name, "result": result }))
    }
}
