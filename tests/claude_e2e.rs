//! The real Claude Code CLI, offline, driven through `harness-bridge run`
//! against a fake Messages API on 127.0.0.1. Two turns of one conversation:
//! the first calls the bridge's `history_page` tool and gets the store's
//! real transcript; the second resumes the first's session. Also: a deleted
//! session falls back to a fresh one, a hanging harness is killed at the
//! deadline with nothing left behind, what Claude's Bash tool starts
//! outside its process group ends with the turn (completed or cancelled,
//! cgroup or subreaper), and a missing binary is reported.

use harness_bridge_testkit as common;

use std::path::Path;
use std::time::Duration;

use common::anthropic::{
    ANSWER, ASK, BASH_DONE, CONVERSATION, FOLLOW_UP, PAUSE, SECOND_ANSWER, fake_model,
    fake_model_running,
};
use common::{
    BridgeTurn, DECISION, bridge_run, bridge_run_with, left_running, processes_under,
    processes_with, seed_decision,
};
use serde_json::{Value, json};

/// A user's machine: a data folder for the bridge, a home for Claude.
struct Machine {
    data: tempfile::TempDir,
    home: tempfile::TempDir,
    model_url: String,
}

impl Machine {
    async fn new(model_url: String) -> Machine {
        let data = common::tempdir();
        seed_decision(data.path(), CONVERSATION).await;
        Machine {
            data,
            home: common::tempdir(),
            model_url,
        }
    }

    fn claude_config(&self) -> std::path::PathBuf {
        self.home.path().join(".claude")
    }

    async fn turn(&self, text: &str, extra: &[&str]) -> BridgeTurn {
        self.turn_in(CONVERSATION, text, extra).await
    }

    async fn turn_in(&self, conversation: &str, text: &str, extra: &[&str]) -> BridgeTurn {
        let mut args = vec!["--conversation", conversation, "--text", text];
        args.extend_from_slice(extra);
        let args = self.args(&args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bridge_run(self.data.path(), &args, &self.env()).await
    }

    /// `run` arguments for Claude Code, then `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let claude = common::cli("claude");
        let mut args = vec![
            "--harness".to_string(),
            "claude-code".to_string(),
            "--bin".to_string(),
            claude.to_string_lossy().into_owned(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HOME", self.home.path().to_string_lossy().into_owned()),
            (
                "CLAUDE_CONFIG_DIR",
                self.claude_config().to_string_lossy().into_owned(),
            ),
            ("ANTHROPIC_BASE_URL", self.model_url.clone()),
            ("ANTHROPIC_API_KEY", "test-key".to_string()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
        ]
    }

    /// `run` arguments and environment for a turn in which Claude may use
    /// its Bash tool (as root: bypassPermissions, allowed with IS_SANDBOX),
    /// with the bridge's containment forced to `mechanism`.
    fn bash_turn(&self, mechanism: &str) -> (Vec<String>, Vec<(&'static str, String)>) {
        let mut config = harness_bridge::protocol::JsonMap::new();
        config.insert("permission_mode".into(), json!("bypassPermissions"));
        let ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
            conversation: CONVERSATION,
            actor: "local-user",
            text: "Start the sleepers",
            config,
            answer: None,
        })
        .unwrap();
        let file = self.data.path().join(format!("{}.json", ctx.run_id));
        std::fs::write(&file, serde_json::to_vec(&ctx).unwrap()).unwrap();
        let file = file.to_string_lossy().into_owned();
        let args = self.args(&[
            "--context",
            &file,
            "--pass-env",
            "IS_SANDBOX",
            "--kill-grace",
            "1",
        ]);
        let mut env = self.env();
        env.push(("IS_SANDBOX", "1".to_string()));
        env.push(("HARNESS_BRIDGE_CONTAIN", mechanism.to_string()));
        (args, env)
    }

    fn workspace_root(&self) -> std::path::PathBuf {
        self.data.path().join("workspaces")
    }

    /// Claude's session files, in the conversations' own homes (links
    /// not followed).
    fn session_files(&self) -> Vec<std::path::PathBuf> {
        session_files(&self.workspace_root())
    }
}

/// Claude's session files under `dir`, in a conversation's own home
/// (`.langbot/home/.claude/projects`), links not followed.
fn session_files(dir: &Path) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter(|e| {
            e.path()
                .to_string_lossy()
                .contains("/.langbot/home/.claude/projects/")
        })
        .map(|e| e.into_path())
        .collect()
}

