//! The one place the bridge runs git.
//!
//! A harness may write its worktree, its own object folder and its
//! worktree's record in the repository (`worktrees/<name>`), so git here
//! reads nothing it wrote that could make the bridge run a program or read
//! outside the project: a worktree's files are read through the bridge's
//! own repository for it ([`super::private`]), whose configuration is the
//! bridge's (no filter, driver, signature program, include or hook); the
//! record's HEAD is read by the bridge itself, checked, never followed
//! ([`super::record`]); the harness's objects come in only through a
//! copy that follows no link ([`super::intake`]). The repository's own
//! configuration is read only for calls on the repository alone (refs,
//! fetch, push), never the system's or the bridge user's; hooks and
//! fsmonitor are off everywhere. Every call is bounded in time, and an
//! answer can be bounded in size.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Longest one git call may take: a harness can make a worktree large.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Why a git call failed, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git is not installed, or could not start.
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    /// git ran and refused (its own words).
    #[error("`git {args}` failed: {said}")]
    Failed {
        /// The command, without the bridge's safety options.
        args: String,
        /// git's last lines on stderr.
        said: String,
    },
    /// git ran past [`TIMEOUT`] and was stopped.
    #[error("`git {args}` took over {} s and was stopped", TIMEOUT.as_secs())]
    TimedOut {
        /// The command.
        args: String,
    },
}

/// Which repository (and worktree, and index) a call works on.
#[derive(Debug, Clone)]
pub struct Git {
    git_dir: PathBuf,
    work_tree: Option<PathBuf>,
    index: Option<PathBuf>,
    /// Variables a call needs beyond the safe ones (a push's credentials).
    env: Vec<(String, String)>,
}

impl Git {
    /// The repository alone: refs, objects.
    pub fn bare(git_dir: &Path) -> Git {
        Git {
            git_dir: git_dir.to_path_buf(),
            work_tree: None,
            index: None,
            env: Vec::new(),
        }
    }

    /// The same, with `work_tree`'s files as its worktree.
    pub fn with_work_tree(&self, work_tree: &Path) -> Git {
        Git {
            work_tree: Some(work_tree.to_path_buf()),
            ..self.clone()
        }
    }

    /// The same, with an index file of the bridge's own (the worktree's
    /// index is the harness's, and stays as it left it).
    pub fn with_index(&self, index: &Path) -> Git {
        Git {
            index: Some(index.to_path_buf()),
            ..self.clone()
        }
    }

    /// The same, with these variables too (set after the safe ones).
    pub fn with_env(&self, env: Vec<(String, String)>) -> Git {
        Git {
            env,
            ..self.clone()
        }
    }

    /// Whether `rev` names a commit in the repository.
    pub async fn has_commit(&self, rev: &str) -> bool {
        let rev = format!("{rev}^{{commit}}");
        self.run(&["rev-parse", "--verify", "--quiet", &rev])
            .await
            .is_ok()
    }

    /// Run `git args…`; its standard output.
    pub async fn run(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        output(self.command(args), args.join(" "), None)
            .await
            .map(|out| out.bytes)
    }

    /// Run `git args…` and read at most `cap` bytes of its output: past
    /// them git is stopped, and what was read is said to be cut.
    pub async fn run_capped(&self, args: &[&str], cap: usize) -> Result<Capped, GitError> {
        output(self.command(args), args.join(" "), Some(cap)).await
    }

    /// Run `git args…` with `input` on its standard input; its output.
    pub async fn run_with_input(&self, args: &[&str], input: Vec<u8>) -> Result<Vec<u8>, GitError> {
        let mut command = self.command(args);
        command.stdin(Stdio::piped());
        let shown = args.join(" ");
        let mut child = command.spawn().map_err(GitError::Spawn)?;
        let stdin = child.stdin.take();
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // git may stop reading early (and say why on stderr).
                let _ = tokio::io::AsyncWriteExt::write_all(&mut stdin, &input).await;
            }
        };
        let (_, out) = tokio::join!(feed, collect(child, shown, None));
        out.map(|out| out.bytes)
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = safe_command();
        command.env("GIT_DIR", &self.git_dir).args(args);
        if let Some(work_tree) = &self.work_tree {
            command
                .env("GIT_WORK_TREE", work_tree)
                .current_dir(work_tree);
        } else {
            command.current_dir(&self.git_dir);
        }
        if let Some(index) = &self.index {
            command.env("GIT_INDEX_FILE", index);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Run and read the output as one trimmed line of text.
    pub async fn line(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self.run(args).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }
}

