//! Adapter specs: what it takes to run one harness CLI, as data
//! (`harness-adapters/*.yaml`). The built-in specs are embedded; an
//! operator folder may replace or add specs. A CLI that reuses a known
//! output format is a new YAML file, not new code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

use super::families::acp::AcpSpec;
use super::families::{self as family, Family};
use super::families::{LiveProtocol, OneShotFormat};
use super::{SessionIdFormat, SessionStore};
use crate::projection::{Carry, Home, Target};

/// One argv item: a plain argument, or a group that is kept only when
/// every placeholder in it has a value (e.g. `["--model", "{model}"]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ArgItem {
    /// One argument.
    One(String),
    /// Arguments kept or dropped together.
    Group(Vec<String>),
}

/// The argv of a new turn and of a resumed one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Argv {
    /// A turn with no session to resume.
    pub new: Vec<ArgItem>,
    /// A turn that resumes `{session_id}`.
    pub resume: Vec<ArgItem>,
}

/// What the harness gets on stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stdin {
    /// Nothing: stdin is closed at once (Codex waits on an open pipe).
    #[default]
    Closed,
    /// The turn prompt, then end of input.
    Prompt,
}

/// The child's environment: a whitelist plus fixed values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    /// Variables passed through from the bridge's environment, when set.
    #[serde(default)]
    pub pass: Vec<String>,
    /// Variables always set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// How one process serves many turns of a conversation (`live`): the
/// driver that speaks its stdio protocol, and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSpec {
    /// The protocol; the family's when the spec names none.
    pub driver: LiveProtocol,
    /// Arguments put before the one-shot argv (`new` or `resume`), when
    /// the live mode is the one-shot command with a flag or two more.
    pub args: Vec<ArgItem>,
    /// A whole argv of its own, when the live mode is another command
    /// (the driver then resumes a session in the protocol).
    pub argv: Option<Vec<ArgItem>>,
    /// `{permission_prompt_tool}` in the live mode, under `approvals:
    /// chat`: the harness asks its driver (Claude Code: `stdio`) and the
    /// paused tool call goes on once the person answers.
    pub permission_prompt_tool: Option<String>,
}

/// A spec file's `live` section, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LiveFile {
    #[serde(default)]
    driver: Option<LiveProtocol>,
    #[serde(default)]
    args: Vec<ArgItem>,
    #[serde(default)]
    argv: Option<Vec<ArgItem>>,
    #[serde(default)]
    permission_prompt_tool: Option<String>,
}

/// What an agent adds to its family's home (an ACP agent's files differ
/// from every other's): variables that point it into the conversation's
/// home, and the operator's files it needs there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeAdditions {
    /// Variable → the path in the home it names (empty: the home).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files carried in from the operator's home.
    #[serde(default)]
    pub carry: Vec<CarryFiles>,
}

/// One folder's files carried into the home (see [`Carry`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CarryFiles {
    /// The folder in the conversation's home (empty: the home).
    #[serde(default)]
    pub into: String,
    /// `$VAR` or `$VAR/path`: the first whose variable is set.
    pub from: Vec<String>,
    /// The files, relative to both folders.
    pub files: Vec<String>,
    /// Those of them that hold a sign-in (tokens, a key): `doctor` says
    /// they enter each conversation's cage.
    #[serde(default)]
    pub sign_in: Vec<String>,
}

/// A model endpoint the CLI reads from its environment. In a cage with a
/// network of its own the variable points at the bridge's model gateway
/// (at the harness's door) and each key variable holds a stand-in for the
/// turn: the operator's key stays with the bridge, which puts it on the
/// call on its way to `upstream` (or to the URL the operator set).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEndpoint {
    /// The gateway's name for it: calls come to `/model/<provider>/…`.
    pub provider: String,
    /// The variable the CLI reads its base URL from.
    pub base_url: String,
    /// Where calls go when the operator set no base URL; none: the
    /// endpoint is the gateway's only when the operator set one (a
    /// provider the CLI uses only when told to, e.g. Copilot's own).
    #[serde(default)]
    pub upstream: Option<String>,
    /// The variables that hold its key (passed through when set).
    #[serde(default)]
    pub keys: Vec<String>,
}

/// Model providers a CLI reads from a configuration of its own rather
/// than one variable per endpoint. The bridge reads the operator's
/// providers there (the carried files, never the conversation's copies,
/// which the agent may have written) and points each at the gateway in
/// the form the CLI takes, keeping the upstream and the key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "format", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ModelConfig {
    /// Codex's `config.toml` (`model_provider`, `[model_providers.<id>]`
    /// with `base_url` and `env_key`): the chosen provider is pointed at
    /// the gateway by config overrides; the built-in OpenAI one, when a
    /// key variable is set, by a provider of the bridge's own.
    CodexToml {
        /// The variable that takes the overrides as a JSON object of
        /// dotted keys (an adapter that starts Codex itself, e.g.
        /// `CODEX_CONFIG`); none: `-c` items in `{config_overrides}`.
        #[serde(default)]
        json_env: Option<String>,
    },
    /// opencode's JSON (`provider.<id>.options.baseURL` and `apiKey`),
    /// from the carried files and the variable `content`, which the
    /// harness gets holding the operator's content with every such
    /// provider pointed at the gateway.
    OpencodeJson {
        /// The variable the CLI reads inline configuration from (it
        /// wins over its files).
        content: String,
    },
}

impl ModelConfig {
    /// The variables Codex's built-in OpenAI provider reads its key from.
    pub const CODEX_KEYS: [&'static str; 2] = ["OPENAI_API_KEY", "CODEX_API_KEY"];

    /// The key variables this configuration reads besides a spec's
    /// `models`.
    pub fn keys(&self) -> &'static [&'static str] {
        match self {
            ModelConfig::CodexToml { .. } => &Self::CODEX_KEYS,
            ModelConfig::OpencodeJson { .. } => &[],
        }
    }
}

