//! The binding: `ctx.config` read as the typed settings projection needs.
//!
//! The host passes the Agent's runner configuration through untyped; this
//! is where it gets a shape, with errors that name the field. A host's
//! context may hold keys no one here reads (a host may store more than
//! this bridge reads); the operator's own settings (`BindingConfig`) and
//! `serve`'s requests (`check_keys`) may not, since a misspelled key
//! would turn a setting off without a word.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::{ProjectionError, Scope};
use crate::protocol::JsonMap;

/// One skill the binding authorizes, with its body. Text is borrowed from
/// the config where possible: skill bodies are the bulk of a binding.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillSpec<'a> {
    /// Folder name and the name the harness lists it under.
    pub name: String,
    /// One line the model reads to decide when to use the skill.
    #[serde(default)]
    pub description: Option<String>,
    /// `SKILL.md` body. Front matter is generated unless it starts with `---`.
    #[serde(default, borrow)]
    pub content: Cow<'a, str>,
    /// Extra files, relative path → text.
    #[serde(default, borrow)]
    pub files: BTreeMap<String, Cow<'a, str>>,
}

/// A list of names, as a list or as "a,b,c": host UIs often store a
/// multi-select as one text.
fn names<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<String>),
        Text(String),
        /// Anything else, to say what was expected.
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<Form>::deserialize(de)? {
        None => None,
        Some(Form::List(list)) => Some(list),
        Some(Form::Text(text)) => Some(
            text.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
        Some(Form::Other(_)) => {
            return Err(serde::de::Error::custom(
                "expected a list of names (or one text of names separated by commas)",
            ));
        }
    })
}

fn scopes<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Vec<Scope>>, D::Error> {
    let Some(names) = names(de)? else {
        return Ok(None);
    };
    names
        .iter()
        .map(|name| name.parse().map_err(serde::de::Error::custom))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Extra MCP servers are the operator's to define: a binding (which a
/// less trusted caller may write) only picks among them by name. A server
/// given whole here would run a program of the caller's choice with the
/// harness's secrets.
fn server_names<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(de)?;
    if value.as_ref().is_some_and(serde_json::Value::is_object) {
        return Err(serde::de::Error::custom(
            "a binding picks extra MCP servers by name (e.g. [\"search\"]) from those the \
             operator configured; it cannot define one (command, url, env). Define servers in \
             bridge.yaml's `mcp_servers` (serve), the plugin's runner settings (LangBot) or \
             `run --mcp-servers FILE`",
        ));
    }
    names(value.unwrap_or_default())
        .map(Option::unwrap_or_default)
        .map_err(serde::de::Error::custom)
}

/// The binding settings the projection uses, borrowing from `ctx.config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Binding<'a> {
    /// Static instructions, part of the stable system prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Which context parts may be projected; `None` means [`Scope::DEFAULT`].
    #[serde(default, deserialize_with = "scopes")]
    pub scopes: Option<Vec<Scope>>,
    /// Skills to write where the harness finds them.
    #[serde(default, borrow)]
    pub skills: Vec<SkillSpec<'a>>,
    /// Extra MCP servers for this run, by name, from those the operator
    /// configured.
    #[serde(default, deserialize_with = "server_names")]
    pub mcp_servers: Vec<String>,
    /// Extra key names whose values are never projected.
    #[serde(default)]
    pub secret_keys: Vec<String>,
    /// How many previous runs' files to keep under `.langbot/runs/`.
    #[serde(default)]
    pub keep_runs: Option<usize>,
    /// Largest input attachment copied into the workspace, in bytes.
    #[serde(default)]
    pub max_input_bytes: Option<u64>,
    /// JSON Schemas for state data kinds, shown next to the data.
    #[serde(default)]
    pub state_schemas: BTreeMap<String, serde_json::Value>,
    /// Model passed to the harness; empty means the harness's default.
    #[serde(default)]
    pub model: Option<String>,
    /// How freely the harness may act (Claude Code's `--permission-mode`);
    /// empty or `default` leaves the harness's own default.
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Longest a turn may run, in seconds (the context's deadline may be sooner).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Who decides what the harness's permission mode would ask about.
    #[serde(default)]
    pub approvals: Approvals,
    /// Whether the harness may ask the person a question (`ask_user`).
    #[serde(default)]
    pub questions: Questions,
    /// Actors (ids as the host reports them) who may answer any question
    /// or approval in the conversation, besides the one whose turn asked:
    /// in a group chat no one else's answer counts.
    #[serde(default, deserialize_with = "approver_ids")]
    pub approvers: Vec<String>,
    /// Where this binding's harness may connect, over the bridge's own
    /// `cage.network`: `ports` or `open`.
    #[serde(default)]
    pub network: Option<NetworkChoice>,
    /// More TCP ports this binding's harness may connect to (numbers, or
    /// one text of numbers separated by commas).
    #[serde(default, deserialize_with = "port_numbers")]
    pub network_ports: Vec<u16>,
    /// More destinations for this binding's harness through its door's
    /// proxy (`network: isolated`), added to the bridge's `cage.egress`
    /// (whose `deny` still wins).
    #[serde(default)]
    pub egress: Option<EgressChoice>,
    /// The operator's project, by name, the conversation works on: its
    /// workspace is then a worktree of that repository on a branch of its
    /// own. Empty: no project.
    #[serde(default, deserialize_with = "project_name")]
    pub project: Option<String>,
    /// Models a person may switch the conversation to with `/model`
    /// (names, or one text of names separated by commas), and, once one
    /// is picked (`model`, or `/model`), with it the only ones its harness
    /// may call through its door's gateway (a sub-agent on another is
    /// refused); none: `/model` only shows the model, and any may be
    /// called.
    #[serde(default, deserialize_with = "approver_ids")]
    pub models: Vec<String>,
    /// Permission modes a person may switch the conversation to with
    /// `/mode`; none: `/mode` only shows the mode.
    #[serde(default, deserialize_with = "approver_ids")]
    pub permission_modes: Vec<String>,
    /// The chat commands (`/stop`, `/new`, …): their prefix (`""` turns
    /// them off) and who may use each.
    #[serde(default, deserialize_with = "command_access")]
    pub commands: crate::command::Access,
}

