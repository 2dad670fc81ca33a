//! One `harness-bridge run` turn with an agent of the Agent Client
//! Protocol, against the same agent driven alone. The agent is a script
//! (tests/common/scripted.rs's `ACP_SCRIPT`): it opens a session, answers
//! a prompt after `DELAY` seconds of "model time" (0.5 by default) and
//! exits at the end of its input. "Alone" is the script started, given
//! `initialize`, `session/new` and `session/prompt` and its input closed,
//! timed to its exit; "bridge" is `harness-bridge run --harness acpscript`
//! (a new process: store, grant, workspace, MCP server, the protocol,
//! recording, stopping the agent). Runs alternate so drift hits both alike.
//! The difference is what the bridge adds to a turn; it is not to include
//! waiting for an agent that was never told its input ended.
//!
//! Reproduce: `cargo bench --bench acp` (`TURNS=20` for more runs, `DELAY`
//! for another model time). Without `--bench` (as `cargo test --bench acp`
//! runs it) one turn each way, as a check.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use harness_bridge_testkit::scripted;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The agent alone: the three requests a turn takes, then end of input;
/// timed from its start to its exit.
fn alone(agent: &Path, delay: &str) -> Duration {
    let start = Instant::now();
    let mut child = Command::new(agent)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("ACPSCRIPT_DELAY", delay)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the agent starts");
    let mut stdin = child.stdin.take().expect("stdin");
    for (id, method, params) in [
        (1, "initialize", r#"{"protocolVersion":1}"#),
        (2, "session/new", r#"{"cwd":"/tmp","mcpServers":[]}"#),
        (
            3,
            "session/prompt",
            r#"{"sessionId":"acpscript-1","prompt":[{"type":"text","text":"Hello"}]}"#,
        ),
    ] {
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        )
        .expect("request written");
    }
    drop(stdin);
    let output = child.wait_with_output().expect("the agent runs");
    let elapsed = start.elapsed();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && said.contains("end_turn"),
        "the agent alone did not answer: {said}"
    );
    elapsed
}

/// The same turn through `harness-bridge run`, timed to its exit.
fn bridged(tools: &Path, agent: &Path, data: &Path, delay: &str, turn: usize) -> Duration {
    let conversation = format!("bench-{turn}");
    support::timed_bridge_run(
        Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
            .arg("--data-dir")
            .arg(data)
            .arg("run")
            .arg("--adapters")
            .arg(tools.join("adapters"))
            .args(["--harness", "acpscript", "--bin"])
            .arg(agent)
            .args(["--conversation", &conversation, "--text", "Hello"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("ACPSCRIPT_DELAY", delay)
            .stdin(Stdio::null())
            .stderr(Stdio::null()),
    )
}

fn main() {
    let quick = support::quick();
    let turns = support::turns(1, 10);
    let delay = std::env::var("DELAY").unwrap_or_else(|_| "0.5".into());
    let tools = tempfile::tempdir().expect("tools");
    let agent = scripted::install_acp(tools.path());
    let data = tempfile::tempdir().expect("data");

    // One of each first: caches warm, both paths known to work.
    alone(&agent, &delay);
    bridged(tools.path(), &agent, data.path(), &delay, 0);
    let (mut own, mut through) = (Vec::new(), Vec::new());
    for turn in 1..=turns {
        own.push(alone(&agent, &delay));
        through.push(bridged(tools.path(), &agent, data.path(), &delay, turn));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (own, through) = (median(&mut own), median(&mut through));
    if quick {
        println!(
            "acp: one turn each way: agent alone {:.0} ms, harness-bridge run {:.0} ms",
            ms(own),
            ms(through)
        );
        return;
    }
    println!("acp run turn, {turns} runs each (median), agent model time {delay} s:");
    println!("  the agent alone          {:>8.1} ms", ms(own));
    println!("  harness-bridge run       {:>8.1} ms", ms(through));
    println!(
        "  added by the bridge      {:>8.1} ms",
        ms(through) - ms(own)
    );
}
