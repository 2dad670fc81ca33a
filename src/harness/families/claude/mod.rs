//! Claude Code: stream-json out (and in, live), an `--mcp-config` file,
//! `--append-system-prompt`, sessions under its config folder.

mod decode;
mod live;
mod mcp;
mod session;

pub use decode::ClaudeStreamJson;
pub use live::ClaudeLive;

use super::{CarrySpec, Family, HomeSpec, LiveProtocol, OneShotFormat};
use crate::harness::SessionIdFormat;

/// Its stream-json output, which Qwen Code's also is.
pub const STREAM_JSON: OneShotFormat = OneShotFormat {
    name: "claude-stream-json",
    new: || Box::new(ClaudeStreamJson::default()),
};

/// Its stream-json input and output, one process a conversation.
pub const LIVE: LiveProtocol = LiveProtocol {
    name: "claude-stream-json",
    steers: false,
    asks: true,
    new: |_| Box::new(ClaudeLive::default()),
};

/// The family.
pub const FAMILY: Family = Family {
    name: "claude",
    about: "Claude Code's stream-json, --mcp-config file, --append-system-prompt",
    decoder: Some(STREAM_JSON),
    mcp_format: mcp::FORMAT,
    tool_name: "mcp__{server}__{tool}",
    session_store: session::STORE,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("No conversation found with session ID"),
    instructions_file: None,
    skills_dir: Some(".claude/skills"),
    live_driver: Some(LIVE),
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
    model_files: None,
};