/// A host form left empty sends `null` or `""`: the defaults.
fn command_access<'de, D: Deserializer<'de>>(de: D) -> Result<crate::command::Access, D::Error> {
    use serde_json::Value;
    match Value::deserialize(de)? {
        Value::Null => Ok(Default::default()),
        Value::String(text) if text.trim().is_empty() => Ok(Default::default()),
        value => crate::command::Access::deserialize(value).map_err(serde::de::Error::custom),
    }
}

/// A binding picks a project by name: a path (or a repository given
/// whole) would let a less trusted caller open any folder of the
/// bridge's machine to its harness.
fn project_name<'de, D: Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    match Option::<serde_json::Value>::deserialize(de)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(name)) => {
            let name = name.trim();
            Ok((!name.is_empty()).then(|| name.to_string()))
        }
        Some(_) => Err(serde::de::Error::custom(
            "a binding picks a project by name (e.g. \"web\") from those the operator \
             declared in bridge.yaml's `projects`; it cannot give a repository or a path",
        )),
    }
}

/// A binding's destinations (`egress`), added to the operator's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressChoice {
    /// What its harness may also reach.
    #[serde(default)]
    pub allow: Vec<String>,
    /// What its harness may not, whatever the lists allow.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// A binding's choice of network for its harness, over the bridge's
/// `cage.network`. The first three keep it in a network of its own, the
/// model keys outside; they differ in what its door's proxy reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkChoice {
    /// Its door's MCP endpoint and model gateway, nothing else: no
    /// destination through the proxy, none asked for.
    None,
    /// The operator's destinations (`egress`), and those the person in
    /// the chat allows when asked. The bridge's default.
    #[serde(alias = "isolated")]
    Allowlist,
    /// Any public address on any port through the proxy: never this
    /// machine's, a private network's or the cloud's metadata service.
    Open,
    /// No network of its own: only the harness's model endpoints' ports,
    /// the MCP endpoint and the listed ports, the model keys inside.
    Ports,
}

fn port_numbers<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<u16>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Port {
        Number(u16),
        Text(String),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<Port>),
        One(Port),
    }
    let parse = |port: Port| -> Result<Vec<u16>, D::Error> {
        match port {
            Port::Number(n) => Ok(vec![n]),
            Port::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| {
                    t.parse::<u16>().map_err(|_| {
                        serde::de::Error::custom(format!(
                            "`{t}` is not a TCP port (a number from 1 to 65535)"
                        ))
                    })
                })
                .collect(),
        }
    };
    match Option::<Form>::deserialize(de)? {
        None => Ok(Vec::new()),
        Some(Form::One(port)) => parse(port),
        Some(Form::List(ports)) => {
            let mut all = Vec::new();
            for port in ports {
                all.extend(parse(port)?);
            }
            Ok(all)
        }
    }
}

fn approver_ids<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    names(de).map(Option::unwrap_or_default)
}

