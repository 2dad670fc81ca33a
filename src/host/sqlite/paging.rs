//! Exact paging over `(stream_id, seq)` ranges, shared by the transcript and
//! the event log. A page is the `limit` items nearest one end of the open
//! range (after, before): the newest end walking backward, the oldest end
//! walking forward. Items always come back oldest first.

use crate::host::{Cursor, CursorCodec, CursorKind, Direction, HostResult};

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
