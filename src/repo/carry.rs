//! A conversation carried between instances: with the project's `carry`
//! remote, every branch the bridge moves is pushed there under
//! `refs/harness-bridge/<branch>`, and an instance making a conversation's
//! worktree for the first time fetches it from there first, so a
//! conversation taken over from an instance that died goes on from its
//! last commit. Uncommitted changes stay with the instance that has them;
//! an instance that had the conversation before goes on from its own copy,
//! and its push is refused rather than overwrite what another carried.

use super::Checkout;
use super::git::Git;

/// Where carried branches live on the remote, apart from the team's own.
const CARRIED: &str = "refs/harness-bridge/";

impl Checkout {
    /// The conversation's branch, kept where the project carries it. Not
    /// forced: work another instance carried there since is never
    /// overwritten. A failure is logged, and what the person should hear
    /// of it returned: the work is safe here, and the next turn that
    /// moves the branch pushes again.
    pub(super) async fn carry_out(&self) -> Option<String> {
        let remote = self.carry.as_ref()?;
        let refspec = format!("refs/heads/{0}:{CARRIED}{0}", self.branch);
        let pushed = Git::bare(&self.common_dir)
            .with_env(remote.env())
            .run(&["push", "--quiet", "--no-verify", &remote.url, &refspec])
            .await;
        if let Err(e) = pushed {
            tracing::warn!(
                project = %self.project,
                branch = %self.branch,
                remote = %remote.shown,
                error = %e,
                "cannot carry the conversation's branch; another instance taking it over would not find this turn's work"
            );
            return Some(format!(
                "This turn's commits could not be carried to {}: another instance that had \
                 this conversation may have carried other work there since, which is never \
                 overwritten. They are on branch `{}` here, and an instance taking the \
                 conversation over would not find them.",
                remote.shown, self.branch
            ));
        }
        None
    }

    /// Before the worktree is made here: the branch as the instance that
    /// had the conversation last left it, when the project carries it.
    /// Fast-forward only: a branch here with commits of its own is kept.
    pub(super) async fn carry_in(&self) {
        let Some(remote) = &self.carry else {
            return;
        };
        let carried = format!("{CARRIED}{}", self.branch);
        let git = Git::bare(&self.common_dir).with_env(remote.env());
        let listed = git.run(&["ls-remote", &remote.url, &carried]).await;
        let fetched = match listed {
            // A conversation new to every instance.
            Ok(out) if out.is_empty() => return,
            Ok(_) => {
                let refspec = format!("{carried}:refs/heads/{}", self.branch);
                let mut args = super::git::FETCH.to_vec();
                args.extend([remote.url.as_str(), &refspec]);
                git.run(&args).await
            }
            Err(e) => Err(e),
        };
        match fetched {
            Ok(_) => tracing::info!(
                project = %self.project,
                branch = %self.branch,
                "the conversation's branch is carried in from {}", remote.shown
            ),
            Err(e) => tracing::warn!(
                project = %self.project,
                branch = %self.branch,
                error = %e,
                "cannot carry the conversation's branch in; it goes on from this instance's copy"
            ),
        }
    }
}
