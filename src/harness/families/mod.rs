//! Harness families: everything that differs between code-agent CLIs
//! beyond their command line, one folder per family. A spec
//! (`harness-adapters/*.yaml`) picks a family and adds what is the
//! operator's to choose (argv, environment, labels, the install hint); two
//! CLIs that share a family (Claude Code's stream format is also Qwen
//! Code's) differ only in their specs.
//!
//! A family's folder is the only place its facts and code live: its
//! [`Family`] (`mod.rs`), the decoder of its one-shot stream
//! (`decode.rs`), its live driver (`live.rs`), its MCP config's format
//! and place (`mcp.rs`), where its sessions are kept (`session.rs`), how
//! it names an MCP tool and says a session is gone, which file it reads
//! instructions from, where it finds skills, and its home. What families
//! share stays shared: the [`Decoder`] and [`LiveDriver`] traits and line
//! reassembly (`decode/`, `live/`, with the JSON-RPC core), the MCP
//! server list and its common shapes (`projection::mcp_config`), the
//! session pointers (`session.rs`). A new family is a folder here and its
//! line in [`FAMILIES`].

pub mod acp;
pub mod claude;
mod cline;
pub mod codex;
pub mod copilot;
pub mod gemini;
mod qwen;

use super::decode::Decoder;
use super::live::LiveDriver;
use super::{SessionIdFormat, SessionStore};
use crate::projection::McpFormat;

/// A one-shot output format the bridge reads: a family has one, and a
/// decoder of it is made fresh for each turn.
#[derive(Clone, Copy)]
pub struct OneShotFormat {
    /// Its name, as `adapters show`, the benches and the fuzz targets say it.
    pub name: &'static str,
    /// A new decoder, for one turn.
    pub new: fn() -> Box<dyn Decoder>,
}

impl OneShotFormat {
    /// Its name.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// A new decoder, for one turn.
    pub fn decoder(self) -> Box<dyn Decoder> {
        (self.new)()
    }

    /// Every format a family reads, once each.
    pub fn all() -> Vec<OneShotFormat> {
        let mut all: Vec<OneShotFormat> = Vec::new();
        for format in FAMILIES.iter().filter_map(|f| f.decoder) {
            if !all.contains(&format) {
                all.push(format);
            }
        }
        all
    }

    /// The format called `name`.
    pub fn named(name: &str) -> Option<OneShotFormat> {
        FAMILIES
            .iter()
            .filter_map(|f| f.decoder)
            .find(|f| f.name == name)
    }
}

by_name!(OneShotFormat);

/// A live protocol the bridge speaks, with what it can do: known from the
/// spec alone, so the catalog, the plugin's capabilities and a turn's
/// checks never build a driver to ask.
#[derive(Clone, Copy)]
pub struct LiveProtocol {
    /// The name a spec's `live.driver` gives it.
    pub name: &'static str,
    /// Whether the harness takes input mid-turn ([`LiveDriver::steer`]).
    pub steers: bool,
    /// Whether the harness asks its permissions in the protocol
    /// ([`super::live::Step::permission`]), for `approvals: chat`.
    pub asks: bool,
    /// A new driver, for one process; an ACP agent's with its spec's
    /// options (permission policy, auth method).
    pub new: fn(Option<&acp::AcpSpec>) -> Box<dyn LiveDriver>,
}

impl LiveProtocol {
    /// Its name.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// Whether the harness takes input mid-turn.
    pub fn steers(self) -> bool {
        self.steers
    }

    /// Whether the harness asks its permissions in the protocol.
    pub fn asks(self) -> bool {
        self.asks
    }

    /// A new driver, for one process.
    pub fn driver(self, acp: Option<&acp::AcpSpec>) -> Box<dyn LiveDriver> {
        (self.new)(acp)
    }

    /// Every protocol a family speaks, once each.
    pub fn all() -> Vec<LiveProtocol> {
        let mut all: Vec<LiveProtocol> = Vec::new();
        for protocol in FAMILIES.iter().filter_map(|f| f.live_driver) {
            if !all.contains(&protocol) {
                all.push(protocol);
            }
        }
        all
    }

    /// The protocol called `name`.
    pub fn named(name: &str) -> Option<LiveProtocol> {
        LiveProtocol::all().into_iter().find(|p| p.name == name)
    }

    /// The names, for spec errors.
    pub fn names() -> String {
        LiveProtocol::all()
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

by_name!(LiveProtocol);

impl<'de> serde::Deserialize<'de> for LiveProtocol {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        LiveProtocol::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown live driver `{}` (known: {})",
                name.escape_debug().take(64).collect::<String>(),
                LiveProtocol::names()
            ))
        })
    }
}

impl<'de> serde::Deserialize<'de> for SessionStore {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        session_store(&name).ok_or_else(|| {
            let known: std::collections::BTreeSet<&str> = FAMILIES
                .iter()
                .map(|f| f.session_store.name)
                .chain([SessionStore::UNKNOWN.name])
                .collect();
            serde::de::Error::custom(format!(
                "unknown session store `{}` (known: {})",
                name.escape_debug().take(64).collect::<String>(),
                known.into_iter().collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

/// The session store called `name` (a spec's `session_store:`): a
/// family's, or [`SessionStore::UNKNOWN`].
pub fn session_store(name: &str) -> Option<SessionStore> {
    FAMILIES
        .iter()
        .map(|f| f.session_store)
        .chain([SessionStore::UNKNOWN])
        .find(|s| s.name == name)
}

/// One family of harness CLIs.
#[derive(Debug)]
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
    /// For a CLI that reads its model endpoint from a file and from no
    /// variable: those files (path in its home, content), made from its
    /// environment as the turn starts it, after its door has pointed the
    /// endpoint at the gateway. Never a key: the key stays in a variable
    /// (a stand-in behind the door), so the files hold nothing secret.
    pub model_files: Option<ModelFiles>,
}

/// The files a CLI reads its model endpoint from, made from its
/// environment: (path in its home, content).
pub type ModelFiles =
    fn(&std::collections::BTreeMap<String, String>) -> Vec<(&'static str, Vec<u8>)>;

/// What `{sandbox}` says, by whether the bridge's cage is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxModes {
    /// Uncaged: the CLI's own sandbox confines its commands.
    pub uncaged: &'static str,
    /// Caged: the cage does; the CLI's sandbox stays out of its way.
    pub caged: &'static str,
}

/// A file a harness writes its token counts to (`{usage_file}`): the
/// turn's usage from the file as the turn left it (`after`) and as the
/// last turn left it (`before`).
#[derive(Clone, Copy)]
pub struct UsageFile {
    /// The turn's usage from the two readings.
    pub usage: fn(
        before: Option<&serde_json::Value>,
        after: &serde_json::Value,
    ) -> Option<crate::protocol::TokenUsage>,
}

impl UsageFile {
    /// The turn's usage from the file as the turn left it (`after`) and
    /// as the last turn left it (`before`).
    pub fn usage(
        self,
        before: Option<&serde_json::Value>,
        after: &serde_json::Value,
    ) -> Option<crate::protocol::TokenUsage> {
        (self.usage)(before, after)
    }
}

impl std::fmt::Debug for UsageFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UsageFile")
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

impl PartialEq for Family {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// Every family the bridge knows, one folder each.
pub const FAMILIES: &[Family] = &[
    claude::FAMILY,
    codex::FAMILY,
    copilot::FAMILY,
    gemini::FAMILY,
    qwen::FAMILY,
    acp::FAMILY,
    cline::FAMILY,
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
