//! Processes seen from `/proc`: what runs under a workspace or carries a
//! test's marker in its argv, waiting for them to start or end, and the
//! containment mechanisms a bridge can be told to use.

/// The containment mechanisms a bridge can be told to use
/// (`HARNESS_BRIDGE_CONTAIN`); tests run both.
pub const MECHANISMS: [&str; 2] = ["cgroup", "subreaper"];

/// How many processes the bridge's log says a harness left running.
pub fn left_running(log: &str) -> usize {
    log.lines()
        .filter_map(|l| l.split("the harness left ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum()
}

/// Processes whose working directory is under `root`: what a run must not
/// leave behind.
pub fn processes_under(root: &std::path::Path) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd.starts_with(&root)
        {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// Live processes whose command line contains `needle` (a marker the
/// test put in their arguments): found wherever they went, whatever their
/// working directory or parent.
pub fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == std::process::id().to_string() {
            continue;
        }
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// A number no other test process uses, for markers in argv.
pub fn unique_tag() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "{}{:03}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Kill what a failed test left running (markers in argv).
pub fn kill_processes_with(needle: &str) {
    for p in processes_with(needle) {
        if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Wait until at least `n` processes run under `root` (a harness and its
/// child); panics after 20 s.
pub async fn wait_for_processes(root: &std::path::Path, n: usize) {
    for _ in 0..200 {
        let found = processes_under(root);
        // A child forked to leave the group (`setsid sleep`) has left it
        // only once it runs what follows: until then it is in the group,
        // and a test that ends the group would see it go with it.
        if found.len() >= n && !found.iter().any(|p| p.contains(": setsid ")) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the harness never started under {}", root.display());
}

/// Whether process `pid` runs (a reaped process has no /proc entry; a
/// zombie says `Z`).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')))
}

/// Wait (bounded, 10 s) until process `pid` is gone; panics otherwise.
pub async fn wait_until_gone(pid: i32) {
    for _ in 0..200 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("process {pid} is still running");
}

/// Wait (bounded, 10 s) until no process works under `root`, and fail
/// with what is left otherwise: a group's members may take a moment to die
/// after its leader, more so on a loaded machine.
pub async fn assert_none_left_under(root: &std::path::Path) {
    let mut left = processes_under(root);
    for _ in 0..100 {
        if left.is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = processes_under(root);
    }
    panic!("processes left behind under {}: {left:?}", root.display());
}
