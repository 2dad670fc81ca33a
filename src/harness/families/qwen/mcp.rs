//! Qwen Code's MCP config: a JSON file passed with `--mcp-config`, each
//! server `alwaysLoadTools` (else its tools hide behind a tool search).
//! Qwen does not expand `${VAR}`: the file holds the token while the turn
//! runs (see [`crate::projection::McpFile::fill_env`]).

use serde_json::{Value, json};

use crate::projection::mcp_config::{MCP_CONFIG, render_settings};
use crate::projection::{McpFormat, McpServer, RenderedMcp};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "qwen-json",
    render,
};

fn render(servers: &[McpServer]) -> RenderedMcp {
    render_settings(
        servers,
        &MCP_CONFIG,
        &[("alwaysLoadTools", json!(true))],
        ("", Value::Null),
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;

    #[test]
    fn qwen_json_loads_every_tool_and_is_filled_in_by_the_run() {
        let qwen = (FORMAT.render)(&sample_servers());
        let file = qwen.file.as_ref().unwrap();
        assert_eq!(file.path, [".langbot", "mcp.json"]);
        assert!(
            file.fill_env,
            "Qwen reads values as written: the run fills the token in"
        );
        let doc: Value = serde_json::from_slice(&file.bytes).unwrap();
        assert!(doc.get("security").is_none() && doc.get("").is_none());
        assert_eq!(doc["mcpServers"]["langbot"]["alwaysLoadTools"], true);
        assert_eq!(doc["mcpServers"]["langbot"]["trust"], true);
        assert_eq!(
            doc["mcpServers"]["langbot"]["headers"]["Authorization"], "Bearer ${LANGBOT_MCP_TOKEN}",
            "the rendered file never holds the token"
        );
    }
}
