//! Knowledge bases of the embedded host: operator folders indexed into the
//! store's full-text index, so `retrieve_knowledge` works without LangBot.
//!
//! Indexing is incremental: a file whose SHA-256 is the one indexed is not
//! read into the index again, a changed one replaces its chunks, a removed
//! one loses them. Only regular UTF-8 text files are indexed; links
//! (symbolic, and hard: a file with more than one name), hidden names
//! (`.git`) and files over [`MAX_FILE_BYTES`] are skipped, so nothing
//! outside the folder is read through it. Search is the transcript's: CJK
//! characters one token each, every word first, then some; best first by
//! FTS5's bm25 within one base's rowid range.

use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt};
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::transcript::search_terms;
use super::{db_error, execute_cached};
use crate::host::HostResult;
use crate::host::words::index_text;
use crate::protocol::AgentAPIError;

/// Largest file indexed, in bytes: a knowledge base is documents, not data.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Largest chunk, in bytes: a passage a model reads whole.
const CHUNK_BYTES: usize = 1500;

/// Chunk ids live below this bit; the base's number above it.
const KB_SHIFT: u32 = 40;
const CHUNK_MASK: i64 = (1 << KB_SHIFT) - 1;

/// What one indexing pass of a knowledge base did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KnowledgeReport {
    /// Files (re)indexed: new, or changed since the last pass.
    pub indexed: usize,
    /// Files whose digest was the one indexed.
    pub unchanged: usize,
    /// Files gone from the folder, dropped from the index.
    pub removed: usize,
    /// Files not indexed: links (symbolic or hard), binary, or over the
    /// size limit.
    pub skipped: usize,
}

