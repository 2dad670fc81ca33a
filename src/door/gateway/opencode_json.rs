//! opencode's (and Kilo's) model providers, from their JSON.
//!
//! A provider whose `options.baseURL` the operator set (in a carried
//! config file or in the inline-configuration variable) is pointed at
//! the door by the inline configuration, which the CLI reads over its
//! files; its key, when written there (`options.apiKey`), becomes a
//! stand-in, and when named (`{env:VAR}`), its variable holds one. A
//! provider with no `baseURL` reads the base-URL variable the spec's
//! `models` already pointed at the door.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::Routes;

/// What the operator set for one provider.
#[derive(Default)]
struct Provider {
    base_url: Option<String>,
    api_key: Option<String>,
}

/// Point the providers with a base URL of their own at the gateway, by
/// the inline configuration in `var`.
pub(super) fn point(
    routes: &mut Routes<'_>,
    files: &[PathBuf],
    var: &str,
    env: &mut BTreeMap<String, String>,
) {
    let mut content = match env.get(var).filter(|t| !t.trim().is_empty()) {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            _ => {
                tracing::warn!(
                    "{var} is not a JSON object; its providers do not go through the gateway"
                );
                return;
            }
        },
    };
    let mut providers: BTreeMap<String, Provider> = BTreeMap::new();
    for file in files {
        let is_json = file
            .extension()
            .is_some_and(|e| e == "json" || e == "jsonc");
        if !is_json {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(config) => gather(&config, &mut providers),
            Err(e) => tracing::warn!(
                file = %file.display(),
                "a model configuration that is not plain JSON (comments?) is not read for its providers: {e}"
            ),
        }
    }
    gather(&Value::Object(content.clone()), &mut providers);
    let mut changed = false;
    for (id, provider) in providers {
        let Some(base) = provider.base_url else {
            continue;
        };
        let url = routes.route(&id, &base);
        let Some(options) = options_of(&mut content, &id) else {
            continue;
        };
        options.insert("baseURL".into(), Value::String(url));
        if let Some(key) = provider.api_key {
            match key.strip_prefix("{env:").and_then(|k| k.strip_suffix('}')) {
                Some(name) => routes.hide_key(name, env),
                None => {
                    let stand_in = routes.hide_literal(&format!("{id}-api-key"), &key);
                    options.insert("apiKey".into(), Value::String(stand_in));
                }
            }
        }
        changed = true;
    }
    if changed {
        env.insert(var.to_string(), Value::Object(content).to_string());
    }
}

/// Each provider's `baseURL` and `apiKey` in `config`, over what earlier
/// configurations said.
fn gather(config: &Value, providers: &mut BTreeMap<String, Provider>) {
    let Some(listed) = config.get("provider").and_then(Value::as_object) else {
        return;
    };
    for (id, provider) in listed {
        let options = provider.get("options");
        let text = |key: &str| {
            options
                .and_then(|o| o.get(key))
                .and_then(Value::as_str)
                .filter(|v| !v.trim().is_empty())
                .map(str::to_string)
        };
        let entry = providers.entry(id.clone()).or_default();
        if let Some(url) = text("baseURL") {
            entry.base_url = Some(url);
        }
        if let Some(key) = text("apiKey") {
            entry.api_key = Some(key);
        }
    }
}

/// `provider.<id>.options` in `content`, made where missing (a value of
/// another shape is replaced: the CLI would refuse it anyway).
fn options_of<'c>(
    content: &'c mut Map<String, Value>,
    id: &str,
) -> Option<&'c mut Map<String, Value>> {
    fn child<'m>(map: &'m mut Map<String, Value>, key: &str) -> Option<&'m mut Map<String, Value>> {
        let slot = map
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        slot.as_object_mut()
    }
    child(child(child(content, "provider")?, id)?, "options")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_with_its_own_base_url_is_pointed_at_the_door_by_the_inline_config() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("opencode.json");
        std::fs::write(
            &file,
            r#"{"provider": {"mine": {"options": {"baseURL": "http://mine/v1", "apiKey": "sk-file"}}}}"#,
        )
        .unwrap();
        let content = r#"{"model": "anthropic/x", "provider": {"anthropic": {"options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "{env:MY_KEY}"}}}}"#;
        let mut env = BTreeMap::from([
            ("OPENCODE_CONFIG_CONTENT".to_string(), content.to_string()),
            ("MY_KEY".to_string(), "sk-env".to_string()),
        ]);
        let mut routes = Routes::new("tok");
        point(&mut routes, &[file], "OPENCODE_CONFIG_CONTENT", &mut env);
        let written: Value = serde_json::from_str(&env["OPENCODE_CONFIG_CONTENT"]).unwrap();
        assert_eq!(written["model"], "anthropic/x", "the rest kept");
        assert_eq!(
            written["provider"]["anthropic"]["options"]["baseURL"],
            crate::door::model_url("anthropic")
        );
        assert_eq!(routes.upstreams["anthropic"], "http://127.0.0.1:9/v1");
        assert_eq!(env["MY_KEY"], "hb-tok-my-key");
        assert_eq!(routes.upstreams["mine"], "http://mine/v1");
        let key = &written["provider"]["mine"]["options"]["apiKey"];
        assert_eq!(key, "hb-tok-mine-api-key");
        assert!(!env.values().any(|v| v.contains("sk-")));
        assert!(routes.keys.iter().any(|(_, k)| k == "sk-file"));
    }

    #[test]
    fn nothing_set_nothing_changed_and_bad_content_is_left_alone() {
        let mut env = BTreeMap::new();
        let mut routes = Routes::new("tok");
        point(&mut routes, &[], "C", &mut env);
        assert!(env.is_empty());
        let mut env = BTreeMap::from([("C".to_string(), "[1".to_string())]);
        point(&mut routes, &[], "C", &mut env);
        assert_eq!(env["C"], "[1");
    }
}
