//! A destination no rule covers, asked of the person in the chat while
//! its connection waits at the harness's door.
//!
//! The door's proxy holds the connection and asks [`DoorApprover`]: a
//! destination this conversation allowed before ([`ALLOWED_KEY`], a
//! bridge key no harness may write) goes through; else the turn the
//! harness serves now sends a card ("Claude Code wants to reach
//! example.org:443": allow once, allow for this conversation, deny) and
//! the connection waits, bounded by [`WAIT`] and the turn's deadline. The
//! answer comes as a run of its own (the card's submission, or `/allow`,
//! `/allow always`, `/deny` typed), which the front door hands to the
//! chat commands before anything queues: only the person whose turn
//! asked, or one of the binding's approvers, decides ([`Asks::answer`]).
//! No answer in time is a refusal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::host::{Grants, HostApi, RunScope};
use crate::interaction::Asker;
use crate::protocol::{
    ActionRequested, INTERACTION_REQUESTED, InteractionAction, InteractionKind, InteractionRequest,
    ResultPayload, StateScope,
};

/// The conversation's destinations allowed "for this conversation", as
/// `host:port` strings.
pub const ALLOWED_KEY: &str = "external.egress_allowed";
/// How long a held connection waits for the person at most.
pub const WAIT: Duration = Duration::from_secs(120);
/// What a card's id starts with: its submission is an answer to one of
/// these, never a turn.
pub const ID_PREFIX: &str = "egress-";

/// What the person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// This connection only.
    Once,
    /// This one, and the destination for the conversation from now on.
    Always,
    /// Refused.
    Deny,
}

/// The turns that may ask now, and the questions waiting.
#[derive(Default)]
pub struct Asks {
    turns: Mutex<HashMap<String, Turn>>,
    waiting: Mutex<Vec<Waiting>>,
}

/// Where a turn's questions go.
pub struct Turn {
    /// Its results' side way in: the card goes there.
    pub notices: mpsc::UnboundedSender<ResultPayload>,
    /// Its conversation.
    pub conversation: String,
    /// Who asked the turn: who may answer.
    pub asked_by: Option<Asker>,
    /// The harness's name for the person.
    pub harness: String,
    /// The commands' prefix, for the card's words.
    pub prefix: String,
    /// When the turn must be over.
    pub deadline: Instant,
}

struct Waiting {
    id: String,
    run_id: String,
    conversation: String,
    destination: String,
    asked_by: Option<Asker>,
    answer: oneshot::Sender<Decision>,
}

/// Forgets its turn when dropped.
pub struct Registered {
    asks: Arc<Asks>,
    run_id: String,
}

impl Drop for Registered {
    /// The turn is over: nothing more is asked through it, and what it
    /// asked is refused (its harness is stopping, or serves no one).
    fn drop(&mut self) {
        lock(&self.asks.turns).remove(&self.run_id);
        lock(&self.asks.waiting).retain(|w| w.run_id != self.run_id);
    }
}

