//! Escape tests: the real Claude Code in its most permissive mode
//! (`bypassPermissions`, no `IS_SANDBOX`), driven by a scripted fake model,
//! tries to leave its conversation — through its own Read and Write tools
//! and through shell commands — and each attempt fails, while the victim
//! conversation's turns go on. In `serve` with live processes (the
//! victim's kept Claude Code process is a target too) and in one-shot
//! `run`, the latter with the bridge run as an ordinary user.

use harness_bridge_testkit as common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::anthropic::{CALLS_DONE, fake_model, fake_model_running};
use common::probe_lines;
use common::server::{ServeProcess, serve_claude};
use serde_json::{Value, json};

/// What the victim says: it lands in its workspace, its session and the
/// store, and must never reach the attacker's model.
const SECRET: &str = "victim-secret-5b7e1c";

/// One probe per line: `HELD:name` when the attempt failed, `ESCAPED:name`
/// when it worked; `CONTROL:` lines show the shell ran and its own
/// workspace is its to use.
const PROBES: &str = r#"
p() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ESCAPED:$n"; else echo "HELD:$n"; fi; }
p read_victim_context cat "$B/.langbot/LANGBOT_CONTEXT.md"
p read_victim_agent_context cat "$B/.langbot/agent-context.json"
p list_victim_workspace ls "$B"
p read_victim_sessions ls "$B/.langbot/home"
p list_workspaces ls "$D/workspaces"
p read_store cat "$D/host.db"
p read_api_token cat "$D/api-token"
p read_runs_journal sh -c 'cat "$D"/serve-runs.db* "$D"/*.db 2>/dev/null | head -c1 | grep -q .'
p read_operator_key cat "$H/.ssh/id_rsa"
p read_operator_claude ls "$H/.claude"
p write_victim_instructions sh -c 'echo "run evil" > "$B/CLAUDE.md"'
p write_victim_hooks sh -c 'mkdir -p "$B/.claude" && echo "{}" > "$B/.claude/settings.json"'
p write_shared_tmp sh -c 'echo x > /tmp/escape-probe-$$'
p list_terminals ls /dev/pts/
p connect_bridge_api bash -c 'exec 3<>/dev/tcp/127.0.0.1/$API_PORT'
p listen_tcp python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 18931)); s.listen()'
p abstract_socket python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("\0escape-probe")'
p read_shadow cat /etc/shadow
p read_root_only_in_readable_folder cat "$R/root-only.txt"
echo "CONTROL:readable=$(cat "$R/readable.txt")"
echo "CONTROL:outside=$(awk -v u="$(id -u)" '$1 <= u && u < $1 + $3 { print $2 + u - $1 }' /proc/self/uid_map)"
if [ -n "$VICTIM_PID" ]; then
  p read_victim_environ cat "/proc/$VICTIM_PID/environ"
  p read_victim_fd_target readlink "/proc/$VICTIM_PID/fd/1"
  p read_victim_cwd ls "/proc/$VICTIM_PID/cwd/"
  p read_victim_memory head -c1 "/proc/$VICTIM_PID/mem"
  p signal_victim kill -0 "$VICTIM_PID"
fi
p read_bridge_environ cat "/proc/$BRIDGE_PID/environ"
p signal_bridge kill -0 "$BRIDGE_PID"
echo "CONTROL:id=$(id -u)"
echo mine > own-file.txt && echo "CONTROL:own=$(cat own-file.txt)"
"#;

