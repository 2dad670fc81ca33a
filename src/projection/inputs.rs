//! Input files: the current event's attachments, each with an id that is
//! stable across turns (derived from what identifies the file, e.g. its
//! artifact id), so a tool call made in an earlier turn still resolves.
//!
//! Files up to a size cap are copied into `.langbot/inputs/` — from the
//! host's artifact store through the run's grant, or from inline content —
//! and larger ones are only listed, for the MCP tools to read in ranges.
//! The bridge never fetches URLs itself.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::confined::ConfinedDir;
use super::names::{check_component, safe_component, short_hash};
use super::{ProjectionError, Report};
use crate::host::GrantedHost;
use crate::host::calls::{ArtifactMetadataCall, ArtifactReadCall};
use crate::protocol::ArtifactRef;

/// Default largest attachment copied into the workspace.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;
const INPUTS: [&str; 2] = [".langbot", "inputs"];
const MANIFEST: [&str; 2] = [".langbot", "inputs.json"];

/// One input file as the harness is told about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Stable id, e.g. `f_3a9c0e12b4d7`: what `read_files` takes.
    pub id: String,
    /// File name as the user sent it (for display).
    pub name: String,
    /// `document`, `image`, `audio`, `video`.
    pub kind: String,
    /// MIME type, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Host artifact id, when the file is in the artifact store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
    /// Where the copy is, relative to the workspace, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Why there is no copy, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The stable id of an attachment: from its artifact id, else the host's
/// reference, platform id, URL or content; position only as a last resort.
pub fn input_file_id(attachment: &ArtifactRef, run_id: &str, index: usize) -> String {
    let basis = attachment
        .artifact_id
        .as_ref()
        .map(|id| format!("artifact:{id}"))
        .or_else(|| attachment.reference.as_ref().map(|r| format!("ref:{r}")))
        .or_else(|| attachment.id.as_ref().map(|i| format!("id:{i}")))
        .or_else(|| attachment.url.as_ref().map(|u| format!("url:{u}")))
        .or_else(|| {
            attachment
                .content
                .as_ref()
                .map(|c| format!("content:{}", short_hash(c)))
        })
        .unwrap_or_else(|| format!("run:{run_id}:{index}"));
    format!("f_{}", short_hash(&basis))
}

fn kind_of(attachment: &ArtifactRef) -> String {
    let mime = attachment.mime_type.as_deref().unwrap_or("");
    let declared = attachment.kind.as_deref().unwrap_or("");
    let kind = match (declared, mime.split('/').next().unwrap_or("")) {
        ("image", _) | (_, "image") => "image",
        ("voice" | "audio", _) | (_, "audio") => "audio",
        ("video", _) | (_, "video") => "video",
        _ => "document",
    };
    kind.to_string()
}

fn file_name(attachment: &ArtifactRef, id: &str) -> String {
    let name = attachment.name.clone().unwrap_or_else(|| id.to_string());
    // Keep the user's name when it is safe as is; otherwise a safe slug.
    match check_component(&name, &name) {
        Ok(ok) if ok.len() <= 120 => ok.to_string(),
        _ => safe_component(&name),
    }
}

/// Decode inline content: base64, or a `data:...;base64,` URL.
fn inline_bytes(content: &str) -> Option<Vec<u8>> {
    let payload = match content.strip_prefix("data:") {
        Some(rest) => rest.split_once(";base64,")?.1,
        None => content,
    };
    base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .ok()
}

async fn read_artifact(
    host: &GrantedHost,
    artifact_id: &str,
    size: u64,
) -> Result<Vec<u8>, String> {
    let chunk = host.grant().caps.max_read_length.max(1);
    let mut bytes = Vec::with_capacity(size as usize);
    loop {
        let read = ArtifactReadCall {
            artifact_id: artifact_id.to_string(),
            offset: bytes.len() as u64,
            length: chunk,
        };
        let part = host.call(&read).await.map_err(|e| e.to_string())?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(part.content_base64.unwrap_or_default())
            .map_err(|e| format!("host sent invalid base64: {e}"))?;
        if data.is_empty() && part.has_more {
            return Err("host returned an empty range".into());
        }
        bytes.extend_from_slice(&data);
        if !part.has_more || bytes.len() as u64 >= size {
            return Ok(bytes);
        }
    }
}

