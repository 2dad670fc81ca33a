//! Harness families: everything that differs between code-agent CLIs
//! beyond their command line, declared once per family. A spec
//! (`harness-adapters/*.yaml`) picks a family and adds what is the
//! operator's to choose (argv, environment, labels, the install hint); two
//! CLIs that share a family (Claude Code's stream format is also Qwen
//! Code's) differ only in their specs.
//!
//! Each entry here is the only place its facts live: the decoder of the
//! one-shot stream, where and how the MCP config is written, how the
//! harness names an MCP tool, where its sessions are kept and how it says
//! one is gone, which file it reads instructions from, where it finds
//! skills, its live driver, and its home: the variables that point it
//! into the conversation's own home and which of the operator's files it
//! needs there.

mod acp;
mod claude;
mod codex;
mod copilot;
mod gemini;
mod qwen;

use super::decode::OneShotFormat;
use super::live::LiveProtocol;
use super::{SessionIdFormat, SessionStore};
use crate::projection::McpFormat;

/// One family of harness CLIs.
#[derive(Debug, PartialEq)]
pub struct Family {
    /// The name a spec picks it by (`family: …`).
    pub name: &'static str,
    /// What the family is, for `adapters list` and error messages.
    pub about: &'static str,
    /// Its one-shot output format; none for a family driven only live
    /// (ACP).
    pub decoder: Option<OneShotFormat>,
    /// How and where its MCP servers are configured.
    pub mcp_format: McpFormat,
    /// How it names an MCP tool (`{server}`, `{tool}`).
    pub tool_name: &'static str,
    /// Where it keeps sessions, to check one before resuming it.
    pub session_store: SessionStore,
    /// What its session ids look like.
    pub session_id_format: SessionIdFormat,
    /// One-shot output meaning "the session to resume does not exist"
    /// (a live-only family says so in its protocol).
    pub session_not_found: Option<&'static str>,
    /// The file it reads instructions from, where it has no argument for
    /// them: its user-level file in the conversation's home (`~/…`), so
    /// that a repository's own instructions file is never overwritten.
    pub instructions_file: Option<&'static str>,
    /// Where it finds project skills (none: each spec says, as ACP agents
    /// differ).
    pub skills_dir: Option<&'static str>,
    /// The protocol of its live mode.
    pub live_driver: Option<LiveProtocol>,
    /// Its home of the conversation's own: the variables that point it
    /// there, the files written in it and the operator's files carried in.
    pub home: HomeSpec,
    /// Where its token counts are, when its stream has none: a file it
    /// writes (`{usage_file}`).
    pub usage_file: Option<UsageFile>,
    /// Its own sandbox's mode (`{sandbox}`), uncaged and caged: a CLI
    /// whose sandbox cannot start inside the bridge's cage (Codex's is
    /// bubblewrap, which Landlock refuses) leaves confinement to the cage.
    pub sandbox: Option<SandboxModes>,
}

/// What `{sandbox}` says, by whether the bridge's cage is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxModes {
    /// Uncaged: the CLI's own sandbox confines its commands.
    pub uncaged: &'static str,
    /// Caged: the cage does; the CLI's sandbox stays out of its way.
    pub caged: &'static str,
}

/// A file a harness writes its token counts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageFile {
    /// Copilot CLI's `--usage-output-file`: the session's totals so far.
    CopilotSession,
}

impl UsageFile {
    /// The turn's usage from the file as the turn left it (`after`) and
    /// as the last turn left it (`before`).
    pub fn usage(
        self,
        before: Option<&serde_json::Value>,
        after: &serde_json::Value,
    ) -> Option<crate::protocol::TokenUsage> {
        match self {
            UsageFile::CopilotSession => super::decode::copilot_usage_from_file(before, after),
        }
    }
}

/// A per-conversation home (see [`crate::projection::Home`]): every CLI
/// keeps sessions, config and caches in its home, and a home shared by
/// every conversation lets one conversation's agent read another's
/// sessions (and is outside the folder a caged harness may write).
#[derive(Debug, PartialEq)]
pub struct HomeSpec {
    /// The variables that point the harness into the home, each with the
    /// path inside it that it names (empty: the home itself).
    pub env: &'static [(&'static str, &'static str)],
    /// Files written in it, by relative path.
    pub files: &'static [(&'static str, &'static str)],
    /// The operator's files carried in as links.
    pub carry: &'static [CarrySpec],
}

/// Files of the operator's usual home that the harness needs in the
/// conversation's (see [`crate::projection::Carry`]).
#[derive(Debug, PartialEq)]
pub struct CarrySpec {
    /// The folder in the conversation's home they go to.
    pub into: &'static str,
    /// Where the operator's folder is, as the CLI finds it: the first
    /// `$VAR` or `$VAR/path` whose variable is set.
    pub from: &'static [&'static str],
    /// The files, relative to both folders.
    pub files: &'static [&'static str],
    /// Those of them that hold a sign-in (tokens, a key).
    pub sign_in: &'static [&'static str],
}

impl HomeSpec {
    /// The home as the projection takes it.
    pub fn home(&self) -> crate::projection::Home {
        crate::projection::Home {
            env: self
                .env
                .iter()
                .map(|(var, path)| (var.to_string(), path.to_string()))
                .collect(),
            files: self
                .files
                .iter()
                .map(|(path, text)| (path.to_string(), text.to_string()))
                .collect(),
            carry: self
                .carry
                .iter()
                .map(|c| crate::projection::Carry {
                    into: c.into.to_string(),
                    from: c.from.iter().map(|f| f.to_string()).collect(),
                    files: c.files.iter().map(|f| f.to_string()).collect(),
                    sign_in: c.sign_in.iter().map(|f| f.to_string()).collect(),
                })
                .collect(),
        }
    }
}

/// Every family the bridge knows, one module each.
pub const FAMILIES: &[Family] = &[
    claude::FAMILY,
    codex::FAMILY,
    copilot::FAMILY,
    gemini::FAMILY,
    qwen::FAMILY,
    acp::FAMILY,
];

/// The family called `name`.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The known families' names, for error messages.
pub fn names() -> String {
    FAMILIES
        .iter()
        .map(|f| f.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_read_one_shot_or_live_and_found_by_its_name() {
        for f in FAMILIES {
            assert!(f.decoder.is_some() || f.live_driver.is_some(), "{}", f.name);
            assert_eq!(
                f.decoder.is_some(),
                f.session_not_found.is_some(),
                "{}",
                f.name
            );
            assert_eq!(family(f.name).map(|x| x.name), Some(f.name));
        }
    }

    #[test]
    fn every_family_has_a_home_that_names_its_variables_and_sources() {
        for f in FAMILIES {
            let home = f.home.home();
            assert!(home.env.iter().any(|(var, _)| var == "HOME"), "{}", f.name);
            for (var, path) in &home.env {
                assert!(crate::projection::is_var_name(var), "{}: {var}", f.name);
                assert!(
                    path.is_empty() || crate::projection::relative_components(path).is_ok(),
                    "{}: {path}",
                    f.name
                );
            }
            for carry in &home.carry {
                for from in &carry.from {
                    crate::projection::check_home_source(from).unwrap();
                }
                for file in &carry.files {
                    let path = format!("{}/{file}", carry.into);
                    assert!(crate::projection::relative_components(&path).is_ok());
                    // A written file is the bridge's; a carried one the operator's.
                    assert!(!home.files.contains_key(&path), "{}: {path}", f.name);
                }
            }
        }
    }
}
