//! Artifacts on PostgreSQL: metadata rows, contents as `bytea` by SHA-256
//! (identical bytes stored once), read in ranges without loading the whole.

use sha2::{Digest, Sha256};

use super::guard::{self, WriteGuard};
use super::{Client, db_error, write_error};
use crate::host::rows::{
    ARTIFACT_COLUMNS, artifact_metadata, artifact_range, artifact_read, json_text, new_id,
};
use crate::host::{HostResult, NewArtifact, now_ms};
use crate::protocol::{AgentAPIError, ArtifactMetadata, ArtifactReadResult};

/// The largest artifact the database keeps: PostgreSQL holds a `bytea` of
/// up to 1 GB, but every read and write of one goes through memory on
/// both sides; larger outbox files stay in the workspace, said so.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024 * 1024;

pub(super) async fn put(
    client: &mut Client,
    guard: Option<&WriteGuard>,
    artifact: &NewArtifact,
    content: &[u8],
) -> HostResult<ArtifactMetadata> {
    if content.len() > MAX_CONTENT_BYTES {
        return Err(AgentAPIError::too_large(format!(
            "artifact is {} bytes; the PostgreSQL store keeps up to {MAX_CONTENT_BYTES}",
            content.len()
        )));
    }
    let sha256 = hex::encode(Sha256::digest(content));
    let artifact_id = match &artifact.artifact_id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => new_id("art")?,
    };
    let tx = client.transaction().await.map_err(db_error)?;
    guard::check(&tx, guard).await?;
    tx.execute(
        "INSERT INTO artifact_contents (sha256, content) VALUES ($1, $2)
         ON CONFLICT (sha256) DO NOTHING",
        &[&sha256, &content],
    )
    .await
    .map_err(db_error)?;
    tx.execute(
        "INSERT INTO artifacts (artifact_id, artifact_type, mime_type, name, size_bytes, sha256,
             source, conversation_id, run_id, runner_id, created_at, expires_at, metadata)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        &[
            &artifact_id,
            &artifact.artifact_type,
            &artifact.mime_type,
            &artifact.name,
            &(content.len() as i64),
            &sha256,
            &artifact.source,
            &artifact.conversation_id,
            &artifact.run_id,
            &artifact.runner_id,
            &now_ms(),
            &artifact.expires_at,
            &json_text(&artifact.metadata),
        ],
    )
    .await
    .map_err(|e| write_error(e, || format!("artifact `{artifact_id}` already exists")))?;
    tx.commit().await.map_err(db_error)?;
    load(client, &artifact_id)
        .await?
        .ok_or_else(|| AgentAPIError::runtime("artifact row vanished after insert"))
}

/// Metadata of a live artifact; an expired one reads as missing.
pub(super) async fn metadata(client: &Client, artifact_id: &str) -> HostResult<ArtifactMetadata> {
    match load(client, artifact_id).await? {
        Some(meta) if meta.expires_at.is_none_or(|at| at > now_ms()) => Ok(meta),
        _ => Err(AgentAPIError::not_found(format!(
            "no artifact `{artifact_id}`"
        ))),
    }
}

async fn load(client: &Client, artifact_id: &str) -> HostResult<Option<ArtifactMetadata>> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE artifact_id = $1"
        ))
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(&stmt, &[&artifact_id])
        .await
        .map_err(db_error)?;
    row.map(|r| artifact_metadata(&r))
        .transpose()
        .map_err(db_error)
}

/// Read `length` bytes from `offset`; `has_more` says whether bytes follow.
pub(super) async fn read(
    client: &Client,
    artifact_id: &str,
    offset: u64,
    length: u64,
) -> HostResult<ArtifactReadResult> {
    let meta = metadata(client, artifact_id).await?;
    let take = artifact_range(&meta, offset, length)?;
    let sha = meta.sha256.clone().unwrap_or_default();
    // `substring` on bytea counts from 1 and reads only the range.
    let bytes: Vec<u8> = client
        .query_opt(
            "SELECT substring(content FROM ($2::bigint)::int FOR ($3::bigint)::int)
             FROM artifact_contents WHERE sha256 = $1",
            &[&sha, &(offset as i64 + 1), &(take as i64)],
        )
        .await
        .map_err(db_error)?
        .ok_or_else(|| AgentAPIError::runtime("artifact row names no stored content"))?
        .try_get(0)
        .map_err(db_error)?;
    Ok(artifact_read(meta, offset, &bytes))
}
