//! A folder nothing done through it can leave.
//!
//! The folder is held open, and everything below it is reached through
//! folder handles opened one name at a time without following links
//! (`openat` with `O_NOFOLLOW | O_DIRECTORY`). Folders are made with
//! `mkdirat`, files are written as `O_EXCL` temp files renamed within
//! their folder's handle, entries are removed with `unlinkat`, and trees
//! by walking handles. What is checked and what is acted on are the same
//! open folder: a process in the workspace that swaps a folder for a link
//! while a projection runs can make it fail, never act outside. A link met
//! on the way is refused ([`ProjectionError::Symlink`]), never followed; a
//! link that is itself the target of a removal is removed, not followed.
//!
//! A write is skipped when the file already holds the bytes, so an
//! unchanged file keeps its mtime. Files are 0600 and the folders made
//! here 0700: a workspace holds a conversation, for its owner only. In a
//! root bridge that owner is the caged harness's uid outside its
//! namespace ([`crate::owner`]): everything made in a workspace is given
//! to it as it is made, and the folders that lead to a workspace are made
//! 0711, to pass through and never to list.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use super::ProjectionError;
use crate::owner::Owner;

/// Mode of every file written: the owner's only.
const FILE_MODE: u32 = 0o600;
/// Mode of every folder made.
const DIR_MODE: u32 = 0o700;
/// Mode of the folders that lead to a workspace given to another owner:
/// it passes through, and lists nothing.
const PASS_MODE: u32 = 0o711;
/// Deepest folder tree removed or walked (each level holds a handle).
const MAX_DEPTH: usize = 64;
/// Largest file [`ConfinedDir::read`] reads: what the bridge reads back
/// are its own manifests and context files, and a harness may have grown
/// one without bound.
const MAX_READ: u64 = 256 * 1024 * 1024;

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file was created or replaced.
    Written,
    /// The file already had these bytes; it was not touched.
    Unchanged,
}

/// A folder that confines every operation to itself. Cloning shares the
/// open handle.
#[derive(Debug, Clone)]
pub struct ConfinedDir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    /// Who is given everything made here (a root bridge's caged
    /// harness), if anyone but the bridge.
    owner: Option<&'static Owner>,
}

/// A file or folder found by [`ConfinedDir::list`] or [`ConfinedDir::files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the folder listed, or its path below the folder walked.
    pub name: String,
    /// Size in bytes.
    pub len: u64,
    /// Last modification.
    pub modified: SystemTime,
}

/// Why a name below a handle could not be opened as wanted.
enum Refused {
    Missing,
    Link,
    InTheWay,
    Io(std::io::Error),
}

impl Refused {
    fn error(self, path: PathBuf, expected: &'static str) -> ProjectionError {
        match self {
            Refused::Missing => {
                ProjectionError::io("open", path)(std::io::ErrorKind::NotFound.into())
            }
            Refused::Link => ProjectionError::Symlink { path },
            Refused::InTheWay => ProjectionError::InTheWay { path, expected },
            Refused::Io(source) => ProjectionError::io("open", path)(source),
        }
    }

    fn io_error(self, path: &Path, expected: &str) -> std::io::Error {
        match self {
            Refused::Missing => std::io::ErrorKind::NotFound.into(),
            Refused::Link => std::io::Error::other(format!("{} is a symlink", path.display())),
            Refused::InTheWay => {
                std::io::Error::other(format!("{} is not a {expected}", path.display()))
            }
            Refused::Io(source) => source,
        }
    }
}

fn kind(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

fn modified(stat: &FileStat) -> SystemTime {
    let nanos = u32::try_from(stat.st_mtime_nsec).unwrap_or(0);
    match u64::try_from(stat.st_mtime) {
        Ok(secs) => SystemTime::UNIX_EPOCH + Duration::new(secs, nanos),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// Open `name` in `parent` as a folder, never through a link.
fn open_dir_at(parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Refused> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::ENOENT) => Err(Refused::Missing),
        // A link opened with O_NOFOLLOW|O_DIRECTORY fails as "not a
        // folder" on Linux: look at what it is, only to name the refusal.
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) if kind(&stat) == SFlag::S_IFLNK => Err(Refused::Link),
                Ok(_) => Err(Refused::InTheWay),
                Err(Errno::ENOENT) => Err(Refused::Missing),
                Err(errno) => Err(Refused::Io(errno.into())),
            }
        }
        Err(errno) => Err(Refused::Io(errno.into())),
    }
}

/// Open `name` in `parent` for reading as a regular file, never through a
/// link. Without blocking: a FIFO put in its place is refused, not waited on.
fn open_file_at(parent: &OwnedFd, name: &OsStr) -> Result<(fs::File, fs::Metadata), Refused> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = match openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => fs::File::from(fd),
        Err(Errno::ENOENT) => return Err(Refused::Missing),
        Err(Errno::ELOOP) => return Err(Refused::Link),
        Err(errno) => return Err(Refused::Io(errno.into())),
    };
    let meta = file.metadata().map_err(Refused::Io)?;
    if meta.is_file() {
        Ok((file, meta))
    } else {
        Err(Refused::InTheWay)
    }
}

