//! A conversation's commits are its own until the bridge takes them in.
//!
//! The repository's refs and objects are shared by every conversation of
//! the project and by the operator, so a harness writes neither. Its
//! worktree's HEAD is detached (kept in the worktree's own record, so a
//! commit moves only it), and its git writes objects into a folder of the
//! conversation's workspace (`GIT_OBJECT_DIRECTORY`, with the
//! repository's objects as an alternate to read). After a turn the bridge
//! copies what it finds there as plain files into its own repository for
//! the worktree ([`super::intake`]: no link followed) and fetches what the
//! HEAD reaches into the repository, which makes git check every object
//! on the way in, so an object a harness forged or linked in never
//! reaches another conversation; then it moves the conversation's branch
//! there ([`Checkout::take_in`]). A HEAD that names what cannot be taken
//! in, or a record the harness broke, is put back where the bridge last
//! saw the branch, and the person is told.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::git::Git;
use super::private::TURN_REF;
use super::record::Head;
use super::{Checkout, ProjectError};

/// The harness's object folder, in the workspace (the bridge's `.langbot/`
/// is kept out of git).
pub(super) const OWN_OBJECTS: &str = ".langbot/git-objects";
/// The same, folder by folder.
const OWN_OBJECTS_PARTS: [&str; 2] = [".langbot", "git-objects"];

/// What taking a worktree's commits in came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TakenIn {
    /// The ref is at the commit (moved there now, or already); why the
    /// branch could not be carried to another instance, if it could not.
    At {
        /// Whether the ref moved.
        moved: bool,
        /// What the person should hear of the carry.
        not_carried: Option<String>,
    },
    /// Not taken in; why, for the person.
    Refused(String),
}

