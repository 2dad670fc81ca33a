//! Two things the code cannot know by itself. The built-in harness specs
//! are the files of `harness-adapters/`: the script lists them for
//! `include_str!`, so a harness is added by adding its YAML file and no
//! list in the code can miss one.
//!
//! And it stamps the build with the commit it was made from, for `--version`:
//! `HARNESS_BRIDGE_COMMIT` is `<12-digit commit> <commit date>`, from git
//! when the crate is a git checkout (a worktree too, where `.git` is a
//! file), else from `HARNESS_BRIDGE_BUILD_COMMIT` in the build's
//! environment (a source archive, a container build without `.git`; it
//! wins over git when set), else `unknown`. The two names differ because
//! cargo sets `HARNESS_BRIDGE_COMMIT` in the environment of the tests it
//! runs: a test that runs cargo would otherwise hand it back here, and
//! each build would undo the other's.
//!
//! It runs again only when HEAD moves: cargo watches HEAD and the branch
//! it points to, not the tree, so a build after an edit does not run git,
//! and a tree with uncommitted changes is not marked (that would need the
//! script to run at every build).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    list_adapters();
    println!("cargo:rerun-if-env-changed=HARNESS_BRIDGE_BUILD_COMMIT");
    let stamp = std::env::var("HARNESS_BRIDGE_BUILD_COMMIT")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(from_git)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=HARNESS_BRIDGE_COMMIT={stamp}");
}

/// `git` in the crate's folder, its output trimmed, or `None` when git is
/// missing or says no.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The commit and its date, after telling cargo which files move with HEAD;
/// `None` where the crate is not the top of its repository (sources
/// unpacked inside another checkout name that checkout's commit).
fn from_git() -> Option<String> {
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    if top.canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    let git_dir = PathBuf::from(git(&["rev-parse", "--absolute-git-dir"])?);
    watch(&git_dir.join("HEAD"));
    let common = git(&["rev-parse", "--git-common-dir"])
        .map(|d| absolute(&git_dir, &d))
        .unwrap_or_else(|| git_dir.clone());
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let loose = common.join(&branch);
        if loose.exists() {
            watch(&loose);
        } else {
            // Packed: a commit writes the loose file into its folder.
            watch(&common.join("packed-refs"));
            if let Some(folder) = loose.parent() {
                watch(folder);
            }
        }
    }
    git(&["log", "-1", "--abbrev=12", "--format=%h %cs"])
}

/// `path` as git printed it: relative ones are relative to the crate's
/// folder, except the common dir, which git gives relative to the git dir
/// when that is where it is.
fn absolute(git_dir: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    match manifest.map(|m| m.join(path)) {
        Some(joined) if joined.exists() => joined,
        _ => git_dir.join(path),
    }
}

/// Watch a path only where it exists: a missing one runs the script at
/// every build.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Writes `$OUT_DIR/built_in_adapters.rs`: `&[(file name, its text)]` for
/// every `*.yaml` of `harness-adapters/`, by name.
fn list_adapters() {
    let dir = Path::new("harness-adapters");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".yaml"))
            .collect(),
        Err(e) => panic!("cannot read {}: {e}", dir.display()),
    };
    files.sort();
    let mut table = String::from("&[\n");
    for file in &files {
        // A name a path literal would have to escape is no spec's name.
        assert!(
            file.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "harness-adapters/{file}: name a spec with letters, digits, `-`, `_` and `.` only"
        );
        let _ = writeln!(
            table,
            "    ({file:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/harness-adapters/{file}\"))),"
        );
    }
    table.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = out.join("built_in_adapters.rs");
    if let Err(e) = std::fs::write(&target, table) {
        panic!("cannot write {}: {e}", target.display());
    }
}