/// `parts` as its last name and the folders before it, every part checked.
fn split_path<'p>(parts: &'p [&'p str]) -> Result<(&'p str, &'p [&'p str]), ProjectionError> {
    let Some((name, folders)) = parts.split_last() else {
        return Err(ProjectionError::UnsafePath {
            path: String::new(),
            reason: "empty path",
        });
    };
    check_parts(parts)?;
    Ok((name, folders))
}

/// Whether `file`, `len` bytes long, holds exactly `bytes` (read from
/// where its handle stands, the start for a file just opened).
fn holds(file: &fs::File, len: u64, bytes: &[u8], path: &Path) -> Result<bool, ProjectionError> {
    if len != bytes.len() as u64 {
        return Ok(false);
    }
    let mut current = Vec::with_capacity(bytes.len());
    file.take(len + 1)
        .read_to_end(&mut current)
        .map_err(ProjectionError::io("read", path))?;
    Ok(current == bytes)
}

/// Every part must be one plain name: callers pass checked components, and
/// this is the last line of defence if one ever does not.
fn check_parts(parts: &[&str]) -> Result<(), ProjectionError> {
    for part in parts {
        if part.is_empty() || *part == "." || *part == ".." || part.contains(['/', '\0']) {
            return Err(ProjectionError::UnsafePath {
                path: parts.join("/").escape_debug().take(200).collect(),
                reason: "not a plain name inside the workspace",
            });
        }
    }
    Ok(())
}

impl ConfinedDir {
    /// Create (if needed) `base/parts...` and confine to it. `base` is the
    /// operator's root and is trusted as is; every part below it is created
    /// here (0700) and must not be a symlink. With an `owner`, the folders
    /// on the way are made 0711, and the last one and all made below it
    /// are given to the owner (the whole folder once, when it was the
    /// bridge's: a workspace made before its harness ran as another uid).
    pub fn create(
        base: &Path,
        parts: &[&str],
        owner: Option<&'static Owner>,
    ) -> Result<Self, ProjectionError> {
        fs::create_dir_all(base).map_err(ProjectionError::io("create folder", base))?;
        let fd = open(
            base,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ProjectionError::io("open", base)(e.into()))?;
        let root = ConfinedDir {
            fd: Arc::new(fd),
            path: base.to_path_buf(),
            owner: None,
        };
        let Some(owner) = owner else {
            return root.ensure_dir(parts);
        };
        let (way, last) = parts.split_at(parts.len().saturating_sub(1));
        let mut leaf = root.make_dirs(way, PASS_MODE)?;
        leaf.owner = Some(owner);
        let leaf = leaf.ensure_dir(last)?;
        leaf.given_whole()?;
        Ok(leaf)
    }

    /// Give this folder, and once everything in it, to its owner when it
    /// is not the owner's yet.
    fn given_whole(&self) -> Result<(), ProjectionError> {
        let Some(owner) = self.owner else {
            return Ok(());
        };
        let stat = nix::sys::stat::fstat(&*self.fd)
            .map_err(|e| ProjectionError::io("inspect", &self.path)(e.into()))?;
        if stat.st_uid != owner.uid {
            let given = owner
                .give_tree(&*self.fd, &[])
                .map_err(ProjectionError::io(
                    "give to the harness's user",
                    &self.path,
                ))?;
            tracing::info!(folder = %self.path.display(), entries = given, owner = %owner.describe(), "a workspace is given to the caged harness's user");
        }
        Ok(())
    }

    /// The folder's path (for display and for the harness's working
    /// directory; nothing here is reached through it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder `name` below this one, or why not.
    fn child(&self, name: &OsStr) -> Result<ConfinedDir, Refused> {
        Ok(ConfinedDir {
            fd: Arc::new(open_dir_at(&self.fd, name)?),
            path: self.path.join(name),
            owner: self.owner,
        })
    }

    /// Give the entry `name` made here to the owner, if there is one.
    fn give(&self, name: &OsStr) -> Result<(), ProjectionError> {
        match self.owner {
            Some(owner) => owner.give_at(&*self.fd, name).map_err(ProjectionError::io(
                "give to the harness's user",
                self.path.join(name),
            )),
            None => Ok(()),
        }
    }

    /// The folder `parts` below this one; `None` when some part does not
    /// exist. Symlinks and files on the way are refused.
    fn open_dir(&self, parts: &[&str]) -> Result<Option<ConfinedDir>, ProjectionError> {
        check_parts(parts)?;
        let mut dir = self.clone();
        for part in parts {
            dir = match dir.child(OsStr::new(part)) {
                Ok(child) => child,
                Err(Refused::Missing) => return Ok(None),
                Err(refused) => return Err(refused.error(dir.path.join(part), "folder")),
            };
        }
        Ok(Some(dir))
    }

    /// Create the folders `parts` below this one, one level at a time
    /// (0700, the owner's), refusing symlinks and files in the way.
    /// Returns the last folder, held open.
    pub fn ensure_dir(&self, parts: &[&str]) -> Result<ConfinedDir, ProjectionError> {
        self.make_dirs(parts, DIR_MODE)
    }

