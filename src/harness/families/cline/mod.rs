//! Cline's CLI (`cline --acp`): an Agent Client Protocol agent that
//! keeps its own ways. It ignores the MCP servers of `session/new` and
//! reads them from its settings file (`mcp.rs`); it reads its model
//! endpoint from its provider settings and from no variable
//! (`model.rs`); it asks before every tool, titling a call with its
//! arguments; its sessions go on by `session/load` only, from any folder.

mod mcp;
mod model;

use super::{Family, HomeSpec};
use crate::harness::{SessionIdFormat, SessionStore};

/// The family.
pub const FAMILY: Family = Family {
    name: "cline",
    about: "an ACP agent that reads its MCP servers and model endpoint from its own settings files (Cline)",
    decoder: None,
    mcp_format: mcp::FORMAT,
    tool_name: "{server}__{tool}",
    session_store: SessionStore::UNKNOWN,
    session_id_format: SessionIdFormat::Token,
    session_not_found: None,
    // Its user-level rules: beside a repository's own AGENTS.md and
    // .clinerules, never in their place.
    instructions_file: Some("~/.cline/rules/langbot.md"),
    skills_dir: Some(".cline/skills"),
    live_driver: Some(super::acp::LIVE),
    // Everything under $CLINE_DIR (sessions, settings, its database); no
    // telemetry, no update checks.
    home: HomeSpec {
        env: &[
            ("HOME", ""),
            ("CLINE_DIR", ".cline"),
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_CACHE_HOME", ".cache"),
            ("XDG_STATE_HOME", ".local/state"),
        ],
        files: &[(
            ".cline/data/settings/global-settings.json",
            "{\"telemetryOptOut\": true, \"autoUpdateEnabled\": false}\n",
        )],
        carry: &[],
    },
    usage_file: None,
    sandbox: None,
    model_files: Some(model::files),
};
