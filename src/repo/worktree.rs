//! A conversation's worktree: its workspace is a git worktree of the
//! project on a branch of its own, made on the first turn and kept.
//!
//! The workspace already holds the bridge's files (`.langbot/`, the
//! skills, the MCP file) when the worktree is made: the bridge makes the
//! worktree's record itself ([`super::record`]), points the workspace's
//! `.git` file at it, and checks the branch's files out in place through
//! its own repository for the worktree ([`super::private`]). The bridge's
//! files are listed in the repository's `info/exclude`, so they never
//! show in a diff or a commit.
//!
//! The worktree's record in the repository (`worktrees/<name>`) is named
//! from the workspace's path, so the bridge finds it again without reading
//! the `.git` file the harness may have rewritten.

use std::path::{Path, PathBuf};

use super::git::Git;
use super::{Project, ProjectError};

/// The lines the bridge keeps in the repository's `info/exclude`, between
/// these markers.
const EXCLUDE_BEGIN: &str = "# harness-bridge: the bridge's own files in a conversation's worktree";
const EXCLUDE_END: &str = "# harness-bridge: end";

/// Written in the workspace once the branch's files are checked out: a
/// record without it is a worktree whose folder was removed.
pub(super) const MADE: &str = ".langbot/worktree-made";

/// One conversation's worktree of a project.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The project's name, for sentences.
    pub project: String,
    /// The repository's git folder.
    pub common_dir: PathBuf,
    /// The worktree's record in it (`worktrees/<name>`).
    pub admin: PathBuf,
    /// The worktree: the conversation's workspace.
    pub work_tree: PathBuf,
    /// The conversation's branch.
    pub branch: String,
    /// What the person should hear of how the worktree was made ready
    /// (a branch made again after it was deleted under the bridge).
    pub notes: Vec<String>,
    /// Where the project carries conversations' branches between
    /// instances.
    pub carry: Option<super::Remote>,
    /// The configuration of the bridge's own repository for the worktree.
    pub(super) private_config: std::sync::Arc<str>,
    /// Who the harness is outside its namespace, when not the bridge's
    /// user: what it must write is given to it.
    pub(super) owner: Option<&'static crate::owner::Owner>,
    /// The worktree's lock, held (shared) by the turn while it works
    /// there, so that it is not put away under the turn.
    pub(super) in_use: Option<std::sync::Arc<std::fs::File>>,
    /// The watch on the worktree's folders from the state before the
    /// turn, taken by the look after it.
    pub(super) watch: std::sync::Arc<std::sync::Mutex<Option<super::watch::Watch>>>,
    /// Where the watch is kept for the next turn, and found again.
    pub(super) kept_watches: super::watch::KeptWatches,
}

impl Checkout {
    /// The conversation's worktree in `workspace`, made from the base
    /// branch (or the conversation's branch, when it already exists) the
    /// first time. `bridge_paths` are the workspace-relative paths the
    /// bridge writes (`.langbot/`, the skills folder…), kept out of git.
    pub async fn ensure(
        project: &Project,
        workspace: &Path,
        branch: String,
        bridge_paths: &[String],
    ) -> Result<Checkout, ProjectError> {
        if !project.common_dir.join("HEAD").is_file() {
            return Err(ProjectError::Gone {
                name: project.name.clone(),
                repository: project.common_dir.display().to_string(),
            });
        }
        let mut checkout = Checkout::of(project, workspace, branch);
        checkout.hold().await?;
        checkout.exclude(bridge_paths)?;
        checkout.ready_private()?;
        if checkout.has_record() {
            // The harness may have rewritten its `.git` file or its record's
            // ways: git run by the harness finds its record through them.
            if let Some(note) = checkout.write_links()? {
                checkout.notes.push(note);
            }
            if let Some(note) = checkout.restore_branch(project).await? {
                checkout.notes.push(note);
            }
            if !workspace.join(MADE).exists() {
                // The record is there but the folder was removed (by
                // hand, or a clean-up): nothing uncommitted is left to
                // lose, and the branch's files come back.
                let head = checkout.branch_commit().await?;
                checkout.set_head(&head)?;
                checkout.check_out_files(&head).await?;
                tracing::info!(project = %checkout.project, branch = %checkout.branch, "the conversation's worktree folder was gone; its branch is checked out again");
            }
            checkout.own_head().await?;
            let head = checkout
                .head_commit()
                .await
                .map_err(|why| checkout.fail(why.to_string()))?;
            if let Some(note) = checkout.mend_index(&head).await? {
                checkout.notes.push(note);
            }
            return Ok(checkout);
        }
        // Made here for the first time: the conversation may have worked
        // on another instance before.
        checkout.carry_in().await;
        let new_branch = checkout.make(project).await?;
        checkout.own_head().await?;
        if let Some(note) = checkout.bring_back().await? {
            checkout.notes.push(note);
        }
        if new_branch {
            checkout.notes.extend(project.uncommitted_on_base().await);
        }
        Ok(checkout)
    }

