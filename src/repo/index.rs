//! The bridge's own index of a worktree, read for one thing: the
//! repositories nested in the worktree (gitlinks).
//!
//! An `add` that finds a gitlink in its index asks the nested
//! repository's own git whether it changed, which reads that repository's
//! configuration (the harness's to write) and runs the programs it names,
//! outside the cage. So the bridge takes every gitlink out of its index
//! before git looks at the files (`add` then records a nested repository
//! as its commit id alone, no other git asked). Finding them costs a read
//! of the index here, not a git process on every turn: the index is the
//! bridge's own (versions 2 and 3, which is what git writes unless told
//! otherwise); any other is left to git to list.

/// What a gitlink's mode is (`160000`).
const GITLINK: u32 = 0o160000;
/// An entry's fixed part before its object id: times, device, inode,
/// mode, owner, group, size.
const STAT_BYTES: usize = 40;
/// Where the mode is in an entry.
const MODE_AT: usize = 24;
/// The flag that says an entry has a second flags word (version 3).
const EXTENDED: u16 = 0x4000;
/// The name length's bits in the flags; all set: look for the NUL.
const NAME_LENGTH: u16 = 0x0fff;

/// The paths of the gitlinks in `index` (an index file's bytes) whose
/// object ids are `hash_len` bytes (20: SHA-1, 32: SHA-256); `None` when
/// it is not an index this reads (another version, or cut short).
pub(super) fn gitlinks(index: &[u8], hash_len: usize) -> Option<Vec<Vec<u8>>> {
    let header = index.get(..12)?;
    if &header[..4] != b"DIRC" {
        return None;
    }
    let version = u32::from_be_bytes(header[4..8].try_into().ok()?);
    if version != 2 && version != 3 {
        return None;
    }
    let count = u32::from_be_bytes(header[8..12].try_into().ok()?);
    let mut at = 12usize;
    let mut found = Vec::new();
    for _ in 0..count {
        let entry = index.get(at..)?;
        let mode = u32::from_be_bytes(entry.get(MODE_AT..MODE_AT + 4)?.try_into().ok()?);
        let flags_at = STAT_BYTES + hash_len;
        let flags = u16::from_be_bytes(entry.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let extended = version == 3 && flags & EXTENDED != 0;
        let name_at = flags_at + 2 + if extended { 2 } else { 0 };
        let name_len = match flags & NAME_LENGTH {
            NAME_LENGTH => entry.get(name_at..)?.iter().position(|b| *b == 0)?,
            len => usize::from(len),
        };
        let name = entry.get(name_at..name_at + name_len)?;
        if mode & 0o170000 == GITLINK {
            found.push(name.to_vec());
        }
        // The name, then 1 to 8 NULs to a multiple of 8 bytes.
        at += (name_at + name_len + 8) & !7;
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-2 index of `entries` (mode, name), SHA-1 ids.
    fn index_of(entries: &[(u32, &str)]) -> Vec<u8> {
        let mut bytes = b"DIRC".to_vec();
        bytes.extend(2u32.to_be_bytes());
        bytes.extend((entries.len() as u32).to_be_bytes());
        for (mode, name) in entries {
            let mut entry = vec![0u8; STAT_BYTES + 20];
            entry[MODE_AT..MODE_AT + 4].copy_from_slice(&mode.to_be_bytes());
            let len = name.len().min(usize::from(NAME_LENGTH)) as u16;
            entry.extend(len.to_be_bytes());
            entry.extend(name.as_bytes());
            let padded = (entry.len() + 8) & !7;
            entry.resize(padded, 0);
            bytes.extend(entry);
        }
        bytes
    }

    #[test]
    fn the_gitlinks_of_an_index_are_found_and_nothing_else() {
        let long = "d/".repeat(2100) + "file";
        let index = index_of(&[
            (0o100644, "a.txt"),
            (GITLINK, "nested"),
            (0o120000, "link"),
            (0o100644, &long),
            (GITLINK, "more/nested"),
        ]);
        assert_eq!(
            gitlinks(&index, 20),
            Some(vec![b"nested".to_vec(), b"more/nested".to_vec()])
        );
        assert_eq!(gitlinks(&index[..index.len() - 12], 20), None, "cut short");
        assert_eq!(gitlinks(b"DIRC\0\0\0\x04\0\0\0\0", 20), None, "version 4");
        assert_eq!(gitlinks(b"not an index", 20), None);
    }

    #[test]
    fn the_index_git_writes_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        run(&["init", "-q"]);
        std::fs::write(dir.path().join("file"), "x").unwrap();
        run(&["init", "-q", "nested"]);
        std::fs::write(dir.path().join("nested/inside"), "y").unwrap();
        run(&["-C", "nested", "add", "inside"]);
        let commit = [
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-qm",
            "x",
        ];
        run(&[&["-C", "nested"], &commit[..]].concat());
        run(&["add", "--all"]);
        // A path added with intent only: git writes a version-3 index.
        std::fs::write(dir.path().join("later"), "z").unwrap();
        run(&["add", "--intent-to-add", "later"]);
        let bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
        assert_eq!(gitlinks(&bytes, 20), Some(vec![b"nested".to_vec()]));
    }
}
