//! The transcript: what was said, per conversation stream, with FTS5 search.

use rusqlite::{Connection, Transaction, params};

use super::streams::{self, open_page};
use super::{db_error, execute_cached, write_error};
use crate::host::grant::now_ms;
use crate::host::paging::{PageRequest, target};
use crate::host::rows::{
    TRANSCRIPT_COLUMNS, json_text, new_id, stored_transcript_item, transcript_item,
};
use crate::host::words::{every_then_some, index_text, search_words};
use crate::host::{
    Cursor, CursorCodec, CursorKind, HistoryQuery, HostResult, NewTranscriptItem, RunScope,
};
use crate::protocol::{AgentAPIError, HistoryPage, HistorySearchResult, TranscriptItem};

pub(super) fn page(
    conn: &Connection,
    codec: &CursorCodec,
    scope: &RunScope,
    query: &HistoryQuery,
) -> HostResult<HistoryPage> {
    let request = PageRequest::from(query);
    let Some(window) = open_page(conn, codec, CursorKind::History, scope, &request)? else {
        return Ok(HistoryPage {
            total_count: Some(0),
            ..HistoryPage::default()
        });
    };
    let sql = format!(
        "SELECT {TRANSCRIPT_COLUMNS} FROM transcript t JOIN streams s ON s.id = t.stream_id
         WHERE t.stream_id = ?1 AND t.seq > ?2 AND t.seq < ?3 ORDER BY t.seq {} LIMIT ?4",
        window.order()
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(db_error)?;
    let rows = stmt
        .query_map(
            params![window.stream, window.after, window.before, window.fetch()],
            |row| transcript_item(row, codec, query.include_artifacts),
        )
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(db_error)?;
    let total: i64 = conn
        .prepare_cached("SELECT transcript_seq FROM streams WHERE id = ?1")
        .and_then(|mut s| s.query_row([window.stream], |r| r.get(0)))
        .map_err(db_error)?;
    let page = window.finish(codec, CursorKind::History, rows);
    Ok(HistoryPage {
        items: page.items,
        next_cursor: page.next_cursor,
        prev_cursor: page.prev_cursor,
        has_more: page.has_more,
        total_count: Some(total as u64),
    })
}

/// The full-text rowid of a stream's item: streams own disjoint ranges.
fn fts_rowid(stream: i64, seq: i64) -> i64 {
    (stream << 32) | (seq & 0xFFFF_FFFF)
}

/// A person's search words as FTS5 phrases: each word quoted, so no FTS5
/// operator syntax leaks through.
pub(super) fn search_terms(query: &str) -> Vec<String> {
    search_words(query)
        .into_iter()
        .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
        .collect()
}

/// Up to `limit` items of `stream` matching `expression`, newest first.
fn matches(
    conn: &Connection,
    codec: &CursorCodec,
    stream: i64,
    expression: &str,
    limit: usize,
) -> HostResult<Vec<TranscriptItem>> {
    let sql = format!(
        // MATERIALIZED and CROSS JOIN fix the plan: hits first, then one
        // index lookup per hit. Left to itself, the planner may walk the
        // whole conversation in `transcript` and probe the hits per row.
        "WITH hits AS MATERIALIZED (
             SELECT rowid FROM transcript_fts
             WHERE transcript_fts MATCH ?1 AND rowid BETWEEN ?2 AND ?3
             ORDER BY rowid DESC LIMIT ?4)
         SELECT {TRANSCRIPT_COLUMNS} FROM hits
         CROSS JOIN transcript t ON t.stream_id = ?5 AND t.seq = (hits.rowid & 4294967295)
         CROSS JOIN streams s ON s.id = t.stream_id
         ORDER BY t.seq DESC"
    );
    let (first, last) = (fts_rowid(stream, 0), fts_rowid(stream, 0xFFFF_FFFF));
    let mut stmt = conn.prepare_cached(&sql).map_err(db_error)?;
    stmt.query_map(
        params![expression, first, last, limit as i64, stream],
        |row| transcript_item(row, codec, true),
    )
    .and_then(|rows| {
        rows.map(|r| r.map(|(_, item)| item))
            .collect::<rusqlite::Result<Vec<_>>>()
    })
    .map_err(db_error)
}

/// Search one conversation stream. Ranking: items containing every word
/// first, then items containing some of them; newest first within each.
///
/// FTS5's bm25 is not used: it computes each word's rarity over the whole
/// index on every query, which costs milliseconds per common word on a
/// large store, while matching inside one conversation's rowid range costs
/// microseconds. For chat history, recency is also the more useful order.
pub(super) fn search(
    conn: &Connection,
    codec: &CursorCodec,
    scope: &RunScope,
    conversation: Option<&str>,
    query: &str,
    top_k: u32,
) -> HostResult<HistorySearchResult> {
    let (conversation, thread) = target(scope, conversation)?;
    let terms = search_terms(query);
    if terms.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "query has no words to search for",
        ));
    }
    let result = |items| HistorySearchResult {
        items,
        total_count: None,
        query: query.to_string(),
    };
    let Some(stream) = streams::find(conn, conversation, thread)? else {
        return Ok(result(Vec::new()));
    };
    let top_k = top_k as usize;
    let mut items = matches(conn, codec, stream, &terms.join(" AND "), top_k)?;
    if items.len() < top_k && terms.len() > 1 {
        let some = matches(conn, codec, stream, &terms.join(" OR "), top_k)?;
        items = every_then_some(items, some, top_k);
    }
    Ok(result(items))
}

pub(super) fn append(
    tx: &Transaction<'_>,
    codec: &CursorCodec,
    item: &NewTranscriptItem,
) -> HostResult<TranscriptItem> {
    if item.conversation_id.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "a transcript item needs a conversation_id",
        ));
    }
    let thread = item.thread_id.as_deref().unwrap_or("");
    let stream = streams::ensure(tx, &item.conversation_id, thread)?;
    let seq: i64 = tx
        .query_row(
            "UPDATE streams SET transcript_seq = transcript_seq + 1 WHERE id = ?1 RETURNING transcript_seq",
            [stream],
            |r| r.get(0),
        )
        .map_err(db_error)?;
    let transcript_id = match &item.transcript_id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => new_id("tr")?,
    };
    let created_at = now_ms();
    let item_type = if item.item_type.is_empty() {
        "message"
    } else {
        &item.item_type
    };
    execute_cached(tx,
            "INSERT INTO transcript (stream_id, seq, transcript_id, event_id, bot_id, workspace_id, role,
                 item_type, content, content_json, artifact_refs, created_at, metadata)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ",
            params![
                stream,
                seq,
                transcript_id,
                item.event_id,
                item.bot_id,
                item.workspace_id,
                item.role,
                item_type,
                item.content,
                item.content_json.as_ref().map(json_text),
                json_text(&item.artifact_refs),
                created_at,
                json_text(&item.metadata),
            ],
        )
        .map_err(|e| write_error(e, || format!("transcript item `{transcript_id}` already exists")))?;
    if let Some(content) = item.content.as_deref().filter(|c| !c.is_empty()) {
        tx.prepare_cached("INSERT INTO transcript_fts (rowid, body) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![fts_rowid(stream, seq), index_text(content)]))
            .map_err(db_error)?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_terms_are_quoted_and_cjk_is_split() {
        let terms = search_terms("deploy \"x\" OR 部署 \" -- ...");
        assert_eq!(
            terms,
            ["\"deploy\"", "\"\"\"x\"\"\"", "\"OR\"", "\"部  署\""]
        );
        assert!(fts_rowid(2, 1) > fts_rowid(1, 0xFFFF_FFFF));
    }
}