    /// The worktree of `workspace` in `project`, as the bridge names it:
    /// its record's name is fixed by the workspace's path, so it is found
    /// again without reading the `.git` file the harness may rewrite.
    pub(super) fn of(project: &Project, workspace: &Path, branch: String) -> Checkout {
        Checkout {
            project: project.name.clone(),
            common_dir: project.common_dir.clone(),
            admin: project
                .common_dir
                .join("worktrees")
                .join(admin_name(workspace)),
            work_tree: workspace.to_path_buf(),
            branch,
            notes: Vec::new(),
            carry: project.carry.clone(),
            private_config: project.private_config.clone(),
            owner: project.owner,
            in_use: None,
            watch: Default::default(),
            kept_watches: project.watches.clone(),
        }
    }

    /// What the harness must reach to commit: it reads the repository's
    /// git folder and writes only its worktree's own record (its HEAD,
    /// ref and index); its objects go to its workspace. No ref or object
    /// another conversation or the operator uses is within its reach.
    pub fn cage_paths(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        (vec![self.common_dir.clone()], vec![self.admin.clone()])
    }

    pub(super) fn fail(&self, why: String) -> ProjectError {
        ProjectError::Workspace {
            name: self.project.clone(),
            why,
        }
    }

    /// The commit the conversation's branch is at.
    pub(super) async fn branch_commit(&self) -> Result<String, ProjectError> {
        let rev = format!("refs/heads/{}^{{commit}}", self.branch);
        Git::bare(&self.common_dir)
            .line(&["rev-parse", "--verify", &rev])
            .await
            .map_err(|e| self.at_git(e))
    }

    /// A conversation's branch deleted under the bridge (its worktree
    /// still there) is made again: at the last commit the bridge saw on
    /// it, or at the base when that commit is gone too. What the person
    /// should hear of it, or `None` when the branch is there.
    async fn restore_branch(&self, project: &Project) -> Result<Option<String>, ProjectError> {
        let repo = Git::bare(&self.common_dir);
        let at_git = |source| ProjectError::Git {
            name: self.project.clone(),
            source,
        };
        let branch_ref = format!("refs/heads/{}", self.branch);
        // A later turn's usual case costs no git process: the branch's
        // ref is a file (the harness's git packs no refs).
        if self.common_dir.join(&branch_ref).is_file() || repo.has_commit(&branch_ref).await {
            return Ok(None);
        }
        let last = match self.last_head() {
            Some(head) if repo.has_commit(&head).await => Some(head),
            _ => None,
        };
        let (at, said) = match last {
            Some(head) => {
                let short = crate::interaction::short(&head).to_string();
                (head, format!("at its last commit `{short}`"))
            }
            None => {
                // The bridge's last state names a commit that is gone: the
                // next turn's changes are told from the branch as made.
                self.forget_last_state()?;
                (
                    format!("refs/heads/{}", project.base),
                    format!(
                        "from the base branch `{}`, its commits being gone",
                        project.base
                    ),
                )
            }
        };
        repo.run(&["update-ref", &branch_ref, &at])
            .await
            .map_err(at_git)?;
        tracing::warn!(
            project = %self.project,
            branch = %self.branch,
            "a conversation's branch was deleted outside the bridge; it is made again {said}"
        );
        Ok(Some(format!(
            "This conversation's branch `{}` had been deleted outside the bridge; \
             it is made again {said}.",
            self.branch
        )))
    }