impl Machine {
    /// The operator's settings, which the conversations' homes link to.
    fn operator_settings(&self) -> std::path::PathBuf {
        let settings = self.claude_config().join("settings.json");
        std::fs::create_dir_all(self.claude_config()).unwrap();
        std::fs::write(&settings, r#"{"cleanupPeriodDays": 30}"#).unwrap();
        settings
    }
}

fn instructions(workspace: &Path) -> String {
    std::fs::read_to_string(workspace.join(".langbot/instructions.md")).expect("instructions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn two_turns_resume_one_claude_session_and_read_the_real_history() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;

    // Turn 1: a fresh session; the model calls history_page through the bridge.
    let first = machine.turn(ASK, &[]).await;
    first.assert_well_formed();
    let done = first.completed();
    // The tokens Claude Code counted ride the terminal result (the fake
    // reports 10 in and 7 out per request).
    let usage = &first.terminal()["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap_or(0) >= 10, "{done}");
    assert!(
        usage["completion_tokens"].as_u64().unwrap_or(0) >= 7,
        "{done}"
    );
    let kinds = first.kinds();
    let tool_done = first
        .first("tool.call.completed")
        .expect("tool call result");
    assert_eq!(tool_done["data"]["tool_name"], "mcp__langbot__history_page");
    assert!(tool_done.to_string().contains(DECISION), "{tool_done}");
    let message = first.first("message.completed").expect("message.completed");
    assert_eq!(message["data"]["message"]["content"], ANSWER);
    // The answer's delta was on stdout before the model had finished it.
    let (delta_at, _) = first
        .results
        .iter()
        .find(|(_, r)| r["type"] == "message.delta")
        .expect("message.delta");
    let (end_at, _) = first.results.last().unwrap();
    assert!(
        *end_at - *delta_at >= PAUSE - Duration::from_millis(300),
        "deltas were not streamed: {:?} before the end",
        *end_at - *delta_at
    );
    let session = first
        .state("external.session_id")
        .and_then(Value::as_str)
        .expect("state.updated external.session_id")
        .to_string();
    assert_eq!(first.state("external.harness"), Some(&json!("claude-code")));
    let workspace = first
        .state("external.working_directory")
        .and_then(Value::as_str)
        .expect("working directory")
        .to_string();
    let state_at = kinds.iter().position(|k| k == "state.updated").unwrap();
    assert!(state_at < kinds.len() - 1);
    assert_eq!(first.session()["resumed"], false, "{done}");
    let instructions_1 = instructions(Path::new(&workspace));
    let turn_1_requests = fake.requests.lock().unwrap().len();

    // Turn 2, a separate process: it resumes turn 1's session.
    let second = machine.turn(FOLLOW_UP, &[]).await;
    second.assert_well_formed();
    second.completed();
    assert_eq!(second.session()["resumed"], true);
    assert_eq!(
        second.state("external.session_id").and_then(Value::as_str),
        Some(session.as_str()),
        "the same session goes on"
    );
    let requests = fake.requests.lock().unwrap().clone();
    let turn_2 = requests[turn_1_requests..]
        .iter()
        .find(|r| r["stream"] == true && r.to_string().contains(FOLLOW_UP))
        .expect("turn 2 reached the model");
    let seen = turn_2["messages"].to_string();
    assert!(
        seen.contains(ASK) && seen.contains(ANSWER),
        "turn 2 did not carry turn 1: {seen}"
    );
    // The stable instructions: byte-identical, and in both turns' system prompt.
    let instructions_2 = instructions(Path::new(&workspace));
    assert_eq!(instructions_1, instructions_2);
    let turn_1 = requests[..turn_1_requests]
        .iter()
        .find(|r| r["stream"] == true && r.to_string().contains(ASK))
        .expect("turn 1 request");
    let needle = instructions_1.trim();
    for request in [turn_1, turn_2] {
        let system = request["system"].to_string();
        let system: String = serde_json::from_str::<Value>(&request["system"].to_string())
            .ok()
            .and_then(|s| {
                s.as_array().map(|blocks| {
                    blocks
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
            })
            .unwrap_or(system);
        assert!(
            system.contains(needle),
            "instructions missing from the system prompt"
        );
    }

    // The host keeps both turns: user and assistant, in order, and the audit
    // shows the harness's history call.
    let texts = common::transcript(machine.data.path(), CONVERSATION).await;
    assert_eq!(
        texts,
        vec![
            format!("user: {DECISION}"),
            format!("user: {ASK}"),
            format!("assistant: {ANSWER}"),
            format!("user: {FOLLOW_UP}"),
            format!("assistant: {SECOND_ANSWER}"),
        ]
    );
    let store = harness_bridge::host::sqlite::SqliteHost::open(machine.data.path()).unwrap();
    let audit = store.audit_tail(None, 50).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|r| r.entry.action == "history_page" && r.entry.outcome == "ok"),
        "{audit:?}"
    );
    // Nothing Claude Code's MCP client did was refused: probing for a
    // stream the stateless server does not offer is not a refusal.
    assert!(audit.iter().all(|r| r.entry.outcome == "ok"), "{audit:?}");
    assert!(processes_under(&machine.workspace_root()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_deleted_claude_session_falls_back_to_a_fresh_one() {
    let (model_url, _fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;
    common::assert_session_fallback(
        async |text: &str| machine.turn(text, &[]).await,
        || {
            machine
                .session_files()
                .iter()
                .for_each(|f| std::fs::remove_file(f).unwrap())
        },
        || {
            machine
                .session_files()
                .iter()
                .for_each(|f| std::fs::write(f, "").unwrap())
        },
    )
    .await;
}

/// Two conversations, two homes: each keeps its Claude Code session in
/// its own workspace's `.langbot/home/.claude/projects`, none in the
/// operator's config folder, whose settings each home links to (read,
/// not copied, not changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn each_conversation_keeps_its_claude_sessions_in_its_own_home() {
    let (model_url, _fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;
    let settings = machine.operator_settings();
    let before = std::fs::read(&settings).unwrap();
    let one = machine.turn_in(CONVERSATION, "Hello there", &[]).await;
    one.completed();
    let two = machine.turn_in("group-2", "Hello there", &[]).await;
    two.completed();
    let (ws_one, ws_two) = (common::turn_workspace(&one), common::turn_workspace(&two));
    assert_ne!(ws_one, ws_two);
    for (turn, ws) in [(&one, &ws_one), (&two, &ws_two)] {
        let id = turn
            .state("external.session_id")
            .and_then(Value::as_str)
            .expect("a session")
            .to_string();
        let files = session_files(ws);
        assert!(
            files.iter().any(|f| f.ends_with(format!("{id}.jsonl"))),
            "{id} not in {}: {files:?}",
            ws.display()
        );
        let link = ws.join(".langbot/home/.claude/settings.json");
        assert_eq!(std::fs::read_link(&link).unwrap(), settings);
    }
    assert!(!machine.claude_config().join("projects").exists());
    assert_eq!(std::fs::read(&settings).unwrap(), before);
}

/// A session kept in the operator's shared home (where sessions were
/// before each conversation had a home) is not found from the
/// conversation's own: the turn starts a fresh session and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_session_from_the_shared_home_starts_fresh_with_a_notice() {
    let (model_url, _fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;
    let first = machine.turn("Hello there", &[]).await;
    first.completed();
    let old = first
        .state("external.session_id")
        .cloned()
        .expect("session");
    // Put the session where the bridge kept it before: the operator's
    // config folder, under the same project folder.
    let home_config = common::turn_workspace(&first).join(".langbot/home/.claude");
    for file in machine.session_files() {
        let relative = file.strip_prefix(&home_config).unwrap();
        let shared = machine.claude_config().join(relative);
        std::fs::create_dir_all(shared.parent().unwrap()).unwrap();
        std::fs::rename(&file, &shared).unwrap();
    }
    let second = machine.turn("Hello again", &[]).await;
    second.completed();
    let meta = second.session();
    assert_eq!(meta["resumed"], false, "{meta}");
    let notice = meta["notice"].as_str().unwrap_or("");
    assert!(notice.contains("no longer exists"), "{meta}");
    assert_ne!(second.state("external.session_id"), Some(&old));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_hanging_claude_is_killed_at_the_deadline_with_nothing_left() {
    let (model_url, fake) = fake_model(true).await;
    let machine = Machine::new(model_url).await;
    let turn = machine
        // The deadline leaves the CLI time to start and reach the model on
        // a loaded machine (over 4 s has been seen with two test lanes).
        .turn("Are you there?", &["--timeout", "10", "--kill-grace", "1"])
        .await;
    assert!(
        !fake.requests.lock().unwrap().is_empty(),
        "the harness reached the model"
    );
    common::assert_killed_at_deadline(&turn, &machine.workspace_root());
}

/// Claude Code with no key: the turn fails `not_signed_in` with a sentence
/// naming the key and the login, its "Not logged in" is no reply in the
/// history, and no pointer is kept; once the key is there, the next turn
/// runs in a fresh session, without a word about a lost one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_without_a_key_says_how_to_sign_in_and_keeps_nothing_of_it() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;
    let args = machine.args(&["--conversation", CONVERSATION, "--text", ASK]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let keyless: Vec<_> = machine
        .env()
        .into_iter()
        .filter(|(k, _)| *k != "ANTHROPIC_API_KEY")
        .collect();
    let turn = bridge_run(machine.data.path(), &args, &keyless).await;
    turn.assert_well_formed();
    let failed = turn.terminal();
    assert_eq!(failed["type"], "run.failed", "{failed}");
    assert_eq!(failed["data"]["code"], "not_signed_in", "{failed}");
    let said = failed["data"]["error"].as_str().unwrap();
    assert!(
        said.starts_with("Claude Code is not signed in (it says: Not logged in")
            && said.contains("set ANTHROPIC_API_KEY")
            && said.contains("claude /login"),
        "{said}"
    );
    assert!(
        !turn.kinds().iter().any(|k| k.starts_with("message")),
        "{:?}",
        turn.kinds()
    );
    assert_eq!(turn.state("external.session_id"), None);
    assert!(
        fake.requests.lock().unwrap().is_empty(),
        "no model was asked"
    );
    let history = std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(machine.data.path())
        .args(["host", "history", CONVERSATION])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(history.contains(ASK), "{history}");
    assert!(!history.contains("Not logged in"), "{history}");

    let turn = machine.turn(ASK, &[]).await;
    let done = turn.terminal();
    assert_eq!(done["type"], "run.completed", "{done}");
    let session = &done["data"]["message"]["metadata"]["session"];
    assert_eq!(session["resumed"], false, "{session}");
    assert!(session["notice"].is_null(), "{session}");
}

/// A model endpoint nothing answers at: the turn's failure names the
/// endpoint the gateway could not reach (never the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_model_endpoint_that_does_not_answer_is_named_in_the_failure() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let machine = Machine::new(endpoint.clone()).await;
    let turn = machine.turn(ASK, &[]).await;
    let failed = turn.terminal();
    assert_eq!(failed["type"], "run.failed", "{failed}");
    let said = failed["data"]["error"].as_str().unwrap();
    assert!(
        said.contains(&format!(
            "the bridge's model gateway cannot reach {endpoint}"
        )) && said.contains("Connection refused"),
        "{said}"
    );
    assert!(!said.contains("test-key"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_claude_binary_is_harness_not_found() {
    common::assert_harness_not_found("claude-code", "npm install -g @anthropic-ai/claude-code")
        .await;
}

/// Claude Code names a project folder longer than 200 characters by a cut
/// and a hash; host workspaces (LangBot's) are that long. Resume still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_long_workspace_path_still_resumes() {
    let (model_url, _fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;
    let root = machine
        .data
        .path()
        .join("a-rather-long-folder-name-for-workspaces".repeat(4))
        .join("and-another-level-of-nesting".repeat(3));
    assert!(root.to_string_lossy().len() > 200);
    let root = root.to_string_lossy().into_owned();
    let first = machine.turn("Hello there", &["--root", &root]).await;
    first.completed();
    let second = machine.turn("Hello again", &["--root", &root]).await;
    second.completed();
    assert_eq!(second.session()["resumed"], true, "{}", second.session());
    assert_eq!(
        second.state("external.session_id"),
        first.state("external.session_id")
    );
}

/// Kills what a failed test left running, by the marker in its argv.
struct Sleepers(String);

impl Sleepers {
    /// Commands that leave the harness's process group the usual ways,
    /// each a `sleep` whose argument carries the marker.
    fn new() -> Sleepers {
        Sleepers(format!("600.{}", common::unique_tag()))
    }

    fn escaping(&self) -> String {
        let m = &self.0;
        format!(
            "nohup sleep {m}1 >/dev/null 2>&1 & setsid sleep {m}2 >/dev/null 2>&1 & (sleep {m}3 >/dev/null 2>&1 &)"
        )
    }

    fn running(&self) -> Vec<String> {
        processes_with(&format!("sleep {}", self.0))
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        common::kill_processes_with(&format!("sleep {}", self.0));
    }
}

/// A Claude turn whose Bash command starts `sleepers` and then stays in
/// the foreground, cancelled (Ctrl-C) once all of them run: its terminal
/// result, what was still running when it was read, and the log.
async fn cancelled_bash_turn(
    machine: &Machine,
    mechanism: &str,
    sleepers: &Sleepers,
    expected: usize,
) -> (Value, Vec<String>, String) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let (args, env) = machine.bash_turn(mechanism);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = common::spawn_bridge_run(machine.data.path(), &args, &env);
    let mut stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut started = false;
    for _ in 0..1200 {
        if sleepers.running().len() >= expected {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started, "the sleepers never ran: {:?}", sleepers.running());
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut terminal = Value::Null;
    let mut at_end = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let result: Value = serde_json::from_str(&line).unwrap();
            if result["type"] == "run.failed" || result["type"] == "run.completed" {
                at_end = sleepers.running();
                terminal = result;
            }
        }
        child.wait().await.unwrap()
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the cancelled run ended");
    (terminal, at_end, log.await.unwrap())
}

/// Whatever Claude's Bash tool starts (`nohup … &`, `setsid …`, `( … &)`:
/// each out of the harness's process group) ends with the turn — before
/// its terminal result is sent — when the turn completes and when it is
/// cancelled.
async fn what_claude_starts_ends_with_the_turn(mechanism: &str) {
    // A turn that completes, leaving three processes running.
    let sleepers = Sleepers::new();
    let (model_url, _fake) =
        fake_model_running(&format!("{}; echo started", sleepers.escaping())).await;
    let machine = Machine::new(model_url).await;
    let (args, env) = machine.bash_turn(mechanism);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut at_end = None;
    let turn = bridge_run_with(machine.data.path(), &args, &env, |_| {
        at_end = Some(sleepers.running());
    })
    .await;
    let done = turn.completed();
    assert_eq!(done["data"]["message"]["content"], BASH_DONE, "{done}");
    assert_eq!(at_end, Some(Vec::new()), "running when the turn ended");
    assert!(
        left_running(&turn.stderr) >= 3,
        "the bridge did not report what it killed: {}",
        turn.stderr
    );
    assert!(sleepers.running().is_empty());

    // A turn cancelled while its command runs in the foreground.
    let sleepers = Sleepers::new();
    let command = format!("{}; sleep {}4", sleepers.escaping(), sleepers.0);
    let (model_url, _fake) = fake_model_running(&command).await;
    let machine = Machine::new(model_url).await;
    let (terminal, at_end, log) = cancelled_bash_turn(&machine, mechanism, &sleepers, 4).await;
    assert_eq!(terminal["data"]["code"], "cancelled", "{terminal}");
    assert!(at_end.is_empty(), "running when the turn ended: {at_end:?}");
    assert!(left_running(&log) >= 3, "{log}");
    assert!(sleepers.running().is_empty());
    assert!(processes_under(&machine.workspace_root()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis+cgroup: needs the pinned claude (npm ci --prefix tests/clis) and a cgroup v2 the bridge may write (root); scripts/test runs it"]
async fn what_claude_starts_ends_with_the_turn_in_a_cgroup() {
    what_claude_starts_ends_with_the_turn("cgroup").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn what_claude_starts_ends_with_the_turn_under_the_subreaper() {
    what_claude_starts_ends_with_the_turn("subreaper").await;
}

impl Machine {
    /// A turn of the conversation with `approvals: chat`: Claude's
    /// permission prompts go to the person in the chat.
    async fn approval_turn(&self, text: &str) -> BridgeTurn {
        let mut config = harness_bridge::protocol::JsonMap::new();
        config.insert("approvals".into(), json!("chat"));
        let ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
            conversation: CONVERSATION,
            actor: "local-user",
            text,
            config,
            answer: None,
        })
        .unwrap();
        let file = self.data.path().join(format!("{}.json", ctx.run_id));
        std::fs::write(&file, serde_json::to_vec(&ctx).unwrap()).unwrap();
        let file = file.to_string_lossy().into_owned();
        let args = self.args(&["--context", &file, "--timeout", "40"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bridge_run(self.data.path(), &args, &self.env()).await
    }
}

/// `approvals: chat` with the real Claude Code: the command Claude wants
/// to run becomes a confirmation card and the turn ends with it unrun; the
/// person's "approve" resumes the session and lets exactly that command run
/// once; the next attempt asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn an_approved_command_runs_once_after_the_person_says_so() {
    let (model_url, _fake) = fake_model_running("touch approved-ran").await;
    let machine = Machine::new(model_url).await;

    let asked = machine.approval_turn("Please make the file").await;
    let terminal = asked.terminal();
    assert_eq!(
        terminal["type"], "run.completed",
        "{terminal}\n{}",
        asked.stderr
    );
    let card = asked.first("action.requested").expect("a card");
    assert_eq!(card["data"]["action"], "interaction.requested", "{card}");
    let request = &card["data"]["payload"];
    assert_eq!(request["kind"], "confirmation", "{request}");
    assert!(
        request["title"]
            .as_str()
            .unwrap_or("")
            .contains("run `touch approved-ran`"),
        "{request}"
    );
    assert!(
        request["fallback_text"]
            .as_str()
            .unwrap_or("")
            .contains("approve"),
        "{request}"
    );
    let workspace = std::path::PathBuf::from(
        asked
            .state("external.working_directory")
            .and_then(Value::as_str)
            .expect("workspace"),
    );
    assert!(
        !workspace.join("approved-ran").exists(),
        "ran before it was approved"
    );
    assert_eq!(
        asked
            .state("external.pending_interaction")
            .map(|p| p["kind"].clone()),
        Some(json!("approval"))
    );

    let approved = machine.approval_turn("approve").await;
    let terminal = approved.terminal();
    assert_eq!(
        terminal["type"], "run.completed",
        "{terminal}\n{}",
        approved.stderr
    );
    assert_eq!(
        terminal["data"]["message"]["metadata"]["session"]["resumed"], true,
        "{terminal}"
    );
    assert!(
        workspace.join("approved-ran").exists(),
        "the approved command did not run"
    );
    assert_eq!(
        approved.state("external.pending_interaction"),
        Some(&Value::Null)
    );
    assert!(approved.first("action.requested").is_none());

    // The approval was for once: the same command asks again.
    std::fs::remove_file(workspace.join("approved-ran")).unwrap();
    let again = machine.approval_turn("Do it once more").await;
    assert!(
        again.first("action.requested").is_some(),
        "{:?}",
        again.kinds()
    );
    assert!(
        !workspace.join("approved-ran").exists(),
        "ran again without approval"
    );
}

/// A question the real Claude Code asks with the bridge's `ask_user` tool
/// ends the turn with a choice card (its text lists the choices); the next
/// message, a number, is the answer, and the same session goes on with the
/// choice it names. The pretty output shows the question as the person
/// reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_question_ends_the_turn_and_the_reply_answers_it() {
    let (model_url, _fake) =
        common::anthropic::fake_model_asking("Which colour?", &["red", "blue"]).await;
    let machine = Machine::new(model_url).await;

    let asked = machine.turn("Paint the shed", &[]).await;
    let terminal = asked.terminal();
    assert_eq!(
        terminal["type"], "run.completed",
        "{terminal}\n{}",
        asked.stderr
    );
    assert_eq!(
        terminal["data"]["message"]["content"],
        common::anthropic::WAITING
    );
    let card = asked.first("action.requested").expect("a card");
    let request = &card["data"]["payload"];
    assert_eq!(request["kind"], "choice", "{request}");
    assert_eq!(request["title"], "Which colour?", "{request}");
    assert_eq!(
        request["fields"][0]["options"][1]["label"], "blue",
        "{request}"
    );
    let fallback = request["fallback_text"].as_str().unwrap_or("");
    assert!(fallback.contains("1. red\n2. blue"), "{fallback}");

    let answered = machine.turn("2", &[]).await;
    let terminal = answered.terminal();
    assert_eq!(
        terminal["type"], "run.completed",
        "{terminal}\n{}",
        answered.stderr
    );
    assert_eq!(
        terminal["data"]["message"]["content"],
        format!("{} blue", common::anthropic::GOING_WITH)
    );
    assert_eq!(
        terminal["data"]["message"]["metadata"]["session"]["resumed"],
        true
    );
    assert_eq!(
        answered.state("external.pending_interaction"),
        Some(&Value::Null)
    );

    // Asked again, in the pretty form a person reads in a terminal.
    let args = machine.args(&[
        "--conversation",
        CONVERSATION,
        "--text",
        "And the door?",
        "--format",
        "pretty",
    ]);
    // Spawned, not waited on in place: this test's runtime serves the fake model.
    let out = tokio::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(machine.data.path())
        .arg("run")
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(machine.env())
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("the bridge runs");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("❓ Claude Code asks: Which colour?"),
        "{shown}"
    );
    assert!(shown.contains("Reply with a number"), "{shown}");
}

/// Under `serve`, a knowledge base is a folder the operator names in
/// `bridge.yaml`: the real Claude Code CLI searches it with
/// `retrieve_knowledge` and reads the folder's passage, not LangBot's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_searches_the_operators_knowledge_folder_under_serve() {
    use common::anthropic::{CALLS_DONE, fake_model_calling};
    use common::server::ServeProcess;
    const PASSAGE: &str = "FOLDER KB: deployments freeze on the last Friday of each month.";
    let (model_url, fake) = fake_model_calling(vec![(
        "mcp__langbot__retrieve_knowledge".into(),
        json!({"kb_id": "handbook", "query": "deployments freeze"}),
    )])
    .await;
    let docs = common::tempdir();
    std::fs::write(docs.path().join("deploy.md"), PASSAGE).unwrap();
    std::fs::write(docs.path().join("lunch.md"), "Lunch is at noon.").unwrap();
    let home = common::tempdir();
    let config = format!(
        "no_auth: true\nknowledge_bases:\n  handbook: {}\nharness_binaries:\n  claude-code: {}\n",
        docs.path().display(),
        common::cli("claude").display()
    );
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().to_string_lossy().into_owned()),
        (
            "CLAUDE_CONFIG_DIR",
            home.path().join(".claude").to_string_lossy().into_owned(),
        ),
        ("ANTHROPIC_BASE_URL", model_url),
        ("ANTHROPIC_API_KEY", "test-key".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
    ];
    let data = std::sync::Arc::new(common::tempdir());
    let mut serve = ServeProcess::spawn(data, &config, &env).await;
    let response = serve
        .client
        .post(format!("{}/v1/runs", serve.url))
        .body(json!({"conversation": "kb-chat", "text": "When do deployments freeze?"}).to_string())
        .send()
        .await
        .expect("the request is answered");
    assert_eq!(response.status().as_u16(), 200);
    let body = response.text().await.unwrap_or_default();
    assert!(body.contains("run.completed"), "{body}");
    assert!(body.contains(CALLS_DONE), "{body}");
    let requests = fake.requests.lock().unwrap().clone();
    let results: Vec<String> = requests
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string())
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains(PASSAGE) && r.contains("deploy.md")),
        "the model never read the folder's passage: {results:?}"
    );
    assert!(!results.iter().any(|r| r.contains("Lunch")), "{results:?}");
    // The MCP library's own notes on each call stay out of the operator's
    // log at its default level.
    let noise: Vec<String> = serve
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("\"level\":\"INFO\"") && l.contains("\"target\":\"rmcp"))
        .cloned()
        .collect();
    assert!(noise.is_empty(), "{noise:#?}");
    serve.stop().await;
}

/// What runs cost, per person: two actors' turns through `serve` with the
/// real Claude Code (the fake model reports its tokens) are in the ledger
/// by actor (`host usage`, as an operator runs it), listed by the service
/// (`/v1/runs` by actor, paged; `/v1/conversations`), and in `/metrics`
/// by harness and model, with no person among its labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn each_persons_usage_is_recorded_and_counted() {
    let (model_url, _fake) = fake_model(false).await;
    let (serve, _home) = common::server::serve_claude(model_url, "").await;
    for (actor, conversation) in [("ann", "a1"), ("ann", "a2"), ("bob", "b1")] {
        let results = serve
            .results(json!({"conversation": conversation, "actor": actor, "text": ASK}))
            .await;
        let done = results.last().unwrap();
        assert_eq!(done["type"], "run.completed", "{results:?}");
    }
    let usage = std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(serve.data.path())
        .args(["host", "usage", "--by", "actor", "--json"])
        .output()
        .unwrap();
    assert!(usage.status.success(), "{usage:?}");
    let totals: Vec<Value> = String::from_utf8_lossy(&usage.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |actor: &str| {
        totals
            .iter()
            .find(|t| t["key"] == actor)
            .unwrap_or_else(|| panic!("no {actor} in {totals:?}"))
            .clone()
    };
    let (ann, bob) = (of("ann"), of("bob"));
    assert_eq!(
        (ann["runs"].as_u64(), bob["runs"].as_u64()),
        (Some(2), Some(1))
    );
    // Each turn asks the fake model at least once: 10 in, 7 out.
    assert!(ann["input_tokens"].as_u64() >= Some(20), "{ann}");
    assert!(ann["output_tokens"].as_u64() >= Some(14), "{ann}");
    assert!(bob["input_tokens"].as_u64() >= Some(10), "{bob}");
    let table = std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(serve.data.path())
        .args(["host", "usage"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("actor ") && table.contains("\nann "),
        "{table}"
    );

    // The same ledger through the service: ann's runs, newest first, paged.
    let page = serve.get_json("/v1/runs?actor=ann&limit=1").await;
    let runs = page["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{page}");
    assert_eq!(
        (
            runs[0]["actor_id"].as_str(),
            runs[0]["conversation_id"].as_str()
        ),
        (Some("ann"), Some("a2")),
        "{page}"
    );
    assert!(
        runs[0]["ended_ms"].as_i64() >= runs[0]["started_ms"].as_i64(),
        "{page}"
    );
    let next = page["next"].as_str().unwrap();
    let rest = serve
        .get_json(&format!("/v1/runs?actor=ann&limit=1&before={next}"))
        .await;
    assert_eq!(rest["runs"][0]["conversation_id"], "a1", "{rest}");
    let conversations = serve.get_json("/v1/conversations").await;
    let listed: Vec<&str> = conversations["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["conversation_id"].as_str())
        .collect();
    assert_eq!(listed, ["b1", "a2", "a1"], "{conversations}");

    let metrics = serve.get_text("/metrics").await;
    let input: u64 = metrics
        .lines()
        .find(|l| {
            l.starts_with("harness_bridge_tokens_total{")
                && l.contains("harness=\"claude-code\"")
                && l.contains("kind=\"input\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no input tokens in {metrics}"));
    assert!(input >= 30, "{metrics}");
    assert!(!metrics.contains("ann"), "no person is a label");
}

/// The operator's budgets through `serve` with the real Claude Code: a
/// person whose runs today reached their tokens is refused the next turn
/// with a sentence saying which limit and when it resets; a person who
/// starts more turns in a minute than their rate is refused the one over
/// it (three at once, two start); each refusal is an audit row; another
/// person goes on; no refused turn reached the harness or the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_person_over_a_budget_is_refused_and_told_why_while_others_go_on() {
    let (model_url, fake) = fake_model(false).await;
    let (mut serve, _home) = common::server::serve_claude(
        model_url,
        "budgets:\n  actor: {turns_per_minute: 2, tokens_per_day: 1}\n",
    )
    .await;
    let turn = |actor: &str, conversation: &str| {
        serve.spawn_results(json!({"conversation": conversation, "actor": actor, "text": ASK}))
    };
    let first = turn("ann", "ann-1").await.unwrap();
    assert_eq!(first.last().unwrap()["type"], "run.completed", "{first:?}");
    let asked = fake.requests.lock().unwrap().len();
    let refused = turn("ann", "ann-2").await.unwrap();
    let failed = refused.last().unwrap();
    assert_eq!(failed["type"], "run.failed", "{refused:?}");
    assert_eq!(failed["data"]["code"], "limit_reached", "{failed}");
    let said = failed["data"]["error"].as_str().unwrap();
    assert!(
        said.starts_with("You have used ")
            && said.contains("tokens today, the most allowed for each person (1 token a day)")
            && said.contains("resets at 00:00 UTC"),
        "{said}"
    );
    assert_eq!(
        fake.requests.lock().unwrap().len(),
        asked,
        "a refused turn never reached the model"
    );

    // Three of bob's turns at once: the rate admits two.
    let bobs: Vec<_> = (1..=3).map(|i| turn("bob", &format!("bob-{i}"))).collect();
    let mut ends = Vec::new();
    for bob in bobs {
        let results = bob.await.unwrap();
        ends.push(results.last().unwrap().clone());
    }
    let completed = ends.iter().filter(|e| e["type"] == "run.completed").count();
    let over: Vec<&Value> = ends
        .iter()
        .filter(|e| e["data"]["code"] == "limit_reached")
        .collect();
    assert_eq!((completed, over.len()), (2, 1), "{ends:#?}");
    let said = over[0]["data"]["error"].as_str().unwrap();
    assert!(
        said.starts_with("You have started 2 turns in the last minute, the most allowed for each person (2 turns a minute); try again in "),
        "{said}"
    );

    let carol = turn("carol", "carol-1").await.unwrap();
    assert_eq!(carol.last().unwrap()["type"], "run.completed", "{carol:?}");

    let audit = audit_of(&serve);
    let refusals: Vec<&str> = audit.lines().filter(|l| l.contains(" budget ")).collect();
    assert_eq!(refusals.len(), 2, "{audit}");
    assert!(
        refusals
            .iter()
            .any(|l| l.contains("actor:ann") && l.contains("tokens_per_day"))
            && refusals
                .iter()
                .any(|l| l.contains("actor:bob") && l.contains("turns_per_minute")),
        "{refusals:#?}"
    );
    // The refused turns are rows of their own, apart from the four runs.
    let runs = serve.get_json("/v1/runs?limit=50").await;
    let outcomes: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes.len(), 6, "{runs}");
    assert_eq!(
        outcomes.iter().filter(|o| **o == "refused").count(),
        2,
        "{runs}"
    );
    serve.stop().await;
}

/// With `mid_turn: stop`, a turn whose model calls go past what was left
/// of a person's tokens for the day is stopped mid-way (the real Claude
/// Code, kept alive by `serve`, interrupted its own way): it fails
/// `limit_reached` saying so, the model is asked no more, what the turn
/// spent is in the ledger, and the person's next turn is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_turn_past_what_is_left_of_a_budget_is_stopped_mid_way() {
    use common::anthropic::fake_model_calling;
    let calls = (0..8)
        .map(|_| {
            (
                "mcp__langbot__history_page".to_string(),
                json!({"limit": 1}),
            )
        })
        .collect();
    let (model_url, fake) = fake_model_calling(calls).await;
    let (mut serve, _home) = common::server::serve_claude(
        model_url,
        "budgets:\n  actor: {tokens_per_day: 30}\n  mid_turn: stop\n",
    )
    .await;
    let results = serve
        .results(json!({"conversation": "dora-1", "actor": "dora", "text": ASK}))
        .await;
    let end = results.last().unwrap();
    assert_eq!(end["data"]["code"], "limit_reached", "{results:#?}");
    let said = end["data"]["error"].as_str().unwrap();
    assert!(
        said.starts_with(
            "This turn was stopped when it went past what was left of your 30 tokens a day"
        ),
        "{said}"
    );
    let asked = fake.requests.lock().unwrap().len();
    assert!(
        asked < 9,
        "the model was asked {asked} times: the turn went on"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.requests.lock().unwrap().len(),
        asked,
        "nothing more after the stop"
    );
    let runs = serve.get_json("/v1/runs?actor=dora").await;
    let run = &runs["runs"][0];
    let spent = run["input_tokens"].as_u64().unwrap() + run["output_tokens"].as_u64().unwrap();
    assert!(spent > 30, "what the stopped turn spent is kept: {run}");
    let next = serve
        .results(json!({"conversation": "dora-2", "actor": "dora", "text": ASK}))
        .await;
    let refused = next.last().unwrap();
    assert_eq!(refused["data"]["code"], "limit_reached", "{next:?}");
    assert!(
        refused["data"]["error"]
            .as_str()
            .unwrap()
            .starts_with("You have used "),
        "{refused}"
    );
    serve.stop().await;
}

/// Claude Code kept alive across turns reports the cost of its whole
/// process on each turn's result: the ledger keeps each turn's own (two
/// alike turns cost alike, the second not the sum of both), so a cost
/// budget counts what each turn spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_kept_alive_turn_costs_only_what_it_spent() {
    let (model_url, _fake) = fake_model(false).await;
    let (mut serve, _home) = common::server::serve_claude(model_url, "").await;
    for _ in 0..2 {
        let results = serve
            .results(json!({"conversation": "costs", "actor": "eve", "text": ASK}))
            .await;
        assert_eq!(
            results.last().unwrap()["type"],
            "run.completed",
            "{results:?}"
        );
    }
    let runs = serve.get_json("/v1/runs?conversation=costs").await;
    let costs: Vec<f64> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["cost_usd"]
                .as_f64()
                .unwrap_or_else(|| panic!("no cost: {r}"))
        })
        .collect();
    // Newest first.
    let (second, first) = (costs[0], costs[1]);
    assert!(first > 0.0 && second > 0.0, "{costs:?}");
    assert!(
        second < first * 1.5,
        "the second turn's cost is its own, not the process's total: {costs:?}"
    );
    serve.stop().await;
}

/// A turn of the `commands` conversation: its terminal result.
async fn chat_turn(serve: &common::server::ServeProcess, actor: &str, text: &str) -> Value {
    let results = serve
        .results(json!({"conversation": "commands", "actor": actor, "text": text}))
        .await;
    results.last().unwrap().clone()
}

/// The commands on a person's path through `serve` with the real Claude
/// Code: `/status` names the running turn, `/stop` ends it within a
/// second and the next message continues the same session; `/new` makes
/// the next turn start fresh (the model's first request holds no earlier
/// message) and `/resume 1` goes back; none of it reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned CLIs in tests/clis (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_person_stops_starts_over_and_resumes_from_the_chat() {
    let (model_url, fake) = common::anthropic::fake_model_hanging_on("SLOW").await;
    let (serve, _home) = common::server::serve_claude(model_url, "").await;
    let first = chat_turn(&serve, "ann", "Remember the word PLUM").await;
    assert_eq!(first["type"], "run.completed", "{first}");
    let (session, _) = common::server::session_of(&first);
    assert!(!session.is_empty(), "{first}");

