//! LangBot AgentRunner Protocol v1: the wire types the bridge speaks, and
//! nothing else. No I/O lives here, so every other module (and every test)
//! can build, parse and check protocol values without a host or a harness.
//!
//! Compatibility follows the protocol's additive-change rules (§3, §4.3,
//! §7.1): context objects accept and keep fields they do not know (a newer
//! host, or the released SDK's additions such as `variables`, survive a
//! round trip); manifest capabilities and permissions reject unknown keys,
//! because they are an authorization contract; an unknown result `type` is
//! kept and flagged, while the strict result payloads are validated field
//! by field.

/// An enum of wire names that stays open: names this build does not know
/// parse into the catch-all variant and serialize back unchanged, so a
/// newer peer's additions pass through (§3).
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $other:ident {
            $($(#[$vmeta:meta])* $variant:ident = $wire:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(from = "String", into = "String")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A name this build does not know, kept verbatim.
            $other(String),
        }

        impl $name {
            /// Every name this build knows, in declaration order.
            pub const ALL: &'static [$name] = &[$(Self::$variant,)+];

            /// The wire name.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)+
                    Self::$other(name) => name,
                }
            }
        }

        impl From<String> for $name {
            fn from(name: String) -> Self {
                match name.as_str() {
                    $($wire => Self::$variant,)+
                    _ => Self::$other(name),
                }
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.as_str().to_string()
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

// Fields and variants of wire types carry the protocol's own names and
// meanings (each type cites its section); only non-obvious ones are
// documented here, so the missing-docs lint stops at the type.
#[allow(missing_docs)]
mod context;
mod failure;
#[allow(missing_docs)]
mod interaction;
#[allow(missing_docs)]
mod manifest;
#[allow(missing_docs)]
mod message;
#[allow(missing_docs)]
mod proxy;
#[allow(missing_docs)]
mod result;
pub mod time;
mod validate;

pub use context::*;
pub use failure::FailureCode;
pub use interaction::*;
pub use manifest::*;
pub use message::*;
pub use proxy::*;
pub use result::*;
pub use validate::{
    InvalidContext, MAX_RUN_ID_LEN, Problem, Severity, checked_context, conversation_id_problem,
    run_id_problem, validate_context,
};

/// A JSON object, in insertion order (unknown fields are kept as received).
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

/// `skip_serializing_if` helper: keeps emitted JSON free of `false` defaults.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
