//! What a turn changed in its worktree, for the person in the chat.
//!
//! Before the harness runs, the worktree's state is written down as a
//! tree (every file, tracked or new, as git would commit it) and the
//! branch's commit; after it, again. The two trees give the files, the
//! lines added and removed and the whole diff; the two commits give the
//! commits the turn made. The worktree's own index is never touched: the
//! snapshot is made with an index of the bridge's, kept between turns, so
//! unchanged files are not read again.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::watch::{Handover, Watch};
use super::worktree::Checkout;
use super::{GitError, ProjectError};

/// Largest diff sent with a summary; past it the file says where it was cut.
const MAX_DIFF_BYTES: usize = 8 * 1024 * 1024;
/// Most of git's answer to [`diff_args`] read: the files' counts, then the
/// patch up to [`MAX_DIFF_BYTES`]. Past it git is stopped, unread.
const MAX_LOOK_BYTES: usize = 2 * MAX_DIFF_BYTES;
/// How git writes the bridge's own index: without the checksum of its
/// whole content (git 2.40 and later; an older git ignores it), which no
/// one but the bridge reads (a quarter of a turn's look at 10,000 files).
const OWN_INDEX: [&str; 2] = ["-c", "index.skipHash=true"];
/// How git is run on a few named paths: pathspecs taken as written, and
/// no threads started to read the index or look at its files (for a few
/// paths they cost more than they save: a third of `add`'s time at 10,000
/// files).
const FEW_PATHS: [(&str, &str); 6] = [
    ("GIT_LITERAL_PATHSPECS", "1"),
    ("GIT_CONFIG_COUNT", "2"),
    ("GIT_CONFIG_KEY_0", "core.preloadIndex"),
    ("GIT_CONFIG_VALUE_0", "false"),
    ("GIT_CONFIG_KEY_1", "index.threads"),
    ("GIT_CONFIG_VALUE_1", "1"),
];
/// The bridge's own folder in the repository's git folder, which
/// harnesses read but cannot write.
pub(super) const OWN_DIR: &str = "harness-bridge";
/// How the bridge asks git what a diff changes: its files' lines counted
/// (`-z`); no program of the repository's run.
pub(super) const NUMSTAT: [&str; 6] = [
    "diff",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--numstat",
    "-z",
];
/// How the bridge asks git for a diff: [`NUMSTAT`], then the patch, in
/// one answer.
fn diff_args() -> Vec<&'static str> {
    let mut args = NUMSTAT.to_vec();
    args.push("-p");
    args
}
/// Files and commits named in a summary; the rest are counted.
const LISTED: usize = 10;

/// The worktree after a turn: known, or as the bridge's index holds it
/// (its tree not yet written).
enum After {
    Known(Snapshot),
    OfIndex {
        git: super::git::Git,
        index: PathBuf,
        head: String,
    },
}

/// The worktree at one moment: its files as a tree, and its branch's commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub(super) tree: String,
    pub(super) head: String,
}

/// One file a turn changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Its path in the repository.
    pub path: String,
    /// Lines added and removed; `None` for a binary file.
    pub lines: Option<(u64, u64)>,
}

/// What a turn changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The conversation's branch.
    pub branch: String,
    /// The files, in path order.
    pub files: Vec<FileChange>,
    /// The last commits the turn made (`short-id subject`), oldest first.
    pub commits: Vec<String>,
    /// How many more it made before them.
    pub more_commits: usize,
    /// The whole diff, cut past [`MAX_DIFF_BYTES`].
    pub diff: Vec<u8>,
    /// What else the person should hear: why the turn's commits could
    /// not be taken in or carried, a record the agent broke and mended.
    pub notes: Vec<String>,
}

