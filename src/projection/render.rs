//! The text a harness reads, rendered from templates (minijinja): the
//! built-in ones in `templates/`, or an operator's overrides.
//!
//! Rendering is deterministic: the same projected context renders the same
//! bytes (time comes from the event, not the clock), which is what keeps
//! unchanged files untouched and the stable instructions cacheable.

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::Environment;
use serde::Serialize;
use serde_json::Value;

use super::ProjectionError;
use super::inputs::InputFile;
use crate::protocol::JsonMap;

/// The templates a projection renders, by file name.
pub const CONTEXT_MD: &str = "LANGBOT_CONTEXT.md";
/// See [`CONTEXT_MD`].
pub const INSTRUCTIONS: &str = "instructions.md";
/// See [`CONTEXT_MD`].
pub const TURN_PROMPT: &str = "turn-prompt.md";

const BUILT_IN: [(&str, &str); 3] = [
    (
        CONTEXT_MD,
        include_str!("../../templates/LANGBOT_CONTEXT.md"),
    ),
    (
        INSTRUCTIONS,
        include_str!("../../templates/instructions.md"),
    ),
    (TURN_PROMPT, include_str!("../../templates/turn-prompt.md")),
];

/// Parsed templates, built once and reused for every projection.
pub struct Templates {
    env: Environment<'static>,
}

fn xml_escape(text: String) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Templates {
    /// The built-in templates, each replaced by `DIR/<name>` when an
    /// override folder is given and has that file.
    pub fn load(overrides: Option<&Path>) -> Result<Self, ProjectionError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .map_err(|e| ProjectionError::Template {
                name: "syntax".into(),
                message: e.to_string(),
            })?;
        env.set_syntax(syntax);
        env.add_filter("xml", xml_escape);
        for (name, built_in) in BUILT_IN {
            let source = match overrides.map(|dir| dir.join(name)) {
                Some(path) if path.is_file() => std::fs::read_to_string(&path)
                    .map_err(ProjectionError::io("read template", &path))?,
                _ => built_in.to_string(),
            };
            env.add_template_owned(name, source)
                .map_err(|e| ProjectionError::Template {
                    name: name.into(),
                    message: e.to_string(),
                })?;
        }
        Ok(Templates { env })
    }

    /// Render every template with the same variables (converted to the
    /// template engine's values once), returned in the order of `names`.
    pub fn render_all<const N: usize>(
        &self,
        names: [&str; N],
        vars: &RenderVars<'_>,
    ) -> Result<[String; N], ProjectionError> {
        let value = minijinja::Value::from(minijinja::value::Serde(vars));
        let mut out: [String; N] = std::array::from_fn(|_| String::new());
        for (slot, name) in out.iter_mut().zip(names) {
            let fail = |e: minijinja::Error| ProjectionError::Template {
                name: name.into(),
                message: format!("{e:#}"),
            };
            *slot = self
                .env
                .get_template(name)
                .map_err(fail)?
                .render(value.clone())
                .map_err(fail)?;
        }
        Ok(out)
    }
}

/// One data message (seed 004): state entries of one kind merged into one
/// object, shown with a description and schema when known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataMessage {
    /// Identity: `<scope>.<namespace>` (e.g. `conversation.external`).
    pub kind: String,
    /// The merged object, pretty JSON.
    pub json: String,
    /// What the data is, when known.
    pub description: Option<String>,
    /// Its JSON Schema, pretty, when known.
    pub schema: Option<String>,
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn bridge_schema(namespace: &str) -> Option<(&'static str, Value)> {
    (namespace == "external").then(|| {
        (
            "Pointers the bridge keeps so the next turn resumes the same harness session.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "description": "The harness's own session id."},
                    "working_directory": {"type": "string", "description": "The workspace the session lives in."},
                    "harness": {"type": "string", "description": "Which harness owns the session."}
                }
            }),
        )
    })
}

