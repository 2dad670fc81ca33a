//! A copy of an operator's file that a root bridge's harness may read.
//!
//! The operator's files a harness's home carries in (its login, its
//! provider's settings) are linked, never copied, when the harness can
//! read them. A root bridge's harness is another user outside its
//! namespace ([`crate::owner`]), and cannot read a file only root may (a
//! login kept in `/root`, 0600): the harness is given a copy made for its
//! user instead, kept beside the workspaces (never in one), refreshed
//! whenever the operator's file changes, and read-only to it. A file the
//! operator lets every user read is still linked.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use super::ProjectionError;
use crate::owner::Owner;

/// The folder, below the workspaces' root, that holds the copies.
pub const COPIES: &str = ".carried";

/// Where the harness finds the operator's file `target`: `target`
/// itself, or a copy in `dir` that `owner` alone may read when it could
/// not read `target`.
pub(super) fn readable(
    target: &Path,
    dir: &Path,
    owner: &Owner,
) -> Result<PathBuf, ProjectionError> {
    let meta = std::fs::metadata(target).map_err(ProjectionError::io("inspect", target))?;
    if !meta.is_file()
        || owner
            .cannot_reach(target, crate::owner::Want::Read)
            .is_none()
    {
        return Ok(target.to_path_buf());
    }
    let digest = sha2::Sha256::digest(target.as_os_str().as_encoded_bytes());
    let folder = dir.join(hex::encode(&digest[..12]));
    let name = target.file_name().unwrap_or_default();
    let copy = folder.join(name);
    let same = std::fs::symlink_metadata(&copy).is_ok_and(|kept| {
        kept.is_file()
            && kept.len() == meta.len()
            && kept.mtime() == meta.mtime()
            && kept.mtime_nsec() == meta.mtime_nsec()
            && kept.uid() == owner.uid
    });
    if !same {
        make_copy(target, &folder, &copy, &meta, owner)
            .map_err(ProjectionError::io("copy for the harness", target))?;
    }
    Ok(copy)
}

/// Copy `target` to `copy` in `folder` (made 0700, the owner's, in a
/// folder others may pass through), 0400, the owner's, with `target`'s
/// time of change.
fn make_copy(
    target: &Path,
    folder: &Path,
    copy: &Path,
    meta: &std::fs::Metadata,
    owner: &Owner,
) -> std::io::Result<()> {
    if let Some(dir) = folder.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    }
    if !std::fs::symlink_metadata(folder).is_ok_and(|m| m.is_dir()) {
        std::fs::create_dir(folder)?;
    }
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))?;
    owner.give(&std::fs::File::open(folder)?)?;
    let mut file = tempfile::NamedTempFile::new_in(folder)?;
    std::io::copy(&mut std::fs::File::open(target)?, &mut file)?;
    let handle = file.as_file();
    handle.set_permissions(std::fs::Permissions::from_mode(0o400))?;
    handle.set_modified(meta.modified()?)?;
    owner.give(handle)?;
    file.persist(copy).map_err(|e| e.error)?;
    Ok(())
}
