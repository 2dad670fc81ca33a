//! `harness-bridge serve` under load: many conversations at once, each
//! sending turns one after another, against a fake harness that prints a
//! recorded Claude Code stream. Reports runs per second, the latency the
//! bridge adds to each turn (p50/p99), the bridge's peak RSS, and checks
//! that every result arrived exactly once and in sequence.
//!
//! The fake harness is `examples/fake_harness.rs`, a tiny std-only program
//! the bench builds first: it notes when it started and ended (in
//! `harness-timing` in its workspace), waits `HB_FAKE_THINK_MS` (a model
//! thinking) after its first line, and prints a recorded stream. A turn's
//! added latency is what the client waited for its terminal result (what
//! a person waits for) minus the harness's own time from `main` to exit,
//! so starting the process counts against the bridge;
//! the bench also reports what starting it directly costs, for scale.
//!
//! Conversations start spread over one harness turn, as people write at
//! different moments, and keep sending until they have sent `TURNS`.
//!
//! Each load runs twice in one bench run, on the same machine: one `serve`
//! on the embedded SQLite store, then three `serve` instances sharing one
//! PostgreSQL database (a server the bench starts on 127.0.0.1), the
//! client posting each conversation's turns round-robin across them; the
//! difference is what the shared store costs.
//!
//! Each load also runs once per way of starting harness processes: `fork`
//! (a copy of the bridge) and then `vfork` (sharing its memory, the
//! default), so the two are compared in the same run. `SPAWNS` may also
//! name `baseline`: the same load on another build of the bridge, the
//! binary `BASELINE` names (e.g. one built from an earlier commit), so a
//! change is measured against what was there before in one run.
//!
//! Reproduce: `cargo bench --bench serve_load` (defaults: 256 conversations,
//! 4 turns each, harness turns of 0, 2 and 5 s; `CONVERSATIONS`, `TURNS`,
//! `THINK_MS` to change them, `STORES=sqlite` or `STORES=postgres` for one
//! of the two, `INSTANCES` for another number of PostgreSQL instances,
//! `SPAWNS=vfork` for one way of starting, `EXTRA_CONFIG` for more
//! `bridge.yaml` lines, `FAKE_HARNESS` for a fake harness built
//! already). Its folders go under `TMPDIR`: on ext4 without a journal,
//! making files within minutes of many being removed (an earlier run's
//! folders) is several times slower, so compare runs on a new filesystem
//! each. Without `--bench` (as `cargo test --bench serve_load` runs it)
//! it is a quick check of the whole path with every assertion: 4
//! conversations, 2 turns each, harness turns of 0 s, on both stores, by
//! both ways of starting.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

mod support;

const SPEC: &str = r#"
name: fake
label: Fake
description: Prints a recorded Claude Code stream.
binary: fake-harness
family: claude
argv:
  new: ["--new"]
  resume: ["--resume", "{session_id}"]
stdin: prompt
env:
  pass: [PATH, "HB_FAKE_*"]