impl Checkout {
    /// The worktree's files as they are now, as a tree (every file read
    /// that changed since the bridge's index last saw it), read through
    /// the bridge's own repository for the worktree.
    pub(super) async fn snapshot_tree(&self) -> Result<String, ProjectError> {
        let index = self.own_index().map_err(|e| self.index_failed(e))?;
        let git = self.worktree_git().with_index(&index);
        drop_gitlinks(&git, &index, self.hash_len())
            .await
            .map_err(|e| self.at_git(e))?;
        git.run(&[OWN_INDEX[0], OWN_INDEX[1], "add", "--all", "--", "."])
            .await
            .map_err(|e| self.at_git(e))?;
        self.tree_of(&git, &index).await
    }

    /// The worktree as it is now, from `before` and the paths a watch
    /// named (git looks nowhere else), with what changed since `before`
    /// when git was asked; `head` is the branch's commit, unmoved since
    /// `before`. Whatever git cannot take as named (a path ignored, or
    /// gone and never tracked), it looks at whole. When git was asked, the
    /// tree is left to write: the person's summary needs only the diff.
    async fn look_at(
        &self,
        before: &Snapshot,
        head: String,
        paths: &BTreeSet<String>,
    ) -> Result<(After, Option<Look>), ProjectError> {
        if paths.is_empty() {
            let unchanged = Snapshot {
                tree: before.tree.clone(),
                head,
            };
            return Ok((After::Known(unchanged), None));
        }
        let index = self.own_index().map_err(|e| self.index_failed(e))?;
        let env = FEW_PATHS
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .to_vec();
        let git = self.worktree_git().with_env(env).with_index(&index);
        let seen = index_seen(&index);
        if let Err(e) = self.stage(&git, paths).await {
            tracing::debug!(error = %e, "git looks at the whole worktree");
            let tree = self.snapshot_tree().await?;
            return Ok((After::Known(Snapshot { tree, head }), None));
        }
        if index_seen(&index) == seen {
            // git left its index as it was: nothing the paths hold changed.
            let tree = self.tree_of(&git, &index).await?;
            return Ok((After::Known(Snapshot { tree, head }), None));
        }
        let mut args = diff_args();
        args.extend(["--cached", &before.tree]);
        // Without the worktree: its `.gitattributes` says nothing of how
        // the diff reads, as for a turn looked at whole.
        let of_index = self.own_git().with_index(&index);
        let look = Look::read(&of_index, &args)
            .await
            .map_err(|e| self.at_git(e))?;
        if look.files.is_empty() && look.diff.is_empty() {
            // The index holds the tree as it was before.
            let unchanged = Snapshot {
                tree: before.tree.clone(),
                head,
            };
            return Ok((After::Known(unchanged), None));
        }
        Ok((After::OfIndex { git, index, head }, Some(look)))
    }

