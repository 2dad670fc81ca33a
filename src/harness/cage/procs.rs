//! The few facts containment reads about other processes from `/proc`:
//! who their parent is, when they started, whether they are zombies, one
//! variable of the environment they were started with, and which of them
//! holds a TCP connection.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

/// One line of `/proc/PID/stat`, the fields containment uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `Z` (zombie), ...
    pub state: char,
    /// The parent process.
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    /// Start time in clock ticks after boot: with the pid, it names one
    /// process even after the pid is reused.
    pub start: u64,
}

impl Stat {
    /// A zombie has exited and waits to be reaped: nothing left to kill.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// `pid (comm) state ppid pgrp session ... starttime ...`; comm may hold
/// spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        // Field 22 of the line, the 20th after the command name.
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The stat of `pid`, or `None` when there is no such process.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process id in `/proc`.
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every process with its stat, read once.
pub fn table() -> BTreeMap<i32, Stat> {
    pids()
        .into_iter()
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

/// `root`'s descendants in `table` (children, their children, ...), not
/// `root` itself.
pub fn descendants(table: &BTreeMap<i32, Stat>, root: i32) -> Vec<i32> {
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            table
                .iter()
                .filter(|(pid, s)| s.ppid == parent && **pid != root)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// The value of `name` in the environment `pid` was started with (what the
/// kernel shows in `/proc/PID/environ`; readable for processes of our own
/// user, or any as root). `None` when unreadable or absent.
pub fn env_var(pid: i32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        String::from_utf8(value.to_vec()).ok()
    })
}

/// Whether `pid`'s working directory is under `root`.
pub fn works_in(pid: i32, root: &Path) -> bool {
    std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(root))
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`): a pid
/// means something only inside its namespace. 0 when it cannot be read.
pub fn pid_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parens_does_not_shift_the_fields() {
        let line =
            "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                ppid: 17,
                pgrp: 4242,
                start: 987654
            })
        );
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("1 (x) S 0 1"), None);
    }

    #[test]
    fn descendants_follow_parents_not_pids() {
        let s = |ppid| Stat {
            state: 'S',
            ppid,
            pgrp: 1,
            start: 1,
        };
        let table = BTreeMap::from([(10, s(1)), (11, s(10)), (12, s(11)), (13, s(1)), (9, s(12))]);
        let mut found = descendants(&table, 10);
        found.sort();
        assert_eq!(found, [9, 11, 12]);
        assert!(descendants(&table, 9).is_empty());
    }

    #[test]
    fn our_own_process_reads_back() {
        let me = std::process::id() as i32;
        let stat = stat(me).unwrap();
        assert!(!stat.is_zombie());
        assert!(pids().contains(&me));
        assert!(pid_namespace() > 0);
        let path = std::env::var("PATH").ok();
        assert_eq!(env_var(me, "PATH"), path);
        assert_eq!(env_var(me, "HARNESS_BRIDGE_NO_SUCH_VARIABLE"), None);
    }
}

/// The inode of the TCP socket whose local end is `local` and remote end
/// `remote`, from the kernel's table of the network namespace process
/// `within` is in (`/proc/PID/net/tcp`, `tcp6`: a harness in a network of
/// its own has its own): a loopback connection's client side is the line
/// whose local address is the client's. `None` when no such socket is
/// open.
pub fn tcp_socket_inode(local: SocketAddr, remote: SocketAddr, within: i32) -> Option<u64> {
    let table = match local {
        SocketAddr::V4(_) => "tcp",
        SocketAddr::V6(_) => "tcp6",
    };
    let text = std::fs::read_to_string(format!("/proc/{within}/net/{table}")).ok()?;
    let (local, remote) = (proc_net_addr(local), proc_net_addr(remote));
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let same =
            |i: usize, want: &str| fields.get(i).is_some_and(|f| f.eq_ignore_ascii_case(want));
        (same(1, &local) && same(2, &remote))
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

/// An address as `/proc/net/tcp` prints it: the address's 32-bit words
/// each in the machine's byte order, in hex, then `:` and the port in hex.
fn proc_net_addr(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr.ip() {
        IpAddr::V4(ip) => vec![ip.octets()],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut text: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    text.push_str(&format!(":{:04X}", addr.port()));
    text
}

/// `root` and its descendants, read from each process's `children`
/// lists (only the tree is read, not every process on the machine); the
/// whole table is walked where the kernel does not keep those lists.
pub fn tree(root: i32) -> Vec<i32> {
    let children = |pid: i32| -> Option<Vec<i32>> {
        let mut found = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            let text = std::fs::read_to_string(task.path().join("children")).ok()?;
            found.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
        Some(found)
    };
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        match children(found[next]) {
            Some(kids) => found.extend(kids),
            None if next == 0 && stat(root).is_some() => {
                let mut all = descendants(&table(), root);
                all.insert(0, root);
                return all;
            }
            None => {}
        }
        next += 1;
    }
    found
}

/// Whether one of `pids` has the socket `inode` open.
pub fn any_holds_socket(pids: &[i32], inode: u64) -> bool {
    let wanted = format!("socket:[{inode}]");
    pids.iter().any(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == wanted.as_str())
            })
    })
}

#[cfg(test)]
mod socket_tests {
    use super::*;

    /// This process's own connection is found in the kernel's table, and
    /// this process holds it; no other process does.
    #[test]
    fn a_loopback_connection_is_found_and_its_holder_known() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let _accepted = listener.accept().unwrap();
        let me = std::process::id() as i32;
        let inode =
            tcp_socket_inode(client.local_addr().unwrap(), server, me).expect("in the table");
        let me = std::process::id() as i32;
        assert!(any_holds_socket(&[me], inode));
        assert!(!any_holds_socket(&[1], inode) || me == 1);
        assert_eq!(
            proc_net_addr("127.0.0.1:80".parse().unwrap()),
            if cfg!(target_endian = "little") {
                "0100007F:0050"
            } else {
                "7F000001:0050"
            }
        );
    }

    /// A process's tree holds its children and their children, and is the
    /// same the whole table would give.
    #[test]
    fn a_tree_is_read_from_the_children_lists() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut found = Vec::new();
        for _ in 0..200 {
            found = tree(pid);
            if found.len() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut whole = descendants(&table(), pid);
        whole.insert(0, pid);
        for pid in found.iter().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = child.wait();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found, whole);
    }
}
