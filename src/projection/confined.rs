//! A folder nothing written through it can leave.
//!
//! Every write names a path *relative* to the folder, checked component by
//! component; each folder on the way is created one level at a time and
//! must not be a symlink, and the target must not be one either, so a
//! pre-planted link (`.langbot -> /etc`) is refused rather than followed.
//! Writes are atomic (temp file + rename in the same folder) and skipped
//! when the bytes on disk are already right, so an unchanged file keeps
//! its mtime.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use super::ProjectionError;

/// Who may read a written file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// 0644: ordinary projected files.
    Shared,
    /// 0600: files that may carry secrets (MCP config).
    Private,
}

impl Access {
    fn mode(self) -> u32 {
        match self {
            Access::Shared => 0o644,
            Access::Private => 0o600,
        }
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file was created or replaced.
    Written,
    /// The file already had these bytes; it was not touched.
    Unchanged,
}

/// A folder that confines every write to itself.
#[derive(Debug, Clone)]
pub struct ConfinedDir {
    root: PathBuf,
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

fn refuse_link(path: &Path, meta: &fs::Metadata) -> Result<(), ProjectionError> {
    if meta.file_type().is_symlink() {
        Err(ProjectionError::Symlink {
            path: path.to_path_buf(),
        })
    } else {
        Ok(())
    }
}

impl ConfinedDir {
    /// Create (if needed) `base/parts...` and confine to it. `base` is the
    /// operator's root and is trusted as is; every part below it is created
    /// here and must not be a symlink.
    pub fn create(base: &Path, parts: &[&str]) -> Result<Self, ProjectionError> {
        fs::create_dir_all(base).map_err(ProjectionError::io("create folder", base))?;
        let root = ConfinedDir {
            root: base.to_path_buf(),
        };
        let dir = root.ensure_dir(parts)?;
        Ok(ConfinedDir { root: dir })
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Create the folders `parts` below the root, one level at a time,
    /// refusing symlinks and files in the way. Returns the last folder.
    pub fn ensure_dir(&self, parts: &[&str]) -> Result<PathBuf, ProjectionError> {
        check_parts(parts)?;
        let mut dir = self.root.clone();
        for part in parts {
            dir.push(part);
            match fs::symlink_metadata(&dir) {
                Ok(meta) => {
                    refuse_link(&dir, &meta)?;
                    if !meta.is_dir() {
                        return Err(ProjectionError::InTheWay {
                            path: dir,
                            expected: "folder",
                        });
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    match fs::create_dir(&dir) {
                        Ok(()) => {}
                        // Created meanwhile by someone else: check it again.
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                            let meta = fs::symlink_metadata(&dir)
                                .map_err(ProjectionError::io("inspect", &dir))?;
                            refuse_link(&dir, &meta)?;
                        }
                        Err(e) => return Err(ProjectionError::io("create folder", &dir)(e)),
                    }
                }
                Err(e) => return Err(ProjectionError::io("inspect", &dir)(e)),
            }
        }
        Ok(dir)
    }

    /// Write `bytes` at the relative path `parts` (folders first, file
    /// last), atomically, unless the file already holds exactly these bytes.
    pub fn write(
        &self,
        parts: &[&str],
        bytes: &[u8],
        access: Access,
    ) -> Result<WriteOutcome, ProjectionError> {
        let Some((file, folders)) = parts.split_last() else {
            return Err(ProjectionError::UnsafePath {
                path: String::new(),
                reason: "empty path",
            });
        };
        check_parts(parts)?;
        let dir = self.ensure_dir(folders)?;
        let path = dir.join(file);
        match fs::symlink_metadata(&path) {
            Ok(meta) => {
                refuse_link(&path, &meta)?;
                if !meta.is_file() {
                    return Err(ProjectionError::InTheWay {
                        path,
                        expected: "file",
                    });
                }
                if meta.len() == bytes.len() as u64 {
                    let current = fs::read(&path).map_err(ProjectionError::io("read", &path))?;
                    if current == bytes {
                        if meta.permissions().mode() & 0o777 != access.mode() {
                            fs::set_permissions(&path, fs::Permissions::from_mode(access.mode()))
                                .map_err(ProjectionError::io("set permissions of", &path))?;
                        }
                        return Ok(WriteOutcome::Unchanged);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ProjectionError::io("inspect", &path)(e)),
        }
        let mut tmp = tempfile::Builder::new()
            .prefix(".hb-tmp-")
            .permissions(fs::Permissions::from_mode(access.mode()))
            .tempfile_in(&dir)
            .map_err(ProjectionError::io("create temp file in", &dir))?;
        tmp.write_all(bytes)
            .map_err(ProjectionError::io("write", &path))?;
        tmp.persist(&path)
            .map_err(|e| ProjectionError::io("replace", &path)(e.error))?;
        Ok(WriteOutcome::Written)
    }

    /// The path of `parts`, checking that no existing component is a
    /// symlink; `None` when some component does not exist.
    fn existing(&self, parts: &[&str]) -> Result<Option<(PathBuf, fs::Metadata)>, ProjectionError> {
        check_parts(parts)?;
        let mut path = self.root.clone();
        let mut last = None;
        for part in parts {
            path.push(part);
            match fs::symlink_metadata(&path) {
                Ok(meta) => {
                    refuse_link(&path, &meta)?;
                    last = Some(meta);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(ProjectionError::io("inspect", &path)(e)),
            }
        }
        Ok(last.map(|meta| (path, meta)))
    }

    /// Read a file at a relative path; `None` when it does not exist.
    /// Symlinks on the way are refused like on write.
    pub fn read(&self, parts: &[&str]) -> Result<Option<Vec<u8>>, ProjectionError> {
        match self.existing(parts)? {
            Some((path, meta)) if meta.is_file() => fs::read(&path)
                .map(Some)
                .map_err(ProjectionError::io("read", &path)),
            Some((path, _)) => Err(ProjectionError::InTheWay {
                path,
                expected: "file",
            }),
            None => Ok(None),
        }
    }

    /// Sizes of several files under one folder (`None` where a file is
    /// missing). Each folder on the way is checked for symlinks once, not
    /// once per file: the fast path of an unchanged re-projection.
    pub fn file_lens(
        &self,
        dir: &[&str],
        files: &[&str],
    ) -> Result<Vec<Option<u64>>, ProjectionError> {
        let Some((base, meta)) = self.existing(dir)? else {
            return Ok(vec![None; files.len()]);
        };
        if !meta.is_dir() {
            return Err(ProjectionError::InTheWay {
                path: base,
                expected: "folder",
            });
        }
        let mut checked: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut sizes = Vec::with_capacity(files.len());
        'files: for file in files {
            let parts: Vec<&str> = file.split('/').collect();
            check_parts(&parts)?;
            // Sub-folders of this file (e.g. `docs` of `docs/a.md`), once each.
            let mut end = 0;
            for part in &parts[..parts.len() - 1] {
                end += part.len();
                let sub = &file[..end];
                end += 1;
                if checked.insert(sub) {
                    let path = base.join(sub);
                    match fs::symlink_metadata(&path) {
                        Ok(meta) => refuse_link(&path, &meta)?,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            sizes.push(None);
                            continue 'files;
                        }
                        Err(e) => return Err(ProjectionError::io("inspect", &path)(e)),
                    }
                }
            }
            let path = base.join(file);
            match fs::symlink_metadata(&path) {
                Ok(meta) => {
                    refuse_link(&path, &meta)?;
                    sizes.push(meta.is_file().then_some(meta.len()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => sizes.push(None),
                Err(e) => return Err(ProjectionError::io("inspect", &path)(e)),
            }
        }
        Ok(sizes)
    }

    /// Remove a file or folder tree at a relative path, if present. A
    /// symlink is removed itself, never followed.
    pub fn remove(&self, parts: &[&str]) -> Result<(), ProjectionError> {
        let Some((_, folders)) = parts.split_last() else {
            return Ok(());
        };
        // The folders on the way must be real; the target itself may be a
        // link, which is then removed, not followed.
        if !folders.is_empty() && self.existing(folders)?.is_none() {
            return Ok(());
        }
        check_parts(parts)?;
        let path = parts.iter().fold(self.root.clone(), |p, c| p.join(c));
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                fs::remove_dir_all(&path).map_err(ProjectionError::io("remove", &path))
            }
            Ok(_) => fs::remove_file(&path).map_err(ProjectionError::io("remove", &path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ProjectionError::io("inspect", &path)(e)),
        }
    }

    /// Names in a folder at a relative path (empty when it does not exist).
    pub fn list(&self, parts: &[&str]) -> Result<Vec<String>, ProjectionError> {
        let Some((path, meta)) = self.existing(parts)? else {
            return Ok(Vec::new());
        };
        if !meta.is_dir() {
            return Err(ProjectionError::InTheWay {
                path,
                expected: "folder",
            });
        }
        let entries = fs::read_dir(&path).map_err(ProjectionError::io("list", &path))?;
        Ok(entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
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
/// with a link to a secret, a FIFO that never ends, or `/dev/zero`. The
/// kernel resolves the path beneath `root` without links (`openat2`); on
/// kernels without it, each component is checked first and the last one
/// opened with `O_NOFOLLOW`. A FIFO opens without blocking and is refused
/// as not a regular file.
pub fn read_beneath(root: &Path, relative: &Path, max: u64) -> std::io::Result<HeadRead> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat2};
    use nix::sys::stat::Mode;
    use std::io::Read as _;

    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let dir = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let fd = match openat2(&dir, relative, how) {
        Err(nix::errno::Errno::ENOSYS) => {
            let mut path = root.to_path_buf();
            let mut walked = PathBuf::new();
            for part in relative.components() {
                let std::path::Component::Normal(part) = part else {
                    return Err(std::io::Error::other("not a plain path inside the folder"));
                };
                path.push(part);
                walked.push(part);
                if fs::symlink_metadata(&path)?.file_type().is_symlink() {
                    // Relative: the message may reach the harness.
                    return Err(std::io::Error::other(format!(
                        "{} is a symlink",
                        walked.display()
                    )));
                }
            }
            open(&path, flags, Mode::empty())?
        }
        other => other?,
    };
    let file = fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(max) as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(HeadRead {
        bytes,
        size: meta.len(),
    })
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
}