impl Checkout {
    fn own_objects(&self) -> PathBuf {
        self.work_tree.join(OWN_OBJECTS)
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

    /// Before a turn: the object folder ready and HEAD a commit of the
    /// repository, detached. What the last turn left is taken in if no
    /// turn's end took it (a turn cut short); a HEAD that names what
    /// cannot be taken in, or that is no commit at all, is put back at
    /// the branch's commit as the bridge last saw it, and the person told.
    pub(super) async fn own_head(&mut self) -> Result<(), ProjectError> {
        self.ready_own_objects()?;
        self.ready_own_common()?;
        let kept = self.last_head();
        // The usual turn: HEAD a commit id where the last turn's end left
        // it, which the bridge checked then (in the repository, which no
        // harness may write): no git asked.
        if let (Ok(Head::Commit(head)), Some(last)) = (self.read_head(), &kept)
            && head == *last
        {
            return Ok(());
        }
        let repo = Git::bare(&self.common_dir);
        let branch_ref = format!("refs/heads/{}", self.branch);
        let last = match kept {
            Some(head) if repo.has_commit(&head).await => head,
            _ => repo
                .line(&["rev-parse", "--verify", &format!("{branch_ref}^{{commit}}")])
                .await
                .map_err(|e| self.at_git(e))?,
        };
        let why = match self.head_commit().await {
            Ok(head) if repo.has_commit(&head).await => {
                if !matches!(self.read_head(), Ok(Head::Commit(_))) {
                    self.set_head(&head)?;
                }
                return Ok(());
            }
            Ok(head) => match self.take_in(&head).await? {
                TakenIn::At { not_carried, .. } => {
                    self.notes.extend(not_carried);
                    return Ok(());
                }
                TakenIn::Refused(why) => why,
            },
            Err(why) => self.broken_record(&why, &last),
        };
        self.set_head(&last)?;
        tracing::warn!(project = %self.project, branch = %self.branch, "{why}");
        self.notes.push(why);
        Ok(())
    }

    /// After a turn: the commit HEAD names, taken into the repository as
    /// the branch's when it moved; when it cannot be (it names what the
    /// harness did not write, or the record was broken), HEAD is put back
    /// at `before` and the person is told why. The branch's commit, and
    /// what the person should hear.
    pub(super) async fn settle_head(
        &self,
        before: &str,
    ) -> Result<(String, Option<String>), ProjectError> {
        let head = match self.head_commit().await {
            Ok(head) if head == before => return Ok((head, None)),
            Ok(head) => head,
            Err(why) => {
                let why = self.broken_record(&why, before);
                tracing::warn!(project = %self.project, branch = %self.branch, "{why}");
                self.set_head(before)?;
                return Ok((before.to_string(), Some(why)));
            }
        };
        match self.take_in(&head).await? {
            TakenIn::At { not_carried, .. } => Ok((head, not_carried)),
            TakenIn::Refused(why) => {
                tracing::warn!(project = %self.project, branch = %self.branch, "{why}");
                self.set_head(before)?;
                Ok((before.to_string(), Some(why)))
            }
        }
    }

    /// A sentence for a record the harness broke: what was wrong, and
    /// where the worktree's HEAD is put back.
    fn broken_record(&self, why: &super::record::Broken, at: &str) -> String {
        format!(
            "This conversation's worktree record had been changed outside git ({why}); its HEAD \
             is put back at `{}` on branch `{}`, and its files are as the agent left them.",
            crate::interaction::short(at),
            self.branch
        )
    }

    /// The commits `head` reaches taken into the repository as the
    /// conversation's branch, and the branch carried to another instance
    /// when the project carries branches.
    pub(super) async fn take_in(&self, head: &str) -> Result<TakenIn, ProjectError> {
        let branch_ref = format!("refs/heads/{}", self.branch);
        match self.fetch_in(head, &branch_ref).await? {
            TakenIn::At { moved: true, .. } => Ok(TakenIn::At {
                moved: true,
                not_carried: self.carry_out().await,
            }),
            other => Ok(other),
        }
    }

    /// The objects `commit` reaches fetched into the repository from what
    /// the harness wrote as plain files in its object folder (copied into
    /// an intake repository made for this fetch, no link followed; git
    /// checks every object on the way in), or from the bridge's own
    /// repository for the worktree (a put-away's commit), and `dest`
    /// moved to it.
    pub(super) async fn fetch_in(&self, commit: &str, dest: &str) -> Result<TakenIn, ProjectError> {
        let repo = Git::bare(&self.common_dir);
        let now = repo
            .line(&["rev-parse", "--verify", "--quiet", dest])
            .await
            .unwrap_or_default();
        if now == commit {
            return Ok(TakenIn::At {
                moved: false,
                not_carried: None,
            });
        }
        self.ready_private()?;
        let intake = self.fresh_intake()?;
        let taken = self.fetch_through(&intake, commit, dest).await;
        if let Err(e) = super::private::remove_repo(&intake) {
            tracing::warn!(project = %self.project, error = %e, "cannot remove an intake repository");
        }
        taken
    }

    /// [`Checkout::fetch_in`] through the intake repository `intake`.
    async fn fetch_through(
        &self,
        intake: &std::path::Path,
        commit: &str,
        dest: &str,
    ) -> Result<TakenIn, ProjectError> {
        let links = self.copy_in_objects(intake).await?;
        let refused = |e: super::GitError| {
            tracing::warn!(project = %self.project, branch = %self.branch, error = %e, "the worktree's commits are not taken in");
            let links = match links.is_empty() {
                true => String::new(),
                false => format!(
                    " (its object folder held links, which are never followed: {})",
                    super::intake::named(&links)
                ),
            };
            TakenIn::Refused(format!(
                "The worktree's new commits are not taken in: commit `{}`, or what it reaches, \
                 is in none of the objects the agent wrote itself{links}. Branch `{}` stays \
                 where it was, and so does the worktree's HEAD; its files are as the agent left \
                 them.",
                crate::interaction::short(commit),
                self.branch
            ))
        };
        if let Err(e) = Git::bare(intake)
            .run(&["update-ref", TURN_REF, commit])
            .await
        {
            return Ok(refused(e));
        }
        let source = intake.display().to_string();
        let refspec = format!("+{TURN_REF}:{dest}");
        let mut args = super::git::FETCH.to_vec();
        args.extend(["--update-head-ok", &source, &refspec]);
        match Git::bare(&self.common_dir).run(&args).await {
            Ok(_) => Ok(TakenIn::At {
                moved: true,
                not_carried: None,
            }),
            Err(e) => Ok(refused(e)),
        }
    }

    /// Copy what the harness wrote as plain files in its object folder,
    /// and git lacks, into the intake repository `intake`; the links
    /// found there instead.
    async fn copy_in_objects(&self, intake: &std::path::Path) -> Result<Vec<String>, ProjectError> {
        let fail = |e: String| self.fail(format!("cannot read the worktree's objects: {e}"));
        let workspace = self.work_tree.clone();
        let found = tokio::task::spawn_blocking(move || {
            super::intake::walk(&workspace, &OWN_OBJECTS_PARTS)
        })
        .await
        .map_err(|e| fail(e.to_string()))?
        .map_err(|e| fail(e.to_string()))?;
        let ids: Vec<&str> = found.loose_ids().collect();
        let mut missing = BTreeSet::new();
        if !ids.is_empty() {
            let asked = format!("{}\n", ids.join("\n")).into_bytes();
            let said = Git::bare(intake)
                .run_with_input(&["cat-file", "--batch-check=%(objectname)"], asked)
                .await
                .map_err(|e| self.at_git(e))?;
            missing.extend(
                String::from_utf8_lossy(&said)
                    .lines()
                    .filter_map(|l| l.strip_suffix(" missing"))
                    .map(str::to_string),
            );
        }
        let dest = intake.join("objects");
        let links = found.links.clone();
        tokio::task::spawn_blocking(move || found.copy_into(&dest, &missing))
            .await
            .map_err(|e| fail(e.to_string()))?
            .map_err(|e| fail(e.to_string()))?;
        Ok(links)
    }

    /// The harness's object folder, a folder of its own: a link the
    /// harness put there is removed (never followed), and the folder made.
    fn ready_own_objects(&self) -> Result<(), ProjectError> {
        let bridge_dir = self.work_tree.join(super::BRIDGE_DIR);
        if !std::fs::symlink_metadata(&bridge_dir).is_ok_and(|m| m.is_dir()) {
            return Err(self.fail(format!(
                "the workspace's {} is not a folder of the bridge's",
                super::BRIDGE_DIR
            )));
        }
        let objects = self.own_objects();
        match std::fs::symlink_metadata(&objects) {
            Ok(meta) if meta.is_dir() => return Ok(()),
            Ok(_) => std::fs::remove_file(&objects).map_err(|e| {
                self.fail(format!(
                    "cannot remove what replaced the object folder: {e}"
                ))
            })?,
            Err(_) => {}
        }
        std::fs::create_dir(&objects)
            .and_then(|()| match self.owner {
                Some(owner) => owner.give(&std::fs::File::open(&objects)?),
                None => Ok(()),
            })
            .map_err(|e| self.fail(format!("cannot make the worktree's object folder: {e}")))
    }

    pub(super) fn at_git(&self, source: super::GitError) -> ProjectError {
        ProjectError::Git {
            name: self.project.clone(),
            source,
        }
    }
}
