//! Idle worktrees put away, and brought back as they were.
//!
//! A conversation's worktree is a checkout of the whole project, often
//! with what the harness built in it; a bot with many conversations would
//! keep them all for good. So a worktree that has gone without a turn for
//! its project's `worktree_retention_hours` is put away:
//!
//! - commits its harness made that no turn's end took in (a turn cut
//!   short) are taken in to its branch;
//! - what it held that git would commit but was not committed (changed
//!   and new files) becomes a commit of the bridge's on the branch's,
//!   under `refs/harness-bridge/wip/<record>`;
//! - its files and its record in the repository go. Its branch, the
//!   conversation's home (the harness's session) and the rest of the
//!   bridge's folder stay.
//!
//! The conversation's next turn makes the worktree again from its branch
//! and puts those changes back; when the branch has moved since and they
//! no longer apply, they are kept under `refs/harness-bridge/kept/` and
//! the person is told how to bring them back. Either way the person hears
//! that files git ignores (build output, installed dependencies) were not
//! kept.
//!
//! A turn holds a lock on its workspace folder (shared) from the moment
//! the worktree is made ready to the end of the turn; putting away takes
//! it alone, without waiting, and leaves a worktree in use for the next
//! look. The lock is the workspace folder itself, which no other
//! conversation's harness can open in the cage.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::BRIDGE_DIR;
use super::git::Git;
use super::own::{OWN_OBJECTS, TakenIn};
use super::worktree::{MADE, Reader, admin_name, remove_if_there, write_replacing};
use super::{Checkout, Project, ProjectError};

/// Where a put-away worktree's changes not committed wait for its next
/// turn, by the worktree's record name.
const WIP: &str = "refs/harness-bridge/wip/";
/// Where changes that could not be put back are kept for a person.
const KEPT: &str = "refs/harness-bridge/kept/";
/// Files named in a sentence about changes that conflict; the rest counted.
const NAMED: usize = 5;

impl Project {
    /// Put away the worktrees of this project that have gone without a
    /// turn for its retention; how many. Run now and then by the service;
    /// a worktree in use is left for the next look. The records of
    /// worktrees whose folder is gone (with its conversation) are removed
    /// whatever the retention.
    pub async fn put_away_idle(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(self.common_dir.join(super::changes::OWN_DIR)) else {
            return 0;
        };
        let records: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "worktree"))
            .collect();
        let mut put_away = 0;
        for record in records {
            match self.put_away(&record, self.retention).await {
                Ok(true) => put_away += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    project = %self.name,
                    record = %record.display(),
                    error = %e,
                    "cannot put away an idle worktree; it is left as it is"
                ),
            }
        }
        put_away
    }

    /// Put away the worktree `record` names, when it is idle past
    /// `retention` and not in use; whether it was. One whose folder is
    /// gone is forgotten.
    async fn put_away(
        &self,
        record: &Path,
        retention: Option<Duration>,
    ) -> Result<bool, ProjectError> {
        let text = std::fs::read_to_string(record).unwrap_or_default();
        let mut lines = text.lines();
        let (Some(name), Some(branch), Some(folder)) = (
            record.file_stem().and_then(|n| n.to_str()),
            lines.next(),
            lines.next(),
        ) else {
            return Ok(false);
        };
        let work_tree = PathBuf::from(folder);
        if admin_name(&work_tree) != name {
            tracing::warn!(record = %record.display(), "a worktree record names another folder; it is left alone");
            return Ok(false);
        }
        let checkout = Checkout::of(self, &work_tree, branch.to_string());
        let fail = |e: std::io::Error| checkout.fail(format!("cannot put the worktree away: {e}"));
        let Ok(folder) = std::fs::File::open(&checkout.work_tree) else {
            // Its folder is gone with its conversation: so is the
            // worktree, its record and the bridge's repository for it.
            checkout.remove_records().map_err(fail)?;
            remove_if_there(record).map_err(fail)?;
            return Ok(false);
        };
        // In use by a turn, or not idle (a turn may have begun, and
        // ended, since the look began): the lock is taken first.
        if folder.try_lock().is_err() || !retention.is_some_and(|retention| idle(record, retention))
        {
            return Ok(false);
        }
        if !checkout.has_record() {
            remove_if_there(record).map_err(fail)?;
            return Ok(false);
        }
        let last_turn = std::fs::metadata(record)
            .and_then(|m| m.modified())
            .map_err(fail)?;
        checkout.ready_private()?;
        checkout.keep_changes(self).await?;
        checkout.remove_files().map_err(fail)?;
        let last_turn = unix_seconds(last_turn);
        write_replacing(
            &checkout.away_path(),
            format!("{last_turn}\n"),
            Reader::Bridge,
        )
        .map_err(fail)?;
        remove_if_there(record).map_err(fail)?;
        tracing::info!(
            project = %self.name,
            branch = %checkout.branch,
            folder = %checkout.work_tree.display(),
            "a worktree that went without a turn is put away; the conversation's next turn brings it back"
        );
        Ok(true)
    }
}

