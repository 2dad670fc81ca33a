//! Codex's MCP servers: `-c mcp_servers.NAME.KEY=VALUE` overrides on its
//! command line, secrets never among them (the bearer by variable name,
//! an extra server's values in the child's environment).

use crate::projection::mcp_config::{env_name, toml_string};
use crate::projection::{McpFormat, McpServer, RenderedMcp, Transport};

/// The format.
pub const FORMAT: McpFormat = McpFormat {
    name: "codex-overrides",
    render,
};

fn render(servers: &[McpServer]) -> RenderedMcp {
    let mut out = RenderedMcp::default();
    for server in servers {
        let key = |k: &str| format!("mcp_servers.{}.{k}", server.name);
        match &server.transport {
            Transport::Stdio { command, args, env } => {
                out.overrides
                    .push(format!("{}={}", key("command"), toml_string(command)));
                let args: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
                out.overrides
                    .push(format!("{}=[{}]", key("args"), args.join(",")));
                if !env.is_empty() {
                    // Values go to the child's env; Codex passes these names through.
                    let names: Vec<String> = env.keys().map(|k| toml_string(k)).collect();
                    out.overrides
                        .push(format!("{}=[{}]", key("env_vars"), names.join(",")));
                    out.child_env.extend(env.clone());
                }
            }
            Transport::Http {
                url,
                headers,
                bearer_env,
            } => {
                out.overrides
                    .push(format!("{}={}", key("url"), toml_string(url)));
                if let Some(var) = bearer_env {
                    out.overrides.push(format!(
                        "{}={}",
                        key("bearer_token_env_var"),
                        toml_string(var)
                    ));
                }
                if !headers.is_empty() {
                    let pairs: Vec<String> = headers
                        .iter()
                        .map(|(name, value)| {
                            let var = env_name(&server.name, name);
                            out.child_env.insert(var.clone(), value.clone());
                            format!("{}={}", toml_string(name), toml_string(&var))
                        })
                        .collect();
                    out.overrides.push(format!(
                        "{}={{{}}}",
                        key("env_http_headers"),
                        pairs.join(",")
                    ));
                }
            }
        }
        if server.auto_approve {
            out.overrides.push(format!(
                "{}=\"approve\"",
                key("default_tools_approval_mode")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::mcp_config::sample_servers;

    #[test]
    fn codex_overrides_carry_no_secret_values() {
        let rendered = (FORMAT.render)(&sample_servers());
        assert_eq!(
            rendered.overrides,
            [
                "mcp_servers.langbot.url=\"http://127.0.0.1:7000/mcp\"",
                "mcp_servers.langbot.bearer_token_env_var=\"LANGBOT_MCP_TOKEN\"",
                "mcp_servers.langbot.default_tools_approval_mode=\"approve\"",
                "mcp_servers.tools.command=\"npx\"",
                "mcp_servers.tools.args=[\"-y\",\"pkg \\\"x\\\"\"]",
                "mcp_servers.tools.env_vars=[\"API_KEY\"]",
            ]
        );
        assert!(rendered.overrides.iter().all(|o| !o.contains("sk-secret")));
        assert_eq!(rendered.child_env["API_KEY"], "sk-secret-value-123456");
    }
}
