//! The one way a harness process is started: `clone` sharing the
//! bridge's memory, the bridge's calling thread held until the child has
//! called `exec` (what `posix_spawn` does), instead of `fork`.
//!
//! Why: `fork` copies the page tables of every mapping and thread stack of
//! the bridge under its address-space lock, so its cost grows with the
//! bridge (a serve with hundreds of runs: milliseconds per launch, and the
//! other threads stall on the lock meanwhile). A child that shares the
//! memory costs the same whatever the bridge's size (`benches/spawn.rs`).
//!
//! What the child does between `clone` and `exec` — its own process
//! group, the parent-death signal, the standard streams, the working
//! directory, then the cage's steps (cgroups, Landlock) — is system calls
//! only, on what the parent prepared: no allocation, no lock, nothing a
//! library call could hold elsewhere, because the memory is the bridge's.
//! An error is reported through a close-on-exec pipe.
//!
//! A child that has a cgroup v2 of its own is cloned into it (`clone3`
//! with `CLONE_INTO_CGROUP`, see `clone3`): a move after the clone takes
//! a lock every fork and exit of the machine waits on.
//!
//! The child shares the bridge's descriptor table too, and its first step
//! takes its own copy of only the few low numbers its streams and the
//! cage's descriptors were put in (`table`): a copy of the whole table
//! would hold, and `exec` close one by one, every descriptor of every
//! other running turn.
//!
//! Exits are taken by one reaper thread, woken by the kernel through an
//! epoll set of the children's pidfds (readable when a process has
//! exited): each harness is reaped the moment it ends, however busy the
//! runtime its run waits on, with no signal handler and no scan of every
//! child.
//!
//! `HARNESS_BRIDGE_SPAWN=fork` starts children by `fork` instead (the same
//! steps, in a copy of the bridge): for a system whose `clone` misbehaves
//! when memory is shared, and for measuring the two in one run.

#![allow(
    unsafe_code,
    reason = "the one spawn function: clone3/vfork, the descriptor table and the child's steps before exec are system calls no safe crate makes here"
)]

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::ffi::{CString, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

mod clone3;
mod table;
mod userns;
use table::Slots;

pub use clone3::{probe as can_clone_into, usable as clones_into_cgroups};
pub use userns::hold as hold_user_namespace;

/// The variable that chooses how children are started: `vfork` (the
/// default) or `fork`.
pub const SPAWN_ENV: &str = "HARNESS_BRIDGE_SPAWN";

/// The harness's stdout, read by the decoder.
pub type Stdout = pipe::Receiver;
/// The harness's stdin, kept open for a live harness.
pub type Stdin = pipe::Sender;
/// The harness's stderr.
pub type Stderr = pipe::Receiver;

/// How a child is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `clone` sharing memory, the caller held until `exec`.
    Vfork,
    /// `clone` copying memory (what `fork` does).
    Fork,
}

impl Method {
    /// The process-wide choice, read once from [`SPAWN_ENV`]; anything
    /// but `fork` is the default.
    pub fn chosen() -> Method {
        static CHOSEN: OnceLock<Method> = OnceLock::new();
        *CHOSEN.get_or_init(
            || match std::env::var(SPAWN_ENV).as_deref().map(str::trim) {
                Ok("fork") => Method::Fork,
                Ok("" | "vfork") | Err(_) => Method::Vfork,
                Ok(other) => {
                    tracing::warn!(
                        "{SPAWN_ENV} is `{other}`; it must be vfork or fork: using vfork"
                    );
                    Method::Vfork
                }
            },
        )
    }
}

/// A step the child takes before `exec`: system calls only, on what was
/// prepared before the spawn (see the module's doc). The descriptors it
/// uses are given to it, not captured: in the child they may have other
/// numbers (the spawner threads' slots).
pub struct Hook {
    fds: Vec<OwnedFd>,
    step: Step,
}

/// A hook's system calls, given the numbers its descriptors have in the
/// child, in the order they were handed to [`Hook::new`].
type Step = Box<dyn FnMut(&[RawFd]) -> io::Result<()> + Send + Sync>;

