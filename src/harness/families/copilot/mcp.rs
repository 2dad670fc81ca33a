//! Copilot CLI's MCP config: a JSON file (`mcpServers`, each with
//! `tools: ["*"]`, without which it offers none of a server's tools)
//! passed with `--additional-mcp-config @FILE`.

use crate::projection::mcp_config::{JsonFile, render_json};
use crate::projection::{McpFormat, McpServer, RenderedMcp};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "copilot-json",
    render,
};

fn render(servers: &[McpServer]) -> RenderedMcp {
    render_json(
        servers,
        JsonFile {
            all_tools: true,
            ..JsonFile::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;
    use serde_json::{Value, json};

    #[test]
    fn every_server_offers_all_its_tools() {
        let rendered = (FORMAT.render)(&sample_servers());
        let doc: Value = serde_json::from_slice(&rendered.file.as_ref().unwrap().bytes).unwrap();
        assert_eq!(doc["mcpServers"]["langbot"]["tools"], json!(["*"]));
        assert_eq!(doc["mcpServers"]["tools"]["tools"], json!(["*"]));
    }
}
