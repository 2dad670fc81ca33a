//! The real Claude Code CLI, offline, driven through `harness-bridge run`
//! against a fake Messages API on 127.0.0.1. Two turns of one conversation:
//! the first calls the bridge's `history_page` tool and gets the store's
//! real transcript; the second resumes the first's session. Also: a deleted
//! session falls back to a fresh one, a hanging harness is killed at the
//! deadline with nothing left behind, and a missing binary is reported.

mod common;

use std::path::Path;
use std::time::Duration;

use common::anthropic::{ANSWER, ASK, CONVERSATION, FOLLOW_UP, PAUSE, SECOND_ANSWER, fake_model};
use common::{BridgeTurn, DECISION, bridge_run, processes_under, seed_decision};
use serde_json::{Value, json};

/// A user's machine: a data folder for the bridge, a home for Claude.
struct Machine {
    data: tempfile::TempDir,
    home: tempfile::TempDir,
    model_url: String,
}

impl Machine {
    async fn new(model_url: String) -> Machine {
        let data = tempfile::tempdir().unwrap();
        seed_decision(data.path(), CONVERSATION).await;
        Machine {
            data,
            home: tempfile::tempdir().unwrap(),
            model_url,
        }
    }

    fn claude_config(&self) -> std::path::PathBuf {
        self.home.path().join(".claude")
    }

    async fn turn(&self, text: &str, extra: &[&str]) -> BridgeTurn {
        let claude = common::cli("claude");
        let claude = claude.to_string_lossy();
        let mut args = vec![
            "--harness",
            "claude-code",
            "--bin",
            &claude,
            "--conversation",
            CONVERSATION,
            "--text",
            text,
        ];
        args.extend_from_slice(extra);
        let env = [
            ("HOME", self.home.path().to_string_lossy().into_owned()),
            (
                "CLAUDE_CONFIG_DIR",
                self.claude_config().to_string_lossy().into_owned(),
            ),
            ("ANTHROPIC_BASE_URL", self.model_url.clone()),
            ("ANTHROPIC_API_KEY", "test-key".to_string()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
        ];
        bridge_run(self.data.path(), &args, &env).await
    }

    fn workspace_root(&self) -> std::path::PathBuf {
        self.data.path().join("workspaces")
    }

    /// Claude's session files for the conversation's workspace.
    fn session_files(&self) -> Vec<std::path::PathBuf> {
        walkdir::WalkDir::new(self.claude_config().join("projects"))
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .map(|e| e.into_path())
            .collect()
    }
}

fn instructions(workspace: &Path) -> String {
    std::fs::read_to_string(workspace.join(".langbot/instructions.md")).expect("instructions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_resume_one_claude_session_and_read_the_real_history() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;

    // Turn 1: a fresh session; the model calls history_page through the bridge.
    let first = machine.turn(ASK, &[]).await;
    first.assert_well_formed();
    let done = first.completed();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_claude_is_killed_at_the_deadline_with_nothing_left() {
    let (model_url, fake) = fake_model(true).await;
    let machine = Machine::new(model_url).await;
    let turn = machine
        .turn("Are you there?", &["--timeout", "4", "--kill-grace", "1"])
        .await;
    assert!(
        !fake.requests.lock().unwrap().is_empty(),
        "the harness reached the model"
    );
    common::assert_killed_at_deadline(&turn, &machine.workspace_root());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_claude_binary_is_harness_not_found() {
    common::assert_harness_not_found("claude-code", "npm install -g @anthropic-ai/claude-code")
        .await;
}

/// Claude Code names a project folder longer than 200 characters by a cut
/// and a hash; host workspaces (LangBot's) are that long. Resume still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
