//! Codex's model provider, from the operator's `config.toml`.
//!
//! Codex reads no base-URL variable: its provider is `model_provider` (or
//! the active profile's) with `[model_providers.<id>]` giving `base_url`
//! and `env_key`, the variable its key is in. The chosen provider's
//! `base_url` is pointed at the door by a config override (a `-c` item,
//! or a dotted key in the JSON an adapter that starts Codex reads) and
//! its key variable holds a stand-in. The built-in OpenAI provider cannot be
//! changed that way: when its key is in a variable, the turn gets a
//! provider of the bridge's own in its place, the same API through the
//! gateway. A ChatGPT sign-in (tokens in the carried `auth.json`) is left
//! as it is: it reaches its service only through the proxy.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::Routes;

/// Where the built-in provider's calls go.
const OPENAI: &str = "https://api.openai.com/v1";
/// The variables Codex reads the built-in provider's key from.
const OPENAI_KEYS: [&str; 2] = crate::harness::ModelConfig::CODEX_KEYS;
/// The name of the provider the bridge gives a turn in the built-in's
/// place.
const OWN: &str = "bridge-openai";

/// Point the provider the operator's `config.toml` (among `files`)
/// chooses at the gateway, by `-c` items or, with `json_env`, by dotted
/// keys in that variable's JSON object (the operator's own kept).
pub(super) fn point(
    routes: &mut Routes<'_>,
    files: &[PathBuf],
    json_env: Option<&str>,
    env: &mut BTreeMap<String, String>,
) {
    let settings = settings(routes, files, env);
    if settings.is_empty() {
        return;
    }
    let Some(var) = json_env else {
        for (key, value) in settings {
            routes
                .overrides
                .push(format!("{key}={}", inline_toml(&value)));
        }
        return;
    };
    let mut object = match env.get(var).map(|text| serde_json::from_str::<Value>(text)) {
        None => serde_json::Map::new(),
        Some(Ok(Value::Object(object))) => object,
        Some(_) => {
            tracing::warn!(
                "{var} is not a JSON object; Codex's provider does not go through the gateway"
            );
            return;
        }
    };
    object.extend(settings);
    env.insert(var.to_string(), Value::Object(object).to_string());
}

/// The settings (dotted key, value) that point the chosen provider at
/// the gateway; its key variable made a stand-in.
fn settings(
    routes: &mut Routes<'_>,
    files: &[PathBuf],
    env: &mut BTreeMap<String, String>,
) -> Vec<(String, Value)> {
    let config = files
        .iter()
        .find(|f| f.file_name().is_some_and(|n| n == "config.toml"))
        .and_then(|file| read(file));
    let config = config.unwrap_or_default();
    let id = chosen(&config);
    let table = config
        .get("model_providers")
        .and_then(|t| t.get(id.as_str()))
        .and_then(toml::Value::as_table);
    match table {
        Some(provider) => {
            if !bare_key(&id) {
                tracing::warn!(
                    provider = %id,
                    "Codex's provider has a name a config override cannot name; its calls do not go through the gateway"
                );
                return Vec::new();
            }
            let upstream = provider
                .get("base_url")
                .and_then(toml::Value::as_str)
                .unwrap_or(OPENAI);
            let url = routes.route(&id, upstream);
            if let Some(var) = provider.get("env_key").and_then(toml::Value::as_str) {
                routes.hide_key(var, env);
            }
            vec![(format!("model_providers.{id}.base_url"), json!(url))]
        }
        None if id == "openai" => {
            let Some(var) = OPENAI_KEYS
                .into_iter()
                .find(|var| env.get(*var).is_some_and(|k| !k.is_empty()))
            else {
                return Vec::new();
            };
            let url = routes.route("openai", OPENAI);
            routes.hide_key(var, env);
            vec![
                ("model_provider".into(), json!(OWN)),
                (
                    format!("model_providers.{OWN}"),
                    json!({"name": "OpenAI", "base_url": url, "env_key": var, "wire_api": "responses"}),
                ),
            ]
        }
        None => Vec::new(),
    }
}

/// The operator's file as a table; an unreadable one is said and left.
fn read(file: &std::path::Path) -> Option<toml::Table> {
    let text = std::fs::read_to_string(file).ok()?;
    match text.parse::<toml::Table>() {
        Ok(table) => Some(table),
        Err(e) => {
            tracing::warn!(file = %file.display(), "Codex's config.toml cannot be read for its model provider: {e}");
            None
        }
    }
}

