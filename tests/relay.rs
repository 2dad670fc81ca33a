//! `harness-bridge relay` as a host plugin drives it: frames on its stdio,
//! the test playing the plugin (and, through it, the host). A scripted
//! harness stands in for the CLI; the real CLIs go through the relay in
//! `relay_langbot.rs`.

use harness_bridge_testkit as common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const PROTOCOL: &str = "harness-bridge.relay.v1";

/// The plugin's end of a relay.
struct Plugin {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    data: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Plugin {
    async fn start() -> Plugin {
        let tools = common::tempdir();
        common::scripted::install(tools.path());
        Plugin::start_on(common::tempdir(), tools).await
    }

    async fn start_on(data: tempfile::TempDir, tools: tempfile::TempDir) -> Plugin {
        Plugin::start_on_with(data, tools, &[]).await
    }

    /// [`Plugin::start_on`], the relay given `flags` besides.
    async fn start_on_with(
        data: tempfile::TempDir,
        tools: tempfile::TempDir,
        flags: &[&str],
    ) -> Plugin {
        let mut child = tokio::process::Command::new(common::bridge_bin())
            .arg("--data-dir")
            .arg(data.path())
            .arg("relay")
            .arg("--adapters")
            .arg(tools.path().join("adapters"))
            .arg("--kill-grace")
            .arg("1")
            .args(flags)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    tools.path().display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("relay starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Plugin {
            child,
            stdin,
            stdout,
            data,
            tools,
        }
    }

    /// Stop this relay (its input closed, as when the plugin goes) and
    /// start another on the same data folder and tools: the plugin
    /// restarted.
    async fn restart(mut self) -> Plugin {
        drop(self.stdin.take());
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the relay exits once its input closes")
            .expect("its status");
        let Plugin { data, tools, .. } = self;
        Plugin::start_on(data, tools).await
    }