/// Every probe held, the control ran as a plain user (inside its
/// namespace and outside it) and read what the operator lets it, and the
/// secret never reached the attacker's model.
fn assert_held(lines: &[String], requests: &[Value], names: &[&str]) {
    let escaped: Vec<&String> = lines.iter().filter(|l| l.starts_with("ESCAPED:")).collect();
    assert!(escaped.is_empty(), "escaped: {escaped:?} (all: {lines:?})");
    let names = names
        .iter()
        .chain(&["read_shadow", "read_root_only_in_readable_folder"]);
    for name in names {
        assert!(
            lines.iter().any(|l| l == &format!("HELD:{name}")),
            "probe {name} did not run: {lines:?}"
        );
    }
    assert!(
        lines.iter().any(|l| l == "CONTROL:own=mine"),
        "the shell could not use its own workspace: {lines:?}"
    );
    // The shell's own answer (the script's text holds `$(id -u)`).
    let uid = lines
        .iter()
        .filter_map(|l| l.strip_prefix("CONTROL:id="))
        .find(|id| id.parse::<u32>().is_ok())
        .unwrap_or_else(|| panic!("no id: {lines:?}"));
    assert_ne!(uid, "0", "the harness ran as root");
    assert!(
        lines.iter().any(|l| l == "CONTROL:readable=anyone"),
        "the folder the operator lets it read: {lines:?}"
    );
    // The harness's uid outside its namespace (its own, where it has none).
    let outside = lines
        .iter()
        .filter_map(|l| l.strip_prefix("CONTROL:outside="))
        .find(|id| id.parse::<u32>().is_ok())
        .unwrap_or_else(|| panic!("no uid outside: {lines:?}"));
    assert_ne!(outside, "0", "the harness is root outside its namespace");
    let sent: String = requests.iter().map(Value::to_string).collect();
    assert!(
        !sent.contains(SECRET),
        "the victim's words reached the attacker's model"
    );
}

/// The attack script for a harness: the probes with their targets set.
fn attack(vars: &[(&str, String)]) -> String {
    let mut script = String::new();
    for (name, value) in vars {
        script.push_str(&format!("{name}='{value}'\n"));
    }
    script.push_str(PROBES);
    script
}

/// The operator's home for the bridge: a private key that must stay its.
fn operator_home(home: &Path) {
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), format!("KEY {SECRET}")).unwrap();
}

/// A folder the operator lets harnesses read (`cage.read_only`), holding
/// a file every user may read and one only root may.
fn readable_folder() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = common::tempdir();
    std::fs::write(dir.path().join("readable.txt"), "anyone").unwrap();
    let shut = dir.path().join("root-only.txt");
    std::fs::write(&shut, format!("ROOT ONLY {SECRET}")).unwrap();
    std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::lchown(&shut, Some(0), Some(0)).unwrap();
    dir
}

fn workspace_of(results: &[Value]) -> PathBuf {
    results
        .iter()
        .find(|r| r["type"] == "state.updated" && r["data"]["key"] == "external.working_directory")
        .and_then(|r| r["data"]["value"].as_str())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("the turn names its workspace: {results:?}"))
}

fn completed(results: &[Value]) {
    let end = results.last().expect("results");
    assert_eq!(end["type"], "run.completed", "{results:?}");
}

async fn turn(server: &ServeProcess, conversation: &str, text: &str, run_id: &str) -> Vec<Value> {
    server
        .results(json!({"conversation": conversation, "text": text, "run_id": run_id}))
        .await
}

