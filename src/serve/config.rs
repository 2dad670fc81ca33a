//! `bridge.yaml`: the operator's settings for `harness-bridge serve`, each
//! with a default, checked at start with a message that names the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a `bridge.yaml` was refused: the service does not start on a
/// configuration it cannot keep.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {file}: {cause}")]
    Unreadable {
        /// The file.
        file: String,
        /// What the system said.
        cause: String,
    },
    /// Not YAML of the expected shape (file, line, what is wrong).
    #[error("{0}")]
    Malformed(String),
    /// Well-formed, but a setting cannot hold (which, and why).
    #[error("{0}")]
    Invalid(String),
}

/// The service's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Where the HTTP API listens. Loopback by default.
    pub listen: SocketAddr,
    /// Bearer tokens the API accepts. Empty: the service uses the token in
    /// `STORE/api-token`, generated on first start (0600).
    pub api_tokens: Vec<String>,
    /// No token at all, for development on a loopback address only.
    pub no_auth: bool,
    /// The host store: a folder for the embedded store (default: the data
    /// folder), or a `postgres://` URL for a store several bridges share.
    pub store: Option<String>,
    /// Folder under which workspaces live (default: DATA_DIR/workspaces).
    pub workspace_root: Option<PathBuf>,
    /// Folder of adapter specs that add to or replace the built-in ones.
    pub adapters: Option<PathBuf>,
    /// Harness name → program path.
    pub harness_binaries: BTreeMap<String, PathBuf>,
    /// More variables (names or `PREFIX*`) passed to every harness.
    pub pass_env: Vec<String>,
    /// Variables set for every harness.
    pub set_env: BTreeMap<String, String>,
    /// Extra MCP servers (name → `{command, args, env}` or `{url,
    /// headers}`) a run may pick by name in its `config.mcp_servers`: only
    /// the operator defines what runs.
    pub mcp_servers: crate::projection::McpCatalog,
    /// Code repositories a run may work on, by name (`repository`, `base`,
    /// `branch`, `author`); a binding picks one with `project: NAME` and
    /// its conversation gets a worktree of it on a branch of its own.
    pub projects: crate::repo::Projects,
    /// Knowledge bases of the embedded host: id → folder of text files,
    /// indexed at start (only what changed since the last start) and
    /// searched by a harness with `retrieve_knowledge`.
    pub knowledge_bases: BTreeMap<String, PathBuf>,
    /// Harness for a short-form request that names none.
    pub default_harness: String,
    /// Binding config (model, permission_mode, timeout_seconds,
    /// prompt, ...) under every short-form request's own `config`:
    /// the request's keys win. Each key is checked at start.
    pub default_config: crate::projection::BindingConfig,
    /// Binding config for one harness, by name, over `default_config`
    /// (a `model` or `approvals: chat` only one harness takes).
    pub harness_config: BTreeMap<String, crate::projection::BindingConfig>,
    /// Binding keys no request can change (e.g. `permission_mode:
    /// default`), over both request forms' own config: what a client may
    /// decide stops where the operator says.
    pub fixed_config: crate::projection::BindingConfig,
    /// A request's config keys no binding reads are ignored instead of
    /// refused (422): for a client that sends settings of its own.
    pub ignore_unknown_config_keys: bool,
    /// Turns running at once, across conversations.
    pub max_concurrent_runs: usize,
    /// Turns waiting per conversation before new ones get 429.
    pub max_queue_per_conversation: usize,
    /// Turns accepted but not yet started, across conversations, before
    /// new ones get 429.
    pub max_queued_total: usize,
    /// A turn's timeout when the binding sets none, in seconds.
    pub turn_timeout_seconds: u64,
    /// Seconds between SIGTERM and SIGKILL for a stopped harness.
    pub kill_grace_seconds: u64,
    /// Seconds running turns get to finish on shutdown before they are cancelled.
    pub shutdown_grace_seconds: u64,
    /// Hours a finished run's results stay retrievable by id.
    pub retention_hours: u64,
    /// Most bytes of results (as JSON) one run may produce; past it the run
    /// is stopped and fails with `output_too_large`.
    pub max_run_output_bytes: usize,
    /// Connections open at once; more are closed as soon as they arrive.
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (also while a
    /// kept-alive connection idles); then the connection is closed.
    pub header_timeout_seconds: u64,
    /// Days the store keeps audit rows (host calls and their refusals).
    pub audit_retention_days: u64,
    /// Harness processes kept alive between turns (one per conversation,
    /// for harnesses with a live driver), least recently used stopped
    /// first; 0 starts one process per turn.
    pub max_live_sessions: usize,
    /// Seconds an idle live harness process is kept.
    pub idle_timeout_seconds: u64,
    /// With a PostgreSQL `store`: this instance's name among those sharing
    /// it (default: the machine's name and a digest of the data folder).
    /// Keep it across restarts: a conversation stays with the instance
    /// that holds its workspace.
    pub instance_id: Option<String>,
    /// With a PostgreSQL `store`: seconds an instance lives without a
    /// heartbeat (one each sixth of it); past it, the others end its
    /// running turns (`interrupted`) and take its conversations.
    pub lease_seconds: u64,
    /// With a PostgreSQL `store`: MiB of a harness session's files copied
    /// into the store after each turn, so the session follows its
    /// conversation to the instance that takes it over; a larger session
    /// stays behind (and the next turn says so). 0: sessions never follow.
    pub session_copy_max_mib: u64,
    /// Limits per person (`actor`), `conversation` and `bot`:
    /// `turns_per_minute`, `tokens_per_day`, `tokens_per_month`,
    /// `cost_usd_per_day`, `cost_usd_per_month`; and `mid_turn`
    /// (`finish` or `stop`). A turn over one is not started; the person
    /// is told which limit and when it resets.
    pub budgets: crate::host::budget::Budgets,
    /// Model → US dollars per million `input`, `output`, `cache_read`,
    /// `cache_write` tokens: the ledger's cost for a harness that
    /// reports none of its own.
    pub prices: crate::host::budget::Prices,
    /// How harnesses are caged: `enabled` (default true), `network`
    /// (`isolated`, the default, `ports` or `open`), `egress`, `ports`,
    /// `read_only`, `read_write`, `limits`.
    pub cage: crate::harness::cage::CagePolicy,
    /// The file the settings were read from and its text: a setting found
    /// wrong after reading is named at its own line.
    #[serde(skip)]
    source: Source,
}

