//! The MCP config file of a harness that cannot expand `${VAR}` (Qwen
//! Code): the run's token is written into it for the turn and taken out
//! again however the turn ends, so no token outlives its turn on disk.

use std::collections::BTreeMap;

use crate::projection::{ConfinedDir, McpFile, ProjectionError, fill_mcp_env};

/// An MCP config file holding the turn's secrets (for a harness that does
/// not expand `${VAR}`): written filled in for the turn, put back as
/// rendered (the secrets as `${VAR}`) when dropped, however the turn ends.
/// It keeps its own handle on the folder (a shared descriptor) and the
/// rendered content, so it can live beside the projection it came from.
pub(in crate::run) struct FilledMcpFile {
    dir: ConfinedDir,
    file: McpFile,
}

impl FilledMcpFile {
    pub(in crate::run) fn write(
        dir: &ConfinedDir,
        file: &McpFile,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, ProjectionError> {
        let filled = serde_json::from_slice::<serde_json::Value>(&file.bytes)
            .map(|doc| fill_mcp_env(&doc, env))
            .and_then(|doc| serde_json::to_vec_pretty(&doc))
            .map_err(|e| ProjectionError::Binding(format!("the MCP config: {e}")))?;
        dir.write(file.path, &filled)?;
        Ok(FilledMcpFile {
            dir: dir.clone(),
            file: file.clone(),
        })
    }
}

impl Drop for FilledMcpFile {
    fn drop(&mut self) {
        if let Err(e) = self.dir.write(self.file.path, &self.file.bytes) {
            tracing::error!(error = %e, "cannot take the token out of the MCP config file");
        }
    }
}
