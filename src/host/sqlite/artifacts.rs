//! The artifact store: metadata rows in SQLite, contents as files named by
//! their SHA-256 under `<data>/artifacts/`, so identical content is stored
//! once and a file name can never come from outside.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sha2::{Digest, Sha256};

use super::{db_error, execute_cached, write_error};
use crate::host::grant::now_ms;
use crate::host::rows::{
    ARTIFACT_COLUMNS, artifact_metadata, artifact_range, artifact_read, json_text, new_id,
};
use crate::host::{HostResult, NewArtifact};
use crate::protocol::{AgentAPIError, ArtifactMetadata, ArtifactReadResult};

/// Content that has been written to disk, ready for its row.
pub(super) struct StoredContent {
    sha256: String,
    size: u64,
}

fn content_path(dir: &Path, sha256: &str) -> PathBuf {
    dir.join("artifacts").join(&sha256[..2]).join(sha256)
}

fn io_error(what: &str, e: std::io::Error) -> AgentAPIError {
    AgentAPIError::runtime(format!("artifact store: {what}: {e}"))
}

/// Write content atomically (temp file + rename); skip if already stored.
pub(super) fn store_content(dir: &Path, content: &[u8]) -> HostResult<StoredContent> {
    let sha256 = hex::encode(Sha256::digest(content));
    let path = content_path(dir, &sha256);
    if !path.exists() {
        let parent = path.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(|e| io_error("create folder", e))?;
        let mut tmp =
            tempfile::NamedTempFile::new_in(parent).map_err(|e| io_error("temp file", e))?;
        tmp.write_all(content).map_err(|e| io_error("write", e))?;
        tmp.as_file().sync_all().map_err(|e| io_error("sync", e))?;
        tmp.persist(&path)
            .map_err(|e| io_error("rename", e.error))?;
    }
    Ok(StoredContent {
        sha256,
        size: content.len() as u64,
    })
}

pub(super) fn insert(
    tx: &Transaction<'_>,
    artifact: &NewArtifact,
    stored: &StoredContent,
) -> HostResult<ArtifactMetadata> {
    let artifact_id = match &artifact.artifact_id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => new_id("art")?,
    };
    execute_cached(tx,
        "INSERT INTO artifacts (artifact_id, artifact_type, mime_type, name, size_bytes, sha256, source,
             conversation_id, run_id, runner_id, created_at, expires_at, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            artifact_id,
            artifact.artifact_type,
            artifact.mime_type,
            artifact.name,
            stored.size as i64,
            stored.sha256,
            artifact.source,
            artifact.conversation_id,
            artifact.run_id,
            artifact.runner_id,
            now_ms(),
            artifact.expires_at,
            json_text(&artifact.metadata),
        ],
    )
    .map_err(|e| write_error(e, || format!("artifact `{artifact_id}` already exists")))?;
    load(tx, &artifact_id)?
        .ok_or_else(|| AgentAPIError::runtime("artifact row vanished after insert"))
}

/// Metadata of a live artifact; an expired one reads as missing.
pub(super) fn metadata(conn: &Connection, artifact_id: &str) -> HostResult<ArtifactMetadata> {
    match load(conn, artifact_id)? {
        Some(meta) if meta.expires_at.is_none_or(|at| at > now_ms()) => Ok(meta),
        _ => Err(AgentAPIError::not_found(format!(
            "no artifact `{artifact_id}`"
        ))),
    }
}

fn load(conn: &Connection, artifact_id: &str) -> HostResult<Option<ArtifactMetadata>> {
    conn.prepare_cached(&format!(
        "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE artifact_id = ?1"
    ))
    .and_then(|mut s| {
        s.query_row([artifact_id], |r| artifact_metadata(r))
            .optional()
    })
    .map_err(db_error)
}

/// Read `length` bytes from `offset`; `has_more` says whether bytes follow.
pub(super) fn read(
    conn: &Connection,
    dir: &Path,
    artifact_id: &str,
    offset: u64,
    length: u64,
) -> HostResult<ArtifactReadResult> {
    let meta = metadata(conn, artifact_id)?;
    let take = artifact_range(&meta, offset, length)?;
    let sha = meta.sha256.clone().unwrap_or_default();
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AgentAPIError::runtime("artifact row has no valid digest"));
    }
    let mut file =
        std::fs::File::open(content_path(dir, &sha)).map_err(|e| io_error("open content", e))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| io_error("seek", e))?;
    let mut buf = Vec::with_capacity(take as usize);
    file.take(take)
        .read_to_end(&mut buf)
        .map_err(|e| io_error("read", e))?;
    Ok(artifact_read(meta, offset, &buf))
}
