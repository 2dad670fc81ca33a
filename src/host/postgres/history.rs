//! Conversation streams, the transcript (searched through its stored
//! `tsvector`) and the event log on PostgreSQL.
//!
//! A stream's row is its numbering lock: an append bumps its counter with
//! `UPDATE … RETURNING`, so appends to one conversation from several
//! bridges get 1, 2, 3, … in commit order, never the same number twice.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::guard::{self, WriteGuard};
use super::{Client, db_error, write_error};
use crate::host::now_ms;
use crate::host::paging::{PageRequest, Window, target};
use crate::host::rows::{
    EVENT_COLUMNS, TRANSCRIPT_COLUMNS, event_record, json_text, new_id, stored_transcript_item,
    transcript_item,
};
use crate::host::words::{every_then_some, index_text, search_words};
use crate::host::{
    Cursor, CursorCodec, CursorKind, EventQuery, HistoryQuery, HostResult, NewEvent,
    NewTranscriptItem, RunScope,
};
use crate::protocol::{
    AgentAPIError, AgentEventRecord, EventPage, HistoryPage, HistorySearchResult, TranscriptItem,
};

/// The id of a stream, if anything was ever recorded in it.
async fn find(
    client: &impl GenericClient,
    conversation: &str,
    thread: &str,
) -> HostResult<Option<i64>> {
    let stmt = client
        .prepare_cached("SELECT id FROM streams WHERE conversation_id = $1 AND thread_id = $2")
        .await
        .map_err(db_error)?;
    client
        .query_opt(&stmt, &[&conversation, &thread])
        .await
        .and_then(|row| row.map(|r| r.try_get(0)).transpose())
        .map_err(db_error)
}

/// The id of a stream, created on first write.
async fn ensure(client: &impl GenericClient, conversation: &str, thread: &str) -> HostResult<i64> {
    let stmt = client
        .prepare_cached(
            "INSERT INTO streams (conversation_id, thread_id) VALUES ($1, $2)
             ON CONFLICT (conversation_id, thread_id) DO NOTHING",
        )
        .await
        .map_err(db_error)?;
    client
        .execute(&stmt, &[&conversation, &thread])
        .await
        .map_err(db_error)?;
    find(client, conversation, thread)
        .await?
        .ok_or_else(|| AgentAPIError::runtime("stream vanished while being created"))
}

/// The next number of one of a stream's counters (`transcript_seq` or
/// `event_seq`), taken under the stream row's lock until commit.
async fn next_seq(client: &impl GenericClient, stream: i64, counter: &str) -> HostResult<i64> {
    let sql =
        format!("UPDATE streams SET {counter} = {counter} + 1 WHERE id = $1 RETURNING {counter}");
    let stmt = client.prepare_cached(&sql).await.map_err(db_error)?;
    client
        .query_one(&stmt, &[&stream])
        .await
        .and_then(|r| r.try_get(0))
        .map_err(db_error)
}

async fn open_page(
    client: &Client,
    codec: &CursorCodec,
    kind: CursorKind,
    scope: &RunScope,
    request: &PageRequest<'_>,
) -> HostResult<Option<Window>> {
    let (conversation, thread) = target(scope, request.conversation)?;
    request.window(codec, kind, find(client, conversation, thread).await?)
}

async fn counter(client: &Client, stream: i64, column: &str) -> HostResult<i64> {
    let stmt = client
        .prepare_cached(&format!("SELECT {column} FROM streams WHERE id = $1"))
        .await
        .map_err(db_error)?;
    client
        .query_one(&stmt, &[&stream])
        .await
        .and_then(|r| r.try_get(0))
        .map_err(db_error)
}

pub(super) async fn page(
    client: &Client,
    codec: &CursorCodec,
    scope: &RunScope,
    query: &HistoryQuery,
) -> HostResult<HistoryPage> {
    let request = PageRequest::from(query);
    let Some(window) = open_page(client, codec, CursorKind::History, scope, &request).await? else {
        return Ok(HistoryPage {
            total_count: Some(0),
            ..HistoryPage::default()
        });
    };
    let sql = format!(
        "SELECT {TRANSCRIPT_COLUMNS} FROM transcript t JOIN streams s ON s.id = t.stream_id
         WHERE t.stream_id = $1 AND t.seq > $2 AND t.seq < $3 ORDER BY t.seq {} LIMIT $4",
        window.order()
    );
    let stmt = client.prepare_cached(&sql).await.map_err(db_error)?;
    let rows = client
        .query(
            &stmt,
            &[
                &window.stream,
                &window.after,
                &window.before,
                &window.fetch(),
            ],
        )
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| transcript_item(row, codec, query.include_artifacts))
        .collect::<Result<Vec<_>, _>>()
        .map_err(db_error)?;
    let total = counter(client, window.stream, "transcript_seq").await?;
    let page = window.finish(codec, CursorKind::History, rows);
    Ok(HistoryPage {
        items: page.items,
        next_cursor: page.next_cursor,
        prev_cursor: page.prev_cursor,
        has_more: page.has_more,
        total_count: Some(total as u64),
    })
}

