//! Who a root bridge's harnesses are, outside their user namespace, and
//! handing them what they must write.
//!
//! A bridge running as root starts every harness in a user namespace of
//! its own, as an ordinary uid inside, mapped to an unprivileged uid
//! outside — the cage's owner: the account [`CAGE_ACCOUNT`] when the
//! system has one, else `nobody` — never to root. So a file only root may
//! read (`/etc/shadow`, an SSH host key, a key kept beside `bridge.yaml`)
//! stays unreadable wherever the cage lets a harness read, and a socket
//! only root may use refuses it. What the harness must write (its
//! workspace, its worktree's record) the bridge gives to that uid as it
//! makes it ([`Owner::give_at`], [`Owner::give_tree`]); the folders that
//! lead there are left open to pass through (0711), never to list. What
//! the harness must reach, it can be checked to reach
//! ([`Owner::cannot_reach`]) before any turn, with the folder in the way
//! named.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod acl;

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstatat};
use nix::unistd::{Gid, Uid, fchownat};

/// The account a root bridge's harnesses run as outside their namespace,
/// when the system has it (`packaging/harness-bridge.sysusers` makes it):
/// a uid no other program uses. Without it they run as `nobody`.
pub const CAGE_ACCOUNT: &str = "harness-bridge-cage";
/// `nobody`'s ids where the system names no such account.
const NOBODY: u32 = 65534;
/// Deepest folder tree handed over.
const MAX_DEPTH: usize = 128;

/// An unprivileged uid and gid outside a harness's namespace, and the
/// account's name for sentences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// The account's name (`nobody`, [`CAGE_ACCOUNT`]).
    pub name: String,
}

/// What a harness wants of a path: to read it, run it, or pass through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Read a file, or list and enter a folder.
    Read,
    /// Run a program (read it too: a script is read by its interpreter).
    Run,
    /// Pass through a folder to what it holds (its own workspace).
    Pass,
    /// Write a file, or make and remove files in a folder.
    Write,
}

/// Why an owner cannot reach a path: the first folder (or the file) in
/// the way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} (mode {mode:o}, owner uid {uid}) does not let {who} {what}", path.display())]
pub struct Blocked {
    /// The folder or file in the way.
    pub path: PathBuf,
    /// Its permission bits.
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Who was stopped (`nobody (65534)`).
    pub who: String,
    /// What it could not do (`pass through`, `read it`, `run it`).
    pub what: &'static str,
}

/// The cage's owner for this process: `Some` when the bridge runs as
/// root (then every caged harness runs as it outside its namespace).
pub fn of_cage() -> Option<&'static Owner> {
    static OWNER: OnceLock<Option<Owner>> = OnceLock::new();
    OWNER
        .get_or_init(|| nix::unistd::geteuid().is_root().then(Owner::lookup))
        .as_ref()
}

impl Owner {
    /// [`CAGE_ACCOUNT`] when the system has it, else `nobody`.
    fn lookup() -> Owner {
        let named = |name: &str| {
            nix::unistd::User::from_name(name)
                .ok()
                .flatten()
                .filter(|user| !user.uid.is_root())
        };
        match named(CAGE_ACCOUNT).or_else(|| named("nobody")) {
            Some(user) => Owner {
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
                name: user.name,
            },
            None => Owner {
                uid: NOBODY,
                gid: NOBODY,
                name: "nobody".into(),
            },
        }
    }

