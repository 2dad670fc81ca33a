//! `context validate`: every problem in an `AgentRunContext`, each with the
//! JSON path where it sits, so an operator can fix a context in one pass.
//!
//! Structural errors come from deserializing each top-level part on its own
//! (one error per part, not just the first in the document); semantic checks
//! then run on what parsed.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::*;

/// How bad a problem is: errors make the context unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The context cannot be used as it is.
    Error,
    /// Usable, but probably not what the host meant.
    Warning,
}

/// One finding, e.g. `error at $.event.event_id: missing field`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Whether the problem makes the context unusable.
    pub severity: Severity,
    /// JSONPath-style location, `$` being the document root.
    pub path: String,
    /// What is wrong, for a person.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let label = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{label} at {}: {}", self.path, self.message)
    }
}

fn error(path: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        severity: Severity::Error,
        path: path.into(),
        message: message.into(),
    }
}

fn warning(path: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        severity: Severity::Warning,
        path: path.into(),
        message: message.into(),
    }
}

fn check_part<T: DeserializeOwned>(root: &str, value: &Value, problems: &mut Vec<Problem>) {
    if let Err(err) = serde_path_to_error::deserialize::<_, T>(value.clone()) {
        let inner = err.path().to_string();
        let path = if inner == "." {
            root.to_string()
        } else {
            format!("{root}.{inner}")
        };
        problems.push(error(path, err.into_inner().to_string()));
    }
}

/// Why a context cannot run: its errors, each with its path. Said as one
/// sentence (`invalid AgentRunContext: $.input.text: ...; $.trigger: ...`),
/// what a run refuses with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid AgentRunContext: {}", joined(.errors))]
pub struct InvalidContext {
    /// The problems of severity error, in the order found.
    pub errors: Vec<Problem>,
}

fn joined(errors: &[Problem]) -> String {
    errors
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A context from `doc`, or every error in it with its path.
pub fn checked_context(doc: &Value) -> Result<AgentRunContext, InvalidContext> {
    let (ctx, problems) = validate_context(doc);
    let errors: Vec<Problem> = problems
        .into_iter()
        .filter(|p| p.severity == Severity::Error)
        .collect();
    match ctx {
        Some(ctx) if errors.is_empty() => Ok(ctx),
        _ => Err(InvalidContext { errors }),
    }
}

/// Check a JSON document as an `AgentRunContext`. Returns the parsed context
/// when it has no errors, and every problem found (warnings included).
pub fn validate_context(doc: &Value) -> (Option<AgentRunContext>, Vec<Problem>) {
    let mut problems = Vec::new();
    let Some(object) = doc.as_object() else {
        problems.push(error("$", "an AgentRunContext must be a JSON object"));
        return (None, problems);
    };

    type Check = fn(&str, &Value, &mut Vec<Problem>);
    let parts: [(&str, bool, Check); 15] = [
        ("run_id", true, check_part::<String>),
        ("trigger", true, check_part::<AgentTrigger>),
        ("event", true, check_part::<AgentEventContext>),
        (
            "conversation",
            false,
            check_part::<Option<ConversationContext>>,
        ),
        ("actor", false, check_part::<Option<ActorContext>>),
        ("subject", false, check_part::<Option<SubjectContext>>),
        ("input", true, check_part::<AgentInput>),
        ("delivery", true, check_part::<DeliveryContext>),
        ("resources", true, check_part::<AgentResources>),
        ("context", false, check_part::<ContextAccess>),
        ("state", false, check_part::<AgentRunState>),
        ("runtime", true, check_part::<AgentRuntimeContext>),
        ("config", false, check_part::<JsonMap>),
        ("adapter", false, check_part::<Option<AdapterContext>>),
        ("metadata", false, check_part::<JsonMap>),
    ];
    for (name, required, check) in parts {
        let path = format!("$.{name}");
        match object.get(name) {
            Some(value) => check(&path, value, &mut problems),
            None if required => problems.push(error(path, "missing required field")),
            None => {}
        }
    }
    if let Some(value) = object.get("variables") {
        check_part::<JsonMap>("$.variables", value, &mut problems);
    }
    if problems.iter().any(|p| p.severity == Severity::Error) {
        return (None, problems);
    }

    match serde_path_to_error::deserialize::<_, AgentRunContext>(doc.clone()) {
        Ok(ctx) => {
            semantic_checks(&ctx, &mut problems);
            let ok = !problems.iter().any(|p| p.severity == Severity::Error);
            (ok.then_some(ctx), problems)
        }
        Err(err) => {
            problems.push(error(
                format!("$.{}", err.path()),
                err.into_inner().to_string(),
            ));
            (None, problems)
        }
    }
}

/// Longest run id accepted.
pub const MAX_RUN_ID_LEN: usize = 128;

/// What is wrong with a run id, if anything. A run id names journal rows,
/// workspace archive folders and log lines, and comes from the caller: it
/// is 1 to 128 letters, digits and `- _ . :` (a UUID fits), so a newline
/// cannot forge a log line and a megabyte cannot become a key.
pub fn run_id_problem(run_id: &str) -> Option<String> {
    let fits = (1..=MAX_RUN_ID_LEN).contains(&run_id.len())
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    (!fits).then(|| {
        format!(
            "must be 1 to {MAX_RUN_ID_LEN} characters of letters, digits and - _ . : (a UUID fits)"
        )
    })
}

/// What is wrong with a conversation id given, if anything: an empty one
/// would scope the workspace, history and state to no conversation while
/// seeming to name one (a turn with none leaves the id out).
pub fn conversation_id_problem(id: &str) -> Option<&'static str> {
    id.trim().is_empty().then_some(
        "must not be empty: it names the conversation the turn belongs to (leave it out for a turn with none)",
    )
}

