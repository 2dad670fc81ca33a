//! How host records sit in table rows, every SQL backend alike: the
//! columns each query selects, in order, and how a row becomes its
//! protocol record. JSON is kept as text, times as epoch milliseconds.
//! A backend reads its own row type through [`Columns`].

use super::{Cursor, CursorCodec, CursorKind, HostResult};
use crate::protocol::{
    AgentAPIError, AgentEventRecord, ArtifactMetadata, ArtifactReadResult, TranscriptItem,
};

/// One fetched row, read by position.
pub trait Columns {
    /// The driver's error.
    type Error;
    /// A text column (NULL as `None`).
    fn text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    /// An integer column (NULL as `None`).
    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
}

/// The item a transcript insert stored, as it reads back: what was given,
/// with the id, seq, cursor and time the store gave it.
pub fn stored_transcript_item(
    item: &super::NewTranscriptItem,
    transcript_id: String,
    item_type: &str,
    cursor: String,
    seq: i64,
    created_at: i64,
) -> TranscriptItem {
    TranscriptItem {
        transcript_id,
        event_id: item.event_id.clone(),
        conversation_id: Some(item.conversation_id.clone()),
        thread_id: item.thread_id.clone().filter(|t| !t.is_empty()),
        bot_id: item.bot_id.clone(),
        workspace_id: item.workspace_id.clone(),
        role: item.role.clone(),
        item_type: item_type.to_string(),
        content: item.content.clone(),
        content_json: item.content_json.clone(),
        artifact_refs: item.artifact_refs.clone(),
        seq: Some(seq),
        cursor: Some(cursor),
        created_at: Some(created_at),
        metadata: item.metadata.clone(),
        extra: Default::default(),
    }
}

/// The columns [`transcript_item`] reads, from `transcript t JOIN streams s`.
pub const TRANSCRIPT_COLUMNS: &str = "t.seq, t.transcript_id, t.event_id, t.bot_id, t.workspace_id, t.role, t.item_type, \
     t.content, t.content_json, t.artifact_refs, t.created_at, t.metadata, s.conversation_id, s.thread_id, s.id";

/// A transcript row as its seq and item.
pub fn transcript_item<R: Columns>(
    row: &R,
    codec: &CursorCodec,
    with_artifacts: bool,
) -> Result<(i64, TranscriptItem), R::Error> {
    let seq = row.int(0)?.unwrap_or(0);
    let thread = row.text(13)?.unwrap_or_default();
    let stream = row.int(14)?.unwrap_or(0);
    let item = TranscriptItem {
        transcript_id: row.text(1)?.unwrap_or_default(),
        event_id: row.text(2)?.unwrap_or_default(),
        bot_id: row.text(3)?,
        workspace_id: row.text(4)?,
        role: row.text(5)?.unwrap_or_default(),
        item_type: row.text(6)?.unwrap_or_default(),
        content: row.text(7)?,
        content_json: row.text(8)?.and_then(|t| serde_json::from_str(&t).ok()),
        artifact_refs: if with_artifacts {
            parse_json(row.text(9)?)
        } else {
            Vec::new()
        },
        created_at: row.int(10)?,
        metadata: parse_json(row.text(11)?),
        conversation_id: row.text(12)?,
        thread_id: (!thread.is_empty()).then_some(thread),
        seq: Some(seq),
        cursor: Some(codec.encode(Cursor {
            kind: CursorKind::History,
            stream,
            seq,
        })),
        extra: Default::default(),
    };
    Ok((seq, item))
}

/// The columns [`event_record`] reads, from `events`.
pub const EVENT_COLUMNS: &str = "seq, stream_id, event_id, event_type, event_time, source, bot_id, workspace_id, \
     conversation_id, thread_id, actor_type, actor_id, actor_name, subject_type, subject_id, \
     input_summary, input_ref, raw_ref, created_at, metadata";

