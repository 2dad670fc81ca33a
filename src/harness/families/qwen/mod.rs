//! Qwen Code: Claude Code's stream shape, a `--mcp-config` file, `QWEN.md`.

mod mcp;

use super::{CarrySpec, Family, HomeSpec};
use crate::harness::{SessionIdFormat, SessionStore};

/// The family.
pub const FAMILY: Family = Family {
    name: "qwen",
    about: "Qwen Code: Claude Code's stream shape, a --mcp-config file with the token in it, QWEN.md",
    decoder: Some(super::claude::STREAM_JSON),
    mcp_format: mcp::FORMAT,
    tool_name: "mcp__{server}__{tool}",
    session_store: SessionStore::UNKNOWN,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("No saved session found with ID"),
    instructions_file: Some("~/.qwen/QWEN.md"),
    skills_dir: Some(".qwen/skills"),
    live_driver: None,
    // Sessions, settings and its login under $QWEN_HOME.
    home: HomeSpec {
        env: &[("HOME", ""), ("QWEN_HOME", ".qwen")],
        files: &[],
        carry: &[CarrySpec {
            into: ".qwen",
            from: &["$QWEN_HOME", "$HOME/.qwen"],
            files: &["settings.json", "oauth_creds.json", ".env"],
            sign_in: &["oauth_creds.json", ".env"],
        }],
    },
    usage_file: None,
    sandbox: None,
    model_files: None,
};