/// A configuration's file name and text, kept for the lines its errors
/// name; not a setting (its `Debug` says nothing of it, so two loads of
/// the same settings read alike).
#[derive(Clone, Default)]
struct Source(Option<std::sync::Arc<(String, String)>>);

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            api_tokens: Vec::new(),
            no_auth: false,
            store: None,
            workspace_root: None,
            adapters: None,
            harness_binaries: BTreeMap::new(),
            pass_env: Vec::new(),
            set_env: BTreeMap::new(),
            mcp_servers: Default::default(),
            projects: Default::default(),
            knowledge_bases: BTreeMap::new(),
            default_harness: "claude-code".into(),
            default_config: Default::default(),
            harness_config: BTreeMap::new(),
            fixed_config: Default::default(),
            ignore_unknown_config_keys: false,
            max_concurrent_runs: 4,
            max_queue_per_conversation: 8,
            max_queued_total: 1024,
            turn_timeout_seconds: 600,
            kill_grace_seconds: 5,
            shutdown_grace_seconds: 30,
            retention_hours: 168,
            max_run_output_bytes: 64 * 1024 * 1024,
            max_connections: 1024,
            header_timeout_seconds: 10,
            audit_retention_days: 90,
            max_live_sessions: 16,
            idle_timeout_seconds: 600,
            instance_id: None,
            lease_seconds: 30,
            session_copy_max_mib: 16,
            budgets: Default::default(),
            source: Source::default(),
            prices: Default::default(),
            cage: Default::default(),
        }
    }
}

impl ServeConfig {
    /// Live sessions as configured; `None` when `max_live_sessions` is 0.
    pub fn live(&self) -> Option<crate::run::LiveLimits> {
        (self.max_live_sessions > 0).then(|| crate::run::LiveLimits {
            max_sessions: self.max_live_sessions,
            idle_timeout: Duration::from_secs(self.idle_timeout_seconds.max(1)),
        })
    }