    /// Keep `after` as the next turn's state before, and hand the watch
    /// on to it; a tree still to write is written first, off the turn's
    /// way (the next turn waits for it).
    fn keep_after(&self, after: After, watch: Option<Watch>) -> Option<Snapshot> {
        let keep = |checkout: &Checkout, after: &Snapshot| {
            std::fs::create_dir_all(checkout.own_dir())
                .and_then(|()| std::fs::write(checkout.kept_path(), after.text()))
                .map_err(|e| {
                    tracing::warn!(error = %e, "cannot keep the worktree's state for the next turn")
                })
                .is_ok()
        };
        match after {
            After::Known(after) => {
                // The next turn's watch goes on from the state just kept.
                if keep(self, &after)
                    && let Some(watch) = watch
                {
                    self.kept_watches
                        .keep(self.work_tree.clone(), Handover::Watch(watch));
                }
                Some(after)
            }
            After::OfIndex { git, index, head } => {
                let checkout = self.clone();
                let task = tokio::spawn(async move {
                    let tree = match checkout.tree_of(&git, &index).await {
                        Ok(tree) => tree,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot keep the worktree's state for the next turn");
                            return None;
                        }
                    };
                    let kept = keep(&checkout, &Snapshot { tree, head });
                    watch.filter(|watch| kept && watch.is_whole())
                });
                self.kept_watches
                    .keep(self.work_tree.clone(), Handover::Keeping(task));
                None
            }
        }
    }

    /// Bring the bridge's index up to date with the named `paths`: those
    /// gone are taken out of it, the others added (a folder whole).
    async fn stage(&self, git: &super::git::Git, paths: &BTreeSet<String>) -> Result<(), GitError> {
        drop_gitlinks(git, &self.own_index_path(), self.hash_len()).await?;
        let (present, gone): (Vec<&str>, Vec<&str>) = paths
            .iter()
            .map(String::as_str)
            .partition(|path| std::fs::symlink_metadata(self.work_tree.join(path)).is_ok());
        if !gone.is_empty() {
            let mut args = vec![OWN_INDEX[0], OWN_INDEX[1], "rm", "--cached", "-r", "-q"];
            args.extend(["--ignore-unmatch", "--"]);
            args.extend(gone);
            git.run(&args).await?;
        }
        if !present.is_empty() {
            let mut args = vec![OWN_INDEX[0], OWN_INDEX[1], "add", "--all", "--"];
            args.extend(present);
            git.run(&args).await?;
        }
        Ok(())
    }

    /// The tree the bridge's `index` holds: kept beside it while git has
    /// not rewritten it (a new file each time it changed it), else
    /// written.
    async fn tree_of(&self, git: &super::git::Git, index: &Path) -> Result<String, ProjectError> {
        let seen = index_seen(index);
        let seen_path = index.with_extension("tree");
        let kept = std::fs::read_to_string(&seen_path).ok();
        if let (Some(seen), Some(kept)) = (&seen, &kept)
            && let Some(tree) = kept
                .strip_prefix(seen.as_str())
                .and_then(|t| t.strip_prefix(' '))
        {
            return Ok(tree.trim().to_string());
        }
        let tree = git
            .line(&[OWN_INDEX[0], OWN_INDEX[1], "write-tree"])
            .await
            .map_err(|e| self.at_git(e))?;
        // `write-tree` may write the index again (its tree cache).
        if let Some(seen) = index_seen(index)
            && let Err(e) = std::fs::write(&seen_path, format!("{seen} {tree}\n"))
        {
            tracing::warn!(error = %e, "cannot keep the tree of the bridge's index");
        }
        Ok(tree)
    }

    fn index_failed(&self, e: std::io::Error) -> ProjectError {
        self.fail(format!(
            "cannot keep the bridge's index of the worktree: {e}"
        ))
    }

    /// The worktree before a turn: as the last turn left it (kept by the
    /// bridge where the harness cannot write), or, before the first, the
    /// branch's commit as checked out. Between turns nothing runs in it,
    /// so no file need be read for this.
    pub async fn before(&self) -> Result<Snapshot, ProjectError> {
        // The last turn's state kept (waited for while its tree is being
        // written), and its watch, going on from that state.
        let kept_watch = match self.kept_watches.take(&self.work_tree) {
            Some(handover) => handover.watch().await,
            None => None,
        };
        if let Some(kept) = std::fs::read_to_string(self.kept_path())
            .ok()
            .and_then(|text| Snapshot::parse(&text))
        {
            // The bridge's index holds this state: from here, a watch can
            // say where to look after the turn.
            if self.own_index_path().is_file() {
                let watch = match kept_watch {
                    Some(watch) => Some(watch),
                    None => {
                        let work_tree = self.work_tree.clone();
                        tokio::task::spawn_blocking(move || Watch::start(&work_tree))
                            .await
                            .ok()
                            .flatten()
                    }
                };
                *self.watch.lock().unwrap_or_else(|p| p.into_inner()) = watch;
            }
            // Nothing writes the bridge's repository for the worktree
            // until the turn is over: old snapshots can go now.
            if let Err(e) = self.prune_snapshots(&kept.tree, false).await {
                tracing::warn!(error = %e, "cannot prune the snapshots of the worktree");
            }
            return Ok(kept);
        }
        // HEAD was made a commit of the repository as the turn began.
        let head = self
            .head_commit()
            .await
            .map_err(|why| self.fail(why.to_string()))?;
        let tree = self
            .own_git()
            .line(&["rev-parse", "--verify", &format!("{head}^{{tree}}")])
            .await
            .map_err(|e| self.at_git(e))?;
        Ok(Snapshot { tree, head })
    }

    /// Once the state the last turn left is kept (its tree is written after
    /// the person has the summary). The next turn waits for it on its own:
    /// this is for a measure of each part.
    pub async fn kept(&self) {
        if let Some(handover) = self.kept_watches.take(&self.work_tree)
            && let Some(watch) = handover.watch().await
        {
            self.kept_watches
                .keep(self.work_tree.clone(), Handover::Watch(watch));
        }
    }

    /// The branch's commit as the last turn left it, when the bridge kept it.
    pub(super) fn last_head(&self) -> Option<String> {
        self.kept_state().map(|kept| kept.head)
    }

    /// The worktree as the last turn left it, when the bridge kept it.
    pub(super) fn kept_state(&self) -> Option<Snapshot> {
        std::fs::read_to_string(self.kept_path())
            .ok()
            .and_then(|text| Snapshot::parse(&text))
    }

    /// What changed since `before`; `None` when nothing did and there is
    /// nothing to say. The commits the harness made are taken in first
    /// ([`Checkout::settle_head`]). The state after is kept as the next
    /// turn's before.
    pub async fn changes_since(&self, before: &Snapshot) -> Result<Option<Changes>, ProjectError> {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (head, note) = self.settle_head(&before.head).await?;
        let notes: Vec<String> = note.into_iter().collect();
        // A turn that moved the branch is looked at whole: every commit's
        // content is then in the summary, whatever a watch missed.
        let watched = watch
            .as_mut()
            .and_then(Watch::changed)
            .filter(|_| head == before.head);
        let (after, looked) = match watched {
            Some(paths) => self.look_at(before, head, &paths).await?,
            None => {
                let tree = self.snapshot_tree().await?;
                (After::Known(Snapshot { tree, head }), None)
            }
        };
        let after = match self.keep_after(after, watch) {
            Some(after) if after == *before => {
                return Ok((!notes.is_empty()).then(|| Changes {
                    branch: self.branch.clone(),
                    files: Vec::new(),
                    commits: Vec::new(),
                    more_commits: 0,
                    diff: Vec::new(),
                    notes,
                }));
            }
            Some(after) => after,
            // Its tree is being written: the look says what changed, and
            // the branch did not move.
            None => before.clone(),
        };
        let moved = after.head != before.head;
        let git = self.own_git();
        let mut diff_args = diff_args();
        diff_args.extend([before.tree.as_str(), after.tree.as_str()]);
        let range = format!("{}..{}", before.head, after.head);
        let listed = LISTED.to_string();
        let log_args = subjects_log(&listed, &range);
        let count_args = ["rev-list", "--count", &range];
        // The questions left for git at once: a turn waits for the slowest.
        let (look, log) = tokio::join!(
            async {
                match looked {
                    Some(look) => Ok(look),
                    None => Look::read(&git, &diff_args).await,
                }
            },
            async {
                match moved {
                    true => git.run(&log_args).await.map(Some),
                    false => Ok(None),
                }
            }
        );
        let Look { files, diff } = look.map_err(|e| self.at_git(e))?;
        let mut commits: Vec<String> = match log.map_err(|e| self.at_git(e))? {
            Some(log) => String::from_utf8_lossy(&log)
                .lines()
                .map(|line| line.trim_end().to_string())
                .collect(),
            None => Vec::new(),
        };
        commits.reverse();
        // Only the last few are listed (and read): the rest counted.
        let more_commits = match commits.len() >= LISTED {
            true => git
                .line(&count_args)
                .await
                .map_err(|e| self.at_git(e))?
                .parse::<usize>()
                .unwrap_or(LISTED)
                .saturating_sub(commits.len()),
            false => 0,
        };
        Ok(Some(Changes {
            branch: self.branch.clone(),
            files,
            commits,
            more_commits,
            diff,
            notes,
        }))
    }

    /// The bridge's own index for this worktree, kept between turns in
    /// the repository's git folder (which the harness cannot write), so a
    /// snapshot reads again only the files that changed since the last.
    /// The first is the one the bridge's checkout wrote; the worktree's
    /// own index is the harness's, and never read.
    fn own_index(&self) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(self.own_dir())?;
        // None yet (a worktree made before the bridge kept one): git
        // builds one from the files (slower, once).
        Ok(self.own_index_path())
    }
}

