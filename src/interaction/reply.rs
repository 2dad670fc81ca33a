//! What a turn's input is to the open request: unrelated, its answer (a
//! card's button, or words), too late, or someone else's.

use serde_json::Value;

use super::*;
use crate::protocol::InteractionSubmission;

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
