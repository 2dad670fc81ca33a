//! The event log: one stable, small record per event, paged per stream.

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Transaction, params, params_from_iter};

use super::streams::{self, open_page};
use super::{db_error, execute_cached};
use crate::host::grant::now_ms;
use crate::host::paging::PageRequest;
use crate::host::rows::{EVENT_COLUMNS, event_record, json_text};
use crate::host::{CursorCodec, CursorKind, EventQuery, HostResult, NewEvent, RunScope};
use crate::protocol::{AgentAPIError, AgentEventRecord, EventPage};

fn by_id(
    conn: &Connection,
    codec: &CursorCodec,
    event_id: &str,
) -> HostResult<Option<AgentEventRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE event_id = ?1"
    ))
    .and_then(|mut s| {
        s.query_row([event_id], |row| event_record(row, codec))
            .optional()
    })
    .map(|found| found.map(|(_, record)| record))
    .map_err(db_error)
}

pub(super) fn get(
    conn: &Connection,
    codec: &CursorCodec,
    event_id: &str,
) -> HostResult<AgentEventRecord> {
    by_id(conn, codec, event_id)?
        .ok_or_else(|| AgentAPIError::not_found(format!("no event `{event_id}`")))
}

pub(super) fn page(
    conn: &Connection,
    codec: &CursorCodec,
    scope: &RunScope,
    query: &EventQuery,
) -> HostResult<EventPage> {
    let request = PageRequest::from(query);
    let Some(window) = open_page(conn, codec, CursorKind::Events, scope, &request)? else {
        return Ok(EventPage {
            total_count: Some(0),
            ..EventPage::default()
        });
    };
    let mut args: Vec<SqlValue> = vec![
        window.stream.into(),
        window.after.into(),
        window.before.into(),
    ];
    let type_filter = if query.event_types.is_empty() {
        String::new()
    } else {
        let marks = vec!["?"; query.event_types.len()].join(", ");
        args.extend(query.event_types.iter().map(|t| SqlValue::from(t.clone())));
        format!("AND event_type IN ({marks})")
    };
    args.push(window.fetch().into());
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND seq > ? AND seq < ? {type_filter}
         ORDER BY seq {} LIMIT ?",
        window.order()
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(db_error)?;
    let rows = stmt
        .query_map(params_from_iter(args), |row| event_record(row, codec))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(db_error)?;
    let total: Option<i64> = if query.event_types.is_empty() {
        conn.prepare_cached("SELECT event_seq FROM streams WHERE id = ?1")
            .and_then(|mut s| s.query_row([window.stream], |r| r.get(0)))
            .map(Some)
            .map_err(db_error)?
    } else {
        None
    };
    let page = window.finish(codec, CursorKind::Events, rows);
    Ok(EventPage {
        items: page.items,
        next_cursor: page.next_cursor,
        prev_cursor: page.prev_cursor,
        has_more: page.has_more,
        total_count: total.map(|t| t as u64),
    })
}

/// Record an event. Idempotent by `event_id`: a retried turn gets the
/// record it already has instead of an error or a duplicate.
pub(super) fn append(
    tx: &Transaction<'_>,
    codec: &CursorCodec,
    event: &NewEvent,
) -> HostResult<AgentEventRecord> {
    if event.event_id.is_empty() || event.event_type.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "an event needs event_id and event_type",
        ));
    }
    if let Some(existing) = by_id(tx, codec, &event.event_id)? {
        return Ok(existing);
    }
    let (stream, seq) = match event.conversation_id.as_deref() {
        Some(conversation) => {
            let stream =
                streams::ensure(tx, conversation, event.thread_id.as_deref().unwrap_or(""))?;
            let seq: i64 = tx
                .query_row(
                    "UPDATE streams SET event_seq = event_seq + 1 WHERE id = ?1 RETURNING event_seq",
                    [stream],
                    |r| r.get(0),
                )
                .map_err(db_error)?;
            (Some(stream), Some(seq))
        }
        None => (None, None),
    };
    execute_cached(tx,
        "INSERT INTO events (stream_id, seq, event_id, event_type, event_time, source, bot_id, workspace_id,
             conversation_id, thread_id, actor_type, actor_id, actor_name, subject_type, subject_id,
             input_summary, input_ref, raw_ref, created_at, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
        params![
            stream,
            seq,
            event.event_id,
            event.event_type,
            event.event_time,
            event.source,
            event.bot_id,
            event.workspace_id,
            event.conversation_id,
            event.thread_id,
            event.actor_type,
            event.actor_id,
            event.actor_name,
            event.subject_type,
            event.subject_id,
            event.input_summary,
            event.input_ref,
            event.raw_ref,
            now_ms(),
            json_text(&event.metadata),
        ],
    )
    .map_err(db_error)?;
    get(tx, codec, &event.event_id)
}
