//! The host proxy APIs as a run-scoped MCP server (server name `langbot`).
//!
//! One tool per proxy API, listed only when the run's grant allows it and
//! checked again at call time by the grant itself: this module exposes
//! tools, it never decides authorization. Every call goes through a
//! [`crate::host::GrantedHost`], so it is checked and audited exactly like
//! any other host call.

mod http;
mod stdio;
mod tools;

pub use http::{McpHttpServer, TOKEN_HEADER_HINT};
pub use stdio::{ShimError, run_stdio_shim};
pub use tools::{InputRef, RunFacts, RunTools, SERVER_NAME, check_arguments, tool_names};