impl Hook {
    /// A step on `fds` (owned by the hook until the spawn is over).
    ///
    /// # Safety
    ///
    /// `step` runs in the child between clone and `exec`, where it may
    /// share the bridge's memory (`vfork`, `clone3` with `CLONE_VM`) while
    /// the bridge's other threads hold its locks: it must make system
    /// calls only, on the descriptor numbers it is given and on what was
    /// prepared before the spawn — no allocation or freeing, no lock (the
    /// C library's wrappers that take one included), no panic, no output
    /// but through those system calls — and return an error as a raw OS
    /// error. The compiler cannot check this; each caller says why its
    /// step keeps to it.
    pub unsafe fn new(
        fds: Vec<OwnedFd>,
        step: impl FnMut(&[RawFd]) -> io::Result<()> + Send + Sync + 'static,
    ) -> Hook {
        Hook {
            fds,
            step: Box::new(step),
        }
    }
}

/// What to start.
pub struct Request<'a> {
    /// Path of the program (resolved: no search of `PATH`).
    pub program: &'a Path,
    /// Arguments after the program's name.
    pub args: &'a [String],
    /// Working directory.
    pub cwd: &'a Path,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Whether stdin is a pipe (else `/dev/null`).
    pub stdin: bool,
    /// Steps before `exec`, in order, after the process group, the
    /// parent-death signal, the streams and the working directory.
    pub hooks: Vec<Hook>,
    /// What runs around the clone (see [`Around`]).
    pub around: Option<Around>,
    /// The cgroup v2 the child starts in, if any.
    pub cgroup: Option<Cgroup>,
}

/// A cgroup v2 a child starts in: put there by the clone where the kernel
/// can ([`clones_into_cgroups`]), else moved there by `enter`, its first
/// step before the request's hooks.
pub struct Cgroup {
    /// The cgroup's folder, open.
    pub dir: OwnedFd,
    /// How the child moves itself in where the clone cannot put it.
    pub enter: Hook,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("program", &self.program)
            .field("cwd", &self.cwd)
            .field("hooks", &self.hooks.len())
            .finish_non_exhaustive()
    }
}

/// A started child and its pipes.
#[derive(Debug)]
pub struct Spawned {
    /// The process.
    pub process: Process,
    /// Its stdin, when asked for.
    pub stdin: Option<Stdin>,
    /// Its stdout.
    pub stdout: Stdout,
    /// Its stderr.
    pub stderr: Stderr,
}

/// Bytes of stack the child runs on until `exec` (its steps are shallow).
const CHILD_STACK: usize = 256 * 1024;

/// Everything the child needs, prepared by the caller and owned here: the
/// child reads it in place (shared memory) or in its copy (`fork`).
struct Plan {
    program: CString,
    /// Owned by the plan: `argv` and `envp` point into them.
    _strings: (Vec<CString>, Vec<CString>),
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    /// The child's stdin, stdout, stderr, all above 2; closed in the
    /// parent once the child has them.
    ends: [OwnedFd; 3],
    /// The report pipe: read end, write end (the child's).
    report: (OwnedFd, OwnedFd),
    parent: libc::pid_t,
    mask: libc::sigset_t,
    /// The steps before `exec`; with a cgroup, its `enter` first.
    hooks: Vec<Hook>,
    around: Option<Around>,
    /// The cgroup's folder the clone puts the child in.
    cgroup: Option<OwnedFd>,
    /// The clone put the child in its cgroup: it skips the first hook
    /// (the cgroup's `enter`).
    born_in_cgroup: bool,
    /// The numbers the child's descriptors have in the child, filled in
    /// just before the clone.
    numbers: Numbers,
}

/// Where the child finds what it uses: its three streams, the report
/// pipe, each hook's descriptors; and, when it shares the bridge's
/// table until its first step, what it keeps of it.
#[derive(Default)]
struct Numbers {
    ends: [RawFd; 3],
    report: RawFd,
    hooks: Vec<Vec<RawFd>>,
    keep: Option<table::Keep>,
}

impl Numbers {
    /// The descriptors' own numbers (the child gets a copy of the table).
    fn own(plan: &Plan) -> Numbers {
        Numbers {
            ends: [0, 1, 2].map(|i| plan.ends[i].as_raw_fd()),
            report: plan.report.1.as_raw_fd(),
            hooks: plan
                .hooks
                .iter()
                .map(|hook| hook.fds.iter().map(AsRawFd::as_raw_fd).collect())
                .collect(),
            keep: None,
        }
    }
}

// SAFETY: the raw pointers point into strings the plan itself owns (moved
// with it, their heap buffers unmoved); nothing else refers to them.
unsafe impl Send for Plan {}

/// What runs around the `clone` itself, on the thread that makes it: how
/// the cage notes a child as its own before anything else could see it
/// exit. Given the clone, returns its pid.
pub type Around = fn(&mut dyn FnMut() -> io::Result<libc::pid_t>) -> io::Result<libc::pid_t>;

