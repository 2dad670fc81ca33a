//! A conversation's commits are its own until the bridge takes them in.
//!
//! The repository's refs and objects are shared by every conversation of
//! the project and by the operator, so a harness writes neither. Its
//! worktree's HEAD is detached (kept in the worktree's own record, so a
//! commit moves only it), and its git writes objects into a folder of the
//! conversation's workspace (`GIT_OBJECT_DIRECTORY`, with the
//! repository's objects as an alternate to read). After a turn the bridge
//! fetches what that HEAD reaches into the repository, which makes git
//! check every object on the way in, so an object a harness forged never
//! reaches another conversation, and moves the conversation's branch
//! there ([`Checkout::take_in`]).

use std::path::PathBuf;

use super::git::Git;
use super::worktree::write_replacing;
use super::{Checkout, ProjectError};

/// The harness's object folder, in the workspace (the bridge's `.langbot/`
/// is kept out of git).
pub(super) const OWN_OBJECTS: &str = ".langbot/git-objects";

/// The ref the bridge fetches from, in its own copy of the turn's commits.
const TURN_REF: &str = "refs/heads/turn";

impl Checkout {
    fn own_objects(&self) -> PathBuf {
        self.work_tree.join(OWN_OBJECTS)
    }

    /// Where the bridge takes the turn's commits from: a repository of its
    /// own (the harness cannot write it) reading the harness's objects.
    fn source(&self) -> PathBuf {
        let name = self.admin.file_name().unwrap_or_default();
        self.own_dir().join(name).with_extension("git")
    }

    /// The variables the harness's git runs with in this worktree: where
    /// it writes objects, and the repository's to read.
    pub fn git_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "GIT_OBJECT_DIRECTORY",
                self.own_objects().display().to_string(),
            ),
            (
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                self.common_dir.join("objects").display().to_string(),
            ),
        ]
    }

    /// The variables the bridge's own git needs to read the harness's
    /// objects in this worktree.
    pub(super) fn bridge_git_env(&self) -> Vec<(String, String)> {
        vec![(
            "GIT_ALTERNATE_OBJECT_DIRECTORIES".into(),
            self.own_objects().display().to_string(),
        )]
    }

    /// Before a turn: the object folder ready (with no alternates of the
    /// harness's own), and HEAD detached at its commit: at the branch's
    /// the first time, where the last turn left it after.
    pub(super) async fn own_head(&self) -> Result<(), ProjectError> {
        let objects = self.own_objects();
        if self.objects_are_a_link() {
            // Pointed elsewhere by the harness: nothing there is its own.
            std::fs::remove_file(&objects)
                .map_err(|e| self.fail(format!("cannot remove a link to objects: {e}")))?;
        }
        std::fs::create_dir_all(&objects)
            .and_then(|()| remove_if_there(&objects.join("info").join("alternates")))
            .map_err(|e| self.fail(format!("cannot make the worktree's object folder: {e}")))?;
        let head = std::fs::read_to_string(self.admin.join("HEAD")).unwrap_or_default();
        let head = head.trim();
        if head.len() >= 40 && head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(());
        }
        let at = self
            .git()
            .line(&["rev-parse", "--verify", "HEAD^{commit}"])
            .await
            .map_err(|source| self.at_git(source))?;
        write_replacing(&self.admin.join("HEAD"), &format!("{at}\n"))
            .map_err(|e| self.fail(format!("cannot detach the worktree's HEAD: {e}")))
    }

    /// After a turn (or when the agent asks to publish): the commits
    /// `head` reaches fetched into the repository, checked by git on the
    /// way in, and the conversation's branch moved to it; what the person
    /// should hear when the branch could not be carried.
    pub(super) async fn take_in(&self, head: &str) -> Result<Option<String>, ProjectError> {
        let branch_ref = format!("refs/heads/{}", self.branch);
        if self.fetch_in(head, &branch_ref).await? {
            return Ok(self.carry_out().await);
        }
        Ok(None)
    }

    /// The objects `commit` reaches fetched into the repository from the
    /// worktree's (checked by git on the way in), and `dest` moved to it;
    /// whether it moved.
    pub(super) async fn fetch_in(&self, commit: &str, dest: &str) -> Result<bool, ProjectError> {
        let repo = Git::bare(&self.common_dir);
        let at_git = |source| self.at_git(source);
        let now = repo
            .line(&["rev-parse", "--verify", "--quiet", dest])
            .await
            .unwrap_or_default();
        if now == commit {
            return Ok(false);
        }
        if self.objects_are_a_link() {
            return Err(self.fail(
                "the worktree's object folder was replaced by a link; its commits are not taken in"
                    .into(),
            ));
        }
        let source = self.source();
        let own = Git::bare(&source);
        if !source.join("HEAD").is_file() {
            std::fs::create_dir_all(&source)
                .map_err(|e| self.fail(format!("cannot make the bridge's copy: {e}")))?;
            own.run(&["init", "--bare", "--quiet"])
                .await
                .map_err(at_git)?;
        }
        // Only the harness's objects and the repository's: an alternate
        // the harness added to its folder is not followed.
        remove_if_there(&self.own_objects().join("info").join("alternates"))
            .and_then(|()| {
                write_replacing(
                    &source.join("objects").join("info").join("alternates"),
                    &format!(
                        "{}\n{}\n",
                        self.own_objects().display(),
                        self.common_dir.join("objects").display()
                    ),
                )
            })
            .map_err(|e| self.fail(format!("cannot read the turn's commits: {e}")))?;
        own.run(&["update-ref", TURN_REF, commit])
            .await
            .map_err(at_git)?;
        let source_arg = source.display().to_string();
        let refspec = format!("+{TURN_REF}:{dest}");
        let mut args = super::git::FETCH.to_vec();
        args.extend(["--update-head-ok", &source_arg, &refspec]);
        repo.run(&args).await.map_err(at_git)?;
        Ok(true)
    }

    pub(super) fn objects_are_a_link(&self) -> bool {
        std::fs::symlink_metadata(self.own_objects()).is_ok_and(|m| m.file_type().is_symlink())
    }

    pub(super) fn at_git(&self, source: super::GitError) -> ProjectError {
        ProjectError::Git {
            name: self.project.clone(),
            source,
        }
    }
}

pub(super) fn remove_if_there(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