skills_dir: .fake/skills
session_not_found: "No conversation found"
session_store: unknown
session_id_format: token
install_hint: "the bench starts itself as the fake harness"
"#;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether a result line is a run's terminal one.
fn is_terminal(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(line)
        .is_ok_and(|r| matches!(r["type"].as_str(), Some("run.completed" | "run.failed")))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is understood. Without
    // it, a quick check.
    let quick = support::quick();
    let conversations = if quick {
        4
    } else {
        env_or("CONVERSATIONS", 256)
    };
    let turns = if quick { 2 } else { env_or("TURNS", 4) };
    // Three loads: harness turns that take no time (the bridge's own
    // throughput, everything queued), and harness turns of 2 s and 5 s (a
    // model answering) — where the added latency means something.
    let thinks = match std::env::var("THINK_MS") {
        _ if quick => vec![0],
        Ok(v) => vec![v.parse().expect("THINK_MS is a number of milliseconds")],
        Err(_) => vec![0, 2000, 5000],
    };
    if !quick {
        direct_launch_cost();
        // The host's setting that decides what a launch's cgroup moves
        // cost (`doctor` says the same): say which one was measured.
        let favoured = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(" - ").map(|(_, tail)| tail))
            .filter(|tail| tail.starts_with("cgroup"))
            .any(|tail| tail.contains("favordynmods"));
        println!(
            "cgroup moves: favordynmods {} on this host",
            if favoured { "on" } else { "off" }
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let instances = env_or("INSTANCES", 3);
    let stores: Vec<Store> = match std::env::var("STORES").as_deref() {
        Ok("sqlite") => vec![Store::Sqlite],
        Ok("postgres") => vec![Store::Postgres { instances }],
        _ => vec![Store::Sqlite, Store::Postgres { instances }],
    };
    // How the bridge starts harness processes: by `fork` (a copy of the
    // bridge, what it did before) and by `vfork` (sharing its memory), one
    // after the other in the same run.
    let spawns: Vec<String> = match std::env::var("SPAWNS") {
        _ if quick => vec!["vfork".into(), "fork".into()],
        Ok(v) => v.split(',').map(|s| s.trim().to_string()).collect(),
        Err(_) => vec!["fork".into(), "vfork".into()],
    };
    // Each load's folders are removed only at the end: removing thousands
    // of files between loads would make the filesystem slower for the
    // next one (ext4 passes over inodes freed in the last minutes).
    let mut folders = Vec::new();
    for think in thinks {
        for store in &stores {
            for spawn in &spawns {
                folders.push(runtime.block_on(load(conversations, turns, think, store, spawn)));
                // What a load leaves behind (the database's own clean-up
                // after thousands of writes) must not run into the next
                // one's time.
                if !quick {
                    std::thread::sleep(Duration::from_secs(10));
                }
            }
        }
    }
}

/// Where the bridge keeps its store, and how many instances serve.
enum Store {
    /// One instance on the embedded store.
    Sqlite,
    /// Instances sharing one PostgreSQL database.
    Postgres { instances: usize },
}

/// One running `serve` of a load.
struct Instance {
    child: tokio::process::Child,
    pid: u32,
    url: String,
    data: std::path::PathBuf,
}

/// Start `serve` on `data` with `config` (the bridge.yaml's text),
/// starting harness processes by `spawn` (`fork` or `vfork`).
async fn start(data: &Path, tools: &Path, config: &str, spawn: &str) -> Instance {
    std::fs::create_dir_all(data).expect("data");
    let file = data.join("bridge.yaml");
    std::fs::write(&file, config).expect("config");
    // `baseline`: another build of the bridge (`BASELINE`, its path), for
    // a before-and-after in one run.
    let program = match spawn {
        "baseline" => std::env::var("BASELINE")
            .expect("SPAWNS names `baseline`: set BASELINE to a harness-bridge binary"),
        _ => env!("CARGO_BIN_EXE_harness-bridge").to_string(),
    };
    let mut child = tokio::process::Command::new(program)
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--config"])
        .arg(&file)
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                tools.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env(
            "RUST_LOG",
            std::env::var("SERVE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env("HARNESS_BRIDGE_SPAWN", spawn)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let pid = child.id().expect("serve pid");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut url = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(found) = line.strip_prefix("harness-bridge serving on ") {
            url = found.to_string();
            break;
        }
        eprintln!("{line}");
    }
    assert!(!url.is_empty(), "serve did not start");
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("serve: {line}");
        }
    });
    Instance {
        child,
        pid,
        url,
        data: data.to_path_buf(),
    }
}

/// A process's peak resident memory (kB) and CPU time (s) so far.
fn usage(pid: u32) -> (u64, f64) {
    let peak_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .unwrap_or(0);
    // User + system time, in clock ticks of 10 ms.
    let cpu_s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let fields: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0);
    (peak_kb, cpu_s)
}

/// Build the fake harness (an example of this package) and return its
/// path; `FAKE_HARNESS` names one built already (the bench run where
/// cargo cannot build, e.g. in a guest machine).
fn fake_harness_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(built) = std::env::var_os("FAKE_HARNESS") {
                return built.into();
            }
            // Quick mode takes the build `cargo test` has made already.
            let profile: &[&str] = if support::quick() {
                &[]
            } else {
                &["--release"]
            };
            let output = std::process::Command::new(env!("CARGO"))
                .arg("build")
                .args(profile)
                .args(["--example", "fake_harness", "--message-format=json"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("cargo builds the fake harness");
            assert!(output.status.success(), "the fake harness does not build");
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
                .expect("cargo names the fake harness executable")
        })
        .clone()
}

/// Start the fake harness directly (no bridge) and report what launching
/// it costs beyond its own time: a floor no launcher goes under.
fn direct_launch_cost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = fake_harness_binary();
    let mut costs: Vec<f64> = (0..100)
        .map(|_| {
            let started = Instant::now();
            let mut child = std::process::Command::new(&binary)
                .current_dir(dir.path())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("the fake harness starts");
            drop(child.stdin.take());
            child.wait().expect("it exits");
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let text = std::fs::read_to_string(dir.path().join("harness-timing")).expect("timing");
    let own: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.split(' ').filter_map(|v| v.parse::<u128>().ok());
            Some((parts.next()?, parts.next()?))
        })
        .map(|(start, end)| (end - start) as f64 / 1e6)
        .collect();
    for (cost, own) in costs.iter_mut().zip(own) {
        *cost -= own;
    }
    costs.sort_by(f64::total_cmp);
    println!(
        "direct launch of the fake harness (no bridge): p50 {:.2} ms, p99 {:.2} ms beyond its own time",
        percentile(&costs, 0.5),
        percentile(&costs, 0.99)
    );
}