    let slow = serve.spawn_results(
        json!({"conversation": "commands", "actor": "ann", "text": "Take it SLOW", "run_id": "slow-1"}),
    );
    while fake.hanging.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, took) = serve.command("commands", "ann", "/status").await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(
        status.contains("Running: a turn of claude-code") && status.contains("slow-1"),
        "{status}"
    );
    assert!(status.contains(&session[..8]), "{status}");
    let (stopped, took) = serve.command("commands", "ann", "/stop").await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(stopped.starts_with("Stopped the running turn"), "{stopped}");
    let slow = tokio::time::timeout(Duration::from_secs(1), slow)
        .await
        .expect("the stopped turn ends within a second")
        .unwrap();
    let end = slow.last().unwrap();
    assert_eq!(end["data"]["code"], "cancelled", "{end}");
    let (nothing, _) = serve.command("commands", "ann", "/stop").await;
    assert_eq!(
        nothing,
        "Nothing is running here, so there is nothing to stop."
    );

    let next = chat_turn(&serve, "ann", "What was the word?").await;
    assert_eq!(next["type"], "run.completed", "{next}");
    assert_eq!(
        common::server::session_of(&next),
        (session.clone(), true),
        "{next}"
    );

    let (new, _) = serve.command("commands", "ann", "/new").await;
    assert!(new.starts_with("Started over"), "{new}");
    let asked = fake.requests.lock().unwrap().len();
    let fresh = chat_turn(&serve, "ann", "Hello there").await;
    assert_eq!(fresh["type"], "run.completed", "{fresh}");
    let (fresh_session, resumed) = common::server::session_of(&fresh);
    assert!(!resumed && fresh_session != session, "{fresh}");
    let first_request = fake.requests.lock().unwrap()[asked].to_string();
    assert!(
        !first_request.contains("PLUM") && !first_request.contains("What was the word"),
        "the fresh session's first request holds an earlier message: {first_request}"
    );

    let (list, _) = serve.command("commands", "ann", "/resume").await;
    assert!(list.contains(&format!("1. {}", &session[..8])), "{list}");
    let (back, _) = serve.command("commands", "ann", "/resume 1").await;
    assert!(back.starts_with("Back to session"), "{back}");
    let asked = fake.requests.lock().unwrap().len();
    let resumed = chat_turn(&serve, "ann", "And now?").await;
    assert_eq!(
        common::server::session_of(&resumed),
        (session.clone(), true),
        "{resumed}"
    );
    let request = fake.requests.lock().unwrap()[asked].to_string();
    assert!(
        request.contains("PLUM"),
        "the old session's words: {request}"
    );

    let said = fake.people_said();
    for word in ["/status", "/stop", "/new", "/resume"] {
        assert!(
            !said.iter().any(|text| text.contains(word)),
            "{word} reached the model: {said:?}"
        );
    }
}