impl Checkout {
    /// The bridge's own files for the project's worktrees: in the
    /// repository's git folder, which harnesses read but cannot write.
    pub(super) fn own_dir(&self) -> PathBuf {
        self.common_dir.join(OWN_DIR)
    }

    /// Keep `tree` on `head` as the state the last turn left: the next
    /// turn's changes are told from it.
    pub(super) fn keep_state(&self, tree: &str, head: &str) -> std::io::Result<()> {
        let state = Snapshot {
            tree: tree.into(),
            head: head.into(),
        };
        std::fs::create_dir_all(self.own_dir())?;
        std::fs::write(self.kept_path(), state.text())
    }

    pub(super) fn own_index_path(&self) -> PathBuf {
        let name = self.admin.file_name().unwrap_or_default();
        self.own_dir().join(name).with_extension("index")
    }

    /// Forget the bridge's index of the worktree and the tree noted for
    /// it, once the worktree's files are gone.
    pub(super) fn forget_own_index(&self) -> std::io::Result<()> {
        let index = self.own_index_path();
        super::worktree::remove_if_there(&index)?;
        super::worktree::remove_if_there(&index.with_extension("tree"))
    }

    /// Where the state a turn left is kept for the next (forgotten when
    /// the branch's files are checked out afresh).
    pub(super) fn kept_path(&self) -> PathBuf {
        let name = self.admin.file_name().unwrap_or_default();
        self.own_dir().join(name).with_extension("state")
    }
}

