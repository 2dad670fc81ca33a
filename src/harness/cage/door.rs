//! A network of its own for a caged harness, with one door out.
//!
//! Between clone and exec, while it still holds the capabilities of the
//! cage's user namespace, the child makes a network namespace of its own
//! (nothing in it but a loopback: not the host's network, not the host's
//! loopback services, not another conversation's), brings its loopback
//! up, listens on [`DOOR_PORT`] there and hands that listening socket to
//! the bridge over a socket pair (`SCM_RIGHTS`). The bridge accepts on it
//! from outside and answers every connection itself (the run's MCP
//! endpoint, the model gateway): the only way out.
//!
//! Unix sockets are not network objects: a network namespace leaves a
//! pathname socket outside the workspace (a database's, a daemon's)
//! reachable. The same child installs a seccomp filter that refuses
//! `socket(AF_UNIX, …)` (pairs from `socketpair`, which reach nothing
//! outside, still work) and `io_uring_setup` (whose requests the filter
//! would not see); measured in docs/cage-measurements.md.

#![allow(
    unsafe_code,
    reason = "the door's socket is made in the child's network namespace and passed back over SCM_RIGHTS"
)]

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The port the door listens on inside every harness's namespace (each
/// namespace has a loopback of its own, so every cage uses the same).
pub const DOOR_PORT: u16 = 8119;

/// The bridge's end of a door being made: the listening socket arrives
/// on it once the child has made it.
#[derive(Debug)]
pub struct DoorPair {
    bridge: OwnedFd,
    child: OwnedFd,
}

impl DoorPair {
    /// A socket pair for one child.
    pub fn new() -> io::Result<DoorPair> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: socketpair writes two descriptors into the array.
        let made = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if made != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just made and are owned here alone.
        let (bridge, child) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(DoorPair { bridge, child })
    }

    /// Split into the bridge's end and the child's (given to its hook).
    pub fn split(self) -> (Door, OwnedFd) {
        (
            Door {
                bridge: self.bridge,
            },
            self.child,
        )
    }
}

/// The bridge's end, after the spawn.
#[derive(Debug)]
pub struct Door {
    bridge: OwnedFd,
}

impl Door {
    /// The listening socket the child made in its namespace: there once
    /// the child has called `exec` (it is sent before).
    pub fn receive(self) -> io::Result<std::net::TcpListener> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = Control::empty();
        // SAFETY: a zeroed msghdr is valid; the fields set point at the
        // buffers above, alive for the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&mut control as *mut Control).cast();
        msg.msg_controllen = std::mem::size_of::<Control>();
        // SAFETY: receives into the buffers `msg` points at.
        let got = unsafe {
            libc::recvmsg(
                self.bridge.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("the harness's door never came: {e}"),
            ));
        }
        let rights = control.header.cmsg_level == libc::SOL_SOCKET
            && control.header.cmsg_type == libc::SCM_RIGHTS
            && msg.msg_controllen >= control_len();
        if !rights || msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other(
                "the harness's door came without its socket",
            ));
        }
        // SAFETY: the kernel put one new descriptor there, now owned here.
        let listener = unsafe { OwnedFd::from_raw_fd(control.fd) };
        let listener = std::net::TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        Ok(listener)
    }
}

/// One `SCM_RIGHTS` message of one descriptor, laid out as the kernel
/// reads it (`CMSG_SPACE(sizeof(int))` bytes, aligned).
#[repr(C)]
struct Control {
    header: libc::cmsghdr,
    fd: c_int,
    _pad: c_int,
}