impl Checkout {
    /// Before the turn touches the worktree: its lock, held shared until
    /// the turn ends, and its record (branch and folder, in the bridge's
    /// part of the repository, which the harness cannot write), whose time
    /// says when a turn last used it.
    pub(super) async fn hold(&mut self) -> Result<(), ProjectError> {
        let folder = self.work_tree.clone();
        let held = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&folder)?;
            file.lock_shared()?;
            Ok::<_, std::io::Error>(file)
        })
        .await
        .map_err(|e| self.fail(format!("cannot wait for the worktree's lock: {e}")))?
        .map_err(|e| self.fail(format!("cannot take the worktree's lock: {e}")))?;
        self.in_use = Some(Arc::new(held));
        std::fs::create_dir_all(self.own_dir())
            .and_then(|()| {
                write_replacing(
                    &self.own_file("worktree"),
                    format!("{}\n{}\n", self.branch, self.work_tree.display()),
                    Reader::Bridge,
                )
            })
            .map_err(|e| self.fail(format!("cannot note the worktree's use: {e}")))
    }

    fn own_file(&self, extension: &str) -> PathBuf {
        let name = self.admin.file_name().unwrap_or_default();
        self.own_dir().join(name).with_extension(extension)
    }

    fn away_path(&self) -> PathBuf {
        self.own_file("away")
    }

    fn wip_ref(&self) -> String {
        let name = self.admin.file_name().unwrap_or_default();
        format!("{WIP}{}", name.to_string_lossy())
    }

    /// The commits and the changes not committed of a worktree about to
    /// be put away, kept in the repository: commits no turn's end took in
    /// are taken in (or, when they cannot be, HEAD goes back where the
    /// bridge last saw it), and the files as they are become a commit of
    /// the bridge's on HEAD's.
    async fn keep_changes(&self, project: &Project) -> Result<(), ProjectError> {
        let last = match self.last_head() {
            Some(head) => head,
            None => self.branch_commit().await?,
        };
        let tree = self.snapshot_tree().await?;
        let (head, _) = self.settle_head(&last).await?;
        let git = self.own_git();
        let head_tree = git
            .line(&["rev-parse", "--verify", &format!("{head}^{{tree}}")])
            .await
            .map_err(|e| self.at_git(e))?;
        if head_tree == tree {
            return Ok(());
        }
        // Written in the bridge's repository for the worktree, which holds
        // the snapshot's objects, and fetched in like a turn's commits.
        let env = project
            .git_env()
            .into_iter()
            .filter(|(var, _)| var.starts_with("GIT_AUTHOR_") || var.starts_with("GIT_COMMITTER_"))
            .map(|(var, value)| (var.to_string(), value))
            .collect();
        let message = format!(
            "harness-bridge: what branch {} had not committed when its worktree was put away",
            self.branch
        );
        let commit = git
            .with_env(env)
            .line(&["commit-tree", &tree, "-p", &head, "-m", &message])
            .await
            .map_err(|e| self.at_git(e))?;
        match self.fetch_in(&commit, &self.wip_ref()).await? {
            TakenIn::At { .. } => Ok(()),
            TakenIn::Refused(why) => Err(self.fail(why)),
        }
    }

    /// Remove the worktree's record and the bridge's repository for it
    /// (whatever they hold was taken in), and the bridge's notes of its
    /// state. Links in them are removed, never followed.
    fn remove_records(&self) -> std::io::Result<()> {
        if self.has_record() {
            std::fs::remove_dir_all(&self.admin)?;
        }
        let private = self.private_dir();
        if std::fs::symlink_metadata(&private).is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&private)?;
        }
        self.forget_own_index()?;
        remove_if_there(&self.kept_path())
    }

    /// Remove the worktree's record, then its files: everything in the
    /// workspace but the bridge's folder, and of that, the harness's
    /// objects (taken in) and the note that the files were checked out.
    fn remove_files(&self) -> std::io::Result<()> {
        // The record first: a folder half removed is then made again.
        self.remove_records()?;
        for entry in std::fs::read_dir(&self.work_tree)? {
            let entry = entry?;
            if entry.file_name() == BRIDGE_DIR {
                continue;
            }
            // A link is removed, never followed.
            match entry.file_type()?.is_dir() {
                true => std::fs::remove_dir_all(entry.path())?,
                false => std::fs::remove_file(entry.path())?,
            }
        }
        if std::fs::symlink_metadata(self.work_tree.join(BRIDGE_DIR)).is_ok_and(|m| m.is_dir()) {
            let objects = self.work_tree.join(OWN_OBJECTS);
            match std::fs::symlink_metadata(&objects).is_ok_and(|m| m.is_dir()) {
                true => std::fs::remove_dir_all(&objects)?,
                false => remove_if_there(&objects)?,
            }
            remove_if_there(&self.work_tree.join(MADE))?;
        }
        Ok(())
    }

    /// Once the worktree is made again: what the person should hear when
    /// it had been put away, and its changes not committed put back, or
    /// kept where a person can bring them back when they no longer apply.
    pub(super) async fn bring_back(&self) -> Result<Option<String>, ProjectError> {
        // When the last turn before it was put away ended.
        let away = std::fs::read_to_string(self.away_path()).ok();
        let repo = Git::bare(&self.common_dir);
        let wip_ref = self.wip_ref();
        let wip = repo
            .line(&[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{wip_ref}^{{commit}}"),
            ])
            .await
            .ok();
        if away.is_none() && wip.is_none() {
            return Ok(None);
        }
        remove_if_there(&self.away_path())
            .map_err(|e| self.fail(format!("cannot note the worktree as back: {e}")))?;
        let idle = away
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(|then| unix_seconds(SystemTime::now()).saturating_sub(then));
        let put_away = match idle {
            Some(seconds) => format!(
                "had been put away after {} without a turn",
                how_long(seconds)
            ),
            None => "had been put away".into(),
        };
        const IGNORED: &str =
            "Files git ignores (build output, installed dependencies) were not kept.";
        let Some(wip) = wip else {
            return Ok(Some(format!(
                "This conversation's worktree {put_away}; it is made again from branch `{}`. {IGNORED}",
                self.branch
            )));
        };
        let at_git = |e| self.at_git(e);
        let head = self
            .head_commit()
            .await
            .map_err(|why| self.fail(why.to_string()))?;
        let own = self.own_git();
        let parent = own
            .line(&["rev-parse", "--verify", &format!("{wip}^")])
            .await
            .map_err(at_git)?;
        let tree = match parent == head {
            true => Some(
                own.line(&["rev-parse", "--verify", &format!("{wip}^{{tree}}")])
                    .await
                    .map_err(at_git)?,
            ),
            // The branch moved while the worktree was away (another
            // instance carried it on, or a person moved it).
            false => self.merged(&parent, &head, &wip).await,
        };
        match tree {
            Some(tree) => {
                self.put_back(&tree, &head).await?;
                self.keep_state(&tree, &head)
                    .map_err(|e| self.fail(format!("cannot keep the worktree's state: {e}")))?;
                repo.run(&["update-ref", "-d", &wip_ref])
                    .await
                    .map_err(at_git)?;
                Ok(Some(format!(
                    "This conversation's worktree {put_away}; it is made again as it was, \
                     its changes not committed included. {IGNORED}"
                )))
            }
            None => {
                let short = crate::interaction::short(&wip).to_string();
                let name = self.admin.file_name().unwrap_or_default();
                let kept = format!("{KEPT}{}/{short}", name.to_string_lossy());
                repo.run(&["update-ref", &kept, &wip])
                    .await
                    .map_err(at_git)?;
                repo.run(&["update-ref", "-d", &wip_ref])
                    .await
                    .map_err(at_git)?;
                let both = self.changed_on_both(&parent, &head, &wip).await;
                tracing::warn!(
                    project = %self.project,
                    branch = %self.branch,
                    kept = %kept,
                    "a worktree brought back could not take its changes not committed back: the branch moved since and they conflict"
                );
                Ok(Some(format!(
                    "This conversation's worktree {put_away}; it is made again from branch `{}`, \
                     which has moved since. Its changes not committed could not be put back, as \
                     they conflict with the branch's new commits{both}. They are kept as commit \
                     `{short}`: `git cherry-pick --no-commit {short}` in the worktree brings them \
                     back to resolve. {IGNORED}",
                    self.branch
                )))
            }
        }
    }

    /// The worktree's files made `tree`'s (its checkout being `head`'s)
    /// and back as changes not committed: the bridge's index holds `tree`,
    /// the harness's `head`'s, each with what it knows of the files.
    async fn put_back(&self, tree: &str, head: &str) -> Result<(), ProjectError> {
        let at_git = |e| self.at_git(e);
        let index = self.own_index_path();
        self.worktree_git()
            .with_index(&index)
            .run(&["read-tree", "--reset", "-u", tree])
            .await
            .map_err(at_git)?;
        // Before the files change hands (and their times with it): git
        // takes the worktree as its index knows it.
        self.give_index_at(head).await?;
        self.give_files()
    }

    /// The tree of `theirs` merged onto `ours` from `base`; `None` when
    /// they conflict (or git cannot tell).
    async fn merged(&self, base: &str, ours: &str, theirs: &str) -> Option<String> {
        let base = format!("--merge-base={base}");
        let out = self
            .own_git()
            .run(&[
                "merge-tree",
                "--write-tree",
                "--no-messages",
                &base,
                ours,
                theirs,
            ])
            .await
            .ok()?;
        let tree = String::from_utf8_lossy(&out)
            .lines()
            .next()?
            .trim()
            .to_string();
        (tree.len() >= 40 && tree.bytes().all(|b| b.is_ascii_hexdigit())).then_some(tree)
    }

    /// ` (in a, b)`: the files both the branch's new commits and the kept
    /// changes touched, for the sentence; empty when git cannot tell.
    async fn changed_on_both(&self, base: &str, ours: &str, theirs: &str) -> String {
        let repo = self.own_git();
        let names = |to: String| {
            let repo = repo.clone();
            let base = base.to_string();
            async move {
                let out = repo
                    .run(&[
                        "diff",
                        "--no-ext-diff",
                        "--no-textconv",
                        "--no-renames",
                        "--name-only",
                        &base,
                        &to,
                    ])
                    .await
                    .unwrap_or_default();
                String::from_utf8_lossy(&out)
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            }
        };
        let (moved, kept) = tokio::join!(names(ours.to_string()), names(theirs.to_string()));
        let both: Vec<&String> = kept.iter().filter(|f| moved.contains(f)).collect();
        if both.is_empty() {
            return String::new();
        }
        let mut named: Vec<String> = both.iter().take(NAMED).map(|f| format!("`{f}`")).collect();
        if both.len() > NAMED {
            named.push(format!("{} more", both.len() - NAMED));
        }
        format!(" (in {})", named.join(", "))
    }
}

