//! Claude Code: stream-json out (and in, live), an `--mcp-config` file,
//! `--append-system-prompt`, sessions under its config folder.

use super::{CarrySpec, Family, HomeSpec};
use crate::harness::decode::OneShotFormat;
use crate::harness::live::LiveProtocol;
use crate::harness::{SessionIdFormat, SessionStore};
use crate::projection::McpFormat;

/// The family.
pub const FAMILY: Family = Family {
    name: "claude",
    about: "Claude Code's stream-json, --mcp-config file, --append-system-prompt",
    decoder: Some(OneShotFormat::ClaudeStreamJson),
    mcp_format: McpFormat::ClaudeJson,
    tool_name: "mcp__{server}__{tool}",
    session_store: SessionStore::ClaudeProjects,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("No conversation found with session ID"),
    instructions_file: None,
    skills_dir: Some(".claude/skills"),
    live_driver: Some(LiveProtocol::ClaudeStreamJson),
    // Sessions under $CLAUDE_CONFIG_DIR/projects; the key and the
    // operator's settings carried in.
    home: HomeSpec {
        env: &[("HOME", ""), ("CLAUDE_CONFIG_DIR", ".claude")],
        files: &[],
        carry: &[CarrySpec {
            into: ".claude",
            from: &["$CLAUDE_CONFIG_DIR", "$HOME/.claude"],
            files: &[".credentials.json", "settings.json"],
            sign_in: &[".credentials.json"],
        }],
    },
    usage_file: None,
    sandbox: None,
};
