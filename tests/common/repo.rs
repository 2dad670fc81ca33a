//! A git repository as an operator's project: `web`, one commit on
//! `main`; and git run on it without the machine's or the user's
//! configuration.

use std::path::{Path, PathBuf};

/// `git -C dir ARGS`, its output; a failure fails the test.
pub fn git(dir: &Path, args: &[&str]) -> String {
    // A worktree a root bridge's harness owns is another user's folder
    // to the test's git, which would refuse it as of dubious ownership.
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "safe.directory=*"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository `web` under `dir`: `greeting.txt` (`hello`), committed on
/// `main`.
pub fn repository(dir: &Path) -> PathBuf {
    let repo = dir.join("web");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("greeting.txt"), "hello\n").unwrap();
    git(&repo, &["add", "greeting.txt"]);
    commit(&repo, "Hello");
    repo
}

/// Commit what is staged in `repo`, as the operator.
pub fn commit(repo: &Path, message: &str) {
    git(
        repo,
        &[
            "-c",
            "user.name=Operator",
            "-c",
            "user.email=op@example.org",
            "commit",
            "-q",
            "-m",
            message,
        ],
    );
}