/// A fetch that writes nothing but the refs it names: no tags, no
/// `FETCH_HEAD`, no maintenance, no submodules.
pub const FETCH: [&str; 6] = [
    "fetch",
    "--quiet",
    "--no-tags",
    "--no-write-fetch-head",
    "--no-auto-gc",
    "--no-recurse-submodules",
];

/// git with the bridge's safety settings: no outside configuration, no
/// hooks, fsmonitor, external diff or pager, no prompt for credentials.
fn safe_command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new("git");
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=true",
            "-c",
            "diff.external=",
            "-c",
            "core.pager=cat",
            // What it writes in a repository, every user may read (a root
            // bridge's harnesses are another user outside their
            // namespace); folders hold it.
            "-c",
            "core.sharedRepository=0644",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// A git answer read up to a cap.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Capped {
    /// What was read: all of it, or the first `cap` bytes.
    pub bytes: Vec<u8>,
    /// Whether git had more to say (and was stopped).
    pub cut: bool,
}

/// The most of git's standard error kept (its end): its last lines say why.
const MAX_STDERR_BYTES: usize = 64 * 1024;

/// Run a git command to its end (bounded by [`TIMEOUT`]); its standard
/// output (up to `cap` bytes, when given), or git's last words.
async fn output(
    mut command: tokio::process::Command,
    shown: String,
    cap: Option<usize>,
) -> Result<Capped, GitError> {
    let child = command.spawn().map_err(GitError::Spawn)?;
    collect(child, shown, cap).await
}

/// Read a started git's output (up to `cap` bytes) and its last words,
/// and wait for it, all bounded by [`TIMEOUT`]. Past the cap git is
/// killed: what it would still say is never read nor held.
async fn collect(
    mut child: tokio::process::Child,
    shown: String,
    cap: Option<usize>,
) -> Result<Capped, GitError> {
    use tokio::io::AsyncReadExt as _;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(GitError::Spawn(std::io::Error::other(
            "git's output was not piped",
        )));
    };
    let read_out = async move {
        let limit = cap.map_or(u64::MAX, |cap| cap as u64 + 1);
        let mut bytes = Vec::new();
        stdout.take(limit).read_to_end(&mut bytes).await?;
        let cut = cap.is_some_and(|cap| bytes.len() > cap);
        if let Some(cap) = cap {
            bytes.truncate(cap);
        }
        Ok::<_, std::io::Error>(Capped { bytes, cut })
    };
    // Read to its end (a git stopped from writing its warnings would die
    // of a broken pipe), keeping only the last words.
    let read_err = async move {
        let mut stderr = stderr;
        let mut kept = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&chunk[..n]);
            if kept.len() > 2 * MAX_STDERR_BYTES {
                kept.drain(..kept.len() - MAX_STDERR_BYTES);
            }
        }
        kept
    };
    let run = async {
        let (out, err) = tokio::join!(read_out, read_err);
        let out = out.map_err(GitError::Spawn)?;
        if out.cut {
            // Stopped at the cap: its exit says nothing of the answer.
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Ok(out);
        }
        let status = child.wait().await.map_err(GitError::Spawn)?;
        if !status.success() {
            let stderr = String::from_utf8_lossy(&err);
            let said: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            let said = said[said.len().saturating_sub(3)..].join("; ");
            return Err(GitError::Failed {
                args: shown.clone(),
                said: if said.is_empty() {
                    format!("exit {status}")
                } else {
                    said
                },
            });
        }
        Ok(out)
    };
    tokio::time::timeout(TIMEOUT, run)
        .await
        .map_err(|_| GitError::TimedOut {
            args: shown.clone(),
        })?
}

/// Clone `url` into `dest` (a folder that does not exist yet), with
/// `env` (the remote's credentials).
pub async fn clone(url: &str, dest: &Path, env: Vec<(String, String)>) -> Result<(), GitError> {
    let mut command = safe_command();
    let dest_arg = dest.display().to_string();
    let args = ["clone", "--quiet", "--no-checkout", url, dest_arg.as_str()];
    command.args(args).envs(env);
    if let Some(parent) = dest.parent() {
        command.current_dir(parent);
    }
    output(command, args.join(" "), None).await.map(drop)
}

/// The git folder that holds a repository's objects and refs (its
/// `.git`), found from the operator's folder once at start.
pub async fn common_dir(repository: &Path) -> Result<PathBuf, GitError> {
    let dir = Git::bare(&repository.join(".git"))
        .line(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .await?;
    Ok(PathBuf::from(dir))
}

/// The branch the repository's own checkout is on.
pub async fn current_branch(common_dir: &Path) -> Result<String, GitError> {
    Git::bare(common_dir)
        .line(&["symbolic-ref", "--short", "HEAD"])
        .await
}
