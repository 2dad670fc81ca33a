//! Copilot CLI: its JSON stream, an `--additional-mcp-config` file,
//! `AGENTS.md`, token counts from a usage file.

mod decode;
mod mcp;

pub use decode::CopilotJson;

use super::{CarrySpec, Family, HomeSpec, OneShotFormat, UsageFile};
use crate::harness::{SessionIdFormat, SessionStore};

/// `--output-format json`.
pub const JSON: OneShotFormat = OneShotFormat {
    name: "copilot-json",
    new: || Box::new(CopilotJson::default()),
};

/// The family.
pub const FAMILY: Family = Family {
    name: "copilot",
    about: "Copilot CLI's JSON stream, --additional-mcp-config file, AGENTS.md",
    decoder: Some(JSON),
    mcp_format: mcp::FORMAT,
    tool_name: "{server}-{tool}",
    session_store: SessionStore::UNKNOWN,
    session_id_format: SessionIdFormat::Uuid,
    session_not_found: Some("No session, task, or name matched"),
    instructions_file: Some("~/.copilot/copilot-instructions.md"),
    skills_dir: Some(".github/skills"),
    live_driver: None,
    // Sessions and its login under $COPILOT_HOME.
    home: HomeSpec {
        env: &[("HOME", ""), ("COPILOT_HOME", ".copilot")],
        files: &[],
        carry: &[CarrySpec {
            into: ".copilot",
            from: &["$COPILOT_HOME", "$HOME/.copilot"],
            files: &["config.json"],
            sign_in: &["config.json"],
        }],
    },
    usage_file: Some(UsageFile {
        usage: decode::usage_from_file,
    }),
    sandbox: None,
    model_files: None,
};
