//! Harnesses: the code-agent CLIs the bridge runs. Adapter specs (data:
//! `harness-adapters/*.yaml`), the catalog of runners built from them (what
//! `manifest` prints), and the decoders of their output streams. Launching
//! joins this module next.

mod adapter;
mod catalog;
pub mod decode;

pub use adapter::{AdapterSpec, Adapters, ArgItem, Argv, EnvSpec, SpecError, Stdin, TurnValues};
pub use catalog::{
    PLUGIN_AUTHOR, PLUGIN_NAME, discovery, find, names, requested_permissions, runner_id,
};