    /// Make the worktree beside the bridge's files: its branch (from the
    /// base) when it has none, its record, its files checked out; whether
    /// the branch was made too. No git worktree command runs: they read
    /// every other conversation's record.
    async fn make(&self, project: &Project) -> Result<bool, ProjectError> {
        let repo = Git::bare(&self.common_dir);
        let branch_ref = format!("refs/heads/{}", self.branch);
        let exists = repo.has_commit(&branch_ref).await;
        if !exists {
            let base = format!("refs/heads/{}^{{commit}}", project.base);
            let Ok(base) = repo
                .line(&["rev-parse", "--verify", "--quiet", &base])
                .await
            else {
                return Err(ProjectError::BaseGone {
                    name: self.project.clone(),
                    base: project.base.clone(),
                });
            };
            // Made only where there is no such branch yet.
            repo.run(&["update-ref", &branch_ref, &base, ""])
                .await
                .map_err(|e| self.at_git(e))?;
        }
        let head = self.branch_commit().await?;
        self.make_record(&head)?;
        self.check_out_files(&head).await?;
        tracing::info!(
            project = %self.project,
            branch = %self.branch,
            "the conversation's worktree is made"
        );
        Ok(!exists)
    }

    /// Check `head`'s files out in place through the bridge's own
    /// repository (its index becomes the bridge's index of the worktree,
    /// and a copy the harness's), and note that they are.
    async fn check_out_files(&self, head: &str) -> Result<(), ProjectError> {
        // What a turn left is gone with the folder: the next turn starts
        // from the branch's commit.
        self.forget_last_state()?;
        let index = self.own_index_path();
        std::fs::create_dir_all(self.own_dir())
            .and_then(|()| self.forget_own_index())
            .map_err(|e| self.fail(format!("cannot start the bridge's index: {e}")))?;
        self.worktree_git()
            .with_index(&index)
            .run(&["read-tree", "--reset", "-u", head])
            .await
            .map_err(|e| self.at_git(e))?;
        self.install_index(&index)?;
        self.give_files()?;
        // Into the bridge's folder only when it is one (never through a
        // link the harness put in its place).
        let bridge_dir = self.work_tree.join(super::BRIDGE_DIR);
        if !std::fs::symlink_metadata(&bridge_dir).is_ok_and(|m| m.is_dir()) {
            return Err(self.fail(format!(
                "the workspace's {} is not a folder of the bridge's",
                super::BRIDGE_DIR
            )));
        }
        write_replacing(&self.work_tree.join(MADE), "", Reader::Bridge)
            .map_err(|e| self.fail(format!("cannot note the worktree as made: {e}")))
    }

    /// The worktree's files (but the bridge's folder, given as it is
    /// made) given to the harness's user, when it is not the bridge's:
    /// the bridge's git wrote them.
    pub(super) fn give_files(&self) -> Result<(), ProjectError> {
        let Some(owner) = self.owner else {
            return Ok(());
        };
        std::fs::File::open(&self.work_tree)
            .and_then(|folder| owner.give_tree(&folder, &[super::BRIDGE_DIR]))
            .map(drop)
            .map_err(|e| {
                self.fail(format!(
                    "cannot give the worktree's files to its harness: {e}"
                ))
            })
    }