impl Snapshot {
    fn text(&self) -> String {
        format!("{} {}\n", self.tree, self.head)
    }

    fn parse(text: &str) -> Option<Snapshot> {
        let mut ids = text.split_whitespace();
        let (tree, head) = (ids.next()?, ids.next()?);
        let hex = |id: &str| id.len() >= 40 && id.bytes().all(|b| b.is_ascii_hexdigit());
        (hex(tree) && hex(head) && ids.next().is_none()).then(|| Snapshot {
            tree: tree.into(),
            head: head.into(),
        })
    }
}

impl Changes {
    /// The lines added and removed over every text file.
    pub fn totals(&self) -> (u64, u64) {
        self.files
            .iter()
            .filter_map(|f| f.lines)
            .fold((0, 0), |(a, r), (fa, fr)| (a + fa, r + fr))
    }

    /// Whether the turn changed nothing and there is only something to
    /// say ([`Changes::notes`]).
    pub fn is_only_notes(&self) -> bool {
        self.files.is_empty() && self.commits.is_empty() && self.diff.is_empty()
    }

    /// The summary the person reads: the branch, the files with their
    /// lines, the new commits, and where the whole diff is; or only the
    /// notes, when nothing changed.
    pub fn summary(&self, diff_name: Option<&str>) -> String {
        if self.is_only_notes() {
            return self.notes.join("\n");
        }
        let (added, removed) = self.totals();
        let n = self.files.len();
        let mut text = format!(
            "Changes on branch `{}`: {n} file{} changed, +{added} −{removed}",
            self.branch,
            if n == 1 { "" } else { "s" }
        );
        if !self.commits.is_empty() {
            let c = self.commits.len() + self.more_commits;
            let _ = write!(text, ", {c} new commit{}", if c == 1 { "" } else { "s" });
        }
        text.push('.');
        for file in self.files.iter().take(LISTED) {
            let _ = match file.lines {
                Some((a, r)) => write!(text, "\n- {} (+{a} −{r})", file.path),
                None => write!(text, "\n- {} (binary)", file.path),
            };
        }
        if n > LISTED {
            let _ = write!(text, "\n- and {} more", n - LISTED);
        }
        if self.more_commits > 0 {
            let _ = write!(text, "\n* {} earlier ones, then:", self.more_commits);
        }
        for commit in &self.commits {
            let _ = write!(text, "\n* {commit}");
        }
        if let Some(name) = diff_name {
            let _ = write!(text, "\nThe whole diff is in {name}.");
        }
        for note in &self.notes {
            let _ = write!(text, "\n{note}");
        }
        text
    }
}