/// Up to `limit` items of `stream` holding every word (`all`) or some,
/// newest first. Each word is matched as a phrase (`phraseto_tsquery`), so
/// a CJK word matches its characters side by side only.
async fn matches(
    client: &Client,
    codec: &CursorCodec,
    stream: i64,
    words: &[String],
    all: bool,
    limit: usize,
) -> HostResult<Vec<TranscriptItem>> {
    let joiner = if all { " && " } else { " || " };
    let query = (0..words.len())
        .map(|i| format!("phraseto_tsquery('hb_search', ${})", i + 3))
        .collect::<Vec<_>>()
        .join(joiner);
    let sql = format!(
        "SELECT {TRANSCRIPT_COLUMNS} FROM transcript t JOIN streams s ON s.id = t.stream_id
         WHERE t.stream_id = $1 AND t.words @@ ({query}) ORDER BY t.seq DESC LIMIT $2"
    );
    let limit = limit as i64;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&stream, &limit];
    params.extend(words.iter().map(|w| w as &(dyn ToSql + Sync)));
    let stmt = client.prepare_cached(&sql).await.map_err(db_error)?;
    client
        .query(&stmt, &params)
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| transcript_item(row, codec, true).map(|(_, item)| item))
        .collect::<Result<Vec<_>, _>>()
        .map_err(db_error)
}

/// Search one conversation stream, as the embedded store does: items with
/// every word first, then items with some; newest first within each.
pub(super) async fn search(
    client: &Client,
    codec: &CursorCodec,
    scope: &RunScope,
    conversation: Option<&str>,
    query: &str,
    top_k: u32,
) -> HostResult<HistorySearchResult> {
    let (conversation, thread) = target(scope, conversation)?;
    let words = search_words(query);
    if words.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "query has no words to search for",
        ));
    }
    let result = |items| HistorySearchResult {
        items,
        total_count: None,
        query: query.to_string(),
    };
    let Some(stream) = find(client, conversation, thread).await? else {
        return Ok(result(Vec::new()));
    };
    let top_k = top_k as usize;
    let mut items = matches(client, codec, stream, &words, true, top_k).await?;
    if items.len() < top_k && words.len() > 1 {
        let some = matches(client, codec, stream, &words, false, top_k).await?;
        items = every_then_some(items, some, top_k);
    }
    Ok(result(items))
}

pub(super) async fn append_transcript(
    client: &mut Client,
    codec: &CursorCodec,
    guard: Option<&WriteGuard>,
    item: &NewTranscriptItem,
) -> HostResult<TranscriptItem> {
    if item.conversation_id.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "a transcript item needs a conversation_id",
        ));
    }
    let thread = item.thread_id.as_deref().unwrap_or("");
    let transcript_id = match &item.transcript_id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => new_id("tr")?,
    };
    let item_type = if item.item_type.is_empty() {
        "message"
    } else {
        &item.item_type
    };
    let created_at = now_ms();
    let words = item
        .content
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(index_text);
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, guard).await?;
    let stream = ensure(&tx, &item.conversation_id, thread).await?;
    let seq = next_seq(&tx, stream, "transcript_seq").await?;
    let stmt = tx
        .prepare_cached(
            "INSERT INTO transcript (stream_id, seq, transcript_id, event_id, bot_id, workspace_id, role,
                 item_type, content, content_json, artifact_refs, created_at, metadata, words)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                 to_tsvector('hb_search', $14))",
        )
        .await
        .map_err(db_error)?;
    tx.execute(
        &stmt,
        &[
            &stream,
            &seq,
            &transcript_id,
            &item.event_id,
            &item.bot_id,
            &item.workspace_id,
            &item.role,
            &item_type,
            &item.content,
            &item.content_json.as_ref().map(json_text),
            &json_text(&item.artifact_refs),
            &created_at,
            &json_text(&item.metadata),
            &words,
        ],
    )
    .await
    .map_err(|e| {
        write_error(e, || {
            format!("transcript item `{transcript_id}` already exists")
        })
    })?;
    tx.commit().await.map_err(db_error)?;
    Ok(stored_transcript_item(
        item,
        transcript_id,
        item_type,
        codec.encode(Cursor {
            kind: CursorKind::History,
            stream,
            seq,
        }),
        seq,
        created_at,
    ))
}