/// `text` in passages of at most [`CHUNK_BYTES`]: paragraphs together
/// while they fit, a longer paragraph cut at lines, a longer line at a
/// character boundary.
pub(super) fn chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut push = |piece: &str, current: &mut String| {
        if !current.is_empty() && current.len() + 2 + piece.len() > CHUNK_BYTES {
            out.push(std::mem::take(current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(piece);
    };
    for paragraph in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if paragraph.len() <= CHUNK_BYTES {
            push(paragraph, &mut current);
            continue;
        }
        for line in paragraph.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let mut rest = line;
            while rest.len() > CHUNK_BYTES {
                let mut cut = CHUNK_BYTES;
                while !rest.is_char_boundary(cut) {
                    cut -= 1;
                }
                push(&rest[..cut], &mut current);
                rest = &rest[cut..];
            }
            push(rest, &mut current);
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn kb_number(tx: &Transaction<'_>, kb_id: &str) -> HostResult<i64> {
    execute_cached(
        tx,
        "INSERT INTO knowledge_bases (kb_id) VALUES (?1) ON CONFLICT (kb_id) DO NOTHING",
        params![kb_id],
    )
    .map_err(db_error)?;
    tx.query_row(
        "SELECT id FROM knowledge_bases WHERE kb_id = ?1",
        [kb_id],
        |r| r.get(0),
    )
    .map_err(db_error)
}

fn drop_file(tx: &Transaction<'_>, kb: i64, file: i64) -> HostResult<()> {
    let ids: Vec<i64> = tx
        .prepare_cached("SELECT id FROM knowledge_chunks WHERE file = ?1")
        .and_then(|mut s| {
            s.query_map([file], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()
        })
        .map_err(db_error)?;
    for id in ids {
        execute_cached(
            tx,
            "DELETE FROM knowledge_fts WHERE rowid = ?1",
            params![(kb << KB_SHIFT) | id],
        )
        .map_err(db_error)?;
    }
    execute_cached(
        tx,
        "DELETE FROM knowledge_chunks WHERE file = ?1",
        params![file],
    )
    .map_err(db_error)?;
    execute_cached(
        tx,
        "DELETE FROM knowledge_files WHERE id = ?1",
        params![file],
    )
    .map_err(db_error)?;
    Ok(())
}

/// A file's text when it is one to index: UTF-8 without NUL bytes.
fn text_of(bytes: Vec<u8>) -> Option<String> {
    String::from_utf8(bytes).ok().filter(|t| !t.contains('\0'))
}

/// Bring the index of `kb_id` in step with `folder`.
pub(super) fn index(
    tx: &Transaction<'_>,
    kb_id: &str,
    folder: &Path,
) -> HostResult<KnowledgeReport> {
    let kb = kb_number(tx, kb_id)?;
    let mut report = KnowledgeReport::default();
    let mut known: std::collections::HashMap<String, (i64, String)> = tx
        .prepare_cached("SELECT path, id, digest FROM knowledge_files WHERE kb = ?1")
        .and_then(|mut s| {
            s.query_map([kb], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?
                .collect()
        })
        .map_err(db_error)?;
    let unreadable = |e: &dyn std::fmt::Display| {
        AgentAPIError::invalid_argument(format!(
            "knowledge base `{kb_id}`: {} cannot be read: {e}",
            folder.display()
        ))
    };
    if let Err(e) = std::fs::read_dir(folder) {
        return Err(unreadable(&e));
    }
    let walk = walkdir::WalkDir::new(folder)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walk {
        let Ok(entry) = entry else {
            report.skipped += 1;
            continue;
        };
        if entry.file_type().is_dir() {
            continue;
        }
        let too_big = entry.metadata().map_or(true, |m| m.len() > MAX_FILE_BYTES);
        if !entry.file_type().is_file() || too_big {
            report.skipped += 1;
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(folder) else {
            report.skipped += 1;
            continue;
        };
        let path = relative.to_string_lossy().into_owned();
        let Some(text) = read_text(entry.path(), kb_id, &path) else {
            report.skipped += 1;
            continue;
        };
        let digest = hex::encode(Sha256::digest(text.as_bytes()));
        match known.remove(&path) {
            Some((_, old)) if old == digest => {
                report.unchanged += 1;
                continue;
            }
            Some((file, _)) => drop_file(tx, kb, file)?,
            None => {}
        }
        insert_file(tx, kb, &path, &digest, &text)?;
        report.indexed += 1;
    }
    for (_, (file, _)) in known {
        drop_file(tx, kb, file)?;
        report.removed += 1;
    }
    Ok(report)
}

/// The text of the knowledge file at `at` (`path` in its folder), read
/// through a handle that follows no link and waits on no FIFO; `None`
/// when it cannot be read as text, or has another name (said in the log).
fn read_text(at: &Path, kb_id: &str, path: &str) -> Option<String> {
    // Read through a handle that does not follow a link put in the
    // file's place since the walk saw it, nor waits on a FIFO.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow_no_wait())
        .open(at);
    let mut file = opened.ok()?;
    // A hard link is a regular file no `O_NOFOLLOW` refuses, and its
    // other name may be outside the folder (a key the operator never
    // meant to publish): a file with more than one name is skipped,
    // as a symlink is, and said in the log.
    let links = file.metadata().map_or(0, |m| m.nlink());
    if links != 1 {
        tracing::warn!(
            kb = kb_id,
            file = %path,
            links,
            "a knowledge file with more than one name (a hard link) is not indexed: its \
             other names may be outside the folder"
        );
        return None;
    }
    let mut bytes = Vec::new();
    let read = std::io::Read::read_to_end(
        &mut std::io::Read::take(&mut file, MAX_FILE_BYTES),
        &mut bytes,
    );
    read.ok().and_then(|_| text_of(bytes))
}

/// A knowledge file's row, its chunks and their search entries.
fn insert_file(
    tx: &Transaction<'_>,
    kb: i64,
    path: &str,
    digest: &str,
    text: &str,
) -> HostResult<()> {
    execute_cached(
        tx,
        "INSERT INTO knowledge_files (kb, path, digest) VALUES (?1, ?2, ?3)",
        params![kb, path, digest],
    )
    .map_err(db_error)?;
    let file = tx.last_insert_rowid();
    for (seq, chunk) in chunks(text).iter().enumerate() {
        execute_cached(
            tx,
            "INSERT INTO knowledge_chunks (file, seq, text) VALUES (?1, ?2, ?3)",
            params![file, seq as i64, chunk],
        )
        .map_err(db_error)?;
        let id = tx.last_insert_rowid();
        execute_cached(
            tx,
            "INSERT INTO knowledge_fts (rowid, body) VALUES (?1, ?2)",
            params![(kb << KB_SHIFT) | id, index_text(chunk)],
        )
        .map_err(db_error)?;
    }
    Ok(())
}

fn no_follow_no_wait() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits()
}

type Hit = (i64, f64, String, i64, String);

/// Up to `limit` passages of base `kb` matching `expression`, best first:
/// (chunk id, bm25 rank, text, chunk number, file).
fn matches(conn: &Connection, kb: i64, expression: &str, limit: usize) -> HostResult<Vec<Hit>> {
    let mut stmt = conn
        .prepare_cached(
            "WITH hits AS MATERIALIZED (
                 SELECT rowid, bm25(knowledge_fts) AS rank FROM knowledge_fts
                 WHERE knowledge_fts MATCH ?1 AND rowid BETWEEN ?2 AND ?3
                 ORDER BY rank LIMIT ?4)
             SELECT c.id, hits.rank, c.text, c.seq, f.path FROM hits
             CROSS JOIN knowledge_chunks c ON c.id = (hits.rowid & ?5)
             CROSS JOIN knowledge_files f ON f.id = c.file
             ORDER BY hits.rank",
        )
        .map_err(db_error)?;
    let first = kb << KB_SHIFT;
    stmt.query_map(
        params![
            expression,
            first,
            first | CHUNK_MASK,
            limit as i64,
            CHUNK_MASK
        ],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )
    .and_then(|rows| rows.collect())
    .map_err(db_error)
}

/// The passages of `kb_id` that best match `query`, as LangBot's retrieval
/// entries: passages with every word first, then with some.
pub(super) fn retrieve(
    conn: &Connection,
    kb_id: &str,
    query: &str,
    top_k: u32,
) -> HostResult<Vec<Value>> {
    let terms = search_terms(query);
    if terms.is_empty() {
        return Err(AgentAPIError::invalid_argument(
            "query has no words to search for",
        ));
    }
    let kb: Option<i64> = conn
        .query_row(
            "SELECT id FROM knowledge_bases WHERE kb_id = ?1",
            [kb_id],
            |r| r.get(0),
        )
        .optional()
        .map_err(db_error)?;
    let Some(kb) = kb else {
        return Ok(Vec::new());
    };
    let top_k = top_k as usize;
    let mut hits = matches(conn, kb, &terms.join(" AND "), top_k)?;
    if hits.len() < top_k && terms.len() > 1 {
        let seen: std::collections::HashSet<i64> = hits.iter().map(|h| h.0).collect();
        let more = matches(conn, kb, &terms.join(" OR "), top_k)?;
        let room = top_k - hits.len();
        hits.extend(more.into_iter().filter(|h| !seen.contains(&h.0)).take(room));
    }
    Ok(hits
        .into_iter()
        .map(|(_, rank, text, seq, path)| {
            // bm25 is negative, more so for a better match.
            let score = -rank;
            json!({
                "id": format!("{kb_id}:{path}#{seq}"),
                "content": [{"type": "text", "text": text}],
                "metadata": {"kb_id": kb_id, "file": path, "chunk": seq},
                "distance": 1.0 / (1.0 + score.max(0.0)),
                "score": score,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_keep_paragraphs_together_and_cut_long_ones() {
        assert_eq!(
            chunks("one\n\ntwo\n\n\n  \n\nthree"),
            ["one\n\ntwo\n\nthree"]
        );
        let long = "部".repeat(CHUNK_BYTES); // three bytes each
        let cut = chunks(&long);
        assert!(
            cut.iter().all(|c| c.len() <= CHUNK_BYTES),
            "{:?}",
            cut.len()
        );
        assert_eq!(cut.concat(), long, "nothing lost at the cuts");
        let paragraphs = format!("{}\n\n{}", "a".repeat(1000), "b".repeat(1000));
        assert_eq!(chunks(&paragraphs).len(), 2);
    }
}
