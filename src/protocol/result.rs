//! The result stream (§7): what a runner sends back, one `AgentRunResult`
//! at a time.
//!
//! The wire is one envelope (`type` + `data` object), never a tagged union,
//! so that an older peer can skip a type it does not know (§3). The envelope
//! therefore keeps `data` as received; [`AgentRunResult::check`] turns it
//! into a typed [`ResultPayload`] and says which field is wrong when it is not.

use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{FailureCode, JsonMap, Message, MessageChunk, TokenUsage};

/// Largest inline artifact a host accepts in `artifact.created` (§7.2).
pub const INLINE_ARTIFACT_MAX_BYTES: usize = 1024 * 1024;

open_enum!(
    /// A result `type`. Unknown types are kept verbatim (§3: ignore and warn).
    ResultType, Unknown {
        MessageDelta = "message.delta",
        MessageCompleted = "message.completed",
        ToolCallStarted = "tool.call.started",
        ToolCallCompleted = "tool.call.completed",
        ArtifactCreated = "artifact.created",
        StateUpdated = "state.updated",
        ActionRequested = "action.requested",
        RunCompleted = "run.completed",
        RunFailed = "run.failed",
        /// Released-SDK addition: a log line for the host, not the user.
        ProcessorLog = "processor.log",
    }
);

impl ResultType {
    /// Strict types affect delivery or host side effects (§7.1): a bad
    /// payload must be dropped, not delivered. The rest are telemetry.
    pub fn is_strict(&self) -> bool {
        !matches!(
            self,
            ResultType::ToolCallStarted
                | ResultType::ToolCallCompleted
                | ResultType::ProcessorLog
                | ResultType::Unknown(_)
        )
    }

    /// Whether this type ends a run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ResultType::RunCompleted | ResultType::RunFailed)
    }
}

/// One event of a run's result stream (§7.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRunResult {
    pub run_id: String,
    #[serde(rename = "type")]
    pub kind: ResultType,
    #[serde(default)]
    pub data: JsonMap,
    /// Released-SDK addition: token usage observed for the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// Strictly increasing from 1 within a run whenever results are buffered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// The state scopes of §5.10, shared by results and the state API (and the
/// MCP tools' argument schemas, hence `JsonSchema`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StateScope {
    /// This conversation (with this runner).
    Conversation,
    /// The user who sent the message, across conversations.
    Actor,
    /// The object the event is about (a group, a channel).
    Subject,
    /// This runner, everywhere: use sparingly.
    Runner,
}

impl StateScope {
    /// Every scope, in the protocol's order.
    pub const ALL: [StateScope; 4] = [
        StateScope::Conversation,
        StateScope::Actor,
        StateScope::Subject,
        StateScope::Runner,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StateScope::Conversation => "conversation",
            StateScope::Actor => "actor",
            StateScope::Subject => "subject",
            StateScope::Runner => "runner",
        }
    }
}

impl std::str::FromStr for StateScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StateScope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown state scope `{s}` (expected conversation, actor, subject or runner)"
                )
            })
    }
}

/// `message.delta`: one streamed fragment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageDelta {
    pub chunk: MessageChunk,
}

/// `message.completed`: one whole message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageCompleted {
    pub message: Message,
    /// Released-SDK addition: exported file handles to deliver with it.
    #[serde(default)]
    pub file_ids: Vec<String>,
}

/// `tool.call.started` (telemetry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallStarted {
    pub tool_call_id: String,
    pub tool_name: String,
    #[serde(default)]
    pub parameters: JsonMap,
}

/// `tool.call.completed` (telemetry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallCompleted {
    pub tool_call_id: String,
    pub tool_name: String,
    #[serde(default)]
    pub result: Option<JsonMap>,
    #[serde(default)]
    pub error: Option<String>,
}

/// `artifact.created`: a runner produced a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactCreated {
    pub artifact_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
    /// Inline content for small artifacts, at most 1 MiB decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
}

/// `state.updated`: a request to persist host-owned state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateUpdated {
    pub scope: StateScope,
    pub key: String,
    pub value: serde_json::Value,
}

