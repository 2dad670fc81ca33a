//! Gemini CLI: stream-json, `.gemini/settings.json` and `GEMINI.md` in a
//! home per conversation (it keys sessions by the folder's last name).

mod decode;
mod mcp;

pub use decode::GeminiStreamJson;

use super::{CarrySpec, Family, HomeSpec, OneShotFormat};
use crate::harness::{SessionIdFormat, SessionStore};

/// `--output-format stream-json`.
pub const STREAM_JSON: OneShotFormat = OneShotFormat {
    name: "gemini-stream-json",
    new: || Box::new(GeminiStreamJson::default()),
};

/// The family.
pub const FAMILY: Family = Family {
    name: "gemini",
    about: "Gemini CLI's stream-json, a home per conversation with its .gemini/settings.json and GEMINI.md",
    decoder: Some(STREAM_JSON),
    mcp_format: mcp::FORMAT,
    tool_name: "mcp_{server}_{tool}",
    session_store: SessionStore::UNKNOWN,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("Error resuming session"),
    instructions_file: Some("~/.gemini/GEMINI.md"),
    skills_dir: Some(".gemini/skills"),
    live_driver: None,
    // Gemini keys sessions by the working folder's last name, the same
    // in every conversation. Its settings there are the MCP format's file
    // (with the auth type it needs headless).
    home: HomeSpec {
        env: &[("GEMINI_CLI_HOME", ""), ("HOME", "")],
        files: &[],
        carry: &[CarrySpec {
            into: ".gemini",
            from: &["$GEMINI_CLI_HOME/.gemini", "$HOME/.gemini"],
            files: &["oauth_creds.json", "google_accounts.json", ".env"],
            sign_in: &["oauth_creds.json", "google_accounts.json", ".env"],
        }],
    },
    usage_file: None,
    sandbox: None,
    model_files: None,
};
