//! Cline's model endpoint: its provider settings
//! (`~/.cline/data/settings/providers.json`, an OpenAI-compatible
//! provider's `baseUrl` and `model`) and its model list (`models.json`,
//! without which it takes another model than the one named), made from
//! the variables the operator sets: `CLINE_BASE_URL` (the bridge's name:
//! Cline reads no variable for it) and `CLINE_MODEL`. The key stays in
//! `CLINE_API_KEY`, which Cline reads itself, so neither file holds it.
//! Behind the door `CLINE_BASE_URL` is already the gateway's.

use std::collections::BTreeMap;

use serde_json::json;

/// The variable that holds the endpoint.
pub const BASE_URL: &str = "CLINE_BASE_URL";
/// The variable that names the model (Cline's own).
pub const MODEL: &str = "CLINE_MODEL";

/// The settings files, when the operator set an endpoint; none otherwise
/// (Cline then uses what its own sign-in left in the conversation's home).
pub fn files(env: &BTreeMap<String, String>) -> Vec<(&'static str, Vec<u8>)> {
    let set = |var: &str| env.get(var).map(|v| v.trim()).filter(|v| !v.is_empty());
    let Some(base_url) = set(BASE_URL) else {
        return Vec::new();
    };
    let model = set(MODEL);
    let mut settings = json!({"provider": "openai-compatible", "baseUrl": base_url});
    if let Some(model) = model {
        settings["model"] = json!(model);
    }
    let providers = json!({
        "version": 1,
        "lastUsedProvider": "openai-compatible",
        "modes": {},
        // Cline skips a provider whose entry has no `updatedAt`.
        "providers": {"openai-compatible": {
            "settings": settings,
            "tokenSource": "manual",
            "updatedAt": "1970-01-01T00:00:00.000Z",
        }},
    });
    let mut files = vec![(".cline/data/settings/providers.json", pretty(&providers))];
    if let Some(model) = model {
        let models = json!({
            "version": 1,
            "providers": {"openai-compatible": {"models": {model: {"id": model, "name": model}}}},
        });
        files.push((".cline/data/settings/models.json", pretty(&models)));
    }
    files
}

fn pretty(value: &serde_json::Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_endpoint_and_model_come_from_the_environment_and_no_key_is_written() {
        let env = BTreeMap::from([
            (BASE_URL.to_string(), "http://127.0.0.1:9/v1".to_string()),
            (MODEL.to_string(), "m-1".to_string()),
            ("CLINE_API_KEY".to_string(), "sk-secret-1".to_string()),
        ]);
        let files = files(&env);
        assert_eq!(files.len(), 2);
        let providers: Value = serde_json::from_slice(&files[0].1).unwrap();
        let settings = &providers["providers"]["openai-compatible"]["settings"];
        assert_eq!(settings["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(settings["model"], "m-1");
        let models: Value = serde_json::from_slice(&files[1].1).unwrap();
        assert_eq!(
            models["providers"]["openai-compatible"]["models"]["m-1"]["id"],
            "m-1"
        );
        for (_, bytes) in &files {
            assert!(!String::from_utf8_lossy(bytes).contains("sk-secret"));
        }
        assert!(
            super::files(&BTreeMap::new()).is_empty(),
            "no endpoint, no files"
        );
    }
}
