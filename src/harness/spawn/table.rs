//! The child's descriptor table. A child cloned with its own copy of the
//! bridge's table holds every descriptor of every running turn (pipes,
//! sockets, pidfds, folders: thousands in a busy `serve`) until `exec`,
//! which closes them one by one; the copy and the closing grow with the
//! bridge, as `fork`'s page tables did.
//!
//! So a child shares the bridge's table when it is cloned and, as its
//! first step, takes its own copy of the low part only
//! (`close_range(n, ~0, CLOSE_RANGE_UNSHARE)`, Linux 5.9), then closes
//! in it all but its own slots. What it needs is put there first: each
//! spawner thread owns a few reserved low numbers (slots, copies of
//! `/dev/null` while idle); before the clone its child's streams, report
//! pipe and hooks' descriptors are duplicated into them, and put back to
//! `/dev/null` once the child has called `exec`. The child so holds
//! nothing of the bridge's but what it uses, not even another spawner's
//! child's pipe. A system that refuses the call (an older kernel, a
//! filter) is found once, by a probe, and gets the whole copy as before;
//! so does a bridge that cannot reserve the slots.

use std::ffi::{c_int, c_uint, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

use super::{Numbers, Plan, SignalsBlocked};

/// Slots per spawner thread: three streams, the report pipe, and the
/// cage's descriptors (up to three cgroup v1 hierarchies, the turn's
/// cgroup, the Landlock ruleset), with room to spare. A child that needs
/// more gets the whole table.
const PER_THREAD: usize = 12;

/// One spawner thread's slots.
#[derive(Debug)]
pub(super) struct Slots {
    fds: Vec<RawFd>,
    /// `/dev/null`, what an idle slot is a copy of.
    null: RawFd,
    /// Where the child's own copy of the table ends: past every thread's
    /// slots.
    below: c_uint,
}

/// Reserve `threads` blocks of slots, one per spawner thread; `None` for
/// each when a child cannot take its own part of a shared table here, or
/// the slots cannot be had (said once in the log: each child then gets a
/// copy of the whole table). The descriptors are the process's for good
/// (the spawner threads never end).
pub(super) fn reserve(threads: usize) -> Vec<Option<Slots>> {
    let mut made = Vec::with_capacity(threads * PER_THREAD + 1);
    let reserved = slot_numbers(threads * PER_THREAD + 1, &mut made).and_then(|mut all| {
        // The lowest one is what idle slots are copies of.
        let null = all.remove(0);
        let below = all.iter().max().map_or(3, |fd| fd + 1);
        let below = c_uint::try_from(below).map_err(io::Error::other)?;
        match unshares_below(below) {
            true => Ok((null, below, all)),
            false => Err(io::Error::other(
                "the kernel refuses close_range with CLOSE_RANGE_UNSHARE (Linux 5.9)",
            )),
        }
    });
    let (null, below, all) = match reserved {
        Ok(reserved) => reserved,
        Err(e) => {
            tracing::info!(
                "each harness process starts with a copy of all of the bridge's descriptors: {e}"
            );
            for fd in made {
                // SAFETY: closes a descriptor this function made.
                unsafe { libc::close(fd) };
            }
            return (0..threads).map(|_| None).collect();
        }
    };
    all.chunks(PER_THREAD)
        .map(|fds| {
            Some(Slots {
                fds: fds.to_vec(),
                null,
                below,
            })
        })
        .collect()
}

/// `n` copies of `/dev/null` at the lowest free numbers from 3, in
/// order; each one made is noted in `made` as it is.
fn slot_numbers(n: usize, made: &mut Vec<RawFd>) -> io::Result<Vec<RawFd>> {
    let null = std::fs::File::open("/dev/null")?;
    for _ in 0..n {
        // SAFETY: duplicates a descriptor this function owns.
        let fd = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        made.push(fd);
    }
    let mut all = made.clone();
    // Ascending, so that a child can close what lies between its own.
    all.sort_unstable();
    Ok(all)
}

impl Slots {
    /// Put what `plan`'s child uses into the slots and note their numbers
    /// in the plan; `None` (nothing placed: the child gets the whole
    /// table) when they do not fit or cannot be put there.
    pub(super) fn place(&self, plan: &mut Plan) -> Option<Placed<'_>> {
        let own = Numbers::own(plan);
        let needed = 4 + own.hooks.iter().map(Vec::len).sum::<usize>();
        if needed > self.fds.len() {
            return None;
        }
        match self.put(&own) {
            Ok((numbers, placed)) => {
                plan.numbers = numbers;
                Some(placed)
            }
            Err(e) => {
                tracing::warn!(
                    "a harness starts with a copy of all of the bridge's descriptors: {e}"
                );
                None
            }
        }
    }

    /// Duplicate what `own` names into the slots, in order.
    fn put(&self, own: &Numbers) -> io::Result<(Numbers, Placed<'_>)> {
        let mut placed = Placed {
            slots: self,
            used: 0,
        };
        let mut put = |fd: RawFd| -> io::Result<RawFd> {
            let slot = self.fds[placed.used];
            // SAFETY: replaces a slot (this thread's, a copy of /dev/null)
            // by a copy of a descriptor the plan owns.
            if unsafe { libc::dup3(fd, slot, libc::O_CLOEXEC) } < 0 {
                return Err(io::Error::last_os_error());
            }
            placed.used += 1;
            Ok(slot)
        };
        let mut numbers = Numbers {
            ends: [0; 3],
            report: put(own.report)?,
            hooks: Vec::with_capacity(own.hooks.len()),
            keep: None,
        };
        for (end, fd) in numbers.ends.iter_mut().zip(own.ends) {
            *end = put(fd)?;
        }
        for fds in &own.hooks {
            numbers
                .hooks
                .push(fds.iter().map(|fd| put(*fd)).collect::<io::Result<_>>()?);
        }
        numbers.keep = Some(Keep {
            below: self.below,
            slots: self.fds[..placed.used].to_vec(),
        });
        Ok((numbers, placed))
    }
}