    async fn send(&mut self, frame: Value) {
        let mut line = frame.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn next(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
            .await
            .expect("a frame in time")
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    async fn hello(&mut self) -> Value {
        self.hello_frame(json!({"type": "hello", "protocol": PROTOCOL, "client": "test plugin"}))
            .await
    }

    async fn hello_frame(&mut self, frame: Value) -> Value {
        self.send(frame).await;
        let hello = self.next().await.expect("hello back");
        assert_eq!(hello["type"], "hello", "{hello}");
        hello
    }

    /// Wait until a hanging harness and its child run, answering the
    /// bridge's host calls (null) meanwhile.
    async fn wait_for_harness(&mut self) {
        let root = self.data.path().join("workspaces");
        for _ in 0..200 {
            if common::processes_under(&root).len() >= 2 {
                return;
            }
            let next = tokio::time::timeout(Duration::from_millis(100), self.stdout.next_line());
            if let Ok(Ok(Some(line))) = next.await {
                let frame: Value = serde_json::from_str(&line).unwrap();
                if frame["type"] == "host_call" {
                    self.send(json!({"type": "host_reply", "id": frame["id"], "data": null}))
                        .await;
                }
            }
        }
        panic!("the harness never started");
    }

    /// The next `steered` frame, answering host calls (null) meanwhile.
    async fn steered(&mut self) -> Value {
        loop {
            let frame = self.next().await.expect("a steered frame");
            match frame["type"].as_str() {
                Some("steered") => return frame,
                Some("host_call") => {
                    self.send(json!({"type": "host_reply", "id": frame["id"], "data": null}))
                        .await;
                }
                _ => panic!("unexpected frame {frame}"),
            }
        }
    }

    /// A run of the scripted harness; PATH comes in the frame, as the
    /// plugin sends it from its config.
    fn run_frame(&self, run_id: &str, conversation: &str, mode: &str) -> Value {
        let ctx = common::context(run_id, conversation);
        let path = format!(
            "{}:{}",
            self.tools.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        json!({
            "type": "run", "run_id": run_id, "harness": "scripted",
            "context": ctx, "env": {"FAKE_MODE": mode, "PATH": path},
        })
    }

    /// Read frames until every run in `runs` has ended, answering host
    /// calls with `answer`; returns each run's results in order.
    async fn until_done(
        &mut self,
        runs: &[&str],
        answer: impl Fn(&Value) -> Value,
    ) -> (HashMap<String, Vec<Value>>, Vec<Value>) {
        let mut results: HashMap<String, Vec<Value>> = HashMap::new();
        let mut calls = Vec::new();
        let mut open: Vec<&str> = runs.to_vec();
        while !open.is_empty() {
            let frame = self.next().await.expect("frames until the runs end");
            match frame["type"].as_str() {
                Some("result") => {
                    let run_id = frame["run_id"].as_str().unwrap().to_string();
                    let kind = frame["result"]["type"].as_str().unwrap_or("").to_string();
                    results
                        .entry(run_id.clone())
                        .or_default()
                        .push(frame["result"].clone());
                    if kind == "run.completed" || kind == "run.failed" {
                        open.retain(|r| *r != run_id);
                    }
                }
                Some("host_call") => {
                    let mut reply = answer(&frame);
                    reply["type"] = json!("host_reply");
                    reply["id"] = frame["id"].clone();
                    calls.push(frame);
                    self.send(reply).await;
                }
                _ => panic!("unexpected frame {frame}"),
            }
        }
        (results, calls)
    }
}

fn kinds(results: &[Value]) -> Vec<&str> {
    results
        .iter()
        .map(|r| r["type"].as_str().unwrap_or(""))
        .collect()
}

fn sequences(results: &[Value]) -> Vec<u64> {
    results
        .iter()
        .map(|r| r["sequence"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_is_refused_with_a_reason() {
    let mut plugin = Plugin::start().await;
    plugin
        .send(json!({"type": "hello", "protocol": "harness-bridge.relay.v0"}))
        .await;
    let error = plugin.next().await.expect("an error frame");
    assert_eq!(error["type"], "error");
    assert!(
        error["message"].as_str().unwrap().contains(PROTOCOL),
        "{error}"
    );
    let status = plugin.child.wait().await.unwrap();
    assert_eq!(status.code(), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_multiplexed_and_host_calls_answered_by_the_plugin() {
    let mut plugin = Plugin::start().await;
    let hello = plugin.hello().await;
    assert!(
        hello["harnesses"]
            .as_array()
            .unwrap()
            .contains(&json!("scripted"))
    );
    // Two runs at once (the first slow); garbage in between is reported, not fatal.
    let a = plugin.run_frame("run-a", "conv-a", "slow");
    let b = plugin.run_frame("run-b", "conv-b", "quiet");
    plugin.send(a).await;
    plugin.send(json!({"type": "nonsense"})).await;
    plugin.send(b).await;
    let mut state: HashMap<String, Value> = HashMap::new();
    let mut errors = 0;
    let mut results: HashMap<String, Vec<Value>> = HashMap::new();
    let mut calls = Vec::new();
    let mut open = vec!["run-a", "run-b"];
    let mut order = Vec::new();
    while !open.is_empty() {
        let frame = plugin.next().await.unwrap();
        match frame["type"].as_str().unwrap() {
            "error" => errors += 1,
            "host_call" => {
                let key = format!("{}/{}", frame["run_id"], frame["args"]["key"]);
                let data = match frame["action"].as_str().unwrap() {
                    "state_get" => state.get(&key).cloned().unwrap_or(Value::Null),
                    "state_set" => {
                        state.insert(key, frame["args"]["value"].clone());
                        Value::Null
                    }
                    other => panic!("unexpected host call {other}"),
                };
                plugin
                    .send(json!({"type": "host_reply", "id": frame["id"], "data": data}))
                    .await;
                calls.push(frame);
            }
            "result" => {
                let run_id = frame["run_id"].as_str().unwrap().to_string();
                let kind = frame["result"]["type"].as_str().unwrap().to_string();
                results
                    .entry(run_id.clone())
                    .or_default()
                    .push(frame["result"].clone());
                if kind.starts_with("run.") {
                    order.push(run_id.clone());
                    open.retain(|r| *r != run_id);
                }
            }
            other => panic!("unexpected frame type {other}"),
        }
    }
    assert_eq!(errors, 1, "the nonsense frame is reported once");
    assert_eq!(
        order,
        vec!["run-b", "run-a"],
        "the quick run did not wait for the slow one"
    );
    for run in ["run-a", "run-b"] {
        let results = &results[run];
        assert_eq!(
            sequences(results),
            (1..=results.len() as u64).collect::<Vec<_>>()
        );
        assert_eq!(kinds(results).last(), Some(&"run.completed"), "{results:?}");
        assert!(results.iter().all(|r| r["run_id"] == run));
    }
    // The resume pointer went to the host through the plugin, per run.
    let sets: Vec<&Value> = calls
        .iter()
        .filter(|c| c["action"] == "state_set")
        .collect();
    assert_eq!(sets.len(), 6, "{calls:?}");
    assert!(sets.iter().all(|c| c["args"]["scope"] == "conversation"));
    assert_eq!(
        state[&format!("{}/{}", json!("run-a"), json!("external.session_id"))],
        "scripted-1"
    );
    // The host keeps transcript and state; locally, besides workspaces,
    // only the bridge's own ledger of what each run cost (`host usage`).
    let bridge = |args: &[&str]| {
        let out = std::process::Command::new(common::bridge_bin())
            .arg("--data-dir")
            .arg(plugin.data.path())
            .args(["host"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for conversation in ["conv-a", "conv-b"] {
        let history = bridge(&["history", conversation]);
        assert!(
            !history.contains("slow") && !history.contains("quiet"),
            "{history}"
        );
        let state = bridge(&["state", "conversation", conversation]);
        assert!(!state.contains("external.session_id"), "{state}");
    }
    let runs = bridge(&["usage", "--by", "conversation", "--json"]);
    assert!(
        runs.contains("\"conv-a\"") && runs.contains("\"conv-b\""),
        "{runs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_unreadable_host_reply_does_not_fail_the_run() {
    // A refusal, and an error without its message (not a valid reply): the
    // harness's call ends either way, rather than wait for the deadline.
    for refusal in [
        json!({"error": {"code": "unauthorized", "message": "no state for you"}}),
        json!({"error": {"code": "unauthorized"}}),
    ] {
        let mut plugin = Plugin::start().await;
        plugin.hello().await;
        let frame = plugin.run_frame("run-x", "conv-x", "quiet");
        plugin.send(frame).await;
        let (results, calls) = plugin
            .until_done(&["run-x"], |call| match call["action"].as_str() {
                Some("state_get") => refusal.clone(),
                _ => json!({"data": null}),
            })
            .await;
        assert!(calls.iter().any(|c| c["action"] == "state_get"));
        let results = &results["run-x"];
        assert_eq!(kinds(results).last(), Some(&"run.completed"), "{results:?}");
    }
}

/// The relay carries outbox files inline (up to 1 MiB): a larger one still
/// reaches the plugin by name and size, so the person can be told of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_file_too_large_to_relay_is_still_named() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    // The scripted harness writes `note.txt` (5 bytes) and `charts/big.bin`
    // (2 MiB) to its outbox.
    let frame = plugin.run_frame("run-f", "conv-f", "files");
    plugin.send(frame).await;
    let (results, _) = plugin
        .until_done(&["run-f"], |_| json!({"data": null}))
        .await;
    let results = &results["run-f"];
    let file = |name: &str| {
        results
            .iter()
            .find(|r| r["type"] == "artifact.created" && r["data"]["name"] == name)
            .unwrap_or_else(|| panic!("no artifact.created for {name}: {results:?}"))["data"]
            .clone()
    };
    let note = file("note.txt");
    assert_eq!(note["content_base64"], "aGVsbG8=", "{note}");
    let big = file("charts/big.bin");
    assert_eq!(big["size_bytes"], 2 * 1024 * 1024, "{big}");
    assert!(
        big["content_base64"].is_null() && big["artifact_id"].is_null(),
        "{big}"
    );
    let why = big["metadata"]["withheld"].as_str().unwrap_or_default();
    assert!(
        why.contains("charts/big.bin") && why.contains("inline"),
        "{big}"
    );
    assert_eq!(kinds(results).last(), Some(&"run.completed"), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_frame_over_the_limit_gets_its_run_failed() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    let mut frame = plugin.run_frame("run-big", "conv-big", "quiet");
    frame["context"]["input"]["text"] = json!("x".repeat(65 * 1024 * 1024));
    plugin.send(frame).await;
    let (results, _) = plugin
        .until_done(&["run-big"], |_| json!({"data": null}))
        .await;
    let results = &results["run-big"];
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["sequence"], 1);
    assert_eq!(results[0]["data"]["code"], "invalid_argument");
    let why = results[0]["data"]["error"].as_str().unwrap();
    assert!(why.contains("64 MiB"), "{why}");
    // The relay reads on: the next run goes through.
    let frame = plugin.run_frame("run-after", "conv-big", "quiet");
    plugin.send(frame).await;
    let (results, _) = plugin
        .until_done(&["run-after"], |_| json!({"data": null}))
        .await;
    assert_eq!(kinds(&results["run-after"]).last(), Some(&"run.completed"));
}

/// The instructions the run's harness got, which name its tools.
fn instructions_of_only_workspace(data: &std::path::Path) -> String {
    let found: Vec<_> = walkdir::WalkDir::new(data.join("workspaces"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.path().ends_with(".langbot/instructions.md"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    std::fs::read_to_string(found[0].path()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gets_only_the_tools_its_plugin_can_answer() {
    for (apis, shown, hidden) in [
        (
            None,
            vec!["history_page", "artifact_read", "plugin_storage_get"],
            vec![],
        ),
        (
            Some(json!(["history_page", "state", "no_such_api"])),
            vec!["history_page", "state_get"],
            vec![
                "artifact_read",
                "artifact_metadata",
                "plugin_storage_get",
                "event_page",
            ],
        ),
    ] {
        let mut plugin = Plugin::start().await;
        let mut hello = json!({"type": "hello", "protocol": PROTOCOL, "client": "test plugin"});
        if let Some(apis) = apis {
            hello["apis"] = apis;
        }
        plugin.hello_frame(hello).await;
        let frame = plugin.run_frame("run-t", "conv-t", "quiet");
        plugin.send(frame).await;
        let (results, _) = plugin
            .until_done(&["run-t"], |_| json!({"data": null}))
            .await;
        assert_eq!(kinds(&results["run-t"]).last(), Some(&"run.completed"));
        let instructions = instructions_of_only_workspace(plugin.data.path());
        for tool in shown {
            assert!(
                instructions.contains(tool),
                "{tool} missing:\n{instructions}"
            );
        }
        for tool in hidden {
            assert!(
                !instructions.contains(tool),
                "{tool} shown:\n{instructions}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_runs_are_refused_and_a_cancel_stops_a_run() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    plugin
        .send(json!({"type": "run", "run_id": "bad", "harness": "scripted", "context": {"run_id": "bad"}}))
        .await;
    let (results, _) = plugin.until_done(&["bad"], |_| json!({"data": null})).await;
    assert_eq!(results["bad"][0]["data"]["code"], "invalid_argument");
    assert!(
        results["bad"][0]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("$.trigger")
    );

    let frame = plugin.run_frame("run-h", "conv-h", "hang");
    plugin.send(frame).await;
    plugin.wait_for_harness().await;
    let root = plugin.data.path().join("workspaces");
    // A follow-up for a harness that takes none mid-turn, and one for a run
    // that does not exist: both answered, neither taken (the plugin sends
    // it as the next turn).
    for (run_id, id) in [("run-h", 7), ("no-such-run", 8)] {
        plugin
            .send(json!({"type": "steer", "run_id": run_id, "id": id, "text": "and also this"}))
            .await;
        let steered = plugin.steered().await;
        assert_eq!(
            steered,
            json!({"type": "steered", "run_id": run_id, "id": id, "taken": false})
        );
    }
    plugin
        .send(json!({"type": "cancel", "run_id": "run-h"}))
        .await;
    let (results, _) = plugin
        .until_done(&["run-h"], |_| json!({"data": null}))
        .await;
    let last = results["run-h"].last().unwrap();
    assert_eq!(last["data"]["code"], "cancelled", "{last}");
    assert!(common::processes_under(&root).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_plugin_vanishes_every_run_stops_and_nothing_is_left() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    let frame = plugin.run_frame("run-v", "conv-v", "hang");
    plugin.send(frame).await;
    plugin.wait_for_harness().await;
    let root = plugin.data.path().join("workspaces");
    // The plugin goes away: its end of stdin closes.
    drop(plugin.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(20), plugin.child.wait())
        .await
        .expect("the relay exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let left = common::processes_under(&root);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// The real Claude Code CLI behind the relay: the harness's history tool
/// reads the *host's* transcript (answered here, as LangBot would), the
/// resume pointer goes to the host's state, and the next turn resumes
/// from it. The relay itself runs with an empty environment: PATH, HOME
/// and the model settings come in the run frame, as the plugin sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_behind_the_relay_reads_the_hosts_history_and_resumes_from_its_state() {
    use common::anthropic::{ANSWER, ASK, FOLLOW_UP, fake_model};
    const HOST_ONLY: &str = "HOST TRANSCRIPT: the launch code is tulip";
    let claude = common::cli("claude");
    let (model_url, fake) = fake_model(false).await;
    let home = common::tempdir();
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    let env = json!({
        "PATH": std::env::var("PATH").unwrap_or_default(),
        "HOME": home.path(),
        "CLAUDE_CONFIG_DIR": home.path().join(".claude"),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    });
    let mut state: HashMap<String, Value> = HashMap::new();
    let mut turn = async |plugin: &mut Plugin, run_id: &str, text: &str| {
        let mut ctx = serde_json::to_value(common::context(run_id, "group-9")).unwrap();
        ctx["input"]["text"] = json!(text);
        plugin
            .send(json!({
                "type": "run", "run_id": run_id, "harness": "claude-code", "context": ctx,
                "binary": claude, "env": env,
            }))
            .await;
        let (results, calls) = plugin
            .until_done(&[run_id], |call| {
                let key = call["args"]["key"].as_str().unwrap_or("").to_string();
                match call["action"].as_str().unwrap() {
                    "history_page" => json!({"data": {"items": [{
                        "transcript_id": "t1", "event_id": "e1", "conversation_id": "group-9",
                        "role": "user", "item_type": "message", "content": HOST_ONLY, "seq": 1,
                    }], "has_more": false}}),
                    "state_get" => json!({"data": state.get(&key).cloned().unwrap_or(Value::Null)}),
                    "state_set" => json!({"data": null}),
                    other => {
                        json!({"error": {"code": "not_found", "message": format!("no {other}")}})
                    }
                }
            })
            .await;
        for call in calls.iter().filter(|c| c["action"] == "state_set") {
            let key = call["args"]["key"].as_str().unwrap().to_string();
            state.insert(key, call["args"]["value"].clone());
        }
        (results.into_values().next().unwrap(), calls)
    };

    let (first, calls) = turn(&mut plugin, "relay-1", ASK).await;
    assert_eq!(kinds(&first).last(), Some(&"run.completed"), "{first:?}");
    assert!(
        calls.iter().any(|c| c["action"] == "history_page"),
        "{calls:?}"
    );
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r.to_string().contains(HOST_ONLY)),
        "the model never saw the host's transcript"
    );
    let session = first
        .iter()
        .find(|r| r["type"] == "state.updated" && r["data"]["key"] == "external.session_id")
        .map(|r| r["data"]["value"].clone())
        .expect("state.updated external.session_id");

    let (second, _) = turn(&mut plugin, "relay-2", FOLLOW_UP).await;
    let last = second.last().unwrap();
    assert_eq!(last["type"], "run.completed", "{last}");
    assert_eq!(
        last["data"]["message"]["metadata"]["session"]["resumed"],
        true
    );
    assert_eq!(
        last["data"]["message"]["metadata"]["session"]["session_id"],
        session
    );
    let requests = fake.requests.lock().unwrap().clone();
    let turn_2 = requests
        .iter()
        .rev()
        .find(|r| r["stream"] == true && r.to_string().contains(FOLLOW_UP))
        .expect("turn 2 reached the model");
    let seen = turn_2["messages"].to_string();
    assert!(
        seen.contains(ASK) && seen.contains(ANSWER),
        "turn 2 did not carry turn 1"
    );
}

/// The plugin's run frame carries the operator's MCP servers; the context
/// only names them, and a context that defines one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_names_the_operators_mcp_servers_and_defines_none() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    let mut frame = plugin.run_frame("r-picks", "c-1", "quiet");
    frame["mcp_servers"] = json!({"wiki": {"url": "http://127.0.0.1:9/wiki"}});
    frame["context"]["config"] = json!({"mcp_servers": ["wiki"]});
    plugin.send(frame).await;
    let mut hostile = plugin.run_frame("r-defines", "c-2", "quiet");
    hostile["context"]["config"] =
        json!({"mcp_servers": {"sh": {"command": "/bin/sh", "args": ["-c", "id"]}}});
    plugin.send(hostile).await;
    let (results, _) = plugin
        .until_done(&["r-picks", "r-defines"], |_| json!({"data": null}))
        .await;
    assert_eq!(
        results["r-picks"].last().unwrap()["type"],
        "run.completed",
        "{:?}",
        results["r-picks"]
    );
    let config = walkdir::WalkDir::new(plugin.data.path().join("workspaces"))
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name() == "mcp.json")
        .expect("the picking run's MCP config");
    let config: Value = serde_json::from_slice(&std::fs::read(config.path()).unwrap()).unwrap();
    assert_eq!(
        config["mcpServers"]["wiki"]["url"],
        "http://127.0.0.1:9/wiki"
    );
    assert!(config["mcpServers"].get("sh").is_none(), "{config}");
    let refused = results["r-defines"].last().unwrap();
    assert_eq!(refused["data"]["code"], "invalid_argument", "{refused}");
    assert!(
        refused["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("cannot define one"),
        "{refused}"
    );
}

/// Turns of one conversation share its workspace: the relay runs them one
/// at a time in the order their frames came, and a turn cancelled while it
/// waits ends without ever starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_one_conversation_run_one_at_a_time_in_order() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    for run_id in ["r-1", "r-2", "r-3"] {
        let frame = plugin.run_frame(run_id, "c-same", "slow");
        plugin.send(frame).await;
    }
    plugin
        .send(json!({"type": "cancel", "run_id": "r-3"}))
        .await;
    let (results, _) = plugin
        .until_done(&["r-1", "r-2", "r-3"], |_| json!({"data": null}))
        .await;
    for run_id in ["r-1", "r-2"] {
        let last = results[run_id].last().unwrap();
        assert_eq!(last["type"], "run.completed", "{run_id}: {last}");
    }
    let cancelled = results["r-3"].last().unwrap();
    assert_eq!(cancelled["data"]["code"], "cancelled", "{cancelled}");
    let log = walkdir::WalkDir::new(plugin.data.path().join("workspaces"))
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name() == "turn-log")
        .expect("the turns' log");
    let text = std::fs::read_to_string(log.path()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        4,
        "two turns ran, the cancelled one never: {text}"
    );
    for pair in lines.chunks(2) {
        assert_eq!(
            pair[0].strip_prefix("start "),
            pair[1].strip_prefix("end "),
            "turns overlapped: {text}"
        );
    }
}

/// A host that stops answering holds a stopped turn's answer back by a
/// moment, not by the bridge's whole host-call timeout: after the
/// deadline, storing the resume pointer gets two seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_host_does_not_delay_a_stopped_turns_end() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    let mut frame = plugin.run_frame("r-late", "c-1", "hang");
    frame["context"]["config"] = json!({"timeout_seconds": 1});
    let sent = std::time::Instant::now();
    plugin.send(frame).await;
    let mut unanswered = 0;
    let terminal = loop {
        // The host answers lookups, then falls silent: storing the
        // resume pointer is never answered.
        let frame = plugin.next().await.expect("frames until the run ends");
        if frame["type"] == "host_call" {
            if frame["action"] == "state_set" {
                unanswered += 1;
            } else {
                plugin
                    .send(json!({"type": "host_reply", "id": frame["id"], "data": null}))
                    .await;
            }
        }
        if frame["type"] == "result" && frame["result"]["type"] == "run.failed" {
            break frame["result"].clone();
        }
    };
    assert!(unanswered > 0, "the bridge tried to store the pointer");
    assert_eq!(terminal["data"]["code"], "deadline_exceeded", "{terminal}");
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the end came {took:?} after the run was sent (deadline 1 s)"
    );
}

/// The plugin's settings declare the projects; a run's binding picks one
/// by name and works in a worktree of it, the summary of what it changed
/// coming back as a result. A declaration that is no repository fails
/// only the run that picks it; a run whose frame declared none cannot
/// pick one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_picks_a_project_its_plugin_declared() {
    let dir = common::tempdir();
    let repo = common::repo::repository(dir.path());
    let projects = json!({
        "web": {"repository": repo},
        "broken": {"repository": dir.path().join("nothing-here")},
    });
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    for (run_id, conversation, project, declared) in [
        ("r-web", "c-1", "web", true),
        ("r-broken", "c-2", "broken", true),
        ("r-undeclared", "c-3", "web", false),
    ] {
        let mut frame = plugin.run_frame(run_id, conversation, "quiet");
        if declared {
            frame["projects"] = projects.clone();
        }
        frame["context"]["config"] = json!({"project": project});
        plugin.send(frame).await;
    }
    let (results, _) = plugin
        .until_done(
            &["r-web", "r-broken", "r-undeclared"],
            |_| json!({"data": null}),
        )
        .await;
    let web = &results["r-web"];
    assert_eq!(web.last().unwrap()["type"], "run.completed", "{web:#?}");
    let summary = web
        .iter()
        .filter(|r| r["type"] == "message.completed")
        .filter_map(|r| r["data"]["message"]["content"].as_str())
        .find(|t| t.starts_with("Changes on branch `chat/c-1"))
        .unwrap_or_else(|| panic!("the summary comes back: {web:#?}"));
    assert!(summary.contains("turn-log"), "{summary}");
    assert!(
        web.iter().any(|r| r["type"] == "artifact.created"
            && r["data"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("changes-r-web") && n.ends_with(".diff"))),
        "{web:#?}"
    );
    let branches = common::repo::git(&repo, &["branch", "--list", "chat/*"]);
    assert!(
        branches.contains("chat/c-1"),
        "the conversation's branch is in the repository: {branches}"
    );
    for (run_id, said) in [
        ("r-broken", "is not a git repository"),
        ("r-undeclared", "unknown project `web` (known: none)"),
    ] {
        let end = results[run_id].last().unwrap();
        assert_eq!(end["type"], "run.failed", "{end}");
        assert_eq!(end["data"]["code"], "invalid_argument", "{end}");
        let error = end["data"]["error"].as_str().unwrap_or_default();
        assert!(error.contains(said), "{run_id}: {error}");
    }
}

/// A relay started again (its plugin restarted) puts away the worktrees
/// that went idle past their retention as soon as a run opens their
/// project: the idle conversation's folder and record go, its branch
/// stays, and the run that opened the project is not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_started_again_puts_away_idle_worktrees_when_a_run_opens_their_project() {
    let dir = common::tempdir();
    let repo = common::repo::repository(dir.path());
    let projects = json!({"web": {"repository": repo}});
    let run = |plugin: &Plugin, run_id: &str, conversation: &str| {
        let mut frame = plugin.run_frame(run_id, conversation, "quiet");
        frame["projects"] = projects.clone();
        frame["context"]["config"] = json!({"project": "web"});
        frame
    };
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    plugin.send(run(&plugin, "r-1", "c-1")).await;
    let (results, _) = plugin.until_done(&["r-1"], |_| json!({"data": null})).await;
    assert_eq!(results["r-1"].last().unwrap()["type"], "run.completed");
    let records: Vec<std::path::PathBuf> = std::fs::read_dir(repo.join(".git/harness-bridge"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "worktree"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let worktree = walkdir::WalkDir::new(plugin.data.path().join("workspaces"))
        .into_iter()
        .flatten()
        .map(|e| e.into_path())
        .find(|p| p.join(".git").is_file())
        .expect("c-1's worktree");
    std::fs::File::options()
        .write(true)
        .open(&records[0])
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(8 * 24 * 3600))
        .unwrap();

    let mut plugin = plugin.restart().await;
    plugin.hello().await;
    plugin.send(run(&plugin, "r-2", "c-2")).await;
    let (results, _) = plugin.until_done(&["r-2"], |_| json!({"data": null})).await;
    assert_eq!(results["r-2"].last().unwrap()["type"], "run.completed");
    // The record goes last, once the files are gone.
    tokio::time::timeout(Duration::from_secs(30), async {
        while records[0].exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("c-1's idle worktree is put away once a run opens the project");
    assert!(
        !worktree.join(".git").exists(),
        "c-1's worktree is gone: {}",
        worktree.display()
    );
    let branches = common::repo::git(&repo, &["branch", "--list", "chat/*"]);
    assert!(
        branches.contains("chat/c-1"),
        "its branch stays: {branches}"
    );
    assert!(branches.contains("chat/c-2"), "{branches}");
}

/// A chat command behind the relay: a run whose message is `/status` is
/// answered at once beside the conversation's running turn (which it
/// names), and `/stop` sent as a follow-up to that turn (LangBot's
/// steering) is answered in the turn's own stream, before the turn ends
/// stopped; the follow-up is taken, so the plugin sends no next turn.
/// `/stop` as a run of its own stops the conversation's turn as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_answered_beside_a_running_turn_and_a_stop_follow_up_ends_it() {
    let mut plugin = Plugin::start().await;
    plugin.hello().await;
    let mut frame = plugin.run_frame("run-long", "conv-cmd", "hang");
    frame["context"]["config"] = json!({"commands": {"allow": {"stop": "everyone"}}});
    plugin.send(frame).await;
    plugin.wait_for_harness().await;

    let mut status = plugin.run_frame("run-status", "conv-cmd", "hang");
    status["context"]["input"] = json!({"text": "/status"});
    plugin.send(status).await;
    let (results, _) = plugin
        .until_done(&["run-status"], |_| json!({"data": null}))
        .await;
    let answer = &results["run-status"];
    assert_eq!(kinds(answer), ["message.completed", "run.completed"]);
    let said = answer[0]["data"]["message"]["content"].as_str().unwrap();
    assert!(
        said.starts_with("Running: a turn of scripted") && said.contains("run-long"),
        "{said}"
    );

    plugin
        .send(json!({"type": "steer", "run_id": "run-long", "id": 3, "text": "/stop", "actor": "user-2"}))
        .await;
    let mut stream = Vec::new();
    let mut steered = None;
    while stream
        .last()
        .is_none_or(|r: &Value| r["type"] != "run.failed")
        || steered.is_none()
    {
        let frame = plugin.next().await.expect("frames");
        match frame["type"].as_str() {
            Some("result") => stream.push(frame["result"].clone()),
            Some("steered") => steered = Some(frame),
            Some("host_call") => {
                plugin
                    .send(json!({"type": "host_reply", "id": frame["id"], "data": null}))
                    .await;
            }
            _ => panic!("unexpected frame {frame}"),
        }
    }
    assert_eq!(
        steered.unwrap(),
        json!({"type": "steered", "run_id": "run-long", "id": 3, "taken": true})
    );
    let end = stream.last().unwrap();
    assert_eq!(end["data"]["code"], "cancelled", "{stream:?}");
    // The answer comes before the end it brings about.
    let said = stream
        .iter()
        .find(|r| r["type"] == "message.completed")
        .expect("the answer in the run's stream");
    let message = &said["data"]["message"];
    assert_eq!(message["metadata"]["command"], "stop", "{message}");
    assert_eq!(message["metadata"]["in_turn"], true, "{message}");
    assert!(
        message["content"]
            .as_str()
            .unwrap()
            .starts_with("Stopped the running turn"),
        "{message}"
    );

    // `/stop` as a run of its own (an Agent binding's second message)
    // stops the conversation's running turn too.
    let mut frame = plugin.run_frame("run-again", "conv-cmd", "hang");
    frame["context"]["config"] = json!({"commands": {"allow": {"stop": "everyone"}}});
    plugin.send(frame).await;
    plugin.wait_for_harness().await;
    let mut stop = plugin.run_frame("run-stop", "conv-cmd", "hang");
    stop["context"]["input"] = json!({"text": "/stop"});
    stop["context"]["config"] = json!({"commands": {"allow": {"stop": "everyone"}}});
    plugin.send(stop).await;
    let (results, _) = plugin
        .until_done(&["run-stop", "run-again"], |_| json!({"data": null}))
        .await;
    let said = results["run-stop"][0]["data"]["message"]["content"]
        .as_str()
        .unwrap();
    assert!(said.starts_with("Stopped the running turn"), "{said}");
    let end = results["run-again"].last().unwrap();
    assert_eq!(end["data"]["code"], "cancelled", "{end}");
}

/// The real Claude Code behind the relay, in `bypassPermissions`, in a
/// network of its own (the relay's default): its shell's ways out — TCP
/// to the host's loopback and to another address, UDP, a name lookup, a
/// pathname and an abstract unix socket — are all held and nothing
/// arrives; its key is a stand-in and the operator's, sent in the run
/// frame, is nowhere it read, while every model call reached the model
/// with the operator's key through the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn nothing_leaves_claudes_cage_behind_the_relay_but_through_its_door() {
    use common::escape::{OPERATOR_KEY, Targets, WAYS_OUT, assert_held, assert_stand_ins};
    let claude = common::cli("claude");
    let targets = Targets::new(false);
    let (model_url, fake) = common::anthropic::fake_model_running(&targets.script()).await;
    let home = common::tempdir();
    let tools = common::tempdir();
    common::scripted::install(tools.path());
    let data = common::tempdir();
    let mut plugin = Plugin::start_on_with(
        data,
        tools,
        &["--read-only", &targets.sockets.path().display().to_string()],
    )
    .await;
    plugin.hello().await;
    let mut ctx = serde_json::to_value(common::context("relay-door", "door-relay")).unwrap();
    ctx["input"]["text"] = json!("Look around");
    ctx["config"] = json!({"permission_mode": "bypassPermissions"});
    plugin
        .send(json!({
            "type": "run", "run_id": "relay-door", "harness": "claude-code", "context": ctx,
            "binary": claude,
            "env": {
                "PATH": std::env::var("PATH").unwrap_or_default(),
                "HOME": home.path(),
                "ANTHROPIC_BASE_URL": model_url,
                "ANTHROPIC_API_KEY": OPERATOR_KEY,
                "CLAUDE_CODE_MAX_RETRIES": "0",
            },
        }))
        .await;
    let (results, _) = plugin
        .until_done(&["relay-door"], |_| json!({"data": null}))
        .await;
    let results = &results["relay-door"];
    assert_eq!(kinds(results).last(), Some(&"run.completed"), "{results:?}");
    let requests = fake.requests.lock().unwrap().clone();
    let lines = common::probe_lines(&requests);
    assert_held(&lines, WAYS_OUT);
    targets.assert_untouched();
    assert_stand_ins(&lines, &requests, &fake.keys.lock().unwrap());
}