    /// The host store: `store`, else the embedded one in `data_dir`.
    pub fn store_at(&self, data_dir: &Path) -> crate::host::store::StoreAt {
        match &self.store {
            Some(store) => crate::host::store::StoreAt::parse(store, data_dir),
            None => crate::host::store::StoreAt::Folder(data_dir.to_path_buf()),
        }
    }

    /// The folder the conversations' workspaces (and their worktrees and
    /// homes) go in.
    pub fn workspace_root(&self, data_dir: &Path) -> PathBuf {
        self.workspace_root
            .clone()
            .unwrap_or_else(|| data_dir.join("workspaces"))
    }

    /// Where this configuration keeps things, in a line: the store (the
    /// embedded one's journal beside it) and the workspaces. A
    /// PostgreSQL store is named by its kind only (its URL may hold a
    /// password).
    pub fn places(&self, data_dir: &Path) -> String {
        let data_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        let data_dir = data_dir.as_path();
        let store = match self.store_at(data_dir) {
            crate::host::store::StoreAt::Folder(dir) => format!(
                "the store in {}, its journal {}",
                dir.display(),
                dir.join(super::journal::FILE).display()
            ),
            crate::host::store::StoreAt::Postgres(_) => {
                format!(
                    "the store in PostgreSQL (`store:`), this instance's data in {}",
                    data_dir.display()
                )
            }
        };
        format!(
            "{store}; the workspaces (worktrees and homes) in {}",
            self.workspace_root(data_dir).display()
        )
    }

    /// How long the store keeps audit rows.
    pub fn audit_retention(&self) -> Duration {
        Duration::from_secs(self.audit_retention_days.saturating_mul(24 * 3600))
    }

    /// Read and check `file`; `None` gives the defaults.
    pub fn load(file: Option<&Path>) -> Result<ServeConfig, ConfigError> {
        let Some(file) = file else {
            let config = ServeConfig::default();
            config.check().map_err(ConfigError::Invalid)?;
            return Ok(config);
        };
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError::Unreadable {
            file: file.display().to_string(),
            cause: e.to_string(),
        })?;
        let mut config = ServeConfig::parse(&file.display().to_string(), &text)?;
        let folder = std::path::absolute(file)
            .ok()
            .and_then(|f| f.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        config.resolve_paths(&folder);
        Ok(config)
    }

    /// Paths in the file are the operator's, written from where the file
    /// is: resolved against its folder, once, here (a harness runs in its
    /// workspace and would read a relative one from there). A program
    /// given by bare name (`claude`) stays a name to look up on PATH.
    fn resolve_paths(&mut self, folder: &Path) {
        let resolve = |path: &mut PathBuf| {
            if path.is_relative() {
                *path = folder.join(&*path);
            }
        };
        if let Some(store) = self.store.as_mut()
            && let crate::host::store::StoreAt::Folder(dir) =
                crate::host::store::StoreAt::parse(store, folder)
        {
            *store = dir.to_string_lossy().into_owned();
        }
        for path in [&mut self.workspace_root, &mut self.adapters]
            .into_iter()
            .flatten()
            .chain(self.knowledge_bases.values_mut())
            .chain(self.cage.read_only.iter_mut())
            .chain(self.cage.read_write.iter_mut())
            .chain(self.projects.values_mut().map(|p| &mut p.repository))
        {
            resolve(path);
        }
        for program in self.harness_binaries.values_mut() {
            if program.components().count() > 1 {
                resolve(program);
            }
        }
        for server in self.mcp_servers.values_mut() {
            if let Some(command) = server.command.as_mut().filter(|c| c.contains('/'))
                && Path::new(command.as_str()).is_relative()
            {
                *command = folder.join(&*command).to_string_lossy().into_owned();
            }
        }
    }

