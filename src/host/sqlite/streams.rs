//! Conversation streams and exact paging over them, shared by the
//! transcript and the event log.
//!
//! A stream is one conversation + thread; it numbers its items 1, 2, 3, ...
//! A page is the `limit` items nearest one end of the open seq range
//! (after, before): the newest end walking backward, the oldest end walking
//! forward. Items always come back oldest first.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{db_error, execute_cached};
use crate::host::{
    Cursor, CursorCodec, CursorKind, Direction, EventQuery, HistoryQuery, HostResult, RunScope,
};
use crate::protocol::AgentAPIError;

/// The stream a query targets: its own conversation and thread, or another
/// conversation (whole, thread-less) when one is named.
pub(super) fn target<'a>(
    scope: &'a RunScope,
    requested: Option<&'a str>,
) -> HostResult<(&'a str, &'a str)> {
    match requested {
        Some(other) if Some(other) != scope.conversation_id.as_deref() => Ok((other, "")),
        _ => scope
            .conversation_id
            .as_deref()
            .map(|c| (c, scope.thread_id.as_deref().unwrap_or("")))
            .ok_or_else(|| AgentAPIError::invalid_argument("no conversation to read")),
    }
}

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

/// What a page request asks for, whichever log it reads.
pub(super) struct PageRequest<'a> {
    pub conversation: Option<&'a str>,
    pub before: Option<&'a str>,
    pub after: Option<&'a str>,
    pub direction: Direction,
    pub limit: u32,
}

impl<'a> From<&'a HistoryQuery> for PageRequest<'a> {
    fn from(q: &'a HistoryQuery) -> Self {
        PageRequest {
            conversation: q.conversation_id.as_deref(),
            before: q.before_cursor.as_deref(),
            after: q.after_cursor.as_deref(),
            direction: q.direction,
            limit: q.limit,
        }
    }
}

impl<'a> From<&'a EventQuery> for PageRequest<'a> {
    fn from(q: &'a EventQuery) -> Self {
        PageRequest {
            conversation: q.conversation_id.as_deref(),
            before: q.before_cursor.as_deref(),
            after: q.after_cursor.as_deref(),
            direction: q.direction,
            limit: q.limit,
        }
    }
}

/// Resolve a page request to its stream and window; `None` when the stream
/// does not exist yet (an empty page). Cursors are verified against the
/// stream, so one from another conversation or log is refused.
pub(super) fn open_page(
    conn: &Connection,
    codec: &CursorCodec,
    kind: CursorKind,
    scope: &RunScope,
    request: &PageRequest<'_>,
) -> HostResult<Option<(i64, Window)>> {
    let (conversation, thread) = target(scope, request.conversation)?;
    let Some(stream) = find(conn, conversation, thread)? else {
        if request.before.is_some() || request.after.is_some() {
            return Err(AgentAPIError::invalid_argument(
                "cursor is not valid for this conversation",
            ));
        }
        return Ok(None);
    };
    let window = Window::new(
        codec,
        kind,
        stream,
        request.before,
        request.after,
        request.direction,
        request.limit,
    )?;
    Ok(Some((stream, window)))
}

/// The open seq range a page is taken from, and from which end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// Exclusive lower bound (`after_cursor`), 0 when open.
    pub after: i64,
    /// Exclusive upper bound (`before_cursor`), `i64::MAX` when open.
    pub before: i64,
    pub direction: Direction,
    pub limit: u32,
}

impl Window {
    pub fn new(
        codec: &CursorCodec,
        kind: CursorKind,
        stream: i64,
        before: Option<&str>,
        after: Option<&str>,
        direction: Direction,
        limit: u32,
    ) -> HostResult<Self> {
        let decode = |token: &str| codec.decode(token, kind, stream).map(|c| c.seq);
        Ok(Window {
            after: after.map(decode).transpose()?.unwrap_or(0),
            before: before.map(decode).transpose()?.unwrap_or(i64::MAX),
            direction,
            limit,
        })
    }

    /// `ORDER BY` direction for the SQL that fetches `limit + 1` rows.
    pub fn order(&self) -> &'static str {
        match self.direction {
            Direction::Backward => "DESC",
            Direction::Forward => "ASC",
        }
    }

    /// Turn `limit + 1` fetched rows (in fetch order) into a page: the items
    /// oldest first, `has_more`, and the next/prev cursors.
    pub fn finish<T>(
        &self,
        codec: &CursorCodec,
        kind: CursorKind,
        stream: i64,
        mut rows: Vec<(i64, T)>,
    ) -> Page<T> {
        let has_more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        if self.direction == Direction::Backward {
            rows.reverse();
        }
        let cursor = |seq| codec.encode(Cursor { kind, stream, seq });
        let oldest = rows.first().map(|(seq, _)| cursor(*seq));
        let newest = rows.last().map(|(seq, _)| cursor(*seq));
        let (next, prev) = match self.direction {
            Direction::Backward => (oldest.filter(|_| has_more), newest),
            // Walking forward, the newest cursor stays useful for polling.
            Direction::Forward => (newest, oldest),
        };
        Page {
            items: rows.into_iter().map(|(_, item)| item).collect(),
            has_more,
            next_cursor: next,
            prev_cursor: prev,
        }
    }
}

/// A finished page before it is wrapped in its protocol type.
pub(crate) struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    pub prev_cursor: Option<String>,
}
