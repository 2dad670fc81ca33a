//! What folders hold on disk, measured by a walk: a conversation's use
//! after each of its turns (its workspace and what the bridge keeps for
//! its worktree), held to the operator's bound (`cage.limits.disk_mb`; a
//! turn past it fails `resource_limit`, and the conversation goes on so
//! its next turn can remove files), and the bridge's own repository for a
//! worktree, pruned once it grows. A bound by measure, not a quota: a turn
//! may write past it before it ends, never for long.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// Bytes the folders `paths` hold on disk (blocks, not sizes: a sparse
/// file costs what it holds), every file once however many names it has,
/// links not followed. The walk stops once past `stop`: the answer is
/// then more than `stop`, not all of it.
pub fn used(paths: &[PathBuf], stop: u64) -> u64 {
    let mut seen = HashSet::new();
    let mut total: u64 = 0;
    for path in paths {
        for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if total > stop {
                return total;
            }
        }
    }
    total
}

/// `12.3 GiB`, `420 MiB`: an amount of disk a person reads.
pub fn amount(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    match mib >= 1024.0 {
        true => format!("{:.1} GiB", mib / 1024.0),
        false => format!("{mib:.0} MiB"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_folder_holds_is_counted_once_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("big"), vec![1u8; 4 << 20]).unwrap();
        std::fs::write(dir.path().join("file"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(dir.path().join("file"), dir.path().join("again")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).unwrap();
        std::fs::File::create(dir.path().join("sparse"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let held = used(&[dir.path().to_path_buf()], u64::MAX);
        assert!(
            (1 << 20..2 << 20).contains(&held),
            "{held} bytes: the file once, the link and the sparse file's holes not at all"
        );
        assert!(
            used(&[dir.path().to_path_buf()], 1024) > 1024,
            "stopped past the bound"
        );
        assert_eq!(amount(420 << 20), "420 MiB");
        assert_eq!(amount(12 << 30), "12.0 GiB");
    }
}
