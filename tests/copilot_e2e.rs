//! The real GitHub Copilot CLI (pinned in tests/clis), offline: no GitHub
//! login, its model a provider of the operator's own (`COPILOT_OFFLINE`,
//! an Anthropic-type provider at the fake Messages API on 127.0.0.1).
//! Through `harness-bridge run`, as a user runs it: two turns of one
//! conversation, the first calling the bridge's `history_page` (Copilot
//! names it `langbot-history_page`) and getting the store's transcript,
//! with token deltas before the end; the second resuming the first's
//! session; the instructions file the same in both turns' requests. A
//! turn past its deadline leaves no process; a missing binary is
//! `harness_not_found` with the install hint.

use harness_bridge_testkit as common;

use common::anthropic::{
    ANSWER, ASK, CONVERSATION, FOLLOW_UP, SECOND_ANSWER, fake_model, fake_model_hanging_on,
};
use common::{BridgeTurn, bridge_run, processes_under, seed_decision};
use serde_json::json;

/// A user's machine: the bridge's data folder, a home for Copilot.
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

    fn env(&self) -> Vec<(&'static str, String)> {
        let home = self.home.path().display().to_string();
        vec![
            ("HOME", home.clone()),
            ("COPILOT_HOME", format!("{home}/.copilot")),
            ("COPILOT_OFFLINE", "true".into()),
            ("COPILOT_PROVIDER_TYPE", "anthropic".into()),
            ("COPILOT_PROVIDER_BASE_URL", self.model_url.clone()),
            ("COPILOT_PROVIDER_API_KEY", "test-key-for-the-fake".into()),
            ("COPILOT_MODEL", "claude-sonnet-4".into()),
        ]
    }

    async fn turn(&self, text: &str, extra: &[&str]) -> BridgeTurn {
        let copilot = common::cli("copilot");
        let copilot = copilot.to_string_lossy();
        let mut args = vec![
            "--harness",
            "copilot",
            "--bin",
            &copilot,
            "--conversation",
            CONVERSATION,
            "--text",
            text,
        ];
        args.extend_from_slice(extra);
        bridge_run(self.data.path(), &args, &self.env()).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned copilot (npm ci --prefix tests/clis); scripts/test runs it"]
async fn two_turns_resume_one_copilot_session_and_read_the_real_history() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;

    let first = machine.turn(ASK, &[]).await;
    let end = first.terminal();
    assert_eq!(end["type"], "run.completed", "{}", first.stderr);
    let kinds = first.kinds();
    let delta = kinds.iter().position(|k| k == "message.delta");
    let call = kinds.iter().position(|k| k == "tool.call.started");
    assert!(delta.is_some() && call.is_some(), "{kinds:?}");
    // The deltas came before the end, as the model wrote them: the fake
    // model pauses after the answer's text, and the answer's delta
    // arrived that long before the turn's end.
    let answer_delta = first
        .results
        .iter()
        .find(|(_, r)| r["type"] == "message.delta" && r.to_string().contains(ANSWER))
        .map(|(at, _)| *at)
        .unwrap_or_else(|| panic!("the answer as a delta: {kinds:?}"));
    let (end_at, _) = *first.results.last().unwrap();
    assert!(
        end_at >= answer_delta + common::anthropic::PAUSE / 2,
        "the answer's delta came only with the end: {kinds:?}"
    );
    let started = first.first("tool.call.started").unwrap();
    assert_eq!(started["data"]["tool_name"], "langbot-history_page");
    assert!(
        first
            .results
            .iter()
            .any(|(_, r)| r.to_string().contains(ANSWER)),
        "{kinds:?}"
    );
    // The store's transcript reached the model inside the tool's result.
    let requests = fake.requests.lock().unwrap().clone();
    common::assert_history_reached_model(&requests, &first.stderr);
    let session = &end["data"]["message"]["metadata"]["session"];
    let session_id = session["session_id"].clone();
    assert!(session_id.is_string(), "{end}");
    let asked = requests.len();
    // Copilot's stream has no token counts: they come from its usage file
    // (the fake reports 10 input tokens a request).
    let usage = &end["usage"];
    assert_eq!(usage["prompt_tokens"], json!(10 * asked), "{end}");

    let second = machine.turn(FOLLOW_UP, &[]).await;
    let end = second.terminal();
    assert_eq!(end["type"], "run.completed", "{}", second.stderr);
    let session = &end["data"]["message"]["metadata"]["session"];
    assert_eq!(session["resumed"], true, "{end}");
    assert_eq!(session["session_id"], session_id);
    assert!(end.to_string().contains(SECOND_ANSWER), "{end}");
    let requests = fake.requests.lock().unwrap().clone();
    // The file counts the whole session: the turn's are this turn's alone.
    assert_eq!(
        end["usage"]["prompt_tokens"],
        json!(10 * (requests.len() - asked)),
        "{end}"
    );
    let carried = requests[asked..]
        .iter()
        .any(|r| r["messages"].to_string().contains(ANSWER));
    assert!(carried, "turn 2 did not carry turn 1");

    // The stable instructions (the user-level instructions file in the
    // conversation's home, which the bridge wrote) reach the model in both
    // turns, byte for byte.
    let workspace = common::turn_workspace(&first);
    common::assert_instructions_in_both_turns(
        &workspace,
        ".langbot/home/.copilot/copilot-instructions.md",
        &requests,
        asked,
    );
    assert!(processes_under(&machine.data.path().join("workspaces")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned copilot (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_hanging_copilot_is_stopped_at_the_deadline_with_nothing_left() {
    let (model_url, fake) = fake_model_hanging_on("HANG").await;
    let machine = Machine::new(model_url).await;
    // (Long enough for Copilot to start and ask, on a busy machine too.)
    let turn = machine.turn("Please HANG", &["--timeout", "45"]).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.failed", "{}", turn.stderr);
    assert_eq!(end["data"]["code"], "deadline_exceeded", "{end}");
    assert!(fake.hanging.load(std::sync::atomic::Ordering::SeqCst) > 0);
    assert!(processes_under(&machine.data.path().join("workspaces")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned copilot (npm ci --prefix tests/clis); scripts/test runs it"]
async fn ctrl_c_cancels_a_copilot_turn_with_nothing_left() {
    let (model_url, fake) = fake_model_hanging_on("HANG").await;
    let machine = Machine::new(model_url).await;
    let copilot = common::cli("copilot").display().to_string();
    let args = [
        "--harness",
        "copilot",
        "--bin",
        &copilot,
        "--conversation",
        CONVERSATION,
        "--text",
        "Please HANG",
    ];
    let child = common::spawn_bridge_run(machine.data.path(), &args, &machine.env());
    let hanging = fake.hanging.clone();
    common::assert_ctrl_c_cancels(child, &machine.data.path().join("workspaces"), move || {
        hanging.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_copilot_binary_is_harness_not_found() {
    let machine = Machine::new("http://127.0.0.1:9".into()).await;
    let args = [
        "--harness",
        "copilot",
        "--bin",
        "/nonexistent/copilot",
        "--conversation",
        CONVERSATION,
        "--text",
        "hi",
    ];
    let turn = bridge_run(machine.data.path(), &args, &machine.env()).await;
    let end = turn.terminal();
    assert_eq!(end["data"]["code"], "harness_not_found", "{end}");
    assert!(
        end["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("npm install -g @github/copilot"),
        "{end}"
    );
}

/// In a network of its own Copilot answers with the bridge's history tool
/// (at its door) and reaches its own provider only through the gateway:
/// what the model hears is the operator's key, never the stand-in
/// Copilot held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned copilot (npm ci --prefix tests/clis); scripts/test runs it"]
async fn copilot_reaches_its_model_through_the_gateway_behind_its_door() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(model_url).await;
    let turn = machine.turn(ASK, &["--network", "isolated"]).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.completed", "{}", turn.stderr);
    assert!(end.to_string().contains(ANSWER), "{end}");
    let requests = fake.requests.lock().unwrap().clone();
    common::assert_history_reached_model(&requests, &turn.stderr);
    let keys = fake.keys.lock().unwrap().clone();
    assert!(!keys.is_empty(), "no call reached the model");
    assert!(
        keys.iter().all(|k| k.ends_with("test-key-for-the-fake")),
        "the model heard {keys:?}"
    );
    assert!(processes_under(&machine.data.path().join("workspaces")).is_empty());
}
