//! The generic Agent Client Protocol backend, with an agent that is not
//! built in: Claude Code through its ACP adapter (`claude-agent-acp`,
//! pinned in tests/clis), added by one YAML file in an `--adapters` folder
//! and nothing else, offline against the fake Messages API. Through
//! `serve`: two turns of one conversation in one agent process, the second
//! resuming the first; the model's call of the bridge's `history_page`
//! (an HTTP MCP server given in `session/new`, its bearer in the message)
//! returns the store's transcript; deltas stream before the end; the
//! instructions file is the same both turns; cancel interrupts the turn
//! and keeps the session. Through `run`: one turn in a process stopped
//! after it, resuming the stored session; a missing binary is
//! `harness_not_found` with the spec's install hint.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::anthropic::{
    ANSWER, ASK, CONVERSATION, FOLLOW_UP, SECOND_ANSWER, fake_model, fake_model_hanging_on,
};
use common::server::ServeProcess;
use common::{DECISION, bridge_run, processes_under, seed_decision};
use serde_json::{Value, json};

/// The whole of what adds the agent: its spec, the README's example.
const SPEC: &str = include_str!("../examples/adapters/claude-acp.yaml");

/// A folder holding the spec, and a home for Claude.
struct Machine {
    adapters: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Machine {
    fn new() -> Machine {
        let adapters = tempfile::tempdir().unwrap();
        std::fs::write(adapters.path().join("claude-acp.yaml"), SPEC).unwrap();
        let home = tempfile::tempdir().unwrap();
        // The agent tells a session whose model is not Anthropic's own
        // endpoint about auto mode's billing, in the reply, until it is
        // acknowledged: it is, as a person would have done once.
        let config = home.path().join(".claude");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join(".claude.json"),
            json!({"autoModeClassifierBillingNoticeAcknowledgedAt": 4_102_444_800_000_u64})
                .to_string(),
        )
        .unwrap();
        Machine { adapters, home }
    }

    fn env(&self, model_url: &str) -> Vec<(&'static str, String)> {
        vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", self.home.path().display().to_string()),
            (
                "CLAUDE_CONFIG_DIR",
                self.home.path().join(".claude").display().to_string(),
            ),
            ("ANTHROPIC_BASE_URL", model_url.to_string()),
            ("ANTHROPIC_API_KEY", "test-key".to_string()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
        ]
    }

    async fn serve(&self, model_url: &str) -> ServeProcess {
        let data = Arc::new(tempfile::tempdir().unwrap());
        seed_decision(data.path(), CONVERSATION).await;
        let config = format!(
            "adapters: {}\nharness_binaries:\n  claude-acp: {}\nshutdown_grace_seconds: 5\n",
            self.adapters.path().display(),
            common::cli("claude-agent-acp").display()
        );
        ServeProcess::spawn(data, &config, &self.env(model_url)).await
    }
}

fn turn(text: &str, run_id: &str) -> Value {
    json!({"conversation": CONVERSATION, "text": text, "run_id": run_id, "harness": "claude-acp"})
}

fn terminal(results: &[Value]) -> &Value {
    results.last().expect("a terminal result")
}

fn session(results: &[Value]) -> &Value {
    let done = terminal(results);
    assert_eq!(done["type"], "run.completed", "{results:?}");
    &done["data"]["message"]["metadata"]["session"]
}

