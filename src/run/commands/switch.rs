//! `/model` and `/mode`: a person switches the conversation's model or
//! permission mode among those the operator lists (a binding's `models`,
//! `permission_modes`). The choice is kept in the conversation's state
//! (`external.overrides`, which a harness cannot write) and applied to
//! each turn's binding only while the operator still lists it; a key the
//! operator fixed (`serve`'s `fixed_config`) is never switched.

use serde::{Deserialize, Serialize};

use super::Asked;
use crate::harness::OVERRIDES_KEY;
use crate::host::{HostApi, RunScope};
use crate::protocol::{AgentRunContext, StateScope};
use crate::run::Bridge;

/// What a person chose for the conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Chosen {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) permission_mode: Option<String>,
}

/// The choice kept for `ctx`'s conversation: from the host's snapshot in
/// the context when it sent one, else from the store.
async fn read(host: &dyn HostApi, scope: &RunScope, ctx: &AgentRunContext) -> Chosen {
    let kept = if ctx.state.conversation.is_empty() {
        match host
            .state_get(scope, StateScope::Conversation, OVERRIDES_KEY)
            .await
        {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!("cannot read the conversation's chosen model and mode: {e}");
                None
            }
        }
    } else {
        ctx.state.conversation.get(OVERRIDES_KEY).cloned()
    };
    kept.and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

pub(super) async fn chosen(asked: &Asked<'_>) -> Chosen {
    read(asked.host, &asked.scope, asked.asking.ctx).await
}

/// `ctx` with the model and mode its conversation's person chose, when
/// the binding still allows them; `None`: nothing to change (and, with no
/// list in the binding, nothing read).
pub(in crate::run) async fn with_overrides(
    host: &dyn HostApi,
    ctx: &AgentRunContext,
    harness: &str,
) -> Option<AgentRunContext> {
    let binding = crate::projection::Binding::from_config(&ctx.config).ok()?;
    if binding.models.is_empty() && binding.permission_modes.is_empty() {
        return None;
    }
    ctx.conversation_id()?;
    let scope = RunScope::of(ctx, &crate::harness::runner_id(harness));
    let chosen = read(host, &scope, ctx).await;
    let model = chosen.model.filter(|m| binding.models.contains(m));
    let mode = chosen
        .permission_mode
        .filter(|m| binding.permission_modes.contains(m));
    if model.is_none() && mode.is_none() {
        return None;
    }
    let mut ctx = ctx.clone();
    for (key, value) in [("model", model), ("permission_mode", mode)] {
        if let Some(value) = value {
            ctx.config.insert(key.into(), value.into());
        }
    }
    Some(ctx)
}

/// One switchable setting, as `/model` and `/mode` share it.
struct Setting<'a> {
    /// The binding key.
    key: &'static str,
    /// As the person reads it.
    name: &'static str,
    /// The command's word.
    word: &'static str,
    /// What the binding sets.
    configured: Option<&'a str>,
    /// What the operator allows.
    allowed: &'a [String],
}

/// `/model [NAME]`.
pub(super) async fn model(_bridge: &Bridge, asked: &Asked<'_>, args: &str) -> (String, bool) {
    let setting = Setting {
        key: "model",
        name: "model",
        word: "model",
        configured: asked.binding.model.as_deref(),
        allowed: &asked.binding.models,
    };
    switch(asked, &setting, args).await
}

/// `/mode [NAME]`.
pub(super) async fn mode(_bridge: &Bridge, asked: &Asked<'_>, args: &str) -> (String, bool) {
    let setting = Setting {
        key: "permission_mode",
        name: "permission mode",
        word: "mode",
        configured: asked.binding.permission_mode.as_deref(),
        allowed: &asked.binding.permission_modes,
    };
    switch(asked, &setting, args).await
}

async fn switch(asked: &Asked<'_>, setting: &Setting<'_>, args: &str) -> (String, bool) {
    let mut chosen = chosen(asked).await;
    let slot = match setting.key {
        "model" => &mut chosen.model,
        _ => &mut chosen.permission_mode,
    };
    let current = slot
        .clone()
        .filter(|c| setting.allowed.contains(c))
        .or(setting.configured.map(str::to_string));
    let current = current.as_deref().unwrap_or("the harness's default");
    let allowed = match setting.allowed {
        [] => format!("the operator allows no other {} here", setting.name),
        list => format!(
            "allowed: {}; {}{} default goes back to the operator's",
            list.join(", "),
            asked.access.prefix,
            setting.word
        ),
    };
    if args.is_empty() {
        return (
            format!("The {} here is {current} ({allowed}).", setting.name),
            false,
        );
    }
    if asked.asking.fixed.iter().any(|k| k == setting.key) {
        return (
            format!("The operator fixed the {} here ({current}).", setting.name),
            true,
        );
    }
    let next = match args {
        "default" => None,
        name if setting.allowed.iter().any(|a| a == name) => Some(name.to_string()),
        name => {
            return (
                format!(
                    "`{name}` is not a {} the operator allows here ({allowed}).",
                    setting.name
                ),
                true,
            );
        }
    };
    *slot = next.clone();
    let value = serde_json::to_value(&chosen).unwrap_or_default();
    if let Err(e) = asked
        .host
        .state_set(
            &asked.scope,
            StateScope::Conversation,
            OVERRIDES_KEY,
            &value,
        )
        .await
    {
        return (
            format!(
                "The {} could not be kept ({e}); nothing changed.",
                setting.name
            ),
            true,
        );
    }
    let now = next
        .as_deref()
        .or(setting.configured)
        .unwrap_or("the harness's default");
    (
        format!("The {} is now {now}, from your next message.", setting.name),
        false,
    )
}