    /// Forget the worktree as the last turn left it: the next turn's
    /// changes are told from the branch's commit.
    fn forget_last_state(&self) -> Result<(), ProjectError> {
        match std::fs::remove_file(self.kept_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(self.fail(format!("cannot forget the worktree's last state: {e}")))
            }
            _ => Ok(()),
        }
    }

    /// List the bridge's own paths in the repository's `info/exclude`.
    fn exclude(&self, bridge_paths: &[String]) -> Result<(), ProjectError> {
        let file = self.common_dir.join("info").join("exclude");
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let mut kept: Vec<&str> = Vec::new();
        let mut ours: Vec<String> = Vec::new();
        let mut inside = false;
        for line in text.lines() {
            match line {
                EXCLUDE_BEGIN => inside = true,
                EXCLUDE_END => inside = false,
                _ if inside => ours.push(line.to_string()),
                _ => kept.push(line),
            }
        }
        let mut wanted = ours.clone();
        for path in bridge_paths {
            let line = format!("/{}", path.trim_start_matches('/'));
            if !wanted.contains(&line) {
                wanted.push(line);
            }
        }
        if wanted == ours && text.contains(EXCLUDE_BEGIN) {
            return Ok(());
        }
        let mut out = kept.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(EXCLUDE_BEGIN);
        out.push('\n');
        for line in &wanted {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(EXCLUDE_END);
        out.push('\n');
        std::fs::create_dir_all(self.common_dir.join("info"))
            .and_then(|()| write_replacing(&file, &out, Reader::Anyone))
            .map_err(|e| self.fail(format!("cannot keep the bridge's files out of git: {e}")))
    }
}

/// The worktree record's name for a workspace: fixed by its path.
pub(super) fn admin_name(workspace: &Path) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    format!("hb-{}", hex::encode(&digest[..6]))
}

/// Who may read a file the bridge writes whole.
#[derive(Debug, Clone, Copy)]
pub(super) enum Reader {
    /// The bridge alone (0600).
    Bridge,
    /// Every user (0644): what the harness's git reads in the repository.
    Anyone,
    /// The harness, which may also write it: given to the cage's owner
    /// when there is one (a root bridge's), else the bridge's (0600).
    Harness(Option<&'static crate::owner::Owner>),
}

/// Write `path` whole through a temporary file renamed over it, for
/// `reader`: a link the harness left there is replaced, never followed.
pub(super) fn write_replacing(
    path: &Path,
    bytes: impl AsRef<[u8]>,
    reader: Reader,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, bytes.as_ref())?;
    match reader {
        Reader::Bridge | Reader::Harness(None) => {}
        Reader::Anyone => file
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?,
        Reader::Harness(Some(owner)) => owner.give(file.as_file())?,
    }
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Whether `path` is a plain file holding exactly `bytes`, read without
/// following a link or waiting on a pipe: then there is nothing to write.
pub(super) fn holds_exactly(path: &Path, bytes: &[u8]) -> bool {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .and_then(|f| {
                let mut held = Vec::new();
                f.take(bytes.len() as u64 + 1).read_to_end(&mut held)?;
                Ok(held == bytes)
            })
            .unwrap_or(false)
}

/// Remove the file (or link) at `path`, if there is one.
pub(super) fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing;
    use super::*;

    /// Each conversation's first turn prunes the repository's worktree
    /// records and adds its own: done at once by many, git's commands
    /// remove records others are making, or fail reading them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn many_conversations_make_their_worktrees_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let project = testing::project(dir.path(), "").await;
        let project = std::sync::Arc::new(project);
        let makes = (0..16).map(|n| {
            let (project, workspace) = (project.clone(), dir.path().join(format!("c{n}")));
            tokio::spawn(async move {
                std::fs::create_dir_all(workspace.join(super::super::BRIDGE_DIR)).unwrap();
                let made = Checkout::ensure(
                    &project,
                    &workspace,
                    format!("chat/c{n}"),
                    &[".langbot/".into()],
                )
                .await;
                (workspace, made.map(|_| ()).map_err(|e| e.to_string()))
            })
        });
        let made = futures::future::join_all(makes).await;
        for outcome in made {
            let (workspace, made) = outcome.unwrap();
            assert_eq!(made, Ok(()), "{}", workspace.display());
            assert_eq!(
                std::fs::read_to_string(workspace.join("greeting.txt")).unwrap(),
                "hello\n"
            );
        }
    }
}