/// What one turn looked like from the client.
struct Turn {
    conversation: usize,
    index: usize,
    latency: Duration,
    /// When it was posted, on the clock the fake harness notes its own
    /// start by, so the bridge's share can be parted into before the
    /// harness started and after it finished.
    sent_ns: u128,
    run_id: String,
    results: usize,
}

async fn load(
    conversations: usize,
    turns: usize,
    think: usize,
    store: &Store,
    spawn: &str,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(tools.join("adapters")).expect("tools");
    std::fs::write(tools.join("adapters/fake.yaml"), SPEC).expect("spec");
    std::os::unix::fs::symlink(fake_harness_binary(), tools.join("fake-harness")).expect("link");
    let common = format!(
        "listen: 127.0.0.1:0\nno_auth: true\nadapters: {}\ndefault_harness: fake\nmax_concurrent_runs: {conversations}\n\
         max_connections: {}\n\
         set_env:\n  HB_FAKE_THINK_MS: \"{think}\"\n{}",
        tools.join("adapters").display(),
        // A connection per conversation, and the client's spares.
        conversations * 2 + 64,
        // More bridge.yaml, to measure a setting's cost (e.g. `cage:
        // {limits: {memory_mb: 0, processes: 0, cpu_percent: 0}}`).
        std::env::var("EXTRA_CONFIG")
            .map(|c| c + "\n")
            .unwrap_or_default()
    );
    let (label, instances) = match store {
        Store::Sqlite => (
            "1 instance, SQLite".to_string(),
            vec![start(&dir.path().join("data"), &tools, &common, spawn).await],
        ),
        Store::Postgres { instances } => {
            let db = support::pg::database().await;
            let mut started = Vec::new();
            for n in 0..*instances {
                let config = format!("{common}store: {}\ninstance_id: bench-{n}\n", db.url);
                started.push(
                    start(
                        &dir.path().join(format!("data-{n}")),
                        &tools,
                        &config,
                        spawn,
                    )
                    .await,
                );
            }
            (format!("{instances} instances, PostgreSQL"), started)
        }
    };
    let urls: Arc<Vec<String>> = Arc::new(instances.iter().map(|i| i.url.clone()).collect());

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(conversations)
        .build()
        .expect("client");

    let zombies = Zombies::watch(instances.iter().map(|i| i.pid).collect());
    let started = Instant::now();
    let tasks: Vec<_> = (0..conversations)
        .map(|conversation| {
            let client = client.clone();
            let urls = urls.clone();
            // Conversations start spread over one think time, as people
            // do, rather than all in the same millisecond.
            let offset = Duration::from_millis((think * conversation / conversations) as u64);
            tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                let mut done = Vec::new();
                for index in 0..turns {
                    // Round-robin across the instances, each turn to the next.
                    let url = &urls[(conversation + index) % urls.len()];
                    let sent = Instant::now();
                    let sent_ns = now_ns();
                    let mut response = client
                        .post(format!("{url}/v1/runs"))
                        .header("content-type", "application/json")
                        .body(
                            json!({"conversation": format!("load-{conversation}"), "text": format!("turn {index}")})
                                .to_string(),
                        )
                        .send()
                        .await
                        .expect("answered");
                    // A turn's latency ends at its terminal result, what a
                    // person waits for (the LangBot plugin delivers then);
                    // the stream ends a little later, once the run has
                    // archived its files and kept its record.
                    let mut bytes = Vec::new();
                    let mut read = 0;
                    let mut latency = None;
                    while let Some(chunk) = response.chunk().await.expect("body") {
                        bytes.extend_from_slice(&chunk);
                        // Each line as it is completed, the terminal one timed.
                        while let Some(end) = bytes[read..].iter().position(|b| *b == b'\n') {
                            if latency.is_none() && is_terminal(&bytes[read..read + end]) {
                                latency = Some(sent.elapsed());
                            }
                            read += end + 1;
                        }
                    }
                    let latency = latency.expect("a terminal result");
                    let body = String::from_utf8(bytes).expect("UTF-8");
                    let results: Vec<Value> = body
                        .lines()
                        .map(|l| serde_json::from_str(l).expect("a JSON line"))
                        .collect();
                    let sequences: Vec<u64> = results
                        .iter()
                        .filter_map(|r| r["sequence"].as_u64())
                        .collect();
                    assert_eq!(
                        sequences,
                        (1..=results.len() as u64).collect::<Vec<_>>(),
                        "results out of sequence: {body}"
                    );
                    let last = results.last().expect("results");
                    assert_eq!(last["type"], "run.completed", "{body}");
                    done.push(Turn {
                        conversation,
                        index,
                        latency,
                        sent_ns,
                        run_id: last["run_id"].as_str().unwrap_or("").to_string(),
                        results: results.len(),
                    });
                }
                done
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a client task"));
    }
    let wall = started.elapsed();
    let samples = zombies.stop();
    let (peak_kb, cpu_s) = instances
        .iter()
        .map(|i| usage(i.pid))
        .fold((0, 0.0), |(kb, cpu), (k, c)| (kb + k, cpu + c));

    // Exactly once: every run id distinct, and the service's record of
    // each run holds the same number of results the stream delivered.
    let ids: HashSet<&str> = all.iter().map(|t| t.run_id.as_str()).collect();
    assert_eq!(ids.len(), conversations * turns, "lost or duplicated runs");
    let mut mismatched = 0;
    for turn in &all {
        // Asked of another instance than the one that took it.
        let url = &urls[(turn.conversation + turn.index + 1) % urls.len()];
        let run: Value = client
            .get(format!("{url}/v1/runs/{}", turn.run_id))
            .send()
            .await
            .expect("answered")
            .json()
            .await
            .expect("JSON");
        if run["results"].as_array().map_or(0, Vec::len) != turn.results {
            mismatched += 1;
        }
    }
    assert_eq!(mismatched, 0, "stream and record disagree");

    // The harness's own time per turn, from its workspace.
    let mut own: HashMap<(usize, usize), (u128, u128)> = HashMap::new();
    // Each harness's pid and the moment it finished, for the zombie count.
    let mut exits: Vec<(u32, u128)> = Vec::new();
    for entry in instances
        .iter()
        .flat_map(|i| walkdir::WalkDir::new(i.data.join("workspaces")))
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "harness-timing")
    {
        let workspace = entry.path().parent().expect("workspace");
        let conversation = conversation_of(workspace);
        let text = std::fs::read_to_string(entry.path()).expect("timing");
        for (index, line) in text.lines().enumerate() {
            let mut parts = line.split(' ').filter_map(|v| v.parse::<u128>().ok());
            if let (Some(start), Some(end)) = (parts.next(), parts.next()) {
                own.insert((conversation, index), (start, end));
                if let Some(pid) = parts.next() {
                    exits.push((pid as u32, end));
                }
            }
        }
    }
    let own_ms = |t: &Turn| {
        own.get(&(t.conversation, t.index))
            .map_or(0.0, |(start, end)| (end - start) as f64 / 1e6)
    };
    let mut added: Vec<f64> = all
        .iter()
        .map(|t| t.latency.as_secs_f64() * 1e3 - own_ms(t))
        .collect();
    // The bridge's share before the harness started (the request, the
    // projection, the launch) and after it finished (the rest of its
    // output, the terminal result's way to the client).
    let mut before: Vec<f64> = all
        .iter()
        .map(|t| {
            own.get(&(t.conversation, t.index))
                .map_or(0.0, |(start, _)| {
                    start.saturating_sub(t.sent_ns) as f64 / 1e6
                })
        })
        .collect();
    let mut after: Vec<f64> = all
        .iter()
        .zip(&added)
        .zip(&before)
        .map(|((_, a), b)| a - b)
        .collect();
    before.sort_by(f64::total_cmp);
    after.sort_by(f64::total_cmp);
    assert_eq!(own.len(), all.len(), "a turn's harness timing is missing");
    assert_eq!(exits.len(), all.len(), "a harness's pid is missing");
    let (zombie_peak, zombie_longest) = unreaped(&samples, &exits);
    // A conversation's first turn makes its workspace; the others find
    // it made: the two apart, as a first turn is where the most is done.
    let mut first: Vec<f64> = all
        .iter()
        .zip(&added)
        .filter(|(t, _)| t.index == 0)
        .map(|(_, a)| *a)
        .collect();
    first.sort_by(f64::total_cmp);
    let mut later: Vec<f64> = all
        .iter()
        .zip(&added)
        .filter(|(t, _)| t.index > 0)
        .map(|(_, a)| *a)
        .collect();
    later.sort_by(f64::total_cmp);
    added.sort_by(f64::total_cmp);
    let mut latency: Vec<f64> = all.iter().map(|t| t.latency.as_secs_f64() * 1e3).collect();
    latency.sort_by(f64::total_cmp);
    let results: usize = all.iter().map(|t| t.results).sum();
    println!(
        "serve load ({label}, {spawn}): {conversations} conversations x {turns} turns, harness think {think} ms\n  \
         {} runs in {:.2} s = {:.0} runs/s; {results} results, 0 lost, 0 duplicated\n  \
         turn latency p50 {:.1} ms, p99 {:.1} ms\n  \
         added by the bridge p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 < 20)\n  \
         first turns (the workspace made) p50 {:.1} ms, p99 {:.1} ms; later turns p50 {:.1} ms, p99 {:.1} ms\n  \
         of it, before the harness started p50 {:.1} ms, p99 {:.1} ms; after it finished p50 {:.1} ms, p99 {:.1} ms\n  \
         bridge peak RSS {:.1} MB (all instances; target < 150 each); bridge CPU {:.2} ms per run\n  \
         finished harness processes waiting to be reaped: at most {zombie_peak} at once, none longer than {:.0} ms from its last write to its reaping (sampled every {} ms)",
        all.len(),
        wall.as_secs_f64(),
        all.len() as f64 / wall.as_secs_f64(),
        percentile(&latency, 0.5),
        percentile(&latency, 0.99),
        percentile(&added, 0.5),
        percentile(&added, 0.99),
        added.last().copied().unwrap_or(0.0),
        percentile(&first, 0.5),
        percentile(&first, 0.99),
        percentile(&later, 0.5),
        percentile(&later, 0.99),
        percentile(&before, 0.5),
        percentile(&before, 0.99),
        percentile(&after, 0.5),
        percentile(&after, 0.99),
        peak_kb as f64 / 1024.0,
        cpu_s * 1e3 / all.len() as f64,
        zombie_longest.as_secs_f64() * 1e3,
        Zombies::EVERY.as_millis(),
    );
    for mut instance in instances {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(instance.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = tokio::time::timeout(Duration::from_secs(30), instance.child.wait()).await;
    }
    dir
}

/// The conversation index of a workspace, from its projected context.
fn conversation_of(workspace: &Path) -> usize {
    let ctx: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.join(".langbot/agent-context.json")).expect("context"),
    )
    .expect("context JSON");
    ctx["conversation_id"]
        .as_str()
        .or_else(|| ctx["conversation"]["conversation_id"].as_str())
        .and_then(|c| c.strip_prefix("load-"))
        .and_then(|n| n.parse().ok())
        .expect("a load conversation")
}

