//! Stamps the build with the commit it was made from, for `--version`:
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

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
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
