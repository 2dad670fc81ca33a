//! The wall: what the kernel lets a harness process, and everything it
//! starts, reach. Built by the bridge before the spawn and entered by the
//! child between clone and exec, irrevocably:
//!
//! - **Landlock** (Linux 6.12+, ABI 6): files and folders read-write only
//!   where the plan says (the conversation's workspace, with its home and
//!   temp folder), read-only the system, the harness's installation and
//!   what the operator lists, nothing else; TCP `connect` only to the
//!   plan's ports (or any, when the network is open) and no `bind`;
//!   signals and abstract UNIX sockets scoped to the harness's own
//!   domain. A process in another domain (another conversation's harness,
//!   the bridge) cannot be signalled, traced or have its `/proc/PID`
//!   secrets (environ, memory, fds) read.
//! - **Not root**: a bridge running as root starts the harness in a user
//!   namespace as uid [`INSIDE_UID`] with no capabilities and no
//!   supplementary group, which outside is the cage's owner
//!   ([`crate::owner`]: an unprivileged account, never root): CLIs that
//!   refuse their most permissive mode as root run, nothing a capability
//!   would allow (reading any process's environ) is left, and a file or
//!   socket only root may use stays shut to it wherever it may read.
//!
//! Landlock needs no privilege and nothing prepared by root; it was
//! chosen over bubblewrap for that and for its cost (measured in
//! BENCHMARKS.md): see docs/decisions.md.

#![allow(
    unsafe_code,
    reason = "the Landlock ruleset and seccomp filter are applied by the child between clone and exec"
)]

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::door::{Door, DoorPair};
use crate::harness::spawn::Hook;
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

/// The Landlock ABI the wall needs: files (with truncate and device
/// ioctls), TCP ports and scopes. Older kernels get no harness at all.
pub const NEEDED_ABI: i32 = 6;

/// The uid a harness started by a root bridge has inside its user
/// namespace (the cage's owner outside, without capabilities).
pub const INSIDE_UID: u32 = 1000;

/// What one harness process may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Read, write, create, remove below these (the workspace first).
    pub read_write: Vec<PathBuf>,
    /// Read and execute below these.
    pub read_only: Vec<PathBuf>,
    /// TCP ports `connect` may reach; `None`: any (the network is open).
    pub connect: Option<BTreeSet<u16>>,
    /// TCP ports it may listen on besides one the kernel picks (with the
    /// network limited).
    pub bind: BTreeSet<u16>,
    /// A network namespace of its own, with the bridge's door its only
    /// way out ([`super::door`]); no new unix socket.
    pub own_network: bool,
}

/// The system a program needs to run: its libraries, the system's
/// programs and settings, `/proc` (runtimes read their own entries; a
/// domain cannot read another domain's secrets there), randomness.
/// Missing ones are skipped.
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
];

/// Devices every program may also write: the null and full devices, its
/// own controlling terminal. Not `/dev/pts`: its terminals are shared by
/// every conversation (one uid, one file system), so a harness could read
/// or type into another's; a tool that needs a new pseudo-terminal fails.
pub const SYSTEM_READ_WRITE: &[&str] = &["/dev/null", "/dev/full", "/dev/tty"];

