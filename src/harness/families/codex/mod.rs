//! Codex: `exec --json` one-shot, `-c` config overrides for MCP, the
//! app-server (JSON-RPC) live, threads under `$CODEX_HOME/sessions`, and its
//! own sandbox left to the cage when caged.

mod decode;
mod live;
mod mcp;
mod session;

pub use decode::CodexJsonl;
pub use live::CodexAppServer;

use super::{CarrySpec, Family, HomeSpec, LiveProtocol, OneShotFormat, SandboxModes};
use crate::harness::SessionIdFormat;

/// `exec --json`.
pub const JSONL: OneShotFormat = OneShotFormat {
    name: "codex-jsonl",
    new: || Box::new(CodexJsonl::default()),
};

/// The app-server (JSON-RPC), which takes follow-ups mid-turn.
pub const LIVE: LiveProtocol = LiveProtocol {
    name: "codex-app-server",
    steers: true,
    asks: true,
    new: |_| Box::new(CodexAppServer::default()),
};

/// The family.
pub const FAMILY: Family = Family {
    name: "codex",
    about: "Codex's exec --json, -c config overrides, app-server when live",
    decoder: Some(JSONL),
    mcp_format: mcp::FORMAT,
    tool_name: "mcp__{server}__{tool}",
    session_store: session::STORE,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("thread/resume failed"),
    instructions_file: None,
    skills_dir: Some(".agents/skills"),
    live_driver: Some(LIVE),
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
    model_files: None,
};