/// The system prompt and the first user message of a model request: where
/// Claude Code puts its instructions and the project's CLAUDE.md.
fn instructions_seen(request: &Value) -> String {
    format!("{}{}", request["system"], request["messages"][0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_added_by_yaml_serves_a_conversation_live() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new();
    let mut server = machine.serve(&model_url).await;

    let first = server.results(turn(ASK, "acp-1")).await;
    let kinds: Vec<&str> = first.iter().filter_map(|r| r["type"].as_str()).collect();
    let delta = kinds.iter().position(|k| *k == "message.delta");
    let call = kinds.iter().position(|k| *k == "tool.call.started");
    assert!(
        delta.is_some() && call.is_some(),
        "deltas and the tool call: {first:?}\ntools offered: {:?}",
        fake.requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| r["tools"]
                .as_array()
                .map(|t| t.iter().map(|t| t["name"].clone()).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    );
    assert!(
        first.iter().any(|r| r.to_string().contains(ANSWER)),
        "{first:?}"
    );
    // The history tool answered from the store: the model saw the
    // transcript's decision in the tool result.
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| {
            r["messages"].to_string().contains("tool_result") && r.to_string().contains(DECISION)
        }),
        "the history_page result never reached the model: {:?}\n{:?}",
        requests
            .iter()
            .map(|r| r["messages"].to_string())
            .filter(|m| m.contains("tool_result"))
            .collect::<Vec<_>>(),
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
    );
    let one = session(&first).clone();
    let workspace = common::workspace_of(&first);
    let instructions = std::fs::read_to_string(workspace.join("CLAUDE.md"))
        .expect("the instructions file in the workspace");
    assert!(!instructions.trim().is_empty());

    let asked = fake.requests.lock().unwrap().len();
    let second = server.results(turn(FOLLOW_UP, "acp-2")).await;
    let two = session(&second).clone();
    assert_eq!(two["process"]["pid"], one["process"]["pid"], "{second:?}");
    assert_eq!(two["process"]["turn"], 2);
    assert_eq!(two["session_id"], one["session_id"]);
    assert!(
        second.iter().any(|r| r.to_string().contains(SECOND_ANSWER)),
        "{second:?}"
    );
    let requests = fake.requests.lock().unwrap().clone();
    let later = &requests[asked..];
    let carried = later
        .iter()
        .any(|r| r["messages"].to_string().contains(ANSWER));
    assert!(carried, "turn 2 did not carry turn 1");
    // The stable instructions reach the model the same way both turns.
    let main =
        |r: &&Value| r["stream"] == true && r["tools"].as_array().is_some_and(|t| !t.is_empty());
    let before = requests[..asked]
        .iter()
        .find(main)
        .expect("a turn-1 request");
    let after = later.iter().find(main).expect("a turn-2 request");
    assert!(
        instructions_seen(before)
            .contains("You are a code agent answering messages in an IM conversation"),
        "the instructions file did not reach the model"
    );
    assert_eq!(instructions_seen(before), instructions_seen(after));

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_interrupts_an_acp_turn_and_the_session_goes_on() {
    let (model_url, fake) = fake_model_hanging_on("HANG").await;
    let machine = Machine::new();
    let mut server = machine.serve(&model_url).await;
    let first = server
        .results(turn("Remember the word heliotrope.", "acp-c1"))
        .await;
    let pid = session(&first)["process"]["pid"].clone();

    let asked = fake.requests.lock().unwrap().len();
    let hung = server.spawn_results(turn("Please HANG", "acp-c2"));
    for _ in 0..400 {
        if fake.requests.lock().unwrap().len() > asked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let cancelled = server.cancel_and_wait("acp-c2", hung).await;
    let end = terminal(&cancelled);
    assert_eq!(end["type"], "run.failed", "{cancelled:?}");
    assert_eq!(end["data"]["code"], "cancelled", "{end}");

    let third = server.results(turn("What was the word?", "acp-c3")).await;
    assert_eq!(session(&third)["process"]["pid"], pid, "{third:?}");
    let last = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(
        last.contains("heliotrope"),
        "the session lost turn 1: {last}"
    );

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_drives_an_acp_agent_for_one_turn_and_resumes_it_the_next() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new();
    let data = tempfile::tempdir().unwrap();
    seed_decision(data.path(), CONVERSATION).await;
    let adapters = machine.adapters.path().display().to_string();
    let acp = common::cli("claude-agent-acp").display().to_string();
    let args = |text: &'static str| {
        vec![
            "--adapters".to_string(),
            adapters.clone(),
            "--harness".into(),
            "claude-acp".into(),
            "--bin".into(),
            acp.clone(),
            "--conversation".into(),
            CONVERSATION.into(),
            "--text".into(),
            text.into(),
        ]
    };
    let env = machine.env(&model_url);
    let env: Vec<(&str, String)> = env.into_iter().filter(|(k, _)| *k != "PATH").collect();
    let first_args = args("Remember the word heliotrope.");
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let first = bridge_run(data.path(), &first_args, &env).await;
    assert_eq!(
        first.terminal()["type"],
        "run.completed",
        "{}",
        first.stderr
    );
    let root = data.path().join("workspaces");
    assert!(processes_under(&root).is_empty(), "the agent outlived run");

    let second_args = args("What was the word?");
    let second_args: Vec<&str> = second_args.iter().map(String::as_str).collect();
    let second = bridge_run(data.path(), &second_args, &env).await;
    let end = second.terminal();
    assert_eq!(end["type"], "run.completed", "{}", second.stderr);
    assert_eq!(
        end["data"]["message"]["metadata"]["session"]["resumed"], true,
        "{end}"
    );
    let last = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(last.contains("heliotrope"), "not resumed: {last}");
    assert!(processes_under(&root).is_empty());

    // No such program: the spec's hint, in the failure.
    let missing = vec![
        "--adapters",
        adapters.as_str(),
        "--harness",
        "claude-acp",
        "--bin",
        "/nonexistent/claude-agent-acp",
        "--conversation",
        CONVERSATION,
        "--text",
        "hi",
    ];
    let failed = bridge_run(data.path(), &missing, &env).await;
    let end = failed.terminal();
    assert_eq!(end["data"]["code"], "harness_not_found", "{end}");
    assert!(
        end["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("claude-agent-acp"),
        "{end}"
    );
}
