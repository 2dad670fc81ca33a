//! Containment by cgroup v2: the bridge makes `harness-bridge-<bridge>`
//! below its own cgroup, and each harness process starts in a child of it
//! (`turn-<n>`), born there (`clone3` into the cgroup; where the kernel
//! refuses it, moved there between clone and exec). Whatever the harness
//! starts stays in that cgroup whatever it does with process groups and
//! sessions, so at the end one write (`cgroup.kill`, Linux 5.14; before
//! that: freeze, SIGKILL every member, thaw) ends all of it, and the
//! directory is removed once the kernel reports it empty.

#![allow(
    unsafe_code,
    reason = "a child enters its cgroups between clone and exec (a system call on a prepared descriptor)"
)]

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::marker::BridgeId;
use crate::harness::spawn::{Cgroup, Hook};

/// What a bridge's own cgroup is called, before its id.
const PREFIX: &str = "harness-bridge-";
/// How long the members of a killed cgroup get to be gone before it is
/// left in place (a process stuck in the kernel cannot die at once).
const EMPTY_WAIT: Duration = Duration::from_secs(10);
/// How long a freeze gets to take hold before the kill goes ahead anyway.
const FREEZE_WAIT: Duration = Duration::from_secs(1);

/// Why the bridge cannot contain turns in a cgroup here: it then uses the
/// subreaper, or refuses to start when `cgroup` was asked for.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A file of `/proc` that says where this process's cgroup is.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// The file.
        path: &'static str,
        /// What the system said.
        source: io::Error,
    },
    /// This process's cgroup is in no cgroup2 mount it can reach.
    #[error("no cgroup2 file system is mounted where this process's cgroup can be reached")]
    NotMounted,
    /// The bridge's own cgroup cannot be made.
    #[error("cannot create {}: {source}", dir.display())]
    Create {
        /// The cgroup's directory.
        dir: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The kernel cannot end a cgroup's processes at once.
    #[error("the kernel has neither cgroup.kill nor cgroup.freeze")]
    NoKill,
    /// The probe's cgroup cannot be made.
    #[error("cannot create a cgroup in {}: {source}", dir.display())]
    Probe {
        /// The bridge's own cgroup.
        dir: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The probe process cannot be started in its cgroup.
    #[error("cannot move a process into {}: {source}", dir.display())]
    Enter {
        /// The probe's cgroup.
        dir: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The probe's cgroup stays after its process was killed.
    #[error("cannot remove {} after killing its process", .0.display())]
    Stays(PathBuf),
}

/// This process's cgroup directory in the cgroup2 file system.
pub fn own_dir() -> Result<PathBuf, CgroupError> {
    let read = |path: &'static str| {
        fs::read_to_string(path).map_err(|source| CgroupError::Proc { path, source })
    };
    own_dir_in(&read("/proc/self/mountinfo")?, &read("/proc/self/cgroup")?)
        .ok_or(CgroupError::NotMounted)
}

/// The cgroup2 path of this process (`0::/path` in `/proc/self/cgroup`)
/// under the mount point of a cgroup2 mount whose root contains it.
fn own_dir_in(mountinfo: &str, cgroup: &str) -> Option<PathBuf> {
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    if !path.starts_with('/') || path.ends_with(" (deleted)") {
        return None;
    }
    mountinfo.lines().find_map(|line| {
        // `id parent dev root mount-point options... - fstype source opts`
        let (mount, tail) = line.split_once(" - ")?;
        if tail.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        let root = unescape(fields.get(3)?);
        let point = unescape(fields.get(4)?);
        let below = Path::new(path).strip_prefix(&root).ok()?;
        Some(if below.as_os_str().is_empty() {
            PathBuf::from(point)
        } else {
            Path::new(&point).join(below)
        })
    })
}

/// What an operator does to make cgroup moves quick, when they are slow
/// here. Where a harness cannot be cloned into its cgroup, each launch
/// moves it there (a write to `cgroup.procs`), under one lock for all
/// hierarchies whose first writer after a quiet spell waits for an RCU
/// grace period: 10–15 ms measured on a launch, which a quiet bridge pays
/// on each. A hierarchy mounted
/// with `favordynmods` (Linux 6.0+) makes every move take microseconds.
/// `None`: some hierarchy has it, or no cgroup is mounted.
pub fn slow_moves() -> Option<String> {
    slow_moves_in(&fs::read_to_string("/proc/self/mountinfo").ok()?)
}

fn slow_moves_in(mountinfo: &str) -> Option<String> {
    let mut cgroup2 = None;
    let mut any = false;
    for line in mountinfo.lines() {
        // `id parent dev root mount-point options... - fstype source opts`
        let Some((mount, tail)) = line.split_once(" - ") else {
            continue;
        };
        let mut tail = tail.split_whitespace();
        let fstype = tail.next();
        if !matches!(fstype, Some("cgroup" | "cgroup2")) {
            continue;
        }
        let options = tail.nth(1).unwrap_or("");
        if options.split(',').any(|o| o == "favordynmods") {
            return None;
        }
        any = true;
        if fstype == Some("cgroup2") && cgroup2.is_none() {
            cgroup2 = mount.split_whitespace().nth(4).map(unescape);
        }
    }
    any.then(|| match cgroup2 {
        Some(point) => format!(
            "`mount -o remount,favordynmods {point}` as root on the host (Linux 6.0+), \
             or booting with cgroup_favordynmods=true (Linux 6.7+)"
        ),
        // A cgroup v1 hierarchy takes the option only when first mounted.
        None => "booting with cgroup_favordynmods=true (Linux 6.7+)".to_string(),
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The bridge's own cgroup, parent of one cgroup per harness process.
#[derive(Debug)]
pub struct Tree {
    dir: PathBuf,
    kill_file: bool,
}

impl Tree {
    /// Make `harness-bridge-<id>` in `own` and check, with a throwaway
    /// process, that a process can be moved in, killed and the cgroup
    /// removed: what every turn will do.
    pub fn create(own: &Path, id: &BridgeId) -> Result<Tree, CgroupError> {
        let dir = own.join(format!("{PREFIX}{id}"));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(CgroupError::Create { dir, source }),
        }
        let kill_file = dir.join("cgroup.kill").exists();
        if !kill_file && !dir.join("cgroup.freeze").exists() {
            let _ = fs::remove_dir(&dir);
            return Err(CgroupError::NoKill);
        }
        let tree = Tree { dir, kill_file };
        if let Err(why) = tree.try_one() {
            tree.remove();
            return Err(why);
        }
        Ok(tree)
    }

    fn try_one(&self) -> Result<(), CgroupError> {
        static PROBES: AtomicU64 = AtomicU64::new(0);
        let name = format!("probe-{}", PROBES.fetch_add(1, Ordering::Relaxed));
        let group = self.group(&name).map_err(|source| CgroupError::Probe {
            dir: self.dir.clone(),
            source,
        })?;
        // Whether launches can start in their cgroup (the kernel's
        // answer is remembered for every spawn and for the log).
        crate::harness::spawn::can_clone_into(group.folder.as_raw_fd());
        let mut command = std::process::Command::new("/proc/self/exe");
        command
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // Open in this process until the spawn is over.
        let procs = group.procs.as_raw_fd();
        // SAFETY: one async-signal-safe system call on that descriptor.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || enter(procs));
        }
        let spawned = command.spawn();
        let (dir, kill_file) = group.into_parts();
        clear(&dir, kill_file);
        match spawned {
            Ok(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Err(source) => return Err(CgroupError::Enter { dir, source }),
        }
        if dir.exists() {
            return Err(CgroupError::Stays(dir));
        }
        Ok(())
    }

    /// The directory, for the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory the bridge's own cgroup was made in.
    pub fn parent(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// A new cgroup `name` for one harness process.
    pub fn group(&self, name: &str) -> io::Result<Group> {
        self.group_in(&self.dir, name)
    }

    /// A new cgroup `name` for one harness process, in `parent` (a
    /// conversation's cgroup below ours, which holds its limits).
    pub fn group_in(&self, parent: &Path, name: &str) -> io::Result<Group> {
        let dir = parent.join(name);
        fs::create_dir(&dir)?;
        let opened = fs::File::open(&dir).and_then(|folder| {
            let procs = fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            Ok((folder, procs))
        });
        let (folder, procs) = opened.inspect_err(|_| {
            let _ = fs::remove_dir(&dir);
        })?;
        Ok(Group {
            dir,
            folder,
            procs,
            kill_file: self.kill_file,
        })
    }

    /// Kill whatever is still in the bridge's cgroup and remove it (when
    /// the bridge exits). Returns how many processes were killed.
    pub fn remove(&self) -> usize {
        clear(&self.dir, self.kill_file)
    }
}

/// How a harness process starts in the cgroup v2 open as `folder`: cloned
/// into it, else moving itself in through `procs` (its `cgroup.procs`).
pub(super) fn start_in(folder: OwnedFd, procs: &fs::File) -> io::Result<Cgroup> {
    Ok(Cgroup {
        dir: folder,
        enter: enter_hook(vec![procs.try_clone()?.into()]),
    })
}

/// What the child runs before exec to join the cgroups whose entry files
/// (`cgroup.procs`, or a v1 hierarchy's `tasks`) are `files`: one `write`
/// of "0" to each, through descriptors the hook owns until the spawn is
/// over. It allocates nothing and makes no other call, as code between
/// clone and exec must.
pub(super) fn enter_hook(files: Vec<OwnedFd>) -> Hook {
    // SAFETY: `enter` is one `write` of a static "0" to each descriptor,
    // its error the raw OS error: no allocation, no lock.
    unsafe { Hook::new(files, |fds| fds.iter().try_for_each(|fd| enter(*fd))) }
}

/// Move the calling process into the cgroup whose entry file the child
/// has open as `procs`: one `write` of "0".
fn enter(procs: RawFd) -> io::Result<()> {
    // SAFETY: a write of a static byte to a descriptor the child holds.
    if unsafe { libc::write(procs, b"0".as_ptr().cast(), 1) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One harness process's cgroup.
#[derive(Debug)]
pub struct Group {
    dir: PathBuf,
    /// The folder, open: where the clone puts the child.
    folder: fs::File,
    /// Its `cgroup.procs`, opened (close-on-exec) before the spawn: a
    /// child the clone cannot put in only has to write to it.
    procs: fs::File,
    kill_file: bool,
}

impl Group {
    /// How a harness process starts in this cgroup (see [`start_in`]).
    pub fn start_in(&self) -> io::Result<Cgroup> {
        start_in(self.folder.try_clone()?.into(), &self.procs)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory and how it is killed, for [`clear`].
    pub fn into_parts(self) -> (PathBuf, bool) {
        (self.dir, self.kill_file)
    }
}

/// Kill what is in cgroup `dir` (and below), wait for it to be empty and
/// remove it. Returns how many processes were in it. A cgroup whose
/// processes do not die in time is left in place, with a warning.
pub fn clear(dir: &Path, kill_file: bool) -> usize {
    if !dir.exists() {
        return 0;
    }
    let members = members(dir);
    if members > 0 {
        kill_all(dir, kill_file);
    }
    if !wait_empty(dir, EMPTY_WAIT) {
        tracing::warn!(
            cgroup = %dir.display(),
            "processes of a harness did not die within {}s of SIGKILL; their cgroup is left in place",
            EMPTY_WAIT.as_secs()
        );
        return members;
    }
    for sub in subtree(dir).iter().rev() {
        if let Err(e) = fs::remove_dir(sub)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(cgroup = %sub.display(), "cannot remove a harness cgroup: {e}");
        }
    }
    members
}

/// Kill and remove the cgroups of bridges that are gone, found beside
/// ours. Returns how many processes were killed.
pub fn sweep_gone(parent: &Path, ours: &BridgeId) -> usize {
    let Ok(entries) = fs::read_dir(parent) else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(BridgeId::parse)
        else {
            continue;
        };
        if id.is_gone(ours) {
            let dir = entry.path();
            killed += clear(&dir, dir.join("cgroup.kill").exists());
        }
    }
    killed
}

/// The cgroup of turn `seq` of bridge `id`, beside ours.
pub fn turn_dir(parent: &Path, id: &BridgeId, seq: u64) -> PathBuf {
    parent.join(format!("{PREFIX}{id}")).join(turn_name(seq))
}

/// A turn's cgroup's name.
pub fn turn_name(seq: u64) -> String {
    format!("turn-{seq}")
}

/// `dir` and every cgroup below it, parents first (v1 folders too).
pub(super) fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    let mut next = 0;
    while next < found.len() {
        if let Ok(entries) = fs::read_dir(&found[next]) {
            found.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        next += 1;
    }
    found
}

/// Every process in cgroup `dir` and below.
pub fn all_procs(dir: &Path) -> Vec<i32> {
    subtree(dir).iter().flat_map(|d| procs_of(d)).collect()
}

fn procs_of(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// How many processes are in `dir` and below.
fn members(dir: &Path) -> usize {
    subtree(dir).iter().map(|d| procs_of(d).len()).sum()
}

/// A `cgroup.events` key (`populated`, `frozen`) is 1.
fn event(dir: &Path, key: &str) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.strip_prefix(key).is_some_and(|v| v.trim() == "1"))
}

fn wait_for(limit: Duration, done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn wait_empty(dir: &Path, limit: Duration) -> bool {
    wait_for(limit, || !dir.exists() || !event(dir, "populated"))
}

/// SIGKILL everything in `dir` and below: `cgroup.kill` where the kernel
/// has it; else freeze (nothing can fork), signal each member, thaw.
pub fn kill_all(dir: &Path, kill_file: bool) {
    if kill_file {
        if let Err(e) = fs::write(dir.join("cgroup.kill"), "1") {
            tracing::warn!(cgroup = %dir.display(), "cannot kill a harness cgroup: {e}");
        }
        return;
    }
    kill_frozen(dir);
}

/// The kill for kernels before 5.14.
fn kill_frozen(dir: &Path) {
    let frozen = fs::write(dir.join("cgroup.freeze"), "1").is_ok()
        && wait_for(FREEZE_WAIT, || event(dir, "frozen"));
    if !frozen {
        tracing::debug!(cgroup = %dir.display(), "cgroup did not freeze; killing its members anyway");
    }
    for sub in subtree(dir) {
        for pid in procs_of(&sub) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let _ = fs::write(dir.join("cgroup.freeze"), "0");
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn slow_moves_are_told_with_the_remedy_that_works_here() {
        let remedy = slow_moves_in(MOUNTINFO).expect("no hierarchy favours moves");
        assert!(
            remedy.contains("remount,favordynmods /sys/fs/cgroup/unified"),
            "{remedy}"
        );
        let favoured = MOUNTINFO.replace("cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,favordynmods");
        assert_eq!(slow_moves_in(&favoured), None);
        // Only v1: no remount takes the option, booting with it does.
        let v1 = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        let remedy = slow_moves_in(v1).expect("v1 only");
        assert!(!remedy.contains("remount"), "{remedy}");
        assert!(remedy.contains("cgroup_favordynmods=true"), "{remedy}");
        let v1_favoured = v1.replace("rw,memory", "rw,memory,favordynmods");
        assert_eq!(slow_moves_in(&v1_favoured), None);
        // No cgroup at all: nothing to say.
        assert_eq!(
            slow_moves_in("31 23 0:28 / /tmp rw - tmpfs tmpfs rw\n"),
            None
        );
    }

    #[test]
    fn our_cgroup_is_found_under_the_cgroup2_mount() {
        let found = |mountinfo: &str, cgroup: &str| own_dir_in(mountinfo, cgroup);
        assert_eq!(
            found(MOUNTINFO, "4:memory:/x\n0::/\n"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            found(MOUNTINFO, "0::/system.slice/bridge.service\n"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/bridge.service"
            ))
        );
        // A mount of a subtree (a container's view), with a space escaped.
        let nested = "50 1 0:40 /ctr /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            found(nested, "0::/ctr/app\n"),
            Some(PathBuf::from("/sys/fs/my cgroup/app"))
        );
        // Outside the mounted subtree, v1 only, or removed: none.
        assert_eq!(found(nested, "0::/other\n"), None);
        assert_eq!(found(MOUNTINFO, "4:memory:/x\n"), None);
        assert_eq!(found(MOUNTINFO, "0::/gone (deleted)\n"), None);
        assert_eq!(found("garbage\n", "0::/\n"), None);
    }

    /// The kill for kernels without `cgroup.kill`, on this machine's
    /// cgroup2 (the tests run where the cgroup mechanism works).
    #[test]
    #[ignore = "tier cgroup: needs a cgroup v2 the bridge may write (root or delegated); scripts/test runs it"]
    fn a_frozen_cgroup_is_killed_member_by_member() {
        let own = own_dir().expect("a cgroup2 file system");
        // An id of its own, which no bridge's sweep takes for one of its
        // namespace, and which is not this process's cage.
        let id = BridgeId {
            ns: BridgeId::current().ns + 1,
            ..BridgeId::current()
        };
        let tree = Tree::create(&own, &id).expect("the bridge's cgroup");
        let group = tree.group("turn-freeze-test").unwrap();
        let mut command = std::process::Command::new("sh");
        command.args(["-c", "sleep 300 & sleep 300 & wait"]);
        let procs = group.procs.as_raw_fd();
        // SAFETY: as in `Tree::try_one`.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || enter(procs));
        }
        let mut child = command.spawn().unwrap();
        assert!(wait_for(Duration::from_secs(10), || members(&group.dir) == 3));
        let (dir, _) = group.into_parts();
        assert_eq!(clear(&dir, false), 3);
        assert!(!dir.exists());
        assert!(!child.wait().unwrap().success());
        assert_eq!(tree.remove(), 0);
        assert!(!tree.dir().exists());
    }

    /// A harness with a cgroup v2 of its own starts in it: cloned there,
    /// not moved (the move's step is made to fail, and is never taken),
    /// by either way of starting.
    #[tokio::test]
    #[ignore = "tier cgroup: needs a cgroup v2 the bridge may write (root or delegated); scripts/test runs it"]
    async fn a_harness_is_cloned_into_its_cgroup_instead_of_moving_there() {
        use crate::harness::spawn::{self, Method, Request};
        use tokio::io::AsyncReadExt as _;
        let own = own_dir().expect("a cgroup2 file system");
        let id = BridgeId {
            ns: BridgeId::current().ns + 2,
            ..BridgeId::current()
        };
        let tree = Tree::create(&own, &id).expect("the bridge's cgroup");
        assert!(
            spawn::clones_into_cgroups(),
            "this kernel (x86_64, Linux 5.7+) clones into a cgroup"
        );
        for (n, method) in [Method::Vfork, Method::Fork].into_iter().enumerate() {
            let group = tree.group(&format!("turn-clone-test-{n}")).unwrap();
            let mut cgroup = group.start_in().unwrap();
            // SAFETY: no call; a raw OS error (had the clone not put it
            // there, this step would fail the spawn).
            cgroup.enter = unsafe {
                Hook::new(Vec::new(), |_| {
                    Err(io::Error::from_raw_os_error(libc::EXDEV))
                })
            };
            let args = ["/proc/self/cgroup".to_string()];
            let request = Request {
                program: Path::new("/bin/cat"),
                args: &args,
                cwd: Path::new("/"),
                env: Default::default(),
                stdin: false,
                hooks: Vec::new(),
                around: None,
                cgroup: Some(cgroup),
            };
            let mut spawned = spawn::spawn(request, method).await.expect("spawned");
            let mut said = String::new();
            spawned.stdout.read_to_string(&mut said).await.unwrap();
            assert!(spawned.process.wait().await.unwrap().success());
            let inside = said.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
            assert!(
                group.dir().ends_with(inside.trim_start_matches('/')),
                "{method:?}: in {inside}, not {}",
                group.dir().display()
            );
            let (dir, kill_file) = group.into_parts();
            assert_eq!(clear(&dir, kill_file), 0);
        }
        assert_eq!(tree.remove(), 0);
    }
}