    /// `nobody (65534)`: who this is, in a sentence.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, self.uid)
    }

    /// Whether this is the account the bridge's packaging makes, rather
    /// than `nobody`, which other programs may share.
    pub fn is_own_account(&self) -> bool {
        self.name == CAGE_ACCOUNT
    }

    /// Give `name` in the folder `dir` to this owner (a link itself, never
    /// what it points at).
    pub fn give_at(&self, dir: &impl AsFd, name: &OsStr) -> std::io::Result<()> {
        fchownat(
            dir,
            name,
            Some(Uid::from_raw(self.uid)),
            Some(Gid::from_raw(self.gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(Into::into)
    }

    /// Give the open file or folder `fd` to this owner.
    pub fn give(&self, fd: &impl AsFd) -> std::io::Result<()> {
        nix::unistd::fchown(
            fd,
            Some(Uid::from_raw(self.uid)),
            Some(Gid::from_raw(self.gid)),
        )
        .map_err(Into::into)
    }

    /// Give the open folder `dir` and everything below it to this owner,
    /// but the top-level entries named in `skip`: walked by handles opened
    /// one name at a time, links given as links and never followed. How
    /// many entries changed hands.
    pub fn give_tree(&self, dir: &impl AsFd, skip: &[&str]) -> std::io::Result<usize> {
        let stat = nix::sys::stat::fstat(dir)?;
        let mut given = 0;
        if stat.st_uid != self.uid || stat.st_gid != self.gid {
            self.give(dir)?;
            given += 1;
        }
        let dir = dir.as_fd().try_clone_to_owned()?;
        Ok(given + self.give_below(&dir, skip, 0)?)
    }

    fn give_below(&self, dir: &OwnedFd, skip: &[&str], depth: usize) -> std::io::Result<usize> {
        if depth >= MAX_DEPTH {
            return Ok(0);
        }
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in Dir::from_fd(dir.try_clone()?)?.iter().flatten() {
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." && !skip.iter().any(|s| s.as_bytes() == name) {
                names.push(name.to_vec());
            }
        }
        let mut given = 0;
        for name in names {
            let name = OsStr::from_bytes(&name);
            let Ok(stat) = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let is_dir = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
            if is_dir {
                let flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                if let Ok(sub) = openat(dir, name, flags, Mode::empty()) {
                    given += self.give_below(&sub, &[], depth + 1)?;
                }
            }
            if stat.st_uid != self.uid || stat.st_gid != self.gid {
                self.give_at(dir, name)?;
                given += 1;
            }
        }
        Ok(given)
    }

    /// Why this owner cannot reach `path` as `want`s: the first folder on
    /// the way it may not pass through, or the path itself when it may
    /// not read (or run) it; `None` when it can, or when there is no such
    /// path. Judged as the kernel judges a uid with no supplementary group:
    /// by the access list where a file has one, else by its permission
    /// bits.
    pub fn cannot_reach(&self, path: &Path, want: Want) -> Option<Blocked> {
        let real = path.canonicalize().ok()?;
        let blocked = |at: &Path, meta: &std::fs::Metadata, what| Blocked {
            path: at.to_path_buf(),
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            who: self.describe(),
            what,
        };
        let mut at = PathBuf::from("/");
        let parts: Vec<_> = real.components().skip(1).collect();
        for (n, part) in parts.iter().enumerate() {
            let meta = std::fs::metadata(&at).ok()?;
            if !self.may(&at, &meta, 0o1) {
                return Some(blocked(&at, &meta, "pass through"));
            }
            at.push(part);
            if n + 1 == parts.len() {
                let meta = std::fs::metadata(&at).ok()?;
                let (bits, what) = match (want, meta.is_dir()) {
                    (Want::Read, true) => (0o5, "read it"),
                    (Want::Read, false) => (0o4, "read it"),
                    (Want::Run, _) => (0o5, "run it"),
                    (Want::Pass, _) => (0o1, "pass through"),
                    (Want::Write, true) => (0o3, "write in it"),
                    (Want::Write, false) => (0o2, "write it"),
                };
                if !self.may(&at, &meta, bits) {
                    return Some(blocked(&at, &meta, what));
                }
            }
        }
        None
    }

    /// Whether this owner has all of `bits` (`0o4` read, `0o2` write,
    /// `0o1` pass) on `path` of `meta`.
    fn may(&self, path: &Path, meta: &std::fs::Metadata, bits: u32) -> bool {
        let Ok(entries) = acl::read(path, meta.mode()) else {
            return false;
        };
        let granted = acl::permits(&entries, (meta.uid(), meta.gid()), (self.uid, self.gid));
        u32::from(granted) & bits == bits
    }

    /// [`Owner::give_passage`], and the log told which folders it was let
    /// through (or why it could not be), `to` saying what for ("to read
    /// the repository").
    pub fn let_pass(&self, path: &Path, to: &str) {
        match self.give_passage(path) {
            Ok(given) if given.is_empty() => {}
            Ok(given) => {
                let given: Vec<String> = given.iter().map(|d| d.display().to_string()).collect();
                tracing::info!(
                    path = %path.display(),
                    "{} may now pass through {} (an access-list entry for it alone), {to}",
                    self.describe(),
                    given.join(", ")
                );
            }
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = %e,
                "cannot let {} pass through the folders on the way, {to}",
                self.describe()
            ),
        }
    }

    /// Let this owner pass through every folder on the way to `path`
    /// (`path` itself not included) that it could not: an access-list
    /// entry for it alone, every other user kept out as before. The
    /// folders it was let through.
    pub fn give_passage(&self, path: &Path) -> std::io::Result<Vec<PathBuf>> {
        let real = path.canonicalize()?;
        let mut given = Vec::new();
        for dir in real
            .ancestors()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            let meta = std::fs::metadata(dir)?;
            if !self.may(dir, &meta, 0o1) {
                acl::grant(dir, meta.mode(), self.uid, 1)?;
                given.push(dir.to_path_buf());
            }
        }
        Ok(given)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn someone() -> Owner {
        Owner {
            uid: 4_000_321,
            gid: 4_000_321,
            name: "someone".into(),
        }
    }

    #[test]
    fn a_folder_shut_to_others_is_named_as_what_stops_them() {
        let dir = tempfile::tempdir().unwrap();
        let shut = dir.path().join("shut");
        std::fs::create_dir_all(shut.join("inside")).unwrap();
        std::fs::write(shut.join("inside/file"), "x").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o700)).unwrap();
        let who = someone();
        let blocked = who
            .cannot_reach(&shut.join("inside/file"), Want::Read)
            .expect("blocked");
        assert_eq!(blocked.path, shut.canonicalize().unwrap());
        assert_eq!((blocked.mode, blocked.what), (0o700, "pass through"));
        assert!(
            blocked
                .to_string()
                .contains("does not let someone (4000321) pass through")
        );
        std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(
            who.cannot_reach(&shut.join("inside/file"), Want::Read),
            None
        );
        std::fs::set_permissions(
            shut.join("inside/file"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let file = who
            .cannot_reach(&shut.join("inside/file"), Want::Read)
            .unwrap();
        assert_eq!(file.what, "read it");
        assert_eq!(
            who.cannot_reach(&dir.path().join("nothing"), Want::Read),
            None
        );
    }

    #[test]
    #[ignore = "tier root: needs root, to give files to another uid; scripts/test runs it"]
    fn a_tree_is_given_whole_and_a_link_in_it_as_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/file"), "x").unwrap();
        std::fs::create_dir_all(tree.join("kept")).unwrap();
        std::os::unix::fs::symlink(outside.path(), tree.join("a/out")).unwrap();
        let who = someone();
        let open = std::fs::File::open(&tree).unwrap();
        let given = who.give_tree(&open, &["kept"]).unwrap();
        assert_eq!(given, 5, "the tree, a, b, the file and the link");
        for path in ["", "a", "a/b", "a/b/file"] {
            assert_eq!(
                std::fs::metadata(tree.join(path)).unwrap().uid(),
                who.uid,
                "{path}"
            );
        }
        assert_eq!(
            std::fs::symlink_metadata(tree.join("a/out")).unwrap().uid(),
            who.uid
        );
        assert_eq!(
            std::fs::metadata(outside.path()).unwrap().uid(),
            0,
            "never followed"
        );
        assert_eq!(
            std::fs::metadata(tree.join("kept")).unwrap().uid(),
            0,
            "skipped"
        );
        assert_eq!(who.give_tree(&open, &["kept"]).unwrap(), 0, "given once");
    }
}