    fn make_dirs(&self, parts: &[&str], mode: u32) -> Result<ConfinedDir, ProjectionError> {
        check_parts(parts)?;
        let mut dir = self.clone();
        for part in parts {
            let name = OsStr::new(part);
            dir = match dir.child(name) {
                Ok(child) => child,
                Err(Refused::Missing) => {
                    match mkdirat(dir.fd.as_fd(), name, Mode::from_bits_truncate(mode)) {
                        Ok(()) => dir.give(name)?,
                        // Made meanwhile by someone else: opened and checked below.
                        Err(Errno::EEXIST) => {}
                        Err(e) => {
                            let path = dir.path.join(part);
                            return Err(ProjectionError::io("create folder", path)(e.into()));
                        }
                    }
                    dir.child(name)
                        .map_err(|r| r.error(dir.path.join(part), "folder"))?
                }
                Err(refused) => return Err(refused.error(dir.path.join(part), "folder")),
            };
            if mode == PASS_MODE {
                dir.passable()?;
            }
        }
        Ok(dir)
    }

    /// Let others pass through this folder (whatever the umask made of
    /// it, or an older bridge left).
    fn passable(&self) -> Result<(), ProjectionError> {
        let stat = nix::sys::stat::fstat(&*self.fd)
            .map_err(|e| ProjectionError::io("inspect", &self.path)(e.into()))?;
        let have = stat.st_mode & 0o7777;
        if have & PASS_MODE != PASS_MODE {
            fchmod(&*self.fd, Mode::from_bits_truncate(have | PASS_MODE))
                .map_err(|e| ProjectionError::io("set permissions of", &self.path)(e.into()))?;
        }
        Ok(())
    }

    /// Whether a file of `meta` is this folder's owner's (the bridge's
    /// when there is no other): one that is not is replaced, never kept.
    fn owns(&self, meta: &fs::Metadata) -> bool {
        self.owner.is_none_or(|owner| meta.uid() == owner.uid)
    }

    /// Write `bytes` at the relative path `parts` (folders first, file
    /// last), atomically and 0600, unless the file already holds exactly
    /// these bytes.
    pub fn write(&self, parts: &[&str], bytes: &[u8]) -> Result<WriteOutcome, ProjectionError> {
        let (file, folders) = split_path(parts)?;
        self.ensure_dir(folders)?.write_file(file, bytes)
    }

    fn write_file(&self, name: &str, bytes: &[u8]) -> Result<WriteOutcome, ProjectionError> {
        let path = self.path.join(name);
        match open_file_at(&self.fd, OsStr::new(name)) {
            Ok((file, meta)) if meta.len() == bytes.len() as u64 => {
                if holds(&file, meta.len(), bytes, &path)? && self.owns(&meta) {
                    if meta.mode() & 0o777 == FILE_MODE {
                        return Ok(WriteOutcome::Unchanged);
                    }
                    // The mode is fixed in place only when this is the
                    // file's one name: a second link could be a file from
                    // anywhere, linked in; that one is replaced instead.
                    if meta.nlink() == 1 {
                        fchmod(&file, Mode::from_bits_truncate(FILE_MODE)).map_err(|e| {
                            ProjectionError::io("set permissions of", &path)(e.into())
                        })?;
                        return Ok(WriteOutcome::Unchanged);
                    }
                }
            }
            Ok(_) | Err(Refused::Missing) => {}
            Err(refused) => return Err(refused.error(path, "file")),
        }
        self.replace(name, bytes, path)
    }

    /// Write `bytes` at `parts` as [`write`](Self::write) does, except that
    /// a plain file already there keeps its inode: it is written over in
    /// place. For the files every turn rewrites (the turn's context and
    /// prompt), which nothing reads while a projection runs: the
    /// conversation's harness starts after it, or waits idle for the turn.
    pub fn rewrite(&self, parts: &[&str], bytes: &[u8]) -> Result<WriteOutcome, ProjectionError> {
        let (file, folders) = split_path(parts)?;
        self.ensure_dir(folders)?.overwrite(file, bytes)
    }

    /// Write `bytes` into the file `name` of this folder in place: its own
    /// inode kept, written again and cut to length. For a file no harness
    /// reads while it changes (a run's archive, a turn's context): nothing
    /// is made and nothing removed, where `write` makes a file and removes
    /// the one it replaces (on a filesystem such as ext4, finding a free
    /// inode after many were freed is costly). A file with a second name
    /// (linked in from elsewhere), another mode, a link, or no file is
    /// replaced as `write` does.
    pub fn overwrite(&self, name: &str, bytes: &[u8]) -> Result<WriteOutcome, ProjectionError> {
        use std::os::unix::fs::FileExt;
        check_parts(&[name])?;
        let path = self.path.join(name);
        let flags = OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        if let Ok(fd) = openat(&*self.fd, name, flags, Mode::empty()) {
            let file = fs::File::from(fd);
            let meta = file
                .metadata()
                .map_err(ProjectionError::io("inspect", &path))?;
            if meta.is_file()
                && meta.nlink() == 1
                && meta.mode() & 0o777 == FILE_MODE
                && self.owns(&meta)
            {
                if holds(&file, meta.len(), bytes, &path)? {
                    return Ok(WriteOutcome::Unchanged);
                }
                // Written first and cut after: a file that shrinks is
                // never empty on the way, and its blocks are kept.
                return file
                    .write_all_at(bytes, 0)
                    .and_then(|()| file.set_len(bytes.len() as u64))
                    .map(|()| WriteOutcome::Written)
                    .map_err(ProjectionError::io("write", &path));
            }
        }
        self.replace(name, bytes, path)
    }

