//! Launching a harness process: its own process group, a whitelisted
//! environment, stdin as the spec says, and a stop that takes the whole
//! group (the harness and every MCP server or tool it started).
//!
//! The group is the unit of cleanup. A harness that exits normally can
//! still leave children behind (a stdio MCP server it did not reap), so the
//! group is killed after every run, not only on a deadline.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdout, Command};
use tracing::Instrument;

use super::EnvSpec;
use super::stderr::StderrTail;

/// What to run, where, with what.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Resolved program path.
    pub program: &'a Path,
    /// Arguments (never secrets: those go in `env`).
    pub args: &'a [String],
    /// Working directory: the conversation's workspace.
    pub cwd: &'a Path,
    /// The complete environment; nothing else is inherited.
    pub env: &'a BTreeMap<String, String>,
    /// Text written to stdin before it is closed; `None` closes it at once.
    pub stdin: Option<&'a str>,
}

/// The environment a harness gets: the spec's whitelist (names, or
/// prefixes ending in `*`) and the operator's additions, read through
/// `lookup`, then the spec's fixed values, then `extra` (run facts such as
/// the MCP token). Nothing else from the bridge's environment.
pub fn child_env(
    spec: &EnvSpec,
    operator_pass: &[String],
    operator_set: &BTreeMap<String, String>,
    extra: &BTreeMap<String, String>,
    vars: &[(String, String)],
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for pattern in spec.pass.iter().chain(operator_pass) {
        let matches = |name: &str| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        };
        for (name, value) in vars.iter().filter(|(n, _)| matches(n)) {
            env.insert(name.clone(), value.clone());
        }
    }
    env.extend(spec.set.clone());
    env.extend(operator_set.clone());
    env.extend(extra.clone());
    env
}

/// Find `binary` the way a shell would, on the child's `PATH`: a name with
/// a `/` is taken as a path. `None` when there is no such executable file.
pub fn find_program(binary: &str, path: Option<&str>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if binary.contains('/') {
        let p = PathBuf::from(binary);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(binary))
        .find(|p| executable(p))
}

/// A running harness, leader of its own process group.
#[derive(Debug)]
pub struct HarnessProcess {
    child: Child,
    pgid: Option<Pid>,
    stderr: StderrTail,
    stderr_done: Option<tokio::task::JoinHandle<()>>,
}

impl HarnessProcess {
    /// Start the process; its stdout is handed back for the decoder.
    pub fn spawn(launch: &Launch<'_>) -> std::io::Result<(Self, ChildStdout)> {
        let mut command = Command::new(launch.program);
        command
            .args(launch.args)
            .current_dir(launch.cwd)
            .env_clear()
            .envs(launch.env)
            .stdin(if launch.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // If the bridge itself is killed (SIGKILL leaves it no chance to
        // clean up), the harness still gets SIGTERM from the kernel. The
        // signal follows the spawning *thread*: runs spawn from runtime
        // worker threads, which live as long as the bridge.
        // SAFETY: the closure runs in the forked child before exec and
        // only makes one async-signal-safe system call.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn()?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("the harness's stdout was not captured"))?;
        if let (Some(text), Some(mut stdin)) = (launch.stdin, child.stdin.take()) {
            let text = text.to_string();
            tokio::spawn(async move {
                // A harness that exits without reading its prompt is
                // reported by its exit, not by this write.
                let _ = stdin.write_all(text.as_bytes()).await;
                let _ = stdin.shutdown().await;
            });
        }
        let stderr = StderrTail::new(launch.env);
        let stderr_done = child.stderr.take().map(|pipe| {
            let tail = stderr.clone();
            tokio::spawn(async move { tail.read(pipe).await }.in_current_span())
        });
        Ok((
            HarnessProcess {
                child,
                pgid,
                stderr,
                stderr_done,
            },
            stdout,
        ))
    }

    /// The process group id (the leader's pid), for tests and logs.
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Wait for the harness to exit, then clear its group.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait().await;
        self.kill_group(Signal::SIGKILL);
        status
    }

    /// Stop the whole group: SIGTERM, then SIGKILL after `grace`.
    pub async fn terminate(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        self.kill_group(Signal::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => {
                // The leader is gone; members that ignored SIGTERM are not.
                self.kill_group(Signal::SIGKILL);
                status
            }
            Err(_) => {
                tracing::warn!(pgid = ?self.pgid, "harness ignored SIGTERM; killing its group");
                self.kill_group(Signal::SIGKILL);
                self.child.wait().await
            }
        }
    }

    /// The last stderr lines, once the stream has ended (or shortly after).
    pub async fn stderr_tail(&mut self) -> Vec<String> {
        if let Some(done) = self.stderr_done.take() {
            // Grandchildren may hold the pipe open; do not wait forever.
            let _ = tokio::time::timeout(Duration::from_millis(500), done).await;
        }
        self.stderr.lines()
    }

    fn kill_group(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            match killpg(pgid, signal) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => {
                    tracing::warn!(pgid = pgid.as_raw(), "cannot signal the harness group: {e}")
                }
            }
        }
    }
}

/// Kill what is left of a harness process group a previous bridge started
/// and could not stop (it was killed outright): every process in group
/// `pgid` gets SIGKILL, but only when one of them still works in `root`
/// (the run's own workspace), so a group id the system has since reused
/// for something else is left alone. Returns how many processes of the
/// group were found.
pub fn kill_leftover_group(pgid: i32, root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    // The kernel reports cwd resolved; the root may be relative or linked.
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut members = 0;
    let mut ours = false;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parens.
        let pgrp = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().nth(2))
            .and_then(|field| field.parse::<i32>().ok());
        if pgrp != Some(pgid) {
            continue;
        }
        members += 1;
        ours |=
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&root));
    }
    if ours {
        tracing::warn!(
            pgid,
            members,
            "killing a harness group left by a bridge that died"
        );
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    members
}

impl Drop for HarnessProcess {
    fn drop(&mut self) {
        // A run that is abandoned (its task dropped) must not leave the
        // harness behind.
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill_group(Signal::SIGKILL);
        }
    }
}
