//! `artifact_metadata` and `artifact_read`: files the host stores.

use async_trait::async_trait;
use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::HostCall;
use super::text::{is_text, text_head};
use crate::host::{Api, HostApi, HostResult, RunGrant};
use crate::protocol::{AgentAPIError, ArtifactMetadata, ArtifactReadResult};

fn chunk() -> u64 {
    64 * 1024
}

/// An artifact's metadata when this run may see it: its own, one of its
/// inputs, or of a conversation it sees. Otherwise `not_found`, as for a
/// missing one.
async fn visible(
    host: &dyn HostApi,
    grant: &RunGrant,
    artifact_id: &str,
) -> HostResult<ArtifactMetadata> {
    let meta = host.artifact_metadata(&grant.scope, artifact_id).await?;
    let own_run = meta.run_id.as_deref() == Some(grant.run_id());
    if own_run
        || grant.input_artifacts.contains(artifact_id)
        || grant.sees_conversation(meta.conversation_id.as_deref())
    {
        grant.remember_visible(artifact_id);
        Ok(meta)
    } else {
        Err(AgentAPIError::not_found(format!(
            "no artifact `{artifact_id}` in this run's scope"
        )))
    }
}

/// Arguments of `artifact_metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactMetadataCall {
    /// The artifact's id.
    pub artifact_id: String,
}

#[async_trait]
impl HostCall for ArtifactMetadataCall {
    const TOOL: &'static str = "artifact_metadata";
    const ACTION: &'static str = "artifact_metadata";
    const API: Api = Api::ArtifactMetadata;
    const DESCRIPTION: &'static str =
        "What an artifact (a file the host stores) is: name, type, size, digest.";
    type Output = ArtifactMetadata;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!("artifact:{}", self.artifact_id)
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<ArtifactMetadata> {
        visible(host, grant, &self.artifact_id).await
    }
}

/// Arguments of `artifact_read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactReadCall {
    /// The artifact's id.
    pub artifact_id: String,
    /// Byte offset to start at.
    #[serde(default)]
    pub offset: u64,
    /// How many bytes (default 64 KiB); read on with `offset` while `has_more`.
    #[serde(default = "chunk")]
    pub length: u64,
}

#[async_trait]
impl HostCall for ArtifactReadCall {
    const TOOL: &'static str = "artifact_read";
    const ACTION: &'static str = "artifact_read";
    const API: Api = Api::ArtifactRead;
    const DESCRIPTION: &'static str = "Bytes of an artifact by range: text comes back as text, binary as base64. Continue with offset while has_more is true.";
    type Output = ArtifactReadResult;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!("artifact:{}", self.artifact_id)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        let max = grant.caps.max_read_length;
        if self.length > max {
            return Err(AgentAPIError::too_large(format!(
                "read of {} bytes exceeds the limit of {max}; read in ranges",
                self.length
            )));
        }
        if self.length == 0 {
            return Err(AgentAPIError::invalid_argument("length must be at least 1"));
        }
        Ok(())
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<ArtifactReadResult> {
        // Visibility does not change within a run: check it once per
        // artifact, not once per range read.
        if !grant.was_visible(&self.artifact_id) {
            visible(host, grant, &self.artifact_id).await?;
        }
        host.artifact_read(&grant.scope, &self.artifact_id, self.offset, self.length)
            .await
    }

    fn reply(&self, read: ArtifactReadResult) -> HostResult<Value> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(read.content_base64.as_deref().unwrap_or(""))
            .map_err(|e| AgentAPIError::runtime(format!("host sent invalid base64: {e}")))?;
        let mut out = json!({
            "artifact_id": read.artifact_id,
            "mime_type": read.mime_type,
            "size_bytes": read.size_bytes,
            "offset": read.offset,
            "length": read.length,
            "has_more": read.has_more,
        });
        let text = text_head(&bytes, read.has_more)
            .filter(|text| is_text(read.mime_type.as_deref(), text.as_bytes()));
        match text {
            Some(text) => {
                // A character cut at the end is left for the next read.
                out["length"] = json!(text.len());
                out["text"] = Value::String(text.to_string());
            }
            None => out["content_base64"] = Value::String(read.content_base64.unwrap_or_default()),
        }
        Ok(out)
    }
}
