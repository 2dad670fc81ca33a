//! What the cage costs, measured side by side in one run, caged and
//! uncaged alternating so drift hits both alike:
//!
//! - **launch**: one harness process (`/bin/true`) started through the
//!   bridge's launcher and waited for, with its wall (Landlock ruleset
//!   built from the default policy's plan, entered before `exec`; a root
//!   bridge's user namespace) and without;
//! - **one-shot turn**: `harness-bridge run` with a scripted harness (a
//!   shell script that answers at once), default against `--uncaged`;
//! - **live turn**: a turn on a kept live process of `serve` (a scripted
//!   stream-json harness that answers at once), against a `serve` with
//!   `cage: {enabled: false}`: the wall is built once, at the process's
//!   start, so a warm turn should show nothing of it.
//!
//! Each also in a network of its own (`network: isolated`: a network
//! namespace made in the child, its door handed to the bridge, unix
//! sockets refused; the default), against the wall with `network: ports`.
//!
//! Reproduce: `cargo bench --bench cage` (`TURNS=40` for more turns, 20 by
//! default; `LAUNCHES`, 300). Without `--bench` (as `cargo test --bench
//! cage` runs it) a few of each, as a check that every path still works.

// The tests' helpers (their serve and scripted harnesses) share the
// PostgreSQL helper with `support`: loaded twice, used from neither.
#![allow(clippy::duplicate_mod)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness_bridge::harness::cage::{CagePolicy, Network, Subject};
use harness_bridge::harness::{HarnessProcess, Launch};
use serde_json::json;

mod support;

use harness_bridge_testkit as common;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One `/bin/true` through the launcher, to its exit and cleared cage.
async fn launch(workspace: &Path, wall: Option<&harness_bridge::harness::cage::Plan>) -> Duration {
    let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let program = Path::new("/bin/true");
    let start = Instant::now();
    let (mut process, _stdout) = HarnessProcess::spawn(&Launch {
        program,
        args: &[],
        cwd: workspace,
        env: &env,
        stdin: None,
        wall,
        quota: None,
        door: None,
    })
    .await
    .expect("the launch");
    let status = process.wait().await.expect("waited");
    process.clear().await;
    assert!(status.success(), "/bin/true failed: {status}");
    start.elapsed()
}

/// How a turn is caged: not at all, the wall with `network: ports`, or the wall in a
/// network of its own.
#[derive(Clone, Copy)]
enum Caging {
    Uncaged,
    Caged,
    Isolated,
}

/// One `harness-bridge run` turn with the scripted harness.
fn one_shot(tools: &Path, data: &Path, caging: Caging, turn: usize) -> Duration {
    let conversation = format!("bench-{turn}");
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness-bridge"));
    command
        .arg("--data-dir")
        .arg(data)
        .arg("run")
        .arg("--adapters")
        .arg(tools.join("adapters"))
        .args(["--harness", "scripted"])
        .args(["--conversation", &conversation, "--text", "Hello"])
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                tools.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("FAKE_MODE", "quiet")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    match caging {
        Caging::Uncaged => command.arg("--uncaged"),
        Caging::Caged => command.args(["--network", "ports"]),
        Caging::Isolated => command.args(["--network", "isolated"]),
    };
    support::timed_bridge_run(&mut command)
}

/// A live harness that answers every turn at once.
const LIVE: &str = r#"#!/bin/sh
while IFS= read -r line; do
  case "$line" in
    *'"type":"user"'*)
      echo '{"type":"system","subtype":"init","session_id":"bench-1","mcp_servers":[]}'
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"ok"}]},"session_id":"bench-1"}'
      echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"bench-1"}' ;;
  esac
done
"#;

/// One warm turn on `server`'s kept process, to its last result.
async fn live_turn(server: &common::server::ServeProcess, turn: usize) -> Duration {
    let start = Instant::now();
    let results = server
        .results(json!({"conversation": "bench-live", "text": "Hello", "run_id": format!("bench-{turn}")}))
        .await;
    let took = start.elapsed();
    let end = results.last().expect("results");
    assert_eq!(end["type"], "run.completed", "{results:?}");
    took
}

