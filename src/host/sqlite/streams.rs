//! Conversation streams in SQLite, shared by the transcript and the event
//! log; the paging rules over them are `host::paging`'s.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{db_error, execute_cached};
use crate::host::paging::{PageRequest, Window, target};
use crate::host::{CursorCodec, CursorKind, HostResult, RunScope};
use crate::protocol::AgentAPIError;

/// The id of a stream, if anything was ever recorded in it.
pub(super) fn find(conn: &Connection, conversation: &str, thread: &str) -> HostResult<Option<i64>> {
    conn.prepare_cached("SELECT id FROM streams WHERE conversation_id = ?1 AND thread_id = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![conversation, thread], |r| r.get(0))
                .optional()
        })
        .map_err(db_error)
}

/// The id of a stream, created on first write.
pub(super) fn ensure(tx: &Transaction<'_>, conversation: &str, thread: &str) -> HostResult<i64> {
    execute_cached(
        tx,
        "INSERT INTO streams (conversation_id, thread_id) VALUES (?1, ?2)
         ON CONFLICT (conversation_id, thread_id) DO NOTHING",
        params![conversation, thread],
    )
    .map_err(db_error)?;
    find(tx, conversation, thread)?
        .ok_or_else(|| AgentAPIError::runtime("stream vanished while being created"))
}

/// Resolve a page request to its stream's window; `None` when the stream
/// does not exist yet (an empty page).
pub(super) fn open_page(
    conn: &Connection,
    codec: &CursorCodec,
    kind: CursorKind,
    scope: &RunScope,
    request: &PageRequest<'_>,
) -> HostResult<Option<Window>> {
    let (conversation, thread) = target(scope, request.conversation)?;
    request.window(codec, kind, find(conn, conversation, thread)?)
}
