//! The one place the bridge runs git.
//!
//! A harness may write its worktree, the objects and its worktree's own
//! git folder, so git here reads nothing that could make the bridge run a
//! program of the harness's choice: the folders are given by variables
//! (never found from the worktree's `.git` file, which the harness can
//! rewrite), hooks and fsmonitor are off, external diff drivers and text
//! conversions are not used, and only the repository's own configuration
//! is read (not the system's or the bridge user's). Every call is bounded
//! in time.

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
    common_dir: Option<PathBuf>,
    work_tree: Option<PathBuf>,
    index: Option<PathBuf>,
    /// Variables a call needs beyond the safe ones (a push's credentials).
    env: Vec<(String, String)>,
}

impl Git {
    /// The repository alone: refs, objects, worktrees' records.
    pub fn bare(common_dir: &Path) -> Git {
        Git {
            git_dir: common_dir.to_path_buf(),
            common_dir: None,
            work_tree: None,
            index: None,
            env: Vec::new(),
        }
    }

    /// A linked worktree: its own git folder (`worktrees/<name>`) in the
    /// repository's, and its files.
    pub fn worktree(admin: &Path, common_dir: &Path, work_tree: &Path) -> Git {
        Git {
            git_dir: admin.to_path_buf(),
            common_dir: Some(common_dir.to_path_buf()),
            work_tree: Some(work_tree.to_path_buf()),
            index: None,
            env: Vec::new(),
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
        let mut command = safe_command();
        command.env("GIT_DIR", &self.git_dir).args(args);
        if let Some(common) = &self.common_dir {
            command.env("GIT_COMMON_DIR", common);
        }
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
        output(command, args.join(" ")).await
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
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Run a git command to its end (bounded by [`TIMEOUT`]); its standard
/// output, or git's last words.
async fn output(mut command: tokio::process::Command, shown: String) -> Result<Vec<u8>, GitError> {
    let child = command.spawn().map_err(GitError::Spawn)?;
    let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| GitError::TimedOut {
            args: shown.clone(),
        })?
        .map_err(GitError::Spawn)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let said = said[said.len().saturating_sub(3)..].join("; ");
        return Err(GitError::Failed {
            args: shown,
            said: if said.is_empty() {
                format!("exit {}", output.status)
            } else {
                said
            },
        });
    }
    Ok(output.stdout)
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
    output(command, args.join(" ")).await.map(drop)
}

/// The git folder that holds a repository's objects and refs (its
/// `.git`), found from the operator's folder once at start.
pub async fn common_dir(repository: &Path) -> Result<PathBuf, GitError> {
    let git = Git {
        git_dir: repository.join(".git"),
        common_dir: None,
        work_tree: None,
        index: None,
        env: Vec::new(),
    };
    let dir = git
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