    /// Rename the entry `from` of this folder to `to`, in this folder,
    /// never over one that exists.
    pub fn rename_entry(&self, from: &str, to: &str) -> Result<(), ProjectionError> {
        check_parts(&[from, to])?;
        nix::fcntl::renameat2(
            &*self.fd,
            from,
            &*self.fd,
            to,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(|e| ProjectionError::io("rename", self.path.join(from))(e.into()))
    }

    /// Whether `name` here is a regular file (a link is not followed).
    pub fn holds_file(&self, name: &str) -> Result<bool, ProjectionError> {
        check_parts(&[name])?;
        match fstatat(&*self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(kind(&stat) == SFlag::S_IFREG),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(ProjectionError::io("inspect", self.path.join(name))(
                e.into(),
            )),
        }
    }

    /// Mark this folder modified now (its files written in place leave
    /// its own time as it was).
    pub fn touch(&self) -> Result<(), ProjectionError> {
        use nix::sys::time::TimeSpec;
        nix::sys::stat::futimens(&*self.fd, &TimeSpec::UTIME_OMIT, &TimeSpec::UTIME_NOW)
            .map_err(|e| ProjectionError::io("touch", &self.path)(e.into()))
    }

    /// Write a fresh temp file in this folder and rename it over `name`.
    fn replace(
        &self,
        name: &str,
        bytes: &[u8],
        path: PathBuf,
    ) -> Result<WriteOutcome, ProjectionError> {
        let (temp, mut file) = self.temp_file()?;
        let written = file
            .write_all(bytes)
            .map_err(ProjectionError::io("write", &path))
            .and_then(|()| {
                renameat(&*self.fd, temp.as_str(), &*self.fd, name).map_err(|e| match e {
                    Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => ProjectionError::InTheWay {
                        path: path.clone(),
                        expected: "file",
                    },
                    e => ProjectionError::io("replace", &path)(e.into()),
                })
            });
        if written.is_err() {
            let _ = unlinkat(&*self.fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        written.map(|()| WriteOutcome::Written)
    }

    /// Make `parts` (folders first, the link last) a symbolic link to the
    /// absolute path `target`, unless it already is one: how a file from
    /// outside the workspace (an operator's credentials) is offered to a
    /// harness without its bytes ever being copied. The link is made under
    /// a fresh name in its folder's handle and renamed over what is there
    /// (a file, another link; a folder is refused), so a reader sees the
    /// old entry or the new link, never neither. Folders on the way are
    /// created and never followed through a link.
    pub fn symlink(&self, parts: &[&str], target: &Path) -> Result<WriteOutcome, ProjectionError> {
        let (name, folders) = split_path(parts)?;
        if !target.is_absolute() {
            return Err(ProjectionError::UnsafePath {
                path: target.to_string_lossy().escape_debug().take(200).collect(),
                reason: "a link's target must be an absolute path",
            });
        }
        self.ensure_dir(folders)?.link_file(name, target)
    }

    fn link_file(&self, name: &str, target: &Path) -> Result<WriteOutcome, ProjectionError> {
        let path = self.path.join(name);
        // `readlinkat` reads the link itself: a link is never followed here.
        if readlinkat(&*self.fd, name).is_ok_and(|current| Path::new(&current) == target) {
            return Ok(WriteOutcome::Unchanged);
        }
        let temp = self.temp_link(target)?;
        let linked = renameat(&*self.fd, temp.as_str(), &*self.fd, name).map_err(|e| match e {
            Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => ProjectionError::InTheWay {
                path: path.clone(),
                expected: "link",
            },
            e => ProjectionError::io("replace", &path)(e.into()),
        });
        if linked.is_err() {
            let _ = unlinkat(&*self.fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        linked.map(|()| WriteOutcome::Written)
    }

    /// A new link to `target` with a random name in this folder
    /// (`symlinkat` never replaces an existing name).
    fn temp_link(&self, target: &Path) -> Result<String, ProjectionError> {
        let mut last = Errno::EEXIST;
        for _ in 0..8 {
            let name = Self::temp_name(&self.path)?;
            match symlinkat(target, &*self.fd, name.as_str()) {
                Ok(()) => {
                    if let Err(e) = self.give(OsStr::new(&name)) {
                        let _ = unlinkat(&*self.fd, name.as_str(), UnlinkatFlags::NoRemoveDir);
                        return Err(e);
                    }
                    return Ok(name);
                }
                Err(Errno::EEXIST) => last = Errno::EEXIST,
                Err(errno) => {
                    last = errno;
                    break;
                }
            }
        }
        Err(ProjectionError::io("create link in", &self.path)(
            last.into(),
        ))
    }

    /// Remove the entry at `parts` if it is a symbolic link (never what it
    /// points at, never a file or folder a harness made there): a link
    /// whose target went away is taken out. Whether one was removed.
    pub fn remove_link(&self, parts: &[&str]) -> Result<bool, ProjectionError> {
        let Some((name, folders)) = parts.split_last() else {
            return Ok(false);
        };
        check_parts(parts)?;
        let Some(dir) = self.open_dir(folders)? else {
            return Ok(false);
        };
        match fstatat(&*dir.fd, *name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if kind(&stat) == SFlag::S_IFLNK => {}
            Ok(_) | Err(Errno::ENOENT) => return Ok(false),
            Err(e) => {
                return Err(ProjectionError::io("inspect", dir.path.join(name))(
                    e.into(),
                ));
            }
        }
        match unlinkat(&*dir.fd, *name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(ProjectionError::io("remove", dir.path.join(name))(e.into())),
        }
    }

    /// A random name for a temp entry in the folder at `path`.
    fn temp_name(path: &Path) -> Result<String, ProjectionError> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| {
            ProjectionError::io("create temp file in", path)(std::io::Error::other(e.to_string()))
        })?;
        Ok(format!(".hb-tmp-{}", hex::encode(random)))
    }

    /// A new file with a random name in this folder, created exclusively
    /// (never an existing file or a link) and 0600.
    fn temp_file(&self) -> Result<(String, fs::File), ProjectionError> {
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut last = Errno::EEXIST;
        for _ in 0..8 {
            let name = Self::temp_name(&self.path)?;
            match openat(
                &*self.fd,
                name.as_str(),
                flags,
                Mode::from_bits_truncate(FILE_MODE),
            ) {
                Ok(fd) => {
                    if let Some(owner) = self.owner
                        && let Err(e) = owner.give(&fd)
                    {
                        let _ = unlinkat(&*self.fd, name.as_str(), UnlinkatFlags::NoRemoveDir);
                        return Err(ProjectionError::io(
                            "give to the harness's user",
                            &self.path,
                        )(e));
                    }
                    return Ok((name, fs::File::from(fd)));
                }
                Err(Errno::EEXIST) => last = Errno::EEXIST,
                Err(errno) => {
                    last = errno;
                    break;
                }
            }
        }
        Err(ProjectionError::io("create temp file in", &self.path)(
            last.into(),
        ))
    }

    /// Read a file at a relative path; `None` when it does not exist.
    /// Symlinks on the way are refused like on write.
    pub fn read(&self, parts: &[&str]) -> Result<Option<Vec<u8>>, ProjectionError> {
        let Some((name, folders)) = parts.split_last() else {
            return Ok(None);
        };
        check_parts(parts)?;
        let Some(dir) = self.open_dir(folders)? else {
            return Ok(None);
        };
        let path = dir.path.join(name);
        let (file, meta) = match open_file_at(&dir.fd, OsStr::new(name)) {
            Ok(found) => found,
            Err(Refused::Missing) => return Ok(None),
            Err(refused) => return Err(refused.error(path, "file")),
        };
        if meta.len() > MAX_READ {
            return Err(ProjectionError::io("read", path)(std::io::Error::other(
                format!(
                    "{} bytes, more than the bridge ever writes there",
                    meta.len()
                ),
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_READ)
            .read_to_end(&mut bytes)
            .map_err(ProjectionError::io("read", &path))?;
        Ok(Some(bytes))
    }

    /// Sizes of several files under one folder (`None` where a file is
    /// missing or not a regular file). Each folder on the way is opened
    /// once, not once per file: the fast path of an unchanged
    /// re-projection.
    pub fn file_lens(
        &self,
        dir: &[&str],
        files: &[&str],
    ) -> Result<Vec<Option<u64>>, ProjectionError> {
        let Some(base) = self.open_dir(dir)? else {
            return Ok(vec![None; files.len()]);
        };
        // Sub-folder (e.g. `docs` of `docs/a.md`) → its handle, `None`
        // when it is missing or not a folder.
        let mut folders: HashMap<&str, Option<ConfinedDir>> = HashMap::new();
        let mut sizes = Vec::with_capacity(files.len());
        for file in files {
            let parts: Vec<&str> = file.split('/').collect();
            check_parts(&parts)?;
            let (folder, name) = match file.rsplit_once('/') {
                Some((sub, name)) => (base.sub_folder(&mut folders, sub)?, name),
                None => (Some(base.clone()), *file),
            };
            let Some(folder) = folder else {
                sizes.push(None);
                continue;
            };
            let size = match fstatat(&*folder.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) if kind(&stat) == SFlag::S_IFLNK => {
                    return Err(ProjectionError::Symlink {
                        path: folder.path.join(name),
                    });
                }
                Ok(stat) if kind(&stat) == SFlag::S_IFREG => u64::try_from(stat.st_size).ok(),
                Ok(_) | Err(Errno::ENOENT | Errno::ENOTDIR) => None,
                Err(e) => {
                    return Err(ProjectionError::io("inspect", folder.path.join(name))(
                        e.into(),
                    ));
                }
            };
            sizes.push(size);
        }
        Ok(sizes)
    }

    /// The handle of `sub` (a `/`-separated path below this folder), from
    /// `cache` or opened from its parent's handle and cached.
    fn sub_folder<'a>(
        &self,
        cache: &mut HashMap<&'a str, Option<ConfinedDir>>,
        sub: &'a str,
    ) -> Result<Option<ConfinedDir>, ProjectionError> {
        if let Some(found) = cache.get(sub) {
            return Ok(found.clone());
        }
        let (parent, name) = match sub.rsplit_once('/') {
            Some((parent, name)) => (self.sub_folder(cache, parent)?, name),
            None => (Some(self.clone()), sub),
        };
        let folder = match parent {
            None => None,
            Some(parent) => match parent.child(OsStr::new(name)) {
                Ok(child) => Some(child),
                Err(Refused::Missing | Refused::InTheWay) => None,
                Err(refused) => return Err(refused.error(parent.path.join(name), "folder")),
            },
        };
        cache.insert(sub, folder.clone());
        Ok(folder)
    }

    /// Remove a file or folder tree at a relative path, if present. The
    /// folders on the way must be real; the target itself may be a link,
    /// which is then removed, not followed.
    pub fn remove(&self, parts: &[&str]) -> Result<(), ProjectionError> {
        let Some((name, folders)) = parts.split_last() else {
            return Ok(());
        };
        check_parts(parts)?;
        match self.open_dir(folders)? {
            Some(dir) => dir.remove_entry(OsStr::new(name), 0),
            None => Ok(()),
        }
    }

    /// Remove `name` in this folder: unlinked if it is not a folder, else
    /// emptied through its own handle first.
    fn remove_entry(&self, name: &OsStr, depth: usize) -> Result<(), ProjectionError> {
        let path = self.path.join(name);
        match unlinkat(&*self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => return Ok(()),
            Err(Errno::EISDIR) => {}
            Err(e) => return Err(ProjectionError::io("remove", path)(e.into())),
        }
        if depth >= MAX_DEPTH {
            return Err(ProjectionError::io("remove", path)(std::io::Error::other(
                "folders nested too deep",
            )));
        }
        let dir = match self.child(name) {
            Ok(dir) => dir,
            Err(Refused::Missing) => return Ok(()),
            Err(refused) => return Err(refused.error(path, "folder")),
        };
        for entry in dir.names()? {
            dir.remove_entry(&entry, depth + 1)?;
        }
        match unlinkat(&*self.fd, name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(ProjectionError::io("remove", path)(e.into())),
        }
    }

    /// Every name in this folder but `.` and `..`.
    fn names(&self) -> Result<Vec<OsString>, ProjectionError> {
        let list = |e: Errno| ProjectionError::io("list", &self.path)(e.into());
        // A handle of its own: reading a folder moves its position.
        let fd = openat(
            &*self.fd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(list)?;
        let mut dir = Dir::from_fd(fd).map_err(list)?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let name = entry.map_err(list)?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(&name).to_os_string());
            }
        }
        Ok(names)
    }

    /// What is in the folder at a relative path (nothing when it does not
    /// exist), links included as themselves. Names that are not UTF-8 are
    /// left out: the bridge never writes one.
    pub fn list(&self, parts: &[&str]) -> Result<Vec<Entry>, ProjectionError> {
        let Some(dir) = self.open_dir(parts)? else {
            return Ok(Vec::new());
        };
        let mut entries = Vec::new();
        for name in dir.names()? {
            let Some(text) = name.to_str() else { continue };
            match fstatat(&*dir.fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) => entries.push(Entry {
                    name: text.to_string(),
                    len: u64::try_from(stat.st_size).unwrap_or(0),
                    modified: modified(&stat),
                }),
                // Gone since it was listed.
                Err(Errno::ENOENT) => {}
                Err(e) => {
                    return Err(ProjectionError::io("inspect", dir.path.join(text))(
                        e.into(),
                    ));
                }
            }
        }
        Ok(entries)
    }

    /// Every regular file below this folder, by path, sorted, walking
    /// folder handles (links are not followed). What cannot be read, or
    /// lies deeper than 64 folders, is left out.
    pub fn files(&self) -> Vec<Entry> {
        let mut found = Vec::new();
        self.collect_files("", 0, &mut found);
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    fn collect_files(&self, prefix: &str, depth: usize, found: &mut Vec<Entry>) {
        let Ok(names) = self.names() else { return };
        for name in names {
            let Some(text) = name.to_str() else { continue };
            let Ok(stat) = fstatat(&*self.fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            let relative = format!("{prefix}{text}");
            match kind(&stat) {
                SFlag::S_IFREG => found.push(Entry {
                    name: relative,
                    len: u64::try_from(stat.st_size).unwrap_or(0),
                    modified: modified(&stat),
                }),
                SFlag::S_IFDIR if depth < MAX_DEPTH => {
                    if let Ok(child) = self.child(&name) {
                        child.collect_files(&format!("{relative}/"), depth + 1, found);
                    }
                }
                _ => {}
            }
        }
    }

    /// The regular file at `relative` (`/`-separated) below this folder,
    /// not through any link; `None` when there is none.
    pub fn file(&self, relative: &str) -> Option<Entry> {
        let parts: Vec<&str> = relative.split('/').collect();
        let (name, folders) = parts.split_last()?;
        check_parts(&parts).ok()?;
        let dir = self.open_dir(folders).ok()??;
        let stat = fstatat(&*dir.fd, *name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        (kind(&stat) == SFlag::S_IFREG).then(|| Entry {
            name: relative.to_string(),
            len: u64::try_from(stat.st_size).unwrap_or(0),
            modified: modified(&stat),
        })
    }

    /// Read at most `max` bytes of the regular file `relative` below this
    /// folder, following no link on the way. A file with more than one
    /// name is refused ([`HardLinked`]): its other name may be anywhere on
    /// the same file system, and what a harness links in is not the
    /// folder's own.
    pub fn read_head(&self, relative: &Path, max: u64) -> std::io::Result<HeadRead> {
        let mut dir = self.clone();
        let mut parts = relative.components().peekable();
        while let Some(part) = parts.next() {
            let Component::Normal(name) = part else {
                return Err(std::io::Error::other("not a plain path inside the folder"));
            };
            if parts.peek().is_some() {
                dir = dir
                    .child(name)
                    .map_err(|r| r.io_error(&dir.path.join(name), "folder"))?;
                continue;
            }
            let (file, meta) = open_file_at(&dir.fd, name)
                .map_err(|r| r.io_error(&dir.path.join(name), "regular file"))?;
            if meta.nlink() > 1 {
                return Err(std::io::Error::other(HardLinked {
                    path: dir.path.join(name),
                    links: meta.nlink(),
                    size: meta.len(),
                }));
            }
            let mut bytes = Vec::with_capacity(meta.len().min(max).min(1 << 20) as usize);
            file.take(max).read_to_end(&mut bytes)?;
            return Ok(HeadRead {
                bytes,
                size: meta.len(),
            });
        }
        Err(std::io::Error::other("empty path"))
    }
}

/// Why [`ConfinedDir::read_head`] (and [`read_beneath`]) refused a file:
/// it has other names (a hard link). Unlike a symlink, a hard link is a
/// regular file that no `O_NOFOLLOW` refuses, and it may be a file from
/// outside the folder (another workspace's, a key) that its maker could
/// link but the person it would be sent to should never see. Carried
/// inside the `std::io::Error`, so a caller can tell this refusal from a
/// failure and say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardLinked {
    /// The name it was asked for.
    pub path: PathBuf,
    /// How many names the file has.
    pub links: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl std::fmt::Display for HardLinked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is a hard link (one of {} names of the same file, the others possibly \
             outside the workspace), so it is not read",
            self.path.display(),
            self.links
        )
    }
}

impl std::error::Error for HardLinked {}

impl HardLinked {
    /// The refusal inside `error`, when that is what it is.
    pub fn of(error: &std::io::Error) -> Option<&HardLinked> {
        error.get_ref().and_then(|e| e.downcast_ref::<HardLinked>())
    }
}

/// The first bytes of a file read by [`read_beneath`], and its whole size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadRead {
    /// At most the requested number of bytes, from the start.
    pub bytes: Vec<u8>,
    /// The file's size when it was opened.
    pub size: u64,
}