/// A spec file as written: the family, and what is the operator's to say.
/// The decoder and the MCP format are the family's alone; the skills
/// folder, instructions file, tool naming and session facts default to
/// the family's and may be set for a CLI that speaks a family's formats
/// but keeps its own ways (an ACP agent's files, a script's sessions).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    name: String,
    label: String,
    description: String,
    binary: String,
    family: String,
    #[serde(default)]
    argv: Argv,
    #[serde(default)]
    stdin: Stdin,
    #[serde(default)]
    env: EnvSpec,
    #[serde(default)]
    skills_dir: Option<String>,
    #[serde(default)]
    instructions_file: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    session_not_found: Option<String>,
    #[serde(default)]
    session_store: Option<SessionStore>,
    #[serde(default)]
    session_id_format: Option<SessionIdFormat>,
    #[serde(default)]
    permission_modes: Vec<String>,
    #[serde(default)]
    sign_in: Option<String>,
    install_hint: String,
    #[serde(default)]
    live: Option<LiveFile>,
    #[serde(default)]
    acp: Option<AcpSpec>,
    #[serde(default)]
    home: HomeAdditions,
    #[serde(default)]
    models: Vec<ModelEndpoint>,
    #[serde(default)]
    model_config: Option<ModelConfig>,
    #[serde(default)]
    own_traffic: Vec<String>,
}

/// One harness: its spec file over its family's facts.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterSpec {
    /// Harness name: runner name and `--harness` value.
    pub name: String,
    /// Name shown in a host's UI.
    pub label: String,
    /// One sentence for the host's runner picker.
    pub description: String,
    /// Program to run (looked up on PATH unless a path is configured).
    pub binary: String,
    /// What it shares with the CLIs of its kind (see [`super::family`]).
    pub family: &'static Family,
    /// Arguments, with placeholders (none for an agent that has only a
    /// live mode, an ACP agent).
    pub argv: Argv,
    /// What goes to stdin.
    pub stdin: Stdin,
    /// The child's environment.
    pub env: EnvSpec,
    /// Where the harness finds project skills, relative to its cwd (the
    /// family's unless the spec says).
    pub skills_dir: String,
    /// Where the stable instructions are written, for a harness that
    /// reads them from a file (the family's unless the spec says; an ACP
    /// agent has no argument for them): in the conversation's home when it
    /// starts with `~/` (the user-level file, e.g.
    /// `~/.config/opencode/AGENTS.md`), so a repository's own `AGENTS.md`
    /// is left as it is and read beside them; else in the workspace.
    pub instructions_file: Option<String>,
    /// How the harness names an MCP tool (`{server}`, `{tool}`).
    pub tool_name: String,
    /// The harness's one-shot output format (none for a live-only agent).
    pub decoder: Option<OneShotFormat>,
    /// Output text that means "the session to resume does not exist"
    /// (one-shot; a live driver says so in its protocol).
    pub session_not_found: String,
    /// Where the harness keeps sessions, to check one before resuming it.
    pub session_store: SessionStore,
    /// What the harness's session ids look like; a stored id of another
    /// form is not resumed.
    pub session_id_format: SessionIdFormat,
    /// The values `{permission_mode}` may take (besides `default`, the
    /// harness's own); none: the harness has no such setting.
    pub permission_modes: Vec<String>,
    /// How an operator gives the harness its credentials, said when it
    /// fails `not_signed_in` (the key it reads, its login command).
    pub sign_in: Option<String>,
    /// How an operator installs the harness, shown when it is missing.
    pub install_hint: String,
    /// One process for many turns, where the harness can (its driver
    /// filled in from the family); none: one process per turn.
    pub live: Option<LiveSpec>,
    /// An ACP agent's options.
    pub acp: Option<AcpSpec>,
    /// The conversation's own home: the family's, with what the spec
    /// adds (a variable the spec names again takes the spec's path).
    pub home: Home,
    /// The model endpoints it reads from its environment (see
    /// [`ModelEndpoint`]).
    pub models: Vec<ModelEndpoint>,
    /// Where it reads more model providers from, if anywhere (see
    /// [`ModelConfig`]).
    pub model_config: Option<ModelConfig>,
    /// What it reaches for on its own (update checks, plugin lists,
    /// experiments), as egress rules: behind its door these are refused
    /// without asking the person (audited as its own), unless the
    /// operator allows them, so a question in the chat is only ever about
    /// what the agent chose to do.
    pub own_traffic: Vec<String>,
}

/// Why a harness does not take a permission mode: a sentence for whoever
/// set it (the operator at start, a client in a request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PermissionModeRefused(pub String);

/// Values for one turn's placeholders.
#[derive(Debug, Clone, Default)]
pub struct TurnValues<'a> {
    /// `{prompt}`: the turn prompt.
    pub prompt: &'a str,
    /// `{instructions}`: the stable instructions.
    pub instructions: Option<&'a str>,
    /// `{mcp_config}`: path of the MCP config file.
    pub mcp_config: Option<&'a Path>,
    /// `{session_id}`: the session to resume.
    pub session_id: Option<&'a str>,
    /// `{model}`: the model to use.
    pub model: Option<&'a str>,
    /// `{permission_mode}`: how freely the harness may act.
    pub permission_mode: Option<&'a str>,
    /// `{permission_prompt_tool}`: the MCP tool the harness asks for
    /// permission (`approvals: chat`); none leaves the harness's own way.
    pub permission_prompt_tool: Option<&'a str>,
    /// `{config_overrides}`: `KEY=VALUE` items, each rendered as `-c ITEM`.
    pub config_overrides: &'a [String],
    /// `{usage_file}`: where the harness writes its token counts, for a
    /// family that reads them from a file.
    pub usage_file: Option<&'a Path>,
    /// `{own_port}`: a loopback TCP port the harness may listen on and
    /// connect to, for a CLI that serves itself over HTTP (opencode):
    /// the cage opens this one port to it, no other.
    pub own_port: Option<u16>,
    /// `{sandbox}`: the family's own sandbox mode, caged or not (see
    /// `Family::sandbox`).
    pub sandbox: Option<&'a str>,
}

/// A spec that failed to load: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {reason}", .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct SpecError {
    /// The spec file.
    pub file: String,
    /// The line, when the parser knows it.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

