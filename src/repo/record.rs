//! A worktree's record in the repository (`worktrees/<name>`): what the
//! harness's own git finds through the worktree's `.git` file — the way
//! to the repository (`commondir`, the harness's view of it in
//! [`super::common`]), the way back (`gitdir`), its HEAD and
//! its index.
//!
//! The harness writes the record (each commit moves its HEAD), so the
//! bridge makes it itself, without git (whose worktree commands read
//! every other conversation's record), writes it only by replacing whole
//! files, mends it at every turn from what the bridge itself keeps (the
//! branch, the last commit it saw), and reads nothing of it but HEAD: a
//! file of its own (never a link, a folder or a pipe), small, holding a
//! commit id or the name of a ref, and never handed to git as a git
//! folder. Whatever else the harness plants there (`config.worktree`,
//! hooks, refs) no git of the bridge's ever reads.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::git::Git;
use super::worktree::{Reader, write_replacing};
use super::{Checkout, ProjectError};

/// Longest HEAD read: a commit id or a ref's name is far shorter.
const MAX_HEAD_BYTES: u64 = 1024;

/// Why a record's HEAD cannot be used, in words for the person
/// ("its HEAD was replaced by a link").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct Broken(String);

/// What the record's HEAD names, once read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Head {
    /// A commit id, as the bridge leaves it and a commit moves it.
    Commit(String),
    /// A ref, as `git checkout <branch>` in the worktree leaves it.
    Ref(String),
}

/// Whether `id` is a full object id (SHA-1 or SHA-256), in lowercase.
pub(super) fn is_object_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a ref's full name the bridge hands git: `refs/…`,
/// parts of plain characters, none empty or `.`-led, no `..`.
fn is_ref_name(name: &str) -> bool {
    name.strip_prefix("refs/").is_some_and(|rest| {
        !rest.is_empty()
            && !name.ends_with(".lock")
            && rest.split('/').all(|part| {
                !part.is_empty()
                    && !part.starts_with('.')
                    && !part.contains("..")
                    && part.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+')
                    })
            })
    })
}

/// The text of a record's HEAD, as git would read it: a commit id, or
/// `ref: refs/…`; why not, when it is neither.
pub(super) fn parse_head(text: &str) -> Result<Head, Broken> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    if is_object_id(line) {
        return Ok(Head::Commit(line.to_string()));
    }
    match line.strip_prefix("ref: ") {
        Some(name) if is_ref_name(name) => Ok(Head::Ref(name.to_string())),
        _ => Err(Broken(
            "its HEAD holds neither a commit id nor a branch".into(),
        )),
    }
}

impl Checkout {
    /// Make the record anew, its HEAD at `commit`: the folder, the way to
    /// the repository and back to the worktree.
    pub(super) fn make_record(&self, commit: &str) -> Result<(), ProjectError> {
        std::fs::create_dir_all(&self.admin)
            .and_then(|()| match self.owner {
                Some(owner) => owner.give(&std::fs::File::open(&self.admin)?),
                None => Ok(()),
            })
            .map_err(|e| self.fail(format!("cannot make the worktree's record: {e}")))?;
        self.set_head(commit)?;
        self.write_links().map(drop)
    }

    /// The worktree's `.git` file and the record's ways to the
    /// repository and back, written whole: whatever the harness made of
    /// them (a link, another path), git run by the harness finds its
    /// record through them. A `.git` folder the harness made (a
    /// repository of its own) is moved into the bridge's folder, and
    /// what the person should hear of it returned.
    pub(super) fn write_links(&self) -> Result<Option<String>, ProjectError> {
        let dot_git = self.work_tree.join(".git");
        let moved = match std::fs::symlink_metadata(&dot_git) {
            Ok(meta) if meta.is_dir() => Some(self.move_aside(&dot_git)?),
            _ => None,
        };
        let link = format!("gitdir: {}\n", self.admin.display());
        let wrote = write_replacing(&dot_git, link, Reader::Harness(self.owner))
            .and_then(|()| {
                let back = format!("{}\n", dot_git.display());
                self.write_in_record("gitdir", back.as_bytes())
            })
            .and_then(|()| {
                let common = format!("{}\n", self.own_common().display());
                self.replace_unless_same("commondir", common.as_bytes())
            });
        wrote.map_err(|e| self.fail(format!("cannot link the worktree: {e}")))?;
        Ok(moved.map(|kept| {
            format!(
                "This conversation's worktree had a repository of its own in place of its link \
                 to the project (a `.git` folder); it is kept as `{kept}`, and the worktree is \
                 linked to branch `{}` again.",
                self.branch
            )
        }))
    }