/// git's answer to [`diff_args`]: the files with their lines, and the patch.
#[derive(Debug, Default, PartialEq, Eq)]
struct Look {
    files: Vec<FileChange>,
    diff: Vec<u8>,
}

impl Look {
    /// git's answer to `args` (a [`diff_args`]), read up to [`MAX_LOOK_BYTES`]:
    /// a patch past it is cut where git was stopped.
    async fn read(git: &super::git::Git, args: &[&str]) -> Result<Look, GitError> {
        let answer = git.run_capped(args, MAX_LOOK_BYTES).await?;
        let mut look = Look::parse(answer.bytes);
        if answer.cut && look.diff.is_empty() {
            // Cut among the files' counts: the last may be half a path.
            look.files.pop();
        }
        if answer.cut || look.diff.len() > MAX_DIFF_BYTES {
            look.diff.truncate(MAX_DIFF_BYTES);
            look.diff.extend(
                format!("\n[the diff was cut here: it is over {MAX_DIFF_BYTES} bytes]\n")
                    .as_bytes(),
            );
        }
        Ok(look)
    }

    /// `-z`'s counts end with an empty entry before the patch: the first
    /// two NULs in a row (no path is empty, and none holds a NUL).
    fn parse(mut out: Vec<u8>) -> Look {
        match memchr::memmem::find(&out, b"\0\0") {
            Some(at) => {
                let diff = out.split_off(at + 2);
                Look {
                    files: parse_numstat(&out),
                    diff,
                }
            }
            None if out.starts_with(b"diff ") => Look {
                files: Vec::new(),
                diff: out,
            },
            None => Look {
                files: parse_numstat(&out),
                diff: Vec::new(),
            },
        }
    }
}

/// Most of the bridge's index listed when looking for nested repositories.
const MAX_LISTED_INDEX_BYTES: usize = 256 * 1024 * 1024;

/// Take every gitlink (a repository nested in the worktree) out of the
/// bridge's index at `index` before git looks at the files (see
/// [`super::index`]): found by reading the index, or, for one this does
/// not read, by asking git to list it.
async fn drop_gitlinks(
    git: &super::git::Git,
    index: &Path,
    hash_len: usize,
) -> Result<(), GitError> {
    let links = match std::fs::read(index) {
        Err(_) => return Ok(()),
        Ok(bytes) => match super::index::gitlinks(&bytes, hash_len) {
            Some(links) => links,
            None => listed_gitlinks(git).await?,
        },
    };
    if links.is_empty() {
        return Ok(());
    }
    let mut paths = Vec::new();
    for link in links {
        paths.extend(link);
        paths.push(0);
    }
    let args = [
        OWN_INDEX[0],
        OWN_INDEX[1],
        "update-index",
        "--force-remove",
        "-z",
        "--stdin",
    ];
    git.run_with_input(&args, paths).await.map(drop)
}

