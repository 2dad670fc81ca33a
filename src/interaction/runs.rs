//! Every live run's side of interactions: what it may ask, what it asked
//! and the one action an answer approved for it, as the MCP tools and the
//! permission prompt deposit and read them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::*;

/// What the harness's permission prompt tool answers (Claude Code's
/// `--permission-prompt-tool` contract: `allow` with the input to use, or
/// `deny` with a message; `interrupt` ends the turn).
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Run it: the person approved exactly this action for this turn.
    Allow(Value),
    /// Do not run it; `interrupt` ends the harness's turn.
    Deny {
        /// Why, for the model.
        message: String,
        /// End the harness's turn.
        interrupt: bool,
    },
}

impl Decision {
    /// The decision as the prompt tool's JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Decision::Allow(input) => json!({"behavior": "allow", "updatedInput": input}),
            Decision::Deny { message, interrupt } => {
                json!({"behavior": "deny", "message": message, "interrupt": interrupt})
            }
        }
    }
}

/// One run's side of interactions: the action approved for it, and the
/// request it made. The MCP tools write here; the run reads it when the
/// harness is done.
#[derive(Debug, Default)]
struct Slot {
    approved: Option<String>,
    asked: Option<Pending>,
    asking: Asking,
    /// The folder the harness works in, once the workspace is written:
    /// paths in it are shown relative to it.
    root: Option<std::path::PathBuf>,
}

/// Why `ask_user` was refused: a sentence for the model that asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskRefused {
    /// The question is empty or too long.
    #[error("question: 1 to {MAX_QUESTION_CHARS} characters")]
    Question,
    /// Too many choices, or one empty or too long.
    #[error("choices: at most {MAX_CHOICES}, each 1 to {MAX_CHOICE_CHARS} characters")]
    Choices,
    /// The run has ended.
    #[error("the run is over")]
    Over,
    /// The run may not ask questions.
    #[error("this run cannot ask the user anything")]
    NotAllowed,
    /// The turn has asked once already.
    #[error("this turn has already asked the user; end the turn and wait for the answer")]
    AlreadyAsked,
}

/// Every live run's interactions, by run id.
#[derive(Debug, Default)]
pub struct Interactions {
    runs: Mutex<HashMap<String, Slot>>,
}

impl Interactions {
    /// Open the run's slot, with the action an answer approved for it and
    /// what it may ask.
    pub fn open(&self, run_id: &str, approved: Option<String>, asking: Asking) {
        self.lock().insert(
            run_id.to_string(),
            Slot {
                approved,
                asked: None,
                asking,
                root: None,
            },
        );
    }

    /// The folder run `run_id`'s harness works in: what it asks about
    /// there is shown relative to it.
    pub fn works_in(&self, run_id: &str, root: &Path) {
        if let Some(slot) = self.lock().get_mut(run_id) {
            slot.root = Some(root.to_path_buf());
        }
    }

    /// What run `run_id` may ask the person (nothing once it is over).
    pub fn asking(&self, run_id: &str) -> Asking {
        self.lock()
            .get(run_id)
            .map_or(Asking::default(), |slot| slot.asking)
    }