    /// Move `dot_git` (a folder the harness made) into the bridge's
    /// folder of the workspace, under a name of its own; that name.
    fn move_aside(&self, dot_git: &Path) -> Result<String, ProjectError> {
        let bridge_dir = self.work_tree.join(super::BRIDGE_DIR);
        if !std::fs::symlink_metadata(&bridge_dir).is_ok_and(|m| m.is_dir()) {
            return Err(self.fail(format!(
                "the workspace {} holds a repository of its own (a .git folder) and no folder \
                 of the bridge's to keep it in",
                self.work_tree.display()
            )));
        }
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = format!("replaced-git-{seconds}");
        std::fs::rename(dot_git, bridge_dir.join(&name)).map_err(|e| {
            self.fail(format!(
                "cannot move the workspace's .git folder aside: {e}"
            ))
        })?;
        tracing::warn!(project = %self.project, branch = %self.branch, kept = %name, "a worktree's .git was a folder of the harness's; it is moved aside");
        Ok(format!("{}/{name}", super::BRIDGE_DIR))
    }

    /// Point the record's HEAD at `commit` (detached: a commit in the
    /// worktree moves only its HEAD, no branch the repository shares).
    pub(super) fn set_head(&self, commit: &str) -> Result<(), ProjectError> {
        self.write_in_record("HEAD", format!("{commit}\n").as_bytes())
            .map_err(|e| self.fail(format!("cannot set the worktree's HEAD: {e}")))
    }

    /// Give the harness's git `index` (a file of the bridge's) as the
    /// worktree's index.
    pub(super) fn install_index(&self, index: &Path) -> Result<(), ProjectError> {
        let bytes = std::fs::read(index)
            .map_err(|e| self.fail(format!("cannot read the bridge's index: {e}")))?;
        self.write_in_record("index", &bytes)
            .map_err(|e| self.fail(format!("cannot give the worktree its index: {e}")))
    }

    /// Give the harness's git an index of `head`'s tree that keeps what
    /// the bridge's own index knows of the files unchanged since (its
    /// `git status` reads no more than what changed): the worktree's files
    /// show as changed where they differ from `head`.
    pub(super) async fn give_index_at(&self, head: &str) -> Result<(), ProjectError> {
        let theirs = self.private_dir().join("worktree.index");
        let own = self.own_index_path();
        let copied = match own.is_file() {
            true => std::fs::copy(&own, &theirs).map(drop),
            false => super::worktree::remove_if_there(&theirs),
        };
        copied.map_err(|e| self.fail(format!("cannot make the worktree's index: {e}")))?;
        self.worktree_git()
            .with_index(&theirs)
            .run(&["read-tree", "-m", head])
            .await
            .map_err(|e| self.at_git(e))?;
        self.install_index(&theirs)?;
        super::worktree::remove_if_there(&theirs)
            .map_err(|e| self.fail(format!("cannot tidy the bridge's repository: {e}")))
    }

    /// The harness's index made again at `head` when the harness put
    /// something else in its place (a link, a folder); what the person
    /// should hear of it.
    pub(super) async fn mend_index(&self, head: &str) -> Result<Option<String>, ProjectError> {
        match std::fs::symlink_metadata(self.admin.join("index")) {
            Ok(meta) if !meta.is_file() => {}
            _ => return Ok(None),
        }
        self.give_index_at(head).await?;
        Ok(Some(format!(
            "This conversation's worktree record had been changed outside git (its index was \
             replaced); the index is made again at `{}`, and the files are as the agent left \
             them.",
            crate::interaction::short(head)
        )))
    }

