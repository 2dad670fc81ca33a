//! Interactions (released-SDK addition): a runner asks the person in the
//! chat something — a question, a choice, an approval — and the answer comes
//! back as a later run. The request rides an `action.requested` result
//! whose `action` is [`INTERACTION_REQUESTED`]; a host that renders cards
//! shows it as one, every other surface shows `fallback_text`. The answer
//! arrives as `input.interaction` in a run whose event is
//! [`INTERACTION_SUBMITTED`] (card surfaces), or as the next plain message.
//!
//! Shapes and bounds follow the released SDK's `interaction` models, which
//! forbid unknown fields: what the bridge sends must validate there.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::JsonMap;

/// `action.requested`'s `action` for an interaction request.
pub const INTERACTION_REQUESTED: &str = "interaction.requested";
/// The event type of a run that carries an answer from a card.
pub const INTERACTION_SUBMITTED: &str = "interaction.submitted";
/// The longest a host keeps a request open (LangBot refuses more).
pub const MAX_EXPIRY_SECONDS: i64 = 24 * 60 * 60;

/// What kind of card the host draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InteractionKind {
    Form,
    Confirmation,
    Choice,
}

/// One selectable value of a field (1–512 characters each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InteractionOption {
    pub value: String,
    pub label: String,
}

/// A field the host renders (`text`, `select`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InteractionField {
    pub id: String,
    pub label: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<InteractionOption>,
}

/// A button; `style` is `default`, `primary` or `danger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InteractionAction {
    pub id: String,
    pub label: String,
    pub style: String,
}

/// The card: `InteractionRequest` of the released SDK.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InteractionRequest {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<InteractionField>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<InteractionAction>,
    /// Unix seconds (not milliseconds: a host refuses more than a day ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// What surfaces without cards show instead, answer syntax included.
    pub fallback_text: String,
}

/// The answer a host validated: `InteractionSubmission`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionSubmission {
    pub interaction_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    #[serde(default)]
    pub values: JsonMap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<i64>,
}

impl InteractionSubmission {
    /// The submission an input carries (`input.interaction`), if it is one.
    pub fn from_input(extra: &JsonMap) -> Option<InteractionSubmission> {
        match extra.get("interaction") {
            Some(value @ Value::Object(_)) => serde_json::from_value(value.clone()).ok(),
            _ => None,
        }
    }
}
