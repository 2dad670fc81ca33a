//! MCP server configuration in each harness's own format, from one neutral
//! list: the bridge's own host-API server plus the extra servers the
//! binding picks by name from those the operator configured.
//!
//! Which extra servers exist (their command, URL, environment and
//! secrets) is operator configuration only: a server is a program that
//! runs with the harness's secrets, so a run's context, which a less
//! trusted caller may write, can only name one.
//!
//! Secrets never ride argv: the bridge's bearer token is referenced by
//! environment variable name (Claude Code expands `${VAR}` in its MCP
//! config; Codex reads `bearer_token_env_var`), and an extra server's env
//! values and headers travel in the child's environment, not in `-c` flags.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use serde::{Deserialize, Serialize};

use super::ProjectionError;

/// Name of the bridge's own server: tools appear as `mcp__langbot__...`.
pub const BRIDGE_SERVER: &str = "langbot";
/// Environment variable that carries the run's bearer token to the harness.
pub const TOKEN_ENV: &str = "LANGBOT_MCP_TOKEN";
/// Environment variable that carries the bridge's MCP endpoint to the
/// harness: the port is chosen when the bridge starts, so a stdio relay
/// the harness launches (`mcp-stdio`) learns it from here.
pub const URL_ENV: &str = "LANGBOT_MCP_URL";

/// An extra MCP server as the operator defines it (`bridge.yaml`, the
/// plugin's runner settings, `run --mcp-servers FILE`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraServer {
    /// Command of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Arguments of a stdio server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of a stdio server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// URL of a streamable-HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers of an HTTP server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// The operator's extra servers, by name: what a binding may pick from.
pub type McpCatalog = BTreeMap<String, ExtraServer>;

/// Check an operator's catalog when it is loaded, so a mistake is found at
/// start, naming the server, rather than on some later turn.
pub fn check_catalog(catalog: &McpCatalog) -> Result<(), ProjectionError> {
    for (name, spec) in catalog {
        McpServer::extra(name, spec)?;
        for key in spec.env.keys() {
            let valid = !key.is_empty()
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                return Err(ProjectionError::Setting(format!(
                    "mcp_servers.{name}.env: `{key}` is not an environment variable name"
                )));
            }
        }
    }
    Ok(())
}

/// The servers a binding picks, by name, from the operator's catalog.
pub fn pick(catalog: &McpCatalog, names: &[String]) -> Result<Vec<McpServer>, ProjectionError> {
    names
        .iter()
        .map(|name| match catalog.get(name) {
            Some(spec) => McpServer::extra(name, spec),
            None => Err(ProjectionError::Binding(format!(
                "mcp_servers: `{}` is not an MCP server the operator configured ({})",
                name.escape_debug().take(64).collect::<String>(),
                if catalog.is_empty() {
                    "none are".to_string()
                } else {
                    format!(
                        "configured: {}",
                        catalog.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                }
            ))),
        })
        .collect()
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on stdio.
    Stdio {
        /// Program to run.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its environment (values may be secrets).
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        /// Endpoint URL.
        url: String,
        /// Literal headers (values may be secrets).
        headers: BTreeMap<String, String>,
        /// Environment variable holding a bearer token, if any.
        bearer_env: Option<String>,
    },
}

/// One MCP server, harness-neutral.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// Server name (tool namespace).
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Whether its tools run without asking for approval (the bridge's own
    /// server: its calls are authorized by the run's grant).
    pub auto_approve: bool,
}

impl McpServer {
    /// The bridge's host-API server for a run, at `url`, token by env var.
    pub fn bridge(url: &str) -> Self {
        McpServer {
            name: BRIDGE_SERVER.into(),
            transport: Transport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
                bearer_env: Some(TOKEN_ENV.into()),
            },
            auto_approve: true,
        }
    }

    /// An operator's extra server from the binding.
    pub fn extra(name: &str, spec: &ExtraServer) -> Result<Self, ProjectionError> {
        let bad = |reason| ProjectionError::Binding(format!("mcp_servers.{name}: {reason}"));
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(bad("a server name is 1-64 letters, digits, `_` or `-`"));
        }
        if name == BRIDGE_SERVER {
            return Err(bad("`langbot` is the bridge's own server"));
        }
        let transport = match (&spec.command, &spec.url) {
            (Some(command), None) => Transport::Stdio {
                command: command.clone(),
                args: spec.args.clone(),
                env: spec.env.clone(),
            },
            (None, Some(url)) => Transport::Http {
                url: url.clone(),
                headers: spec.headers.clone(),
                bearer_env: None,
            },
            _ => return Err(bad("give exactly one of `command` (stdio) or `url` (HTTP)")),
        };
        Ok(McpServer {
            name: name.into(),
            transport,
            auto_approve: false,
        })
    }
}

