//! Scopes (a whitelist of context parts) and secret redaction: what of a
//! context may reach the harness at all.
//!
//! A part that is not in scope is *absent* from every projected file and
//! prompt, not blanked: everything downstream renders from the one
//! projected object built here.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::protocol::{AgentRunContext, JsonMap};

macro_rules! scopes {
    ($($variant:ident = $name:literal),+ $(,)?) => {
        /// A top-level part of an `AgentRunContext` that may be projected.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Scope {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )+
        }

        impl Scope {
            /// Every part, in the order `agent-context.json` lists them.
            pub const ALL: &'static [Scope] = &[$(Scope::$variant),+];

            /// The part's field name in the context.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Scope::$variant => $name),+
                }
            }
        }
    };
}

scopes! {
    Trigger = "trigger",
    Event = "event",
    Conversation = "conversation",
    Actor = "actor",
    Subject = "subject",
    Input = "input",
    Delivery = "delivery",
    Resources = "resources",
    Context = "context",
    State = "state",
    Runtime = "runtime",
    Adapter = "adapter",
    Metadata = "metadata",
}

impl Scope {
    /// The safe default: everything a harness needs to answer the current
    /// event. Left out: `adapter` (entry-adapter leftovers, may hold raw
    /// platform payloads) and `metadata` (host diagnostics).
    pub const DEFAULT: &'static [Scope] = &[
        Scope::Trigger,
        Scope::Event,
        Scope::Conversation,
        Scope::Actor,
        Scope::Subject,
        Scope::Input,
        Scope::Delivery,
        Scope::Resources,
        Scope::Context,
        Scope::State,
        Scope::Runtime,
    ];
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .iter()
            .copied()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown scope `{name}` (known: {})", known.join(", "))
            })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The context parts in scope, as JSON, with secrets redacted.
pub fn project_parts(ctx: &AgentRunContext, scopes: &[Scope], secret_keys: &[String]) -> JsonMap {
    fn part<T: serde::Serialize>(value: &T) -> Option<Value> {
        serde_json::to_value(value).ok()
    }
    let mut parts = JsonMap::new();
    for scope in Scope::ALL.iter().filter(|s| scopes.contains(s)) {
        // Serialize only what is in scope: never the binding config, which
        // can be large (skill bodies) and is not a projected part.
        let value = match scope {
            Scope::Trigger => part(&ctx.trigger),
            Scope::Event => part(&ctx.event),
            Scope::Conversation => ctx.conversation.as_ref().and_then(part),
            Scope::Actor => ctx.actor.as_ref().and_then(part),
            Scope::Subject => ctx.subject.as_ref().and_then(part),
            Scope::Input => part(&ctx.input),
            Scope::Delivery => part(&ctx.delivery),
            Scope::Resources => part(&ctx.resources),
            Scope::Context => part(&ctx.context),
            Scope::State => part(&ctx.state),
            Scope::Runtime => part(&ctx.runtime),
            Scope::Adapter => ctx.adapter.as_ref().and_then(part),
            Scope::Metadata => part(&ctx.metadata),
        };
        if let Some(mut value) = value {
            redact(&mut value, secret_keys);
            parts.insert(scope.as_str().to_string(), value);
        }
    }
    parts
}

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

fn words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// Whether a key names a secret: `password`, `api_key`, `botToken`,
/// `client_secret`, `Authorization`, ... but not `max_tokens` or `session_id`.
pub fn is_secret_key(key: &str, extra: &[String]) -> bool {
    if extra.iter().any(|k| k.eq_ignore_ascii_case(key)) {
        return true;
    }
    let words = words(key);
    let has = |w: &str| words.iter().any(|x| x == w);
    let pair = |a: &str, b: &str| words.windows(2).any(|p| p[0] == a && p[1] == b);
    [
        "password",
        "passwd",
        "secret",
        "token",
        "credential",
        "credentials",
        "cookie",
        "authorization",
        "apikey",
        "passphrase",
    ]
    .iter()
    .any(|w| has(w))
        || pair("api", "key")
        || pair("private", "key")
        || pair("access", "key")
        || pair("secret", "key")
}

