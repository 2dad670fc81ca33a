//! The relay's frames: one JSON object per line on stdio, tagged by
//! `type`. Data only; `docs/relay-protocol.md` is the human description
//! and must say the same.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::projection::McpCatalog;
use crate::protocol::{AgentAPIError, AgentRunResult, JsonMap};
use crate::repo::Projects;

/// The protocol name and version both sides announce in their hello.
pub const PROTOCOL: &str = "harness-bridge.relay.v1";

/// A frame from the plugin to the bridge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Inbound {
    /// First frame: the plugin's protocol and who it is.
    Hello {
        /// Must be [`PROTOCOL`].
        protocol: String,
        /// Free text, for logs (e.g. `langbot-plugin harness-bridge 0.1.0`).
        #[serde(default)]
        client: String,
        /// The host APIs the plugin can answer (`history_page`, `state`,
        /// `plugin_storage`, ...); absent means all of them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        apis: Option<Vec<String>>,
    },
    /// Start a run.
    Run {
        /// The run's id; every later frame about it carries it.
        run_id: String,
        /// Harness (runner) name, e.g. `claude-code`.
        harness: String,
        /// The AgentRunContext, as the host sent it.
        context: Value,
        /// Program path for the harness, when the operator set one.
        #[serde(default)]
        binary: Option<String>,
        /// Variables the operator sets for the harness (PATH, HOME, keys).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Extra MCP servers the operator configured for this runner; the
        /// context's `config.mcp_servers` picks among them by name.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        mcp_servers: McpCatalog,
        /// The repositories the operator declared for the plugin, by name
        /// (as `bridge.yaml`'s `projects`); the context's `config.project`
        /// picks one.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        projects: Projects,
    },
    /// Stop a run (the user interrupted it, or the host gave up).
    Cancel {
        /// The run to stop.
        run_id: String,
    },
    /// A follow-up the person sent while the run works, for its running
    /// turn (LangBot's steering). Answered with [`Outbound::Steered`].
    Steer {
        /// The run whose turn should take it.
        run_id: String,
        /// Echoed in the answer.
        id: u64,
        /// What the person said.
        text: String,
        /// Who said it (the host's actor id), when the host says: a chat
        /// command (`/stop`) in a follow-up is checked against them.
        #[serde(default)]
        actor: Option<String>,
        /// Take it only if it is a chat command: an earlier follow-up
        /// waits for a turn of its own, and this one must not pass it.
        #[serde(default)]
        only_command: bool,
    },
    /// The answer to a [`Outbound::HostCall`].
    HostReply {
        /// The call's id.
        id: u64,
        /// The call's result when it succeeded.
        #[serde(default)]
        data: Option<Value>,
        /// Why it failed.
        #[serde(default)]
        error: Option<AgentAPIError>,
    },
}

/// A frame from the bridge to the plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outbound {
    /// Answer to the plugin's hello.
    Hello {
        /// [`PROTOCOL`].
        protocol: String,
        /// The bridge's version.
        version: String,
        /// Harnesses this bridge can run.
        harnesses: Vec<String>,
    },
    /// One result of a run, in order.
    Result {
        /// The run it belongs to.
        run_id: String,
        /// The result (boxed: results are the big frames).
        result: Box<AgentRunResult>,
    },
    /// A host API call the plugin answers through the host (`ctx.api`).
    HostCall {
        /// Echoed in the reply.
        id: u64,
        /// The run the call is made for.
        run_id: String,
        /// e.g. `history_page`, `state_set`.
        action: String,
        /// The call's arguments.
        args: JsonMap,
    },
    /// Whether the running turn took a [`Inbound::Steer`]: `false` when
    /// its harness takes no input mid-turn, or the turn was not (or no
    /// longer) running. Then the follow-up is the plugin's to send as the
    /// next turn; the bridge has dropped nothing.
    Steered {
        /// The run the follow-up was for.
        run_id: String,
        /// The steer's id.
        id: u64,
        /// Whether the running turn has it.
        taken: bool,
    },
    /// A frame the bridge could not use (the connection goes on).
    Error {
        /// The run it concerns, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        /// What was wrong.
        message: String,
    },
}
