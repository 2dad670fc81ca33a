//! The streamable-HTTP transport: one server on 127.0.0.1 for every run.
//! Each request names its run with `Authorization: Bearer <run token>`;
//! a wrong, missing or dead token is answered 401 before any MCP handling,
//! and the refusal is audited. A request the MCP transport itself turns
//! down (a body over the limit, JSON-RPC it cannot read, a foreign
//! `Origin`) never reaches a tool: the same layer audits that refusal
//! against the token's run.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientRequest, ErrorCode as RpcCode, InitializeRequest,
    JsonRpcMessage, ListToolsRequest,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::RunTools;
use crate::host::{GrantedHost, Grants};
use crate::http_server::ConnectionMemo;
use crate::protocol::{AgentAPIError, ErrorCode};
use sha2::Digest as _;

/// How a harness must authenticate, for error messages and docs.
pub const TOKEN_HEADER_HINT: &str = "Authorization: Bearer <run token>";

/// Largest tool-call request the server reads. A storage value at the
/// grant's default cap (4 MiB) travels base64-encoded (a third larger) in
/// JSON: the transport must not refuse what the grant would accept.
const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// A running MCP server.
pub struct McpHttpServer {
    url: String,
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// The same server as a harness's door answers it (see
    /// [`McpHttpServer::door_app`]).
    door_app: Router,
}

/// The token of an `Authorization` value: the scheme is case-insensitive
/// (RFC 9110), the token is taken as sent.
fn bearer_token(value: &str) -> &str {
    match value.trim_start().split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => "",
    }
}

/// Most of a refusal's body quoted in its audit detail.
const REFUSAL_QUOTE_BYTES: usize = 512;

/// The §9 code an HTTP refusal of the MCP transport stands for.
fn refusal_code(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ErrorCode::Unauthorized,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        s if s.is_server_error() => ErrorCode::RuntimeError,
        _ => ErrorCode::InvalidArgument,
    }
}

/// Audit a request of `host`'s run that the MCP transport answered with an
/// error status (its handler, which audits tool calls, never ran), and
/// hand the answer on unchanged. The refusal's own words are the detail.
async fn audit_refusal(host: &GrantedHost, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    // rmcp builds its refusals in memory: reading one whole costs nothing
    // more, and the client still gets every byte of it.
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let said = String::from_utf8_lossy(&bytes[..bytes.len().min(REFUSAL_QUOTE_BYTES)]);
    let reason = match said.trim() {
        "" => format!("the MCP transport answered {}", parts.status),
        text => format!("the MCP transport answered {}: {text}", parts.status),
    };
    audit(host, AgentAPIError::new(refusal_code(parts.status), reason)).await;
    Response::from_parts(parts, Body::from(bytes))
}

/// One audit row (and metric) for a request turned down before any tool.
async fn audit(host: &GrantedHost, err: AgentAPIError) {
    host.refused("unknown", "request", &err).await;
    crate::metrics::global().mcp_call("unknown", &err.code.to_string());
}

/// A request this layer answers itself, before rmcp reads it: what the
/// client is told, and what the audit row says.
struct Refusal {
    response: Response,
    err: AgentAPIError,
}

/// A JSON-RPC error as the answer. Input the server cannot take as a
/// request at all (-32700, -32600) is an HTTP 400 with the error, its `id`
/// null when none could be read (JSON-RPC 2.0 §5); any other error answers
/// its request as a result would, with HTTP 200, so a client reads it as
/// that request's error.
fn rpc_error(id: Option<Value>, code: RpcCode, message: String) -> Refusal {
    let status = if code == RpcCode::PARSE_ERROR || code == RpcCode::INVALID_REQUEST {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code.0, "message": message},
    });
    Refusal {
        response: (status, axum::Json(body)).into_response(),
        err: AgentAPIError::invalid_argument(format!("JSON-RPC error {}: {message}", code.0)),
    }
}

/// A body read whole, up to the limit (rmcp's own limit would answer the
/// same, but only once this layer has read it).
async fn read_body(body: Body) -> Result<Bytes, Refusal> {
    let mut stream = body.into_data_stream();
    let mut read = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Refusal {
            response: (
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            )
                .into_response(),
            err: AgentAPIError::invalid_argument(format!(
                "the request body could not be read: {e}"
            )),
        })?;
        if chunk.len() > MAX_REQUEST_BYTES.saturating_sub(read.len()) {
            let said = format!("Payload Too Large: request body exceeds {MAX_REQUEST_BYTES} bytes");
            return Err(Refusal {
                response: (StatusCode::PAYLOAD_TOO_LARGE, said.clone()).into_response(),
                err: AgentAPIError::too_large(said),
            });
        }
        read.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(read))
}

/// The request id of a JSON value that is no JSON-RPC message rmcp reads,
/// when it has one of a valid type (a string or an integer).
fn readable_id(message: &Value) -> Option<Value> {
    message
        .get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .cloned()
}