/// Whether the harness gets the `ask_user` tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Questions {
    /// Questions go to the person in the chat (a card, or its text), and
    /// their next message answers.
    #[default]
    Chat,
    /// The harness decides alone; it is not offered `ask_user`.
    Off,
}

/// Where a harness's permission prompt goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approvals {
    /// Nowhere: `permission_mode` alone decides, and what it would ask
    /// about is refused (no one is at a terminal).
    #[default]
    Off,
    /// The person in the chat: the turn ends with a confirmation card, and
    /// an approval lets exactly that action run once when the session goes
    /// on.
    Chat,
}

/// Why a key is not a binding's, with the key it likely meant; `None`
/// for a key a binding reads.
pub fn unknown_key(key: &str) -> Option<String> {
    let keys = crate::settings_keys::fields_of::<Binding<'static>>();
    if keys.contains(&key) {
        return None;
    }
    Some(format!(
        "unknown binding key `{key}`{}; a binding takes {}",
        crate::settings_keys::did_you_mean(key, keys.iter().copied()),
        keys.iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Refuse a binding with a key no one reads, naming it (the first, in key
/// order) and what it likely meant.
pub fn check_keys(config: &JsonMap) -> Result<(), ProjectionError> {
    match config.keys().find_map(|key| unknown_key(key)) {
        Some(why) => Err(ProjectionError::Binding(why)),
        None => Ok(()),
    }
}

/// Binding settings the operator wrote (`serve`'s `default_config`,
/// `fixed_config` and `harness_config`): each key checked as it is read,
/// so a typo stops the start at its line instead of leaving a setting
/// off, and the whole read as a binding, so a wrong value does too.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct BindingConfig(pub JsonMap);

impl<'de> Deserialize<'de> for BindingConfig {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = JsonMap;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("binding settings (`key: value` lines)")
            }

            fn visit_unit<E>(self) -> Result<JsonMap, E> {
                Ok(JsonMap::new())
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<JsonMap, A::Error> {
                let mut read = JsonMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if let Some(why) = unknown_key(&key) {
                        return Err(A::Error::custom(why));
                    }
                    read.insert(key, map.next_value()?);
                }
                Ok(read)
            }
        }
        let config = de.deserialize_any(Keys)?;
        Binding::from_config(&config).map_err(D::Error::custom)?;
        Ok(BindingConfig(config))
    }
}

impl<'a> Binding<'a> {
    /// Read the binding from `ctx.config`, naming the field that is wrong.
    pub fn from_config(config: &'a JsonMap) -> Result<Self, ProjectionError> {
        serde_path_to_error::deserialize(config).map_err(|e| {
            let path = e.path().to_string();
            ProjectionError::Binding(format!("at `{path}`: {}", e.into_inner()))
        })
    }

    /// What a run under this binding may ask the person: a request is
    /// kept in the conversation's state until its answer, so a run without
    /// a conversation may ask nothing.
    pub fn asking(&self, has_conversation: bool) -> crate::interaction::Asking {
        crate::interaction::Asking {
            questions: has_conversation && self.questions == Questions::Chat,
            approvals: has_conversation && self.approvals == Approvals::Chat,
            publish: false,
        }
    }

    /// The scopes in force: the binding's, or the safe default.
    pub fn scopes(&self) -> Vec<Scope> {
        self.scopes
            .clone()
            .unwrap_or_else(|| Scope::DEFAULT.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binding `config` reads as, or why it does not.
    fn read<T>(
        config: serde_json::Value,
        then: impl FnOnce(Binding<'_>) -> T,
    ) -> Result<T, String> {
        let map: JsonMap = serde_json::from_value(config).unwrap();
        Binding::from_config(&map)
            .map(then)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_commands_form_is_the_defaults_and_a_wrong_command_is_named() {
        for empty in [serde_json::Value::Null, "".into(), serde_json::json!({})] {
            let access = read(serde_json::json!({"commands": empty}), |b| b.commands).unwrap();
            assert_eq!(access, crate::command::Access::default());
        }
        let picks = read(
            serde_json::json!({"models": "a, b", "permission_modes": ["plan"]}),
            |b| (b.models, b.permission_modes),
        )
        .unwrap();
        assert_eq!(picks, (vec!["a".into(), "b".into()], vec!["plan".into()]));
        let wrong = read(
            serde_json::json!({"commands": {"allow": {"stpo": "everyone"}}}),
            |_| (),
        )
        .unwrap_err();
        assert!(wrong.contains("did you mean `stop`?"), "{wrong}");
        let text = read(serde_json::json!({"commands": "stop"}), |_| ()).unwrap_err();
        assert!(text.contains("commands"), "{text}");
    }
}
