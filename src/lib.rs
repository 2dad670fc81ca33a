//! harness-bridge: plugs code-agent CLIs (Claude Code, Codex, Copilot,
//! Gemini, Qwen Code, Kimi Code, opencode, any ACP agent) into IM bots
//! through LangBot's AgentRunner Protocol v1.
//!
//! Data flows one way: [`protocol`] (wire types) → [`interaction`],
//! [`command`] →
//! [`host`] (the host proxy API, run grants, the embedded store) →
//! [`projection`], [`repo`] → [`harness`] → [`mcp`], [`door`] → [`run`] → `relay` / [`serve`] →
//! [`cli`]; `tests/layers.rs` keeps it so. See `ARCHITECTURE.md` for the map
//! and the invariants.

#![warn(missing_docs)]
// Nothing from outside may panic the bridge, and only the CLI speaks to
// the terminal: everything else logs (`tracing`) or returns its error.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::dbg_macro
)]

/// Equality, `Debug` and `Display` by the `name` field, for the values a
/// harness family declares (its output format, live protocol, MCP format,
/// session store): their other fields are functions, which no test of
/// equality should compare (a function's address is not its identity).
macro_rules! by_name {
    ($($t:ty),+) => {$(
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.name == other.name
            }
        }

        impl Eq for $t {}

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name)
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name)
            }
        }
    )+};
}

#[allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the CLI's edge: its output and its one error line"
)]
pub mod cli;
pub mod command;
pub mod disk;
pub mod door;
pub mod harness;
pub mod host;
pub mod http_server;
pub mod interaction;
pub mod mcp;
pub mod metrics;
pub mod owner;
pub mod projection;
pub mod protocol;
pub mod relay;
pub mod repo;
pub mod run;
pub mod serve;
pub mod settings_keys;
pub mod throttle;
