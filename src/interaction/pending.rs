//! The open request itself: a question, an approval or a publish, who
//! asked and until when, and the card and text the person is shown.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::*;
use crate::protocol::{InteractionField, InteractionKind, InteractionOption, InteractionRequest};

/// The conversation state key holding the open request (`null` once
/// answered or expired).
pub const PENDING_KEY: &str = "external.pending_interaction";
/// How long a request stays open.
pub const EXPIRY_SECONDS: i64 = 30 * 60;
/// Most choices a question offers.
pub const MAX_CHOICES: usize = 10;
/// Longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2000;
/// Longest choice, in characters (a card's option label allows 512).
pub const MAX_CHOICE_CHARS: usize = 200;

/// Permission prompts for this tool are questions to the person, not
/// approvals: Claude Code routes its own question tool through the prompt
/// tool once one is set.
pub(super) const CLAUDE_QUESTION_TOOL: &str = "AskUserQuestion";

/// An open request, as kept in the conversation's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The card's `interaction_id`.
    pub id: String,
    /// Unix seconds.
    pub expires_at: i64,
    /// Who may answer besides the operator's approvers: the actor whose
    /// turn asked (`None`: a turn without an actor).
    #[serde(default)]
    pub asked_by: Option<Asker>,
    /// What was asked.
    #[serde(flatten)]
    pub ask: Ask,
}

/// The person whose turn asked: only they (or an approver the operator
/// named) may answer, so in a group chat no one else's "yes" runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asker {
    /// The host's id for them.
    pub id: String,
    /// How the chat names them, for the sentence others are told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Who sends this turn's input, and who else the operator lets answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answerer<'a> {
    /// The actor id of this turn (`None`: no actor).
    pub id: Option<&'a str>,
    /// Actor ids the operator lets answer anyone's request.
    pub approvers: &'a [String],
}

impl Answerer<'_> {
    /// Whether they may answer `pending`.
    pub(super) fn may_answer(&self, pending: &Pending) -> bool {
        let own = pending.asked_by.as_ref().map(|a| a.id.as_str()) == self.id;
        own || self
            .id
            .is_some_and(|id| self.approvers.iter().any(|a| a == id))
    }
}

/// What a run may ask the person in the chat: the tools `ask_user` and
/// `approve` are offered only where the answer can come back and the
/// binding wants it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asking {
    /// `ask_user`: a question in words or by choice.
    pub questions: bool,
    /// `approve`: the harness's permission prompts (`approvals: chat`).
    pub approvals: bool,
    /// `publish`: the conversation's branch, to where the operator's
    /// project publishes.
    pub publish: bool,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ask {
    /// A question, answered in words or by picking a choice.
    Question {
        /// As the harness put it.
        question: String,
        /// Answers to pick from by number; none: any words.
        #[serde(default)]
        choices: Vec<String>,
    },
    /// May the harness do this one action?
    Approval {
        /// The harness's tool name.
        tool: String,
        /// Its arguments.
        input: Value,
        /// What it does, for the person ([`summary`]).
        summary: String,
        /// The one action an approval allows ([`fingerprint`]).
        fingerprint: String,
    },
    /// May the bridge publish the conversation's branch?
    Publish(PublishRequest),
}

/// What a card asking to publish shows, and the one thing an approval
/// lets the bridge push: this commit, to this branch, where the project
/// publishes. Kept by the bridge in its own state key, so nothing the
/// harness writes can change what is pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishRequest {
    /// The project's name.
    pub project: String,
    /// The conversation's branch, pushed under the same name.
    pub branch: String,
    /// Where to, as the person reads it (no credentials).
    pub remote: String,
    /// The commit shown, and the only one an approval pushes.
    pub head: String,
    /// `short-id subject` of each commit beyond the base, newest first.
    pub commits: Vec<String>,
    /// How many more commits there are than `commits` lists.
    #[serde(default)]
    pub more_commits: u64,
    /// Files changed against the base, lines added and removed.
    pub files: u64,
    /// Lines added.
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
}

impl PublishRequest {
    /// The card's title.
    fn title(&self, harness: &str) -> String {
        format!(
            "{harness} asks to publish branch `{}` to {}",
            self.branch, self.remote
        )
    }

    /// What would be published, as the card and the fallback text show it.
    fn shown(&self) -> String {
        let count = self.commits.len() as u64 + self.more_commits;
        let mut text = format!(
            "{count} commit{} on `{}`, {} file{} changed, +{} −{}:",
            if count == 1 { "" } else { "s" },
            self.branch,
            self.files,
            if self.files == 1 { "" } else { "s" },
            self.added,
            self.removed
        );
        for commit in &self.commits {
            text.push_str("\n- ");
            text.push_str(commit);
        }
        if self.more_commits > 0 {
            text.push_str(&format!("\n- … and {} more", self.more_commits));
        }
        text.push_str(&format!(
            "\n\nApproving pushes commit {} and nothing after it.",
            short(&self.head)
        ));
        text
    }
}

/// A commit id as people read it.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

impl Pending {
    /// A question asked in run `run_id`.
    pub fn question(run_id: &str, question: String, choices: Vec<String>, now: i64) -> Pending {
        Pending {
            id: format!("ask-{run_id}"),
            expires_at: now + EXPIRY_SECONDS,
            asked_by: None,
            ask: Ask::Question { question, choices },
        }
    }

    /// A request to publish, asked in run `run_id`.
    pub fn publish(run_id: &str, request: PublishRequest, now: i64) -> Pending {
        Pending {
            id: format!("publish-{run_id}"),
            expires_at: now + EXPIRY_SECONDS,
            asked_by: None,
            ask: Ask::Publish(request),
        }
    }