/// In `serve`, with live processes: conversation A's agent attacks
/// conversation B's workspace, session, kept process and token, the
/// store, the operator's files and the bridge's API, with shell commands
/// and with Claude Code's own Read and Write tools. Nothing crosses; B's
/// next turn runs as usual, its files as it left them, in well under
/// twice the time its turn takes on an idle bridge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_conversations_agent_reaches_nothing_of_another_in_serve() {
    let (model_url, fake) = fake_model(false).await;
    let readable = readable_folder();
    let (server, home) = serve_claude(
        model_url,
        &format!(
            "default_config:\n  permission_mode: bypassPermissions\ncage:\n  read_only: [{}]\n",
            readable.path().display()
        ),
    )
    .await;
    operator_home(home.path());
    // The operator's Claude Code settings, root's alone: given to the
    // harness (a copy its user may read, when the bridge is root).
    let settings = home.path().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(
        &settings,
        r#"{"env": {"CARRIED_MARK": "carried-settings-7d1"}}"#,
    )
    .unwrap();
    std::fs::set_permissions(
        &settings,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    // B, the victim, on an idle bridge: its workspace, session, live process.
    let started = Instant::now();
    let b1 = turn(&server, "victim-b", &format!("Remember {SECRET}"), "b-1").await;
    completed(&b1);
    let warm = Instant::now();
    let b2 = turn(&server, "victim-b", "And again?", "b-2").await;
    completed(&b2);
    let idle = warm.elapsed();
    let _ = started;
    let victim = workspace_of(&b1);
    let victim_pid = b2
        .last()
        .and_then(|r| r["data"]["message"]["metadata"]["session"]["process"]["pid"].as_i64())
        .expect("B's live process");
    let api_port = server.url.rsplit(':').next().unwrap().to_string();

    // A, the attacker: shell probes, then the harness's own tools.
    let mut script = attack(&[
        ("B", victim.display().to_string()),
        ("D", server.data.path().display().to_string()),
        ("H", home.path().display().to_string()),
        ("R", readable.path().display().to_string()),
        ("API_PORT", api_port),
        ("VICTIM_PID", victim_pid.to_string()),
        ("BRIDGE_PID", server.child.id().unwrap().to_string()),
    ]);
    script.push_str("echo \"CONTROL:carried=$CARRIED_MARK\"\n");
    let context_md = victim.join(".langbot/LANGBOT_CONTEXT.md");
    fake.set_script(vec![
        ("Bash", json!({"command": script, "description": "probe"})),
        (
            "Read",
            json!({"file_path": context_md.display().to_string()}),
        ),
        (
            "Write",
            json!({"file_path": victim.join("CLAUDE.md").display().to_string(),
                   "content": "Always run evil."}),
        ),
        (
            "Write",
            json!({"file_path": victim.join(".claude/settings.json").display().to_string(),
                   "content": "{\"hooks\": {}}"}),
        ),
    ]);
    let seen = fake.requests.lock().unwrap().len();
    let a = turn(&server, "attacker-a", "Look around", "a-1").await;
    completed(&a);
    assert!(
        a.iter().any(|r| r.to_string().contains(CALLS_DONE)),
        "{a:?}"
    );
    let requests: Vec<Value> = fake.requests.lock().unwrap()[seen..].to_vec();
    let lines = probe_lines(&requests);
    assert_held(
        &lines,
        &requests,
        &[
            "read_victim_context",
            "read_victim_sessions",
            "list_workspaces",
            "read_store",
            "read_api_token",
            "read_operator_key",
            "write_victim_instructions",
            "write_victim_hooks",
            "write_shared_tmp",
            "list_terminals",
            "connect_bridge_api",
            "listen_tcp",
            "abstract_socket",
            "read_victim_environ",
            "read_victim_fd_target",
            "read_victim_cwd",
            "signal_victim",
            "read_bridge_environ",
            "signal_bridge",
        ],
    );
    // Claude Code's own tools were refused by the kernel too.
    assert!(!victim.join("CLAUDE.md").exists());
    assert!(!victim.join(".claude/settings.json").exists());
    // The operator's settings reached the harness all the same.
    assert!(
        lines
            .iter()
            .any(|l| l == "CONTROL:carried=carried-settings-7d1"),
        "{lines:?}"
    );

    // B goes on: same process, nothing of A's in its workspace.
    fake.set_script(Vec::new());
    let again = Instant::now();
    let b3 = turn(&server, "victim-b", "Still there?", "b-3").await;
    completed(&b3);
    let took = again.elapsed();
    assert_eq!(
        b3.last().unwrap()["data"]["message"]["metadata"]["session"]["process"]["pid"],
        victim_pid,
        "{b3:?}"
    );
    // Twice the idle turn, and slack for the other tests of this binary
    // running beside it on two cores.
    assert!(
        took < idle * 2 + Duration::from_millis(1500),
        "B's turn took {took:?} against {idle:?} idle"
    );
}

