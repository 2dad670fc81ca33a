//! Claude Code's MCP config: a JSON file (`mcpServers`) passed with
//! `--mcp-config`, `${VAR}` expanded by Claude Code itself.

use crate::projection::mcp_config::{JsonFile, render_json};
use crate::projection::{McpFormat, McpServer, RenderedMcp};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "claude-json",
    render,
};

fn render(servers: &[McpServer]) -> RenderedMcp {
    render_json(servers, JsonFile::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;
    use serde_json::Value;

    #[test]
    fn claude_json_references_the_token_by_name() {
        let rendered = (FORMAT.render)(&sample_servers());
        let doc: Value = serde_json::from_slice(&rendered.file.as_ref().unwrap().bytes).unwrap();
        assert_eq!(
            doc["mcpServers"]["langbot"]["headers"]["Authorization"],
            "Bearer ${LANGBOT_MCP_TOKEN}"
        );
        assert_eq!(doc["mcpServers"]["langbot"]["type"], "http");
        assert_eq!(doc["mcpServers"]["tools"]["command"], "npx");
        assert!(rendered.overrides.is_empty());
    }
}
