//! Harnesses: the code-agent CLIs the bridge runs. Adapter specs (data:
//! `harness-adapters/*.yaml`), the catalog of runners built from them (what
//! `manifest` prints), the decoders of their output streams, the launcher
//! (process groups, environment whitelist, stderr tail), containment
//! (`cage`: nothing a harness starts outlives its turn) and resume
//! pointers.

mod adapter;
pub mod cage;
mod catalog;
pub mod decode;
pub mod families;
mod launch;
pub mod live;
pub(crate) mod session;
pub mod spawn;
mod stderr;

pub use adapter::{
    AdapterError, AdapterSpec, Adapters, ArgItem, Argv, EnvSpec, LiveSpec, ModelConfig,
    ModelEndpoint, SpecError, Stdin, TurnValues,
};
pub use catalog::{PLUGIN_AUTHOR, PLUGIN_NAME, discovery, find, requested_permissions, runner_id};
pub use launch::{
    DoorKeeper, HarnessProcess, Launch, child_env, env_pattern_matches, find_program,
};
pub use session::{
    EARLIER_SESSIONS_KEY, HARNESS_KEY, OVERRIDES_KEY, ResumePointer, SESSION_FILES_KEY,
    SESSION_ID_KEY, SessionFiles, SessionIdFormat, SessionStore, WORKING_DIRECTORY_KEY,
};
pub use stderr::StderrTail;