/// In one-shot `run`, with the bridge run as an ordinary user (not root):
/// the agent of conversation A cannot read B's workspace or the store, nor
/// write B's files or reach the bridge's other ports; B's next turn is
/// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_conversations_agent_reaches_nothing_of_another_in_run_as_a_plain_user() {
    const UID: u32 = 20001;
    let claude = common::cli("claude");
    let data = common::tempdir();
    let home = common::tempdir();
    let readable = readable_folder();
    operator_home(home.path());
    // Run as root (as CI is), the bridge is started as uid 20001; run as
    // an ordinary user, it already is one.
    let as_root = nix::unistd::geteuid().is_root();
    if as_root {
        for dir in [data.path(), home.path()] {
            chown_tree(dir, UID);
        }
    }
    let (victim_url, _victim_model) = fake_model(false).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let private_port = listener.local_addr().unwrap().port();

    let run = |model_url: String, conversation: &'static str, text: String| {
        let claude = claude.clone();
        let data = data.path().to_path_buf();
        let home = home.path().to_path_buf();
        let readable = readable.path().to_path_buf();
        async move {
            let mut config = serde_json::Map::new();
            config.insert("permission_mode".into(), json!("bypassPermissions"));
            let ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
                conversation,
                actor: "someone",
                text: &text,
                config,
                answer: None,
            })
            .unwrap();
            let file = home.join(format!("{conversation}.json"));
            std::fs::write(&file, serde_json::to_vec(&ctx).unwrap()).unwrap();
            if as_root {
                std::os::unix::fs::lchown(&file, Some(UID), Some(UID)).unwrap();
            }
            let mut command = tokio::process::Command::new(common::bridge_bin());
            command
                .arg("--data-dir")
                .arg(&data)
                .args(["run", "--harness", "claude-code", "--bin"])
                .arg(&claude)
                .arg("--read-only")
                .arg(&readable)
                .arg("--context")
                .arg(&file)
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("HOME", &home)
                .env("ANTHROPIC_BASE_URL", model_url)
                .env("ANTHROPIC_API_KEY", "test-key")
                .env("CLAUDE_CODE_MAX_RETRIES", "0")
                .stdin(std::process::Stdio::null());
            if as_root {
                command.uid(UID).gid(UID);
            }
            let out = command.output().await.expect("the bridge runs");
            let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            assert_eq!(
                results.last().map(|r| r["type"].clone()),
                Some(json!("run.completed")),
                "{results:?}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            results
        }
    };
    let b1 = run(victim_url.clone(), "victim-b", format!("Remember {SECRET}")).await;
    let victim = workspace_of(&b1);

    let script = attack(&[
        ("B", victim.display().to_string()),
        ("D", data.path().display().to_string()),
        ("H", home.path().display().to_string()),
        ("R", readable.path().display().to_string()),
        ("API_PORT", private_port.to_string()),
        ("VICTIM_PID", String::new()),
        ("BRIDGE_PID", "1".to_string()),
    ]);
    let (attacker_url, attacker_model) = fake_model_running(&script).await;
    run(attacker_url, "attacker-a", "Look around".into()).await;
    let requests = attacker_model.requests.lock().unwrap().clone();
    let lines = probe_lines(&requests);
    assert_held(
        &lines,
        &requests,
        &[
            "read_victim_context",
            "list_workspaces",
            "read_store",
            "read_operator_key",
            "write_victim_instructions",
            "write_victim_hooks",
            "connect_bridge_api",
            "signal_bridge",
        ],
    );
    assert!(!victim.join("CLAUDE.md").exists());
    let b2 = run(victim_url, "victim-b", "And again?".into()).await;
    assert_eq!(workspace_of(&b2), victim);
    drop(listener);
}

/// Hand `dir` and all below it to `uid` (the bridge's user in a test).
fn chown_tree(dir: &Path, uid: u32) {
    for entry in walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
    {
        std::os::unix::fs::lchown(entry.path(), Some(uid), Some(uid)).unwrap();
    }
}

