//! Codex: `exec --json` one-shot, `-c` config overrides for MCP, the
//! app-server (JSON-RPC) live, threads under `$CODEX_HOME/sessions`, and its
//! own sandbox left to the cage when caged.

use super::{CarrySpec, Family, HomeSpec, SandboxModes};
use crate::harness::decode::OneShotFormat;
use crate::harness::live::LiveProtocol;
use crate::harness::{SessionIdFormat, SessionStore};
use crate::projection::McpFormat;

/// The family.
pub const FAMILY: Family = Family {
    name: "codex",
    about: "Codex's exec --json, -c config overrides, app-server when live",
    decoder: Some(OneShotFormat::CodexJsonl),
    mcp_format: McpFormat::CodexOverrides,
    tool_name: "mcp__{server}__{tool}",
    session_store: SessionStore::CodexSessions,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("thread/resume failed"),
    instructions_file: None,
    skills_dir: Some(".agents/skills"),
    live_driver: Some(LiveProtocol::CodexAppServer),
    // Threads under $CODEX_HOME/sessions; the model's provider
    // (config.toml) and the login carried in.
    home: HomeSpec {
        env: &[("HOME", ""), ("CODEX_HOME", ".codex")],
        files: &[],
        carry: &[CarrySpec {
            into: ".codex",
            from: &["$CODEX_HOME", "$HOME/.codex"],
            files: &["config.toml", "auth.json"],
            sign_in: &["auth.json"],
        }],
    },
    usage_file: None,
    sandbox: Some(SandboxModes {
        uncaged: "workspace-write",
        caged: "danger-full-access",
    }),
};
