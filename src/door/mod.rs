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
//!   enters the cage.
//!
//! Nothing else answers: a connection to any other address fails inside
//! the namespace, since there is nothing else to reach.

pub mod gateway;

use std::sync::Arc;

use axum::Router;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::harness::DoorKeeper;
pub use crate::harness::cage::DOOR_PORT;
pub use gateway::Gateway;

/// The run's MCP endpoint as a harness behind its door reaches it.
pub fn mcp_url() -> String {
    format!("http://127.0.0.1:{DOOR_PORT}/mcp")
}

/// The base URL of `provider`'s calls at the door.
pub fn model_url(provider: &str) -> String {
    format!("http://127.0.0.1:{DOOR_PORT}/model/{provider}")
}

/// Who answers one harness's door: the MCP endpoint and its gateway.
#[derive(Clone)]
pub struct Keeper {
    app: Router,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").finish_non_exhaustive()
    }
}

impl Keeper {
    /// A door that answers `mcp` (the MCP server's routes, as served at
    /// the door) and `gateway`'s providers.
    pub fn new(mcp: Router, gateway: Gateway) -> Keeper {
        Keeper {
            app: mcp.nest("/model", gateway.router()),
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
        let limits = crate::listen::Limits::default();
        tokio::spawn(crate::listen::serve(
            listener,
            self.app.clone(),
            limits,
            stop.clone(),
        ));
        stop.drop_guard()
    }
}