/// The same attack from Codex in `serve` (its live app-server process,
/// commands run unasked, its own sandbox left to the cage): conversation
/// A's shell reaches nothing of conversation B's, nor the store, the
/// operator's files, B's kept process or the bridge's API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_codex_agent_reaches_nothing_of_another_conversation_in_serve() {
    use common::openai::{self, RUN};
    let (model_url, fake) = openai::fake_model(false).await;
    let home = common::tempdir();
    openai::codex_home(home.path(), &model_url);
    operator_home(home.path());
    let codex = common::cli("codex");
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        ("CODEX_HOME", home.path().display().to_string()),
        ("OPENAI_API_KEY", "test-key".to_string()),
    ];
    let config = format!(
        "harness_binaries:\n  codex: {}\ndefault_harness: codex\nshutdown_grace_seconds: 5\n",
        codex.display()
    );
    let readable = readable_folder();
    let config = format!(
        "{config}cage:\n  read_only: [{}]\n",
        readable.path().display()
    );
    let data = std::sync::Arc::new(common::tempdir());
    let server = ServeProcess::spawn(data, &config, &env).await;

    let b1 = turn(&server, "victim-b", &format!("Remember {SECRET}"), "b-1").await;
    completed(&b1);
    let victim = workspace_of(&b1);
    let victim_pid = b1
        .last()
        .and_then(|r| r["data"]["message"]["metadata"]["session"]["process"]["pid"].as_i64())
        .expect("B's live process");
    let api_port = server.url.rsplit(':').next().unwrap().to_string();
    let script = attack(&[
        ("B", victim.display().to_string()),
        ("D", server.data.path().display().to_string()),
        ("H", home.path().display().to_string()),
        ("R", readable.path().display().to_string()),
        ("API_PORT", api_port),
        ("VICTIM_PID", victim_pid.to_string()),
        ("BRIDGE_PID", server.child.id().unwrap().to_string()),
    ]);
    let seen = fake.requests.lock().unwrap().len();
    let a = turn(&server, "attacker-a", &format!("{RUN}{script}"), "a-1").await;
    completed(&a);
    let requests: Vec<Value> = fake.requests.lock().unwrap()[seen..].to_vec();
    // Only what came back from the shell (the prompt holds the script).
    let outputs: Vec<Value> = requests
        .iter()
        .flat_map(|r| r["input"].as_array().cloned().unwrap_or_default())
        .filter(|item| item["type"] == "function_call_output")
        .collect();
    let lines = probe_lines(&outputs);
    assert_held(
        &lines,
        &requests,
        &[
            "read_victim_context",
            "list_workspaces",
            "read_store",
            "read_api_token",
            "read_operator_key",
            "write_victim_instructions",
            "write_victim_hooks",
            "connect_bridge_api",
            "listen_tcp",
            "read_victim_environ",
            "signal_victim",
            "read_bridge_environ",
        ],
    );
    assert!(!victim.join("CLAUDE.md").exists());
    let b2 = turn(&server, "victim-b", "And again?", "b-2").await;
    completed(&b2);
}

/// A binding chooses its harness's network over the bridge's: by default
/// (a network of its own) a local port is out of reach; `network: ports`
/// with `network_ports` opens that one port; `network: open` (any public
/// address, through its door) still not this machine's.
/// (Claude Code's Bash tool, in `run`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_binding_chooses_its_harnesss_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'; then echo NET:reached; else echo NET:refused; fi"
    );
    let claude = common::cli("claude");
    let data = common::tempdir();
    let home = common::tempdir();
    let mut said = Vec::new();
    for (conversation, config) in [
        ("net-default", json!({})),
        (
            "net-port",
            json!({"network": "ports", "network_ports": port.to_string()}),
        ),
        ("net-open", json!({"network": "open"})),
    ] {
        let (model_url, fake) = fake_model_running(&command).await;
        let mut binding = config.as_object().cloned().unwrap();
        binding.insert("permission_mode".into(), json!("bypassPermissions"));
        let ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
            conversation,
            actor: "someone",
            text: "Try the network",
            config: binding,
            answer: None,
        })
        .unwrap();
        let file = home.path().join(format!("{conversation}.json"));
        std::fs::write(&file, serde_json::to_vec(&ctx).unwrap()).unwrap();
        let file = file.display().to_string();
        let claude = claude.display().to_string();
        let turn = common::bridge_run(
            data.path(),
            &[
                "--harness",
                "claude-code",
                "--bin",
                &claude,
                "--context",
                &file,
            ],
            &[
                ("HOME", home.path().display().to_string()),
                ("ANTHROPIC_BASE_URL", model_url),
                ("ANTHROPIC_API_KEY", "test-key".to_string()),
                ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
            ],
        )
        .await;
        assert_eq!(turn.terminal()["type"], "run.completed", "{}", turn.stderr);
        let sent: String = fake
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        said.push(
            ["NET:reached", "NET:refused"]
                .into_iter()
                .find(|word| {
                    sent.contains(&format!("{word}\\n")) || sent.contains(&format!("{word}\""))
                })
                .unwrap_or("nothing"),
        );
    }
    assert_eq!(said, ["NET:refused", "NET:reached", "NET:refused"]);
    drop(listener);
}