/// `action.requested`: reserved; hosts only record it (§7.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRequested {
    pub action: String,
    #[serde(default)]
    pub target: Option<JsonMap>,
    #[serde(default)]
    pub payload: Option<JsonMap>,
}

/// `run.completed`: the run ended normally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCompleted {
    pub finish_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

/// `run.failed`: the run ended with an error a person can read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFailed {
    pub code: FailureCode,
    pub error: String,
    #[serde(default)]
    pub retryable: bool,
}

/// Released-SDK `processor.log` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessorLog {
    pub text: String,
    #[serde(default = "default_log_level")]
    pub level: String,
}

fn default_log_level() -> String {
    "info".into()
}

/// A typed result payload (§7.2).
#[derive(Debug, Clone, PartialEq)]
pub enum ResultPayload {
    MessageDelta(MessageDelta),
    MessageCompleted(MessageCompleted),
    ToolCallStarted(ToolCallStarted),
    ToolCallCompleted(ToolCallCompleted),
    ArtifactCreated(ArtifactCreated),
    StateUpdated(StateUpdated),
    ActionRequested(ActionRequested),
    RunCompleted(RunCompleted),
    RunFailed(RunFailed),
    ProcessorLog(ProcessorLog),
}

impl ResultPayload {
    /// The `type` this payload travels under.
    pub fn kind(&self) -> ResultType {
        match self {
            ResultPayload::MessageDelta(_) => ResultType::MessageDelta,
            ResultPayload::MessageCompleted(_) => ResultType::MessageCompleted,
            ResultPayload::ToolCallStarted(_) => ResultType::ToolCallStarted,
            ResultPayload::ToolCallCompleted(_) => ResultType::ToolCallCompleted,
            ResultPayload::ArtifactCreated(_) => ResultType::ArtifactCreated,
            ResultPayload::StateUpdated(_) => ResultType::StateUpdated,
            ResultPayload::ActionRequested(_) => ResultType::ActionRequested,
            ResultPayload::RunCompleted(_) => ResultType::RunCompleted,
            ResultPayload::RunFailed(_) => ResultType::RunFailed,
            ResultPayload::ProcessorLog(_) => ResultType::ProcessorLog,
        }
    }

    fn to_data(&self) -> JsonMap {
        let value = match self {
            ResultPayload::MessageDelta(p) => serde_json::to_value(p),
            ResultPayload::MessageCompleted(p) => serde_json::to_value(p),
            ResultPayload::ToolCallStarted(p) => serde_json::to_value(p),
            ResultPayload::ToolCallCompleted(p) => serde_json::to_value(p),
            ResultPayload::ArtifactCreated(p) => serde_json::to_value(p),
            ResultPayload::StateUpdated(p) => serde_json::to_value(p),
            ResultPayload::ActionRequested(p) => serde_json::to_value(p),
            ResultPayload::RunCompleted(p) => serde_json::to_value(p),
            ResultPayload::RunFailed(p) => serde_json::to_value(p),
            ResultPayload::ProcessorLog(p) => serde_json::to_value(p),
        };
        // These structs have only string keys and JSON values: serializing
        // them cannot fail, and always yields an object.
        match value {
            Ok(serde_json::Value::Object(map)) => map,
            _ => JsonMap::new(),
        }
    }
}

/// The outcome of checking a result's payload.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckedResult {
    /// A known type with a valid payload (boxed: payloads are large).
    Known(Box<ResultPayload>),
    /// A type this build does not know: forward or ignore it, and warn (§3).
    Unknown(String),
}

/// A result payload that does not match its type, naming the wrong field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid `{kind}` payload at `{path}`: {reason}")]
pub struct PayloadError {
    pub kind: ResultType,
    /// JSON path of the offending field, from the envelope (`data.chunk.role`).
    pub path: String,
    pub reason: String,
}

impl PayloadError {
    /// Strict types must be dropped; telemetry may be kept with a warning.
    pub fn must_drop(&self) -> bool {
        self.kind.is_strict()
    }
}

fn parse_payload<T: DeserializeOwned>(
    kind: &ResultType,
    data: &JsonMap,
) -> Result<T, PayloadError> {
    let value = serde_json::Value::Object(data.clone());
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        PayloadError {
            kind: kind.clone(),
            path: if inner == "." {
                "data".into()
            } else {
                format!("data.{inner}")
            },
            reason: err.into_inner().to_string(),
        }
    })
}

