//! An ACP agent's MCP servers: the `mcpServers` of `session/new`, in the
//! protocol (never a file); the bearer stays `${LANGBOT_MCP_TOKEN}` until
//! the session opens.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::projection::{McpFormat, McpServer, RenderedMcp, Transport};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "acp",
    render,
};

/// ACP's `McpServer`s: stdio `{name, command, args, env: [{name, value}]}`
/// (no `type`), HTTP `{type: "http", name, url, headers: [{name, value}]}`.
fn render(servers: &[McpServer]) -> RenderedMcp {
    let pairs = |map: &BTreeMap<String, String>| -> Vec<Value> {
        map.iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect()
    };
    let list: Vec<Value> = servers
        .iter()
        .map(|server| match &server.transport {
            Transport::Stdio { command, args, env } => {
                json!({"name": server.name, "command": command, "args": args, "env": pairs(env)})
            }
            Transport::Http {
                url,
                headers,
                bearer_env,
            } => {
                let mut headers = pairs(headers);
                if let Some(var) = bearer_env {
                    headers.push(
                        json!({"name": "Authorization", "value": format!("Bearer ${{{var}}}")}),
                    );
                }
                json!({"type": "http", "name": server.name, "url": url, "headers": headers})
            }
        })
        .collect();
    RenderedMcp {
        session: Some(Value::Array(list)),
        ..RenderedMcp::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;
    use crate::projection::{BRIDGE_SERVER, TOKEN_ENV, fill_mcp_env};

    #[test]
    fn acp_servers_reference_the_token_until_the_session_opens() {
        let rendered = (FORMAT.render)(&sample_servers());
        assert!(rendered.file.is_none() && rendered.overrides.is_empty());
        let session = rendered.session.unwrap();
        let bridge = &session[0];
        assert_eq!(bridge["type"], "http");
        assert_eq!(bridge["name"], BRIDGE_SERVER);
        assert_eq!(
            bridge["headers"][0],
            json!({"name": "Authorization", "value": "Bearer ${LANGBOT_MCP_TOKEN}"})
        );
        let env = BTreeMap::from([(TOKEN_ENV.to_string(), "tok-1".to_string())]);
        let filled = fill_mcp_env(&session, &env);
        assert_eq!(filled[0]["headers"][0]["value"], "Bearer tok-1");
    }
}
