//! The repository's folder as the harness's git sees it: a folder of the
//! conversation's workspace (the record's `commondir`) that links to the
//! repository's own entries (refs, configuration, hooks, `info/`…) and
//! holds a copy of its packed refs.
//!
//! Git locks the packed refs beside them whenever it deletes a ref, even
//! one that is not there: every `git commit` deletes the `AUTO_MERGE`
//! pseudo-ref, and in the repository's folder, which no harness may
//! write, that lock failed with `error: Unable to create
//! '…/packed-refs.lock': Permission denied` after each commit, which a
//! model reads as a failure. Here the lock is made in the harness's own
//! folder; the refs themselves stay the repository's, reached through a
//! link to its `refs/` that the harness may read but not write, so a
//! branch or tag it makes is refused as before. Its copy of the packed
//! refs is its own to rewrite and is written again at every turn; no git
//! of the bridge's ever reads this folder.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::worktree::{Reader, holds_exactly, remove_if_there, write_replacing};
use super::{Checkout, ProjectError};

/// The folder the harness's git takes for the repository's, in the
/// workspace (the bridge's `.langbot/` is kept out of git).
pub(super) const OWN_COMMON: &str = ".langbot/git-common";

/// The packed refs: copied, not linked, so that git locks them here.
const PACKED_REFS: &str = "packed-refs";

/// Whether the repository's entry `name` is linked into the harness's
/// view of it: not every worktree's record, not the bridge's own folder,
/// not the packed refs (a copy) and not a lock of the moment.
fn linked(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    !matches!(
        name.as_ref(),
        "worktrees" | super::changes::OWN_DIR | PACKED_REFS
    ) && !name.ends_with(".lock")
}

impl Checkout {
    /// The harness's view of the repository's folder.
    pub(super) fn own_common(&self) -> PathBuf {
        self.work_tree.join(OWN_COMMON)
    }

    /// Before a turn: the harness's view of the repository's folder made
    /// or mended — a link to each of the repository's entries in place of
    /// whatever the harness left there, and the packed refs as the
    /// repository holds them now.
    pub(super) fn ready_own_common(&self) -> Result<(), ProjectError> {
        let folder = self.own_common();
        self.ready_own_folder(&folder).map_err(|e| {
            self.fail(format!(
                "cannot make the worktree's view of the repository: {e}"
            ))
        })?;
        let entries = std::fs::read_dir(&self.common_dir).map_err(|e| {
            self.fail(format!(
                "cannot list the repository's folder {}: {e}",
                self.common_dir.display()
            ))
        })?;
        for entry in entries {
            let entry = entry
                .map_err(|e| self.fail(format!("cannot list the repository's folder: {e}")))?;
            if linked(&entry.file_name()) {
                link_to(&folder.join(entry.file_name()), &entry.path()).map_err(|e| {
                    self.fail(format!(
                        "cannot link the worktree's view of the repository to {}: {e}",
                        entry.path().display()
                    ))
                })?;
            }
        }
        self.copy_packed_refs(&folder.join(PACKED_REFS))
            .map_err(|e| self.fail(format!("cannot copy the repository's packed refs: {e}")))
    }

    /// `folder` a folder of its own, the harness's to write: whatever
    /// else is there (a link, a file) removed first.
    fn ready_own_folder(&self, folder: &Path) -> std::io::Result<()> {
        match std::fs::symlink_metadata(folder) {
            Ok(meta) if meta.is_dir() => return Ok(()),
            Ok(_) => std::fs::remove_file(folder)?,
            Err(_) => {}
        }
        std::fs::create_dir(folder)?;
        match self.owner {
            Some(owner) => owner.give(&std::fs::File::open(folder)?),
            None => Ok(()),
        }
    }

    /// The repository's packed refs copied to `to` (replacing what is
    /// there, never through a link) unless the copy is the same already;
    /// none there when it has none.
    fn copy_packed_refs(&self, to: &Path) -> std::io::Result<()> {
        match std::fs::read(self.common_dir.join(PACKED_REFS)) {
            // The usual turn: the copy is as the repository holds them.
            Ok(bytes) if holds_exactly(to, &bytes) => Ok(()),
            Ok(bytes) => {
                if std::fs::symlink_metadata(to).is_ok_and(|m| m.is_dir()) {
                    std::fs::remove_dir_all(to)?;
                }
                write_replacing(to, bytes, Reader::Harness(self.owner))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::symlink_metadata(to) {
                    Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(to),
                    _ => remove_if_there(to),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// A link at `at` to `target`, unless one is there already: whatever
/// else is at `at` (a file, a folder, another link) is removed, never
/// followed.
fn link_to(at: &Path, target: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(at) {
        Ok(meta) if meta.file_type().is_symlink() => {
            if std::fs::read_link(at)? == target {
                return Ok(());
            }
            std::fs::remove_file(at)?;
        }
        // `remove_dir_all` removes a link inside, never what it names.
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(at)?,
        Ok(_) => std::fs::remove_file(at)?,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(target, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_replaces_what_the_harness_left_without_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("refs");
        std::fs::create_dir(&target).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("kept"), "kept").unwrap();
        let at = dir.path().join("view");
        // A folder the harness made, holding a link to another folder.
        std::fs::create_dir(&at).unwrap();
        std::os::unix::fs::symlink(&elsewhere, at.join("into")).unwrap();
        link_to(&at, &target).unwrap();
        assert_eq!(std::fs::read_link(&at).unwrap(), target);
        assert!(elsewhere.join("kept").exists(), "nothing followed");
        // A link elsewhere is replaced; the right link is left.
        std::fs::remove_file(&at).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &at).unwrap();
        link_to(&at, &target).unwrap();
        assert_eq!(std::fs::read_link(&at).unwrap(), target);
        link_to(&at, &target).unwrap();
        assert_eq!(std::fs::read_link(&at).unwrap(), target);
    }

    #[test]
    fn the_records_the_bridges_folder_the_packed_refs_and_locks_are_not_linked() {
        for name in [
            "worktrees",
            super::super::changes::OWN_DIR,
            "packed-refs",
            "config.lock",
        ] {
            assert!(!linked(OsStr::new(name)), "{name}");
        }
        for name in [
            "refs", "config", "hooks", "info", "HEAD", "objects", "shallow", "logs",
        ] {
            assert!(linked(OsStr::new(name)), "{name}");
        }
    }
}
