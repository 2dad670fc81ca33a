//! `harness-bridge mcp-stdio`: the MCP server for harnesses that prefer a
//! stdio server. It is a relay: an MCP server on stdin/stdout whose every
//! request is forwarded to the bridge's HTTP server with the run's token,
//! so authorization, audit and scope stay in one place.
//!
//! The endpoint and token come from the environment (never argv), where
//! the bridge puts them for every harness it launches. The token is sent
//! only to plain HTTP on a loopback address, where the bridge listens: an
//! endpoint elsewhere is refused before anything is sent. When the
//! run ends its token dies; the next forwarded call is refused (401), and
//! the shim exits instead of lingering. Any other failure of one call (a
//! request too large, a dropped connection) is that call's error only: the
//! harness keeps its tools for the rest of the turn.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, StreamableHttpClientTransportConfig,
};
use rmcp::{ErrorData as McpError, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio_util::sync::CancellationToken;

use super::SERVER_NAME;
use crate::projection::{TOKEN_ENV, URL_ENV};

/// Why the shim could not start: for the harness's MCP log.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// A required variable is not set.
    #[error("{0} is not set; the bridge sets it when it launches the harness")]
    MissingEnv(&'static str),
    /// The endpoint is not the bridge's: the token would leave the machine
    /// or travel where the bridge does not listen.
    #[error(
        "{URL_ENV} points at {0}: the run's token is sent only to http:// on a loopback address (127.0.0.1, [::1]), where the bridge listens"
    )]
    NotLoopback(String),
    /// The bridge's server refused or could not be reached.
    #[error("cannot reach the bridge's MCP server at {url}: {message}")]
    Upstream {
        /// The endpoint tried.
        url: String,
        /// What failed.
        message: String,
    },
    /// The stdio side failed.
    #[error("stdio: {0}")]
    Stdio(String),
}

struct Relay {
    upstream: RunningService<RoleClient, ()>,
    ended: CancellationToken,
}

/// Whether a failed call means the run is over: its token was refused, or
/// the bridge closed the connection for good.
fn run_ended(e: &ServiceError) -> bool {
    match e {
        ServiceError::TransportClosed => true,
        ServiceError::TransportSend(sent) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(sent.error.as_ref());
            while let Some(e) = cause {
                if e.is::<AuthRequiredError>() {
                    return true;
                }
                cause = e.source();
            }
            false
        }
        _ => false,
    }
}

impl Relay {
    fn failed(&self, e: ServiceError) -> McpError {
        if run_ended(&e) {
            self.ended.cancel();
            return McpError::internal_error(format!("the run has ended: {e}"), None);
        }
        match e {
            ServiceError::McpError(e) => e,
            e => {
                McpError::internal_error(format!("the bridge did not answer this call: {e}"), None)
            }
        }
    }
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
    }

    tools_only!();

    /// Every tool comes in one page: a cursor is not one this server gave.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            let why = format!("invalid cursor `{cursor}`: every tool is listed in one page");
            return Err(McpError::invalid_params(why, None));
        }
        let tools = self
            .upstream
            .list_all_tools()
            .await
            .map_err(|e| self.failed(e))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut forwarded = CallToolRequestParams::new(request.name.clone());
        if let Some(arguments) = request.arguments {
            forwarded = forwarded.with_arguments(arguments);
        }
        let result = self
            .upstream
            .call_tool(forwarded)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(result.into())
    }
}

/// `url` if it is plain HTTP to a loopback address (an IP, not a name a
/// resolver could send elsewhere); otherwise why not, naming the host only.
fn loopback_endpoint(url: &str) -> Result<&str, ShimError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| ShimError::NotLoopback("something that is not a URL".into()))?;
    let host = uri.host().unwrap_or("");
    let ip = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>();
    match (uri.scheme_str(), ip) {
        (Some("http"), Ok(ip)) if ip.is_loopback() => Ok(url),
        (scheme, _) => Err(ShimError::NotLoopback(format!(
            "{}://{host}",
            scheme.unwrap_or("?")
        ))),
    }
}

/// Run the shim until stdin closes or the run ends.
pub async fn run_stdio_shim() -> Result<(), ShimError> {
    let url = std::env::var(URL_ENV).map_err(|_| ShimError::MissingEnv(URL_ENV))?;
    let url = loopback_endpoint(&url)?.to_string();
    let token = std::env::var(TOKEN_ENV).map_err(|_| ShimError::MissingEnv(TOKEN_ENV))?;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(token),
    );
    let upstream = ().serve(transport).await.map_err(|e| ShimError::Upstream {
        url: url.clone(),
        message: e.to_string(),
    })?;
    let ended = CancellationToken::new();
    let relay = Relay {
        upstream,
        ended: ended.clone(),
    };
    let server = relay
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ShimError::Stdio(e.to_string()))?;
    let stop = server.cancellation_token();
    tokio::select! {
        result = server.waiting() => {
            result.map_err(|e| ShimError::Stdio(e.to_string()))?;
        }
        () = ended.cancelled() => {
            // Let the refusal reach the harness before closing.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            stop.cancel();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_to_a_loopback_address_gets_the_token() {
        for ok in [
            "http://127.0.0.1:4000/mcp",
            "http://127.8.9.10/mcp",
            "http://[::1]:4000/mcp",
        ] {
            assert!(loopback_endpoint(ok).is_ok(), "{ok}");
        }
        for refused in [
            "https://127.0.0.1:4000/mcp",
            "http://10.0.0.1:4000/mcp",
            "http://0.0.0.0:4000/mcp",
            "http://localhost:4000/mcp",
            "http://bridge.example/mcp",
            "127.0.0.1:4000",
            "not a url",
        ] {
            assert!(loopback_endpoint(refused).is_err(), "{refused}");
        }
    }
}