/// Who may use a command is the operator's: a person not listed is told
/// so and the refusal is audited; `/model` switches only among the
/// operator's models (the next request asks for it); `/usage` says what
/// the ledger holds for the asker, and what is left of the conversation's
/// budget after everyone's turns in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned CLIs in tests/clis (npm ci --prefix tests/clis); scripts/test runs it"]
async fn commands_follow_the_operators_permissions_models_and_ledger() {
    let (model_url, fake) = fake_model(false).await;
    let config = "default_config:\n  models: [fake-fast, fake-deep]\n  commands:\n    allow:\n      new: [ann]\nbudgets:\n  conversation: {tokens_per_day: 1000000, turns_per_minute: 100}\n";
    let (serve, _home) = common::server::serve_claude(model_url, config).await;
    let first = chat_turn(&serve, "ann", ASK).await;
    assert_eq!(first["type"], "run.completed", "{first}");
    let bob = chat_turn(&serve, "bob", ASK).await;
    assert_eq!(bob["type"], "run.completed", "{bob}");

    let (refused, _) = serve.command("commands", "bob", "/new").await;
    assert_eq!(
        refused,
        "Only the people the operator listed (ann) may use /new here."
    );
    let (help, _) = serve.command("commands", "bob", "/help").await;
    assert!(help.contains("/stop") && !help.contains("/new"), "{help}");
    let (stranger, _) = serve.command("commands", "carol", "/stop").await;
    assert!(
        stranger.starts_with("Only people who have had a turn"),
        "{stranger}"
    );

    let (outside, _) = serve.command("commands", "ann", "/model gpt-9").await;
    assert_eq!(
        outside,
        "`gpt-9` is not a model the operator allows here (allowed: fake-fast, fake-deep; /model default goes back to the operator's)."
    );
    let (switched, _) = serve.command("commands", "ann", "/model fake-deep").await;
    assert_eq!(
        switched,
        "The model is now fake-deep, from your next message."
    );
    let asked = fake.requests.lock().unwrap().len();
    let next = chat_turn(&serve, "ann", FOLLOW_UP).await;
    assert_eq!(next["type"], "run.completed", "{next}");
    let models: Vec<String> = fake.requests.lock().unwrap()[asked..]
        .iter()
        .filter_map(|r| r["model"].as_str().map(str::to_string))
        .collect();
    assert!(models.contains(&"fake-deep".to_string()), "{models:?}");

    let (usage, _) = serve.command("commands", "ann", "/usage").await;
    let ledger = serve.get_json("/v1/usage?by=actor&actor=ann").await;
    let row = &ledger["totals"][0];
    let tokens = row["input_tokens"].as_u64().unwrap() + row["output_tokens"].as_u64().unwrap();
    let runs = row["runs"].as_u64().unwrap();
    assert!(
        usage.starts_with(&format!(
            "Your usage today (UTC): {} tokens",
            group_digits(tokens)
        )) && usage.contains(&format!("in {runs} turn(s)")),
        "{usage} vs {ledger}"
    );
    // The conversation's budget counts ann's and bob's turns alike.
    let ledger = serve.get_json("/v1/usage?by=conversation").await;
    let row = ledger["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "commands")
        .unwrap_or_else(|| panic!("{ledger}"));
    let spent = row["input_tokens"].as_u64().unwrap() + row["output_tokens"].as_u64().unwrap();
    assert!(spent > tokens, "{ledger}");
    assert!(
        usage.contains(&format!(
            "Left today for this conversation: {} tokens of 1,000,000 tokens.",
            group_digits(1_000_000 - spent)
        )) && usage.ends_with("At most 100 turns a minute for this conversation."),
        "{usage} vs {ledger}"
    );

    let rows = audit_of(&serve);
    assert!(
        rows.contains("command:new") && rows.contains("unauthorized") && rows.contains("by bob"),
        "{rows}"
    );
    let said = fake.people_said();
    assert!(
        !said
            .iter()
            .any(|text| ["/model", "/new", "/help", "/stop", "/usage"]
                .iter()
                .any(|word| text.contains(word))),
        "a command reached the model: {said:?}"
    );
}

fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The newest audit rows of `serve`'s store, as `host audit` prints them.
fn audit_of(serve: &common::server::ServeProcess) -> String {
    let audit = std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(serve.data.path())
        .args(["host", "audit", "--limit", "500"])
        .output()
        .unwrap();
    assert!(audit.status.success(), "{audit:?}");
    String::from_utf8_lossy(&audit.stdout).into_owned()
}
