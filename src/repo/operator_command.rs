//! The operator's own commands the bridge runs for a project (the pull
//! request after an approved publish).
//!
//! Unlike a harness, such a command is the operator's: it runs
//! bridge-side, outside the cage, with the bridge's environment (where
//! the operator's credentials for their forge are), and is never given
//! anything a harness wrote but the branch's name, as one argument. It
//! runs in the repository's folder and is bounded in time.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// Run `program args…` in `folder` to its end, or stop it after `limit`
/// (then the error is of kind `TimedOut`).
pub(super) async fn run(
    program: &str,
    args: Vec<String>,
    folder: &Path,
    limit: Duration,
) -> std::io::Result<Output> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .current_dir(folder)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(limit, output).await {
        Ok(done) => done,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("it took over {} s and was stopped", limit.as_secs()),
        )),
    }
}
