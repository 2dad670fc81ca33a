//! The streamable-HTTP transport: one server on 127.0.0.1 for every run.
//! Each request names its run with `Authorization: Bearer <run token>`;
//! a wrong, missing or dead token is answered 401 before any MCP handling,
//! and the refusal is audited.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::RunTools;
use crate::host::Grants;

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

async fn authenticate(
    State(grants): State<Arc<Grants>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .trim()
        .to_string();
    match grants.authorize(&token).await {
        Ok(host) => {
            request.extensions_mut().insert(host);
            next.run(request).await
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
