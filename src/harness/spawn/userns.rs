//! A user namespace made once for a root bridge's caged harnesses: one
//! uid inside, mapped to an unprivileged uid outside (never root).
//!
//! A process may map a uid other than its own only from the namespace
//! above, so a child that made its namespace itself could map only root
//! (the bridge's uid): its harness would be root outside, owner of every
//! root-only file on the machine. Here a child is cloned into a new
//! namespace and only waits; the bridge, from outside, writes its maps
//! and opens the namespace; the child then ends, and the open descriptor
//! keeps the namespace for every harness to enter (`setns`) between
//! clone and exec.

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::SignalsBlocked;

/// The pipe's two ends, as the child has them.
struct Ends {
    read: c_int,
    write: c_int,
}

/// The child's part: wait until the bridge closes the pipe, and end.
extern "C" fn wait_for_maps(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` points at the `Ends` of `hold`, in the child's own
    // copy of the bridge's memory.
    let ends = unsafe { &*(arg as *const Ends) };
    let mut byte = 0u8;
    // SAFETY: the child closes its own copy of the write end (else the
    // read would never see the pipe end), then reads into a local byte.
    unsafe {
        libc::close(ends.write);
        libc::read(ends.read, (&mut byte as *mut u8).cast(), 1);
    }
    0
}

/// A user namespace in which uid and gid `inside` are `uid` and `gid`
/// outside, held by the descriptor returned; supplementary groups cannot
/// be set in it.
pub fn hold(inside: u32, uid: u32, gid: u32) -> io::Result<OwnedFd> {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut stack = vec![0u8; 64 * 1024];
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    let ends = Ends {
        read: read_end.as_raw_fd(),
        write: write_end.as_raw_fd(),
    };
    let blocked = SignalsBlocked::new();
    // SAFETY: without CLONE_VM the child runs `wait_for_maps` on its own
    // copy of `stack`, of `ends` and of the bridge's memory and
    // descriptors, with every signal blocked; it makes a close and a read
    // and returns, which ends it.
    let pid = unsafe {
        libc::clone(
            wait_for_maps,
            top as *mut c_void,
            libc::CLONE_NEWUSER | libc::SIGCHLD,
            (&ends as *const Ends).cast_mut().cast(),
        )
    };
    drop(blocked);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(read_end);
    let held = map_and_open(pid, inside, uid, gid);
    // The child reads the end of the pipe and ends.
    drop(write_end);
    let mut status: c_int = 0;
    loop {
        // SAFETY: waits for the child just made.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        if waited == pid
            || (waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
        {
            break;
        }
    }
    held
}

/// Write the maps of `pid`'s namespace and open it.
fn map_and_open(pid: c_int, inside: u32, uid: u32, gid: u32) -> io::Result<OwnedFd> {
    let proc = format!("/proc/{pid}");
    std::fs::write(format!("{proc}/setgroups"), "deny")?;
    std::fs::write(format!("{proc}/uid_map"), format!("{inside} {uid} 1\n"))?;
    std::fs::write(format!("{proc}/gid_map"), format!("{inside} {gid} 1\n"))?;
    Ok(std::fs::File::open(format!("{proc}/ns/user"))?.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "tier root: needs root, to map another uid; scripts/test runs it"]
    fn a_held_namespace_maps_one_uid_to_another_outside() {
        let ns = hold(1000, 65534, 65534).expect("a namespace");
        let link = std::fs::read_link(format!("/proc/self/fd/{}", ns.as_raw_fd())).unwrap();
        assert!(link.to_string_lossy().starts_with("user:["), "{link:?}");
        let mine = std::fs::read_link("/proc/self/ns/user").unwrap();
        assert_ne!(link, mine, "a namespace of its own");
    }
}