async fn event_by_id(
    client: &impl GenericClient,
    codec: &CursorCodec,
    event_id: &str,
) -> HostResult<Option<AgentEventRecord>> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE event_id = $1"
        ))
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(&stmt, &[&event_id])
        .await
        .map_err(db_error)?;
    row.map(|row| event_record(&row, codec).map(|(_, record)| record))
        .transpose()
        .map_err(db_error)
}

pub(super) async fn event_get(
    client: &Client,
    codec: &CursorCodec,
    event_id: &str,
) -> HostResult<AgentEventRecord> {
    event_by_id(client, codec, event_id)
        .await?
        .ok_or_else(|| AgentAPIError::not_found(format!("no event `{event_id}`")))
}

pub(super) async fn event_page(
    client: &Client,
    codec: &CursorCodec,
    scope: &RunScope,
    query: &EventQuery,
) -> HostResult<EventPage> {
    let request = PageRequest::from(query);
    let Some(window) = open_page(client, codec, CursorKind::Events, scope, &request).await? else {
        return Ok(EventPage {
            total_count: Some(0),
            ..EventPage::default()
        });
    };
    let filtered = !query.event_types.is_empty();
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND seq > $2 AND seq < $3
         AND (NOT $5 OR event_type = ANY($6)) ORDER BY seq {} LIMIT $4",
        window.order()
    );
    let stmt = client.prepare_cached(&sql).await.map_err(db_error)?;
    let rows = client
        .query(
            &stmt,
            &[
                &window.stream,
                &window.after,
                &window.before,
                &window.fetch(),
                &filtered,
                &query.event_types,
            ],
        )
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| event_record(row, codec))
        .collect::<Result<Vec<_>, _>>()
        .map_err(db_error)?;
    let total = if filtered {
        None
    } else {
        Some(counter(client, window.stream, "event_seq").await? as u64)
    };
    let page = window.finish(codec, CursorKind::Events, rows);
    Ok(EventPage {
        items: page.items,
        next_cursor: page.next_cursor,
        prev_cursor: page.prev_cursor,
        has_more: page.has_more,
        total_count: total,
    })
}

/// Record an event. Idempotent by `event_id`, across bridges too: the
/// second of two racing inserts finds the first's record.
pub(super) async fn append_event(
    client: &mut Client,
    codec: &CursorCodec,
    guard: Option<&WriteGuard>,
    event: &NewEvent,
) -> HostResult<AgentEventRecord> {
    if event.event_id.is_empty() || event.event_type.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "an event needs event_id and event_type",
        ));
    }
    if let Some(existing) = event_by_id(client, codec, &event.event_id).await? {
        return Ok(existing);
    }
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, guard).await?;
    let (stream, seq) = match event.conversation_id.as_deref() {
        Some(conversation) => {
            let stream =
                ensure(&tx, conversation, event.thread_id.as_deref().unwrap_or("")).await?;
            (
                Some(stream),
                Some(next_seq(&tx, stream, "event_seq").await?),
            )
        }
        None => (None, None),
    };
    let stmt = tx
        .prepare_cached(
            "INSERT INTO events (stream_id, seq, event_id, event_type, event_time, source, bot_id,
                 workspace_id, conversation_id, thread_id, actor_type, actor_id, actor_name,
                 subject_type, subject_id, input_summary, input_ref, raw_ref, created_at, metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                 $18, $19, $20)
             ON CONFLICT (event_id) DO NOTHING",
        )
        .await
        .map_err(db_error)?;
    let inserted = tx
        .execute(
            &stmt,
            &[
                &stream,
                &seq,
                &event.event_id,
                &event.event_type,
                &event.event_time,
                &event.source,
                &event.bot_id,
                &event.workspace_id,
                &event.conversation_id,
                &event.thread_id,
                &event.actor_type,
                &event.actor_id,
                &event.actor_name,
                &event.subject_type,
                &event.subject_id,
                &event.input_summary,
                &event.input_ref,
                &event.raw_ref,
                &now_ms(),
                &json_text(&event.metadata),
            ],
        )
        .await
        .map_err(db_error)?;
    if inserted == 0 {
        // Another bridge recorded it first: its number stands, not ours.
        tx.rollback().await.map_err(db_error)?;
    } else {
        tx.commit().await.map_err(db_error)?;
    }
    event_get(client, codec, &event.event_id).await
}
