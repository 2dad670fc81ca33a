//! Cline's MCP servers: its settings file in the conversation's home
//! (`~/.cline/data/settings/cline_mcp_settings.json`, `mcpServers` as
//! Claude Code's but HTTP as `streamableHttp`: a server of another type
//! it skips without a word). Cline expands no `${VAR}`, so the file holds
//! the token only while the turn runs, as Qwen Code's does.

use crate::projection::mcp_config::{JsonFile, render_json};
use crate::projection::{McpFormat, McpServer, RenderedMcp, paths};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "cline-settings",
    render,
};

/// Where Cline reads its MCP servers: in the conversation's home.
const SETTINGS: [&str; 6] = [
    paths::HOME[0],
    paths::HOME[1],
    ".cline",
    "data",
    "settings",
    "cline_mcp_settings.json",
];

fn render(servers: &[McpServer]) -> RenderedMcp {
    render_json(
        servers,
        JsonFile {
            path: &SETTINGS,
            http_type: "streamableHttp",
            all_tools: false,
            fill_env: true,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;
    use serde_json::Value;

    #[test]
    fn the_settings_are_in_the_home_and_filled_in_by_the_run() {
        let rendered = (FORMAT.render)(&sample_servers());
        let file = rendered.file.as_ref().unwrap();
        assert_eq!(
            file.path,
            [
                ".langbot",
                "home",
                ".cline",
                "data",
                "settings",
                "cline_mcp_settings.json"
            ]
        );
        assert!(file.fill_env, "Cline reads values as written");
        let doc: Value = serde_json::from_slice(&file.bytes).unwrap();
        assert_eq!(doc["mcpServers"]["langbot"]["type"], "streamableHttp");
        assert_eq!(doc["mcpServers"]["tools"]["type"], "stdio");
        assert_eq!(
            doc["mcpServers"]["langbot"]["headers"]["Authorization"], "Bearer ${LANGBOT_MCP_TOKEN}",
            "the rendered file never holds the token"
        );
        assert!(
            rendered.session.is_none(),
            "session/new's servers it ignores"
        );
    }
}