/// Describe every attachment and copy the small ones into the workspace.
pub async fn project(
    ws: &ConfinedDir,
    attachments: &[ArtifactRef],
    run_id: &str,
    host: Option<&GrantedHost>,
    max_bytes: u64,
    report: &mut Report,
) -> Result<Vec<InputFile>, ProjectionError> {
    let mut known: BTreeMap<String, InputFile> = ws
        .read(&MANIFEST)?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let described: Vec<(String, String)> = attachments
        .iter()
        .enumerate()
        .map(|(index, a)| {
            let id = input_file_id(a, run_id, index);
            let stored = format!("{id}-{}", file_name(a, &id));
            (id, stored)
        })
        .collect();
    let stored_names: Vec<&str> = described.iter().map(|(_, s)| s.as_str()).collect();
    let on_disk = ws.file_lens(&INPUTS, &stored_names)?;
    let mut files = Vec::with_capacity(attachments.len());
    for ((attachment, (id, stored)), disk_len) in attachments.iter().zip(described).zip(on_disk) {
        let name = stored[id.len() + 1..].to_string();
        let rel = format!("{}/{stored}", INPUTS.join("/"));
        let parts = [INPUTS[0], INPUTS[1], stored.as_str()];
        let mut file = InputFile {
            id: id.clone(),
            name: attachment.name.clone().unwrap_or_else(|| name.clone()),
            kind: kind_of(attachment),
            mime_type: attachment.mime_type.clone(),
            size: attachment.size,
            artifact_id: attachment.artifact_id.clone(),
            path: None,
            note: None,
        };
        // Copied in an earlier turn and still there: no host call at all.
        if let Some(prev) = known
            .get(&id)
            .filter(|p| p.path.as_deref() == Some(rel.as_str()))
            && disk_len == prev.size
        {
            report.file(rel, super::WriteOutcome::Unchanged);
            files.push(prev.clone());
            continue;
        }
        let bytes: Result<Vec<u8>, String> = if let Some(content) = &attachment.content {
            inline_bytes(content).ok_or_else(|| "inline content is not base64".to_string())
        } else if let (Some(artifact_id), Some(host)) = (&attachment.artifact_id, host) {
            let metadata = ArtifactMetadataCall {
                artifact_id: artifact_id.clone(),
            };
            match host.call(&metadata).await {
                Ok(meta) => {
                    let size = meta.size_bytes.unwrap_or(0);
                    file.size = Some(size);
                    file.mime_type = file.mime_type.or(meta.mime_type);
                    if size > max_bytes {
                        Err(format!(
                            "{size} bytes, over the {max_bytes}-byte copy limit: read it with the artifact tools"
                        ))
                    } else {
                        read_artifact(host, artifact_id, size).await
                    }
                }
                Err(e) => Err(e.to_string()),
            }
        } else if attachment.url.is_some() {
            Err("available by URL only; the bridge does not download".to_string())
        } else {
            Err("no content, artifact or URL to read".to_string())
        };
        match bytes {
            Ok(bytes) if bytes.len() as u64 <= max_bytes => {
                file.size = Some(bytes.len() as u64);
                let outcome = ws.write(&parts, &bytes)?;
                report.file(rel.clone(), outcome);
                file.path = Some(rel);
            }
            Ok(bytes) => {
                file.note = Some(format!(
                    "{} bytes, over the {max_bytes}-byte copy limit",
                    bytes.len()
                ));
            }
            Err(note) => file.note = Some(note),
        }
        known.insert(id, file.clone());
        files.push(file);
    }
    if !attachments.is_empty() {
        let mut bytes = serde_json::to_vec_pretty(&known).unwrap_or_default();
        bytes.push(b'\n');
        let outcome = ws.write(&MANIFEST, &bytes)?;
        report.file(MANIFEST.join("/"), outcome);
    }
    Ok(files)
}
