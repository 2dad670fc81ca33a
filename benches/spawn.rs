//! What starting one harness process costs the bridge, as a function of
//! how big the bridge is: spawn-to-exit of a no-op program (`/bin/true`)
//! from a parent with 16 to 256 threads and 0, 64 or 512 MiB touched,
//! through the launcher's own spawn function (`harness::spawn`: its own
//! process group, the parent-death signal, piped streams, a step before
//! `exec` as the cage adds), the two ways it can start a child:
//!
//! - **fork**: `clone` copying the parent (`HARNESS_BRIDGE_SPAWN=fork`,
//!   what the launcher did before): the page tables of every mapping are
//!   copied under the address-space lock, so the cost grows with the
//!   parent's mappings and threads.
//! - **vfork**: `clone` sharing the parent's memory, the calling thread
//!   held until `exec` (the default): nothing is copied.
//!
//! A second table varies the descriptors the parent has open (a serve
//! holds pipes, sockets and folders for every running turn): a copy of
//! the parent closes each of them at `exec`, while the default clone
//! shares the table and takes its own copy of only the few low numbers
//! its child uses (`close_range` with `CLOSE_RANGE_UNSHARE`).
//!
//! Reproduce: `cargo bench --bench spawn` (`SPAWNS=400` for more spawns
//! per cell; 200 by default). Without `--bench` (as `cargo test --bench
//! spawn` runs it) ten spawns each way at 16 threads, as a check that both
//! still start and end the program.

#![allow(
    unsafe_code,
    reason = "a step before exec, as the cage adds, is an unsafe Hook"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use harness_bridge::harness::spawn::{Hook, Method, Request, ready, spawn};

/// One spawn and wait of `/bin/true` by `method`.
fn spawn_once(runtime: &tokio::runtime::Runtime, method: Method) -> Duration {
    runtime.block_on(async {
        let started = Instant::now();
        let request = Request {
            program: Path::new("/bin/true"),
            args: &[],
            cwd: Path::new("/"),
            env: BTreeMap::new(),
            stdin: false,
            // A step before `exec`, as the cage's are.
            // SAFETY: the step makes no call at all.
            hooks: vec![unsafe { Hook::new(Vec::new(), |_| Ok(())) }],
            around: None,
            cgroup: None,
        };
        let mut child = spawn(request, method).await.expect("/bin/true starts");
        let status = child.process.wait().await.expect("/bin/true ends");
        assert!(status.success(), "/bin/true failed: {status}");
        started.elapsed()
    })
}

/// The median and the 99th percentile of `spawns` spawns, in µs.
fn measure(runtime: &tokio::runtime::Runtime, method: Method, spawns: usize) -> (f64, f64) {
    let mut took: Vec<f64> = (0..spawns)
        .map(|_| spawn_once(runtime, method).as_secs_f64() * 1e6)
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // As `serve` does at start: the spawners' slots are low numbers.
    ready().expect("spawner threads");
    if !measuring {
        let _idle = Idle::start(16);
        for method in [Method::Fork, Method::Vfork] {
            let (p50, _) = measure(&runtime, method, 10);
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
        "spawn-to-exit of /bin/true, {spawns} spawns per cell, µs (p50 / p99); ratio = fork / vfork at p50"
    );
    println!("| parent threads | parent touched | fork | vfork | ratio |");
    println!("|---|---|---|---|---|");
    for mib in [0, 64, 512] {
        let memory = resident(mib);
        for threads in [16, 64, 256] {
            let _idle = Idle::start(threads);
            println!(
                "| {threads} | {mib} MiB | {} |",
                both_ways(&runtime, spawns)
            );
        }
        // Kept mapped until its rows are measured.
        std::hint::black_box(&memory);
    }
    println!();
    println!("| parent threads | descriptors open | fork | vfork | ratio |");
    println!("|---|---|---|---|---|");
    let _idle = Idle::start(16);
    let mut open = Vec::new();
    for descriptors in [0, 1024, 4096] {
        // Half pipes' ends, half folders, as a serve's turns hold.
        while open.len() < descriptors {
            let (read, write) = std::io::pipe().expect("a pipe");
            open.push(std::os::fd::OwnedFd::from(read));
            open.push(std::os::fd::OwnedFd::from(write));
            open.push(std::fs::File::open("/").expect("a folder").into());
            open.push(std::fs::File::open("/tmp").expect("a folder").into());
        }
        println!("| 16 | {descriptors} | {} |", both_ways(&runtime, spawns));
    }
}

/// `spawns` spawns each way, the two alternating in four rounds so that
/// drift hits both alike: the table's last three cells.
fn both_ways(runtime: &tokio::runtime::Runtime, spawns: usize) -> String {
    let mut fork = Vec::new();
    let mut spawn = Vec::new();
    for _ in 0..4 {
        fork.push(measure(runtime, Method::Fork, spawns / 4));
        spawn.push(measure(runtime, Method::Vfork, spawns / 4));
    }
    let (f50, f99) = (mid(&fork, |c| c.0), mid(&fork, |c| c.1));
    let (s50, s99) = (mid(&spawn, |c| c.0), mid(&spawn, |c| c.1));
    format!(
        "{f50:.0} / {f99:.0} | {s50:.0} / {s99:.0} | {:.2}×",
        f50 / s50
    )
}

/// The middle two of four rounds' values, averaged: one slow round
/// (another process's burst) does not move the cell.
fn mid(cells: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64) -> f64 {
    let mut v: Vec<f64> = cells.iter().map(pick).collect();
    v.sort_by(f64::total_cmp);
    (v[1] + v[2]) / 2.0
}