/// Why an answer changed nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum NotAnswered {
    /// Nothing of this conversation waits.
    Nothing,
    /// What waits is someone else's to answer (named, when known).
    NotYours(String),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Asks {
    /// `run_id`'s turn may ask, until the guard is dropped.
    pub fn register(self: &Arc<Self>, run_id: &str, turn: Turn) -> Registered {
        lock(&self.turns).insert(run_id.to_string(), turn);
        Registered {
            asks: self.clone(),
            run_id: run_id.to_string(),
        }
    }

    /// Ask `run_id`'s person about `destination` and wait for the answer.
    async fn ask(&self, run_id: &str, destination: &str) -> Result<Decision, String> {
        let id = format!("{ID_PREFIX}{}", random_hex());
        let (tx, rx) = oneshot::channel();
        let until = {
            let turns = lock(&self.turns);
            let Some(turn) = turns.get(run_id) else {
                return Err(format!(
                    "{destination} is not among the destinations this harness may reach, and this turn has no one to ask; the operator may add it to cage.egress.allow"
                ));
            };
            lock(&self.waiting).push(Waiting {
                id: id.clone(),
                run_id: run_id.to_string(),
                conversation: turn.conversation.clone(),
                destination: destination.to_string(),
                asked_by: turn.asked_by.clone(),
                answer: tx,
            });
            let _ = turn.notices.send(card(&id, destination, turn));
            turn.deadline.min(Instant::now() + WAIT)
        };
        tracing::info!(%destination, interaction = %id, "asked the person about a destination");
        let decision = tokio::time::timeout_at(until, rx).await;
        lock(&self.waiting).retain(|w| w.id != id);
        match decision {
            Ok(Ok(decision)) => Ok(decision),
            Ok(Err(_)) => Err(format!(
                "{destination} was not allowed: the turn ended before an answer came"
            )),
            Err(_) => Err(format!(
                "{destination} was not allowed: no answer came in time; ask again, or the operator may add it to cage.egress.allow"
            )),
        }
    }

    /// The destinations `conversation` waits on an answer for.
    pub fn waiting(&self, conversation: &str) -> Vec<String> {
        lock(&self.waiting)
            .iter()
            .filter(|w| w.conversation == conversation)
            .map(|w| w.destination.clone())
            .collect()
    }

    /// Answer what waits in `conversation` (only the card `id`, when the
    /// answer came as one) as `who` decided, if `who` may: the asker of
    /// the turn that asked, or one of `approvers`. Returns the
    /// destinations decided.
    pub fn answer(
        &self,
        conversation: &str,
        id: Option<&str>,
        who: Option<&str>,
        approvers: &[String],
        decision: Decision,
    ) -> Result<Vec<String>, NotAnswered> {
        let mut waiting = lock(&self.waiting);
        let concerned =
            |w: &Waiting| w.conversation == conversation && id.is_none_or(|id| w.id == id);
        if !waiting.iter().any(concerned) {
            return Err(NotAnswered::Nothing);
        }
        let may = |w: &Waiting| {
            let own = w.asked_by.as_ref().map(|a| a.id.as_str()) == who;
            own || who.is_some_and(|who| approvers.iter().any(|a| a == who))
        };
        if !waiting.iter().any(|w| concerned(w) && may(w)) {
            let asker = waiting
                .iter()
                .find(|w| concerned(w))
                .and_then(|w| w.asked_by.as_ref())
                .map(|a| a.name.clone().unwrap_or_else(|| a.id.clone()));
            return Err(NotAnswered::NotYours(
                asker.unwrap_or_else(|| "the person whose turn asked".into()),
            ));
        }
        let mut decided = Vec::new();
        let mut kept = Vec::new();
        for w in waiting.drain(..) {
            if concerned(&w) && may(&w) {
                decided.push(w.destination.clone());
                let _ = w.answer.send(decision);
            } else {
                kept.push(w);
            }
        }
        *waiting = kept;
        Ok(decided)
    }
}

/// What the card says and offers.
fn card(id: &str, destination: &str, turn: &Turn) -> ResultPayload {
    let action = |id: &str, label: &str, style: &str| InteractionAction {
        id: id.into(),
        label: label.into(),
        style: style.into(),
    };
    let prefix = &turn.prefix;
    let request = InteractionRequest {
        interaction_id: id.to_string(),
        kind: InteractionKind::Confirmation,
        title: format!("{} wants to reach {destination}", turn.harness),
        description: Some(format!(
            "The agent's connection waits for your answer (at most {} s).",
            WAIT.as_secs()
        )),
        fields: Vec::new(),
        actions: vec![
            action("allow", "Allow once", "primary"),
            action("allow_always", "Allow for this conversation", "default"),
            action("deny", "Deny", "danger"),
        ],
        expires_at: Some(crate::host::now_ms() / 1000 + WAIT.as_secs() as i64),
        fallback_text: format!(
            "{} wants to reach {destination}.\n\nReply {prefix}allow to let it this once, {prefix}allow always for this conversation, or {prefix}deny.",
            turn.harness
        ),
    };
    let payload = serde_json::to_value(&request)
        .ok()
        .and_then(|v| v.as_object().cloned());
    ResultPayload::ActionRequested(ActionRequested {
        action: INTERACTION_REQUESTED.into(),
        target: None,
        payload,
    })
}

/// A card's id.
fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    hex::encode(bytes)
}

/// The decision a card's action (or `/allow`'s argument) names.
pub fn decision_of(action: &str) -> Option<Decision> {
    match action.trim() {
        "allow" | "" | "once" => Some(Decision::Once),
        "allow_always" | "always" => Some(Decision::Always),
        "deny" => Some(Decision::Deny),
        _ => None,
    }
}

/// The destinations `scope`'s conversation allowed for itself.
pub async fn allowed(host: &dyn HostApi, scope: &RunScope) -> Vec<String> {
    if scope.conversation_id.is_none() {
        return Vec::new();
    }
    match host
        .state_get(scope, StateScope::Conversation, ALLOWED_KEY)
        .await
    {
        Ok(Some(Value::Array(list))) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Ok(_) => Vec::new(),
        Err(e) => {
            tracing::warn!("cannot read the conversation's allowed destinations: {e}");
            Vec::new()
        }
    }
}

