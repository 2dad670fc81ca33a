//! A harness's objects, taken in through a walk that follows no link.
//!
//! A harness writes its commits' objects in a folder of its workspace
//! (`.langbot/git-objects`), which it can fill with anything — links to
//! another repository's objects among them, or files named for objects
//! they are not. The bridge never hands that folder to git. It walks it
//! itself, each folder opened beneath the one before without following a
//! link, and copies into a repository made for this one intake (beside
//! the bridge's own for the worktree, removed once the fetch is over)
//! only plain files named as git names objects (loose objects, and packs
//! with their index) that git does not have already, up to a bound;
//! every link it meets is named, never followed. git then fetches from
//! there into the project's repository, checking every object on the way
//! in, so what comes in is what the harness wrote itself, or what the
//! repository already held; and nothing the harness named is ever read
//! as an object by another git of the bridge's.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat};

use super::record::is_object_id;

/// Most bytes copied in one intake, every file together (a turn's
/// commits): past it nothing more is copied, and the fetch says what is
/// missing.
const MAX_INTAKE_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// What a walk of a harness's object folder found.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Loose objects: their ids, and the fan-out folder each is in.
    loose: Vec<(String, usize)>,
    /// The fan-out folders, opened.
    folders: Vec<OwnedFd>,
    /// Packs (`pack-<id>`), in the opened `pack` folder.
    packs: Vec<String>,
    pack_folder: Option<OwnedFd>,
    /// What was not taken for a link (or not a plain file): named for
    /// the person, never followed.
    pub(super) links: Vec<String>,
}

