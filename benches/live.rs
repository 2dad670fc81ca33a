//! Time to the first streamed word of a turn, as a client of `serve` sees
//! it: on a conversation whose Claude Code process is kept between turns
//! (live), against the same turn with one process per turn (cold: what
//! every turn cost before live sessions). Two `serve` processes run side by
//! side, `max_live_sessions: 16` and `max_live_sessions: 0`, on one fake
//! Messages API that streams its answer word by word; turns alternate
//! between them so drift hits both alike. Also the resident memory of one
//! idle live process, from `/metrics`.
//!
//! Reproduce: `cargo bench --bench live` (`TURNS=30` for more turns; 15 by
//! default). Without `--bench` (as `cargo test --bench live` runs it) one
//! turn each way, as a check that both paths still stream.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

mod support;

/// A `serve` process on a free port.
struct Serve {
    child: tokio::process::Child,
    url: String,
    _data: tempfile::TempDir,
}

async fn serve(
    claude: &std::path::Path,
    home: &std::path::Path,
    model_url: &str,
    live: usize,
) -> Serve {
    let data = tempfile::tempdir().expect("data");
    let config = data.path().join("bridge.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nno_auth: true\nharness_binaries:\n  claude-code: {}\nmax_live_sessions: {live}\n",
            claude.display()
        ),
    )
    .expect("bridge.yaml");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .arg("--data-dir")
        .arg(data.path())
        .args(["serve", "--config"])
        .arg(&config)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("ANTHROPIC_BASE_URL", model_url)
        .env("ANTHROPIC_API_KEY", "bench-key")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                if let Some(url) = line.strip_prefix("harness-bridge serving on ") {
                    break url.to_string();
                }
            }
            _ => panic!("serve exited before listening"),
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Serve {
        child,
        url,
        _data: data,
    }
}

/// One turn of `conversation`: the time to its first `message.delta`, and
/// whether the turn completed.
async fn turn(client: &reqwest::Client, serve: &Serve, conversation: &str) -> Duration {
    let start = Instant::now();
    let mut response = client
        .post(format!("{}/v1/runs", serve.url))
        .header("content-type", "application/json")
        .body(serde_json::json!({"conversation": conversation, "text": "Say hello."}).to_string())
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 200);
    let (mut first, mut body) = (None, String::new());
    while let Some(chunk) = response.chunk().await.expect("the stream") {
        body.push_str(&String::from_utf8_lossy(&chunk));
        if first.is_none() && body.contains("\"type\":\"message.delta\"") {
            first = Some(start.elapsed());
        }
    }
    let last = body.lines().last().unwrap_or_default();
    assert!(
        last.contains("\"run.completed\""),
        "the turn failed: {last}"
    );
    first.expect("the turn streamed a delta")
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A gauge's value in `/metrics`.
async fn gauge(client: &reqwest::Client, serve: &Serve, name: &str) -> f64 {
    let text = client
        .get(format!("{}/metrics", serve.url))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn main() {
    let quick = support::quick();
    let turns = support::turns(1, 15);
    let claude = support::claude();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let model_url = support::fake_messages_api().await;
        let home = tempfile::tempdir().expect("home");
        let mut live = serve(&claude, home.path(), &model_url, 16).await;
        let mut cold = serve(&claude, home.path(), &model_url, 0).await;
        let client = reqwest::Client::new();
        // The first turn of each starts its session (and warms the caches).
        turn(&client, &live, "bench").await;
        turn(&client, &cold, "bench").await;
        let (mut warm_samples, mut cold_samples) = (Vec::new(), Vec::new());
        for _ in 0..turns {
            warm_samples.push(turn(&client, &live, "bench").await);
            cold_samples.push(turn(&client, &cold, "bench").await);
        }
        let rss = gauge(&client, &live, "harness_bridge_live_sessions_rss_bytes").await;
        let idle = gauge(&client, &live, "harness_bridge_live_sessions_idle").await;
        assert_eq!(idle, 1.0, "one live process after the turns");
        if quick {
            println!("live: one warm and one cold turn streamed: ok");
        } else {
            let (warm, cold_median) = (median(&mut warm_samples), median(&mut cold_samples));
            println!("time to the first message.delta, median of {turns} turns each:");
            println!("  live (kept process)       {:>8.1} ms", ms(warm));
            println!("  cold (a process per turn) {:>8.1} ms", ms(cold_median));
            println!(
                "  live / cold               {:>8.3}",
                ms(warm) / ms(cold_median)
            );
            println!(
                "resident memory of one idle live Claude Code process: {:.0} MiB",
                rss / 1048576.0
            );
        }
        // SIGTERM: serve stops its live process on the way out.
        for serve in [&mut live, &mut cold] {
            if let Some(pid) = serve.child.id() {
                let pid = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
            let _ = serve.child.wait().await;
        }
    });
}
