//! Launching a harness process: its own process group inside its turn's
//! cage (`cage`), a whitelisted environment, stdin as the spec says, a
//! graceful stop by group (SIGTERM to the harness and every MCP server or
//! tool it started, then SIGKILL), and at the end of every turn the cage
//! cleared: whatever the harness started, in its group or not, is killed.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tracing::Instrument;

use super::EnvSpec;
use super::cage::{Mechanism, Plan, Quota, TurnCage};
use super::spawn::{self, Process, Stdin, Stdout};
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
    /// What the harness may reach (see `cage`); `None`: uncaged.
    pub wall: Option<&'a Plan>,
    /// The conversation's resource limits the harness joins; `None`: none.
    pub quota: Option<&'a Quota>,
    /// Who answers the door of a harness in a network of its own
    /// (`wall.own_network`); without one its door stays shut.
    pub door: Option<&'a std::sync::Arc<dyn DoorKeeper>>,
}

/// Who answers a harness's door (its one way out of a network namespace
/// of its own): given the listening socket made inside, serves it until
/// the returned guard is dropped, which the harness process holds.
pub trait DoorKeeper: Send + Sync + std::fmt::Debug {
    /// Serve `listener` (the door, in the harness's namespace).
    fn open(&self, listener: tokio::net::TcpListener) -> tokio_util::sync::DropGuard;

    /// A digest of where the door leads (the model endpoints and keys
    /// behind its gateway, its proxy's destinations): the harness's
    /// environment names only the door, so a process kept for later turns
    /// is known by this too.
    fn identity(&self) -> [u8; 32];
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
        for (name, value) in vars.iter().filter(|(n, _)| env_pattern_matches(pattern, n)) {
            env.insert(name.clone(), value.clone());
        }
    }
    env.extend(spec.set.clone());
    env.extend(operator_set.clone());
    env.extend(extra.clone());
    env
}

/// Whether variable `name` is one a whitelist `pattern` passes: the same
/// name, or a prefix when the pattern ends in `*`.
pub fn env_pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
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

/// A running harness, leader of its own process group, in its cage.
#[derive(Debug)]
pub struct HarnessProcess {
    child: Process,
    pgid: Option<Pid>,
    cage: TurnCage,
    stderr: StderrTail,
    stderr_done: Option<tokio::task::JoinHandle<()>>,
    /// The door served while the harness lives (dropped: shut).
    _door: Option<tokio_util::sync::DropGuard>,
}

impl HarnessProcess {
    /// Start the process; its stdout is handed back for the decoder.
    pub async fn spawn(launch: &Launch<'_>) -> std::io::Result<(Self, Stdout)> {
        let (process, stdout, _) = Self::start(launch, false).await?;
        Ok((process, stdout))
    }

    /// Start a process that takes many turns: stdin stays open and is
    /// handed back with stdout (`launch.stdin` is not used).
    pub async fn spawn_live(launch: &Launch<'_>) -> std::io::Result<(Self, Stdout, Stdin)> {
        let (process, stdout, stdin) = Self::start(launch, true).await?;
        let stdin =
            stdin.ok_or_else(|| std::io::Error::other("the harness's stdin was not captured"))?;
        Ok((process, stdout, stdin))
    }

    async fn start(
        launch: &Launch<'_>,
        live: bool,
    ) -> std::io::Result<(Self, Stdout, Option<Stdin>)> {
        let mut cage = TurnCage::new(launch.quota)?;
        // In a process group of its own, with the parent-death signal: if
        // the bridge itself is killed (SIGKILL leaves it no chance to
        // clean up), the harness still gets SIGTERM from the kernel. The
        // signal follows the cloning *thread*: `spawn` clones on spawner
        // threads that live as long as the bridge.
        let request = spawn::Request {
            program: launch.program,
            args: launch.args,
            cwd: launch.cwd,
            env: launch.env.clone(),
            stdin: live || launch.stdin.is_some(),
            hooks: Vec::new(),
            around: None,
            cgroup: None,
        };
        let spawned = cage.spawn(request, launch.wall, launch.quota).await?;
        let door = match (cage.take_door(), launch.door) {
            (Some(listener), Some(keeper)) => {
                Some(keeper.open(tokio::net::TcpListener::from_std(listener)?))
            }
            _ => None,
        };
        let child = spawned.process;
        let pgid = i32::try_from(child.id()).ok().map(Pid::from_raw);
        let stdout = spawned.stdout;
        let mut stdin = spawned.stdin;
        let kept = if live { stdin.take() } else { None };
        if let (Some(text), Some(mut stdin)) = (launch.stdin, stdin) {
            let text = text.to_string();
            tokio::spawn(async move {
                // A harness that exits without reading its prompt is
                // reported by its exit, not by this write.
                let _ = stdin.write_all(text.as_bytes()).await;
                let _ = stdin.shutdown().await;
            });
        }
        let stderr = StderrTail::new(launch.env);
        let pipe = spawned.stderr;
        let tail = stderr.clone();
        let stderr_done = Some(tokio::spawn(
            async move { tail.read(pipe).await }.in_current_span(),
        ));
        Ok((
            HarnessProcess {
                child,
                pgid,
                cage,
                stderr,
                stderr_done,
                _door: door,
            },
            stdout,
            kept,
        ))
    }

    /// The process group id (the leader's pid), for tests and logs.
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// The turn marker the harness and all it starts carry (see `cage`).
    pub fn marker(&self) -> &str {
        self.cage.marker()
    }

    /// Whether the harness itself is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The harness's pid (its group's id), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.status().is_none().then(|| self.child.id())
    }

    /// Wait for the harness itself to exit (cancel-safe: nothing else is
    /// done; [`HarnessProcess::clear`] ends what it left).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Stop the whole group: SIGTERM, then SIGKILL after `grace`; waits
    /// for the harness to exit.
    pub async fn terminate(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        self.kill_group(Signal::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                tracing::warn!(pgid = ?self.pgid, "harness ignored SIGTERM; killing its group");
                self.kill_group(Signal::SIGKILL);
                self.child.wait().await
            }
        }
    }

    /// Once the harness has exited: kill everything it started that still
    /// runs — its group, and whatever left the group — and wait until it
    /// is gone. Returns how many processes that was (logged when any).
    pub async fn clear(&mut self) -> usize {
        let left = self.cage.clear().await;
        // Without a cgroup, members that cleared their marker are still
        // reached by the group. (An emptied cgroup has no members left, and
        // the group's id may since belong to someone else.)
        if self.cage.mechanism() == Mechanism::Subreaper {
            self.kill_group(Signal::SIGKILL);
        }
        if left > 0 {
            tracing::warn!(
                left,
                "the harness left {left} process(es) running after it exited or was stopped; killed"
            );
        }
        left
    }

    /// Who may present the run's token: this harness and what it started.
    pub fn holder(&self) -> Option<std::sync::Arc<dyn crate::host::Holder>> {
        self.cage.holder()
    }

    /// While the harness lives on between turns: kill what the turn
    /// detached from it (see [`TurnCage::clear_detached`]). Returns how
    /// many processes that was (logged when any).
    pub async fn clear_detached(&self) -> usize {
        let left = self.cage.clear_detached().await;
        if left > 0 {
            tracing::warn!(
                left,
                "the turn left {left} process(es) running outside the harness; killed"
            );
        }
        left
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

impl Drop for HarnessProcess {
    fn drop(&mut self) {
        // A run that is abandoned (its task dropped) must not leave the
        // harness behind: its group now, the rest as the cage drops.
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill_group(Signal::SIGKILL);
        }
    }
}