/// Why the params of a request of `method`, one this server answers, do
/// not fit it: rmcp reads such a request as one of an unknown method and
/// would answer -32601, where the spec wants -32602 (invalid params).
fn params_misfit(method: &str, params: Option<&Value>) -> Option<String> {
    let mut request = json!({"method": method});
    if let Some(params) = params {
        request["params"] = params.clone();
    }
    // A request that fits here yet reached no typed variant is not this
    // layer's to judge: rmcp answers it as before.
    let misfit = match method {
        "initialize" => serde_json::from_value::<InitializeRequest>(request).err(),
        "tools/call" => serde_json::from_value::<CallToolRequest>(request).err(),
        "tools/list" => serde_json::from_value::<ListToolsRequest>(request).err(),
        _ => None,
    };
    misfit.map(|e| e.to_string())
}

/// The params of a `tools/list` as the spec has them. rmcp drops params
/// it cannot read (a cursor that is no string) and lists from the start,
/// as if none were sent: read here, they are -32602 instead.
#[derive(serde::Deserialize)]
struct ListParams {
    #[serde(default)]
    #[allow(dead_code)]
    params: Option<ListCursor>,
}

#[derive(serde::Deserialize)]
struct ListCursor {
    #[serde(default)]
    #[allow(dead_code)]
    cursor: Option<String>,
}

/// Read a call's body and turn down what JSON-RPC says to turn down, in
/// its words, where rmcp would not: JSON that does not parse (-32700) and
/// JSON that is no JSON-RPC message (-32600), which rmcp answers with a
/// plain-text 415; and a request of a method this server answers whose
/// params do not fit (-32602), which rmcp takes for an unknown method or
/// (a `tools/list` cursor) ignores.
async fn screen(body: Body) -> Result<Bytes, Refusal> {
    let bytes = read_body(body).await?;
    match serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        Ok(JsonRpcMessage::Request(request)) => {
            let misfit = match &request.request {
                ClientRequest::CustomRequest(custom) => {
                    params_misfit(&custom.method, custom.params.as_ref())
                        .map(|why| (custom.method.as_str(), why))
                }
                ClientRequest::ListToolsRequest(_) => serde_json::from_slice::<ListParams>(&bytes)
                    .err()
                    .map(|e| ("tools/list", e.to_string())),
                _ => None,
            };
            match misfit {
                Some((method, why)) => {
                    let id = Some(request.id.clone().into_json_value());
                    let message = format!("invalid params for {method}: {why}");
                    Err(rpc_error(id, RpcCode::INVALID_PARAMS, message))
                }
                None => Ok(bytes),
            }
        }
        Ok(_) => Ok(bytes),
        Err(not_rpc) => match serde_json::from_slice::<Value>(&bytes) {
            Err(e) => Err(rpc_error(
                None,
                RpcCode::PARSE_ERROR,
                format!("Parse error: {e}"),
            )),
            Ok(value) => Err(rpc_error(
                readable_id(&value),
                RpcCode::INVALID_REQUEST,
                format!("Invalid request: {not_rpc}"),
            )),
        },
    }
}