/// Which format a harness reads its MCP servers in (from its adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpFormat {
    /// Claude Code: a JSON file (`mcpServers`) passed with `--mcp-config`.
    ClaudeJson,
    /// Codex: `-c mcp_servers.NAME.KEY=VALUE` overrides.
    CodexOverrides,
    /// An ACP agent: the `mcpServers` of `session/new`, in the protocol.
    Acp,
    /// Copilot CLI: a JSON file (`mcpServers`, each with `tools: ["*"]`)
    /// passed with `--additional-mcp-config @FILE`.
    CopilotJson,
    /// Gemini CLI: the user settings in the conversation's home,
    /// `.gemini/settings.json` (`mcpServers`, HTTP as `httpUrl`, `trust`
    /// for the bridge's own server, and the auth type a headless Gemini
    /// needs), never the workspace's, which a repository may track.
    GeminiSettings,
    /// Qwen Code: a JSON file passed with `--mcp-config`, each server
    /// `alwaysLoadTools` (else its tools hide behind a tool search). Qwen
    /// does not expand `${VAR}`: the file holds the token while the turn
    /// runs (see [`McpFile::fill_env`]).
    QwenJson,
}

/// An MCP config the harness reads from a file in the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpFile {
    /// Where, relative to the workspace.
    pub path: &'static [&'static str],
    /// The content, secrets as `${VAR}`.
    pub bytes: Vec<u8>,
    /// The harness does not expand `${VAR}` itself: the run writes the
    /// file with the values filled in just before the harness starts
    /// (0600) and puts this content back once the turn ends, so no token
    /// outlives its turn on disk.
    pub fill_env: bool,
}

/// A rendered MCP configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderedMcp {
    /// The config file (0600), when the format is a file.
    pub file: Option<McpFile>,
    /// Config overrides for the command line; never carry secret values.
    pub overrides: Vec<String>,
    /// Variables the launcher must add to the child's environment (secret
    /// values of extra servers), besides the run token.
    pub child_env: BTreeMap<String, String>,
    /// The servers in the Agent Client Protocol's form, for `session/new`;
    /// the bearer token appears as `${LANGBOT_MCP_TOKEN}`, filled in by
    /// [`fill_env`] when the session opens (never written to a file).
    pub session: Option<Value>,
}