/// Keep `destinations` among those `scope`'s conversation allowed.
pub async fn allow_always(
    host: &dyn HostApi,
    scope: &RunScope,
    destinations: &[String],
) -> crate::host::HostResult<()> {
    let mut list = allowed(host, scope).await;
    for destination in destinations {
        if !list.contains(destination) {
            list.push(destination.clone());
        }
    }
    host.state_set(
        scope,
        StateScope::Conversation,
        ALLOWED_KEY,
        &Value::from(list),
    )
    .await
}

/// The door's proxy asks the person in the chat through whatever turn its
/// harness serves now (a live harness serves many).
pub struct DoorApprover {
    /// The questions' registry.
    pub asks: Arc<Asks>,
    /// Names the turn.
    pub grants: Arc<Grants>,
    /// The harness's run token.
    pub token: String,
}

#[async_trait::async_trait]
impl crate::door::Approver for DoorApprover {
    async fn approve(&self, host: &str, port: u16) -> Result<(), String> {
        let destination = format!("{host}:{port}");
        let granted = self
            .grants
            .authorize(&self.token)
            .await
            .map_err(|e| e.message)?;
        let grant = granted.grant();
        if allowed(self.grants.host().as_ref(), &grant.scope)
            .await
            .contains(&destination)
        {
            return Ok(());
        }
        match self.asks.ask(grant.run_id(), &destination).await? {
            Decision::Once | Decision::Always => Ok(()),
            Decision::Deny => Err(format!(
                "{destination} was refused by the person in the chat"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(tx: mpsc::UnboundedSender<ResultPayload>) -> Turn {
        Turn {
            notices: tx,
            conversation: "c1".into(),
            asked_by: Some(Asker {
                id: "ann".into(),
                name: Some("Ann".into()),
            }),
            harness: "Claude Code".into(),
            prefix: "/".into(),
            deadline: Instant::now() + Duration::from_secs(30),
        }
    }

    #[tokio::test]
    async fn only_the_asker_or_an_approver_decides_and_the_card_goes_to_the_turn() {
        let asks = Arc::new(Asks::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _registered = asks.register("r1", turn(tx));
        let asking = {
            let asks = asks.clone();
            tokio::spawn(async move { asks.ask("r1", "example.org:443").await })
        };
        let card = rx.recv().await.unwrap();
        let ResultPayload::ActionRequested(card) = card else {
            panic!("a card")
        };
        let payload = Value::Object(card.payload.unwrap());
        assert_eq!(
            payload["title"],
            "Claude Code wants to reach example.org:443"
        );
        assert!(
            payload["fallback_text"]
                .as_str()
                .unwrap()
                .contains("/allow always")
        );
        let id = payload["interaction_id"].as_str().unwrap().to_string();
        assert!(id.starts_with(ID_PREFIX));
        assert_eq!(asks.waiting("c1"), ["example.org:443"]);
        // Bob is not the asker: nothing changes.
        assert_eq!(
            asks.answer("c1", Some(&id), Some("bob"), &[], Decision::Once),
            Err(NotAnswered::NotYours("Ann".into()))
        );
        assert_eq!(
            asks.answer("c2", None, Some("ann"), &[], Decision::Once),
            Err(NotAnswered::Nothing)
        );
        // An approver may.
        let decided = asks.answer("c1", None, Some("eve"), &["eve".into()], Decision::Deny);
        assert_eq!(decided, Ok(vec!["example.org:443".to_string()]));
        assert_eq!(asking.await.unwrap(), Ok(Decision::Deny));
        assert!(asks.waiting("c1").is_empty());
    }

    #[tokio::test]
    async fn a_turn_with_no_one_to_ask_refuses_and_the_wait_ends_with_the_turn() {
        let asks = Arc::new(Asks::default());
        assert!(asks.ask("nobody", "x.org:443").await.is_err());
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut short = turn(tx);
        short.deadline = Instant::now() + Duration::from_millis(50);
        let _registered = asks.register("r2", short);
        let said = asks.ask("r2", "x.org:443").await.unwrap_err();
        assert!(said.contains("no answer came in time"), "{said}");
        assert!(asks.waiting("c1").is_empty());
    }

    #[test]
    fn actions_and_words_name_decisions() {
        assert_eq!(decision_of("allow"), Some(Decision::Once));
        assert_eq!(decision_of("always"), Some(Decision::Always));
        assert_eq!(decision_of("allow_always"), Some(Decision::Always));
        assert_eq!(decision_of("deny"), Some(Decision::Deny));
        assert_eq!(decision_of("maybe"), None);
    }
}
