//! What the integration tests share, one module per thing faked or driven:
//!
//! - [`context`]: a run's context, permissions, a store with its grants;
//! - [`bridge`]: `harness-bridge run` as a user runs it ([`BridgeTurn`]);
//! - [`server`]: `harness-bridge serve` as a child process;
//! - [`e2e`]: an open run for a real CLI, and the checks every harness passes;
//! - [`escape`]: the network probes an agent runs, and what they must show;
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
pub mod escape;
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

/// A temporary folder other users may pass through (0711), not list: a
/// root bridge's caged harnesses run as another user outside their
/// namespace (`harness_bridge::owner`), and must reach what a test puts
/// below it (their program, the repository, the workspaces).
pub fn tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o711))
        .tempdir()
        .expect("a temporary folder")
}

/// A temporary folder every harness may write (0777), whichever user it
/// is: what a test lists in `cage.read_write` for its harnesses to leave
/// notes in (a root bridge's harness is another user than the test).
pub fn tempdir_for_harnesses() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
        .expect("a folder every user may write");
    dir
}

/// The built-in harnesses, (name, family) by name, as the files of
/// `harness-adapters/` declare them: what the binary must offer, so a
/// test that lists the built-ins never needs a new name when one is added.
pub fn built_in_harnesses() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harness-adapters");
    let mut harnesses: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("harness-adapters/ beside the tests")
        .map(|entry| entry.expect("a readable folder").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable spec");
            let file = path.display().to_string();
            let spec = harness_bridge::harness::AdapterSpec::parse(&file, &text)
                .unwrap_or_else(|e| panic!("{e}"));
            (spec.name.clone(), spec.family.name.to_string())
        })
        .collect();
    harnesses.sort();
    assert!(harnesses.len() >= 8, "the built-in specs: {harnesses:?}");
    harnesses
}

/// The lines an escape test's shell probes printed, as the model got
/// them back (its tool results, in every request it was sent):
/// `HELD:name` when an attempt failed, `ESCAPED:name` when it worked,
/// `CONTROL:…` for what must work. (The script's own text is in the
/// requests too: a control's output must differ from its source.)
pub fn probe_lines(requests: &[serde_json::Value]) -> Vec<String> {
    let text: String = requests.iter().map(serde_json::Value::to_string).collect();
    let text = text.replace("\\n", "\n");
    text.lines()
        .filter_map(|l| {
            ["HELD:", "ESCAPED:", "CONTROL:"]
                .iter()
                .find_map(|tag| l.find(tag).map(|at| &l[at..]))
        })
        .map(|l| {
            l.split(|c: char| c == '"' || c == '\\' || c.is_whitespace())
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}
