//! The child's descriptor table. A child cloned with its own copy of the
//! bridge's table holds every descriptor of every running turn (pipes,
//! sockets, pidfds, folders: thousands in a busy `serve`) until `exec`,
//! which closes them one by one; the copy and the closing grow with the
//! bridge, as `fork`'s page tables did.
//!
//! So a child shares the bridge's table when it is cloned and, as its
//! first step, takes its own copy of the low part only
//! (`close_range(n, ~0, CLOSE_RANGE_UNSHARE)`, Linux 5.9). What it needs is
//! put there first: each spawner thread owns a few reserved low numbers
//! (slots, copies of `/dev/null` while idle); before the clone its
//! child's streams, report pipe and hooks' descriptors are duplicated
//! into them, and put back to `/dev/null` once the child has called
//! `exec`. A system that refuses the call (an older kernel, a filter) is
//! found once, by a probe, and gets the whole copy as before.

use std::ffi::{c_int, c_uint, c_void};
use std::io;
use std::os::fd::{IntoRawFd, RawFd};

use super::{Numbers, Plan};

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
/// each where a child cannot take its own part of a shared table. The
/// descriptors are the process's for good (the spawner threads never
/// end).
pub(super) fn reserve(threads: usize) -> io::Result<Vec<Option<Slots>>> {
    let null = std::fs::File::open("/dev/null")?.into_raw_fd();
    let mut all = Vec::with_capacity(threads * PER_THREAD);
    for _ in 0..threads * PER_THREAD {
        // SAFETY: duplicates a descriptor this function owns.
        let fd = unsafe { libc::fcntl(null, libc::F_DUPFD_CLOEXEC, 3) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        all.push(fd);
    }
    let below = all
        .iter()
        .max()
        .map_or(3, |fd| fd + 1)
        .try_into()
        .map_err(io::Error::other)?;
    if !unshares_below(below) {
        tracing::info!(
            "this system gives a new process no part of a shared descriptor table \
             (close_range with CLOSE_RANGE_UNSHARE, Linux 5.9): each harness starts \
             with a copy of all of the bridge's"
        );
        for fd in all {
            // SAFETY: closes a descriptor this function made.
            unsafe { libc::close(fd) };
        }
        return Ok((0..threads).map(|_| None).collect());
    }
    Ok(all
        .chunks(PER_THREAD)
        .map(|fds| {
            Some(Slots {
                fds: fds.to_vec(),
                null,
                below,
            })
        })
        .collect())
}

impl Slots {
    /// Put what `plan`'s child uses into the slots and note their numbers
    /// in the plan; `None` (nothing placed) when they do not fit.
    pub(super) fn place(&self, plan: &mut Plan) -> io::Result<Option<Placed<'_>>> {
        let own = Numbers::own(plan);
        let needed = 4 + own.hooks.iter().map(Vec::len).sum::<usize>();
        if needed > self.fds.len() {
            return Ok(None);
        }
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
            keep_below: Some(self.below),
        };
        for (end, fd) in numbers.ends.iter_mut().zip(own.ends) {
            *end = put(fd)?;
        }
        for fds in &own.hooks {
            numbers
                .hooks
                .push(fds.iter().map(|fd| put(*fd)).collect::<io::Result<_>>()?);
        }
        plan.numbers = numbers;
        Ok(Some(placed))
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
            // SAFETY: replaces this thread's slot by a copy of /dev/null;
            // it cannot fail on two open descriptors but for a signal,
            // and a slot left as it was is replaced at its next use.
            unsafe { libc::dup3(self.slots.null, *slot, libc::O_CLOEXEC) };
        }
    }
}

/// Whether a child cloned sharing the table can take its own copy of the
/// part below `below`: tried once, on a child that does only that.
fn unshares_below(below: c_uint) -> bool {
    extern "C" fn probe(arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the parent's `below`, alive until this ends.
        let below = unsafe { *(arg as *const c_uint) };
        // SAFETY: a system call on integers.
        let done = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                below,
                c_uint::MAX,
                libc::CLOSE_RANGE_UNSHARE,
            )
        };
        c_int::from(done != 0)
    }
    let mut below = below;
    let mut stack = vec![0u8; 64 * 1024];
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    let mut all: libc::sigset_t;
    let mut old: libc::sigset_t;
    // SAFETY: the child runs `probe` on `stack` with every signal blocked
    // (no handler of the bridge runs in it), the parent held until it
    // exits; it makes one system call and returns, which ends it.
    let pid = unsafe {
        all = std::mem::zeroed();
        old = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            probe,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD,
            (&mut below as *mut c_uint).cast(),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        pid
    };
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
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn this_kernel_lets_a_child_take_its_own_part_of_a_shared_table() {
        // Linux 5.9 and later: the machines the bridge is built and tested on.
        let below = std::fs::File::open("/dev/null").unwrap().as_raw_fd() as c_uint + 1;
        assert!(unshares_below(below));
    }
}