/// Start `request` by `method`: the child in a process group of its own,
/// with the parent-death signal, its streams piped, and none of the
/// bridge's other descriptors (with `fork`, or where the kernel refuses
/// the shared table: a copy of all of them, close-on-exec).
///
/// The `clone` is made on one of the bridge's spawner threads, never on
/// a runtime worker: the steps before `exec` can take milliseconds (a
/// move into a cgroup, where the clone cannot place the child, waits for
/// the kernel), during which the thread that cloned is held. The spawner
/// threads live as long as the bridge, so the parent-death signal (which
/// follows the thread that cloned) means the bridge has ended.
pub async fn spawn(request: Request<'_>, method: Method) -> io::Result<Spawned> {
    let (plan, (stdin, stdout, stderr)) = plan(request)?;
    let process = Spawner::get()?.start(plan, method).await?;
    Ok(Spawned {
        process,
        stdin: stdin.map(pipe::Sender::from_owned_fd).transpose()?,
        stdout: pipe::Receiver::from_owned_fd(stdout)?,
        stderr: pipe::Receiver::from_owned_fd(stderr)?,
    })
}

/// Start the spawner threads now, while the bridge has few descriptors
/// open: their slots are low numbers, and each child's own part of the
/// table is small. `serve` and the relay call it as they start;
/// otherwise the first spawn does.
pub fn ready() -> io::Result<()> {
    Spawner::get().map(drop)
}

/// The parent's ends of the child's stdin (when piped), stdout, stderr.
type ParentEnds = (Option<OwnedFd>, OwnedFd, OwnedFd);

/// The plan for `request`, and the parent's ends of the child's streams.
fn plan(request: Request<'_>) -> io::Result<(Plan, ParentEnds)> {
    let cstring = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a NUL byte in a harness's program, argument or environment",
            )
        })
    };
    let program = cstring(request.program.as_os_str().as_bytes())?;
    let mut args = vec![program.clone()];
    for arg in request.args {
        args.push(cstring(arg.as_bytes())?);
    }
    let mut vars = Vec::with_capacity(request.env.len());
    for (name, value) in &request.env {
        vars.push(cstring(format!("{name}={value}").as_bytes())?);
    }
    let (stdin_child, stdin_parent) = if request.stdin {
        let (read, write) = pipe_above_stdio()?;
        (read, Some(write))
    } else {
        (dev_null()?, None)
    };
    let (stdout_parent, stdout_child) = pipe_above_stdio()?;
    let (stderr_parent, stderr_child) = pipe_above_stdio()?;
    let report = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (cgroup, hooks) = match request.cgroup {
        Some(Cgroup { dir, enter }) => (
            Some(dir),
            std::iter::once(enter).chain(request.hooks).collect(),
        ),
        None => (None, request.hooks),
    };
    let plan = Plan {
        argv: pointers(&args),
        envp: pointers(&vars),
        _strings: (args, vars),
        program,
        cwd: cstring(request.cwd.as_os_str().as_bytes())?,
        ends: [stdin_child, stdout_child, stderr_child],
        report,
        parent: nix::unistd::getpid().as_raw(),
        // SAFETY: a zeroed sigset is a valid value, filled before use.
        mask: unsafe { std::mem::zeroed() },
        hooks,
        around: request.around,
        cgroup,
        born_in_cgroup: false,
        numbers: Numbers::default(),
    };
    Ok((plan, (stdin_parent, stdout_parent, stderr_parent)))
}

/// On a spawner thread: clone the child by `method`, wait until it has
/// called `exec` (or failed to: then it is reaped and its error
/// returned). Its pid and pidfd.
fn start(
    mut plan: Plan,
    method: Method,
    slots: Option<&Slots>,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let mut stack = vec![0u8; CHILD_STACK];
    let around = plan.around.take();
    // Shared memory only: a copy (`fork`) would go on after the clone
    // while the slots it still shares are put back.
    let placed = match slots {
        Some(slots) if method == Method::Vfork => slots.place(&mut plan),
        _ => None,
    };
    if placed.is_none() {
        plan.numbers = Numbers::own(&plan);
    }
    let mut pidfd = None;
    let mut clone = || -> io::Result<libc::pid_t> {
        let (pid, fd) = clone_child(&mut plan, &mut stack, method)?;
        pidfd = Some(fd);
        Ok(pid)
    };
    let cloned = match around {
        Some(around) => around(&mut clone),
        None => clone(),
    };
    // The child has called `exec` or exited: what it took from the slots
    // is its own, and the bridge's copies go back to being placeholders.
    drop(placed);
    let pid = cloned?;
    let pidfd = pidfd.ok_or_else(|| io::Error::other("the clone gave no pidfd"))?;
    let Plan {
        ends,
        report: (report, report_write),
        ..
    } = plan;
    drop((ends, report_write));
    // EOF: the child called `exec`; four bytes: the errno it failed with.
    let mut failed = [0u8; 4];
    if read_full(&report, &mut failed) == failed.len() {
        let _ = reap(&pidfd, false);
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(failed)));
    }
    Ok((pid, pidfd))
}

