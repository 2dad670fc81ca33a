//! What a harness in a network of its own reaches: its door.
//!
//! The cage makes each caged harness a network namespace with nothing but
//! its own loopback, and hands the bridge the listening socket it made
//! there (`harness::cage`, `door.rs`). The bridge answers every
//! connection to it here, from outside, on one port:
//!
//! - `/mcp`: the run's MCP endpoint (the same server, the same per-turn
//!   token, as on the bridge's own port);
//! - `/model/<provider>/…`: the model gateway ([`gateway`]), which puts
//!   the operator's key on each call on its way upstream, so no key ever
//!   enters the cage;
//! - a proxy request (`CONNECT host:port`, or an `http://` URL): the
//!   egress proxy ([`proxy`]), to the operator's destinations alone.
//!
//! Nothing else answers: a connection to any other address fails inside
//! the namespace, since there is nothing else to reach.

pub mod gateway;
pub mod proxy;
mod splice;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::harness::DoorKeeper;
pub use crate::harness::cage::DOOR_PORT;
pub use gateway::Gateway;
pub use proxy::{Approver, Proxy};

/// The run's MCP endpoint as a harness behind its door reaches it.
pub fn mcp_url() -> String {
    format!("http://127.0.0.1:{DOOR_PORT}/mcp")
}

/// The base URL of `provider`'s calls at the door.
pub fn model_url(provider: &str) -> String {
    format!("http://127.0.0.1:{DOOR_PORT}/model/{provider}")
}

/// The proxy variables a harness behind its door gets (the forms CLIs,
/// git, npm, pip, cargo and curl read), and the loopback they leave out
/// (the door's own endpoints are reached directly).
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{DOOR_PORT}");
    let direct = "127.0.0.1,localhost,::1".to_string();
    let mut vars = Vec::new();
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        vars.push((name, url.clone()));
    }
    for name in ["https_proxy", "http_proxy", "all_proxy"] {
        vars.push((name, url.clone()));
    }
    vars.push(("NO_PROXY", direct.clone()));
    vars.push(("no_proxy", direct));
    vars
}

/// Who answers one harness's door: the MCP endpoint, its gateway and its
/// proxy.
#[derive(Clone)]
pub struct Keeper {
    app: Router,
    proxy: Arc<Proxy>,
    identity: [u8; 32],
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").finish_non_exhaustive()
    }
}

impl Keeper {
    /// A door that answers `mcp` (the MCP server's routes, as served at
    /// the door), `gateway`'s providers and `proxy`'s destinations.
    pub fn new(mcp: Router, gateway: Gateway, proxy: Proxy) -> Keeper {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        gateway.identify(&mut hash);
        proxy.identify(&mut hash);
        Keeper {
            app: mcp.nest("/model", gateway.router()),
            proxy: Arc::new(proxy),
            identity: hash.finalize().into(),
        }
    }

    /// As the harness launch takes it.
    pub fn shared(self) -> Arc<dyn DoorKeeper> {
        Arc::new(self)
    }
}

impl DoorKeeper for Keeper {
    fn open(&self, listener: tokio::net::TcpListener) -> DropGuard {
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            self.app.clone(),
            self.proxy.clone(),
            stop.clone(),
        ));
        stop.drop_guard()
    }

    fn identity(&self) -> [u8; 32] {
        self.identity
    }
}

/// Connections open at once at one door.
const MAX_CONNECTIONS: usize = 256;

/// Serve the door until `stop`: each connection's requests go to the
/// proxy or to `app`, with upgrades (a `CONNECT` becomes a tunnel), the
/// header deadline of the bridge's other listeners, and a bound on open
/// connections. When the door shuts, so do its connections and tunnels.
async fn serve(listener: TcpListener, app: Router, proxy: Arc<Proxy>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let limits = crate::http_server::Limits::default();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("the door cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        // As on the bridge's own MCP port: who holds the connection is
        // checked once a connection.
        let app = TowerToHyperService::new(
            app.clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(peer)))
                .layer(axum::Extension(
                    crate::http_server::ConnectionMemo::default(),
                )),
        );
        let proxy = proxy.clone();
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let (app, proxy) = (app.clone(), proxy.clone());
            async move {
                if proxy::is_proxied(&request) {
                    Ok::<_, Infallible>(proxy.handle(request).await)
                } else {
                    hyper::service::Service::call(&app, request).await
                }
            }
        });
        let connection = builder
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = connection => {}
                () = stop.cancelled() => {}
            }
            drop(slot);
        });
    }
    proxy.stop();
}
