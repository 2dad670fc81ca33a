//! A real LangBot (the pinned release, headless on SQLite, 127.0.0.1 only)
//! with the plugin package installed over its HTTP API, and the real Claude
//! Code CLI behind it against a fake Messages API. Three turns of one
//! conversation through the Agent debug stream, LangBot restarted before
//! the third: deltas stream into LangBot, the second turn's history tool
//! returns LangBot's own transcript of the first, the session pointer sits
//! in LangBot's conversation state, and every turn resumes the one session
//! — after the restart too. `tests/langbot/real_langbot.py` drives LangBot.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::anthropic::{ANSWER, ASK, FOLLOW_UP, fake_model};
use serde_json::Value;

const FIRST: &str = "Remember this: the codeword is tulip.";

/// The LangBot venv's python: `HARNESS_BRIDGE_LANGBOT_PYTHON`, else
/// `target/langbot-venv` (both set up by `scripts/test`).
fn langbot_python() -> PathBuf {
    let path = std::env::var_os("HARNESS_BRIDGE_LANGBOT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/langbot-venv/bin/python")
        });
    assert!(
        path.exists(),
        "LangBot is not installed at {}: run `scripts/test` (it creates the venv from \
         tests/langbot/requirements.txt), or set HARNESS_BRIDGE_LANGBOT_PYTHON",
        path.display()
    );
    path
}

/// The plugin package as the SDK builds it, into `dir`, without a bundled
/// bridge: LangBot is told this test's bridge binary by the plugin's
/// `bridge_path` setting (the bundled-binary path is covered by
/// `relay_langbot.rs`; a debug binary is over LangBot's upload limit).
fn build_package(dir: &Path) -> PathBuf {
    let plugin = common::copy_plugin(dir);
    let out = dir.join("lbpkg");
    let build = std::process::Command::new(common::sdk_python())
        .args(["-m", "langbot_plugin.cli.__init__", "build", "-o"])
        .arg(&out)
        .current_dir(&plugin)
        .output()
        .expect("the SDK builds the package");
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "lbpkg"))
        .expect("an .lbpkg")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_langbot_runs_claude_code_through_the_plugin_across_a_restart() {
    let python = langbot_python();
    let claude = common::cli("claude");
    let dir = tempfile::tempdir().unwrap();
    let package = build_package(dir.path());
    let (model_url, fake) = fake_model(false).await;
    let home = dir.path().join("langbot");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/langbot/real_langbot.py");
    let output = tokio::process::Command::new(&python)
        .arg(&script)
        .arg("--home")
        .arg(&home)
        .arg("--lbpkg")
        .arg(&package)
        .arg("--claude")
        .arg(&claude)
        .arg("--model-url")
        .arg(&model_url)
        .arg("--plugin-config")
        .arg(format!("bridge_path={}", common::bridge_bin()))
        .args(["--turns", FIRST, ASK, FOLLOW_UP, "--restart-before-last"])
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), output)
        .await
        .expect("LangBot's turns finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let log = std::fs::read_to_string(home.join("langbot.log")).unwrap_or_default();
    let tail: String = log
        .lines()
        .rev()
        .take(60)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}\nlangbot.log (tail):\n{tail}"
    );
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let streamed = |turn: u64| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["event"] == "stream" && e["turn"] == turn)
            .map(|e| &e["item"])
            .collect()
    };
    for turn in 1..=3 {
        assert!(
            !streamed(turn).is_empty(),
            "turn {turn} streamed nothing\n{stdout}\n{tail}"
        );
    }
    // Deltas reached LangBot's stream before turn 2 completed.
    let second = streamed(2);
    let delta = second
        .iter()
        .position(|i| i["data"]["type"] == "message.delta")
        .unwrap_or_else(|| panic!("no streamed delta in turn 2: {second:?}"));
    let completed = second
        .iter()
        .position(|i| i["kind"] == "completed")
        .expect("turn 2 completed");
    assert!(delta < completed);
    assert_eq!(
        second[delta]["data"]["data"]["chunk"]["all_content"],
        ANSWER
    );

    let requests = fake.requests.lock().unwrap().clone();
    let streamed_requests: Vec<&Value> = requests.iter().filter(|r| r["stream"] == true).collect();
    // Turn 2's history tool returned LangBot's own transcript of turn 1.
    let tool_result = streamed_requests
        .iter()
        .find(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m.to_string().contains("tool_result"))
        })
        .expect("the model got a tool result");
    assert!(
        tool_result["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .to_string()
            .contains("codeword is tulip"),
        "the history tool did not return LangBot's transcript of turn 1"
    );
    // Each turn resumed the session: turn 3 (after the restart) carries turns 1 and 2.
    let turn_3 = streamed_requests
        .iter()
        .find(|r| r.to_string().contains(FOLLOW_UP))
        .expect("turn 3 reached the model");
    let seen = turn_3["messages"].to_string();
    assert!(
        seen.contains("codeword is tulip") && seen.contains(ASK) && seen.contains(ANSWER),
        "turn 3 did not resume the session"
    );
    // The pointer lives in LangBot's conversation state.
    let state = events
        .iter()
        .find(|e| e["event"] == "state")
        .expect("LangBot's state");
    let session = state["entries"]["external.session_id"]
        .as_str()
        .unwrap_or("");
    assert!(!session.is_empty(), "{state}");
    assert_eq!(
        state["entries"]["external.harness"], "claude-code",
        "{state}"
    );

    assert!(events.iter().any(|e| e["event"] == "done"));
    let left = common::processes_under(dir.path());
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