/// Null-terminated pointers into `strings` (which outlive the spawn).
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A close-on-exec pipe (read end, write end) whose ends are not 0, 1 or
/// 2, so the child's `dup2` onto its standard streams never overwrites one
/// of them (a bridge started with a standard stream closed).
fn pipe_above_stdio() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn dev_null() -> io::Result<OwnedFd> {
    let file = std::fs::File::open("/dev/null")?;
    above_stdio(file.into())
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let moved = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: `fcntl` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Read until `buf` is full or EOF; how many bytes came.
fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break,
        }
    }
    got
}

/// Every signal blocked on the calling thread until dropped: a child
/// cloned meanwhile starts with them blocked, so no handler of the
/// bridge's runs in it (on memory it may share) before it has set its
/// own.
struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    fn new() -> SignalsBlocked {
        // SAFETY: plain calls on local sigsets (a zeroed one is valid).
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            SignalsBlocked { old }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// `clone` the child onto `stack` with every signal blocked in the
/// calling thread (restored after): the child's pid and pidfd.
fn clone_child(
    plan: &mut Plan,
    stack: &mut [u8],
    method: Method,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let blocked = SignalsBlocked::new();
    // The child restores the bridge's mask once its handlers are reset.
    plan.mask = blocked.old;
    let shared = match method {
        Method::Vfork => libc::CLONE_VM | libc::CLONE_VFORK,
        Method::Fork => 0,
    } | match (method, &plan.numbers.keep) {
        // Only a child that holds its parent until `exec` may share the
        // table: the slots are put back once the clone returns.
        (Method::Vfork, Some(_)) => libc::CLONE_FILES,
        _ => 0,
    };
    let mut pidfd: c_int = -1;
    let into = plan.cgroup.as_ref().map(AsRawFd::as_raw_fd);
    // Read by the child: set before the clone, cleared if it is refused.
    plan.born_in_cgroup = into.is_some();
    let arg = plan as *mut Plan as *mut c_void;
    // SAFETY: `child` runs on `stack`, which lives past the call (the
    // parent is held until the child has called `exec` or exited when the
    // memory is shared; a copy has its own); `plan` likewise. The child
    // makes only system calls (see `child`) and never returns.
    let cloned = into.and_then(|dir| unsafe {
        clone3::clone_into(
            child,
            arg,
            stack,
            shared | libc::CLONE_PIDFD,
            &mut pidfd,
            dir,
        )
    });
    let cloned = cloned.unwrap_or_else(|| {
        plan.born_in_cgroup = false;
        // The stack grows down from its end, aligned to 16 bytes.
        let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
        // SAFETY: as above.
        let pid = unsafe {
            libc::clone(
                child,
                top as *mut c_void,
                shared | libc::CLONE_PIDFD | libc::SIGCHLD,
                arg,
                &mut pidfd as *mut c_int,
            )
        };
        if pid < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(pid)
        }
    });
    drop(blocked);
    let pid = cloned?;
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor there.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd) }))
}

