//! What an action is, as the person reads it on a card (its summary, its
//! whole text, paths relative to the workspace) and what binds an
//! approval to it (its fingerprint).

use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::protocol::InteractionAction;

pub(super) fn action(id: &str, label: &str, style: &str) -> InteractionAction {
    InteractionAction {
        id: id.into(),
        label: label.into(),
        style: style.into(),
    }
}

pub(super) fn clip(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut clipped: String = text.chars().take(chars.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

/// `input` with each argument that names a path inside `root` (the folder
/// the harness works in) written relative to it: `/srv/…/ws/NOTES.md`
/// reads `NOTES.md`. A path that leaves the folder (`..`), or lies
/// outside it, is shown as it is: the person must see that.
pub fn relative_paths(input: &Value, root: &Path) -> Value {
    let Value::Object(map) = input else {
        return input.clone();
    };
    let roots = [Some(root.to_path_buf()), std::fs::canonicalize(root).ok()];
    let inside = |text: &str| {
        roots.iter().flatten().find_map(|root| {
            let rest = Path::new(text).strip_prefix(root).ok()?;
            let plain = rest
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            match rest.as_os_str().is_empty() {
                true => Some(".".to_string()),
                false => plain.then(|| rest.to_string_lossy().into_owned()),
            }
        })
    };
    Value::Object(
        map.iter()
            .map(|(key, value)| {
                let path = value.as_str().filter(|t| {
                    names_a_path(key) && t.starts_with('/') && !t.contains(['\n', '\r'])
                });
                let shown = match path.and_then(inside) {
                    Some(relative) => Value::String(relative),
                    None => value.clone(),
                };
                (key.clone(), shown)
            })
            .collect(),
    )
}

/// Whether an argument named `key` holds a path (`file_path`,
/// `notebook_path`, `path`, `cwd`…): only those are shown relative, never
/// a text that happens to start with one.
fn names_a_path(key: &str) -> bool {
    key.ends_with("path") || matches!(key, "cwd" | "workdir" | "file" | "dir" | "directory")
}

/// What an action is, in a few words a person can judge: the command a
/// shell tool runs, the file a write touches, else the tool and its
/// arguments.
pub fn summary(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    let said = if let Some(command) = field("command") {
        format!("run `{}`", clip(command, 300))
    } else if let Some(path) = field("file_path").or(field("path")) {
        format!("use {tool} on {}", clip(path, 300))
    } else {
        format!("use {tool} with {}", clip(&input.to_string(), 300))
    };
    said.replace(['\n', '\r'], " ")
}

/// Longest action a card shows whole, in characters.
pub const CARD_ACTION_CHARS: usize = 3000;
/// How much of a longer action the card shows before saying where the rest is.
pub(super) const CARD_PREVIEW_CHARS: usize = 1500;
/// Largest action that can be asked about at all: the whole of it must
/// reach the person (as an attached file, inline), or it does not run.
pub const MAX_ACTION_BYTES: usize = crate::protocol::INLINE_ARTIFACT_MAX_BYTES;

/// The whole action as the person reads it: the tool, then every argument
/// with keys in a fixed order, text as it is (a value of several lines
/// indented under its key, so no value can pass for another key), other
/// values as JSON.
pub fn action_text(tool: &str, input: &Value) -> String {
    let mut text = format!("tool: {tool}");
    let Value::Object(map) = canonical(input) else {
        text.push_str(&format!("\ninput: {}", canonical(input)));
        return text;
    };
    for (key, value) in map {
        let value = match value {
            Value::String(s) => s,
            other => other.to_string(),
        };
        if value.contains(['\n', '\r']) {
            text.push_str(&format!("\n{key}:"));
            for line in value.lines() {
                text.push_str(&format!("\n    {line}"));
            }
        } else {
            text.push_str(&format!("\n{key}: {value}"));
        }
    }
    text
}

pub(super) fn hex_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Why an action cannot be put to the person, if it cannot: one the
/// chat could not show whole would be approved unread.
pub(super) fn unshowable(tool: &str, input: &Value) -> Option<String> {
    let size = action_text(tool, input).len();
    (size > MAX_ACTION_BYTES).then(|| {
        format!(
            "This action is too large for the user to read in the chat ({size} bytes; at most \
             {MAX_ACTION_BYTES}), so it cannot be approved. Do it in smaller steps."
        )
    })
}

/// The identity of an action: the tool and its arguments, with object keys
/// in a fixed order, hashed. An approval allows the action with this
/// fingerprint and no other.
pub fn fingerprint(tool: &str, input: &Value) -> String {
    let mut bytes = tool.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(canonical(input).to_string().as_bytes());
    hex_digest(&bytes)
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}