/// Slots holding a child's descriptors; dropped, they are `/dev/null`
/// again, so the bridge keeps no copy of a pipe's end (its reader would
/// wait forever for the end of the stream).
pub(super) struct Placed<'a> {
    slots: &'a Slots,
    used: usize,
}

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        for slot in &self.slots.fds[..self.used] {
            // SAFETY: replaces this thread's slot by a copy of /dev/null.
            // On two open descriptors of this process the call has no
            // way to fail; were it to, the turn whose pipe end stayed
            // would end at its deadline, and the log says why.
            if unsafe { libc::dup3(self.slots.null, *slot, libc::O_CLOEXEC) } < 0 {
                tracing::error!(
                    slot,
                    "cannot put a spawner's slot back: {}",
                    io::Error::last_os_error()
                );
            }
        }
    }
}

/// What a child keeps of the table it shared: the part below `below`,
/// and in it only its own `slots` (ascending).
#[derive(Debug)]
pub(super) struct Keep {
    pub(super) below: c_uint,
    pub(super) slots: Vec<RawFd>,
}

/// In the child, first: take its own copy of the table's part below
/// `keep.below` (the rest it never holds), then close in it everything
/// from 3 up but its own slots (another spawner's child's pipe, the
/// bridge's own files). System calls on integers only.
pub(super) fn keep_only(keep: &Keep) -> io::Result<()> {
    close_range(keep.below, c_uint::MAX, libc::CLOSE_RANGE_UNSHARE)?;
    let mut from: c_uint = 3;
    for slot in &keep.slots {
        let slot = *slot as c_uint;
        if slot > from {
            close_range(from, slot - 1, 0)?;
        }
        from = slot + 1;
    }
    if from < keep.below {
        close_range(from, keep.below - 1, 0)?;
    }
    Ok(())
}

fn close_range(first: c_uint, last: c_uint, flags: c_uint) -> io::Result<()> {
    // SAFETY: a system call on integers.
    if unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a child cloned sharing the table can take its own copy of the
/// part below `below`: tried once, on a child that does only that and
/// looks whether a descriptor above it is gone on its side, which must
/// still be open on the bridge's.
fn unshares_below(below: c_uint) -> bool {
    /// What the probe is given: where to cut, and a descriptor past it.
    struct Probe {
        below: c_uint,
        sentinel: RawFd,
    }
    extern "C" fn probe(arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the parent's `Probe`, alive until this ends.
        let probe = unsafe { &*(arg as *const Probe) };
        if close_range(probe.below, c_uint::MAX, libc::CLOSE_RANGE_UNSHARE).is_err() {
            return 1;
        }
        // SAFETY: a flag query on a descriptor number.
        c_int::from(unsafe { libc::fcntl(probe.sentinel, libc::F_GETFD) } >= 0)
    }
    let Ok(null) = std::fs::File::open("/dev/null") else {
        return false;
    };
    // SAFETY: duplicates a descriptor this function owns, above `below`.
    let sentinel = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD_CLOEXEC, below) };
    if sentinel < 0 {
        return false;
    }
    // SAFETY: the descriptor was just made and nothing else owns it.
    let sentinel = unsafe { std::os::fd::OwnedFd::from_raw_fd(sentinel) };
    let mut arg = Probe {
        below,
        sentinel: sentinel.as_raw_fd(),
    };
    let mut stack = vec![0u8; 64 * 1024];
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    let blocked = SignalsBlocked::new();
    // SAFETY: the child runs `probe` on `stack` with every signal blocked,
    // the parent held until it exits; it makes two system calls and
    // returns, which ends it.
    let pid = unsafe {
        libc::clone(
            probe,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD,
            (&mut arg as *mut Probe).cast(),
        )
    };
    drop(blocked);
    if pid < 0 {
        return false;
    }
    let mut status: c_int = 0;
    loop {
        // SAFETY: waits for the child just made.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if waited == pid {
            break;
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
    // SAFETY: a flag query on a descriptor this function owns.
    let still_ours = unsafe { libc::fcntl(sentinel.as_raw_fd(), libc::F_GETFD) } >= 0;
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 && still_ours
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_lets_a_child_take_its_own_part_of_a_shared_table() {
        // Linux 5.9 and later: the machines the bridge is built and tested on.
        let below = std::fs::File::open("/dev/null").unwrap().as_raw_fd() as c_uint + 1;
        assert!(unshares_below(below));
    }
}