/// The child, between `clone` and `exec`. System calls only: in the
/// shared case the memory is the bridge's, other threads of which go on
/// running (a lock they hold would never be released here), and the
/// thread-local `errno` written is the held caller's own.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Plan`, alive until `exec` (above).
    let plan = unsafe { &mut *(arg as *mut Plan) };
    let errno = match own_table(plan).and_then(|()| prepare(plan)) {
        Ok(()) => {
            // SAFETY: pointers into strings the parent keeps alive.
            unsafe {
                libc::execve(
                    plan.program.as_ptr(),
                    plan.argv.as_ptr(),
                    plan.envp.as_ptr(),
                )
            };
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        }
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    };
    let bytes = errno.to_ne_bytes();
    // SAFETY: a write on the report pipe, then the end of the child.
    unsafe {
        libc::write(plan.numbers.report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// A child cloned sharing the bridge's descriptor table takes its own
/// copy of the part below the slots' end, before anything else, and
/// keeps only its own slots in it: the rest (every pipe, socket and
/// folder of every other turn) it never holds, so its `exec` has nothing
/// of them to close.
fn own_table(plan: &Plan) -> io::Result<()> {
    match &plan.numbers.keep {
        Some(keep) => table::keep_only(keep),
        None => Ok(()),
    }
}

fn prepare(plan: &mut Plan) -> io::Result<()> {
    let check = |done: c_int| {
        if done < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: system calls on values the parent prepared; see `child`.
    unsafe {
        // Handlers are the bridge's code: back to the defaults, so that
        // a signal before `exec` does what it would do to the program.
        // (SIGPIPE too, which the bridge ignores and its programs expect.)
        let mut old: libc::sigaction = std::mem::zeroed();
        for signal in 1..=libc::SIGRTMAX() {
            if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && (old.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
                && old.sa_sigaction != libc::SIG_DFL
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        check(libc::setpgid(0, 0))?;
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0))?;
        // Started by a bridge that already ended: the signal above came
        // too late to be sent.
        if libc::getppid() != plan.parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        for (target, fd) in plan.numbers.ends.iter().enumerate() {
            check(libc::dup2(*fd, target as c_int))?;
        }
        check(libc::chdir(plan.cwd.as_ptr()))?;
    }
    // A child the clone put in its cgroup skips the cgroup's `enter`.
    let skip = usize::from(plan.born_in_cgroup);
    for (hook, fds) in plan.hooks.iter_mut().zip(&plan.numbers.hooks).skip(skip) {
        (hook.step)(fds)?;
    }
    // SAFETY: restores the caller's signal mask, saved before the clone.
    unsafe {
        check(libc::pthread_sigmask(
            libc::SIG_SETMASK,
            &plan.mask,
            std::ptr::null_mut(),
        ))?;
    }
    Ok(())
}

/// The threads children are cloned from. Runtime workers never are: the
/// thread that clones is held until the child calls `exec`, and the
/// child's parent-death signal follows that thread, so these threads
/// live as long as the process.
/// Each thread owns a few reserved low descriptor numbers its children
/// take what they use from (see [`table`]).
struct Spawner {
    jobs: mpsc::Sender<Job>,
}

/// A spawn, given the slots of the thread that runs it.
type Job = Box<dyn FnOnce(Option<&Slots>) + Send>;

/// How many children can be between `clone` and `exec` at once (most of
/// that time is spent waiting in the kernel, not on a core).
const SPAWNERS: usize = 8;

impl Spawner {
    fn get() -> io::Result<&'static Spawner> {
        static SPAWNER: OnceLock<Result<Spawner, String>> = OnceLock::new();
        SPAWNER
            .get_or_init(|| {
                let (jobs, queue) = mpsc::channel::<Job>();
                let queue = Arc::new(Mutex::new(queue));
                for slots in table::reserve(SPAWNERS) {
                    let queue = queue.clone();
                    std::thread::Builder::new()
                        .name("harness-spawn".into())
                        .spawn(move || {
                            loop {
                                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
                                match job {
                                    Ok(job) => job(slots.as_ref()),
                                    Err(_) => return,
                                }
                            }
                        })
                        .map_err(|e| format!("cannot start a spawner thread: {e}"))?;
                }
                Ok(Spawner { jobs })
            })
            .as_ref()
            .map_err(|e| io::Error::other(e.clone()))
    }

    /// Clone the child of `plan` on a spawner thread, watched by the
    /// reaper before it is handed over: should the caller stop waiting,
    /// the `Process` is dropped wherever it is, which kills it, and the
    /// reaper reaps it.
    async fn start(&self, plan: Plan, method: Method) -> io::Result<Process> {
        let (reply, started) = oneshot::channel();
        let job: Job = Box::new(move |slots| {
            let process = start(plan, method, slots).and_then(|(pid, pidfd)| {
                Reaper::get()
                    .and_then(|reaper| reaper.watch(pid, pidfd.try_clone()?))
                    .inspect_err(|_| {
                        // Never left unwaited: killed and reaped here.
                        let _ = send_signal(&pidfd, libc::SIGKILL);
                        let _ = reap(&pidfd, false);
                    })
            });
            let _ = reply.send(process);
        });
        self.jobs
            .send(job)
            .map_err(|_| io::Error::other("the spawner threads have ended"))?;
        started
            .await
            .map_err(|_| io::Error::other("a spawner thread ended"))?
    }
}

/// A started child. Its exit is taken by the reaper the moment it
/// happens; dropped before that, it is killed (and still reaped).
#[derive(Debug)]
pub struct Process {
    pid: libc::pid_t,
    pidfd: Arc<OwnedFd>,
    exit: Arc<Exit>,
}

/// Where the reaper puts a child's exit, and who it wakes.
#[derive(Debug, Default)]
struct Exit {
    /// The exit; `None` when it was taken by another waiter.
    status: OnceLock<Option<ExitStatus>>,
    taken: tokio::sync::Notify,
}

impl Process {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Its exit, once it has exited (and been reaped).
    pub fn status(&self) -> Option<ExitStatus> {
        self.exit.status.get().copied().flatten()
    }

    /// Its exit, if it has exited, without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self.exit.status.get() {
            None => Ok(None),
            Some(Some(status)) => Ok(Some(*status)),
            Some(None) => Err(reaped_elsewhere()),
        }
    }

    /// Wait for the child to exit (cancel-safe).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let exit = self.exit.clone();
        loop {
            let taken = exit.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            taken.await;
        }
    }

    /// Send `signal` to the child, unless it has exited. By its pidfd, so
    /// the signal never reaches another process that took its pid.
    pub fn signal(&self, signal: c_int) -> io::Result<()> {
        if self.exit.status.get().is_some() {
            return Ok(());
        }
        send_signal(&self.pidfd, signal)
    }
}

