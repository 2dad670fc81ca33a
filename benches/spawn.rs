//! What starting one harness process costs the bridge, as a function of
//! how big the bridge is: spawn-to-exit of a no-op program (`/bin/true`)
//! from a parent with 16 to 256 threads and 0, 64 or 512 MiB touched, two
//! ways side by side:
//!
//! - **fork**: what the launcher does today. A `pre_exec` hook (the
//!   parent-death signal, the cage's) makes the standard library `fork`
//!   the whole process, copying its page tables under the address-space
//!   lock, so the cost grows with the parent's mappings and threads.
//! - **vfork-style spawn**: the same `Command` without a hook, which the
//!   standard library starts with `posix_spawn` (`clone(CLONE_VM |
//!   CLONE_VFORK)` in glibc): nothing is copied.
//!
//! The launcher needs its hooks, so taking the second way means moving
//! them out of the bridge's address space (a small spawner process, or
//! `clone3` into the conversation's cgroup); these figures say what that
//! would save.
//!
//! Reproduce: `cargo bench --bench spawn` (`SPAWNS=400` for more spawns
//! per cell; 200 by default). Without `--bench` (as `cargo test --bench
//! spawn` runs it) ten spawns each way at 16 threads, as a check that both
//! still start and end the program.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// One spawn and wait of `/bin/true`, through a hook (fork) or not.
fn spawn_once(fork: bool) -> Duration {
    let mut command = Command::new("/bin/true");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if fork {
        // SAFETY: the hook makes no call at all; its presence alone
        // makes the standard library fork.
        unsafe {
            command.pre_exec(|| Ok(()));
        }
    }
    let started = Instant::now();
    let status = command
        .spawn()
        .and_then(|mut child| child.wait())
        .expect("/bin/true runs");
    assert!(status.success(), "/bin/true failed: {status}");
    started.elapsed()
}

/// The median and the 99th percentile of `spawns` spawns, in µs.
fn measure(fork: bool, spawns: usize) -> (f64, f64) {
    let mut took: Vec<f64> = (0..spawns)
        .map(|_| spawn_once(fork).as_secs_f64() * 1e6)
        .collect();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Threads that wait (as a runtime's idle workers do) until dropped.
struct Idle {
    release: Arc<Barrier>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Idle {
    fn start(n: usize) -> Idle {
        let release = Arc::new(Barrier::new(n + 1));
        let threads = (0..n)
            .map(|_| {
                let release = release.clone();
                std::thread::spawn(move || {
                    release.wait();
                })
            })
            .collect();
        Idle { release, threads }
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.release.wait();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// `mib` MiB allocated and touched, so the parent has that many pages
/// mapped (a bridge's stores, caches and stacks).
fn resident(mib: usize) -> Vec<u8> {
    let mut memory = vec![0u8; mib << 20];
    for page in memory.chunks_mut(4096) {
        page[0] = 1;
    }
    memory
}

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    if !measuring {
        let _idle = Idle::start(16);
        for fork in [true, false] {
            let (p50, _) = measure(fork, 10);
            assert!(p50 > 0.0);
        }
        println!("spawn: /bin/true started and ended both ways");
        return;
    }
    let spawns: usize = std::env::var("SPAWNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
        .max(8);
    println!(
        "spawn-to-exit of /bin/true, {spawns} spawns per cell, µs (p50 / p99); ratio = fork / spawn at p50"
    );
    println!("| parent threads | parent touched | fork | vfork-style spawn | ratio |");
    println!("|---|---|---|---|---|");
    for mib in [0, 64, 512] {
        let memory = resident(mib);
        for threads in [16, 64, 256] {
            let _idle = Idle::start(threads);
            // Alternate the two ways in rounds, so drift hits both alike.
            let mut fork = Vec::new();
            let mut spawn = Vec::new();
            for _ in 0..4 {
                fork.push(measure(true, spawns / 4));
                spawn.push(measure(false, spawns / 4));
            }
            let mid = |cells: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
                let mut v: Vec<f64> = cells.iter().map(pick).collect();
                v.sort_by(f64::total_cmp);
                (v[1] + v[2]) / 2.0
            };
            let (f50, f99) = (mid(&fork, |c| c.0), mid(&fork, |c| c.1));
            let (s50, s99) = (mid(&spawn, |c| c.0), mid(&spawn, |c| c.1));
            println!(
                "| {threads} | {mib} MiB | {f50:.0} / {f99:.0} | {s50:.0} / {s99:.0} | {:.2}× |",
                f50 / s50
            );
        }
        // Kept mapped until its rows are measured.
        std::hint::black_box(&memory);
    }
}