/// The provider the configuration chooses: the active profile's, else
/// `model_provider`, else the built-in `openai`.
fn chosen(config: &toml::Table) -> String {
    let profile = config
        .get("profile")
        .and_then(toml::Value::as_str)
        .and_then(|name| config.get("profiles")?.get(name)?.get("model_provider"))
        .and_then(toml::Value::as_str);
    profile
        .or_else(|| config.get("model_provider").and_then(toml::Value::as_str))
        .unwrap_or("openai")
        .to_string()
}

/// Whether `id` can be written bare in a dotted key (Codex splits a `-c`
/// key at each dot).
fn bare_key(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A value as an inline TOML value: a JSON string is a TOML string, an
/// object an inline table.
fn inline_toml(value: &Value) -> String {
    match value {
        Value::Object(object) => {
            let items: Vec<String> = object
                .iter()
                .map(|(key, value)| format!("{key}={}", inline_toml(value)))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointed(config: &str, env: &[(&str, &str)]) -> (Routes<'static>, BTreeMap<String, String>) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, config).unwrap();
        let mut env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut routes = Routes::new("tok");
        point(&mut routes, &[file], None, &mut env);
        (routes, env)
    }

    #[test]
    fn the_chosen_provider_goes_through_the_gateway_with_a_stand_in_key() {
        let (routes, env) = pointed(
            "model_provider = \"fake\"\n[model_providers.fake]\nbase_url = \"http://127.0.0.1:9/v1\"\nenv_key = \"FAKE_KEY\"\n[model_providers.other]\nbase_url = \"http://elsewhere\"\n",
            &[("FAKE_KEY", "sk-real")],
        );
        assert_eq!(routes.upstreams["fake"], "http://127.0.0.1:9/v1");
        assert_eq!(routes.upstreams.len(), 1, "only the chosen one");
        assert_eq!(
            routes.overrides,
            [format!(
                "model_providers.fake.base_url=\"{}\"",
                crate::door::model_url("fake")
            )]
        );
        assert_eq!(env["FAKE_KEY"], "hb-tok-fake-key");
        assert_eq!(routes.keys, [("hb-tok-fake-key".into(), "sk-real".into())]);
    }

    #[test]
    fn the_built_in_provider_is_replaced_by_the_bridges_own_when_its_key_is_a_variable() {
        let (routes, env) = pointed("model = \"gpt-5\"\n", &[("OPENAI_API_KEY", "sk-real")]);
        assert_eq!(routes.upstreams["openai"], OPENAI);
        assert_eq!(routes.overrides[0], "model_provider=\"bridge-openai\"");
        assert!(
            routes.overrides[1].contains("env_key=\"OPENAI_API_KEY\""),
            "{:?}",
            routes.overrides
        );
        assert_eq!(env["OPENAI_API_KEY"], "hb-tok-openai-api-key");
        // A sign-in (no key variable) is left as it is.
        let (routes, _) = pointed("", &[]);
        assert!(routes.overrides.is_empty() && routes.upstreams.is_empty());
    }

    #[test]
    fn an_adapter_takes_the_overrides_as_json_beside_the_operators() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "model_provider = \"fake\"\n[model_providers.fake]\nbase_url = \"http://f\"\n",
        )
        .unwrap();
        let mut env =
            BTreeMap::from([("CODEX_CONFIG".to_string(), r#"{"model": "m"}"#.to_string())]);
        let mut routes = Routes::new("tok");
        point(&mut routes, &[file], Some("CODEX_CONFIG"), &mut env);
        let config: Value = serde_json::from_str(&env["CODEX_CONFIG"]).unwrap();
        assert_eq!(config["model"], "m");
        assert_eq!(
            config["model_providers.fake.base_url"],
            crate::door::model_url("fake")
        );
        assert!(routes.overrides.is_empty());
    }

    #[test]
    fn a_profile_chooses_and_a_name_with_a_dot_is_left_alone() {
        let (routes, _) = pointed(
            "profile = \"work\"\n[profiles.work]\nmodel_provider = \"w\"\n[model_providers.w]\nbase_url = \"http://w\"\n",
            &[],
        );
        assert_eq!(routes.upstreams["w"], "http://w");
        let (routes, _) = pointed(
            "model_provider = \"a.b\"\n[model_providers.\"a.b\"]\nbase_url = \"http://x\"\n",
            &[],
        );
        assert!(routes.overrides.is_empty());
        let (routes, _) = pointed("not toml [", &[("OPENAI_API_KEY", "k")]);
        assert_eq!(
            routes.upstreams["openai"], OPENAI,
            "an unreadable file: the built-in"
        );
    }
}
