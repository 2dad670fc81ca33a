//! An Agent Client Protocol agent over stdio: live only, one process per
//! conversation; each agent's spec adds its own home and options.

use super::{Family, HomeSpec};
use crate::harness::live::LiveProtocol;
use crate::harness::{SessionIdFormat, SessionStore};
use crate::projection::McpFormat;

/// The family.
pub const FAMILY: Family = Family {
    name: "acp",
    about: "an Agent Client Protocol agent over stdio, one process per conversation",
    decoder: None,
    mcp_format: McpFormat::Acp,
    tool_name: "mcp__{server}__{tool}",
    session_store: SessionStore::Unknown,
    session_id_format: SessionIdFormat::Token,
    session_not_found: None,
    instructions_file: None,
    skills_dir: None,
    live_driver: Some(LiveProtocol::Acp),
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
};