/// Which Landlock ABI this kernel offers (0: none).
pub fn kernel_abi() -> i32 {
    // SAFETY: the version query takes no pointer (NULL, size 0) and
    // returns an integer.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// Why the wall cannot be built on this system, if it cannot.
pub fn unavailable() -> Option<String> {
    let abi = kernel_abi();
    if abi < NEEDED_ABI {
        return Some(if abi == 0 {
            "the kernel offers no Landlock (Linux 6.12 or later with Landlock enabled is needed)"
                .to_string()
        } else {
            format!(
                "the kernel's Landlock is ABI {abi}; the cage needs ABI {NEEDED_ABI} (Linux 6.12 or later)"
            )
        });
    }
    None
}

/// A wall ready to be entered by one child.
#[derive(Debug)]
pub struct Wall {
    ruleset: OwnedFd,
    user: Option<UserSwitch>,
    door: Option<DoorPair>,
}

impl Wall {
    /// Build the rules of `plan` (opening each path now, in the bridge).
    /// A path the plan names that does not exist is skipped, except the
    /// first read-write one (the workspace), which must.
    pub fn build(plan: &Plan) -> io::Result<Wall> {
        if let Some(why) = unavailable() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the cage cannot be built: {why}. The harness was not started; to run \
                     harnesses uncaged (each then reaches whatever the bridge's user reaches), \
                     set `cage: {{enabled: false}}` in bridge.yaml or pass --uncaged"
                ),
            ));
        }
        let abi = ABI::V6;
        let fail = |e: &dyn std::fmt::Display| io::Error::other(format!("Landlock: {e}"));
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .map_err(|e| fail(&e))?;
        // Listening is held to the kernel's pick (and its own port) in a
        // network of its own too: the same rule wherever a harness runs.
        if plan.connect.is_some() {
            ruleset = ruleset
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
                .map_err(|e| fail(&e))?;
        } else if plan.own_network {
            ruleset = ruleset
                .handle_access(AccessNet::BindTcp)
                .map_err(|e| fail(&e))?;
        }
        let mut created = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| fail(&e))?
            .create()
            .map_err(|e| fail(&e))?;
        let rules = [
            (&plan.read_write, AccessFs::from_all(abi)),
            (&plan.read_only, AccessFs::from_read(abi)),
        ];
        for (index, (paths, access)) in rules.into_iter().enumerate() {
            for (n, path) in paths.iter().enumerate() {
                let fd = match PathFd::new(path) {
                    Ok(fd) => fd,
                    Err(_) if !(index == 0 && n == 0) => continue,
                    Err(e) => {
                        return Err(io::Error::other(format!(
                            "cannot open {} for the cage: {e}",
                            path.display()
                        )));
                    }
                };
                // A rule on a file takes only what applies to files.
                let access = if path.is_dir() {
                    access
                } else {
                    access & AccessFs::from_file(abi)
                };
                created = created
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(|e| fail(&e))?;
            }
        }
        if plan.connect.is_some() || plan.own_network {
            // Port 0: a port the kernel picks (a CLI's own loopback server);
            // nothing outside the cage may connect to it (connect is held
            // to the plan's ports everywhere else).
            for port in std::iter::once(0).chain(plan.bind.iter().copied()) {
                created = created
                    .add_rule(NetPort::new(port, AccessNet::BindTcp))
                    .map_err(|e| fail(&e))?;
            }
        }
        for port in plan.connect.iter().flatten() {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(|e| fail(&e))?;
        }
        let ruleset: Option<OwnedFd> = created.into();
        let ruleset =
            ruleset.ok_or_else(|| io::Error::other("Landlock gave no ruleset to enforce"))?;
        let user = match crate::owner::of_cage() {
            Some(owner) => Some(UserSwitch::new(owner)?),
            None if plan.own_network => Some(UserSwitch::own()?),
            None => None,
        };
        let door = plan.own_network.then(DoorPair::new).transpose()?;
        Ok(Wall {
            ruleset,
            user,
            door,
        })
    }

    /// What the child does between clone and exec: enter the cage's user
    /// namespace (a root bridge's harness leaves root there), make its
    /// own network with the door (with `own_network`), become its uid
    /// and keep the parent-death signal the credential change cleared,
    /// then restrict itself for good. Only system calls on what was
    /// prepared here: nothing allocates after the clone. With the hook,
    /// the bridge's end of the door, if there is one.
    pub fn enter_hook(self) -> (Hook, Option<Door>) {
        let Wall {
            ruleset,
            user,
            door,
        } = self;
        let (door, door_end) = match door.map(DoorPair::split) {
            Some((door, end)) => (Some(door), Some(end)),
            None => (None, None),
        };
        let mut fds = vec![ruleset];
        let switch = user.map(|user| {
            fds.push(user.namespace);
            (fds.len() - 1, user.inside, user.drop_groups)
        });
        let door_at = door_end.map(|end| {
            fds.push(end);
            fds.len() - 1
        });
        let step = move |fds: &[RawFd]| -> io::Result<()> {
            if let Some((at, _, drop_groups)) = switch {
                UserSwitch::enter(fds[at], drop_groups)?;
            }
            if let Some(at) = door_at {
                super::door::open_in_child(fds[at])?;
            }
            if let Some((_, inside, _)) = switch {
                UserSwitch::become_inside(inside)?;
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)?;
            }
            nix::sys::prctl::set_no_new_privs()?;
            if door_at.is_some() {
                super::door::refuse_unix_sockets()?;
            }
            // SAFETY: the ruleset's descriptor as the child has it (the
            // hook owns it until the spawn is over); the call takes it
            // and a flags word.
            let done = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fds[0], 0u32) };
            if done != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        };
        // SAFETY: each step is a system call (nix's prctl and the
        // switch's and door's own are thin wrappers that take no lock) on
        // descriptor numbers the hook owns, on values captured before the
        // spawn; every error is a raw OS error.
        let hook = unsafe { Hook::new(fds, step) };
        (hook, door)
    }
}

