//! Which model a call asks for, and whether the turn's binding lets its
//! harness call it: a sub-agent, or an agent calling its door by hand,
//! on a model the operator did not list is refused before it is sent.

use serde::Deserialize;

/// The model a call names: Gemini's in its path (`models/<name>:…`), the
/// others' in their JSON body. `Err` when the body cannot be read for it
/// (not JSON, or a `model` given twice): such a call is refused where
/// models are bounded, since the upstream may read it otherwise.
pub(super) fn requested(rest: &str, body: &[u8]) -> Result<Option<String>, Unreadable> {
    if let Some(after) = rest.split("models/").nth(1) {
        let name = after.split([':', '/', '?']).next().unwrap_or_default();
        if !name.is_empty() {
            return Ok(Some(name.to_string()));
        }
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    #[derive(Deserialize)]
    struct Named {
        model: Option<String>,
    }
    serde_json::from_slice::<Named>(body)
        .map(|named| named.model)
        .map_err(Unreadable)
}

/// A call whose body does not say its model once, in JSON.
#[derive(Debug, thiserror::Error)]
#[error("its body does not say its model once, in JSON ({0})")]
pub(super) struct Unreadable(serde_json::Error);

/// Whether `asked` is one of the `listed` models: the same name; the
/// same with a dated or `-latest` suffix (`claude-sonnet-4-5` covers
/// `claude-sonnet-4-5-20250929`); a bare word a part of its name
/// (`sonnet` covers `claude-sonnet-4-5`); a provider's prefix
/// (`anthropic/…`) left aside on either side.
pub(super) fn allows(listed: &[String], asked: &str) -> bool {
    let asked = last_segment(asked);
    listed.iter().any(|listed| {
        let listed = last_segment(listed);
        if listed.is_empty() {
            return false;
        }
        if asked == listed {
            return true;
        }
        let dated = |suffix: &str| {
            suffix == "latest" || (suffix.len() >= 6 && suffix.bytes().all(|b| b.is_ascii_digit()))
        };
        if asked
            .strip_prefix(listed.as_str())
            .and_then(|s| s.strip_prefix('-'))
            .is_some_and(dated)
        {
            return true;
        }
        !listed.contains(['-', '.']) && asked.split('-').any(|part| part == listed)
    })
}

/// A model's name without its provider's prefix, lowercase.
fn last_segment(model: &str) -> String {
    model
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_names_its_model_in_its_path_or_its_body_once() {
        let named = |rest: &str, body: &[u8]| requested(rest, body).ok().flatten();
        assert_eq!(
            named("v1beta/models/gemini-2.5-pro:streamGenerateContent", b"{}"),
            Some("gemini-2.5-pro".into())
        );
        assert_eq!(
            named("v1/messages", br#"{"model":"claude-x","max_tokens":1}"#),
            Some("claude-x".into())
        );
        assert!(matches!(requested("v1/models", b""), Ok(None)));
        assert!(matches!(
            requested("v1/messages", br#"{"max_tokens":1}"#),
            Ok(None)
        ));
        assert!(requested("v1/messages", br#"{"model":"a","model":"b"}"#).is_err());
        assert!(requested("v1/messages", b"model=a").is_err());
        assert_eq!(
            named("v1/messages", br#"{"mo\u0064el":"escaped"}"#),
            Some("escaped".into())
        );
    }

    #[test]
    fn a_listed_model_covers_its_dated_names_and_a_word_its_family() {
        let listed = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let sonnet = listed(&["claude-sonnet-4-5"]);
        assert!(allows(&sonnet, "claude-sonnet-4-5"));
        assert!(allows(&sonnet, "claude-sonnet-4-5-20250929"));
        assert!(allows(&sonnet, "claude-sonnet-4-5-latest"));
        assert!(!allows(&sonnet, "claude-sonnet-4-5-extra"));
        assert!(!allows(&sonnet, "claude-opus-4-1"));
        assert!(!allows(&sonnet, "claude-sonnet-4"));
        assert!(allows(&listed(&["sonnet"]), "claude-sonnet-4-5-20250929"));
        assert!(!allows(&listed(&["sonnet"]), "claude-opus-4-1"));
        assert!(allows(&listed(&["anthropic/claude-x"]), "claude-x"));
        assert!(allows(&listed(&["gpt-5"]), "openai/gpt-5"));
        assert!(!allows(&listed(&["gpt-5"]), "gpt-5.1"));
        assert!(!allows(&listed(&[""]), "anything"));
        assert!(!allows(&[], "anything"));
    }
}
