//! The binding: `ctx.config` read as the typed settings projection needs.
//!
//! The host passes the Agent's runner configuration through untyped; this
//! is where it gets a shape, with errors that name the field. Keys no one
//! knows are ignored: a host may store more than this bridge reads.

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

/// An extra MCP server the operator allows for this binding.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraServer {
    /// Command of a stdio server.
    #[serde(default)]
    pub command: Option<String>,
    /// Arguments of a stdio server.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment of a stdio server.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// URL of a streamable-HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers of an HTTP server.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

fn scopes<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Vec<Scope>>, D::Error> {
    // Host UIs often store a multi-select as "a,b,c": accept both forms.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<String>),
        Text(String),
    }
    let names = match Option::<Form>::deserialize(de)? {
        None => return Ok(None),
        Some(Form::List(list)) => list,
        Some(Form::Text(text)) => text
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    };
    names
        .iter()
        .map(|name| name.parse().map_err(serde::de::Error::custom))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
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
    /// Extra MCP servers, by name.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, ExtraServer>,
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
}

impl<'a> Binding<'a> {
    /// Read the binding from `ctx.config`, naming the field that is wrong.
    pub fn from_config(config: &'a JsonMap) -> Result<Self, ProjectionError> {
        serde_path_to_error::deserialize(config).map_err(|e| {
            let path = e.path().to_string();
            ProjectionError::Binding(format!("at `{path}`: {}", e.into_inner()))
        })
    }

    /// The scopes in force: the binding's, or the safe default.
    pub fn scopes(&self) -> Vec<Scope> {
        self.scopes
            .clone()
            .unwrap_or_else(|| Scope::DEFAULT.to_vec())
    }
}