fn main() {
    let quick = support::quick();
    let turns = support::turns(2, 20);
    let launches = if quick {
        3
    } else {
        std::env::var("LAUNCHES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(300)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    harness_bridge::harness::cage::start().expect("containment");

    // Launch: the wall against none, and in a network of its own.
    let workspace = tempfile::tempdir().expect("workspace");
    let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let subject = Subject {
        workspace: workspace.path(),
        program: Path::new("/bin/true"),
        env: &env,
        carried: &[],
        named: &[],
        own_port: None,
        project: (&[], &[]),
    };
    let plan = CagePolicy {
        network: Network::Ports,
        ..CagePolicy::default()
    }
    .plan(&subject)
    .expect("caged");
    let isolated_plan = CagePolicy {
        network: Network::Isolated,
        ..CagePolicy::default()
    }
    .plan(&subject)
    .expect("caged");
    let (mut bare, mut walled, mut isolated) = (Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        launch(workspace.path(), Some(&plan)).await;
        launch(workspace.path(), Some(&isolated_plan)).await;
        launch(workspace.path(), None).await;
        for _ in 0..launches {
            bare.push(launch(workspace.path(), None).await);
            walled.push(launch(workspace.path(), Some(&plan)).await);
            isolated.push(launch(workspace.path(), Some(&isolated_plan)).await);
        }
    });
    let (bare, walled, isolated) = (
        median(&mut bare),
        median(&mut walled),
        median(&mut isolated),
    );

    // One-shot turn: `run` caged against `run --uncaged`.
    let tools = tempfile::tempdir().expect("tools");
    common::scripted::install(tools.path());
    let data = tempfile::tempdir().expect("data");
    for caging in [Caging::Caged, Caging::Uncaged, Caging::Isolated] {
        one_shot(tools.path(), data.path(), caging, 0);
    }
    let (mut open_runs, mut caged_runs, mut isolated_runs) = (Vec::new(), Vec::new(), Vec::new());
    for turn in 1..=turns {
        open_runs.push(one_shot(tools.path(), data.path(), Caging::Uncaged, turn));
        caged_runs.push(one_shot(tools.path(), data.path(), Caging::Caged, turn));
        isolated_runs.push(one_shot(tools.path(), data.path(), Caging::Isolated, turn));
    }
    let (open_run, caged_run, isolated_run) = (
        median(&mut open_runs),
        median(&mut caged_runs),
        median(&mut isolated_runs),
    );

    // Live turn: three `serve`s, each with a kept process.
    let (open_live, caged_live, isolated_live) = runtime.block_on(async {
        let live_tools = tempfile::tempdir().expect("tools");
        let harness = common::scripted::install_live(live_tools.path(), "benchlive", LIVE);
        let env = [("PATH", std::env::var("PATH").unwrap_or_default())];
        let serve = |cage: &str| {
            let config = format!("{harness}{cage}");
            let env = env.clone();
            async move {
                let data = Arc::new(tempfile::tempdir().expect("data"));
                common::server::ServeProcess::spawn(data, &config, &env).await
            }
        };
        let open = serve("cage:\n  enabled: false\n").await;
        let caged = serve("cage:\n  network: ports\n").await;
        let isolated = serve("cage:\n  network: isolated\n").await;
        for server in [&open, &caged, &isolated] {
            live_turn(server, 0).await;
        }
        let mut samples = [Vec::new(), Vec::new(), Vec::new()];
        for turn in 1..=turns {
            for (server, taken) in [&open, &caged, &isolated].into_iter().zip(&mut samples) {
                taken.push(live_turn(server, turn).await);
            }
        }
        let [mut a, mut b, mut c] = samples;
        (median(&mut a), median(&mut b), median(&mut c))
    });
    harness_bridge::harness::cage::release();

    if quick {
        println!(
            "cage: launch {:.2}/{:.2}/{:.2} ms, run {:.0}/{:.0}/{:.0} ms, live turn {:.1}/{:.1}/{:.1} ms (uncaged/caged/isolated)",
            ms(bare),
            ms(walled),
            ms(isolated),
            ms(open_run),
            ms(caged_run),
            ms(isolated_run),
            ms(open_live),
            ms(caged_live),
            ms(isolated_live)
        );
        return;
    }
    println!("cage cost, medians ({launches} launches, {turns} turns each way):");
    println!("                         uncaged     caged  isolated  caged-uncaged  isolated-caged");
    for (what, open, caged, own) in [
        ("launch (/bin/true)", bare, walled, isolated),
        ("one-shot run turn", open_run, caged_run, isolated_run),
        ("live turn (warm)", open_live, caged_live, isolated_live),
    ] {
        println!(
            "  {what:<20} {:>8.2} ms {:>8.2} ms {:>8.2} ms {:>+11.2} ms {:>+12.2} ms",
            ms(open),
            ms(caged),
            ms(own),
            ms(caged) - ms(open),
            ms(own) - ms(caged)
        );
    }
}