    /// Whether the record is there, a folder of the repository's.
    pub(super) fn has_record(&self) -> bool {
        std::fs::symlink_metadata(&self.admin).is_ok_and(|m| m.is_dir())
    }

    /// The record's HEAD as the harness left it, read without following
    /// a link or waiting on a pipe; why it cannot be used, if it cannot.
    pub(super) fn read_head(&self) -> Result<Head, Broken> {
        let file = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.admin.join("HEAD"))
            .map_err(|e| {
                Broken(match e.raw_os_error() {
                    Some(libc::ELOOP) => "its HEAD was replaced by a link".to_string(),
                    Some(libc::ENOENT) => "its HEAD was removed".to_string(),
                    _ => format!("its HEAD cannot be read ({e})"),
                })
            })?;
        let meta = file
            .metadata()
            .map_err(|e| Broken(format!("its HEAD cannot be read ({e})")))?;
        if !meta.is_file() {
            return Err(Broken("its HEAD is not a file".into()));
        }
        let mut text = String::new();
        file.take(MAX_HEAD_BYTES)
            .read_to_string(&mut text)
            .map_err(|_| Broken("its HEAD is not text".into()))?;
        parse_head(&text)
    }

    /// The commit the record's HEAD names: an id as written (the caller
    /// checks the repository has it), or the commit of the ref it names
    /// in the repository; why not, when it names none.
    pub(super) async fn head_commit(&self) -> Result<String, Broken> {
        match self.read_head()? {
            Head::Commit(id) => Ok(id),
            Head::Ref(name) => {
                let rev = format!("{name}^{{commit}}");
                Git::bare(&self.common_dir)
                    .line(&["rev-parse", "--verify", "--quiet", "--end-of-options", &rev])
                    .await
                    .ok()
                    .filter(|id| is_object_id(id))
                    .ok_or_else(|| Broken(format!("its HEAD names `{name}`, which is no commit")))
            }
        }
    }

    /// Write `name` in the record unless it already holds exactly
    /// `bytes` as a plain file.
    fn replace_unless_same(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        match super::worktree::holds_exactly(&self.admin.join(name), bytes) {
            true => Ok(()),
            false => self.write_in_record(name, bytes),
        }
    }
}

impl Checkout {
    /// Write the record's file `name` whole, through a temporary file
    /// renamed over it: a link there is replaced, never followed, and a
    /// folder the harness made in its place removed first.
    fn write_in_record(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.admin.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&path)?;
        }
        write_replacing(&path, bytes, Reader::Harness(self.owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_a_commit_id_or_a_refs_plain_name() {
        let id = "a".repeat(40);
        assert_eq!(parse_head(&format!("{id}\n")), Ok(Head::Commit(id.clone())));
        let long = "0123456789abcdef".repeat(4);
        assert_eq!(parse_head(&long), Ok(Head::Commit(long.clone())));
        assert_eq!(
            parse_head("ref: refs/heads/chat/a-1\n"),
            Ok(Head::Ref("refs/heads/chat/a-1".into()))
        );
        for wrong in [
            "",
            "A".repeat(40).as_str(),
            "a".repeat(41).as_str(),
            "ref: HEAD",
            "ref: refs/heads/../../config",
            "ref: refs/heads/x.lock",
            "ref: refs/heads/.hidden",
            "ref: refs/heads/a b",
            "ref: refs/",
            "ref: refs/heads//x",
            "ref: /etc/passwd",
            "gitdir: /elsewhere",
            &format!("{id}\nmore\n"),
        ] {
            assert!(parse_head(wrong).is_err(), "{wrong:?}");
        }
    }
}
