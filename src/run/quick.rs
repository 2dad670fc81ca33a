//! A whole `AgentRunContext` from the few facts a person types: what
//! `run --conversation ID --text ...` and the service's short form use.

use serde_json::json;

use crate::host::now_ms;
use crate::protocol::{
    AgentRunContext, INTERACTION_SUBMITTED, InteractionSubmission, InvalidContext, JsonMap,
    Problem, Severity, conversation_id_problem,
};

/// The facts of a typed turn.
#[derive(Debug, Clone)]
pub struct QuickTurn<'a> {
    /// Conversation the turn belongs to (the workspace and session key).
    pub conversation: &'a str,
    /// Who is speaking.
    pub actor: &'a str,
    /// What they said.
    pub text: &'a str,
    /// Binding settings (`ctx.config`): model, timeout_seconds, prompt, ...
    pub config: JsonMap,
    /// A card's answer (a button or a form sent): the turn is then an
    /// `interaction.submitted` event carrying it, as a host sends one.
    pub answer: Option<InteractionSubmission>,
}

/// A fresh run id: time-ordered and unique enough for one host.
pub fn new_run_id() -> String {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    format!("run-{}-{}", now_ms(), hex::encode(bytes))
}

/// The context of one typed turn, with every host API the bridge serves
/// opened to the run (the embedded host's default). An empty conversation
/// id is refused here, before anything is written for it.
pub fn quick_context(turn: &QuickTurn<'_>) -> Result<AgentRunContext, InvalidContext> {
    let refused = |path: &str, message: String| InvalidContext {
        errors: vec![Problem {
            severity: Severity::Error,
            path: path.to_string(),
            message,
        }],
    };
    if let Some(why) = conversation_id_problem(turn.conversation) {
        return Err(refused("$.conversation.conversation_id", why.to_string()));
    }
    let run_id = new_run_id();
    let now = now_ms() / 1000;
    let event_type = match turn.answer {
        Some(_) => INTERACTION_SUBMITTED,
        None => "message.received",
    };
    let mut input = json!({"text": turn.text});
    if let Some(answer) = &turn.answer {
        input["interaction"] =
            serde_json::to_value(answer).map_err(|e| refused("$.input", e.to_string()))?;
    }
    let doc = json!({
        "run_id": run_id,
        "trigger": {"type": event_type, "source": "api", "timestamp": now},
        "event": {
            "event_id": format!("ev-{run_id}"),
            "event_type": event_type,
            "event_time": now,
            "source": "api",
        },
        "conversation": {"conversation_id": turn.conversation, "bot_id": "local", "workspace_id": "local"},
        "actor": {"actor_type": "user", "actor_id": turn.actor, "actor_name": turn.actor},
        "subject": {"subject_type": "conversation", "subject_id": turn.conversation},
        "input": input,
        "delivery": {"surface": "cli", "supports_streaming": true},
        "resources": {"storage": {"plugin_storage": true, "workspace_storage": true}},
        "context": {"available_apis": {
            "history_page": true, "history_search": true, "event_get": true, "event_page": true,
            "artifact_metadata": true, "artifact_read": true, "state": true, "storage": true,
        }},
        "runtime": {},
        "config": turn.config,
    });
    serde_json::from_value(doc).map_err(|e| refused("$", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_context_is_valid_and_carries_the_turn() {
        let ctx = quick_context(&QuickTurn {
            conversation: "demo",
            actor: "ada",
            text: "hi \"there\"\n",
            config: JsonMap::new(),
            answer: None,
        })
        .unwrap();
        let (parsed, problems) =
            crate::protocol::validate_context(&serde_json::to_value(&ctx).unwrap());
        assert!(parsed.is_some(), "{problems:?}");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(ctx.conversation_id(), Some("demo"));
        assert_eq!(ctx.input.to_text(), "hi \"there\"\n");
        assert_ne!(ctx.run_id, new_run_id());
    }

    #[test]
    fn an_empty_conversation_id_is_refused() {
        for conversation in ["", "  "] {
            let refused = quick_context(&QuickTurn {
                conversation,
                actor: "ada",
                text: "hi",
                config: JsonMap::new(),
                answer: None,
            })
            .expect_err("refused");
            assert_eq!(refused.errors[0].path, "$.conversation.conversation_id");
        }
    }

    #[test]
    fn an_answered_card_is_an_interaction_submitted_turn() {
        let answer: InteractionSubmission = serde_json::from_value(serde_json::json!({
            "interaction_id": "ask-run-1", "action_id": "submit", "values": {"answer": "2"},
        }))
        .unwrap();
        let ctx = quick_context(&QuickTurn {
            conversation: "demo",
            actor: "ada",
            text: "Staging",
            config: JsonMap::new(),
            answer: Some(answer.clone()),
        })
        .unwrap();
        let (parsed, problems) =
            crate::protocol::validate_context(&serde_json::to_value(&ctx).unwrap());
        assert!(parsed.is_some() && problems.is_empty(), "{problems:?}");
        assert_eq!(ctx.event.event_type, INTERACTION_SUBMITTED);
        assert_eq!(
            InteractionSubmission::from_input(&ctx.input.extra),
            Some(answer)
        );
    }
}