/// An event row as its seq (0 for an event of no conversation) and record.
pub fn event_record<R: Columns>(
    row: &R,
    codec: &CursorCodec,
) -> Result<(i64, AgentEventRecord), R::Error> {
    let seq = row.int(0)?;
    let stream = row.int(1)?;
    let cursor = match (seq, stream) {
        (Some(seq), Some(stream)) => Some(codec.encode(Cursor {
            kind: CursorKind::Events,
            stream,
            seq,
        })),
        _ => None,
    };
    let record = AgentEventRecord {
        event_id: row.text(2)?.unwrap_or_default(),
        event_type: row.text(3)?.unwrap_or_default(),
        event_time: row.int(4)?,
        source: row.text(5)?.unwrap_or_default(),
        bot_id: row.text(6)?,
        workspace_id: row.text(7)?,
        conversation_id: row.text(8)?,
        thread_id: row.text(9)?,
        actor_type: row.text(10)?,
        actor_id: row.text(11)?,
        actor_name: row.text(12)?,
        subject_type: row.text(13)?,
        subject_id: row.text(14)?,
        input_summary: row.text(15)?,
        input_ref: row.text(16)?,
        raw_ref: row.text(17)?,
        seq,
        cursor,
        created_at: row.int(18)?,
        metadata: parse_json(row.text(19)?),
        extra: Default::default(),
    };
    Ok((seq.unwrap_or(0), record))
}

/// The columns [`artifact_metadata`] reads, from `artifacts`.
pub const ARTIFACT_COLUMNS: &str = "artifact_id, artifact_type, mime_type, name, size_bytes, sha256, source, \
     conversation_id, run_id, runner_id, created_at, expires_at, metadata";

/// An artifact row as its metadata.
pub fn artifact_metadata<R: Columns>(row: &R) -> Result<ArtifactMetadata, R::Error> {
    Ok(ArtifactMetadata {
        artifact_id: row.text(0)?.unwrap_or_default(),
        artifact_type: row.text(1)?.unwrap_or_default(),
        mime_type: row.text(2)?,
        name: row.text(3)?,
        size_bytes: row.int(4)?.map(|s| s as u64),
        sha256: row.text(5)?,
        source: row.text(6)?.unwrap_or_default(),
        conversation_id: row.text(7)?,
        run_id: row.text(8)?,
        runner_id: row.text(9)?,
        created_at: row.int(10)?,
        expires_at: row.int(11)?,
        metadata: parse_json(row.text(12)?),
        extra: Default::default(),
    })
}

/// The bytes to read of an artifact for `offset` and `length`: an
/// offset past the end is refused, a length past it is cut.
pub fn artifact_range(meta: &ArtifactMetadata, offset: u64, length: u64) -> HostResult<u64> {
    let size = meta.size_bytes.unwrap_or(0);
    if offset > size {
        return Err(AgentAPIError::invalid_argument(format!(
            "offset {offset} is past the end of the artifact ({size} bytes)"
        )));
    }
    Ok(length.min(size - offset))
}

/// The answer to a range read: the bytes read from `offset`, and whether
/// more follow.
pub fn artifact_read(meta: ArtifactMetadata, offset: u64, bytes: &[u8]) -> ArtifactReadResult {
    use base64::Engine as _;
    let size = meta.size_bytes.unwrap_or(0);
    ArtifactReadResult {
        artifact_id: meta.artifact_id,
        mime_type: meta.mime_type,
        size_bytes: Some(size),
        offset,
        length: Some(bytes.len() as u64),
        has_more: offset + (bytes.len() as u64) < size,
        content_base64: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        file_key: None,
    }
}

/// A value as the JSON text a row keeps.
pub fn json_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// A row's JSON text as a value; missing or unreadable text is the default.
pub fn parse_json<T: serde::de::DeserializeOwned + Default>(text: Option<String>) -> T {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// A stored state value (JSON text) read back.
pub fn state_value(text: String) -> HostResult<serde_json::Value> {
    serde_json::from_str(&text)
        .map_err(|e| AgentAPIError::runtime(format!("stored state is not JSON: {e}")))
}

/// A random id with a readable prefix, e.g. `tr_3f9c…`.
pub fn new_id(prefix: &str) -> HostResult<String> {
    let mut raw = [0u8; 12];
    getrandom::fill(&mut raw).map_err(|e| AgentAPIError::runtime(format!("no randomness: {e}")))?;
    Ok(format!("{prefix}_{}", hex::encode(raw)))
}