/// The harness enters the cage's user namespace, made once
/// (`spawn::userns`): a root bridge's to leave root (it is [`INSIDE_UID`]
/// there, the cage's owner outside), an ordinary user's to hold the
/// capabilities that make a network namespace (it stays its own uid).
#[derive(Debug)]
struct UserSwitch {
    /// The namespace, this child's own descriptor of it.
    namespace: OwnedFd,
    /// The uid and gid the harness takes inside.
    inside: u32,
    /// Whether the supplementary groups are dropped first (root's; an
    /// ordinary user cannot, and keeps its own).
    drop_groups: bool,
}

impl UserSwitch {
    fn new(owner: &crate::owner::Owner) -> io::Result<UserSwitch> {
        static HELD: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
        let held = HELD.get_or_init(|| {
            crate::harness::spawn::hold_user_namespace(INSIDE_UID, owner.uid, owner.gid)
                .map_err(|e| e.to_string())
        });
        Self::entering(held, INSIDE_UID, true).map_err(|why| {
            io::Error::other(format!(
                "cannot make the cage's user namespace (uid {INSIDE_UID} inside, {} outside): {why}",
                owner.describe()
            ))
        })
    }

    /// An ordinary user's bridge: its own uid and gid on both sides.
    fn own() -> io::Result<UserSwitch> {
        static HELD: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let held = HELD.get_or_init(|| {
            crate::harness::spawn::hold_user_namespace(uid, uid, gid).map_err(|e| e.to_string())
        });
        Self::entering(held, uid, false).map_err(|why| {
            io::Error::other(format!(
                "cannot make a user namespace for the cage's own network: {why}. {USERNS_FIX}"
            ))
        })
    }

    /// A switch into the namespace `held` (made once per process), as
    /// uid `inside`; why not, when it could not be made.
    fn entering(
        held: &Result<OwnedFd, String>,
        inside: u32,
        drop_groups: bool,
    ) -> Result<UserSwitch, String> {
        let fd = held.as_ref().map_err(Clone::clone)?;
        Ok(UserSwitch {
            namespace: fd.try_clone().map_err(|e| e.to_string())?,
            inside,
            drop_groups,
        })
    }

