//! Paging rules every backend shares: which stream a query reads, the
//! window a page is cut from, and how fetched rows become a page with its
//! cursors. A backend only fetches `limit + 1` rows of one stream between
//! two sequence numbers, in the window's order.
//!
//! A stream is one conversation + thread; it numbers its items 1, 2, 3, ...
//! A page is the `limit` items nearest one end of the open seq range
//! (after, before): the newest end walking backward, the oldest end walking
//! forward. Items always come back oldest first.

use super::RunScope;
use super::{Cursor, CursorCodec, CursorKind, Direction, EventQuery, HistoryQuery, HostResult};
use crate::protocol::AgentAPIError;

/// The stream a query targets: its own conversation and thread, or another
/// conversation (whole, thread-less) when one is named.
pub fn target<'a>(
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

/// What a page request asks for, whichever log it reads.
pub struct PageRequest<'a> {
    /// Another conversation to read, when the grant allows it.
    pub conversation: Option<&'a str>,
    /// Cursor of the item the page ends before.
    pub before: Option<&'a str>,
    /// Cursor of the item the page starts after.
    pub after: Option<&'a str>,
    /// Which end of the window the page is taken from.
    pub direction: Direction,
    /// Items on the page, at most.
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

impl PageRequest<'_> {
    /// The window to read from `stream` (the backend's id of the target
    /// stream, `None` when nothing was ever recorded in it: an empty page).
    /// Cursors are verified against the stream, so one from another
    /// conversation or log is refused.
    pub fn window(
        &self,
        codec: &CursorCodec,
        kind: CursorKind,
        stream: Option<i64>,
    ) -> HostResult<Option<Window>> {
        let Some(stream) = stream else {
            if self.before.is_some() || self.after.is_some() {
                return Err(AgentAPIError::invalid_argument(
                    "cursor is not valid for this conversation",
                ));
            }
            return Ok(None);
        };
        let decode = |token: &str| codec.decode(token, kind, stream).map(|c| c.seq);
        Ok(Some(Window {
            stream,
            after: self.after.map(decode).transpose()?.unwrap_or(0),
            before: self.before.map(decode).transpose()?.unwrap_or(i64::MAX),
            direction: self.direction,
            limit: self.limit,
        }))
    }
}

/// The open seq range of one stream a page is taken from, and from which end.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The backend's id of the stream.
    pub stream: i64,
    /// Exclusive lower bound (`after_cursor`), 0 when open.
    pub after: i64,
    /// Exclusive upper bound (`before_cursor`), `i64::MAX` when open.
    pub before: i64,
    /// Which end the page is taken from.
    pub direction: Direction,
    /// Items on the page, at most.
    pub limit: u32,
}

impl Window {
    /// `ORDER BY` direction for the SQL that fetches [`Window::fetch`] rows.
    pub fn order(&self) -> &'static str {
        match self.direction {
            Direction::Backward => "DESC",
            Direction::Forward => "ASC",
        }
    }

    /// Rows to fetch: one more than the page, to know whether more follow.
    pub fn fetch(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// Turn the fetched rows (in fetch order) into a page: the items
    /// oldest first, `has_more`, and the next/prev cursors.
    pub fn finish<T>(
        &self,
        codec: &CursorCodec,
        kind: CursorKind,
        mut rows: Vec<(i64, T)>,
    ) -> Page<T> {
        let has_more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        if self.direction == Direction::Backward {
            rows.reverse();
        }
        let stream = self.stream;
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
pub struct Page<T> {
    /// Oldest first.
    pub items: Vec<T>,
    /// Whether items lie beyond the page in its direction.
    pub has_more: bool,
    /// Cursor to continue in the page's direction.
    pub next_cursor: Option<String>,
    /// Cursor to go the other way.
    pub prev_cursor: Option<String>,
}