impl AgentRunResult {
    /// A result with the given payload; `sequence` and `timestamp` are set by
    /// whoever orders the stream.
    pub fn new(run_id: impl Into<String>, payload: ResultPayload) -> Self {
        AgentRunResult {
            run_id: run_id.into(),
            kind: payload.kind(),
            data: payload.to_data(),
            usage: None,
            sequence: None,
            timestamp: None,
            extra: JsonMap::new(),
        }
    }

    /// Parse and validate `data` against `type` (§7.1 boundary validation).
    pub fn check(&self) -> Result<CheckedResult, PayloadError> {
        let kind = &self.kind;
        let data = &self.data;
        let payload = match kind {
            ResultType::Unknown(name) => return Ok(CheckedResult::Unknown(name.clone())),
            ResultType::MessageDelta => ResultPayload::MessageDelta(parse_payload(kind, data)?),
            ResultType::MessageCompleted => {
                ResultPayload::MessageCompleted(parse_payload(kind, data)?)
            }
            ResultType::ToolCallStarted => {
                ResultPayload::ToolCallStarted(parse_payload(kind, data)?)
            }
            ResultType::ToolCallCompleted => {
                ResultPayload::ToolCallCompleted(parse_payload(kind, data)?)
            }
            ResultType::ArtifactCreated => {
                let artifact: ArtifactCreated = parse_payload(kind, data)?;
                check_artifact(&artifact)?;
                ResultPayload::ArtifactCreated(artifact)
            }
            ResultType::StateUpdated => {
                let update: StateUpdated = parse_payload(kind, data)?;
                if update.key.trim().is_empty() {
                    return Err(payload_error(
                        kind,
                        "data.key",
                        "state key must not be empty",
                    ));
                }
                ResultPayload::StateUpdated(update)
            }
            ResultType::ActionRequested => {
                ResultPayload::ActionRequested(parse_payload(kind, data)?)
            }
            ResultType::RunCompleted => ResultPayload::RunCompleted(parse_payload(kind, data)?),
            ResultType::RunFailed => ResultPayload::RunFailed(parse_payload(kind, data)?),
            ResultType::ProcessorLog => ResultPayload::ProcessorLog(parse_payload(kind, data)?),
        };
        Ok(CheckedResult::Known(Box::new(payload)))
    }
}

fn payload_error(kind: &ResultType, path: &str, reason: impl Into<String>) -> PayloadError {
    PayloadError {
        kind: kind.clone(),
        path: path.into(),
        reason: reason.into(),
    }
}

fn check_artifact(artifact: &ArtifactCreated) -> Result<(), PayloadError> {
    let kind = &ResultType::ArtifactCreated;
    if let Some(sha) = &artifact.sha256
        && (sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(payload_error(
            kind,
            "data.sha256",
            "not a hex SHA-256 digest",
        ));
    }
    let Some(content) = &artifact.content_base64 else {
        return Ok(());
    };
    // A base64 string decodes to at most 3/4 of its length: refuse an
    // oversize one before allocating for it.
    if content.len() / 4 * 3 > INLINE_ARTIFACT_MAX_BYTES + 2 {
        return Err(payload_error(
            kind,
            "data.content_base64",
            format!(
                "inline artifact exceeds {INLINE_ARTIFACT_MAX_BYTES} bytes; store it and send artifact_id"
            ),
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(content)
        .map_err(|e| payload_error(kind, "data.content_base64", format!("not base64: {e}")))?;
    if bytes.len() > INLINE_ARTIFACT_MAX_BYTES {
        return Err(payload_error(
            kind,
            "data.content_base64",
            format!(
                "inline artifact exceeds {INLINE_ARTIFACT_MAX_BYTES} bytes; store it and send artifact_id"
            ),
        ));
    }
    if let Some(size) = artifact.size_bytes
        && size != bytes.len() as u64
    {
        return Err(payload_error(
            kind,
            "data.size_bytes",
            format!("says {size} bytes but content has {}", bytes.len()),
        ));
    }
    Ok(())
}