/// The gitlinks of the bridge's index, as git lists them.
async fn listed_gitlinks(git: &super::git::Git) -> Result<Vec<Vec<u8>>, GitError> {
    let listed = git
        .run_capped(&["ls-files", "--stage", "-z"], MAX_LISTED_INDEX_BYTES)
        .await?;
    if listed.cut {
        return Err(GitError::Failed {
            args: "ls-files --stage".into(),
            said: "the worktree holds more files than the bridge looks at".into(),
        });
    }
    Ok(listed
        .bytes
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let rest = entry.strip_prefix(b"160000 ")?;
            let at = rest.iter().position(|b| *b == b'\t')?;
            Some(rest[at + 1..].to_vec())
        })
        .collect())
}

/// What tells one state of an index file from another: git writes a
/// changed index as a new file, so its inode, size and time change.
fn index_seen(index: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(index).ok()?;
    meta.is_file().then(|| {
        format!(
            "{}:{}:{}.{}",
            meta.ino(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec()
        )
    })
}

/// `git diff --numstat -z`: `added\tremoved\tpath\0` per file, `-` for a
/// binary file's counts.
pub(super) fn parse_numstat(out: &[u8]) -> Vec<FileChange> {
    out.split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let mut parts = text.splitn(3, '\t');
            let added = parts.next()?;
            let removed = parts.next()?;
            let path = parts.next()?.to_string();
            let lines = added.parse().ok().zip(removed.parse().ok());
            Some(FileChange { path, lines })
        })
        .collect()
}

/// `git log` of the commits in `range` as a person reads them (short id
/// and subject, the subject cut at 200 characters), the newest `limit`;
/// no decoration, and no signature check (which runs a program).
pub(super) fn subjects_log<'a>(limit: &'a str, range: &'a str) -> [&'a str; 7] {
    [
        "log",
        "--no-decorate",
        "--no-show-signature",
        "--format=%h %<(200,trunc)%s",
        "-n",
        limit,
        range,
    ]
}

#[cfg(test)]
mod tests {
    use super::super::{Project, testing};
    use super::*;

    /// One turn of conversation `c` on `project`: `work` is what its
    /// harness does; the files the person is told of.
    async fn turn(project: &Project, workspace: &Path, work: impl FnOnce(&Path)) -> Vec<String> {
        std::fs::create_dir_all(workspace.join(super::super::BRIDGE_DIR)).unwrap();
        let checkout = Checkout::ensure(project, workspace, "chat/c".into(), &[".langbot/".into()])
            .await
            .unwrap();
        let before = checkout.before().await.unwrap();
        work(workspace);
        let changes = checkout.changes_since(&before).await.unwrap();
        changes
            .map(|c| c.files.into_iter().map(|f| f.path).collect())
            .unwrap_or_default()
    }

