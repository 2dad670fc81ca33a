//! Harnesses: the code-agent CLIs the bridge runs: the catalog of runners
//! the bridge offers a host (what `manifest` prints) and the decoders of
//! their output streams. Adapter specs and launching join this module next.

mod catalog;
pub mod decode;

pub use catalog::{
    HARNESSES, HarnessInfo, PLUGIN_AUTHOR, PLUGIN_NAME, discovery, find, requested_permissions,
    runner_id,
};