/// Whether a string value looks like a credential on its own (a whole
/// value with a well-known token prefix), whatever its key.
pub fn is_secret_value(text: &str) -> bool {
    let t = text.trim();
    if t.contains("-----BEGIN") && t.contains("PRIVATE KEY") {
        return true;
    }
    if t.chars().any(char::is_whitespace) && !t.starts_with("Bearer ") {
        return false;
    }
    let long_after =
        |prefix: &str, min: usize| t.strip_prefix(prefix).is_some_and(|rest| rest.len() >= min);
    long_after("sk-", 16)
        || long_after("ghp_", 20)
        || long_after("gho_", 20)
        || long_after("github_pat_", 20)
        || long_after("xoxb-", 10)
        || long_after("xoxp-", 10)
        || long_after("glpat-", 16)
        || long_after("Bearer ", 8)
        || (t.len() == 20
            && t.starts_with("AKIA")
            && t.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
}

/// Redact secrets inside free text (a log or stderr line): words that look
/// like secrets, `KEY=value` / `key: value` pairs whose key names a secret,
/// and any of `known` (values the caller knows are secret, e.g. a token).
pub fn redact_text(text: &str, known: &[&str]) -> String {
    let mut out = text.to_string();
    for secret in known.iter().filter(|s| s.len() >= 8) {
        out = out.replace(secret, REDACTED);
    }
    let mut redact_next = false;
    let words: Vec<String> = out
        .split(' ')
        .map(|word| {
            let bare = word.trim_matches(|c: char| "\"'`,;()[]{}<>".contains(c));
            if bare.eq_ignore_ascii_case("bearer") {
                redact_next = true;
                return word.to_string();
            }
            if redact_next && !bare.is_empty() {
                redact_next = false;
                return word.replace(bare, REDACTED);
            }
            if let Some((key, value)) = bare.split_once(['=', ':'])
                && is_secret_key(key, &[])
            {
                if value.is_empty() {
                    redact_next = bare.ends_with(':');
                    return word.to_string();
                }
                return word.replace(value, REDACTED);
            }
            if is_secret_value(bare) {
                return word.replace(bare, REDACTED);
            }
            word.to_string()
        })
        .collect();
    words.join(" ")
}

/// Replace every secret in `value` (by key or by look) with [`REDACTED`].
pub fn redact(value: &mut Value, extra_keys: &[String]) {
    match value {
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                if is_secret_key(key, extra_keys) && !item.is_null() {
                    *item = Value::String(REDACTED.into());
                } else {
                    redact(item, extra_keys);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| redact(item, extra_keys)),
        Value::String(text) if is_secret_value(text) => *text = REDACTED.into(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_inside_free_text_are_redacted() {
        let line = "error: auth failed for OPENAI_API_KEY=sk-abcdefghijklmnopqrstu with \"Authorization: Bearer abcdefgh12345\" token: hunter2hunter2 (run tok_0123456789)";
        let out = redact_text(line, &["tok_0123456789"]);
        for secret in [
            "sk-abcdefghijklmnopqrstu",
            "abcdefgh12345",
            "hunter2hunter2",
            "tok_0123456789",
        ] {
            assert!(!out.contains(secret), "{secret} survived: {out}");
        }
        assert!(
            out.starts_with("error: auth failed for OPENAI_API_KEY=[redacted]"),
            "{out}"
        );
        let plain = "No conversation found with session ID: 1234";
        assert_eq!(redact_text(plain, &[]), plain);
    }

    #[test]
    fn secret_keys_and_values() {
        for key in [
            "password",
            "api_key",
            "apiKey",
            "OPENAI_API_KEY",
            "botToken",
            "client_secret",
            "Authorization",
            "aws_secret_access_key",
            "private_key",
            "cookie",
        ] {
            assert!(is_secret_key(key, &[]), "{key}");
        }
        for key in [
            "max_tokens",
            "prompt_tokens",
            "session_id",
            "keyboard",
            "monkey",
            "tokens",
            "author",
        ] {
            assert!(!is_secret_key(key, &[]), "{key}");
        }
        assert!(is_secret_key("my_field", &["MY_FIELD".into()]));
        for value in [
            "sk-abcdefghijklmnopqrstu",
            "ghp_0123456789abcdefghijkl",
            "Bearer abcdefghijk",
            "AKIAABCDEFGHIJKLMNOP",
        ] {
            assert!(is_secret_value(value), "{value}");
        }
        for value in [
            "my key is sk-abcdefghijklmnopqrstu",
            "sk-short",
            "hello",
            "AKIA",
        ] {
            assert!(!is_secret_value(value), "{value}");
        }
        let mut doc = json!({"a": {"api_key": "x", "list": ["sk-abcdefghijklmnopqrstuv", "ok"], "max_tokens": 5}});
        redact(&mut doc, &[]);
        assert_eq!(
            doc,
            json!({"a": {"api_key": REDACTED, "list": [REDACTED, "ok"], "max_tokens": 5}})
        );
    }
}