    /// What a harness does: write `text` to `path`.
    fn write<'a>(path: &'a str, text: &'a str) -> impl FnOnce(&Path) + 'a {
        move |ws: &Path| {
            let path = ws.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[tokio::test]
    async fn a_watch_kept_between_turns_sees_folders_made_moved_and_what_changed_between() {
        let dir = tempfile::tempdir().unwrap();
        let project = testing::project(dir.path(), "").await;
        let ws = dir.path().join("conversation");
        // The first turn's state is the branch's; from the second on a
        // watch says where to look, and is kept for the next.
        assert_eq!(turn(&project, &ws, |_| {}).await, Vec::<String>::new());
        assert_eq!(turn(&project, &ws, write("a.txt", "a")).await, ["a.txt"]);
        assert!(
            project.watches.holds_watch(&ws) || {
                // Its tree may still be being written.
                let checkout =
                    Checkout::ensure(&project, &ws, "chat/c".into(), &[".langbot/".into()])
                        .await
                        .unwrap();
                checkout.kept().await;
                project.watches.holds_watch(&ws)
            }
        );
        // A folder made: its files are not watched, so the watch is not
        // handed on, and the next turn's edit in it is seen.
        assert_eq!(
            turn(&project, &ws, write("new/b.txt", "b")).await,
            ["new/b.txt"]
        );
        assert_eq!(
            turn(&project, &ws, write("new/b.txt", "bb")).await,
            ["new/b.txt"]
        );
        // A folder moved: the watch would name its events by the old name.
        let moved = |ws: &Path| std::fs::rename(ws.join("new"), ws.join("old")).unwrap();
        assert_eq!(turn(&project, &ws, moved).await, ["new/b.txt", "old/b.txt"]);
        assert_eq!(
            turn(&project, &ws, write("old/b.txt", "bbb")).await,
            ["old/b.txt"]
        );
        // Between turns (nothing should run there, but a person may): the
        // next turn's summary says it.
        turn(&project, &ws, |_| {}).await;
        std::fs::write(ws.join("greeting.txt"), "changed between turns\n").unwrap();
        assert_eq!(
            turn(&project, &ws, write("a.txt", "aa")).await,
            ["a.txt", "greeting.txt"]
        );
        // Turns one right after another: each is told its own change.
        for n in 0..5 {
            let text = format!("{n}");
            assert_eq!(
                turn(&project, &ws, write("old/b.txt", &text)).await,
                ["old/b.txt"]
            );
        }
    }

    #[test]
    fn a_kept_state_is_two_object_ids_or_nothing() {
        let tree = "a".repeat(40);
        let head = "b".repeat(40);
        let kept = Snapshot::parse(&format!("{tree} {head}\n")).expect("two ids");
        assert_eq!(Snapshot::parse(&kept.text()), Some(kept));
        assert_eq!(Snapshot::parse(&tree), None);
        assert_eq!(Snapshot::parse(&format!("{tree} HEAD")), None);
        assert_eq!(Snapshot::parse(&format!("{tree} {head} more")), None);
    }

    #[test]
    fn numstat_gives_files_with_their_lines_and_binaries_without() {
        let files = parse_numstat(b"3\t1\tsrc/a.rs\0-\t-\tlogo.png\0");
        assert_eq!(
            files,
            vec![
                FileChange {
                    path: "src/a.rs".into(),
                    lines: Some((3, 1))
                },
                FileChange {
                    path: "logo.png".into(),
                    lines: None
                },
            ]
        );
    }

    #[test]
    fn a_diff_answer_is_the_counts_then_the_patch() {
        let patch = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
        let mut out = b"1\t1\tx\0-\t-\tlogo.png\0\0".to_vec();
        out.extend(patch);
        let look = Look::parse(out);
        assert_eq!(look.files, parse_numstat(b"1\t1\tx\0-\t-\tlogo.png\0"));
        assert_eq!(look.diff, patch);
        assert_eq!(Look::parse(Vec::new()), Look::default());
        assert_eq!(Look::parse(patch.to_vec()).diff, patch, "a patch alone");
        let counts = Look::parse(b"0\t0\tx\0".to_vec());
        assert_eq!(
            (counts.files.len(), counts.diff.len()),
            (1, 0),
            "counts alone"
        );
    }

    #[test]
    fn the_summary_names_the_branch_files_commits_and_the_diff() {
        let changes = Changes {
            branch: "chat/c-1".into(),
            files: parse_numstat(b"3\t1\tsrc/a.rs\0-\t-\tlogo.png\0"),
            commits: vec!["abc1234 Fix the greeting".into()],
            more_commits: 0,
            diff: Vec::new(),
            notes: Vec::new(),
        };
        assert_eq!(
            changes.summary(Some("changes.diff")),
            "Changes on branch `chat/c-1`: 2 files changed, +3 −1, 1 new commit.\n\
             - src/a.rs (+3 −1)\n- logo.png (binary)\n* abc1234 Fix the greeting\n\
             The whole diff is in changes.diff."
        );
    }
}