fn semantic_checks(ctx: &AgentRunContext, problems: &mut Vec<Problem>) {
    if let Some(why) = run_id_problem(&ctx.run_id) {
        problems.push(error("$.run_id", why));
    }
    if ctx.event.event_id.trim().is_empty() {
        problems.push(error("$.event.event_id", "must not be empty"));
    }
    if ctx.event.event_type.trim().is_empty() {
        problems.push(error("$.event.event_type", "must not be empty"));
    }
    for (path, id) in [
        (
            "$.conversation.conversation_id",
            ctx.conversation
                .as_ref()
                .and_then(|c| c.conversation_id.as_deref()),
        ),
        (
            "$.context.conversation_id",
            ctx.context.conversation_id.as_deref(),
        ),
    ] {
        if let Some(why) = id.and_then(conversation_id_problem) {
            problems.push(error(path, why));
        }
    }
    if let (Some(a), Some(b)) = (
        ctx.conversation
            .as_ref()
            .and_then(|c| c.conversation_id.as_deref()),
        ctx.context.conversation_id.as_deref(),
    ) && a != b
    {
        problems.push(error(
            "$.context.conversation_id",
            format!("`{b}` differs from conversation.conversation_id `{a}`"),
        ));
    }
    if ctx.conversation_id().is_none() {
        problems.push(warning(
            "$.conversation.conversation_id",
            "no conversation id: history, state and workspace cannot be scoped to a conversation",
        ));
    }
    if let Some(deadline) = ctx.runtime.deadline_at
        && (!deadline.is_finite() || deadline <= 0.0)
    {
        problems.push(error(
            "$.runtime.deadline_at",
            "must be a positive epoch time in seconds",
        ));
    }
    if ctx.delivery.max_message_size == Some(0) {
        problems.push(error(
            "$.delivery.max_message_size",
            "must be greater than 0",
        ));
    }
    let input = &ctx.input;
    if input.text.as_deref().is_none_or(str::is_empty)
        && input.contents.is_empty()
        && input.attachments.is_empty()
        && ctx.event.event_type.starts_with("message.")
    {
        problems.push(warning("$.input", "a message event with empty input"));
    }
    for (i, skill) in ctx.resources.skills.iter().enumerate() {
        if skill.skill_name.trim().is_empty() {
            problems.push(error(
                format!("$.resources.skills[{i}].skill_name"),
                "must not be empty",
            ));
        }
    }
}