/// `pidfd_send_signal`; a process already gone is not an error.
fn send_signal(pidfd: &OwnedFd, signal: c_int) -> io::Result<()> {
    // SAFETY: a system call on an open pidfd, with no siginfo.
    let done = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if done < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            return Err(error);
        }
    }
    Ok(())
}

/// Reap the child behind `pidfd` if it has exited (or wait until it
/// does, without `nohang`): its exit as the kernel said it, whatever the
/// signal (a real-time one included).
fn reap(pidfd: &OwnedFd, nohang: bool) -> io::Result<Option<ExitStatus>> {
    let flags = libc::WEXITED | if nohang { libc::WNOHANG } else { 0 };
    // SAFETY: a zeroed siginfo is valid for the kernel to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `info` is a valid siginfo; the pidfd is open.
        let done = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                flags,
            )
        };
        if done == 0 {
            break;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    // SAFETY: the kernel filled a SIGCHLD siginfo (or left it zeroed).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Ok(Some(ExitStatus::from_raw(raw)))
}

fn reaped_elsewhere() -> io::Error {
    io::Error::other("the harness's exit was taken by another waiter")
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exit.status.get().is_none() {
            // The reaper takes its exit when it dies.
            let _ = self.signal(libc::SIGKILL);
        }
    }
}

/// A child the reaper waits for: its pidfd, and where its exit goes.
type Waiting = (Arc<OwnedFd>, Arc<Exit>);

/// The one thread that reaps every started child the moment it exits,
/// woken by the kernel through an epoll set of their pidfds. A run's own
/// task may wait its turn on a busy runtime; a finished process does not
/// wait with it as a zombie.
struct Reaper {
    epoll: Epoll,
    waiting: Mutex<HashMap<u64, Waiting>>,
    next: AtomicU64,
}

