//! The turn marker: a variable every harness is started with
//! (`HARNESS_BRIDGE_TURN=<bridge>-<turn>`), inherited by whatever it
//! starts, and readable in `/proc/PID/environ` by the bridge's user. It
//! names the turn a process belongs to when nothing else does: after the
//! process left the harness's group and its parent died.
//!
//! The bridge is named by its pid namespace, pid and start time, so a
//! marker outlives the bridge meaningfully: the next bridge can tell that
//! the one that started a process is gone (same namespace, and no process
//! with that pid and start time), and only then kills it.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::procs;

/// The variable that carries the marker.
pub const TURN_ENV: &str = "HARNESS_BRIDGE_TURN";

/// How many times a sweep looks again for processes started while it was
/// killing (a process forking as fast as it is killed is the cgroup's job).
pub(super) const ROUNDS: usize = 8;
/// How long killed processes get to die before a sweep stops waiting.
const DEATH_WAIT: Duration = Duration::from_secs(5);

/// One bridge process, for as long as the machine is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BridgeId {
    /// The pid namespace's inode: a pid from another namespace means nothing here.
    pub ns: u64,
    /// The bridge's pid.
    pub pid: i32,
    /// Its start time (clock ticks after boot): the pid may be reused.
    pub start: u64,
}

impl BridgeId {
    /// This process.
    pub fn current() -> BridgeId {
        let pid = std::process::id() as i32;
        BridgeId {
            ns: procs::pid_namespace(),
            pid,
            start: procs::stat(pid).map_or(0, |s| s.start),
        }
    }

    /// `ns-pid-start`, as written into names.
    pub fn parse(text: &str) -> Option<BridgeId> {
        let mut parts = text.split('-');
        let id = BridgeId {
            ns: parts.next()?.parse().ok()?,
            pid: parts.next()?.parse().ok()?,
            start: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(id)
    }

    /// Whether the process this names still runs.
    pub fn alive(&self) -> bool {
        procs::stat(self.pid).is_some_and(|s| s.start == self.start && !s.is_zombie())
    }

    /// A bridge of our pid namespace, not us, that is gone: what it left
    /// is ours to end.
    pub fn is_gone(&self, ours: &BridgeId) -> bool {
        self.ns == ours.ns && self != ours && !self.alive()
    }
}

impl fmt::Display for BridgeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.ns, self.pid, self.start)
    }
}

/// One harness process of one bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The bridge that started it.
    pub bridge: BridgeId,
    /// Its number within that bridge.
    pub seq: u64,
}

impl Marker {
    /// `ns-pid-start-seq`.
    pub fn parse(text: &str) -> Option<Marker> {
        let (bridge, seq) = text.rsplit_once('-')?;
        Some(Marker {
            bridge: BridgeId::parse(bridge)?,
            seq: seq.parse().ok()?,
        })
    }
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.bridge, self.seq)
    }
}

/// SIGKILL every live process whose marker `belongs` says so, among
/// `candidates` (read again each round, so what they start while being
/// killed is found too). Returns the processes killed, with their start
/// times.
pub fn kill_where(
    candidates: impl Fn() -> Vec<i32>,
    belongs: impl Fn(&str) -> bool,
) -> BTreeSet<(i32, u64)> {
    let me = std::process::id() as i32;
    let mut killed = BTreeSet::new();
    for _ in 0..ROUNDS {
        let mut found = false;
        for pid in candidates() {
            if pid == me {
                continue;
            }
            let Some(stat) = procs::stat(pid) else {
                continue;
            };
            if stat.is_zombie() || killed.contains(&(pid, stat.start)) {
                continue;
            }
            if procs::env_var(pid, TURN_ENV).is_some_and(|m| belongs(&m)) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                killed.insert((pid, stat.start));
                found = true;
            }
        }
        if !found {
            break;
        }
    }
    killed
}

/// Wait (at most [`DEATH_WAIT`]) until every process in `killed` has died.
pub(super) fn wait_dead(killed: &BTreeSet<(i32, u64)>) {
    let until = Instant::now() + DEATH_WAIT;
    let alive = |(pid, start): &(i32, u64)| {
        procs::stat(*pid).is_some_and(|s| s.start == *start && !s.is_zombie())
    };
    while killed.iter().any(alive) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kill every process (that this user may read) left by a bridge of our
/// namespace that is gone, and wait for them to die. Returns how many.
pub fn sweep_gone(ours: &BridgeId) -> usize {
    let killed = kill_where(procs::pids, |marker| {
        Marker::parse(marker).is_some_and(|m| m.bridge.is_gone(ours))
    });
    wait_dead(&killed);
    killed.len()
}

/// Kill every process that carries exactly `marker`, and wait for them
/// to die. Returns how many.
pub fn kill_marked(marker: &str) -> usize {
    let killed = kill_where(procs::pids, |m| m == marker);
    wait_dead(&killed);
    killed.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_reads_back_and_nothing_else_does() {
        let marker = Marker {
            bridge: BridgeId {
                ns: 4026531836,
                pid: 4242,
                start: 98765,
            },
            seq: 7,
        };
        assert_eq!(marker.to_string(), "4026531836-4242-98765-7");
        assert_eq!(Marker::parse(&marker.to_string()), Some(marker));
        for bad in ["", "1-2-3", "1-2-3-4-5", "a-2-3-4", "1-2-3-x", "-1-2-3"] {
            assert_eq!(Marker::parse(bad), None, "{bad}");
        }
        assert_eq!(BridgeId::parse("1-2-3-4"), None);
    }

    #[test]
    fn only_a_dead_bridge_of_our_namespace_is_gone() {
        let me = BridgeId::current();
        assert!(me.alive());
        assert!(!me.is_gone(&me));
        let restarted = BridgeId {
            start: me.start + 1,
            ..me
        };
        assert!(restarted.is_gone(&me), "same pid, another start: gone");
        let elsewhere = BridgeId {
            ns: me.ns + 1,
            ..restarted
        };
        assert!(
            !elsewhere.is_gone(&me),
            "another namespace is not ours to judge"
        );
    }
}