    /// An approval for `tool` with `input`, asked in run `run_id` of a
    /// harness working in `root`: the card shows the paths in that folder
    /// as the person knows them (relative to it), never the server's
    /// layout; the approval is still for the action exactly as asked.
    pub fn approval(
        run_id: &str,
        tool: &str,
        input: &Value,
        now: i64,
        root: Option<&Path>,
    ) -> Pending {
        let shown = root.map_or_else(|| input.clone(), |root| relative_paths(input, root));
        Pending {
            id: format!("approve-{run_id}"),
            expires_at: now + EXPIRY_SECONDS,
            asked_by: None,
            ask: Ask::Approval {
                tool: tool.to_string(),
                summary: summary(tool, &shown),
                input: shown,
                fingerprint: fingerprint(tool, input),
            },
        }
    }

    /// The pending request a state value holds; `null`, or anything else
    /// that is not one, holds none.
    pub fn from_state(value: Option<&Value>) -> Option<Pending> {
        value
            .filter(|v| v.is_object())
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// The card for a host, with the text surfaces without cards show.
    pub fn request(&self, harness: &str) -> InteractionRequest {
        let (kind, title, fields, actions) = match &self.ask {
            Ask::Question { question, choices } if choices.is_empty() => (
                InteractionKind::Form,
                question.clone(),
                vec![InteractionField {
                    id: "answer".into(),
                    label: "Answer".into(),
                    kind: "textarea".into(),
                    required: true,
                    options: Vec::new(),
                }],
                vec![action("submit", "Send", "primary")],
            ),
            Ask::Question { question, choices } => (
                InteractionKind::Choice,
                question.clone(),
                vec![InteractionField {
                    id: "answer".into(),
                    label: "Answer".into(),
                    kind: "select".into(),
                    required: true,
                    options: choices
                        .iter()
                        .enumerate()
                        .map(|(i, c)| InteractionOption {
                            value: (i + 1).to_string(),
                            label: c.clone(),
                        })
                        .collect(),
                }],
                vec![action("submit", "Send", "primary")],
            ),
            Ask::Approval { summary, .. } => (
                InteractionKind::Confirmation,
                format!("{harness} asks to {summary}"),
                Vec::new(),
                vec![
                    action("approve", "Approve once", "primary"),
                    action("deny", "Deny", "danger"),
                ],
            ),
            Ask::Publish(request) => (
                InteractionKind::Confirmation,
                request.title(harness),
                Vec::new(),
                vec![
                    action("approve", "Publish", "primary"),
                    action("deny", "Do not publish", "danger"),
                ],
            ),
        };
        InteractionRequest {
            interaction_id: self.id.clone(),
            kind,
            title: clip(&title, 1000),
            description: self.shown_action(),
            fields,
            actions,
            expires_at: Some(self.expires_at),
            fallback_text: self.fallback_text(harness),
        }
    }

    /// The request as plain text, saying how to answer in words.
    pub fn fallback_text(&self, harness: &str) -> String {
        match &self.ask {
            Ask::Question { question, choices } if choices.is_empty() => {
                format!("{harness} asks: {question}\n\nReply with your answer.")
            }
            Ask::Question { question, choices } => {
                let list: Vec<String> = choices
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{}. {c}", i + 1))
                    .collect();
                format!(
                    "{harness} asks: {question}\n\n{}\n\nReply with a number, or with your own answer.",
                    list.join("\n")
                )
            }
            Ask::Approval { summary, .. } => format!(
                "{harness} asks to {summary}.\n\n{}\n\nReply \"approve\" to let it do this once, or \"deny\".",
                self.shown_action().unwrap_or_default()
            ),
            Ask::Publish(request) => format!(
                "{}.\n\n{}\n\nReply \"approve\" to publish it, or \"deny\".",
                request.title(harness),
                request.shown()
            ),
        }
    }

    /// The whole action an approval would allow, as the card shows it:
    /// all of it, or past [`CARD_ACTION_CHARS`] its start, its length, its
    /// digest and the name of the file that holds all of it
    /// ([`Pending::attachment`]). Nothing the person cannot read runs.
    pub fn shown_action(&self) -> Option<String> {
        let (tool, input) = match &self.ask {
            Ask::Approval { tool, input, .. } => (tool, input),
            Ask::Publish(request) => return Some(request.shown()),
            Ask::Question { .. } => return None,
        };
        let whole = action_text(tool, input);
        let length = whole.chars().count();
        if length <= CARD_ACTION_CHARS {
            return Some(whole);
        }
        let start: String = whole.chars().take(CARD_PREVIEW_CHARS).collect();
        Some(format!(
            "{start}\n…\n(That is only its start: the whole action is {length} characters, \
             SHA-256 {}, attached as {}. Read all of it before you approve.)",
            hex_digest(whole.as_bytes()),
            self.attachment_name()
        ))
    }

    /// The whole action as a file, when the card holds only its start:
    /// its name and text.
    pub fn attachment(&self) -> Option<(String, String)> {
        let Ask::Approval { tool, input, .. } = &self.ask else {
            return None;
        };
        let whole = action_text(tool, input);
        (whole.chars().count() > CARD_ACTION_CHARS).then(|| (self.attachment_name(), whole))
    }

    fn attachment_name(&self) -> String {
        format!("{}.txt", self.id)
    }

    /// Whether it is still open at `now` (Unix seconds).
    pub fn is_open(&self, now: i64) -> bool {
        now < self.expires_at
    }
}