impl Reaper {
    /// The process's reaper, its thread started on first use.
    fn get() -> io::Result<&'static Reaper> {
        static REAPER: OnceLock<Result<&'static Reaper, String>> = OnceLock::new();
        let reaper = REAPER.get_or_init(|| {
            let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
                .map_err(|e| format!("cannot make the reaper's epoll: {e}"))?;
            let reaper: &'static Reaper = Box::leak(Box::new(Reaper {
                epoll,
                waiting: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
            }));
            std::thread::Builder::new()
                .name("harness-reaper".into())
                .spawn(move || reaper.run())
                .map_err(|e| format!("cannot start the reaper thread: {e}"))?;
            Ok(reaper)
        });
        reaper.clone().map_err(io::Error::other)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The child `pid` behind `pidfd`, waited for from now on (its exit
    /// taken at once if it has already exited).
    fn watch(&self, pid: libc::pid_t, pidfd: OwnedFd) -> io::Result<Process> {
        let pidfd = Arc::new(pidfd);
        let exit = Arc::new(Exit::default());
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let mut waiting = self.lock();
        self.epoll
            .add(&*pidfd, EpollEvent::new(EpollFlags::EPOLLIN, token))?;
        waiting.insert(token, (pidfd.clone(), exit.clone()));
        Ok(Process { pid, pidfd, exit })
    }

    fn run(&self) {
        let mut events = [EpollEvent::empty(); 64];
        loop {
            let ready = match self.epoll.wait(&mut events, EpollTimeout::NONE) {
                Ok(ready) => ready,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("the harness reaper cannot wait: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            let mut waiting = self.lock();
            for event in &events[..ready] {
                let token = event.data();
                let Some((pidfd, _)) = waiting.get(&token) else {
                    continue;
                };
                let status = match reap(pidfd, true) {
                    Ok(Some(status)) => Some(status),
                    // Woken early: still running.
                    Ok(None) => continue,
                    // Not ours to wait for any more: its waiter is told.
                    Err(_) => None,
                };
                if let Some((pidfd, exit)) = waiting.remove(&token) {
                    let _ = self.epoll.delete(&*pidfd);
                    let _ = exit.status.set(status);
                    exit.taken.notify_waiters();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn request<'a>(args: &'a [String], cwd: &'a Path) -> Request<'a> {
        Request {
            program: Path::new("/bin/sh"),
            args,
            cwd,
            env: BTreeMap::from([("ONLY".to_string(), "this".to_string())]),
            stdin: true,
            hooks: Vec::new(),
            around: None,
            cgroup: None,
        }
    }

    async fn output(mut spawned: Spawned) -> (String, ExitStatus) {
        let mut text = String::new();
        spawned.stdout.read_to_string(&mut text).await.unwrap();
        (text, spawned.process.wait().await.unwrap())
    }

    #[tokio::test]
    async fn a_child_gets_its_streams_folder_environment_and_group_by_either_method() {
        let dir = tempfile::tempdir().unwrap();
        let script = "read line; echo \"$line|$(pwd)|$(env | grep -v '^PWD=\\|^SHLVL=\\|^_=' | sort | tr '\\n' ' ')|$(ps -o pgid= -p $$ | tr -d ' ')|$$\"; echo oops >&2; exit 3".to_string();
        let args = [String::from("-c"), script];
        for method in [Method::Vfork, Method::Fork] {
            let Spawned {
                mut process,
                stdin,
                mut stdout,
                stderr: mut err_pipe,
            } = spawn(request(&args, dir.path()), method).await.unwrap();
            let mut stdin = stdin.unwrap();
            stdin.write_all(b"hello\n").await.unwrap();
            drop(stdin);
            let (mut text, mut stderr) = (String::new(), String::new());
            stdout.read_to_string(&mut text).await.unwrap();
            err_pipe.read_to_string(&mut stderr).await.unwrap();
            let status = process.wait().await.unwrap();
            let pid = process.id();
            let fields: Vec<&str> = text.trim_end().split('|').collect();
            assert_eq!(fields[0], "hello", "{method:?}: {text}");
            assert_eq!(
                Path::new(fields[1]).canonicalize().unwrap(),
                dir.path().canonicalize().unwrap()
            );
            assert_eq!(
                fields[2].trim(),
                "ONLY=this",
                "{method:?}: nothing but the given environment"
            );
            assert_eq!(
                fields[3], fields[4],
                "{method:?}: the leader of its own group"
            );
            assert_eq!(fields[4], pid.to_string());
            assert_eq!(stderr, "oops\n");
            assert_eq!(status.code(), Some(3));
        }
    }

    #[tokio::test]
    async fn a_child_holds_none_of_the_bridges_other_descriptors_and_its_hooks_own() {
        let dir = tempfile::tempdir().unwrap();
        let args = [String::from("-c"), String::from("exit 0")];
        ready().unwrap();
        // Another turn's folder, far above the spawners' slots (as a busy
        // serve's descriptors are), and a hook's own descriptor.
        let other = std::fs::File::open(dir.path()).unwrap();
        // SAFETY: duplicates a descriptor the test owns; the copy is owned below.
        let high = unsafe { libc::fcntl(other.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 1000) };
        assert!(high >= 1000, "{}", io::Error::last_os_error());
        // SAFETY: the descriptor was just made and nothing else owns it.
        let other = unsafe { OwnedFd::from_raw_fd(high) };
        let own: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        // What the child holds from 3 up (its report pipe, its three
        // streams' slots, the hook's descriptor: five), as an error
        // code of 10,000 and the count when it is not just that; none of
        // it may be the other turn's.
        let held = move |fds: &[RawFd]| -> io::Result<()> {
            // SAFETY: flag queries on descriptor numbers.
            let open = |fd: RawFd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
            let count = (3..1024).filter(|fd| open(*fd)).count() as i32;
            match (open(fds[0]), open(high), count) {
                (true, false, 5) => Ok(()),
                _ => Err(io::Error::from_raw_os_error(10_000 + count)),
            }
        };
        let mut request = request(&args, dir.path());
        // SAFETY: `held` makes `fcntl` queries and counts; its errors are
        // raw OS errors.
        request.hooks.push(unsafe { Hook::new(vec![own], held) });
        let spawned = spawn(request, Method::Vfork).await;
        let held = spawned.as_ref().err().and_then(io::Error::raw_os_error);
        assert!(
            spawned.is_ok(),
            "the child held {:?} descriptors",
            held.map(|e| e - 10_000)
        );
        let (_, status) = output(spawned.unwrap()).await;
        assert!(status.success());
        // A copy of the bridge (`fork`) holds them all until `exec`.
        let mut request = super::tests::request(&args, dir.path());
        let still_open = move |_: &[RawFd]| {
            // SAFETY: a flag query on a descriptor number.
            match unsafe { libc::fcntl(high, libc::F_GETFD) } {
                0.. => Ok(()),
                _ => Err(io::Error::from_raw_os_error(libc::EBADF)),
            }
        };
        // SAFETY: one `fcntl` query; its error a raw OS error.
        request
            .hooks
            .push(unsafe { Hook::new(Vec::new(), still_open) });
        let (_, status) = output(spawn(request, Method::Fork).await.unwrap()).await;
        assert!(status.success());
        drop(other);
    }

    #[tokio::test]
    async fn what_fails_before_exec_is_an_error_naming_it_and_leaves_no_process() {
        let dir = tempfile::tempdir().unwrap();
        let args = [String::from("-c"), String::from("exit 0")];
        for method in [Method::Vfork, Method::Fork] {
            let mut missing = request(&args, dir.path());
            missing.program = Path::new("/nonexistent/harness");
            let error = spawn(missing, method).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{method:?}: {error}");

            let gone = dir.path().join("gone");
            let error = spawn(request(&args, &gone), method).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{method:?}: {error}");

            let mut refused = request(&args, dir.path());
            // SAFETY: no call at all; a raw OS error.
            refused.hooks.push(unsafe {
                Hook::new(Vec::new(), |_| {
                    Err(io::Error::from_raw_os_error(libc::EPERM))
                })
            });
            let error = spawn(refused, method).await.unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{method:?}");

            let mut nul = request(&args, dir.path());
            nul.env.insert("BAD".into(), "a\0b".into());
            let error = spawn(nul, method).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        }
        // Every failed child was reaped: no zombie of this process that
        // never became another program (it has the spawner thread's name).
        let children: String = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(Result::ok)
            .map(|task| std::fs::read_to_string(task.path().join("children")).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ");
        for pid in children.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(
                !(stat.contains("(harness-spawn)") && stat.contains(") Z ")),
                "a failed child left a zombie: {stat}"
            );
        }
    }

    #[tokio::test]
    async fn sigpipe_ignored_by_the_bridge_is_the_default_again_in_the_child() {
        // SAFETY: sets a disposition to ignore, as Rust's runtime does.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let dir = tempfile::tempdir().unwrap();
        let args = [
            String::from("-c"),
            String::from("grep '^SigIgn' /proc/self/status"),
        ];
        for method in [Method::Vfork, Method::Fork] {
            let (text, status) =
                output(spawn(request(&args, dir.path()), method).await.unwrap()).await;
            assert!(status.success());
            let mask = text.split_whitespace().nth(1).unwrap();
            let mask = u64::from_str_radix(mask, 16).unwrap();
            assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{method:?}: {text}");
        }
    }

    #[tokio::test]
    async fn a_child_is_reaped_as_it_exits_while_its_runtime_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let args = [String::from("-c"), String::from("exit 7")];
        let mut spawned = spawn(request(&args, dir.path()), Method::chosen())
            .await
            .unwrap();
        let pid = spawned.process.id();
        // This runtime's one thread is held: nothing of it can reap.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(std::time::Instant::now() < deadline, "{pid} left a zombie");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            spawned.process.try_wait().unwrap().and_then(|s| s.code()),
            Some(7)
        );
        assert_eq!(spawned.process.wait().await.unwrap().code(), Some(7));
    }

    #[tokio::test]
    async fn a_child_dropped_running_is_killed_and_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let args = [String::from("-c"), String::from("sleep 30")];
        let spawned = spawn(request(&args, dir.path()), Method::chosen())
            .await
            .unwrap();
        let pid = spawned.process.id();
        drop(spawned);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(std::time::Instant::now() < deadline, "{pid} still there");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
