//! What the integration tests share, one module per thing faked or driven:
//!
//! - [`context`]: a run's context, permissions, a store with its grants;
//! - [`bridge`]: `harness-bridge run` as a user runs it ([`BridgeTurn`]);
//! - [`server`]: `harness-bridge serve` as a child process;
//! - [`e2e`]: an open run for a real CLI, and the checks every harness passes;
//! - [`procs`]: processes seen from `/proc` (what is left running);
//! - [`tools`]: where the environment tiers' tools are (CLIs, venvs);
//! - [`scripted`]: a shell script playing a harness;
//! - [`repo`]: a git repository as an operator's project;
//! - [`anthropic`], [`openai`], [`wire`]: fake model APIs, served by
//!   [`loopback`];
//! - [`pg`]: a throwaway PostgreSQL server.
//!
//! What [`context`], [`bridge`], [`e2e`], [`procs`], [`tools`] and
//! [`loopback`] define is re-exported here (`common::bridge_run`, …). A crate of its own
//! (`harness-bridge-testkit`), which the tests and benches name `common`.

pub mod anthropic;
pub mod bridge;
pub mod context;
pub mod e2e;
pub mod loopback;
pub mod openai;
pub mod pg;
pub mod procs;
pub mod repo;
pub mod scripted;
pub mod server;
pub mod tools;
pub mod wire;

pub use self::{bridge::*, context::*, e2e::*, loopback::*, procs::*, tools::*};
