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
//! A watch whose turn moved no folder is kept for the conversation's next
//! turn (a few, the most recently used): reading every folder again to
//! watch it costs more than the rest of a later turn's look (4 ms for
//! 10,000 files). Kept, it also sees what changed between the turns.
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

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::BRIDGE_DIR;

/// Most folders watched; a larger worktree is looked at whole.
const MAX_DIRS: usize = 4096;
/// Most paths handed to git; past it the worktree is looked at whole.
pub(super) const MAX_PATHS: usize = 256;
/// Watches kept between turns, across a process's projects' worktrees:
/// each holds an inotify instance, of which a user has 128 by default,
/// shared with the harnesses' own.
const KEPT: usize = 8;

/// The watch on one worktree's folders, from before a turn.
#[derive(Debug)]
pub(super) struct Watch {
    /// Taken by the drop, which closes it elsewhere.
    inotify: Option<Inotify>,
    /// Each watched folder, relative to the worktree.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Whether the folders are still those watched, as named: no folder
    /// made, moved or removed, nothing lost.
    whole: bool,
}

/// What a worktree's turn hands its next: the watch, or the task still
/// keeping the turn's state (its tree written after the person has the
/// summary), which ends with the watch when it is to be kept.
#[derive(Debug)]
pub(super) enum Handover {
    /// The state is kept; the watch goes on from it.
    Watch(Watch),
    /// The state is being kept.
    Keeping(tokio::task::JoinHandle<Option<Watch>>),
}

impl Handover {
    /// Once the state is kept: the watch, when there is one to go on with.
    pub(super) async fn watch(self) -> Option<Watch> {
        match self {
            Handover::Watch(watch) => Some(watch),
            Handover::Keeping(task) => task.await.ok().flatten(),
        }
    }
}

/// What worktrees' turns hand their next, least recently used first.
#[derive(Debug, Clone, Default)]
pub(super) struct KeptWatches(Arc<Mutex<VecDeque<(PathBuf, Handover)>>>);

impl KeptWatches {
    /// What the last turn of `work_tree` handed on, if anything (taken:
    /// a turn owns it).
    pub(super) fn take(&self, work_tree: &Path) -> Option<Handover> {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let at = kept.iter().position(|(path, _)| path == work_tree)?;
        kept.remove(at).map(|(_, handover)| handover)
    }

    /// Hand `handover` to `work_tree`'s next turn; a watch whose folders
    /// are no longer as it watches them is closed instead, and the least
    /// recently used watches beyond [`KEPT`]. A task keeping a state is
    /// never dropped: the next turn waits for it (one git on the bridge's
    /// index at a time).
    pub(super) fn keep(&self, work_tree: PathBuf, handover: Handover) {
        if matches!(&handover, Handover::Watch(watch) if !watch.whole) {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back((work_tree, handover));
        let watches = |kept: &VecDeque<(PathBuf, Handover)>| {
            kept.iter()
                .filter(|(_, h)| matches!(h, Handover::Watch(_)))
                .count()
        };
        while watches(&kept) > KEPT {
            if let Some(oldest) = kept
                .iter()
                .position(|(_, h)| matches!(h, Handover::Watch(_)))
            {
                kept.remove(oldest);
            }
        }
    }

    /// Whether a watch is kept for `work_tree`: for tests.
    #[cfg(test)]
    pub(super) fn holds_watch(&self, work_tree: &Path) -> bool {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter()
            .any(|(path, h)| path == work_tree && matches!(h, Handover::Watch(_)))
    }
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
            whole: true,
        })
    }

    /// Whether its folders are as it watches them, to go on from.
    pub(super) fn is_whole(&self) -> bool {
        self.whole
    }

    /// The worktree-relative paths where something happened since the
    /// start, or since the last time they were asked; `None` when the
    /// watch cannot tell.
    pub(super) fn changed(&mut self) -> Option<BTreeSet<String>> {
        let paths = self.read();
        if paths.is_none() {
            self.whole = false;
        }
        paths
    }

    fn read(&mut self) -> Option<BTreeSet<String>> {
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
                // A watched folder moved or gone: the watch no longer names
                // where its events happen.
                if event.mask.intersects(F::IN_IGNORED | F::IN_MOVE_SELF) {
                    self.whole = false;
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
                // A folder made or moved in: its files are not watched.
                let folder = F::IN_CREATE | F::IN_DELETE | F::IN_MOVED_FROM | F::IN_MOVED_TO;
                if event.mask.contains(F::IN_ISDIR) && event.mask.intersects(folder) {
                    self.whole = false;
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
        let mut watch = Watch::start(root).expect("a watch");
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
        let mut watch = Watch::start(dir.path()).expect("a watch");
        for i in 0..=MAX_PATHS {
            std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
        }
        assert_eq!(watch.changed(), None);
    }
}