/// Whether an `Origin` is this server's own: plain http to a loopback
/// name at the server's port. The transport spec makes checking it a MUST
/// against DNS rebinding: a web page elsewhere that learned a run's token
/// must still not reach its tools from a browser. Harness CLIs send no
/// `Origin` at all, and a request without one passes.
fn own_origin(origin: &str, port: u16) -> bool {
    let Ok(uri) = origin.trim().parse::<http::Uri>() else {
        return false;
    };
    let Some(authority) = uri.authority() else {
        return false;
    };
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    uri.scheme_str() == Some("http")
        && matches!(uri.path(), "" | "/")
        && uri.query().is_none()
        && (host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1")
        // An origin at http's default port is serialized without it.
        && authority.port_u16().unwrap_or(80) == port
}

/// The first `Origin` of a request that is not the server's own, if any.
fn foreign_origin(request: &Request, port: u16) -> Option<String> {
    request
        .headers()
        .get_all(header::ORIGIN)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .find(|origin| !own_origin(origin, port))
}

/// What the middleware knows of the server it guards.
#[derive(Clone)]
struct Guard {
    grants: Arc<Grants>,
    /// The address the server listens on: its own origins are on its
    /// port, and a client's connection is to it.
    addr: SocketAddr,
}

/// A token bound to its harness process (`Grants::bind`) presented on a
/// connection that process (and what it started) does not hold: 403, and
/// an audit row of the run the token names, so a token read from another
/// process's environment opens nothing and its owner's audit shows the
/// attempt. `None`: go on.
async fn held_elsewhere(
    guard: &Guard,
    token: &str,
    client: Option<SocketAddr>,
    memo: Option<ConnectionMemo>,
    host: &GrantedHost,
) -> Option<Response> {
    let holder = guard.grants.holder(token)?;
    let server = guard.addr;
    // Who holds a connection does not change while it is open: the kernel
    // is asked once a connection and token (the token kept as a digest).
    let key = format!(
        "holder:{}",
        hex::encode(sha2::Sha256::digest(token.as_bytes()))
    );
    let known = memo.as_ref().and_then(|m| m.get(&key));
    let held = match (known, client) {
        (Some(held), _) => held,
        (None, Some(client)) => {
            let held = tokio::task::spawn_blocking(move || holder.holds(client, server))
                .await
                .unwrap_or(false);
            if let Some(memo) = &memo {
                memo.put(key, held);
            }
            held
        }
        (None, None) => false,
    };
    if held {
        return None;
    }
    let said = "Forbidden: this token belongs to another process (the harness it was made for)";
    audit(host, AgentAPIError::new(ErrorCode::Unauthorized, said)).await;
    Some((StatusCode::FORBIDDEN, said).into_response())
}

/// The one gate in front of rmcp, in the order a client is answered: the
/// token names a run (401 otherwise), the `Origin` is the server's own
/// (403), the body is JSON-RPC this server can answer (a JSON-RPC error
/// otherwise); then an error status rmcp answers is audited too. Every
/// refusal after the token is one audit row of its run.
async fn authenticate(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map_or("", bearer_token)
        .to_string();
    let host = match guard.grants.authorize(&token).await {
        Ok(host) => host,
        Err(err) => {
            let body = json!({"code": err.code, "message": err.message, "hint": TOKEN_HEADER_HINT});
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                axum::Json(body),
            )
                .into_response();
        }
    };
    let client = request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    let memo = request.extensions().get::<ConnectionMemo>().cloned();
    if let Some(refused) = held_elsewhere(&guard, &token, client, memo, &host).await {
        return refused;
    }
    if let Some(origin) = foreign_origin(&request, guard.addr.port()) {
        let said = format!("Forbidden: the Origin `{origin}` is not this server's own");
        audit(
            &host,
            AgentAPIError::new(ErrorCode::Unauthorized, said.clone()),
        )
        .await;
        return (StatusCode::FORBIDDEN, said).into_response();
    }
    // Only a POST carries a call; a GET or DELETE answered 405 is how a
    // stateless server says it has no stream to open.
    if request.method() != Method::POST {
        request.extensions_mut().insert(host);
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match screen(body).await {
        Ok(bytes) => bytes,
        Err(refusal) => {
            audit(&host, refusal.err).await;
            return refusal.response;
        }
    };
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(host.clone());
    let response = next.run(request).await;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        audit_refusal(&host, response).await
    } else {
        response
    }
}

impl McpHttpServer {
    /// Serve on `addr` (port 0 lets the OS choose). Only loopback addresses
    /// are accepted: run tokens must never cross a network.
    pub async fn start(
        grants: Arc<Grants>,
        tools: RunTools,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        if !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the MCP server binds to loopback only, not {addr}"),
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        // Stateless, with plain JSON answers (the spec allows both): the
        // handler keeps nothing per session, since every request names its
        // run by its token, and tool calls are plain request/response.
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(MAX_REQUEST_BYTES)
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_cancellation_token(stop.child_token());
        let service = StreamableHttpService::new(
            move || Ok(tools.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let app_at = |addr: SocketAddr| {
            let guard = Guard {
                grants: grants.clone(),
                addr,
            };
            Router::new()
                .nest_service("/mcp", service.clone())
                .layer(middleware::from_fn_with_state(guard, authenticate))
        };
        let app = app_at(addr);
        let door_app = app_at(SocketAddr::from((
            std::net::Ipv4Addr::LOCALHOST,
            crate::harness::cage::DOOR_PORT,
        )));
        // Any local process can connect: the same bounds as the API, so
        // idle or trickling connections cannot starve the harnesses' calls.
        let limits = crate::http_server::Limits::default();
        let task = tokio::spawn(crate::http_server::serve(
            listener,
            app,
            limits,
            stop.clone(),
        ));
        tracing::info!(%addr, "MCP server listening");
        Ok(McpHttpServer {
            url: format!("http://{addr}/mcp"),
            addr,
            stop,
            task,
            door_app,
        })
    }

    /// The server's routes as a harness behind its door reaches them
    /// (`http://127.0.0.1:DOOR_PORT/mcp` inside its namespace): the same
    /// tools, tokens and checks; who holds a connection is read in the
    /// harness's own namespace.
    pub fn door_app(&self) -> Router {
        self.door_app.clone()
    }

    /// The endpoint a harness connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, close sessions, and wait for the server task.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), "abc");
        assert_eq!(bearer_token("bearer abc"), "abc");
        assert_eq!(bearer_token("BEARER  abc "), "abc");
        assert_eq!(bearer_token("Basic abc"), "");
        assert_eq!(bearer_token("Bearer"), "");
        assert_eq!(bearer_token("abc"), "");
    }
}