/// Read at most `max` bytes of the regular file `relative` under `root`,
/// following no symlink on the way and never leaving `root`.
///
/// For files the harness can reach: it may have replaced a projected copy
/// with a link to a secret, a FIFO that never ends, or `/dev/zero`. `root`
/// is trusted; below it, each folder is opened from its parent's handle
/// without following links, and the file without following one and
/// without blocking (a FIFO is refused as not a regular file).
pub fn read_beneath(root: &Path, relative: &Path, max: u64) -> std::io::Result<HeadRead> {
    let fd = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let dir = ConfinedDir {
        fd: Arc::new(fd),
        path: root.to_path_buf(),
        owner: None,
    };
    dir.read_head(relative, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_beneath_reads_a_plain_file_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("in")).unwrap();
        fs::write(dir.path().join("in/a.txt"), b"hello world").unwrap();
        let read = read_beneath(dir.path(), Path::new("in/a.txt"), 5).unwrap();
        assert_eq!(read.bytes, b"hello");
        assert_eq!(read.size, 11);
        let whole = read_beneath(dir.path(), Path::new("in/a.txt"), 100).unwrap();
        assert_eq!(whole.bytes, b"hello world");
    }

    #[test]
    fn read_beneath_refuses_links_fifos_devices_and_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), b"key").unwrap();
        let root = dir.path();
        fs::create_dir(root.join("in")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("in/link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("dirlink")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("in/zero")).unwrap();
        nix::unistd::mkfifo(&root.join("in/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        fs::hard_link(outside.path().join("secret"), root.join("in/hard")).unwrap();
        let hard = read_beneath(root, Path::new("in/hard"), 10).unwrap_err();
        assert_eq!(HardLinked::of(&hard).map(|h| h.links), Some(2), "{hard}");
        for relative in [
            "in/link",
            "dirlink/secret",
            "in/zero",
            "in/fifo",
            "../secret",
            "in",
        ] {
            let read = read_beneath(root, Path::new(relative), 10);
            assert!(read.is_err(), "{relative} was read: {read:?}");
        }
    }

    #[test]
    fn rewrite_keeps_a_plain_files_inode_and_never_writes_through_a_link() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = ConfinedDir::create(dir.path(), &["ws"], None).unwrap();
        let path = dir.path().join("ws/.langbot/turn.md");
        let inode = |p: &Path| fs::symlink_metadata(p).unwrap().ino();

        assert_eq!(
            ws.rewrite(&[".langbot", "turn.md"], b"first, long")
                .unwrap(),
            WriteOutcome::Written
        );
        let first = inode(&path);
        // Changed and shorter: the same file, cut to its new length.
        assert_eq!(
            ws.rewrite(&[".langbot", "turn.md"], b"second").unwrap(),
            WriteOutcome::Written
        );
        assert_eq!(
            (inode(&path), fs::read(&path).unwrap()),
            (first, b"second".to_vec())
        );
        assert_eq!(
            ws.rewrite(&[".langbot", "turn.md"], b"second").unwrap(),
            WriteOutcome::Unchanged
        );

        // What a harness might leave in its place is replaced, and what it
        // points at is never written: a hard link, a symlink, a FIFO.
        let secret = outside.path().join("secret");
        fs::write(&secret, b"key").unwrap();
        fs::set_permissions(
            &secret,
            <fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
        )
        .unwrap();
        for plant in ["hard", "symlink", "fifo"] {
            fs::remove_file(&path).unwrap();
            match plant {
                "hard" => fs::hard_link(&secret, &path).unwrap(),
                "symlink" => std::os::unix::fs::symlink(&secret, &path).unwrap(),
                _ => nix::unistd::mkfifo(&path, Mode::S_IRUSR | Mode::S_IWUSR).unwrap(),
            }
            assert_eq!(
                ws.rewrite(&[".langbot", "turn.md"], b"third").unwrap(),
                WriteOutcome::Written,
                "{plant}"
            );
            let meta = fs::symlink_metadata(&path).unwrap();
            assert!(meta.is_file() && meta.nlink() == 1, "{plant} left in place");
            assert_eq!(fs::read(&path).unwrap(), b"third", "{plant}");
            assert_eq!(
                fs::read(&secret).unwrap(),
                b"key",
                "written through the {plant}"
            );
        }
    }

    fn link_of(path: &Path) -> PathBuf {
        fs::read_link(path).unwrap()
    }

    #[test]
    fn symlink_creates_a_link_and_keeps_it_when_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("auth.json");
        fs::write(&secret, b"key").unwrap();
        let ws = ConfinedDir::create(dir.path(), &["ws"], None).unwrap();
        let parts = ["home", ".codex", "auth.json"];
        assert_eq!(ws.symlink(&parts, &secret).unwrap(), WriteOutcome::Written);
        let link = dir.path().join("ws/home/.codex/auth.json");
        assert_eq!(link_of(&link), secret);
        assert_eq!(fs::read(&link).unwrap(), b"key");
        assert_eq!(
            ws.symlink(&parts, &secret).unwrap(),
            WriteOutcome::Unchanged
        );
        // Nothing left behind under a temp name.
        let names: Vec<String> = ws
            .list(&parts[..2])
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["auth.json"]);
        // A relative target is refused: a link must not depend on where it is.
        assert!(ws.symlink(&parts, Path::new("auth.json")).is_err());
    }

    #[test]
    fn symlink_replaces_a_file_or_another_link_but_not_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let (a, b) = (outside.path().join("a"), outside.path().join("b"));
        fs::write(&a, b"a").unwrap();
        fs::write(&b, b"b").unwrap();
        let ws = ConfinedDir::create(dir.path(), &["ws"], None).unwrap();
        ws.write(&["home", "config.toml"], b"made by the harness")
            .unwrap();
        assert_eq!(
            ws.symlink(&["home", "config.toml"], &a).unwrap(),
            WriteOutcome::Written
        );
        let link = dir.path().join("ws/home/config.toml");
        assert_eq!(link_of(&link), a);
        assert_eq!(
            ws.symlink(&["home", "config.toml"], &b).unwrap(),
            WriteOutcome::Written
        );
        assert_eq!(link_of(&link), b);
        // The replaced link's target is untouched.
        assert_eq!(fs::read(&a).unwrap(), b"a");
        ws.ensure_dir(&["home", "folder"]).unwrap();
        let err = ws.symlink(&["home", "folder"], &a).unwrap_err();
        assert!(matches!(err, ProjectionError::InTheWay { .. }), "{err}");
        assert!(dir.path().join("ws/home/folder").is_dir());
    }

    #[test]
    fn symlink_never_follows_a_link_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("auth.json");
        fs::write(&secret, b"key").unwrap();
        let ws = ConfinedDir::create(dir.path(), &["ws"], None).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("ws/home")).unwrap();
        let err = ws.symlink(&["home", "auth.json"], &secret).unwrap_err();
        assert!(matches!(err, ProjectionError::Symlink { .. }), "{err}");
        let err = ws.remove_link(&["home", "auth.json"]).unwrap_err();
        assert!(matches!(err, ProjectionError::Symlink { .. }), "{err}");
        // Nothing was made or removed in the folder the link points at.
        let names: Vec<_> = fs::read_dir(outside.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        assert!(secret.exists());
        assert!(ws.symlink(&["..", "x"], &secret).is_err());
    }

    #[test]
    fn remove_link_removes_links_only() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let gone = outside.path().join("gone.json");
        let ws = ConfinedDir::create(dir.path(), &["ws"], None).unwrap();
        // A stale link (its target missing) is removed, not followed.
        ws.symlink(&["home", "stale.json"], &gone).unwrap();
        assert!(ws.remove_link(&["home", "stale.json"]).unwrap());
        assert!(fs::symlink_metadata(dir.path().join("ws/home/stale.json")).is_err());
        // A live link's target stays.
        let kept = outside.path().join("kept.json");
        fs::write(&kept, b"k").unwrap();
        ws.symlink(&["home", "kept.json"], &kept).unwrap();
        assert!(ws.remove_link(&["home", "kept.json"]).unwrap());
        assert_eq!(fs::read(&kept).unwrap(), b"k");
        // A file the harness made there, and what is missing, stay as they are.
        ws.write(&["home", "own.json"], b"mine").unwrap();
        assert!(!ws.remove_link(&["home", "own.json"]).unwrap());
        assert_eq!(ws.read(&["home", "own.json"]).unwrap().unwrap(), b"mine");
        assert!(!ws.remove_link(&["home", "missing"]).unwrap());
        assert!(!ws.remove_link(&["nowhere", "missing"]).unwrap());
    }
}