    /// In the child: no supplementary group (root's, while they can still
    /// be dropped), then the namespace, in which it holds every
    /// capability until [`UserSwitch::become_inside`].
    fn enter(namespace: RawFd, drop_groups: bool) -> io::Result<()> {
        // The system calls themselves: the C library's wrappers would ask
        // every thread of the bridge to change too (the child may share
        // the bridge's memory, and with it the library's list of threads).
        if drop_groups
            // SAFETY: setgroups with no list (a null pointer and a size of 0).
            && unsafe {
                libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>())
            } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the namespace's descriptor as the child has it, and a
        // flag word.
        if unsafe { libc::syscall(libc::SYS_setns, namespace, libc::CLONE_NEWUSER) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// In the child, in the namespace: uid and gid `inside`; `exec` then
    /// leaves it no capability (a uid other than 0).
    fn become_inside(inside: u32) -> io::Result<()> {
        let id: libc::uid_t = inside;
        for call in [libc::SYS_setresgid, libc::SYS_setresuid] {
            // SAFETY: a system call with three integer arguments.
            if unsafe { libc::syscall(call, id, id, id) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// What lets an ordinary user make user namespaces where a distribution
/// restricts them.
pub const USERNS_FIX: &str = "Where the system restricts user namespaces (Ubuntu 23.10 and later, through AppArmor), install the bridge's AppArmor profile (packaging/apparmor/harness-bridge) or run the bridge from its systemd unit; elsewhere check `sysctl kernel.unprivileged_userns_clone` and `user.max_user_namespaces`. Or set `cage: {network: ports}`";

/// A loopback TCP port free right now, for a harness that serves itself
/// (`{own_port}`): the cage lets it listen there and connect there.
pub fn free_loopback_port() -> io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// The folder a harness program is installed in, to be readable: the
/// outermost `node_modules` above its real path (a CLI from a package
/// reads its whole dependency tree), else the folder that holds it.
pub fn installation(program: &Path) -> PathBuf {
    let real = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let outermost = real
        .ancestors()
        .filter(|dir| dir.file_name().is_some_and(|n| n == "node_modules"))
        .last();
    match outermost {
        Some(dir) => dir.to_path_buf(),
        None => real.parent().map_or(real.clone(), Path::to_path_buf),
    }
}

/// The TCP ports of the `http://` and `https://` URLs among `values`
/// (the port a URL names, else 80 or 443): where a harness's model
/// endpoints are, by its own settings.
pub fn url_ports<'a>(values: impl IntoIterator<Item = &'a str>) -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    for value in values {
        let mut rest = value;
        while let Some(at) = rest.find("http") {
            rest = &rest[at..];
            let (scheme_default, tail) = if let Some(tail) = rest.strip_prefix("https://") {
                (443, tail)
            } else if let Some(tail) = rest.strip_prefix("http://") {
                (80, tail)
            } else {
                rest = &rest[4..];
                continue;
            };
            let authority: &str = tail
                .split(['/', '?', '#', '"', '\'', ' ', '\n'])
                .next()
                .unwrap_or("");
            let host_port = authority.rsplit('@').next().unwrap_or("");
            // `[::1]:8080`, `host:8080`, `host`.
            let port = match host_port.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(':') || host.starts_with('[') => {
                    port.parse::<u16>().ok()
                }
                _ => None,
            };
            let bracketed_without_port = host_port.starts_with('[') && host_port.ends_with(']');
            ports.insert(match port {
                Some(port) if !bracketed_without_port => port,
                _ => scheme_default,
            });
            rest = tail;
        }
    }
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_the_urls_a_harness_is_given() {
        let ports = url_ports([
            "http://127.0.0.1:18010",
            "https://api.example.test/v1",
            "not a url",
            "base_url = \"http://localhost:9000/v1\"\nother = \"http://[::1]:7000/x\"",
            "http://user:pw@host:8443/",
            "http://[::1]/",
        ]);
        assert_eq!(
            ports.into_iter().collect::<Vec<_>>(),
            vec![80, 443, 7000, 8443, 9000, 18010]
        );
    }

    #[test]
    fn an_installation_is_its_outermost_node_modules() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir
            .path()
            .join("node_modules/@scope/cli/node_modules/dep/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("run"), "").unwrap();
        let root = dir.path().canonicalize().unwrap();
        assert_eq!(installation(&bin.join("run")), root.join("node_modules"));
        std::fs::write(dir.path().join("tool"), "").unwrap();
        assert_eq!(installation(&dir.path().join("tool")), root);
    }
}
