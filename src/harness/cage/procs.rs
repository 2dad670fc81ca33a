//! The few facts containment reads about other processes from `/proc`:
//! who their parent is, when they started, whether they are zombies, and
//! one variable of the environment they were started with.

use std::collections::BTreeMap;
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