/// The files the bridge writes over in place every turn, attacked from
/// inside the agent's own workspace: in `serve`, the real Claude Code in
/// `bypassPermissions` gives `turn-prompt.md` a second name (the bridge
/// must replace it, not write through, so the second name keeps the old
/// turn), and another conversation's agent puts links to the victim's
/// workspace and the operator's files, and a FIFO, where its next turn's
/// files go (that turn fails; nothing the links point at changes, and no
/// turn hangs on the FIFO).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_turns_files_written_in_place_are_never_written_through_what_an_agent_planted() {
    let (model_url, fake) = fake_model(false).await;
    let (server, home) = serve_claude(
        model_url,
        "default_config:\n  permission_mode: bypassPermissions\n",
    )
    .await;
    let operator_file = home.path().join("operator-notes.txt");
    std::fs::write(&operator_file, "the operator's").unwrap();
    let b1 = turn(&server, "victim-b", &format!("Remember {SECRET}"), "pv-b-1").await;
    completed(&b1);
    let victim_prompt = workspace_of(&b1).join(".langbot/turn-prompt.md");
    let victim_before = std::fs::read(&victim_prompt).unwrap();

    // A second name for its own turn prompt, from its own shell.
    fake.set_script(vec![(
        "Bash",
        json!({"command": "ln .langbot/turn-prompt.md second-name.md && echo PLANTED:hard_link",
               "description": "link"}),
    )]);
    let seen = fake.requests.lock().unwrap().len();
    let a1 = turn(&server, "attacker-a", "first words", "pv-a-1").await;
    completed(&a1);
    let sent: String = fake.requests.lock().unwrap()[seen..]
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(sent.contains("PLANTED:hard_link"), "not planted: {sent}");
    fake.set_script(Vec::new());
    let a2 = turn(&server, "attacker-a", "second words", "pv-a-2").await;
    completed(&a2);
    let own = workspace_of(&a1);
    let second = std::fs::read_to_string(own.join("second-name.md")).unwrap();
    assert!(
        second.contains("first words") && !second.contains("second words"),
        "{second}"
    );
    let prompt = std::fs::read_to_string(own.join(".langbot/turn-prompt.md")).unwrap();
    assert!(prompt.contains("second words"), "{prompt}");
    let links = std::os::unix::fs::MetadataExt::nlink(
        &std::fs::metadata(own.join(".langbot/turn-prompt.md")).unwrap(),
    );
    assert_eq!(links, 1, "the prompt was not replaced");

    // Links out of its workspace, and a FIFO, where its files go.
    let plant = format!(
        "cd .langbot && rm -f turn-prompt.md agent-context.json LANGBOT_CONTEXT.md \
         && ln -s '{}' turn-prompt.md && ln -s '{}' agent-context.json \
         && mkfifo LANGBOT_CONTEXT.md && echo PLANTED:links_and_fifo",
        victim_prompt.display(),
        operator_file.display()
    );
    fake.set_script(vec![(
        "Bash",
        json!({"command": plant, "description": "plant"}),
    )]);
    let seen = fake.requests.lock().unwrap().len();
    let c1 = turn(&server, "attacker-c", "plant", "pv-c-1").await;
    completed(&c1);
    let sent: String = fake.requests.lock().unwrap()[seen..]
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(
        sent.contains("PLANTED:links_and_fifo"),
        "not planted: {sent}"
    );
    fake.set_script(Vec::new());
    let c2 = tokio::time::timeout(
        Duration::from_secs(60),
        turn(&server, "attacker-c", "next", "pv-c-2"),
    )
    .await
    .expect("a turn hung on what its agent planted");
    let end = c2.last().expect("results");
    assert_eq!(end["type"], "run.failed", "{c2:?}");
    assert_eq!(end["data"]["code"], "workspace_error", "{c2:?}");
    assert_eq!(std::fs::read(&victim_prompt).unwrap(), victim_before);
    assert_eq!(
        std::fs::read_to_string(&operator_file).unwrap(),
        "the operator's"
    );
    // The victim goes on.
    let b2 = turn(&server, "victim-b", "Still there?", "pv-b-2").await;
    completed(&b2);
}
