//! What changed in a worktree during a turn, as the kernel saw it.
//!
//! Looking at every file of a large worktree after each turn costs a stat
//! of each (about 20 ms at 10,000 files) when a turn changes a few. So
//! from the state before the turn the worktree's folders are watched
//! (inotify; the bridge's folder and git folders left out), and after it
//! git looks only where the kernel said something happened: files
//! written, made, removed or moved, and whole folders made during the
//! turn (their files were not watched).
//!
//! The watch only narrows where git looks, and only for the person's
//! summary of a turn that committed nothing. Whenever it cannot be
//! trusted, git looks at everything, as it always did: too many folders
//! to watch, no inotify instance left, events lost to an overflow, too
//! many paths, a name that is not UTF-8, the worktree itself moved — and
//! any turn that moved the branch, so that every commit's content is
//! shown whole before it can leave the machine (a write the kernel does
//! not report — through a hard link from an unwatched folder, or a shared
//! mapping — is then seen).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::BRIDGE_DIR;

/// Most folders watched; a larger worktree is looked at whole.
const MAX_DIRS: usize = 4096;
/// Most paths handed to git; past it the worktree is looked at whole.
pub(super) const MAX_PATHS: usize = 256;

/// The watch on one worktree's folders, from before a turn.
#[derive(Debug)]
pub(super) struct Watch {
    /// Taken by the drop, which closes it elsewhere.
    inotify: Option<Inotify>,
    /// Each watched folder, relative to the worktree.
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

impl Drop for Watch {
    /// Closing an inotify instance waits for the kernel to let go of
    /// every watch (about 15 ms for a hundred folders): done on a thread
    /// of its own, off the turn's way.
    fn drop(&mut self) {
        if let Some(inotify) = self.inotify.take() {
            std::thread::spawn(move || drop(inotify));
        }
    }
}

impl Watch {
    /// Watch every folder of `work_tree` but the bridge's and git's;
    /// `None` when it cannot be done (then git looks at everything).
    pub(super) fn start(work_tree: &Path) -> Option<Watch> {
        use AddWatchFlags as F;
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mask = F::IN_MODIFY
            | F::IN_ATTRIB
            | F::IN_CLOSE_WRITE
            | F::IN_CREATE
            | F::IN_DELETE
            | F::IN_MOVED_FROM
            | F::IN_MOVED_TO
            | F::IN_MOVE_SELF
            | F::IN_DONT_FOLLOW
            | F::IN_ONLYDIR;
        let mut dirs = HashMap::new();
        let walk = walkdir::WalkDir::new(work_tree)
            .follow_links(false)
            .into_iter()
            .filter_entry(|entry| {
                entry.file_type().is_dir()
                    && entry.file_name() != ".git"
                    && !(entry.depth() == 1 && entry.file_name() == BRIDGE_DIR)
            });
        for entry in walk {
            let entry = entry.ok()?;
            if dirs.len() == MAX_DIRS {
                return None;
            }
            let wd = inotify.add_watch(entry.path(), mask).ok()?;
            let relative = entry.path().strip_prefix(work_tree).ok()?;
            dirs.insert(wd, relative.to_path_buf());
        }
        Some(Watch {
            inotify: Some(inotify),
            dirs,
        })
    }

    /// The worktree-relative paths where something happened since the
    /// start; `None` when the watch cannot tell.
    pub(super) fn changed(&self) -> Option<BTreeSet<String>> {
        use AddWatchFlags as F;
        let inotify = self.inotify.as_ref()?;
        let mut paths = BTreeSet::new();
        loop {
            let events = match inotify.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => events,
                Err(Errno::EAGAIN) => break,
                Err(_) => return None,
            };
            for event in events {
                if event.mask.contains(F::IN_Q_OVERFLOW) {
                    return None;
                }
                let dir = self.dirs.get(&event.wd)?;
                if event.mask.contains(F::IN_MOVE_SELF) && dir.as_os_str().is_empty() {
                    return None;
                }
                // A folder's own events: its parent's name it.
                let Some(name) = event.name else { continue };
                if dir.as_os_str().is_empty() && (name == BRIDGE_DIR || name == ".git") {
                    continue;
                }
                paths.insert(dir.join(name).into_os_string().into_string().ok()?);
                if paths.len() > MAX_PATHS {
                    return None;
                }
            }
        }
        Some(paths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_names_what_changed_and_leaves_the_bridges_folder_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::create_dir_all(root.join(BRIDGE_DIR).join("home")).unwrap();
        std::fs::write(root.join("src/deep/a.rs"), "a").unwrap();
        std::fs::write(root.join("gone.txt"), "g").unwrap();
        let watch = Watch::start(root).expect("a watch");
        assert_eq!(watch.changed(), Some(BTreeSet::new()));
        std::fs::write(root.join("src/deep/a.rs"), "b").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::create_dir_all(root.join("new/inner")).unwrap();
        std::fs::write(root.join("new/inner/made.rs"), "m").unwrap();
        std::fs::write(root.join(BRIDGE_DIR).join("home/session"), "s").unwrap();
        let changed = watch.changed().expect("the watch can tell");
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            ["gone.txt", "new", "src/deep/a.rs"],
            "a new folder is named whole, the bridge's folder not at all"
        );
    }

    #[test]
    fn more_paths_than_git_is_given_make_the_watch_unsure() {
        let dir = tempfile::tempdir().unwrap();
        let watch = Watch::start(dir.path()).expect("a watch");
        for i in 0..=MAX_PATHS {
            std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
        }
        assert_eq!(watch.changed(), None);
    }
}
