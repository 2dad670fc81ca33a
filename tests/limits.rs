//! Per-conversation resource limits, on the user's path (the real
//! `harness-bridge`): a harness that eats memory past `--memory-mb` fails
//! `resource_limit` with a sentence naming the limit; a fork bomb is held
//! at `cage.limits.processes` and everything it started ends with the
//! turn, while another conversation's turn completes beside it — with a
//! scripted harness, and with the real Claude Code running the bomb
//! through its Bash tool.

use harness_bridge_testkit as common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::server::{ServeProcess, serve_claude};
use serde_json::json;

/// A harness (Claude Code's output) that acts as its prompt says: `hog`
/// allocates 10 MB at a time up to 400 MB, `bomb` starts 200 background
/// sleeps and waits a while (its own wait started first, so a bomb at
/// the limit cannot cut it short), `slow` takes two seconds; then it answers.
const SCRIPT: &str = r#"#!/bin/sh
cat > received-stdin
echo '{"type":"system","subtype":"init","session_id":"limited-1","mcp_servers":[]}'
case "$(cat received-stdin)" in
  *hog*)
    /usr/bin/python3 -c '
chunks = []
for step in range(1, 41):
    chunks.append(b"x" * (10 << 20))
    print("alloc", step * 10, "MB", flush=True)
' > hog-log 2>&1 ;;
  *bomb*)
    sleep 6 & held=$!
    ( for i in $(seq 200); do sleep 30 & done; wait ) 2>/dev/null &
    wait $held ;;
  *slow*)
    sleep 2 ;;
esac
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]},"session_id":"limited-1"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"limited-1","stop_reason":"end_turn"}'
"#;

const SPEC: &str = r#"
name: limited
label: Limited
description: A shell script that eats what its prompt says.
binary: limited-harness
argv:
  new: ["--new"]
  resume: ["--resume", "{session_id}"]
stdin: prompt
env:
  pass: [PATH]
family: claude
session_not_found: "No conversation found"
session_store: unknown
session_id_format: token
install_hint: "it is written by the test"
"#;

/// The script and its spec in a folder of their own, outside any data
/// folder (the cage lets a harness read its installation, nothing of the
/// bridge's).
fn install() -> tempfile::TempDir {
    let tools = common::tempdir();
    let script = tools.path().join("limited-harness");
    std::fs::write(&script, SCRIPT).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(tools.path().join("adapters")).unwrap();
    std::fs::write(tools.path().join("adapters/limited.yaml"), SPEC).unwrap();
    tools
}

fn path_with(tools: &Path) -> String {
    format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The workspace whose prompt held `word`.
fn workspace_saying(root: &Path, word: &str) -> Option<PathBuf> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| {
            e.file_name() == "received-stdin"
                && std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(word))
        })
        .and_then(|e| e.path().parent().map(Path::to_path_buf))
}

/// `run --memory-mb 64`: the harness's python is killed by the kernel
/// short of 400 MB, and the turn fails `resource_limit` naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier limits: needs cgroup memory, pids and cpu limits the bridge may set (root); scripts/test runs it"]
async fn a_memory_hog_past_its_limit_fails_resource_limit() {
    let tools = install();
    let data = common::tempdir();
    let adapters = tools.path().join("adapters").display().to_string();
    let args = [
        "--adapters",
        &adapters,
        "--harness",
        "limited",
        "--conversation",
        "hungry",
        "--text",
        "hog please",
        "--memory-mb",
        "64",
    ];
    let env = [
        ("PATH", path_with(tools.path())),
        ("RUST_LOG", "info".to_string()),
    ];
    let turn = common::bridge_run(data.path(), &args, &env).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.failed", "{end}\n{}", turn.stderr);
    assert_eq!(end["data"]["code"], "resource_limit", "{end}");
    assert_eq!(
        end["data"]["error"],
        "the conversation's agent hit its memory limit (64 MiB) and was killed",
        "{end}"
    );
    let workspace = workspace_saying(&data.path().join("workspaces"), "hog").unwrap();
    let log = std::fs::read_to_string(workspace.join("hog-log")).unwrap();
    assert!(log.contains("alloc 10 MB"), "{log}");
    assert!(!log.contains("alloc 400 MB"), "{log}");
    assert!(
        turn.stderr.contains("limits: per conversation by cgroup"),
        "{}",
        turn.stderr
    );

    // The same conversation's next turn, within its limit, completes.
    let args = [&args[..6], &["--text", "just answer", "--memory-mb", "64"]].concat();
    let next = common::bridge_run(data.path(), &args, &env).await;
    assert_eq!(
        next.terminal()["type"],
        "run.completed",
        "{:?}",
        next.terminal()
    );
}

/// Sample, from now until `stop` is set, how many of the bomb's sleeps
/// (`sleep 30`) work below `root`; the most seen. It starts before the
/// bomb's workspace exists and looks every 10 ms: the bridge ends a turn
/// as soon as its agent hits the limit, which can be within 200 ms.
fn sample_bomb(root: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut most = 0;
        while !stop.load(Ordering::Relaxed) {
            let sleeps = common::processes_under(&root)
                .iter()
                .filter(|p| p.ends_with("sleep 30 "))
                .count();
            most = most.max(sleeps);
            std::thread::sleep(Duration::from_millis(10));
        }
        most
    })
}

