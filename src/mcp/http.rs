//! The streamable-HTTP transport: one server on 127.0.0.1 for every run.
//! Each request names its run with `Authorization: Bearer <run token>`;
//! a wrong, missing or dead token is answered 401 before any MCP handling,
//! and the refusal is audited. A request the MCP transport itself turns
//! down (a body over the limit, JSON-RPC it cannot read) never reaches a
//! tool: the same layer audits that refusal against the token's run.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::RunTools;
use crate::host::{GrantedHost, Grants};
use crate::protocol::{AgentAPIError, ErrorCode};

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
    let err = AgentAPIError::new(refusal_code(parts.status), reason);
    host.refused("unknown", "request", &err).await;
    crate::metrics::global().mcp_call("unknown", &err.code.to_string());
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

async fn authenticate(
    State(grants): State<Arc<Grants>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map_or("", bearer_token)
        .to_string();
    match grants.authorize(&token).await {
        Ok(host) => {
            // Only a POST carries a call; a GET or DELETE answered 405 is
            // how a stateless server says it has no stream to open.
            let call = request.method() == Method::POST;
            request.extensions_mut().insert(host.clone());
            let response = next.run(request).await;
            let status = response.status();
            if call && (status.is_client_error() || status.is_server_error()) {
                audit_refusal(&host, response).await
            } else {
                response
            }
        }
        Err(err) => {
            let body = serde_json::json!({"code": err.code, "message": err.message, "hint": TOKEN_HEADER_HINT});
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                axum::Json(body),
            )
                .into_response()
        }
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
        let app = Router::new()
            .nest_service("/mcp", service)
            .layer(middleware::from_fn_with_state(grants, authenticate));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // Any local process can connect: the same bounds as the API, so
        // idle or trickling connections cannot starve the harnesses' calls.
        let limits = crate::listen::Limits::default();
        let task = tokio::spawn(crate::listen::serve(listener, app, limits, stop.clone()));
        tracing::info!(%addr, "MCP server listening");
        Ok(McpHttpServer {
            url: format!("http://{addr}/mcp"),
            addr,
            stop,
            task,
        })
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