/// Merge state entries into data messages: `external.session_id` in the
/// conversation scope becomes field `session_id` of kind
/// `conversation.external`; a key without a namespace joins kind `<scope>`.
pub fn data_messages(state: Option<&Value>, schemas: &BTreeMap<String, Value>) -> Vec<DataMessage> {
    let Some(Value::Object(scopes)) = state else {
        return Vec::new();
    };
    let mut kinds: BTreeMap<String, (String, JsonMap)> = BTreeMap::new();
    for scope in ["conversation", "actor", "subject", "runner"] {
        let Some(Value::Object(entries)) = scopes.get(scope) else {
            continue;
        };
        for (key, value) in entries {
            let (namespace, field) = key.split_once('.').unwrap_or(("", key));
            let kind = if namespace.is_empty() {
                scope.to_string()
            } else {
                format!("{scope}.{namespace}")
            };
            let slot = kinds
                .entry(kind)
                .or_insert_with(|| (namespace.to_string(), JsonMap::new()));
            slot.1.insert(field.to_string(), value.clone());
        }
    }
    kinds
        .into_iter()
        .map(|(kind, (namespace, object))| {
            let (description, schema) = match (schemas.get(&kind), bridge_schema(&namespace)) {
                (Some(schema), _) => (None, Some(pretty(schema))),
                (None, Some((text, schema))) => (Some(text.to_string()), Some(pretty(&schema))),
                (None, None) => (None, None),
            };
            DataMessage {
                json: pretty(&Value::Object(object)),
                kind,
                description,
                schema,
            }
        })
        .collect()
}

/// What the harness is told of the project its workspace is a worktree
/// of: how its commits reach the branch, and whether it may ask to
/// publish.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectNote {
    /// The project's name.
    pub name: String,
    /// The conversation's branch.
    pub branch: String,
    /// The branch it was made from.
    pub base: String,
    /// Whether the `publish` tool is offered.
    pub publishes: bool,
}

/// Everything the templates may use.
#[derive(Debug, Serialize)]
pub struct RenderVars<'a> {
    /// The run's id.
    pub run_id: &'a str,
    /// Harness name (`claude-code`, `codex`).
    pub harness: &'a str,
    /// Absolute workspace path.
    pub working_directory: &'a str,
    /// The binding's static prompt.
    pub prompt: Option<&'a str>,
    /// Full tool names of the bridge's MCP server for this run.
    pub tools: &'a [String],
    /// The project the workspace is a worktree of, if any.
    pub project: Option<&'a ProjectNote>,
    /// Names of the skills written.
    pub skills: &'a [String],
    /// The user's text (absent when `input` is out of scope).
    pub input_text: Option<String>,
    /// The input files (empty when `input` is out of scope).
    pub input_files: &'a [InputFile],
    /// Event time, formatted.
    pub current_time: Option<String>,
    /// State as data messages.
    pub data: &'a [DataMessage],
    /// Pretty JSON of some parts, for code blocks.
    pub json: BTreeMap<&'static str, String>,
    /// Projected parts by name.
    #[serde(flatten)]
    pub parts: &'a JsonMap,
}

/// `2026-05-14 12:00:00 UTC (Thursday)` for an epoch time in seconds.
pub fn format_time(epoch_seconds: i64) -> String {
    const WEEKDAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let weekday = WEEKDAYS[epoch_seconds.div_euclid(86_400).rem_euclid(7) as usize];
    format!(
        "{} UTC ({weekday})",
        crate::protocol::time::date_time(epoch_seconds)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn time_formats_as_a_calendar_date() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00 UTC (Thursday)");
        assert_eq!(
            format_time(1_778_760_000),
            "2026-05-14 12:00:00 UTC (Thursday)"
        );
        assert_eq!(
            format_time(951_782_400),
            "2000-02-29 00:00:00 UTC (Tuesday)"
        );
    }

    #[test]
    fn state_merges_into_data_messages_by_kind() {
        let state = json!({
            "conversation": {"external.session_id": "s1", "external.harness": "codex", "topic": "release"},
            "actor": {"lang": "en"}
        });
        let schemas = BTreeMap::from([("actor".to_string(), json!({"type": "object"}))]);
        let data = data_messages(Some(&state), &schemas);
        let kinds: Vec<&str> = data.iter().map(|d| d.kind.as_str()).collect();
        assert_eq!(kinds, ["actor", "conversation", "conversation.external"]);
        let external: Value = serde_json::from_str(&data[2].json).unwrap();
        assert_eq!(external, json!({"session_id": "s1", "harness": "codex"}));
        assert!(data[2].schema.as_deref().unwrap().contains("session_id"));
        assert!(data[0].schema.is_some());
        assert!(data[1].schema.is_none());
    }
}