/// Why the specs cannot serve a turn as asked: no spec of the name, or a
/// value that would reach the harness as an option. Either refuses the
/// turn before a harness starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    /// No spec has the name asked for.
    #[error("unknown harness `{name}` (known: {})", .known.join(", "))]
    UnknownHarness {
        /// The name as asked (cut short, escaped).
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// A value would begin an argument of its own with `-`.
    #[error(
        "the value of `{text}` starts with `-`, so {label} would read it as an option; it is refused"
    )]
    OptionLike {
        /// The argument as the spec writes it.
        text: String,
        /// The harness, as people call it.
        label: String,
    },
}

/// The built-in specs, (file name, text): every file of
/// `harness-adapters/`, listed by the build script (`build.rs`).
const BUILT_IN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/built_in_adapters.rs"));

/// The family's home with a spec's additions.
fn with_additions(mut home: Home, added: HomeAdditions) -> Home {
    for (var, path) in added.env {
        home.env.retain(|(v, _)| *v != var);
        home.env.push((var, path));
    }
    home.carry.extend(added.carry.into_iter().map(|c| Carry {
        into: c.into,
        from: c.from,
        files: c.files,
        sign_in: c.sign_in,
    }));
    home
}

/// Why a home is not one the projection can write, if it is not: every
/// path plain and relative, every variable a name, every source `$VAR…`.
fn check_home(home: &Home) -> Result<(), String> {
    let plain =
        |path: &str| path.is_empty() || crate::projection::relative_components(path).is_ok();
    for (var, path) in &home.env {
        if !crate::projection::is_var_name(var) {
            return Err(format!("`{var}` is not a variable name (A-Z, 0-9, _)"));
        }
        if !plain(path) {
            return Err(format!("{var}: `{path}` must be a plain relative path"));
        }
    }
    for carry in &home.carry {
        if !plain(&carry.into) {
            return Err(format!("`{}` must be a plain relative path", carry.into));
        }
        if carry.from.is_empty() {
            return Err("a carried folder needs `from`".into());
        }
        for from in &carry.from {
            crate::projection::check_home_source(from).map_err(|e| e.to_string())?;
        }
        for file in &carry.files {
            if crate::projection::relative_components(file).is_err() {
                return Err(format!("`{file}` must be a plain relative path"));
            }
        }
        if let Some(file) = carry.sign_in.iter().find(|f| !carry.files.contains(f)) {
            return Err(format!(
                "sign_in: `{file}` is not one of the carried `files`"
            ));
        }
    }
    Ok(())
}

/// Where a spec's argv takes the bridge's permission prompt tool.
const PROMPT_TOOL_PLACEHOLDER: &str = "permission_prompt_tool";

const PLACEHOLDERS: [&str; 11] = [
    "prompt",
    "instructions",
    "mcp_config",
    "session_id",
    "model",
    "permission_mode",
    PROMPT_TOOL_PLACEHOLDER,
    "config_overrides",
    "usage_file",
    "own_port",
    "sandbox",
];

/// A spec's live mode: its `live` section with the family's driver where
/// it names none; a live-only family is always live; why not, when a
/// section names no driver the family has.
fn live_spec(
    live: Option<LiveFile>,
    family: &'static crate::harness::families::Family,
) -> Result<Option<LiveSpec>, String> {
    match live {
        Some(live) => {
            let driver = live.driver.or(family.live_driver).ok_or_else(|| {
                format!(
                    "`live` needs a driver: the `{}` family has no live mode (known drivers: {})",
                    family.name,
                    LiveProtocol::names()
                )
            })?;
            Ok(Some(LiveSpec {
                driver,
                args: live.args,
                argv: live.argv,
                permission_prompt_tool: live.permission_prompt_tool,
            }))
        }
        None if family.decoder.is_none() => Ok(family.live_driver.map(|driver| LiveSpec {
            driver,
            args: Vec::new(),
            argv: None,
            permission_prompt_tool: None,
        })),
        None => Ok(None),
    }
}

