//! An Agent Client Protocol agent over stdio: live only, one process per
//! conversation; each agent's spec adds its own home and options.

mod live;
mod mcp;

pub use live::{Acp, AcpPolicy, AcpResume, AcpSpec};
pub use mcp::FORMAT as MCP;

use super::{Family, HomeSpec, LiveProtocol};
use crate::harness::{SessionIdFormat, SessionStore};

/// The Agent Client Protocol (JSON-RPC).
pub const LIVE: LiveProtocol = LiveProtocol {
    name: "acp",
    steers: false,
    asks: true,
    new: |acp| Box::new(Acp::new(acp.cloned().unwrap_or_default())),
};

/// The family.
pub const FAMILY: Family = Family {
    name: "acp",
    about: "an Agent Client Protocol agent over stdio, one process per conversation",
    decoder: None,
    mcp_format: mcp::FORMAT,
    tool_name: "mcp__{server}__{tool}",
    session_store: SessionStore::UNKNOWN,
    session_id_format: SessionIdFormat::Token,
    session_not_found: None,
    instructions_file: None,
    skills_dir: None,
    live_driver: Some(LIVE),
    // What each agent keeps where differs: its spec adds variables
    // and carried files (`home:`); the XDG folders most follow.
    home: HomeSpec {
        env: &[
            ("HOME", ""),
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_CACHE_HOME", ".cache"),
            ("XDG_STATE_HOME", ".local/state"),
        ],
        files: &[],
        carry: &[],
    },
    usage_file: None,
    sandbox: None,
    model_files: None,
};
