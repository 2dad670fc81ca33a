//! `clone3` with `CLONE_INTO_CGROUP` (Linux 5.7): a child that starts in
//! its cgroup v2 instead of moving there.
//!
//! Why: a process moved into a cgroup by a write to `cgroup.procs` takes
//! a lock every fork and exit of the machine takes too, and on a host
//! whose hierarchies are not mounted with `favordynmods` its first writer
//! after a quiet spell waits for an RCU grace period while every other
//! launch and exit waits on it: at 256 conversations of 2 s turns that
//! was most of the bridge's p99. A child the clone itself puts in the
//! cgroup takes only the reader's side (and the cgroup mutex, as any
//! cgroup write does). Its fork is charged to that cgroup: where its
//! process limit is reached, the clone fails with EAGAIN.
//!
//! The C library has no wrapper that runs a function on a new stack, so
//! the call is made here, on x86_64, in a few instructions: the child
//! returns from the system call on the stack it was given and calls the
//! child function, which never returns (it calls `exec` or `_exit`).
//! Elsewhere, and on a kernel (or a seccomp filter) that refuses the
//! call, the child moves itself as its first step instead.

use std::ffi::c_void;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use libc::c_int;

/// The kernel's `struct clone_args`, up to its `cgroup` field (size 88,
/// `CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` from `linux/sched.h`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Whether this bridge still clones into cgroups: false on another
/// architecture, and from the first refusal on.
static USABLE: AtomicBool = AtomicBool::new(cfg!(target_arch = "x86_64"));

/// Whether children start in their cgroup (no move, no system-wide
/// lock): what the start-up log and `doctor` say about launches.
pub fn usable() -> bool {
    USABLE.load(Ordering::Relaxed)
}

/// Clone `child(arg)` onto `stack` with `flags` (`CLONE_*`, of which
/// the caller's `CLONE_PIDFD` stores the pidfd in `pidfd`) into the
/// cgroup v2 folder open as `cgroup`, `SIGCHLD` at its exit. The child's
/// pid; `None` when this kernel or architecture cannot (then never tried
/// again), so the caller clones the other way.
///
/// # Safety
///
/// As `clone(2)` with the same flags: `child` must never return, `arg`
/// and `stack` must outlive its use of them (shared memory: until it
/// calls `exec`; a copy: its own), and it may make only system calls.
pub unsafe fn clone_into(
    child: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
    stack: &mut [u8],
    flags: c_int,
    pidfd: &mut c_int,
    cgroup: RawFd,
) -> Option<io::Result<libc::pid_t>> {
    if !usable() {
        return None;
    }
    // The stack grows down from its end; the kernel adds the size.
    let start = stack.as_mut_ptr() as usize;
    let top = (start + stack.len()) & !15;
    let mut args = CloneArgs {
        // `flags` are plain `CLONE_*` bits, all in the low 32.
        flags: u64::from(flags as u32) | CLONE_INTO_CGROUP,
        pidfd: pidfd as *mut c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: start as u64,
        stack_size: (top - start) as u64,
        cgroup: u64::try_from(cgroup).ok()?,
        ..CloneArgs::default()
    };
    // SAFETY: the caller's contract; `args` lives across the call.
    let result = unsafe { raw(&mut args, child, arg) };
    if result >= 0 {
        return Some(libc::pid_t::try_from(result).map_err(io::Error::other));
    }
    let errno = c_int::try_from(-result).unwrap_or(libc::EIO);
    match errno {
        // No `clone3` (before 5.3, or a seccomp filter that hides it),
        // no `CLONE_INTO_CGROUP` (5.3 to 5.6: the size or the flag is
        // refused), or a filter that forbids it.
        libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM => {
            if USABLE.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    "this system refuses clone3 into a cgroup ({}): each harness process \
                     moves itself into its cgroup after it is cloned",
                    io::Error::from_raw_os_error(errno)
                );
            }
            None
        }
        _ => Some(Err(io::Error::from_raw_os_error(errno))),
    }
}

/// The system call, and in the child the call of `child(arg)` on the new
/// stack followed by `exit` with what it returns (it never does).
///
/// # Safety
///
/// [`clone_into`]'s contract, and `args` a `clone_args` whose stack is
/// 16-byte aligned at its top, alive across the call: the child runs on
/// that stack with the parent's registers and memory (with `CLONE_VM`)
/// until `child` calls `exec` or `exit`.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(
    args: &mut CloneArgs,
    child: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
) -> libc::c_long {
    let result: libc::c_long;
    // SAFETY: `clone3` with a valid `clone_args`. In the parent only rax
    // (the result), rcx and r11 (the `syscall` instruction's) change. The
    // child starts at the next instruction with rax 0, its registers as
    // the parent's, and rsp at the top of its 16-byte aligned stack: it
    // clears the frame pointer, calls `child` (r13) with `arg` (r12) and
    // exits with the result, never coming back into this function.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") std::ptr::from_mut(args),
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") child,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    result
}

/// Never called: [`USABLE`] starts false on other architectures.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw(
    _args: &mut CloneArgs,
    _child: extern "C" fn(*mut c_void) -> c_int,
    _arg: *mut c_void,
) -> libc::c_long {
    -libc::c_long::from(libc::ENOSYS)
}

/// Ask the kernel whether a child can be cloned into the cgroup v2
/// folder open as `cgroup` (a throwaway child that exits at once), as the
/// cage starts, so that [`usable`], and what the log and `doctor` say of
/// launches, are known before the first. A refusal is remembered as
/// every later one is.
pub fn probe(cgroup: RawFd) {
    extern "C" fn exit_at_once(_: *mut c_void) -> c_int {
        // SAFETY: ends the child; nothing else is touched.
        unsafe { libc::_exit(0) }
    }
    let mut stack = vec![0u8; 16 * 1024];
    let mut unused: c_int = -1;
    let blocked = super::SignalsBlocked::new();
    // SAFETY: the child only exits, with every signal blocked; the stack
    // outlives the held clone.
    let cloned = unsafe {
        clone_into(
            exit_at_once,
            std::ptr::null_mut(),
            &mut stack,
            libc::CLONE_VM | libc::CLONE_VFORK,
            &mut unused,
            cgroup,
        )
    };
    drop(blocked);
    match cloned {
        Some(Ok(pid)) => {
            let mut status = 0;
            // SAFETY: waits for (and reaps) the child made here.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
        }
        Some(Err(e)) => tracing::info!("a probe could not be cloned into a cgroup: {e}"),
        None => {}
    }
}
