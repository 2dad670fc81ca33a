//! Harnesses: the code-agent CLIs the bridge runs. For now, the catalog of
//! runners the bridge offers a host (what `manifest` prints); adapters,
//! launch and decoding join this module as they are built.

mod catalog;

pub use catalog::{
    HARNESSES, HarnessInfo, PLUGIN_AUTHOR, PLUGIN_NAME, discovery, find, requested_permissions,
    runner_id,
};