fn toml_string(text: &str) -> String {
    // A JSON string literal is a valid TOML basic string.
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

fn env_name(server: &str, key: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("LANGBOT_MCP_{}_{}", clean(server), clean(key))
}

/// Render `servers` in `format`.
pub fn render(servers: &[McpServer], format: McpFormat) -> RenderedMcp {
    match format {
        McpFormat::ClaudeJson => render_claude(servers),
        McpFormat::CodexOverrides => render_codex(servers),
        McpFormat::Acp => render_acp(servers),
        McpFormat::CopilotJson => render_json(servers, true),
        // With only a key in the environment, Gemini picks an auth type
        // it refuses headless.
        McpFormat::GeminiSettings => render_settings(
            servers,
            &GEMINI_SETTINGS,
            &[],
            (
                "security",
                json!({"auth": {"selectedType": "gemini-api-key"}}),
            ),
            false,
        ),
        McpFormat::QwenJson => render_settings(
            servers,
            &MCP_CONFIG,
            &[("alwaysLoadTools", json!(true))],
            ("", Value::Null),
            true,
        ),
    }
}

/// ACP's `McpServer`s: stdio `{name, command, args, env: [{name, value}]}`
/// (no `type`), HTTP `{type: "http", name, url, headers: [{name, value}]}`.
fn render_acp(servers: &[McpServer]) -> RenderedMcp {
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

/// `value` with every `${VAR}` in its strings replaced by `env`'s value
/// (an unknown name by nothing): the session's servers, just before they
/// go to the agent.
pub fn fill_env(value: &Value, env: &BTreeMap<String, String>) -> Value {
    match value {
        Value::String(text) => {
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                let Some(len) = rest[start + 2..].find('}') else {
                    break;
                };
                out.push_str(&rest[..start]);
                let name = &rest[start + 2..start + 2 + len];
                out.push_str(env.get(name).map_or("", String::as_str));
                rest = &rest[start + 3 + len..];
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_env(v, env)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_env(v, env)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// An HTTP server's headers as a JSON object, the bearer as `${VAR}` for
/// the harness (or the run) to fill in.
fn json_headers(headers: &BTreeMap<String, String>, bearer_env: Option<&str>) -> Value {
    let mut map: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if let Some(var) = bearer_env {
        map.insert(
            "Authorization".into(),
            Value::String(format!("Bearer ${{{var}}}")),
        );
    }
    Value::Object(map)
}

/// Where Gemini CLI reads its user settings: in the conversation's home
/// (`GEMINI_CLI_HOME`), out of a repository's reach.
const GEMINI_SETTINGS: [&str; 4] = [
    super::workspace::paths::HOME[0],
    super::workspace::paths::HOME[1],
    ".gemini",
    "settings.json",
];
/// Where the bridge keeps a harness's MCP config file of its own.
const MCP_CONFIG: [&str; 2] = super::workspace::paths::MCP_CONFIG;

/// The settings shape Gemini CLI and Qwen Code share: `mcpServers` with
/// HTTP servers as `httpUrl`, the bridge's own server `trust`ed (its calls
/// are authorized by the run's grant; a headless harness would otherwise
/// decline them), `extra` keys on every server, `top` beside them.
fn render_settings(
    servers: &[McpServer],
    path: &'static [&'static str],
    extra: &[(&str, Value)],
    (top_key, top): (&str, Value),
    fill_env: bool,
) -> RenderedMcp {
    let mut map = serde_json::Map::new();
    for server in servers {
        let mut entry = match &server.transport {
            Transport::Stdio { command, args, env } => {
                json!({"command": command, "args": args, "env": env})
            }
            Transport::Http {
                url,
                headers,
                bearer_env,
            } => {
                let headers = json_headers(headers, bearer_env.as_deref());
                json!({"httpUrl": url, "headers": headers})
            }
        };
        entry["trust"] = json!(server.auto_approve);
        for (key, value) in extra {
            entry[*key] = value.clone();
        }
        map.insert(server.name.clone(), entry);
    }
    let mut doc = json!({ "mcpServers": map });
    if !top.is_null() {
        doc[top_key] = top;
    }
    let mut bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    bytes.push(b'\n');
    RenderedMcp {
        file: Some(McpFile {
            path,
            bytes,
            fill_env,
        }),
        ..RenderedMcp::default()
    }
}

fn render_claude(servers: &[McpServer]) -> RenderedMcp {
    render_json(servers, false)
}

/// The `mcpServers` JSON file Claude Code and Copilot CLI read (`${VAR}`
/// expanded by the harness); `all_tools` adds the `tools: ["*"]` Copilot
/// needs to offer a server's tools at all.
fn render_json(servers: &[McpServer], all_tools: bool) -> RenderedMcp {
    let mut map = serde_json::Map::new();
    for server in servers {
        let entry = match &server.transport {
            Transport::Stdio { command, args, env } => {
                json!({"type": "stdio", "command": command, "args": args, "env": env})
            }
            Transport::Http {
                url,
                headers,
                bearer_env,
            } => {
                let headers = json_headers(headers, bearer_env.as_deref());
                json!({"type": "http", "url": url, "headers": headers})
            }
        };
        let mut entry = entry;
        if all_tools {
            entry["tools"] = json!(["*"]);
        }
        map.insert(server.name.clone(), entry);
    }
    let doc = json!({ "mcpServers": map });
    let mut bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    bytes.push(b'\n');
    RenderedMcp {
        file: Some(McpFile {
            path: &MCP_CONFIG,
            bytes,
            fill_env: false,
        }),
        ..RenderedMcp::default()
    }
}

fn render_codex(servers: &[McpServer]) -> RenderedMcp {
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

    fn servers() -> Vec<McpServer> {
        let extra = ExtraServer {
            command: Some("npx".into()),
            args: vec!["-y".into(), "pkg \"x\"".into()],
            env: BTreeMap::from([("API_KEY".into(), "sk-secret-value-123456".into())]),
            url: None,
            headers: BTreeMap::new(),
        };
        vec![
            McpServer::bridge("http://127.0.0.1:7000/mcp"),
            McpServer::extra("tools", &extra).unwrap(),
        ]
    }

    #[test]
    fn claude_json_references_the_token_by_name() {
        let rendered = render(&servers(), McpFormat::ClaudeJson);
        let doc: Value = serde_json::from_slice(&rendered.file.as_ref().unwrap().bytes).unwrap();
        assert_eq!(
            doc["mcpServers"]["langbot"]["headers"]["Authorization"],
            "Bearer ${LANGBOT_MCP_TOKEN}"
        );
        assert_eq!(doc["mcpServers"]["langbot"]["type"], "http");
        assert_eq!(doc["mcpServers"]["tools"]["command"], "npx");
        assert!(rendered.overrides.is_empty());
    }

    #[test]
    fn gemini_and_qwen_settings_trust_only_the_bridges_server() {
        let gemini = render(&servers(), McpFormat::GeminiSettings);
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

        let qwen = render(&servers(), McpFormat::QwenJson);
        let file = qwen.file.as_ref().unwrap();
        assert_eq!(file.path, [".langbot", "mcp.json"]);
        assert!(
            file.fill_env,
            "Qwen reads values as written: the run fills the token in"
        );
        let doc: Value = serde_json::from_slice(&file.bytes).unwrap();
        assert!(doc.get("security").is_none() && doc.get("").is_none());
        assert_eq!(doc["mcpServers"]["langbot"]["alwaysLoadTools"], true);
        assert_eq!(
            doc["mcpServers"]["langbot"]["headers"]["Authorization"], "Bearer ${LANGBOT_MCP_TOKEN}",
            "the rendered file never holds the token"
        );
    }

    #[test]
    fn codex_overrides_carry_no_secret_values() {
        let rendered = render(&servers(), McpFormat::CodexOverrides);
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

    #[test]
    fn acp_servers_reference_the_token_until_the_session_opens() {
        let rendered = render(&servers(), McpFormat::Acp);
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
        let filled = fill_env(&session, &env);
        assert_eq!(filled[0]["headers"][0]["value"], "Bearer tok-1");
        assert_eq!(
            fill_env(&json!("a ${NOPE} b ${"), &env),
            json!("a  b ${"),
            "an unknown name is empty, an unclosed one left"
        );
    }

    #[test]
    fn bad_extra_servers_are_refused() {
        let spec = ExtraServer {
            command: None,
            args: vec![],
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
        };
        assert!(McpServer::extra("x", &spec).is_err());
        let spec = ExtraServer {
            url: Some("http://x".into()),
            ..spec
        };
        assert!(McpServer::extra("langbot", &spec).is_err());
        assert!(McpServer::extra("a.b", &spec).is_err());
        assert!(McpServer::extra("ok_name", &spec).is_ok());
    }
}
