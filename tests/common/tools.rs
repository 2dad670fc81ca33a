//! Where the tools of the environment tiers are (tests/README.md): the
//! pinned CLIs of `tests/clis`, the langbot-plugin SDK venv and the LangBot
//! venv; and a copy of the plugin's source for the SDK to build from. A
//! missing tool fails the test with how to install it: the tests that
//! need one are `#[ignore = "tier ..."]`, so they only run when asked
//! (`scripts/test`, or `-- --include-ignored`).

use std::path::PathBuf;

use super::bridge::bridge_bin;

/// The repository's root: this crate is `tests/common` in it.
pub fn repo_root() -> PathBuf {
    let kit = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.ancestors().nth(2).unwrap_or(kit).to_path_buf()
}

/// Where the pinned test CLIs are installed (`tests/clis`).
pub fn cli_dir() -> PathBuf {
    repo_root().join("tests/clis")
}

/// A pinned harness CLI installed by `scripts/test` (`npm ci` in `tests/clis`).
/// Missing means the set-up did not run: fail with how to fix it.
pub fn cli(name: &str) -> PathBuf {
    let path = cli_dir().join("node_modules/.bin").join(name);
    assert!(
        path.exists(),
        "{name} is not installed at {}: run `scripts/test` (it runs `npm ci` in tests/clis), \
         or `npm ci --prefix tests/clis`",
        path.display()
    );
    path
}

/// The SDK venv's python: `HARNESS_BRIDGE_SDK_PYTHON`, else `target/sdk-venv`.
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("HARNESS_BRIDGE_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/sdk-venv/bin/python"));
    assert!(
        path.exists(),
        "the langbot-plugin SDK venv is missing at {}: run `scripts/test` (it creates it from \
         tests/interop/requirements.txt), or set HARNESS_BRIDGE_SDK_PYTHON to a python with the SDK installed",
        path.display()
    );
    path
}

/// A copy of the LangBot plugin's source (`integrations/langbot-plugin`)
/// at `dir/code`, without build leftovers (`bin/`, `__pycache__`).
pub fn copy_plugin(dir: &std::path::Path) -> PathBuf {
    let source = repo_root().join("integrations/langbot-plugin");
    let plugin = dir.join("code");
    for entry in walkdir::WalkDir::new(&source) {
        let entry = entry.expect("plugin source readable");
        let rel = entry
            .path()
            .strip_prefix(&source)
            .expect("under the source");
        if rel
            .components()
            .any(|c| c.as_os_str() == "__pycache__" || c.as_os_str() == "bin")
        {
            continue;
        }
        let to = plugin.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&to).expect("mkdir");
        } else {
            std::fs::copy(entry.path(), &to).expect("copy");
        }
    }
    plugin
}

/// `scripts/langbot-runners`: runners in the plugin at `plugin` for the
/// specs in `adapters`, as `scripts/build-langbot-plugin --adapters`
/// makes them.
pub fn langbot_runners(
    adapters: &std::path::Path,
    plugin: &std::path::Path,
) -> std::process::Output {
    std::process::Command::new(sdk_python())
        .arg(repo_root().join("scripts/langbot-runners"))
        .arg(bridge_bin())
        .arg(adapters)
        .arg(plugin)
        .output()
        .expect("the runner generator runs")
}

/// The LangBot venv's python: `HARNESS_BRIDGE_LANGBOT_PYTHON`, else
/// `target/langbot-venv` (both set up by `scripts/test`).
pub fn langbot_python() -> PathBuf {
    let path = std::env::var_os("HARNESS_BRIDGE_LANGBOT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/langbot-venv/bin/python"));
    assert!(
        path.exists(),
        "LangBot is not installed at {}: run `scripts/test` (it creates the venv from \
         tests/langbot/requirements.txt), or set HARNESS_BRIDGE_LANGBOT_PYTHON",
        path.display()
    );
    path
}
