//! Containment where cgroups are not available: the bridge becomes a
//! child subreaper (`PR_SET_CHILD_SUBREAPER`), so a process a harness
//! starts stays a descendant of the bridge even after its parent dies
//! (it is re-parented to the bridge, not to init). At the end of a turn,
//! the bridge's descendants that carry the turn's marker are killed and
//! those re-parented to it are reaped.
//!
//! Reaping is by pid, never `waitpid(-1)`, which would take the exit of
//! a harness from the runtime that waits for it. The pids of the children
//! the launcher started are kept here (taken under the same lock as the
//! spawn), and only other children — adopted ones — are reaped, and only
//! those outside the bridge's own process group: a program embedding the
//! bridge that starts children of its own keeps them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{Pid, getpgrp};

use super::marker;
use super::procs;

/// How long killed processes get to be gone before the bridge stops
/// waiting to reap them (a later sweep reaps what is left).
const REAP_WAIT: Duration = Duration::from_secs(5);

/// The children the launcher started: pid → start time.
static OWN: Mutex<BTreeMap<i32, u64>> = Mutex::new(BTreeMap::new());

fn own() -> std::sync::MutexGuard<'static, BTreeMap<i32, u64>> {
    OWN.lock().unwrap_or_else(|p| p.into_inner())
}

fn me() -> i32 {
    std::process::id() as i32
}

/// Make this process the subreaper of everything it starts; the system's
/// refusal as it gave it.
pub fn enable() -> Result<(), nix::errno::Errno> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Around the launcher's `clone`: the child noted as the launcher's own
/// before any sweep can see it exit (the lock is held across).
pub fn noting(
    clone: &mut dyn FnMut() -> std::io::Result<libc::pid_t>,
) -> std::io::Result<libc::pid_t> {
    let mut own = own();
    let pid = clone()?;
    if let Some(stat) = procs::stat(pid) {
        own.insert(pid, stat.start);
    }
    Ok(pid)
}

/// The launcher has waited for `pid`: it is no longer a child.
pub fn forget(pid: i32) {
    own().remove(&pid);
}

/// Kill the bridge's descendants that carry `marker` and reap them.
/// Returns how many were killed.
pub fn clear_turn(marker: &str) -> usize {
    let killed = kill_turn(marker);
    reap(&killed);
    killed.len()
}

/// SIGKILL the bridge's descendants that carry `marker`, without waiting.
pub fn kill_turn(marker: &str) -> BTreeSet<(i32, u64)> {
    marker::kill_where(
        || procs::descendants(&procs::table(), me()),
        |m| m == marker,
    )
}

/// Kill the bridge's descendants that carry `marker` but are no longer
/// below `leader` (what a kept harness's turn detached), and reap them.
/// Returns how many were killed.
pub fn clear_detached(marker: &str, leader: i32) -> usize {
    let killed = super::kill_outside(
        || {
            procs::descendants(&procs::table(), me())
                .into_iter()
                .filter(|pid| procs::env_var(*pid, marker::TURN_ENV).as_deref() == Some(marker))
                .collect()
        },
        leader,
    );
    reap(&killed);
    killed.len()
}

/// Kill every descendant (when the bridge exits: whatever is left was
/// started by a turn). Returns how many.
pub fn kill_descendants() -> usize {
    let killed = super::kill_rounds(4, |table| procs::descendants(table, me()));
    reap(&killed);
    killed.len()
}

/// Reap `killed` as they die (bounded), and any other adopted child that
/// has died meanwhile.
fn reap(killed: &BTreeSet<(i32, u64)>) {
    let until = Instant::now() + REAP_WAIT;
    let mut waiting: Vec<(i32, u64)> = killed.iter().copied().collect();
    loop {
        reap_adopted();
        // Still running, or dead and ours to reap: wait on. Gone, or
        // dead with a living parent that will reap it: done.
        waiting.retain(|(pid, start)| {
            procs::stat(*pid)
                .is_some_and(|s| s.start == *start && (!s.is_zombie() || s.ppid == me()))
        });
        if waiting.is_empty() || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reap every adopted child that has died: dead children of the bridge
/// the launcher did not start, outside the bridge's own group.
pub fn reap_adopted() {
    let me = me();
    let group = getpgrp().as_raw();
    let mut own = own();
    let table = procs::table();
    own.retain(|pid, start| table.get(pid).is_some_and(|s| s.start == *start));
    for (pid, stat) in &table {
        if stat.ppid == me && stat.is_zombie() && stat.pgrp != group && !own.contains_key(pid) {
            let _ = waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}
