//! The operator's own checkout, as a new conversation's branch sees it.
//!
//! A conversation's branch starts from the base branch's last commit. When
//! the operator's checkout is on that branch with changes not committed,
//! those changes are not in the conversation's worktree: the person is
//! told so on the first turn, so that no one asks the agent about work it
//! cannot see. Git runs there without taking any lock
//! (`GIT_OPTIONAL_LOCKS=0`), so the operator's index is left as it is.

use super::Project;
use super::git::Git;

impl Project {
    /// A sentence for the person when the operator's checkout of the base
    /// branch has changes not committed; `None` otherwise (a bare
    /// repository, a clone never checked out, another branch checked out,
    /// nothing changed, or git cannot tell).
    pub(super) async fn uncommitted_on_base(&self) -> Option<String> {
        let checkout = self
            .common_dir
            .file_name()
            .filter(|name| *name == ".git")
            .and(self.common_dir.parent())?;
        // A clone made without a checkout has no index: nothing of it is
        // the operator's work.
        if !self.common_dir.join("index").is_file() {
            return None;
        }
        let head = std::fs::read_to_string(self.common_dir.join("HEAD")).ok()?;
        if head.trim() != format!("ref: refs/heads/{}", self.base) {
            return None;
        }
        // The main worktree: its git folder is the repository's own.
        let status = Git::bare(&self.common_dir)
            .with_work_tree(checkout)
            .run(&["status", "--porcelain", "--untracked-files=no"])
            .await;
        let changed = match status {
            Ok(out) => out.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count(),
            Err(e) => {
                tracing::warn!(project = %self.name, error = %e, "cannot read the operator's checkout of the base branch");
                return None;
            }
        };
        if changed == 0 {
            return None;
        }
        tracing::warn!(
            project = %self.name,
            base = %self.base,
            files = changed,
            "the operator's checkout of the base branch has changes not committed; new conversations start without them"
        );
        Some(format!(
            "The repository's checkout of `{base}` has changes not committed ({changed} file{s}); \
             this conversation's branch starts from `{base}`'s last commit, without them.",
            base = self.base,
            s = if changed == 1 { "" } else { "s" },
        ))
    }
}