/// Whether `record` was last written longer than `retention` ago.
fn idle(record: &Path, retention: Duration) -> bool {
    std::fs::metadata(record)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
        .is_some_and(|elapsed| elapsed >= retention)
}

fn unix_seconds(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `3 days`, `5 hours`, `1 minute`: a time a person reads.
fn how_long(seconds: u64) -> String {
    let (n, unit) = match seconds {
        s if s >= 2 * 86_400 => (s / 86_400, "day"),
        s if s >= 3_600 => (s / 3_600, "hour"),
        s => ((s / 60).max(1), "minute"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::super::testing;
    use super::*;

    #[tokio::test]
    async fn a_worktree_a_turn_holds_is_not_put_away() {
        let dir = tempfile::tempdir().unwrap();
        let project = testing::project(dir.path(), "worktree_retention_hours: 1\n").await;
        let workspace = dir.path().join("conversation");
        std::fs::create_dir_all(workspace.join(BRIDGE_DIR)).unwrap();
        let turn = Checkout::ensure(&project, &workspace, "chat/a".into(), &[".langbot/".into()])
            .await
            .unwrap();
        let record = turn.own_file("worktree");
        let two_hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
        let backdate = || {
            std::fs::File::options()
                .write(true)
                .open(&record)
                .unwrap()
                .set_modified(two_hours_ago)
                .unwrap();
        };
        backdate();
        assert_eq!(project.put_away_idle().await, 0, "the turn holds it");
        assert!(workspace.join("greeting.txt").is_file());
        drop(turn);
        // A process another test starts meanwhile holds a copy of the
        // turn's lock until it runs its program: the next look puts away.
        let mut put_away = 0;
        for _ in 0..20 {
            put_away = project.put_away_idle().await;
            if put_away > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(put_away, 1);
        assert!(!workspace.join("greeting.txt").exists());
        assert_eq!(project.put_away_idle().await, 0, "put away once");
        // Its next turn brings it back, and is told so.
        let back = Checkout::ensure(&project, &workspace, "chat/a".into(), &[".langbot/".into()])
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(workspace.join("greeting.txt")).unwrap(),
            "hello\n"
        );
        assert!(
            back.notes
                .iter()
                .any(|n| n.contains("after 2 hours without a turn")),
            "{:?}",
            back.notes
        );
    }

    #[test]
    fn a_time_away_reads_in_the_largest_whole_unit() {
        assert_eq!(how_long(0), "1 minute");
        assert_eq!(how_long(150), "2 minutes");
        assert_eq!(how_long(3_600), "1 hour");
        assert_eq!(how_long(47 * 3_600), "47 hours");
        assert_eq!(how_long(8 * 86_400 + 5), "8 days");
    }
}
