//! Gemini CLI's MCP config: the user settings in the conversation's home,
//! `.gemini/settings.json` (`mcpServers`, HTTP as `httpUrl`, `trust` for
//! the bridge's own server, and the auth type a headless Gemini needs),
//! never the workspace's, which a repository may track.

use serde_json::json;

use crate::projection::mcp_config::render_settings;
use crate::projection::{McpFormat, McpServer, RenderedMcp, paths};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "gemini-settings",
    render,
};

/// Where Gemini CLI reads its user settings: in the conversation's home
/// (`GEMINI_CLI_HOME`), out of a repository's reach.
const SETTINGS: [&str; 4] = [paths::HOME[0], paths::HOME[1], ".gemini", "settings.json"];

fn render(servers: &[McpServer]) -> RenderedMcp {
    // With only a key in the environment, Gemini picks an auth type it
    // refuses headless.
    render_settings(
        servers,
        &SETTINGS,
        &[],
        (
            "security",
            json!({"auth": {"selectedType": "gemini-api-key"}}),
        ),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;
    use serde_json::Value;

    #[test]
    fn gemini_settings_trust_only_the_bridges_server() {
        let gemini = (FORMAT.render)(&sample_servers());
        let file = gemini.file.as_ref().unwrap();
        assert_eq!(
            file.path,
            [".langbot", "home", ".gemini", "settings.json"],
            "the home's, not a file a repository may track"
        );
        assert!(!file.fill_env, "Gemini expands ${{VAR}} itself");
        let doc: Value = serde_json::from_slice(&file.bytes).unwrap();
        assert_eq!(doc["security"]["auth"]["selectedType"], "gemini-api-key");
        let langbot = &doc["mcpServers"]["langbot"];
        assert!(langbot["httpUrl"].is_string() && langbot["url"].is_null());
        assert_eq!(
            langbot["headers"]["Authorization"],
            "Bearer ${LANGBOT_MCP_TOKEN}"
        );
        assert_eq!(langbot["trust"], true);
        assert_eq!(doc["mcpServers"]["tools"]["trust"], false);
    }
}