/// Watches the bridges' children: which are listed, sampled every
/// [`Zombies::EVERY`]. Whether one has exited is told afterwards by its
/// harness's own record of when it finished (its pid and end in
/// `harness-timing`), so a sample reads only each thread's list of
/// children: reading every child's state each time cost the bench a
/// fifth of the machine and slowed the bridge it measures.
struct Zombies {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

/// One look at the bridges' children: when (ns since the epoch), and whom.
struct Sample {
    at: u128,
    children: HashSet<u32>,
}

impl Zombies {
    const EVERY: Duration = Duration::from_millis(5);

    fn watch(bridges: Vec<u32>) -> Zombies {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let children = bridges.iter().flat_map(|b| children(*b)).collect();
                samples.push(Sample {
                    at: now_ns(),
                    children,
                });
                std::thread::sleep(Self::EVERY);
            }
            samples
        });
        Zombies { stop, thread }
    }

    fn stop(self) -> Vec<Sample> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the zombie watch")
    }
}

/// From the samples and each harness's (pid, end): the most harnesses
/// still listed after they finished, at once, and the longest any was
/// (from its end to the first sample without it: an upper bound, within
/// one interval).
fn unreaped(samples: &[Sample], exits: &[(u32, u128)]) -> (usize, Duration) {
    let mut longest = 0u128;
    let mut at_once = vec![0usize; samples.len()];
    for &(pid, end) in exits {
        let first = samples.partition_point(|s| s.at < end);
        let mut gone = None;
        for (i, sample) in samples.iter().enumerate().skip(first) {
            if !sample.children.contains(&pid) {
                gone = Some(sample.at);
                break;
            }
            at_once[i] += 1;
        }
        // Still listed in the last sample: waiting until the load's end.
        let gone = gone.or(samples.last().map(|s| s.at)).unwrap_or(end);
        longest = longest.max(gone.saturating_sub(end));
    }
    let peak = at_once.into_iter().max().unwrap_or(0);
    (peak, Duration::from_nanos(longest as u64))
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}
