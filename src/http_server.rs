//! Serving HTTP on a listener with the bounds a service exposed to other
//! processes needs: at most so many connections at once, a deadline for a
//! request's headers (also between requests on a kept-alive connection),
//! `TCP_NODELAY`, and a graceful stop. Both the API (`serve`) and the MCP
//! server use it.
//!
//! `axum::serve` has no header deadline and no connection limit: a client
//! that trickles half a request, or opens connections and sends nothing,
//! held a descriptor each for good, and enough of them starved the real
//! requests. Here a connection past the limit is closed at once, and one
//! that has not sent its headers in time is closed by hyper.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::throttle::SharedThrottle;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; one more is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, from the moment the
    /// connection is ready for one (also while it idles between requests).
    pub header_timeout: Duration,
    /// How long open connections get to finish once the listener stops.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(5),
        }
    }
}

/// Serve `app` on `listener` until `stop` is cancelled, then give open
/// connections `limits.drain` to finish (a response being streamed, a
/// client reading slowly) and return.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let refusals = SharedThrottle::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, most likely: wait a moment instead of
                // spinning on the same error.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(tcp);
            if let Some(count) = refusals.refused() {
                tracing::warn!(
                    refused = count,
                    "{} connections are open (max_connections); closing new ones",
                    limits.max_connections
                );
            }
            continue;
        };
        // Results and tool answers are small writes: without it a turn's
        // last lines wait for the client's delayed ACK (40 ms on Linux).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        // Each request knows the connection's client address (axum's
        // `ConnectInfo`) and what was learned of the connection before
        // (`ConnectionMemo`): the MCP server checks who holds that socket
        // once a connection, not once a call.
        let service = app
            .clone()
            .layer(axum::Extension(axum::extract::ConnectInfo(peer)))
            .layer(axum::Extension(ConnectionMemo::default()));
        let connection =
            builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain; closing them");
    }
}

/// What a handler learned about one connection, kept for its later
/// requests (a kept-alive client makes many): yes-or-no facts by key.
/// Dropped with the connection.
#[derive(Debug, Clone, Default)]
pub struct ConnectionMemo(Arc<std::sync::Mutex<std::collections::HashMap<String, bool>>>);

impl ConnectionMemo {
    /// The fact kept under `key`, if any.
    pub fn get(&self, key: &str) -> Option<bool> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
    }

    /// Keep `fact` under `key` for the connection's later requests.
    pub fn put(&self, key: String, fact: bool) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, fact);
    }
}

/// Raise this process's open-file limit to its hard limit: connections,
/// harness pipes and store files all take descriptors, and the soft limit
/// is often a small default (1024) far below what the system allows.
pub fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::debug!("cannot raise the open-file limit from {soft} to {hard}: {e}");
    }
}