    /// Parse and check the text of a config file that `file` names in
    /// errors (with the line): what [`ServeConfig::load`] does once the
    /// file is read, for a config that does not come from a file.
    pub fn parse(file: &str, text: &str) -> Result<ServeConfig, ConfigError> {
        let mut config: ServeConfig = if text.trim().is_empty() {
            ServeConfig::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| {
                let said = for_person(&e);
                let at = e
                    .location()
                    .map(|l| format!(":{}", key_line(text, l.line(), &said)))
                    .unwrap_or_default();
                ConfigError::Malformed(format!("{file}{at}: {said}"))
            })?
        };
        config.source = Source(Some(std::sync::Arc::new((
            file.to_string(),
            text.to_string(),
        ))));
        config.check().map_err(ConfigError::Invalid)?;
        Ok(config)
    }

    /// The file the settings were read from, as given; "the defaults"
    /// when none was.
    pub fn file_name(&self) -> String {
        self.source
            .0
            .as_ref()
            .map_or_else(|| "the defaults".into(), |source| source.0.clone())
    }

    /// `FILE:LINE: ` of the key at dotted `path` in the file the settings
    /// came from (`FILE: ` where the line cannot be found); nothing for
    /// the defaults.
    fn at(&self, path: &str) -> String {
        let Some(source) = &self.source.0 else {
            return String::new();
        };
        let (file, text) = &**source;
        match line_of(text, path) {
            Some(line) => format!("{file}:{line}: "),
            None => format!("{file}: "),
        }
    }

    /// Check the settings that name harnesses against those there are
    /// (built in, or in the `adapters` folder): `default_harness` and
    /// `harness_config`'s names, with the one likely meant.
    pub fn check_harness_names<'a>(
        &self,
        known: impl Iterator<Item = &'a str> + Clone,
    ) -> Result<(), ConfigError> {
        let names = self
            .harness_config
            .keys()
            .map(|name| {
                (
                    "harness_config",
                    format!("harness_config.{name}"),
                    name.as_str(),
                )
            })
            .chain([(
                "default_harness",
                "default_harness".to_string(),
                self.default_harness.as_str(),
            )]);
        for (key, path, name) in names {
            if !known.clone().any(|k| k == name) {
                return Err(ConfigError::Invalid(format!(
                    "{}{key}: no harness is named `{name}`{}; there are {}",
                    self.at(&path),
                    crate::settings_keys::did_you_mean(name, known.clone()),
                    known.clone().collect::<Vec<_>>().join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The harnesses whose every short-form turn the operator's defaults
    /// would have refused: `approvals: chat` for one that cannot hand its
    /// permission prompts over (`default_config` is every harness's).
    pub fn refused_by_defaults(&self, adapters: &crate::harness::Adapters) -> Vec<String> {
        let live = self.live().is_some();
        adapters
            .all()
            .iter()
            .filter(|spec| {
                let defaults = self.defaults_for(&spec.name);
                let chat = crate::projection::Binding::from_config(&defaults)
                    .is_ok_and(|b| b.approvals == crate::projection::Approvals::Chat);
                chat && !spec.hands_over_approvals(live)
            })
            .map(|spec| spec.name.clone())
            .collect()
    }

    /// Each harness's `permission_mode` as the operator's bindings give
    /// it (`fixed_config` over `harness_config` over `default_config`) is
    /// one it takes; a harness with no permission mode may not be given
    /// one in its own `harness_config` (in `default_config` it is meant for
    /// the others).
    pub fn check_permission_modes(
        &self,
        adapters: &crate::harness::Adapters,
    ) -> Result<(), ConfigError> {
        let mode_in = |binding: &crate::projection::BindingConfig| -> Option<String> {
            binding
                .0
                .get("permission_mode")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        for spec in adapters.all() {
            let own = self.harness_config.get(&spec.name);
            let given = [
                ("fixed_config".to_string(), Some(&self.fixed_config)),
                (format!("harness_config.{}", spec.name), own),
                ("default_config".to_string(), Some(&self.default_config)),
            ]
            .into_iter()
            .find_map(|(key, binding)| Some((key, mode_in(binding?)?)));
            let Some((key, mode)) = given else {
                continue;
            };
            let binds = !spec.permission_modes.is_empty() || key.starts_with("harness_config");
            if let (true, Err(why)) = (binds, spec.check_permission_mode(&mode)) {
                let at = self.at(&format!("{key}.permission_mode"));
                return Err(ConfigError::Invalid(format!("{at}{key}: {why}")));
            }
        }
        Ok(())
    }

    /// The operator's bindings pick declared projects only.
    fn check_project_names(&self) -> Result<(), String> {
        let bindings = [
            ("default_config".to_string(), &self.default_config),
            ("fixed_config".to_string(), &self.fixed_config),
        ]
        .into_iter()
        .chain(
            self.harness_config
                .iter()
                .map(|(name, b)| (format!("harness_config.{name}"), b)),
        );
        for (key, binding) in bindings {
            let Some(name) = binding.0.get("project").and_then(serde_json::Value::as_str) else {
                continue;
            };
            if !name.trim().is_empty() && !self.projects.contains_key(name.trim()) {
                let known = self.projects.keys().map(String::as_str);
                return Err(format!(
                    "{}{key}: project `{name}` is not declared in `projects`{}",
                    self.at(&format!("{key}.project")),
                    crate::settings_keys::did_you_mean(name, known)
                ));
            }
        }
        Ok(())
    }

    /// A short-form request's config under the operator's: `default_config`,
    /// then `harness_config` of `harness`, then the request's own keys.
    pub fn defaults_for(&self, harness: &str) -> serde_json::Map<String, serde_json::Value> {
        let mut config = self.default_config.0.clone();
        if let Some(own) = self.harness_config.get(harness) {
            config.extend(own.0.clone());
        }
        config
    }

    fn check(&self) -> Result<(), String> {
        if self.no_auth && !self.listen.ip().is_loopback() {
            return Err(format!(
                "no_auth is set but listen is {}: an API without tokens may only listen on a loopback address",
                self.listen
            ));
        }
        if self.no_auth && !self.api_tokens.is_empty() {
            return Err("no_auth and api_tokens are both set: choose one".into());
        }
        crate::projection::check_mcp_catalog(&self.mcp_servers).map_err(|e| e.to_string())?;
        self.check_project_names()?;
        self.budgets.check().map_err(|e| e.0)?;
        self.prices.check().map_err(|e| e.0)?;
        self.cage.egress.check_rules().map_err(|e| e.0)?;
        for id in self.knowledge_bases.keys() {
            let fits = !id.is_empty()
                && id.len() <= 64
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !fits {
                return Err(format!(
                    "knowledge_bases: `{id}` is not a knowledge base id (1-64 letters, digits, `-`, `_`, `.`)"
                ));
            }
        }
        if self.api_tokens.iter().any(|t| t.len() < 16) {
            return Err("api_tokens: each token needs at least 16 characters".into());
        }
        if self.max_concurrent_runs == 0 {
            return Err("max_concurrent_runs must be at least 1".into());
        }
        if self.max_queue_per_conversation == 0 {
            return Err("max_queue_per_conversation must be at least 1".into());
        }
        if self.max_queued_total == 0 {
            return Err("max_queued_total must be at least 1".into());
        }
        if self.max_connections == 0 {
            return Err("max_connections must be at least 1".into());
        }
        if self.max_run_output_bytes < 64 * 1024 {
            return Err("max_run_output_bytes must be at least 65536".into());
        }
        if self.audit_retention_days == 0 {
            return Err("audit_retention_days must be at least 1".into());
        }
        if self.lease_seconds < 2 {
            return Err("lease_seconds must be at least 2".into());
        }
        if let Some(id) = &self.instance_id {
            let fits = !id.is_empty()
                && id.len() <= 128
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
            if !fits {
                return Err(format!(
                    "instance_id: `{id}` is not an instance name (1-128 letters, digits, `-`, `_`, `.`, `:`)"
                ));
            }
        }
        Ok(())
    }
}

/// The line of the binding key `said` names: YAML's reader places an error
/// in a mapping at its first line, the key may be further down.
fn key_line(text: &str, line: usize, said: &str) -> usize {
    let key = ["unknown binding key `", " at `"]
        .iter()
        .find_map(|marker| said.split_once(marker))
        .and_then(|(_, rest)| rest.split('`').next());
    let Some(key) = key else {
        return line;
    };
    text.lines()
        .enumerate()
        .skip(line.saturating_sub(1))
        .find(|(_, l)| {
            let l = l.trim_start().trim_start_matches(['"', '\'']);
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start_matches(['"', '\'']).starts_with(':'))
        })
        .map_or(line, |(at, _)| at + 1)
}

/// The line (1-based) of the key at dotted `path` in YAML `text` written
/// in block style (each key on its own line, below its parent, indented
/// more); `None` where it is not there.
fn line_of(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut from, mut parent): (usize, Option<usize>) = (0, None);
    let mut found = None;
    for key in path.split('.') {
        let mut hit = None;
        for (at, line) in lines.iter().enumerate().skip(from) {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let depth = line.len() - trimmed.len();
            if parent.is_some_and(|p| depth <= p) {
                break;
            }
            // A top-level key is at the margin.
            if parent.is_none() && depth > 0 {
                continue;
            }
            let named = trimmed
                .trim_start_matches(['"', '\''])
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start_matches(['"', '\'']).starts_with(':'));
            if named {
                hit = Some((at, depth));
                break;
            }
        }
        let (at, depth) = hit?;
        (from, parent, found) = (at + 1, Some(depth), Some(at + 1));
    }
    found
}

/// serde's sentence, said for a person: a misspelled key with the one it
/// likely meant, a number as a number, without its place (the file's line
/// is said before it).
fn for_person(e: &serde_yaml::Error) -> String {
    let said = e.to_string();
    let said = match said.rsplit_once(" at line ") {
        Some((head, place)) if place.contains(" column ") => head.to_string(),
        _ => said,
    };
    let said = said
        .replace("expected usize", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected u16", "expected a whole number from 0 to 65535")
        .replace("expected u32", "expected a whole number");
    // At any depth (`budgets.actor: unknown field ...`): the key it likely
    // meant, from the keys serde says it expected there.
    let typo = said
        .split_once("unknown field `")
        .and_then(|(_, rest)| rest.split('`').next());
    let (Some(key), Some((head, tail))) = (typo, said.split_once(", expected")) else {
        return said;
    };
    let expected: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
    let hint = crate::settings_keys::did_you_mean(key, expected.iter().copied());
    format!("{head}{hint}, expected{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<ServeConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bridge.yaml");
        std::fs::write(&file, text).unwrap();
        ServeConfig::load(Some(&file)).map_err(|e| e.to_string())
    }

    #[test]
    fn a_key_is_found_at_its_own_line_below_its_parents() {
        let text = "listen: 127.0.0.1:0\n# a comment\ndefault_config:\n  model: m\n  \"project\": web\nharness_config:\n  codex:\n    model: x\n  claude-code:\n    permission_mode: yolo\nproject: top\n";
        assert_eq!(line_of(text, "default_config.project"), Some(5));
        assert_eq!(
            line_of(text, "harness_config.claude-code.permission_mode"),
            Some(10)
        );
        assert_eq!(line_of(text, "harness_config.codex.permission_mode"), None);
        assert_eq!(line_of(text, "project"), Some(11));
        assert_eq!(line_of(text, "fixed_config.project"), None);
    }

    #[test]
    fn the_example_config_loads_and_states_the_defaults() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bridge.example.yaml");
        let example = ServeConfig::load(Some(&file)).unwrap();
        // Every key it sets is the default, so the file cannot drift from
        // the code without this test saying so.
        let defaults = ServeConfig::default();
        assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
        let text = std::fs::read_to_string(&file).unwrap();
        // Every key the service knows is explained there.
        let keys = serde_json::to_value(&defaults).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(text.contains(&format!("{key}:")), "{key} is not documented");
        }
    }

    #[test]
    fn relative_paths_are_the_files_folders() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bridge.yaml");
        std::fs::write(
            &file,
            "store: ./store\nworkspace_root: ws\nadapters: ../adapters\n\
             harness_binaries: {claude-code: claude, codex: bin/codex}\n\
             mcp_servers: {search: {command: ./search-server}, wiki: {command: wiki-mcp}}\n",
        )
        .unwrap();
        let config = ServeConfig::load(Some(&file)).unwrap();
        let at = |p: &str| dir.path().join(p);
        assert_eq!(
            config.store_at(Path::new("/data")),
            crate::host::store::StoreAt::Folder(at("./store"))
        );
        assert_eq!(config.workspace_root, Some(at("ws")));
        assert_eq!(config.adapters, Some(at("../adapters")));
        assert_eq!(
            config.harness_binaries["claude-code"],
            PathBuf::from("claude")
        );
        assert_eq!(config.harness_binaries["codex"], at("bin/codex"));
        assert_eq!(
            config.mcp_servers["search"].command.as_deref(),
            Some(at("./search-server").to_str().unwrap())
        );
        assert_eq!(
            config.mcp_servers["wiki"].command.as_deref(),
            Some("wiki-mcp")
        );
    }

    #[test]
    fn a_mistyped_binding_key_stops_the_start_at_its_line_with_the_key_meant() {
        // The operator believes the permission lock is on: it must not
        // start with it off.
        let err =
            load("listen: 127.0.0.1:9999\nfixed_config:\n  permision_mode: default\n").unwrap_err();
        assert!(
            err.contains("bridge.yaml:3")
                && err.contains("unknown binding key `permision_mode`")
                && err.contains("did you mean `permission_mode`?"),
            "{err}"
        );
        let err = load("default_config:\n  model: a\n  modle: b\n").unwrap_err();
        assert!(
            err.contains("bridge.yaml:3") && err.contains("did you mean `model`?"),
            "{err}"
        );
        let err = load("harness_config:\n  codex:\n    working_directory: /srv\n").unwrap_err();
        assert!(
            err.contains("bridge.yaml:3") && err.contains("`working_directory`"),
            "{err}"
        );
        // A key a binding reads, with a value it cannot take.
        let err = load("default_config:\n  timeout_seconds: soon\n").unwrap_err();
        assert!(err.contains("timeout_seconds"), "{err}");
        let err = load("fixed_config:\n  approvals: always\n").unwrap_err();
        assert!(err.contains("approvals") && err.contains("chat"), "{err}");
        // What a harness gets: the default, then its own, then the request.
        let config =
            load("default_config:\n  model: m\n  keep_runs: 2\nharness_config:\n  codex:\n    model: c\n")
                .unwrap();
        assert_eq!(config.defaults_for("codex")["model"], "c");
        assert_eq!(config.defaults_for("codex")["keep_runs"], 2);
        assert_eq!(config.defaults_for("claude-code")["model"], "m");
    }

    #[test]
    fn a_mistyped_setting_or_harness_says_what_was_meant() {
        let err = load("max_concurent_runs: 3\n").unwrap_err();
        assert!(err.contains("did you mean `max_concurrent_runs`?"), "{err}");
        let err = load("max_concurrent_runs: two\n").unwrap_err();
        assert!(err.contains("expected a whole number"), "{err}");
        // A budget's limits and prices are checked as closely, at depth.
        let err = load("budgets:\n  actor:\n    tokens_per_dya: 5\n").unwrap_err();
        assert!(
            err.contains(
                ":3: budgets.actor: unknown field `tokens_per_dya` (did you mean `tokens_per_day`?)"
            ),
            "{err}"
        );
        let err = load("budgets:\n  actor: {turns_per_minute: two}\n").unwrap_err();
        assert!(err.contains("expected a whole number"), "{err}");
        let err = load("budgets:\n  bot: {cost_usd_per_day: -1}\n").unwrap_err();
        assert!(
            err.contains("budgets.bot.cost_usd_per_day must be"),
            "{err}"
        );
        let err = load("prices:\n  gpt-5: {ouput: 10}\n").unwrap_err();
        assert!(err.contains("(did you mean `output`?)"), "{err}");
        let known = ["claude-code", "codex", "gemini"];
        let config = load("default_harness: claude\n").unwrap();
        let err = config
            .check_harness_names(known.iter().copied())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("default_harness: no harness is named `claude`")
                && err.contains("did you mean `claude-code`?"),
            "{err}"
        );
        let config = load("harness_config:\n  codx: {}\n").unwrap();
        let err = config
            .check_harness_names(known.iter().copied())
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean `codex`?"), "{err}");
        // Every harness gets `default_config`: one that cannot take what
        // it says is named, so the operator can move it to its harnesses'.
        let adapters = crate::harness::Adapters::builtin();
        let config = load("default_config:\n  approvals: chat\n").unwrap();
        let refused = config.refused_by_defaults(adapters);
        assert!(refused.contains(&"gemini".to_string()), "{refused:?}");
        assert!(!refused.contains(&"claude-code".to_string()), "{refused:?}");
        let config = load("harness_config:\n  claude-code:\n    approvals: chat\n").unwrap();
        assert!(config.refused_by_defaults(adapters).is_empty());
        assert!(
            load("harness_config:\n  codex: {model: c}\n")
                .unwrap()
                .check_harness_names(known.iter().copied())
                .is_ok()
        );
    }

    #[test]
    fn a_permission_mode_is_one_its_harness_takes() {
        let adapters = crate::harness::Adapters::builtin();
        let check = |text: &str| {
            load(text)
                .unwrap()
                .check_permission_modes(adapters)
                .map_err(|e| e.to_string())
        };
        let err = check("default_config:\n  permission_mode: yolo\n").unwrap_err();
        assert!(
            err.ends_with("/bridge.yaml:2: default_config: `yolo` is not a permission mode of Claude Code; it takes default, acceptEdits, auto, bypassPermissions, dontAsk, plan"),
            "{err}"
        );
        let err = check("fixed_config:\n  permission_mode: acceptEdit\n").unwrap_err();
        assert!(err.contains("did you mean `acceptEdits`?"), "{err}");
        // Defaults for Claude Code are not Codex's to refuse; Codex's own are.
        assert!(check("default_config:\n  permission_mode: bypassPermissions\n").is_ok());
        let err =
            check("harness_config:\n  codex:\n    permission_mode: acceptEdits\n").unwrap_err();
        assert!(
            err.contains("/bridge.yaml:3: harness_config.codex: Codex has no permission mode"),
            "{err}"
        );
        // The mode that wins is the one checked.
        assert!(
            check(
                "default_config:\n  permission_mode: yolo\n\
                 harness_config:\n  claude-code:\n    permission_mode: plan\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn defaults_and_clear_errors() {
        let config = load("").unwrap();
        assert!(config.listen.ip().is_loopback());
        assert_eq!(config.max_concurrent_runs, 4);
        let err = load("max_concurent_runs: 3\n").unwrap_err();
        assert!(
            err.contains("bridge.yaml:1") && err.contains("max_concurent_runs"),
            "{err}"
        );
        let err = load("listen: 0.0.0.0:8787\nno_auth: true\n").unwrap_err();
        assert!(err.contains("loopback"), "{err}");
        assert!(load("no_auth: true\n").unwrap().no_auth);
        assert!(load("listen: 0.0.0.0:8787\napi_tokens: [0123456789abcdef0123]\n").is_ok());
        assert!(
            load("max_concurrent_runs: 0\n")
                .unwrap_err()
                .contains("at least 1")
        );
        assert_eq!(
            load("audit_retention_days: 365\n")
                .unwrap()
                .audit_retention_days,
            365
        );
        assert!(
            load("audit_retention_days: 0\n")
                .unwrap_err()
                .contains("audit_retention_days")
        );
    }

    #[test]
    fn text_parses_as_the_file_it_names() {
        let config = ServeConfig::parse("inline", "max_concurrent_runs: 2\n").unwrap();
        assert_eq!(config.max_concurrent_runs, 2);
        let err = ServeConfig::parse("inline", "listen: 127.0.0.1:1\nbogus: 1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("inline:2: ") && err.contains("bogus"),
            "{err}"
        );
        assert!(ServeConfig::parse("inline", "max_queued_total: 0\n").is_err());
    }
}