    /// Close the run's slot, giving the request it made, if any.
    pub fn close(&self, run_id: &str) -> Option<Pending> {
        self.lock().remove(run_id).and_then(|slot| slot.asked)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `ask_user` tool: keep the question for the end of the turn.
    /// Refused (a sentence for the model) when the run is not live or has
    /// already asked.
    pub fn ask(
        &self,
        run_id: &str,
        question: &str,
        choices: &[String],
        now: i64,
    ) -> Result<String, AskRefused> {
        let question = question.trim();
        if question.is_empty() || question.chars().count() > MAX_QUESTION_CHARS {
            return Err(AskRefused::Question);
        }
        if choices.len() > MAX_CHOICES
            || choices
                .iter()
                .any(|c| c.trim().is_empty() || c.chars().count() > MAX_CHOICE_CHARS)
        {
            return Err(AskRefused::Choices);
        }
        let choices = choices.iter().map(|c| c.trim().to_string()).collect();
        self.keep_asked(
            run_id,
            |asking| asking.questions,
            || Pending::question(run_id, question.to_string(), choices, now),
        )?;
        Ok(
            "The question is on its way to the user. End your turn now, without another tool \
            call: their answer comes as the next message, and this session goes on from there."
                .into(),
        )
    }

    /// Keep the request `pending` makes as run `run_id`'s one request of
    /// the turn: refused when the run is over, may not ask it (`may`), or
    /// has asked already.
    fn keep_asked(
        &self,
        run_id: &str,
        may: fn(&Asking) -> bool,
        pending: impl FnOnce() -> Pending,
    ) -> Result<(), AskRefused> {
        let mut runs = self.lock();
        let slot = runs.get_mut(run_id).ok_or(AskRefused::Over)?;
        if !may(&slot.asking) {
            return Err(AskRefused::NotAllowed);
        }
        if slot.asked.is_some() {
            return Err(AskRefused::AlreadyAsked);
        }
        slot.asked = Some(pending());
        Ok(())
    }

    /// The `publish` tool: keep the request for the end of the turn.
    /// Refused like [`Interactions::ask`] when the run is over, may not
    /// publish, or has already asked.
    pub fn ask_publish(
        &self,
        run_id: &str,
        request: PublishRequest,
        now: i64,
    ) -> Result<String, AskRefused> {
        self.keep_asked(
            run_id,
            |asking| asking.publish,
            || Pending::publish(run_id, request, now),
        )?;
        Ok(
            "The request to publish is on its way to the user, with the branch, its commits \
            and what changed. End your turn now, without another tool call. If they approve, \
            the bridge pushes exactly the commits shown and tells you so in the next message; \
            do not push yourself."
                .into(),
        )
    }

    /// A live harness's permission request: the one approved action is
    /// allowed (`Some`); else the person is asked and `None` says to pause
    /// the turn until they answer; a second request in the turn is denied.
    pub fn decide_live(
        &self,
        run_id: &str,
        tool: &str,
        input: &Value,
        now: i64,
    ) -> Option<Decision> {
        if let Some(why) = unshowable(tool, input) {
            return Some(Decision::Deny {
                message: why,
                interrupt: false,
            });
        }
        match self.decide(run_id, tool, input, now) {
            Decision::Deny {
                interrupt: false, ..
            } => None,
            decided => Some(decided),
        }
    }

    /// Take the action an answer approved for this run, if it is
    /// `fingerprint`: an approval allows one action once, also when it
    /// resumes a paused call.
    pub fn take_approved(&self, run_id: &str, fingerprint: &str) -> bool {
        let mut runs = self.lock();
        match runs.get_mut(run_id) {
            Some(slot) if slot.approved.as_deref() == Some(fingerprint) => {
                slot.approved = None;
                true
            }
            _ => false,
        }
    }

    /// The permission prompt tool: allow the one approved action, else ask
    /// the person and end the turn.
    pub fn decide(&self, run_id: &str, tool: &str, input: &Value, now: i64) -> Decision {
        let mut runs = self.lock();
        let Some(slot) = runs.get_mut(run_id) else {
            return Decision::Deny {
                message: "the run is over".into(),
                interrupt: true,
            };
        };
        if !slot.asking.approvals {
            return Decision::Deny {
                message: "no one is asked about actions in this run".into(),
                interrupt: true,
            };
        }
        if slot.approved.as_deref() == Some(fingerprint(tool, input).as_str()) {
            slot.approved = None;
            return Decision::Allow(input.clone());
        }
        if let Some(why) = unshowable(tool, input) {
            return Decision::Deny {
                message: why,
                interrupt: false,
            };
        }
        if slot.asked.is_some() {
            return Decision::Deny {
                message: "The user is already being asked something this turn; end the turn."
                    .into(),
                interrupt: true,
            };
        }
        slot.asked = Some(match question_of(tool, input) {
            Some((question, choices)) => Pending::question(run_id, question, choices, now),
            None => Pending::approval(run_id, tool, input, now, slot.root.as_deref()),
        });
        // The model gets to say, in a sentence, that it waits; a second
        // prompt in the same turn interrupts it.
        Decision::Deny {
            message: "Not yet: the user has been asked in the chat. End your turn now, saying \
                      in one sentence what you are waiting for; their answer comes as the next \
                      message."
                .into(),
            interrupt: false,
        }
    }
}

/// Claude Code's own question tool, as a question: its first question and
/// its options' labels.
fn question_of(tool: &str, input: &Value) -> Option<(String, Vec<String>)> {
    if tool != CLAUDE_QUESTION_TOOL {
        return None;
    }
    let first = input.get("questions")?.as_array()?.first()?;
    let question = first.get("question")?.as_str()?.to_string();
    let choices = first
        .get("options")
        .and_then(Value::as_array)
        .map(|options| {
            options
                .iter()
                .filter_map(|o| o.get("label").and_then(Value::as_str))
                .take(MAX_CHOICES)
                .map(|l| clip(l, MAX_CHOICE_CHARS))
                .collect()
        })
        .unwrap_or_default();
    Some((clip(&question, MAX_QUESTION_CHARS), choices))
}
