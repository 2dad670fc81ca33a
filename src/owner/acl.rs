//! A folder's POSIX access list, as the kernel keeps it in the
//! `system.posix_acl_access` attribute: read, judged for one user, and
//! given one entry more.
//!
//! The bridge uses it for one thing: to let the cage's own user pass
//! through a folder that leads to what its harnesses must reach (a home
//! folder shut to others, a host's plugin folder) without opening it to
//! every other user of the machine, as `chmod o+x` would.

#![allow(
    unsafe_code,
    reason = "an access-list entry is set with the *xattr system calls on an open descriptor"
)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// The attribute that holds a file's access list.
const NAME: &[u8] = b"system.posix_acl_access\0";
/// The format's version, first in the attribute.
const VERSION: u32 = 2;
/// Most entries read (a list is a few entries; the kernel caps it far
/// above this).
const MAX_ENTRIES: usize = 1024;

/// An entry's tag, as the kernel numbers them (their sort order too).
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// The id of entries that name no one (the owner's, the mask, other).
const NO_ID: u32 = u32::MAX;

/// One entry: whose (`tag`, `id`), and what (`perm`: 4 read, 2 write,
/// 1 pass or run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// The entries of an attribute's bytes; `None` when they are not a list
/// of this format.
pub fn parse(bytes: &[u8]) -> Option<Vec<Entry>> {
    let (head, rest) = bytes.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != VERSION || rest.len() % 8 != 0 || rest.len() / 8 > MAX_ENTRIES {
        return None;
    }
    Some(
        rest.chunks_exact(8)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect(),
    )
}

/// The attribute's bytes for `entries`, sorted as the kernel wants them.
fn encode(entries: &mut [Entry]) -> Vec<u8> {
    entries.sort_by_key(|e| (e.tag, e.id));
    let mut bytes = VERSION.to_le_bytes().to_vec();
    for e in entries.iter() {
        bytes.extend(e.tag.to_le_bytes());
        bytes.extend(e.perm.to_le_bytes());
        bytes.extend(e.id.to_le_bytes());
    }
    bytes
}

/// The list a file with permission bits `mode` and no list of its own
/// has.
fn of_mode(mode: u32) -> Vec<Entry> {
    let perm = |shift: u32| ((mode >> shift) & 7) as u16;
    vec![
        Entry {
            tag: USER_OBJ,
            perm: perm(6),
            id: NO_ID,
        },
        Entry {
            tag: GROUP_OBJ,
            perm: perm(3),
            id: NO_ID,
        },
        Entry {
            tag: OTHER,
            perm: perm(0),
            id: NO_ID,
        },
    ]
}

/// What `uid`, of group `gid` and none other, may do by `entries`, for a
/// file owned by `owner` and `group`: the kernel's order (owner, a named
/// user, the groups, other), the mask over all but owner and other.
pub fn permits(entries: &[Entry], (owner, group): (u32, u32), (uid, gid): (u32, u32)) -> u16 {
    let find = |tag: u16, id: u32| entries.iter().find(|e| e.tag == tag && e.id == id);
    let mask = find(MASK, NO_ID).map_or(7, |e| e.perm);
    if uid == owner {
        return find(USER_OBJ, NO_ID).map_or(0, |e| e.perm);
    }
    if let Some(named) = find(USER, uid) {
        return named.perm & mask;
    }
    let groups: Vec<u16> = entries
        .iter()
        .filter(|e| (e.tag == GROUP_OBJ && gid == group) || (e.tag == GROUP && e.id == gid))
        .map(|e| e.perm & mask)
        .collect();
    if !groups.is_empty() {
        return groups.into_iter().fold(0, |all, p| all | p);
    }
    find(OTHER, NO_ID).map_or(0, |e| e.perm)
}

/// `path`'s access list: its own, or the one its permission bits make.
pub fn read(path: &Path, mode: u32) -> std::io::Result<Vec<Entry>> {
    let name = c_path(path)?;
    let mut buf = vec![0u8; 8 * MAX_ENTRIES + 4];
    // SAFETY: two NUL-terminated strings and a buffer of the length given.
    let got = unsafe {
        libc::getxattr(
            name.as_ptr(),
            NAME.as_ptr().cast(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if got < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) => Ok(of_mode(mode)),
            _ => Err(e),
        };
    }
    buf.truncate(got.unsigned_abs());
    parse(&buf).ok_or_else(|| std::io::Error::other("an access list of another format"))
}

/// Give user `uid` the permissions `perm` on `path` too (an entry of its
/// own, or more on the one it has), the mask widened to let them through.
pub fn grant(path: &Path, mode: u32, uid: u32, perm: u16) -> std::io::Result<()> {
    let mut entries = read(path, mode)?;
    match entries.iter_mut().find(|e| e.tag == USER && e.id == uid) {
        Some(entry) => entry.perm |= perm,
        None => entries.push(Entry {
            tag: USER,
            perm,
            id: uid,
        }),
    }
    let named = entries
        .iter()
        .filter(|e| matches!(e.tag, USER | GROUP_OBJ | GROUP))
        .fold(0, |all, e| all | e.perm);
    match entries.iter_mut().find(|e| e.tag == MASK) {
        Some(mask) => mask.perm |= perm,
        None => entries.push(Entry {
            tag: MASK,
            perm: named,
            id: NO_ID,
        }),
    }
    let bytes = encode(&mut entries);
    let name = c_path(path)?;
    // SAFETY: two NUL-terminated strings and a buffer of the length given.
    let set = unsafe {
        libc::setxattr(
            name.as_ptr(),
            NAME.as_ptr().cast(),
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
        )
    };
    match set {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_reads_back_as_written_and_judges_as_the_kernel() {
        let mut entries = of_mode(0o750);
        entries.push(Entry {
            tag: USER,
            perm: 1,
            id: 4242,
        });
        entries.push(Entry {
            tag: MASK,
            perm: 5,
            id: NO_ID,
        });
        let bytes = encode(&mut entries);
        assert_eq!(parse(&bytes), Some(entries.clone()));
        let file = (0, 100);
        assert_eq!(permits(&entries, file, (0, 0)), 7, "the owner");
        assert_eq!(
            permits(&entries, file, (4242, 9)),
            1,
            "named, within the mask"
        );
        assert_eq!(permits(&entries, file, (77, 100)), 5, "the group");
        assert_eq!(permits(&entries, file, (77, 9)), 0, "other");
        assert_eq!(parse(&bytes[..7]), None);
        assert_eq!(parse(b"\x01\0\0\0"), None, "another version");
    }

    #[test]
    #[ignore = "tier root: needs root, to give files to another uid; scripts/test runs it"]
    fn a_user_given_passage_passes_and_no_one_else_does() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        let shut = dir.path().join("shut");
        std::fs::create_dir(&shut).unwrap();
        std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mode = std::fs::metadata(&shut).unwrap().mode();
        match grant(&shut, mode, 4242, 1) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                panic!("this file system keeps no access lists: {e}")
            }
            other => other.unwrap(),
        }
        let meta = std::fs::metadata(&shut).unwrap();
        let entries = read(&shut, meta.mode()).unwrap();
        assert_eq!(permits(&entries, (0, 0), (4242, 4242)), 1);
        assert_eq!(permits(&entries, (0, 0), (4343, 4343)), 0);
        assert_eq!(meta.mode() & 0o7, 0, "other users still may not pass");
    }
}