impl AdapterSpec {
    /// Whether its live harness takes input mid-turn (no process needed
    /// to know).
    pub fn steers(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.driver.steers())
    }

    /// Whether its live harness asks its permissions in its protocol.
    pub fn asks_live(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.driver.asks())
    }

    /// Parse one spec file's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self, SpecError> {
        let raw: SpecFile = serde_yaml::from_str(text).map_err(|e| SpecError {
            file: file.into(),
            line: e.location().map(|l| l.line()),
            reason: e.to_string(),
        })?;
        let fail = |reason: String| SpecError {
            file: file.into(),
            line: None,
            reason,
        };
        let family = family::family(&raw.family).ok_or_else(|| {
            fail(format!(
                "unknown family `{}` (known: {})",
                raw.family.escape_debug().take(64).collect::<String>(),
                family::names()
            ))
        })?;
        let skills_dir = raw
            .skills_dir
            .or_else(|| family.skills_dir.map(str::to_string))
            .ok_or_else(|| {
                fail(format!(
                    "skills_dir is needed: the `{}` family has no usual place for skills",
                    family.name
                ))
            })?;
        if family.decoder.is_none() && raw.session_not_found.is_some() {
            return Err(fail(format!(
                "the `{}` family takes no session_not_found (the protocol says when a session is gone)",
                family.name
            )));
        }
        let live = live_spec(raw.live, family).map_err(fail)?;
        let spec = AdapterSpec {
            name: raw.name,
            label: raw.label,
            description: raw.description,
            binary: raw.binary,
            family,
            argv: raw.argv,
            stdin: raw.stdin,
            env: raw.env,
            skills_dir,
            instructions_file: raw
                .instructions_file
                .or_else(|| family.instructions_file.map(str::to_string)),
            tool_name: raw
                .tool_name
                .unwrap_or_else(|| family.tool_name.to_string()),
            decoder: family.decoder,
            session_not_found: raw
                .session_not_found
                .unwrap_or_else(|| family.session_not_found.unwrap_or_default().to_string()),
            session_store: raw.session_store.unwrap_or(family.session_store),
            permission_modes: raw.permission_modes,
            sign_in: raw.sign_in,
            session_id_format: raw.session_id_format.unwrap_or(family.session_id_format),
            install_hint: raw.install_hint,
            live,
            acp: raw.acp,
            home: with_additions(family.home.home(), raw.home),
            models: raw.models,
            model_config: raw.model_config,
            own_traffic: raw.own_traffic,
        };
        if let Some(bad) = spec.models.iter().find(|m| {
            m.provider.is_empty()
                || !m
                    .provider
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        }) {
            return Err(fail(format!(
                "models: provider `{}` must be lowercase letters, digits or `-`",
                bad.provider.escape_debug()
            )));
        }
        spec.check(file)?;
        Ok(spec)
    }

    fn check(&self, file: &str) -> Result<(), SpecError> {
        let fail = |reason: String| {
            Err(SpecError {
                file: file.into(),
                line: None,
                reason,
            })
        };
        let own = crate::harness::cage::Egress {
            allow: self.own_traffic.clone(),
            deny: Vec::new(),
            ..Default::default()
        };
        if let Err(bad) = own.check_rules() {
            return fail(format!("own_traffic: {}", bad.0));
        }
        if self.live_only() {
            // An agent with only a live mode: the protocol carries the
            // session, its end and its "not found".
            if !self.argv.new.is_empty() || !self.argv.resume.is_empty() {
                return fail(format!(
                    "the `{}` family takes no argv (its command is live.argv)",
                    self.family.name
                ));
            }
            if self.live.as_ref().is_none_or(|l| l.argv.is_none()) {
                return fail(format!(
                    "the `{}` family needs live.argv: the agent's command line",
                    self.family.name
                ));
            }
        } else if self.acp.is_some() {
            return fail("`acp` options go with a family of ACP agents".into());
        } else if self.session_not_found.trim().is_empty() {
            return fail(
                "session_not_found must not be empty (it would match every output)".into(),
            );
        }
        if let Some(live) = &self.live
            && live.driver == super::families::acp::LIVE
            && self.family.live_driver != Some(super::families::acp::LIVE)
        {
            return fail("the `acp` live driver goes with a family of ACP agents".into());
        }
        if let Some(file) = &self.instructions_file {
            let path = file.strip_prefix(IN_HOME).unwrap_or(file);
            if crate::projection::relative_components(path).is_err() {
                return fail(format!(
                    "instructions_file `{file}` must be a plain relative path, \
                     in the workspace or (starting with `{IN_HOME}`) in the conversation's home"
                ));
            }
        }
        if let Err(reason) = check_home(&self.home) {
            return fail(format!("home: {reason}"));
        }
        if crate::projection::relative_components(&self.skills_dir).is_err() {
            return fail(format!(
                "skills_dir `{}` must be a plain relative path",
                self.skills_dir
            ));
        }
        if let Some(live) = &self.live
            && live.argv.is_some()
            && !live.args.is_empty()
        {
            return fail(
                "live takes `args` (before the one-shot argv) or `argv` (its own), not both".into(),
            );
        }
        if let Err(reason) = self.check_placeholders() {
            return fail(reason);
        }
        if self.live_only() {
            return Ok(());
        }
        // The session id must reach the harness whatever else is set: in an
        // argument that needs no value but the prompt (always there).
        let passes_session = |text: &str| {
            let names: Vec<&str> = placeholders(text)
                .into_iter()
                .map(|(_, p)| split_filter(p).0)
                .collect();
            names.contains(&"session_id")
                && names.iter().all(|n| ["session_id", "prompt"].contains(n))
        };
        if !self
            .argv
            .resume
            .iter()
            .any(|i| matches!(i, ArgItem::One(a) if passes_session(a)))
        {
            return fail(
                "argv.resume must pass {session_id} in an argument of its own (or with {prompt} alone)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Every `{placeholder}` (and `|filter`) of every argv is one the
    /// launch fills.
    fn check_placeholders(&self) -> Result<(), String> {
        let live_items = self
            .live
            .iter()
            .flat_map(|l| l.args.iter().chain(l.argv.iter().flatten()));
        let items = self
            .argv
            .new
            .iter()
            .chain(&self.argv.resume)
            .chain(live_items);
        for text in items.flat_map(|item| match item {
            ArgItem::One(a) => vec![a.as_str()],
            ArgItem::Group(g) => g.iter().map(String::as_str).collect(),
        }) {
            for (_, placeholder) in placeholders(text) {
                let (name, filter) = split_filter(placeholder);
                if let Some(filter) = filter.filter(|f| !FILTERS.contains(f)) {
                    return Err(format!(
                        "unknown filter `|{filter}` in `{text}` (known: {})",
                        FILTERS.join(", ")
                    ));
                }
                if !PLACEHOLDERS.contains(&name) {
                    return Err(format!(
                        "unknown placeholder `{{{name}}}` in `{text}` (known: {})",
                        PLACEHOLDERS.join(", ")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether any argv of the spec names `{placeholder}` (e.g. whether
    /// a launch needs a port of its own).
    pub fn mentions(&self, placeholder: &str) -> bool {
        let needle = format!("{{{placeholder}");
        let items = |list: &[ArgItem]| {
            list.iter().any(|item| match item {
                ArgItem::One(text) => text.contains(&needle),
                ArgItem::Group(texts) => texts.iter().any(|t| t.contains(&needle)),
            })
        };
        let live = self
            .live
            .as_ref()
            .is_some_and(|live| items(&live.args) || live.argv.as_deref().is_some_and(items));
        live || items(&self.argv.new) || items(&self.argv.resume)
    }

    /// The absolute paths its argvs name as they are (a script an
    /// interpreter runs, a settings file): the cage lets it read them.
    pub fn named_paths(&self) -> Vec<PathBuf> {
        let live = self.live.as_ref();
        let lists = [
            &self.argv.new[..],
            &self.argv.resume[..],
            live.map_or(&[][..], |l| &l.args[..]),
            live.and_then(|l| l.argv.as_deref()).unwrap_or_default(),
        ];
        let mut paths: Vec<PathBuf> = lists
            .into_iter()
            .flatten()
            .flat_map(|item| match item {
                ArgItem::One(text) => std::slice::from_ref(text),
                ArgItem::Group(group) => &group[..],
            })
            .filter(|text| text.starts_with('/') && !text.contains('{'))
            .map(PathBuf::from)
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Every variable it may read a model key from: its `models`' and
    /// its model configuration's.
    pub fn key_vars(&self) -> Vec<&str> {
        let mut vars: Vec<&str> = self
            .models
            .iter()
            .flat_map(|model| &model.keys)
            .map(String::as_str)
            .collect();
        if let Some(config) = &self.model_config {
            vars.extend(config.keys().iter().copied());
        }
        vars.dedup();
        vars
    }

    /// Whether the harness runs only live: an ACP agent, whose protocol
    /// is the only way in (`run` then drives one live turn and stops it).
    pub fn live_only(&self) -> bool {
        self.family.decoder.is_none()
    }

    /// Whether it hands its permission prompts to the bridge, as
    /// `approvals: chat` needs: through the bridge's prompt tool, or in its
    /// live protocol when it runs live (`live`: the bridge keeps live
    /// processes).
    pub fn hands_over_approvals(&self, live: bool) -> bool {
        self.takes(PROMPT_TOOL_PLACEHOLDER) || ((live || self.live_only()) && self.asks_live())
    }

    /// Whether this harness takes `mode` as its `permission_mode`, or a
    /// sentence naming what it takes: a mode it does not know would
    /// otherwise fail every turn at the harness, and one it has no setting
    /// for would be left off without a word. `default` (or nothing) is
    /// every harness's own.
    pub fn check_permission_mode(&self, mode: &str) -> Result<(), PermissionModeRefused> {
        if mode.is_empty() || mode == "default" || self.permission_modes.iter().any(|m| m == mode) {
            return Ok(());
        }
        if self.permission_modes.is_empty() {
            return Err(PermissionModeRefused(format!(
                "{} has no permission mode (`permission_mode: {mode}` would be left off); \
                 what it may do is set by the cage and its own settings",
                self.label
            )));
        }
        Err(PermissionModeRefused(format!(
            "`{mode}` is not a permission mode of {}{}; it takes default, {}",
            self.label,
            crate::settings_keys::did_you_mean(
                mode,
                self.permission_modes.iter().map(String::as_str)
            ),
            self.permission_modes.join(", ")
        )))
    }

    /// Where the projection puts things for this harness.
    pub fn target(&self) -> Target {
        Target {
            harness: self.name.clone(),
            skills_dir: self.skills_dir.split('/').map(str::to_string).collect(),
            mcp_format: self.family.mcp_format,
            instructions_file: self.instructions_file.as_deref().map(instructions_path),
            tool_name: self.tool_name.clone(),
            home: Some(self.home.clone()),
        }
    }

    /// Whether both of its argvs use `{name}`: a setting that needs a value
    /// to reach the harness (a permission prompt tool) works only then.
    pub fn takes(&self, name: &str) -> bool {
        [&self.argv.new, &self.argv.resume].iter().all(|items| {
            items.iter().any(|item| {
                let texts: &[String] = match item {
                    ArgItem::One(text) => std::slice::from_ref(text),
                    ArgItem::Group(texts) => texts,
                };
                texts.iter().any(|t| {
                    placeholders(t)
                        .iter()
                        .any(|(_, p)| split_filter(p).0 == name)
                })
            })
        })
    }

    /// The arguments of one turn: `resume` when there is a session id.
    ///
    /// Values come from the binding and the host's state, which a less
    /// trusted caller may write: a value that would begin an argument of
    /// its own and starts with `-` is refused, so it can never be read as
    /// an option (specs pass such values as `--flag={value}`).
    pub fn args(&self, values: &TurnValues<'_>) -> Result<Vec<String>, AdapterError> {
        let items = if values.session_id.is_some() {
            &self.argv.resume
        } else {
            &self.argv.new
        };
        self.render(items, values)
    }

    /// The arguments of a live process (none without a `live` section):
    /// its own argv, or its args before the one-shot argv of the turn
    /// that starts it.
    pub fn live_args(&self, values: &TurnValues<'_>) -> Option<Result<Vec<String>, AdapterError>> {
        let live = self.live.as_ref()?;
        Some(match &live.argv {
            Some(argv) => self.render(argv, values),
            None => self.render(&live.args, values).and_then(|mut args| {
                args.extend(self.args(values)?);
                Ok(args)
            }),
        })
    }

    fn render(
        &self,
        items: &[ArgItem],
        values: &TurnValues<'_>,
    ) -> Result<Vec<String>, AdapterError> {
        let mcp_config = values.mcp_config.map(|p| p.to_string_lossy().into_owned());
        let usage_file = values.usage_file.map(|p| p.to_string_lossy().into_owned());
        let value = |name: &str| -> Option<String> {
            match name {
                "prompt" => Some(values.prompt.to_string()),
                "instructions" => values.instructions.map(str::to_string),
                "mcp_config" => mcp_config.clone(),
                "session_id" => values.session_id.map(str::to_string),
                "model" => values.model.filter(|m| !m.is_empty()).map(str::to_string),
                "permission_mode" => values
                    .permission_mode
                    .filter(|m| !m.is_empty() && *m != "default")
                    .map(str::to_string),
                "permission_prompt_tool" => values.permission_prompt_tool.map(str::to_string),
                "usage_file" => usage_file.clone(),
                "own_port" => values.own_port.map(|port| port.to_string()),
                "sandbox" => values.sandbox.map(str::to_string),
                _ => None,
            }
        };
        // One pass over the text: a value is inserted as it is, never read
        // again for placeholders (a prompt may well contain `{model}`).
        let fill = |text: &str| -> Result<Option<String>, AdapterError> {
            let mut out = String::with_capacity(text.len());
            let mut done = 0;
            for (span, placeholder) in placeholders(text) {
                let (name, filter) = split_filter(placeholder);
                let Some(mut v) = value(name) else {
                    return Ok(None);
                };
                if filter == Some("toml") {
                    // A JSON string literal is a valid TOML basic string.
                    v = serde_json::to_string(&v).unwrap_or_default();
                }
                out.push_str(&text[done..span.start]);
                out.push_str(&v);
                done = span.end;
            }
            out.push_str(&text[done..]);
            if text.starts_with('{') && out.starts_with('-') {
                return Err(AdapterError::OptionLike {
                    text: text.to_string(),
                    label: self.label.clone(),
                });
            }
            Ok(Some(out))
        };
        let mut args = Vec::new();
        for item in items {
            match item {
                ArgItem::One(text) if text == "{config_overrides}" => {
                    for o in values.config_overrides {
                        args.push("-c".to_string());
                        args.push(o.clone());
                    }
                }
                ArgItem::One(text) => args.extend(fill(text)?),
                ArgItem::Group(group) => {
                    let filled = group
                        .iter()
                        .map(|t| fill(t))
                        .collect::<Result<Vec<_>, _>>()?;
                    if let Some(filled) = filled.into_iter().collect::<Option<Vec<_>>>() {
                        args.extend(filled);
                    }
                }
            }
        }
        Ok(args)
    }
}

/// Filters a placeholder may carry: `{instructions|toml}` is the value as a
/// quoted TOML string (for `-c key=value` config overrides).
const FILTERS: [&str; 1] = ["toml"];

/// `name|filter` → (`name`, `Some(filter)`).
fn split_filter(placeholder: &str) -> (&str, Option<&str>) {
    match placeholder.split_once('|') {
        Some((name, filter)) => (name, Some(filter)),
        None => (placeholder, None),
    }
}

/// `{name}` placeholders in a text, each with where it sits (braces
/// included).
fn placeholders(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find('{') {
        let start = from + open;
        let Some(len) = text[start + 1..].find('}') else {
            break;
        };
        let end = start + 1 + len + 1;
        found.push((start..end, &text[start + 1..end - 1]));
        from = end;
    }
    found
}

/// The specs in force: built-in, replaced or extended by an operator folder.
#[derive(Debug, Clone)]
pub struct Adapters {
    specs: Vec<AdapterSpec>,
    /// Where each spec came from (`built-in` or a file path).
    pub sources: BTreeMap<String, String>,
}

impl Adapters {
    /// The built-in specs, parsed once.
    pub fn builtin() -> &'static Adapters {
        static BUILT: OnceLock<Adapters> = OnceLock::new();
        BUILT.get_or_init(|| {
            #[allow(
                clippy::expect_used,
                reason = "the built-in specs are compiled in and parsed by a test"
            )]
            let specs: Vec<AdapterSpec> = BUILT_IN
                .iter()
                .map(|(file, text)| {
                    AdapterSpec::parse(file, text)
                        .expect("built-in adapter specs are valid (tested)")
                })
                .collect();
            let sources = specs
                .iter()
                .map(|s| (s.name.clone(), "built-in".to_string()))
                .collect();
            Adapters { specs, sources }
        })
    }

    /// The built-in specs plus every `*.yaml` in `dir` (a spec with a
    /// built-in's name replaces it). Any malformed file fails the load.
    pub fn load(dir: &Path) -> Result<Adapters, SpecError> {
        let mut adapters = Adapters::builtin().clone();
        let unreadable = |file: &PathBuf, e: std::io::Error| SpecError {
            file: file.display().to_string(),
            line: None,
            reason: e.to_string(),
        };
        let entries = std::fs::read_dir(dir).map_err(|e| unreadable(&dir.to_path_buf(), e))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|e| unreadable(&file, e))?;
            let spec = AdapterSpec::parse(&file.display().to_string(), &text)?;
            adapters
                .sources
                .insert(spec.name.clone(), file.display().to_string());
            adapters.specs.retain(|s| s.name != spec.name);
            adapters.specs.push(spec);
        }
        Ok(adapters)
    }

    /// Every spec, by name.
    pub fn all(&self) -> &[AdapterSpec] {
        &self.specs
    }

    /// The spec called `name`.
    pub fn find(&self, name: &str) -> Option<&AdapterSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// The spec called `name`, or the one message every caller gives when
    /// there is none: the name (cut short, escaped) and the known ones.
    pub fn require(&self, name: &str) -> Result<&AdapterSpec, AdapterError> {
        self.find(name).ok_or_else(|| AdapterError::UnknownHarness {
            name: name.escape_debug().take(64).collect(),
            known: self.specs.iter().map(|s| s.name.clone()).collect(),
        })
    }
}

/// How an `instructions_file` names a path in the conversation's home.
const IN_HOME: &str = "~/";

/// An `instructions_file` as workspace path parts: `~/x` is `x` in the
/// conversation's home.
fn instructions_path(file: &str) -> Vec<String> {
    match file.strip_prefix(IN_HOME) {
        Some(in_home) => crate::projection::paths::HOME
            .iter()
            .copied()
            .chain(in_home.split('/'))
            .map(str::to_string)
            .collect(),
        None => file.split('/').map(str::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_specs_load_and_render() {
        let adapters = Adapters::builtin();
        let claude = adapters.find("claude-code").unwrap();
        let values = TurnValues {
            prompt: "hi",
            instructions: Some("be brief"),
            mcp_config: Some(Path::new("/w/.langbot/mcp.json")),
            ..Default::default()
        };
        let args = claude.args(&values).unwrap();
        // The prompt goes on stdin, never on the command line.
        assert_eq!(claude.stdin, Stdin::Prompt);
        assert!(!args.contains(&"hi".to_string()), "{args:?}");
        assert_eq!(args[0], "-p");
        assert!(
            !args.iter().any(|a| a.starts_with("--model")),
            "a group without its value is dropped"
        );
        assert!(args.contains(&"--append-system-prompt=be brief".to_string()));
        assert_eq!(
            args.last().map(String::as_str),
            Some("--mcp-config=/w/.langbot/mcp.json")
        );
        let resumed = claude
            .args(&TurnValues {
                session_id: Some("s-1"),
                model: Some("-sonnet"),
                ..values
            })
            .unwrap();
        assert!(resumed.contains(&"--resume=s-1".to_string()));
        // Values ride `--flag=value`: one starting with `-` is still a value.
        assert!(resumed.contains(&"--model=-sonnet".to_string()));

        let codex = adapters.find("codex").unwrap();
        let overrides = vec!["mcp_servers.langbot.url=\"http://x\"".to_string()];
        let args = codex
            .args(&TurnValues {
                prompt: "hi",
                config_overrides: &overrides,
                sandbox: Some("workspace-write"),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            args,
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-s",
                "workspace-write",
                "-c",
                "mcp_servers.langbot.url=\"http://x\"",
                "-"
            ]
        );
        let resumed = codex
            .args(&TurnValues {
                prompt: "hi",
                session_id: Some("th-1"),
                sandbox: Some("danger-full-access"),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(&resumed[..2], ["exec", "resume"]);
        assert!(resumed.contains(&"sandbox_mode=\"danger-full-access\"".to_string()));
        assert_eq!(&resumed[resumed.len() - 3..], ["--", "th-1", "-"]);
        assert_eq!(codex.stdin, Stdin::Prompt);
        // `{instructions|toml}`: a quoted TOML string, whatever the text holds.
        let args = codex
            .args(&TurnValues {
                prompt: "hi",
                instructions: Some("say \"hi\"\nthen \\ stop"),
                ..Default::default()
            })
            .unwrap();
        assert!(
            args.iter()
                .any(|a| a == r#"developer_instructions="say \"hi\"\nthen \\ stop""#),
            "{args:?}"
        );
    }

    fn spec_with_argv(new: &str, resume: &str) -> Result<AdapterSpec, SpecError> {
        AdapterSpec::parse(
            "x.yaml",
            &format!(
                "name: x\nlabel: X\ndescription: d\nbinary: x\nfamily: claude\n\
                 argv:\n  new: {new}\n  resume: {resume}\nstdin: prompt\n\
                 skills_dir: .x/skills\ninstall_hint: h\n"
            ),
        )
    }

    #[test]
    fn values_are_inserted_as_they_are_never_filled_in_again() {
        let spec = spec_with_argv(
            r#"["-p", "{instructions}{model}", "--x={prompt}/{mcp_config}"]"#,
            r#"["--resume", "{session_id}"]"#,
        )
        .unwrap();
        let args = spec.args(&TurnValues {
            prompt: "{mcp_config}",
            instructions: Some("{model}"),
            mcp_config: Some(Path::new("/c")),
            model: Some("m"),
            ..TurnValues::default()
        });
        assert_eq!(args.unwrap(), ["-p", "{model}m", "--x={mcp_config}//c"]);
    }

    #[test]
    fn a_resume_that_could_leave_out_the_session_id_is_refused() {
        // Without a model the argument is dropped, and the session with it.
        let err = spec_with_argv(r#"["-p"]"#, r#"["--resume={session_id}{model}"]"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("argv.resume must pass {session_id}"),
            "{err}"
        );
        assert!(spec_with_argv(r#"["-p"]"#, r#"["--resume={session_id}"]"#).is_ok());
        assert!(spec_with_argv(r#"["-p"]"#, r#"["{session_id}:{prompt}"]"#).is_ok());
    }

    #[test]
    fn a_value_that_would_begin_an_argument_with_a_dash_is_refused() {
        let text = include_str!("../../harness-adapters/codex.yaml")
            .replace("[\"--model={model}\"]", "[\"-m\", \"{model}\"]");
        let spec = AdapterSpec::parse("codex.yaml", &text).unwrap();
        let values = TurnValues {
            prompt: "hi",
            model: Some("--dangerously-bypass-approvals-and-sandbox"),
            ..Default::default()
        };
        let err = spec.args(&values).unwrap_err().to_string();
        assert!(err.contains("read it as an option"), "{err}");
        let fine = spec.args(&TurnValues {
            model: Some("gpt-5"),
            ..values
        });
        assert!(fine.unwrap().windows(2).any(|w| w == ["-m", "gpt-5"]));
    }

    #[test]
    fn session_id_forms() {
        use SessionIdFormat::{Token, Uuid};
        assert!(Uuid.accepts("0199a213-81c0-7800-8aa1-bbab2a035a53"));
        for bad in [
            "--dangerously-skip-permissions",
            "0199a213-81c0-7800-8aa1-bbab2a035a5",
            "0199a213_81c0-7800-8aa1-bbab2a035a53",
            "",
            "../0199a213-81c0-7800-8aa1-bbab2a035",
        ] {
            assert!(!Uuid.accepts(bad), "{bad}");
        }
        assert!(Token.accepts("scripted-1"));
        assert!(Token.accepts("thread:42.a_b"));
        for bad in ["-x", ".hidden", "a b", "a/b", "", &"x".repeat(129)] {
            assert!(!Token.accepts(bad), "{bad}");
        }
        let claude = Adapters::builtin().find("claude-code").unwrap();
        assert_eq!(claude.session_id_format, Uuid);
        assert_eq!(
            Adapters::builtin().find("codex").unwrap().session_id_format,
            Uuid
        );
    }

    #[test]
    fn an_unknown_filter_is_rejected() {
        let text = Adapters::builtin()
            .find("codex")
            .map(|_| include_str!("../../harness-adapters/codex.yaml"))
            .unwrap()
            .replace("{instructions|toml}", "{instructions|yaml}");
        let err = AdapterSpec::parse("codex.yaml", &text).unwrap_err();
        assert!(err.to_string().contains("unknown filter `|yaml`"), "{err}");
    }

    #[test]
    fn a_spec_adds_to_its_familys_home_and_bad_homes_are_refused() {
        let kimi = AdapterSpec::parse(
            "kimi.yaml",
            include_str!("../../harness-adapters/kimi.yaml"),
        )
        .unwrap();
        let vars: Vec<&str> = kimi.home.env.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(
            vars,
            [
                "HOME",
                "XDG_CONFIG_HOME",
                "XDG_DATA_HOME",
                "XDG_CACHE_HOME",
                "XDG_STATE_HOME",
                "KIMI_CODE_HOME"
            ]
        );
        assert_eq!(
            kimi.home.carry[0].from,
            ["$KIMI_CODE_HOME", "$HOME/.kimi-code"]
        );
        assert_eq!(kimi.target().home.as_ref(), Some(&kimi.home));
        let good = include_str!("../../harness-adapters/opencode.yaml");
        // A variable the family sets takes the spec's path.
        let moved = good.replace("home:\n", "home:\n  env:\n    XDG_CACHE_HOME: cache\n");
        let spec = AdapterSpec::parse("x.yaml", &moved).unwrap();
        assert_eq!(
            spec.home
                .env
                .iter()
                .filter(|(v, _)| v == "XDG_CACHE_HOME")
                .collect::<Vec<_>>(),
            [&("XDG_CACHE_HOME".to_string(), "cache".to_string())]
        );
        for (from, to) in [
            ("into: .config/opencode", "into: ../out"),
            ("$XDG_DATA_HOME/opencode", "/etc/opencode"),
            ("files: [auth.json]", "files: [../../auth.json]"),
            ("home:\n", "home:\n  env:\n    lower: x\n"),
            ("home:\n", "home:\n  env:\n    X: /abs\n"),
        ] {
            assert!(good.contains(from), "{from}");
            let err = AdapterSpec::parse("x.yaml", &good.replace(from, to)).unwrap_err();
            assert!(err.reason.starts_with("home: "), "{to}: {err}");
        }
    }

    #[test]
    fn an_instructions_file_in_the_home_lands_under_the_bridges_folder() {
        let good = include_str!("../../harness-adapters/opencode.yaml");
        let opencode = AdapterSpec::parse("opencode.yaml", good).unwrap();
        assert_eq!(
            opencode.target().instructions_file.unwrap(),
            [".langbot", "home", ".config", "opencode", "AGENTS.md"]
        );
        let in_workspace = good.replace("~/.config/opencode/AGENTS.md", "docs/AGENTS.md");
        let spec = AdapterSpec::parse("x.yaml", &in_workspace).unwrap();
        assert_eq!(
            spec.target().instructions_file.unwrap(),
            ["docs", "AGENTS.md"]
        );
        for bad in ["~/../AGENTS.md", "~//AGENTS.md", "/AGENTS.md", "~/"] {
            let text = good.replace("~/.config/opencode/AGENTS.md", bad);
            let err = AdapterSpec::parse("x.yaml", &text).unwrap_err();
            assert!(err.reason.contains("instructions_file"), "{bad}: {err}");
        }
        // Every built-in family that reads a file reads its user-level one.
        for family in crate::harness::families::FAMILIES {
            if let Some(file) = family.instructions_file {
                assert!(file.starts_with(IN_HOME), "{}: {file}", family.name);
            }
        }
    }

    #[test]
    fn malformed_specs_name_the_file_line_and_reason() {
        let err = AdapterSpec::parse("bad.yaml", "name: x\nlabel: [unclosed\n").unwrap_err();
        assert_eq!(err.file, "bad.yaml");
        assert!(err.line.is_some(), "{err}");
        let good = include_str!("../../harness-adapters/codex.yaml");
        let err = AdapterSpec::parse(
            "x.yaml",
            &good.replace("family: codex", "family: telepathy"),
        )
        .unwrap_err();
        let known = format!(
            "unknown family `telepathy` (known: {})",
            crate::harness::families::names()
        );
        assert!(
            known.contains("claude, codex") && err.to_string().contains(&known),
            "{err}"
        );
        // What a family owns is not the spec's to say.
        let err =
            AdapterSpec::parse("x.yaml", &format!("{good}\ndecoder: codex-jsonl\n")).unwrap_err();
        assert!(err.to_string().contains("unknown field `decoder`"), "{err}");
        let err = AdapterSpec::parse("x.yaml", &good.replace("\"{session_id}\"", "\"{promt}\""))
            .unwrap_err();
        assert!(
            err.to_string().contains("unknown placeholder `{promt}`"),
            "{err}"
        );
        let err = AdapterSpec::parse("x.yaml", &format!("{good}\nsurprise: 1\n")).unwrap_err();
        assert!(err.to_string().contains("surprise"), "{err}");
        let err =
            AdapterSpec::parse("x.yaml", &format!("{good}\nskills_dir: ../out\n")).unwrap_err();
        assert!(err.to_string().contains("skills_dir"), "{err}");
        // A live driver is one the bridge speaks, or the spec does not load.
        let err = AdapterSpec::parse(
            "x.yaml",
            &good.replace("live:\n", "live:\n  driver: telepathy\n"),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains(
                "unknown live driver `telepathy` (known: claude-stream-json, codex-app-server, acp)"
            ),
            "{err}"
        );
        assert!(err.line.is_some(), "{err}");
    }

    #[test]
    fn what_a_live_harness_can_do_is_known_from_its_spec() {
        let codex = AdapterSpec::parse(
            "codex.yaml",
            include_str!("../../harness-adapters/codex.yaml"),
        )
        .unwrap();
        assert!(codex.steers() && codex.asks_live());
        let claude = AdapterSpec::parse(
            "claude-code.yaml",
            include_str!("../../harness-adapters/claude-code.yaml"),
        )
        .unwrap();
        assert!(!claude.steers() && claude.asks_live());
        for protocol in LiveProtocol::all() {
            assert_eq!(LiveProtocol::named(protocol.name()), Some(protocol));
        }
    }

    #[test]
    fn an_operator_folder_replaces_and_adds_specs() {
        let dir = tempfile::tempdir().unwrap();
        let codex = include_str!("../../harness-adapters/codex.yaml");
        std::fs::write(
            dir.path().join("codex.yaml"),
            codex.replace("binary: codex", "binary: /opt/codex/bin/codex"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("my-codex.yaml"),
            codex.replace("name: codex", "name: my-codex"),
        )
        .unwrap();
        let adapters = Adapters::load(dir.path()).unwrap();
        assert_eq!(
            adapters.find("codex").unwrap().binary,
            "/opt/codex/bin/codex"
        );
        assert!(adapters.find("my-codex").is_some());
        assert!(adapters.find("claude-code").is_some());
        std::fs::write(dir.path().join("broken.yaml"), "name: [").unwrap();
        let err = Adapters::load(dir.path()).unwrap_err();
        assert!(err.file.ends_with("broken.yaml"), "{err}");
    }
}