/// Open `name` beneath `dir` as a folder, never through a link.
fn open_dir_at(dir: &impl AsFd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The names in an opened folder (without `.` and `..`).
fn names(dir: &OwnedFd) -> nix::Result<Vec<Vec<u8>>> {
    let fd = dir.try_clone().map_err(|_| nix::Error::EBADF)?;
    let mut listing = Dir::from_fd(fd)?;
    Ok(listing
        .iter()
        .flatten()
        .map(|e| e.file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect())
}

/// Whether the entry `name` of `dir` is a link (or anything but a plain
/// file or folder), without following it.
fn is_link_at(dir: &OwnedFd, name: &[u8]) -> bool {
    nix::sys::stat::fstatat(
        dir,
        OsStr::from_bytes(name),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .is_ok_and(|st| {
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        kind != SFlag::S_IFREG && kind != SFlag::S_IFDIR
    })
}

/// Walk `objects` (the harness's object folder, `relative` beneath the
/// opened `workspace`): the loose objects and packs it holds as plain
/// files, and the links it holds instead.
pub(super) fn walk(workspace: &Path, relative: &[&str]) -> std::io::Result<Found> {
    let mut found = Found::default();
    let mut dir: OwnedFd = std::fs::File::open(workspace)?.into();
    for part in relative {
        dir = match open_dir_at(&dir, OsStr::new(part)) {
            Ok(next) => next,
            Err(nix::Error::ELOOP | nix::Error::ENOTDIR) => {
                found.links.push(relative.join("/"));
                return Ok(found);
            }
            Err(nix::Error::ENOENT) => return Ok(found),
            Err(e) => return Err(e.into()),
        };
    }
    for name in names(&dir)? {
        let text = String::from_utf8_lossy(&name).into_owned();
        let fan_out = name.len() == 2 && name.iter().all(|b| b.is_ascii_hexdigit());
        if !fan_out && text != "pack" {
            // `info` (alternates the harness would add) and the rest.
            continue;
        }
        let sub = match open_dir_at(&dir, OsStr::from_bytes(&name)) {
            Ok(sub) => sub,
            Err(nix::Error::ELOOP | nix::Error::ENOTDIR) => {
                found.links.push(text);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for entry in names(&sub)? {
            if is_link_at(&sub, &entry) {
                found
                    .links
                    .push(format!("{text}/{}", String::from_utf8_lossy(&entry)));
                continue;
            }
            let entry = String::from_utf8_lossy(&entry).into_owned();
            if fan_out {
                let id = format!("{}{entry}", text.to_ascii_lowercase());
                if is_object_id(&id) {
                    found.loose.push((id, found.folders.len()));
                }
            } else if let Some(pack) = entry.strip_suffix(".idx")
                && pack.starts_with("pack-")
                && is_object_id(&pack["pack-".len()..])
            {
                found.packs.push(pack.to_string());
            }
        }
        match fan_out {
            true => found.folders.push(sub),
            false => found.pack_folder = Some(sub),
        }
    }
    found.links.sort();
    Ok(found)
}

impl Found {
    /// The loose objects' ids, for git to say which it lacks.
    pub(super) fn loose_ids(&self) -> impl Iterator<Item = &str> {
        self.loose.iter().map(|(id, _)| id.as_str())
    }

    /// Copy into `dest` (an intake repository's `objects` folder) the
    /// loose objects in `wanted` and every pack: plain files only, each
    /// opened beneath its folder without following a link, streamed, no
    /// more than [`MAX_INTAKE_BYTES`] in all. How many files were copied.
    pub(super) fn copy_into(
        &self,
        dest: &Path,
        wanted: &BTreeSet<String>,
    ) -> std::io::Result<usize> {
        let mut budget = MAX_INTAKE_BYTES;
        let mut copied = 0;
        for (id, folder) in self.loose.iter().filter(|(id, _)| wanted.contains(id)) {
            let (fan_out, rest) = id.split_at(2);
            std::fs::create_dir_all(dest.join(fan_out))?;
            if copy_plain(
                &self.folders[*folder],
                rest,
                &dest.join(fan_out),
                &mut budget,
            )? {
                copied += 1;
            }
        }
        if let Some(folder) = &self.pack_folder {
            let packs = dest.join("pack");
            std::fs::create_dir_all(&packs)?;
            for pack in &self.packs {
                // The pack first: git finds a pack by its index.
                let data = format!("{pack}.pack");
                if copy_plain(folder, &data, &packs, &mut budget)?
                    && copy_plain(folder, &format!("{pack}.idx"), &packs, &mut budget)?
                {
                    copied += 2;
                }
            }
        }
        Ok(copied)
    }
}

/// Copy `name` beneath `dir` into the folder `to` under the same name,
/// streamed, when it is a plain file of one name (not a link, a pipe or
/// a second name of another file), holding the bytes its size says (not
/// a sparse file, which would cost the bridge what cost the harness
/// nothing), within `budget` (what is left of it after). Whether it was
/// copied.
fn copy_plain(dir: &OwnedFd, name: &str, to: &Path, budget: &mut u64) -> std::io::Result<bool> {
    let fd = match openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(nix::Error::ELOOP | nix::Error::ENOENT | nix::Error::ENXIO) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let stat = fstat(&fd)?;
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    let held = u64::try_from(stat.st_blocks)
        .unwrap_or(0)
        .saturating_mul(512);
    // Small files may live in their folder's own blocks (inline data).
    let sparse = size > 64 * 1024 && held < size / 2;
    if kind != SFlag::S_IFREG || stat.st_nlink != 1 || size > *budget || sparse {
        return Ok(false);
    }
    let mut file = tempfile::NamedTempFile::new_in(to)?;
    let copied = std::io::copy(&mut std::fs::File::from(fd).take(size), &mut file)?;
    *budget -= copied;
    file.persist(to.join(name)).map_err(|e| e.error)?;
    Ok(true)
}

/// `a`, `b` and 3 more: links named in a sentence.
pub(super) fn named(links: &[String]) -> String {
    const NAMED: usize = 3;
    // A harness chose these names: shown as plain text, nothing in them
    // read as the chat's formatting.
    let plain = |l: &String| l.escape_debug().to_string().replace('`', "'");
    let mut words: Vec<String> = links
        .iter()
        .take(NAMED)
        .map(|l| format!("`{}`", plain(l)))
        .collect();
    if links.len() > NAMED {
        words.push(format!("{} more", links.len() - NAMED));
    }
    match words.len() {
        0 => String::new(),
        1 => words.remove(0),
        n => format!("{} and {}", words[..n - 1].join(", "), words[n - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_takes_plain_objects_and_names_every_link() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(elsewhere.path().join("ab")).unwrap();
        std::fs::write(elsewhere.path().join("ab").join("c".repeat(38)), "theirs").unwrap();
        let objects = dir.path().join(".langbot/git-objects");
        std::fs::create_dir_all(objects.join("12")).unwrap();
        std::fs::write(objects.join("12").join("3".repeat(38)), "mine").unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("ab"), objects.join("ab")).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join("ab").join("c".repeat(38)),
            objects.join("12").join("4".repeat(38)),
        )
        .unwrap();
        std::fs::create_dir_all(objects.join("info")).unwrap();
        std::fs::write(objects.join("info/alternates"), "/elsewhere\n").unwrap();
        let found = walk(dir.path(), &[".langbot", "git-objects"]).unwrap();
        let mine = format!("12{}", "3".repeat(38));
        assert_eq!(found.loose_ids().collect::<Vec<_>>(), [mine.as_str()]);
        assert_eq!(
            found.links,
            ["12/".to_string() + &"4".repeat(38), "ab".to_string()]
        );
        let dest = dir.path().join("dest");
        let wanted: BTreeSet<String> = [mine.clone()].into();
        assert_eq!(found.copy_into(&dest, &wanted).unwrap(), 1);
        assert_eq!(
            std::fs::read(dest.join("12").join("3".repeat(38))).unwrap(),
            b"mine"
        );
        let nothing = dir.path().join("nothing");
        assert_eq!(found.copy_into(&nothing, &BTreeSet::new()).unwrap(), 0);

        // A file that holds none of the bytes its size says is not read.
        std::fs::File::create(objects.join("12").join("5".repeat(38)))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let found = walk(dir.path(), &[".langbot", "git-objects"]).unwrap();
        let sparse: BTreeSet<String> = [format!("12{}", "5".repeat(38))].into();
        assert_eq!(
            found
                .copy_into(&dir.path().join("sparse"), &sparse)
                .unwrap(),
            0
        );

        // The folder itself a link: nothing in it is taken.
        std::fs::remove_dir_all(&objects).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &objects).unwrap();
        let found = walk(dir.path(), &[".langbot", "git-objects"]).unwrap();
        assert_eq!(found.loose_ids().count(), 0);
        assert_eq!(found.links, [".langbot/git-objects"]);
        assert_eq!(named(&found.links), "`.langbot/git-objects`");
        let many: Vec<String> = (0..5).map(|n| n.to_string()).collect();
        assert_eq!(named(&many), "`0`, `1`, `2` and 2 more");
    }
}
