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

/// Which format a harness reads its MCP servers in: its family's
/// renderer (`harness/families/<name>/mcp.rs`), from the shapes below
/// where formats share one.
#[derive(Clone, Copy)]
pub struct McpFormat {
    /// Its name, as `adapters show` says it.
    pub name: &'static str,
    /// The servers in this format.
    pub render: fn(&[McpServer]) -> RenderedMcp,
}

by_name!(McpFormat);

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

/// `text` as a TOML basic string.
pub fn toml_string(text: &str) -> String {
    // A JSON string literal is a valid TOML basic string.
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

/// The variable that carries `server`'s value of `key` to the harness.
pub fn env_name(server: &str, key: &str) -> String {
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
    (format.render)(servers)
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
pub fn json_headers(headers: &BTreeMap<String, String>, bearer_env: Option<&str>) -> Value {
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

/// Where the bridge keeps a harness's MCP config file of its own.
pub const MCP_CONFIG: [&str; 2] = super::workspace::paths::MCP_CONFIG;

/// The settings shape Gemini CLI and Qwen Code share: `mcpServers` with
/// HTTP servers as `httpUrl`, the bridge's own server `trust`ed (its calls
/// are authorized by the run's grant; a headless harness would otherwise
/// decline them), `extra` keys on every server, `top` beside them.
pub fn render_settings(
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

/// How a CLI's `mcpServers` JSON file differs from Claude Code's, which is
/// [`JsonFile::default`].
#[derive(Debug, Clone, Copy)]
pub struct JsonFile {
    /// Where it goes, relative to the workspace.
    pub path: &'static [&'static str],
    /// The `type` of an HTTP server (`http`; Cline's `streamableHttp`).
    pub http_type: &'static str,
    /// Each server's `tools: ["*"]`, without which Copilot offers none.
    pub all_tools: bool,
    /// The harness expands no `${VAR}`: the run fills the file in for the
    /// turn ([`McpFile::fill_env`]).
    pub fill_env: bool,
}

impl Default for JsonFile {
    fn default() -> Self {
        JsonFile {
            path: &MCP_CONFIG,
            http_type: "http",
            all_tools: false,
            fill_env: false,
        }
    }
}

/// The `mcpServers` JSON file Claude Code, Copilot CLI and Cline read,
/// each as its `shape` says.
pub fn render_json(servers: &[McpServer], shape: JsonFile) -> RenderedMcp {
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
                json!({"type": shape.http_type, "url": url, "headers": headers})
            }
        };
        let mut entry = entry;
        if shape.all_tools {
            entry["tools"] = json!(["*"]);
        }
        map.insert(server.name.clone(), entry);
    }
    let doc = json!({ "mcpServers": map });
    let mut bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    bytes.push(b'\n');
    RenderedMcp {
        file: Some(McpFile {
            path: shape.path,
            bytes,
            fill_env: shape.fill_env,
        }),
        ..RenderedMcp::default()
    }
}

/// Two servers as a family's format test renders them: the bridge's own
/// (HTTP, its bearer by name) and an extra one (stdio, a secret in its
/// environment).
#[cfg(test)]
pub(crate) fn sample_servers() -> Vec<McpServer> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_env_fills_known_names_and_leaves_the_rest() {
        let env = BTreeMap::from([(TOKEN_ENV.to_string(), "tok-1".to_string())]);
        assert_eq!(
            fill_env(&json!({"v": ["Bearer ${LANGBOT_MCP_TOKEN}"]}), &env),
            json!({"v": ["Bearer tok-1"]})
        );
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
