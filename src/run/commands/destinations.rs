//! `/allow`, `/allow always`, `/deny`, and the card that asks them: the
//! answer to a destination the agent's door holds
//! ([`crate::run::destinations`]), heard only from the person whose turn
//! asked or an approver the operator named.

use super::{Asked, Bridge};
use crate::command::Command;
use crate::protocol::{AgentRunContext, InteractionSubmission};
use crate::run::destinations::{self, Decision, NotAnswered};

/// The card about a destination this run's input answers: its id and
/// the command its action amounts to.
pub(super) fn card_answered(ctx: &AgentRunContext) -> Option<(String, Command, &'static str)> {
    let submitted = InteractionSubmission::from_input(&ctx.input.extra)?;
    if !submitted
        .interaction_id
        .starts_with(destinations::ID_PREFIX)
    {
        return None;
    }
    let (command, args) = match submitted.action_id.as_deref() {
        Some("allow_always") => (Command::Allow, "always"),
        Some("allow") => (Command::Allow, ""),
        // Anything else (no action, an unknown one) is no permission.
        _ => (Command::Deny, ""),
    };
    Some((submitted.interaction_id, command, args))
}

/// Decide what waits in the conversation as the asker says: the words
/// the person reads, and whether nothing changed.
pub(super) async fn answer(
    bridge: &Bridge,
    asked: &Asked<'_>,
    command: Command,
    args: &str,
) -> (String, bool) {
    let prefix = &asked.access.prefix;
    let decision = match command {
        Command::Deny => Decision::Deny,
        _ => match destinations::decision_of(args) {
            Some(Decision::Deny) | None => {
                return (
                    format!(
                        "{prefix}allow lets the agent reach what it asked for this once; {prefix}allow always, for this conversation; {prefix}deny refuses it."
                    ),
                    true,
                );
            }
            Some(decision) => decision,
        },
    };
    let decided = bridge.asks.answer(
        &asked.conversation,
        asked.card.as_deref(),
        asked.actor,
        &asked.binding.approvers,
        decision,
    );
    let destinations = match decided {
        Ok(destinations) => destinations,
        Err(NotAnswered::Nothing) => {
            return (
                "Nothing here waits for an answer about where the agent may connect.".into(),
                true,
            );
        }
        Err(NotAnswered::NotYours(who)) => {
            return (
                format!(
                    "Only {who}, whose turn asked, or an approver the operator named may answer this."
                ),
                true,
            );
        }
    };
    let list = destinations.join(", ");
    let text = match decision {
        Decision::Once => format!("Allowed {list}, this once."),
        Decision::Deny => format!("Refused {list}."),
        Decision::Always => {
            match destinations::allow_always(asked.host, &asked.scope, &destinations).await {
                Ok(()) => format!("Allowed {list} for this conversation."),
                Err(e) => {
                    tracing::warn!("cannot keep the allowed destinations: {e}");
                    format!(
                        "Allowed {list} this once; it could not be kept for the conversation ({e})."
                    )
                }
            }
        }
    };
    (text, false)
}
