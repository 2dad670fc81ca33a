//! A question or an approval waiting for the person in the chat.
//!
//! A harness cannot wait for a person: a chat turn has a deadline, and the
//! answer comes as a later message. So asking ends the turn. The harness
//! asks (the `ask_user` tool, or a permission prompt routed to the
//! `approve` tool under `approvals: chat`); the turn ends with an
//! `action.requested` interaction (a card, or its fallback text) and the
//! request kept in the conversation's state ([`PENDING_KEY`]); the next
//! turn reads it, takes that turn's input (a card's submission, or plain
//! text on surfaces without cards) as the answer, and resumes the session
//! with a prompt saying what was answered. An approval lets exactly the
//! approved action (same tool, same arguments) run once, in that turn only.
//!
//! Everything here is pure: the run reads and writes the state, the MCP
//! tools deposit into [`Interactions`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::protocol::{
    InteractionAction, InteractionField, InteractionKind, InteractionOption, InteractionRequest,
    InteractionSubmission,
};

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
const CLAUDE_QUESTION_TOOL: &str = "AskUserQuestion";

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
    fn may_answer(&self, pending: &Pending) -> bool {
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

fn action(id: &str, label: &str, style: &str) -> InteractionAction {
    InteractionAction {
        id: id.into(),
        label: label.into(),
        style: style.into(),
    }
}

fn clip(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut clipped: String = text.chars().take(chars.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

/// `input` with each argument that names a path inside `root` (the folder
/// the harness works in) written relative to it: `/srv/…/ws/NOTES.md`
/// reads `NOTES.md`. A path that leaves the folder (`..`), or lies
/// outside it, is shown as it is: the person must see that.
pub fn relative_paths(input: &Value, root: &Path) -> Value {
    let Value::Object(map) = input else {
        return input.clone();
    };
    let roots = [Some(root.to_path_buf()), std::fs::canonicalize(root).ok()];
    let inside = |text: &str| {
        roots.iter().flatten().find_map(|root| {
            let rest = Path::new(text).strip_prefix(root).ok()?;
            let plain = rest
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            match rest.as_os_str().is_empty() {
                true => Some(".".to_string()),
                false => plain.then(|| rest.to_string_lossy().into_owned()),
            }
        })
    };
    Value::Object(
        map.iter()
            .map(|(key, value)| {
                let path = value.as_str().filter(|t| {
                    names_a_path(key) && t.starts_with('/') && !t.contains(['\n', '\r'])
                });
                let shown = match path.and_then(inside) {
                    Some(relative) => Value::String(relative),
                    None => value.clone(),
                };
                (key.clone(), shown)
            })
            .collect(),
    )
}

/// Whether an argument named `key` holds a path (`file_path`,
/// `notebook_path`, `path`, `cwd`…): only those are shown relative, never
/// a text that happens to start with one.
fn names_a_path(key: &str) -> bool {
    key.ends_with("path") || matches!(key, "cwd" | "workdir" | "file" | "dir" | "directory")
}

/// What an action is, in a few words a person can judge: the command a
/// shell tool runs, the file a write touches, else the tool and its
/// arguments.
pub fn summary(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    let said = if let Some(command) = field("command") {
        format!("run `{}`", clip(command, 300))
    } else if let Some(path) = field("file_path").or(field("path")) {
        format!("use {tool} on {}", clip(path, 300))
    } else {
        format!("use {tool} with {}", clip(&input.to_string(), 300))
    };
    said.replace(['\n', '\r'], " ")
}

/// Longest action a card shows whole, in characters.
pub const CARD_ACTION_CHARS: usize = 3000;
/// How much of a longer action the card shows before saying where the rest is.
const CARD_PREVIEW_CHARS: usize = 1500;
/// Largest action that can be asked about at all: the whole of it must
/// reach the person (as an attached file, inline), or it does not run.
pub const MAX_ACTION_BYTES: usize = crate::protocol::INLINE_ARTIFACT_MAX_BYTES;

/// The whole action as the person reads it: the tool, then every argument
/// with keys in a fixed order, text as it is (a value of several lines
/// indented under its key, so no value can pass for another key), other
/// values as JSON.
pub fn action_text(tool: &str, input: &Value) -> String {
    let mut text = format!("tool: {tool}");
    let Value::Object(map) = canonical(input) else {
        text.push_str(&format!("\ninput: {}", canonical(input)));
        return text;
    };
    for (key, value) in map {
        let value = match value {
            Value::String(s) => s,
            other => other.to_string(),
        };
        if value.contains(['\n', '\r']) {
            text.push_str(&format!("\n{key}:"));
            for line in value.lines() {
                text.push_str(&format!("\n    {line}"));
            }
        } else {
            text.push_str(&format!("\n{key}: {value}"));
        }
    }
    text
}

fn hex_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Why an action cannot be put to the person, if it cannot: one the
/// chat could not show whole would be approved unread.
fn unshowable(tool: &str, input: &Value) -> Option<String> {
    let size = action_text(tool, input).len();
    (size > MAX_ACTION_BYTES).then(|| {
        format!(
            "This action is too large for the user to read in the chat ({size} bytes; at most \
             {MAX_ACTION_BYTES}), so it cannot be approved. Do it in smaller steps."
        )
    })
}

/// The identity of an action: the tool and its arguments, with object keys
/// in a fixed order, hashed. An approval allows the action with this
/// fingerprint and no other.
pub fn fingerprint(tool: &str, input: &Value) -> String {
    let mut bytes = tool.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(canonical(input).to_string().as_bytes());
    hex_digest(&bytes)
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// What this turn's input is to the open request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Not an answer: the input goes to the harness as it is.
    Unrelated {
        /// A request lapsed unanswered (and is cleared now).
        expired: bool,
    },
    /// The answer: the harness gets `prompt` instead of the bare input;
    /// `approved` is the one action it may now take.
    Answer {
        /// What the harness is told.
        prompt: String,
        /// The approved action's fingerprint.
        approved: Option<String>,
    },
    /// A card's answer to a request that is not open: the person is told
    /// this sentence and nothing runs.
    Stale(String),
    /// Input from someone who may not answer the open request (another
    /// member of a group chat): they are told this sentence, nothing runs
    /// and the request stays open for the one who may.
    NotYours(String),
}

impl Reply {
    /// Whether the stored request is done with (answered or lapsed).
    pub fn clears(&self) -> bool {
        match self {
            Reply::Unrelated { expired } => *expired,
            Reply::Answer { .. } => true,
            Reply::Stale(_) | Reply::NotYours(_) => false,
        }
    }
}

/// Read this turn's input, sent by `from`, against the open request, if
/// any. Only the actor whose turn asked, or an approver the operator
/// named, answers it; anyone else's input answers nothing and runs nothing
/// while it is open.
pub fn reply(
    pending: Option<&Pending>,
    submission: Option<&InteractionSubmission>,
    text: &str,
    from: Answerer<'_>,
    now: i64,
) -> Reply {
    let open = pending.filter(|p| p.is_open(now));
    if let Some(pending) = open.filter(|p| !from.may_answer(p)) {
        let who = pending
            .asked_by
            .as_ref()
            .map_or("the person whose message it answers".to_string(), |a| {
                a.name.clone().unwrap_or_else(|| a.id.clone())
            });
        let what = match pending.ask {
            Ask::Question { .. } => "a question",
            Ask::Approval { .. } => "an approval",
            Ask::Publish(_) => "a request to publish",
        };
        return Reply::NotYours(format!(
            "The agent is waiting for {who} to answer {what}; only they (or an approver the \
             operator named) can answer it, so nothing was run. Try again once it is answered \
             or has expired."
        ));
    }
    if let Some(submission) = submission {
        let Some(pending) = open.filter(|p| p.id == submission.interaction_id) else {
            return Reply::Stale(
                "That request is no longer open (it was answered, replaced or has expired); \
                 nothing was run. Send your answer as a message instead."
                    .into(),
            );
        };
        return answer_card(pending, submission);
    }
    match open {
        Some(pending) => answer_text(pending, text),
        None => Reply::Unrelated {
            expired: pending.is_some(),
        },
    }
}

fn answer_card(pending: &Pending, submission: &InteractionSubmission) -> Reply {
    match &pending.ask {
        Ask::Question { question, choices } => {
            let picked = submission.values.get("answer").map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            answered(question, &chosen(choices, picked.as_deref().unwrap_or("")))
        }
        Ask::Approval {
            summary,
            fingerprint,
            ..
        } => decided(
            summary,
            fingerprint,
            submission.action_id.as_deref() == Some("approve"),
            None,
        ),
        Ask::Publish(request) => publishing(
            request,
            submission.action_id.as_deref() == Some("approve"),
            None,
        ),
    }
}

/// The answer without the mentions it starts with: in a group a person
/// often addresses the bot ("@bot approve"), and a host may hand the
/// mention on as text (LangBot's Agent bindings do: `@<bot id> approve`).
/// Text that is nothing but mentions stays as written.
fn without_mentions(text: &str) -> &str {
    let mut rest = text.trim_start();
    while let Some(mention) = rest.strip_prefix('@') {
        let end = mention.find(char::is_whitespace).unwrap_or(mention.len());
        rest = mention[end..].trim_start();
    }
    if rest.is_empty() { text } else { rest }
}

fn answer_text(pending: &Pending, text: &str) -> Reply {
    let text = without_mentions(text);
    match &pending.ask {
        Ask::Question { question, choices } => answered(question, &chosen(choices, text)),
        Ask::Approval {
            summary,
            fingerprint,
            ..
        } => match yes_or_no(text) {
            Some(yes) => decided(summary, fingerprint, yes, None),
            None => decided(summary, fingerprint, false, Some(text)),
        },
        Ask::Publish(request) => match yes_or_no(text) {
            Some(yes) => publishing(request, yes, None),
            None => publishing(request, false, Some(text)),
        },
    }
}

/// An approval's answer in words: few words, none of which a reply to
/// something else would be by accident ("ok", "1" and "y" answer too many
/// questions). `None`: anything else, which does not approve.
fn yes_or_no(text: &str) -> Option<bool> {
    let word = text
        .trim()
        .trim_matches(|c: char| c.is_ascii_punctuation())
        .to_lowercase();
    match word.as_str() {
        "approve" | "approved" | "yes" => Some(true),
        "deny" | "denied" | "no" => Some(false),
        _ => None,
    }
}

/// A choice's text for its number; anything else is the answer as written.
fn chosen(choices: &[String], answer: &str) -> String {
    let trimmed = answer.trim();
    trimmed
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| choices.get(i))
        .cloned()
        .unwrap_or_else(|| trimmed.to_string())
}

fn answered(question: &str, answer: &str) -> Reply {
    Reply::Answer {
        prompt: format!(
            "You asked the user: \"{question}\"\nTheir answer: {answer}\n\nContinue with this answer."
        ),
        approved: None,
    }
}

fn decided(summary: &str, fingerprint: &str, approve: bool, said: Option<&str>) -> Reply {
    if approve {
        return Reply::Answer {
            prompt: format!(
                "The user approved your request to {summary}. Do it now, exactly as requested \
                 before (the approval is for that one action, once), then continue."
            ),
            approved: Some(fingerprint.to_string()),
        };
    }
    let prompt = match said {
        Some(said) => format!(
            "The user did not approve your request to {summary}. Do not do it. Instead they \
             wrote:\n\n{said}"
        ),
        None => format!(
            "The user denied your request to {summary}. Do not do it; continue without it, or \
             say what you need."
        ),
    };
    Reply::Answer {
        prompt,
        approved: None,
    }
}

/// The answer to a request to publish. Approved, it carries the one
/// commit the bridge may push ([`PUBLISH_APPROVAL`] and the commit), and
/// the harness is told what the push did once the bridge has made it.
fn publishing(request: &PublishRequest, approve: bool, said: Option<&str>) -> Reply {
    let branch = &request.branch;
    if approve {
        return Reply::Answer {
            prompt: format!("The user approved publishing branch `{branch}`."),
            approved: Some(format!("{PUBLISH_APPROVAL}{}", request.head)),
        };
    }
    let prompt = match said {
        Some(said) => format!(
            "The user did not approve publishing branch `{branch}`; it was not published. \
             Instead they wrote:\n\n{said}"
        ),
        None => format!(
            "The user did not approve publishing branch `{branch}`; it was not published. Do \
             not push it yourself; continue without publishing, or ask what they want changed."
        ),
    };
    Reply::Answer {
        prompt,
        approved: None,
    }
}

/// How an approved publish is marked in [`Reply::Answer`]'s `approved`
/// (a prefix no action's fingerprint has: those are hex digests).
pub const PUBLISH_APPROVAL: &str = "publish:";

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
        let mut runs = self.lock();
        let slot = runs.get_mut(run_id).ok_or(AskRefused::Over)?;
        if !slot.asking.questions {
            return Err(AskRefused::NotAllowed);
        }
        if slot.asked.is_some() {
            return Err(AskRefused::AlreadyAsked);
        }
        let choices = choices.iter().map(|c| c.trim().to_string()).collect();
        slot.asked = Some(Pending::question(
            run_id,
            question.to_string(),
            choices,
            now,
        ));
        Ok(
            "The question is on its way to the user. End your turn now, without another tool \
            call: their answer comes as the next message, and this session goes on from there."
                .into(),
        )
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
        let mut runs = self.lock();
        let slot = runs.get_mut(run_id).ok_or(AskRefused::Over)?;
        if !slot.asking.publish {
            return Err(AskRefused::NotAllowed);
        }
        if slot.asked.is_some() {
            return Err(AskRefused::AlreadyAsked);
        }
        slot.asked = Some(Pending::publish(run_id, request, now));
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

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;
    const BOTH: Asking = Asking {
        questions: true,
        approvals: true,
        publish: false,
    };
    /// Whoever asked in these tests: no actor.
    const ASKER: Answerer<'static> = Answerer {
        id: None,
        approvers: &[],
    };

    fn submission(id: &str, action: Option<&str>, values: Value) -> InteractionSubmission {
        InteractionSubmission {
            interaction_id: id.into(),
            action_id: action.map(str::to_string),
            values: values.as_object().cloned().unwrap_or_default(),
            submitted_at: None,
        }
    }

    #[test]
    fn a_numbered_reply_picks_the_choice_and_words_stand_as_written() {
        let q = Pending::question(
            "r1",
            "Which colour?".into(),
            vec!["red".into(), "blue".into()],
            NOW,
        );
        let Reply::Answer { prompt, approved } = reply(Some(&q), None, " 2 ", ASKER, NOW + 5)
        else {
            panic!("an answer")
        };
        assert!(prompt.contains("Their answer: blue"), "{prompt}");
        assert_eq!(approved, None);
        let Reply::Answer { prompt, .. } = reply(Some(&q), None, "green, please", ASKER, NOW)
        else {
            panic!("an answer")
        };
        assert!(prompt.contains("Their answer: green, please"), "{prompt}");
        let Reply::Answer { prompt, .. } = reply(Some(&q), None, "7", ASKER, NOW) else {
            panic!("an answer")
        };
        assert!(prompt.contains("Their answer: 7"), "{prompt}");
    }

    #[test]
    fn an_approval_allows_that_one_action_once_and_nothing_else() {
        let input = json!({"command": "rm -rf build", "description": "clean"});
        let asked = Interactions::default();
        asked.open("r1", None, BOTH);
        let first = asked.decide("r1", "Bash", &input, NOW);
        assert!(matches!(
            first,
            Decision::Deny {
                interrupt: false,
                ..
            }
        ));
        let second = asked.decide("r1", "Write", &json!({"file_path": "x"}), NOW);
        assert!(matches!(
            second,
            Decision::Deny {
                interrupt: true,
                ..
            }
        ));
        let pending = asked.close("r1").expect("a request");
        assert!(
            pending
                .request("Claude Code")
                .title
                .contains("run `rm -rf build`")
        );

        let Reply::Answer { approved, .. } =
            reply(Some(&pending), None, "Approve!", ASKER, NOW + 60)
        else {
            panic!("an answer")
        };
        let answering = Interactions::default();
        answering.open("r2", approved, BOTH);
        // Same action, keys in another order: the same action.
        let same = json!({"description": "clean", "command": "rm -rf build"});
        let other = json!({"command": "rm -rf /", "description": "clean"});
        assert!(matches!(
            answering.decide("r2", "Bash", &other, NOW),
            Decision::Deny { .. }
        ));
        assert_eq!(
            answering.close("r2").map(|p| p.ask),
            Some(Pending::approval("r2", "Bash", &other, NOW, None).ask)
        );
        answering.open("r3", Some(fingerprint("Bash", &input)), BOTH);
        assert_eq!(
            answering.decide("r3", "Bash", &same, NOW),
            Decision::Allow(same.clone())
        );
        // Once only.
        assert!(matches!(
            answering.decide("r3", "Bash", &same, NOW),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn anything_but_an_approval_denies_and_passes_the_words_on() {
        let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
        for (text, denied, said) in [
            ("deny", true, false),
            ("No.", true, false),
            ("use dir instead", true, true),
        ] {
            let Reply::Answer { prompt, approved } = reply(Some(&pending), None, text, ASKER, NOW)
            else {
                panic!("an answer")
            };
            assert_eq!(approved, None, "{text}");
            assert_eq!(prompt.contains("Do not do it"), denied, "{prompt}");
            assert_eq!(prompt.contains(text), said, "{prompt}");
        }
    }

    #[test]
    fn a_card_answers_only_its_own_open_request() {
        let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
        let card = submission(&pending.id, Some("approve"), json!({}));
        assert!(matches!(
            reply(Some(&pending), Some(&card), "approve", ASKER, NOW),
            Reply::Answer {
                approved: Some(_),
                ..
            }
        ));
        let other = submission("approve-r0", Some("approve"), json!({}));
        assert!(matches!(
            reply(Some(&pending), Some(&other), "approve", ASKER, NOW),
            Reply::Stale(_)
        ));
        let late = reply(
            Some(&pending),
            Some(&card),
            "approve",
            ASKER,
            pending.expires_at,
        );
        assert!(matches!(late, Reply::Stale(_)));
        assert!(!late.clears());
        assert!(matches!(
            reply(None, Some(&card), "approve", ASKER, NOW),
            Reply::Stale(_)
        ));
        let q = Pending::question("r1", "Which?".into(), vec!["a".into(), "b".into()], NOW);
        let picked = submission(&q.id, Some("submit"), json!({"answer": "2"}));
        let Reply::Answer { prompt, .. } = reply(Some(&q), Some(&picked), "submit", ASKER, NOW)
        else {
            panic!("an answer")
        };
        assert!(prompt.contains("Their answer: b"), "{prompt}");
    }

    #[test]
    fn a_lapsed_request_is_cleared_and_the_message_goes_through() {
        let q = Pending::question("r1", "Which?".into(), Vec::new(), NOW);
        let late = reply(Some(&q), None, "hello", ASKER, q.expires_at + 1);
        assert_eq!(late, Reply::Unrelated { expired: true });
        assert!(late.clears());
        assert_eq!(
            reply(None, None, "hello", ASKER, NOW),
            Reply::Unrelated { expired: false }
        );
    }

    #[test]
    fn claude_codes_own_question_tool_becomes_a_question() {
        let asked = Interactions::default();
        asked.open("r1", None, BOTH);
        let input = json!({"questions": [{"question": "Tabs or spaces?", "header": "Style",
            "options": [{"label": "Tabs", "description": ""}, {"label": "Spaces", "description": ""}],
            "multiSelect": false}]});
        asked.decide("r1", CLAUDE_QUESTION_TOOL, &input, NOW);
        let pending = asked.close("r1").expect("asked");
        assert_eq!(
            pending.ask,
            Ask::Question {
                question: "Tabs or spaces?".into(),
                choices: vec!["Tabs".into(), "Spaces".into()]
            }
        );
        let text = pending.fallback_text("Claude Code");
        assert!(text.contains("1. Tabs\n2. Spaces"), "{text}");
    }

    #[test]
    fn one_question_per_turn_and_bad_questions_are_refused() {
        let asked = Interactions::default();
        assert!(asked.ask("gone", "Q?", &[], NOW).is_err());
        asked.open("r1", None, BOTH);
        assert!(asked.ask("r1", "  ", &[], NOW).is_err());
        assert!(asked.ask("r1", "Q?", &["".into()], NOW).is_err());
        assert!(
            asked
                .ask("r1", "Q?", &vec!["c".to_string(); MAX_CHOICES + 1], NOW)
                .is_err()
        );
        assert!(asked.ask("r1", "Q?", &["a".into()], NOW).is_ok());
        assert!(asked.ask("r1", "Again?", &[], NOW).is_err());
        let pending = asked.close("r1").expect("asked");
        let stored = serde_json::to_value(&pending).unwrap();
        assert_eq!(Pending::from_state(Some(&stored)), Some(pending));
        assert_eq!(Pending::from_state(Some(&Value::Null)), None);
    }

    fn publish_request() -> PublishRequest {
        PublishRequest {
            project: "web".into(),
            branch: "chat/ada".into(),
            remote: "https://example.org/web.git".into(),
            head: "0123456789abcdef0123456789abcdef01234567".into(),
            commits: vec!["0123456 Fix the header".into()],
            more_commits: 2,
            files: 2,
            added: 14,
            removed: 3,
        }
    }

    #[test]
    fn a_publish_card_shows_what_goes_and_only_an_approval_carries_its_commit() {
        let pending = Pending::publish("r1", publish_request(), NOW);
        let card = pending.request("Claude Code");
        assert_eq!(card.kind, InteractionKind::Confirmation);
        assert_eq!(
            card.title,
            "Claude Code asks to publish branch `chat/ada` to https://example.org/web.git"
        );
        let shown = card.description.unwrap_or_default();
        assert!(
            shown.starts_with("3 commits on `chat/ada`, 2 files changed, +14 −3:")
                && shown.contains("- 0123456 Fix the header\n- … and 2 more")
                && shown.contains("pushes commit 0123456789ab and nothing after it"),
            "{shown}"
        );
        assert!(
            card.fallback_text
                .contains("Reply \"approve\" to publish it")
        );
        // Kept in the state and read back as it was.
        let kept = serde_json::to_value(&pending).unwrap();
        assert_eq!(Pending::from_state(Some(&kept)), Some(pending.clone()));

        let yes = submission(&pending.id, Some("approve"), json!({}));
        let Reply::Answer { approved, .. } = reply(Some(&pending), Some(&yes), "", ASKER, NOW)
        else {
            panic!("an answer")
        };
        assert_eq!(
            approved.as_deref(),
            Some("publish:0123456789abcdef0123456789abcdef01234567")
        );
        for no in ["deny", "push it to main instead"] {
            let Reply::Answer { approved, prompt } = reply(Some(&pending), None, no, ASKER, NOW)
            else {
                panic!("an answer")
            };
            assert_eq!(approved, None, "{no}");
            assert!(prompt.contains("it was not published"), "{prompt}");
        }
    }

    #[test]
    fn publishing_is_asked_once_and_only_where_offered() {
        let asked = Interactions::default();
        asked.open("r1", None, BOTH);
        assert_eq!(
            asked.ask_publish("r1", publish_request(), NOW),
            Err(AskRefused::NotAllowed)
        );
        let publishing = Asking {
            publish: true,
            ..Asking::default()
        };
        asked.open("r2", None, publishing);
        assert!(asked.ask_publish("r2", publish_request(), NOW).is_ok());
        assert_eq!(
            asked.ask_publish("r2", publish_request(), NOW),
            Err(AskRefused::AlreadyAsked)
        );
        assert!(matches!(
            asked.close("r2").map(|p| p.ask),
            Some(Ask::Publish(_))
        ));
        assert_eq!(
            asked.ask_publish("r3", publish_request(), NOW),
            Err(AskRefused::Over)
        );
    }

    fn asked_by(id: &str) -> Pending {
        let mut pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
        pending.asked_by = Some(Asker {
            id: id.into(),
            name: Some("Ada".into()),
        });
        pending
    }

    #[test]
    fn only_the_asker_or_an_approver_answers_and_others_run_nothing() {
        let pending = asked_by("u1");
        let card = submission(&pending.id, Some("approve"), json!({}));
        let approvers = ["boss".to_string()];
        let from = |id: Option<&'static str>| Answerer {
            id,
            approvers: &approvers,
        };
        for (submitted, text) in [(None, "yes"), (Some(&card), "approve"), (None, "hello")] {
            for other in [Some("u2"), None] {
                let got = reply(Some(&pending), submitted, text, from(other), NOW);
                let Reply::NotYours(sentence) = &got else {
                    panic!("{other:?} answered: {got:?}")
                };
                assert!(sentence.contains("Ada"), "{sentence}");
                assert!(!got.clears());
            }
        }
        for who in [Some("u1"), Some("boss")] {
            assert!(matches!(
                reply(Some(&pending), Some(&card), "approve", from(who), NOW),
                Reply::Answer {
                    approved: Some(_),
                    ..
                }
            ));
        }
        // A lapsed request holds no one back.
        assert_eq!(
            reply(
                Some(&pending),
                None,
                "hello",
                from(Some("u2")),
                pending.expires_at
            ),
            Reply::Unrelated { expired: true }
        );
    }

    #[test]
    fn only_a_few_plain_words_approve() {
        let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
        for word in ["ok", "y", "1", "allow", "sure", "OK!"] {
            let got = reply(Some(&pending), None, word, ASKER, NOW);
            assert!(
                matches!(got, Reply::Answer { approved: None, .. }),
                "{word}: {got:?}"
            );
        }
        for word in ["approve", "Yes.", "APPROVED"] {
            let got = reply(Some(&pending), None, word, ASKER, NOW);
            assert!(
                matches!(
                    got,
                    Reply::Answer {
                        approved: Some(_),
                        ..
                    }
                ),
                "{word}: {got:?}"
            );
        }
    }

    #[test]
    fn a_mention_of_the_bot_before_the_answer_is_not_part_of_it() {
        let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
        for said in ["@20001 approve", " @bot  @20001 yes", "@Claude\tYes."] {
            let got = reply(Some(&pending), None, said, ASKER, NOW);
            assert!(
                matches!(
                    got,
                    Reply::Answer {
                        approved: Some(_),
                        ..
                    }
                ),
                "{said}: {got:?}"
            );
        }
        let Reply::Answer { prompt, approved } =
            reply(Some(&pending), None, "@20001 use dir instead", ASKER, NOW)
        else {
            panic!("not an answer")
        };
        assert_eq!(approved, None);
        assert!(prompt.ends_with("wrote:\n\nuse dir instead"), "{prompt}");
        // A mention later in the words, or words that are only a mention,
        // stay as written.
        let got = reply(Some(&pending), None, "yes @20001", ASKER, NOW);
        assert!(
            matches!(got, Reply::Answer { approved: None, .. }),
            "{got:?}"
        );

        let question = Pending::question(
            "r2",
            "Which colour?".into(),
            vec!["red".into(), "blue".into()],
            NOW,
        );
        for (said, answer) in [
            ("@20001 2", "blue"),
            ("@20001 green", "green"),
            ("@types/node", "@types/node"),
        ] {
            let Reply::Answer { prompt, .. } = reply(Some(&question), None, said, ASKER, NOW)
            else {
                panic!("not an answer")
            };
            assert!(
                prompt.contains(&format!("Their answer: {answer}\n")),
                "{said}: {prompt}"
            );
        }
    }

    #[test]
    fn the_card_shows_the_whole_action_or_says_where_all_of_it_is() {
        let tail = "; cat ~/.ssh/id_rsa >> notes.txt";
        let command = format!("echo {}{tail}", "a".repeat(400));
        let pending = Pending::approval("r1", "Bash", &json!({"command": command}), NOW, None);
        let card = pending.request("Claude Code");
        let shown = card.description.clone().expect("the action");
        assert!(shown.contains(tail), "{shown}");
        assert!(card.fallback_text.contains(tail), "{}", card.fallback_text);
        assert_eq!(pending.attachment(), None);

        let write = json!({"file_path": "a.txt", "content": "line one\ncommand: ls\nline three"});
        let pending = Pending::approval("r2", "Write", &write, NOW, None);
        let shown = pending.shown_action().expect("the action");
        assert!(
            shown.contains("content:\n    line one\n    command: ls\n    line three"),
            "{shown}"
        );

        let long = format!("{}{tail}", "b".repeat(CARD_ACTION_CHARS));
        let pending = Pending::approval("r3", "Bash", &json!({"command": long}), NOW, None);
        let shown = pending.shown_action().expect("the action");
        assert!(!shown.contains(tail), "{shown}");
        let (name, whole) = pending.attachment().expect("attached");
        assert_eq!(name, "approve-r3.txt");
        assert!(whole.ends_with(tail), "{whole}");
        assert!(shown.contains(&name), "{shown}");
        assert!(shown.contains(&hex_digest(whole.as_bytes())), "{shown}");
        assert!(
            shown.contains(&whole.chars().count().to_string()),
            "{shown}"
        );
    }

    #[test]
    fn an_action_too_large_to_show_is_denied_without_asking() {
        let asked = Interactions::default();
        asked.open("r1", None, BOTH);
        let huge = json!({"command": "x".repeat(MAX_ACTION_BYTES + 1)});
        let Decision::Deny { message, .. } = asked.decide("r1", "Bash", &huge, NOW) else {
            panic!("allowed")
        };
        assert!(message.contains("too large"), "{message}");
        assert!(matches!(
            asked.decide_live("r1", "Bash", &huge, NOW),
            Some(Decision::Deny { .. })
        ));
        assert_eq!(asked.close("r1"), None);
    }

    #[test]
    fn a_run_asks_only_what_it_was_opened_for() {
        let asked = Interactions::default();
        asked.open("r1", None, Asking::default());
        assert!(asked.ask("r1", "Q?", &[], NOW).is_err());
        assert!(matches!(
            asked.decide("r1", "Bash", &json!({"command": "ls"}), NOW),
            Decision::Deny {
                interrupt: true,
                ..
            }
        ));
        assert_eq!(asked.close("r1"), None);
    }
    #[test]
    fn a_card_shows_paths_in_the_workspace_relative_to_it_and_others_whole() {
        let root = Path::new("/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_");
        let input = json!({
            "file_path": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/NOTES.md",
            "content": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/x stays in text",
            "path": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/../other/secret",
            "notebook_path": "/etc/passwd",
            "cwd": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_",
        });
        let asked = Interactions::default();
        asked.open(
            "r1",
            None,
            Asking {
                approvals: true,
                ..Asking::default()
            },
        );
        asked.works_in("r1", root);
        let _ = asked.decide("r1", "Write", &input, NOW);
        let pending = asked.close("r1").unwrap();
        let Ask::Approval {
            input: shown,
            summary,
            fingerprint: bound,
            ..
        } = &pending.ask
        else {
            panic!("{pending:?}");
        };
        assert_eq!(summary, "use Write on NOTES.md");
        assert_eq!(shown["file_path"], "NOTES.md");
        assert_eq!(shown["cwd"], ".");
        // Text that is not a path, and paths that leave the folder or lie
        // outside it, as they are.
        assert_eq!(shown["content"], input["content"]);
        assert_eq!(shown["path"], input["path"]);
        assert_eq!(shown["notebook_path"], "/etc/passwd");
        let card = pending.request("Claude Code");
        let text = format!(
            "{}\n{}\n{}",
            card.title,
            card.description.unwrap_or_default(),
            card.fallback_text
        );
        assert!(
            !text.contains("/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/NOTES.md"),
            "{text}"
        );
        // The approval is for the action as the harness asked it.
        assert_eq!(*bound, fingerprint("Write", &input));
    }
}