/// Wait until a workspace whose prompt said `word` exists.
async fn wait_workspace(root: &Path, word: &str) -> PathBuf {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = workspace_saying(root, word) {
            return found;
        }
        assert!(Instant::now() < until, "no workspace said {word}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `serve` with `cage: limits: processes: 50`: conversation A's 200
/// background sleeps are held at the limit, A fails `resource_limit`,
/// nothing A started outlives its turn, and B's turn, running meanwhile,
/// completes. `/metrics` says the limits are enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier limits: needs cgroup memory, pids and cpu limits the bridge may set (root); scripts/test runs it"]
async fn a_fork_bomb_is_held_at_its_limit_and_another_conversation_goes_on() {
    let tools = install();
    let config = format!(
        "adapters: {}\ndefault_harness: limited\nkill_grace_seconds: 1\ncage:\n  limits:\n    processes: 50\n    memory_mb: 256\n",
        tools.path().join("adapters").display()
    );
    let data = Arc::new(common::tempdir());
    let server = ServeProcess::spawn(data, &config, &[("PATH", path_with(tools.path()))]).await;
    let metrics = server.get_text("/metrics").await;
    for limit in ["memory", "processes", "cpu"] {
        assert!(
            metrics.contains(&format!(
                "harness_bridge_limits_enforced{{limit=\"{limit}\"}} 1"
            )),
            "{metrics}"
        );
    }

    let workspaces = server.workspaces();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_bomb(workspaces.clone(), stop.clone());
    let a = server.spawn_results(json!({"conversation": "bomber-a", "text": "bomb now"}));
    let bomb = wait_workspace(&workspaces, "bomb").await;
    // B runs while A's bomb is held.
    let b = server.spawn_results(json!({"conversation": "bystander-b", "text": "slow answer"}));
    let a = a.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let most = sampler.join().unwrap();
    let b = b.await.unwrap();

    let end = a.last().unwrap();
    assert_eq!(end["data"]["code"], "resource_limit", "{a:?}");
    let said = end["data"]["error"].as_str().unwrap();
    assert!(
        said.starts_with("the conversation's agent hit its process limit (50 processes"),
        "{said}"
    );
    eprintln!("at most {most} of the bomb's sleeps at once");
    assert!(most <= 50, "{most} of the bomb's sleeps at once");
    assert!(most >= 30, "the bomb never came near the limit: {most}");
    common::assert_none_left_under(&bomb).await;
    assert_eq!(b.last().unwrap()["type"], "run.completed", "{b:?}");
}

/// The real Claude Code in `serve` (live, bypassPermissions), its fake
/// model running a bomb through the Bash tool in conversation A only:
/// A's bomb is held at its process limit and ends with A's turn, which
/// fails `resource_limit`; B's turn, meanwhile, completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier limits+clis: needs cgroup memory, pids and cpu limits the bridge may set (root) and the pinned claude (tests/clis); scripts/test runs it"]
async fn claude_codes_bomb_is_held_while_another_conversation_answers() {
    let tag = common::unique_tag();
    // Only in A's workspace (its folder is named after the conversation).
    let command = format!(
        "case \"$PWD\" in *bomber*) sleep 8 & held=$!; ( for i in $(seq 400); do sleep 60.{tag} & done; wait ) 2>/dev/null & wait $held; echo bombed ;; *) echo fine ;; esac"
    );
    let (model_url, _fake) = common::anthropic::fake_model_running(&command).await;
    // Claude Code's Bash tool writes below its config folder: one the
    // operator lets every harness write (the cage refuses the rest).
    let config = common::tempdir_for_harnesses();
    std::fs::create_dir(config.path().join(".claude")).unwrap();
    std::fs::set_permissions(
        config.path().join(".claude"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let extra = format!(
        "default_config:\n  permission_mode: bypassPermissions\nset_env:\n  HOME: {dir}\n  CLAUDE_CONFIG_DIR: {dir}/.claude\ncage:\n  read_write: [{dir}]\n  limits:\n    processes: 160\n",
        dir = config.path().display()
    );
    let (server, _home) = serve_claude(model_url, &extra).await;
    let a =
        server.spawn_results(json!({"conversation": "bomber-a", "text": "Go", "run_id": "a-1"}));
    let until = Instant::now() + Duration::from_secs(60);
    while common::processes_with(&tag).len() < 20 {
        assert!(Instant::now() < until, "the bomb never went off");
        if a.is_finished() {
            let said = a.await.unwrap();
            panic!(
                "A ended before its bomb went off: {said:?}\n{:?}",
                server.log.lock().unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = server
        .spawn_results(json!({"conversation": "bystander-b", "text": "Hello", "run_id": "b-1"}));
    let mut most = 0;
    while !a.is_finished() {
        most = most.max(common::processes_with(&tag).len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a = a.await.unwrap();
    let b = b.await.unwrap();
    let end = a.last().unwrap();
    assert_eq!(end["data"]["code"], "resource_limit", "{a:?}");
    assert!(
        end["data"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("process limit (160")),
        "{end}"
    );
    eprintln!("at most {most} of the bomb's sleeps ran at once");
    assert!(most < 160, "{most} sleeps ran");
    assert_eq!(b.last().unwrap()["type"], "run.completed", "{b:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while !common::processes_with(&tag).is_empty() {
        assert!(Instant::now() < until, "the bomb outlived A's turn");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