impl Control {
    fn empty() -> Control {
        // SAFETY: plain integers; all zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
}

/// `CMSG_LEN(sizeof(int))`.
fn control_len() -> usize {
    std::mem::size_of::<libc::cmsghdr>() + std::mem::size_of::<c_int>()
}

/// In the child, holding the capabilities of the cage's user namespace:
/// a network namespace of its own, its loopback up, the door listening
/// there and sent to the bridge over `end`. System calls only, on the
/// child's stack.
pub(super) fn open_in_child(end: RawFd) -> io::Result<()> {
    let check = |done: libc::c_long| {
        if done < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(done)
        }
    };
    // SAFETY (this block and those below): each call is a system call
    // with integer arguments or pointers to values on this stack frame,
    // alive for the call; the descriptors made are closed before return
    // or at exec (close-on-exec).
    let socket = |kind: c_int| {
        // SAFETY: a system call with integer arguments.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_socket,
                libc::AF_INET,
                kind | libc::SOCK_CLOEXEC,
                0,
            )
        };
        check(fd).map(|fd| fd as c_int)
    };
    // SAFETY: as said above: system calls with integers and pointers to
    // this frame's `ifreq` and address, alive for each call; `zeroed` of
    // `ifreq`, a C struct for which all zeroes is a valid value.
    unsafe {
        check(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNET))?;
        // The loopback up: `lo` exists in a new namespace, down.
        let probe = socket(libc::SOCK_DGRAM)?;
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let up = libc::syscall(
            libc::SYS_ioctl,
            probe,
            libc::SIOCSIFFLAGS,
            &request as *const libc::ifreq,
        );
        libc::syscall(libc::SYS_close, probe);
        check(up)?;
        let listener = socket(libc::SOCK_STREAM)?;
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_port = DOOR_PORT.to_be();
        address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        check(libc::syscall(
            libc::SYS_bind,
            listener,
            &address as *const libc::sockaddr_in,
            std::mem::size_of::<libc::sockaddr_in>(),
        ))?;
        check(libc::syscall(libc::SYS_listen, listener, 1024))?;
        let mut byte = [1u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = Control::empty();
        control.header.cmsg_len = control_len() as _;
        control.header.cmsg_level = libc::SOL_SOCKET;
        control.header.cmsg_type = libc::SCM_RIGHTS;
        control.fd = listener;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&mut control as *mut Control).cast();
        msg.msg_controllen = std::mem::size_of::<Control>();
        let sent = libc::syscall(libc::SYS_sendmsg, end, &msg as *const libc::msghdr, 0);
        libc::syscall(libc::SYS_close, listener);
        check(sent)?;
    }
    Ok(())
}

/// In the child, after `no_new_privs`: refuse new unix sockets and
/// `io_uring` for good (see the module's doc). The filter is a few
/// instructions on the child's stack.
pub(super) fn refuse_unix_sockets() -> io::Result<()> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W, sock_filter};
    const fn stmt(code: u32, k: u32) -> sock_filter {
        sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
        sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        }
    }
    // Where `seccomp_data` keeps the call's number, its architecture and
    // the low word of its first argument (little-endian machines).
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const ARG0: u32 = 16;
    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const REFUSE: u32 = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
    const NOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let filter = [
        stmt(BPF_LD | BPF_W | BPF_ABS, ARCH),
        // Another architecture's calls (a 32-bit program) are refused:
        // their numbers differ.
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, NOSYS),
        stmt(BPF_LD | BPF_W | BPF_ABS, NR),
        // x32 calls (the same architecture, numbers from 2^30): refused.
        jump(BPF_JMP | BPF_JGE | BPF_K, 0x4000_0000, 0, 1),
        stmt(BPF_RET | BPF_K, NOSYS),
        jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            libc::SYS_io_uring_setup as u32,
            0,
            1,
        ),
        stmt(BPF_RET | BPF_K, NOSYS),
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_socket as u32, 1, 0),
        stmt(BPF_RET | BPF_K, ALLOW),
        stmt(BPF_LD | BPF_W | BPF_ABS, ARG0),
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::AF_UNIX as u32, 0, 1),
        stmt(BPF_RET | BPF_K, REFUSE),
        stmt(BPF_RET | BPF_K, ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: installs the filter `program` points at (on this stack
    // frame, copied by the kernel during the call); no_new_privs is set.
    let done = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &program as *const libc::sock_fprog,
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This machine's `AUDIT_ARCH_*`.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
