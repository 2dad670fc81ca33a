//! The real Gemini CLI and Qwen Code (pinned in tests/clis), offline:
//! Gemini against a fake Gemini API (`GOOGLE_GEMINI_BASE_URL`), Qwen
//! against a fake chat-completions API (`--auth-type openai` by its
//! environment), both on 127.0.0.1. Through `harness-bridge run`, as a
//! user runs it: two turns of one conversation, the first calling the
//! bridge's `history_page` (each CLI names it its own way) and getting the
//! store's transcript, with token deltas before the end; the second
//! resuming the first's session; the instructions file the same in both
//! turns' requests. A turn past its deadline leaves no process; a missing
//! binary is `harness_not_found` with the install hint; Ctrl-C mid-turn
//! cancels it, and nothing is left running either way.

use harness_bridge_testkit as common;

use common::anthropic::{CONVERSATION, FOLLOW_UP};
use common::wire::{ANSWER, ASK, Fake, SECOND_ANSWER, Wire, fake_model};
use common::{BridgeTurn, bridge_run, processes_under, seed_decision};

/// One of the two CLIs, and how it is set up offline.
#[derive(Clone, Copy)]
enum Cli {
    Gemini,
    Qwen,
}

impl Cli {
    fn harness(self) -> &'static str {
        match self {
            Cli::Gemini => "gemini",
            Cli::Qwen => "qwen",
        }
    }

    fn wire(self) -> Wire {
        match self {
            Cli::Gemini => Wire::Gemini,
            Cli::Qwen => Wire::Chat,
        }
    }

    /// How the CLI names the bridge's history tool.
    fn history_tool(self) -> &'static str {
        match self {
            Cli::Gemini => "mcp_langbot_history_page",
            Cli::Qwen => "mcp__langbot__history_page",
        }
    }

    /// The instructions file the family writes: the CLI's user-level one,
    /// in the conversation's home.
    fn instructions_file(self) -> &'static str {
        match self {
            Cli::Gemini => ".langbot/home/.gemini/GEMINI.md",
            Cli::Qwen => ".langbot/home/.qwen/QWEN.md",
        }
    }

    /// The operator's environment: a key and the model endpoint.
    fn env(self, home: &str, model_url: &str) -> Vec<(&'static str, String)> {
        let mut env = vec![("HOME", home.to_string())];
        match self {
            Cli::Gemini => env.extend([
                ("GOOGLE_GEMINI_BASE_URL", model_url.to_string()),
                ("GEMINI_API_KEY", "test-key-for-the-fake".to_string()),
            ]),
            Cli::Qwen => env.extend([
                ("OPENAI_BASE_URL", format!("{model_url}/v1")),
                ("OPENAI_API_KEY", "test-key-for-the-fake".to_string()),
                ("OPENAI_MODEL", "fake-model".to_string()),
            ]),
        }
        env
    }

    /// The binding's model (Gemini's, else it routes every request
    /// through a classifier first) and Qwen's auth type, as run flags.
    fn extra_args(self) -> &'static [&'static str] {
        match self {
            Cli::Gemini => &["--model", "gemini-2.5-flash"],
            Cli::Qwen => &["--model", "fake-model"],
        }
    }
}

/// A user's machine: the bridge's data folder, a home, the fake model.
struct Machine {
    cli: Cli,
    data: tempfile::TempDir,
    home: tempfile::TempDir,
    model_url: String,
}

impl Machine {
    async fn new(cli: Cli, model_url: String) -> Machine {
        let data = common::tempdir();
        seed_decision(data.path(), CONVERSATION).await;
        let home = common::tempdir();
        if let Cli::Qwen = cli {
            // The operator picks the OpenAI-compatible auth once, in the
            // user settings, as Qwen's docs say.
            let settings = home.path().join(".qwen");
            std::fs::create_dir_all(&settings).unwrap();
            std::fs::write(
                settings.join("settings.json"),
                r#"{"security": {"auth": {"selectedType": "openai"}}}"#,
            )
            .unwrap();
        }
        Machine {
            cli,
            data,
            home,
            model_url,
        }
    }

    async fn turn(&self, text: &str, extra: &[&str]) -> BridgeTurn {
        let bin = common::cli(self.cli.harness());
        let bin = bin.to_string_lossy();
        let mut args = vec![
            "--harness",
            self.cli.harness(),
            "--bin",
            &bin,
            "--conversation",
            CONVERSATION,
            "--text",
            text,
        ];
        args.extend_from_slice(self.cli.extra_args());
        args.extend_from_slice(extra);
        let home = self.home.path().display().to_string();
        bridge_run(
            self.data.path(),
            &args,
            &self.cli.env(&home, &self.model_url),
        )
        .await
    }
}

/// Two turns: the history tool's real transcript, deltas before the end,
/// the second resuming the first, the instructions in both.
async fn two_turns(cli: Cli) -> (Machine, Fake, BridgeTurn) {
    let (model_url, fake) = fake_model(cli.wire(), None).await;
    let machine = Machine::new(cli, model_url).await;

    let first = machine.turn(ASK, &[]).await;
    let end = first.terminal();
    assert_eq!(end["type"], "run.completed", "{}", first.stderr);
    let kinds = first.kinds();
    let delta = kinds.iter().position(|k| k == "message.delta");
    let call = kinds.iter().position(|k| k == "tool.call.started");
    assert!(delta.is_some() && call.is_some(), "{kinds:?}");
    // The deltas came before the end, as the model wrote them.
    let answer_delta = first
        .results
        .iter()
        .find(|(_, r)| r["type"] == "message.delta" && r.to_string().contains(ANSWER))
        .map(|(at, _)| *at)
        .expect("the answer as a delta");
    let (end_at, _) = *first.results.last().unwrap();
    assert!(
        end_at >= answer_delta + common::wire::PAUSE / 2,
        "{kinds:?}"
    );
    let started = first.first("tool.call.started").unwrap();
    assert_eq!(started["data"]["tool_name"], cli.history_tool());
    assert!(end.to_string().contains(ANSWER), "{end}");
    // The tokens the CLI counted (the fake's usage, summed over the turn's
    // requests) ride the terminal result.
    let total = end["usage"]["total_tokens"].as_u64().unwrap_or(0);
    assert!(total >= 15, "{end}");
    // The store's transcript reached the model inside the tool's result
    // (a `functionResponse` part for Gemini, a `tool` message for Qwen).
    let requests = fake.requests.lock().unwrap().clone();
    common::assert_history_reached_model(&requests, &first.stderr);
    let session = &end["data"]["message"]["metadata"]["session"];
    let session_id = session["session_id"].clone();
    assert!(session_id.is_string(), "{end}");
    let asked = requests.len();

    let second = machine.turn(FOLLOW_UP, &[]).await;
    let end = second.terminal();
    assert_eq!(end["type"], "run.completed", "{}", second.stderr);
    let session = &end["data"]["message"]["metadata"]["session"];
    assert_eq!(session["resumed"], true, "{end}");
    assert_eq!(session["session_id"], session_id);
    assert!(end.to_string().contains(SECOND_ANSWER), "{end}");
    let requests = fake.requests.lock().unwrap().clone();
    let carried = requests[asked..]
        .iter()
        .any(|r| r.to_string().contains(ANSWER) && r.to_string().contains(FOLLOW_UP));
    assert!(carried, "turn 2 did not carry turn 1");

    // The stable instructions (the file the family reads, which the bridge
    // wrote) reach the model in both turns, byte for byte.
    common::assert_instructions_in_both_turns(
        &common::turn_workspace(&first),
        cli.instructions_file(),
        &requests,
        asked,
    );
    assert!(processes_under(&machine.data.path().join("workspaces")).is_empty());
    (machine, fake, first)
}

/// One turn in a network of its own (`--network isolated`): the CLI
/// reaches its model only through the bridge's gateway, with a stand-in
/// for its key, and its MCP tool through the door.
async fn a_turn_behind_the_door(cli: Cli) {
    let (model_url, fake) = fake_model(cli.wire(), None).await;
    let machine = Machine::new(cli, model_url).await;
    let turn = machine.turn(ASK, &["--network", "isolated"]).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.completed", "{}", turn.stderr);
    assert!(end.to_string().contains(ANSWER), "{end}");
    let requests = fake.requests.lock().unwrap().clone();
    common::assert_history_reached_model(&requests, &turn.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned gemini and qwen (npm ci --prefix tests/clis); scripts/test runs it"]
async fn gemini_and_qwen_reach_their_model_through_the_gateway_behind_the_door() {
    a_turn_behind_the_door(Cli::Gemini).await;
    a_turn_behind_the_door(Cli::Qwen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned gemini (npm ci --prefix tests/clis); scripts/test runs it"]
async fn two_turns_resume_one_gemini_session_and_read_the_real_history() {
    let (_machine, _fake, first) = two_turns(Cli::Gemini).await;
    // The conversation's own Gemini home, its session inside it (in one
    // file or more: Gemini names each by the minute it was written to and
    // the session's id).
    let home = common::turn_workspace(&first).join(".langbot/home/.gemini");
    let settings = std::fs::read_to_string(home.join("settings.json")).unwrap();
    assert!(
        settings.contains("gemini-api-key") && settings.contains("\"langbot\""),
        "the home's settings select the auth and name the bridge's server: {settings}"
    );
    assert!(
        !common::turn_workspace(&first)
            .join(".gemini/settings.json")
            .exists(),
        "nothing in the workspace's own .gemini, which a repository may track"
    );
    let session = first.terminal()["data"]["message"]["metadata"]["session"]["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let chats: Vec<String> = walkdir::WalkDir::new(home.join("tmp"))
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| e.path().to_string_lossy().into_owned())
        .filter(|path| path.contains("/chats/session-"))
        .collect();
    assert!(
        !chats.is_empty(),
        "no session kept in the conversation's home"
    );
    assert!(
        chats
            .iter()
            .all(|path| path.ends_with(&format!("-{}.jsonl", &session[..8]))),
        "one session, resumed: {chats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned qwen (npm ci --prefix tests/clis); scripts/test runs it"]
async fn two_turns_resume_one_qwen_session_and_read_the_real_history() {
    let (_machine, _fake, first) = two_turns(Cli::Qwen).await;
    // Qwen read the token from its MCP file; once the turn is over the
    // file holds only the variable's name, and only its owner may read it.
    let file = common::turn_workspace(&first).join(".langbot/mcp.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("Bearer ${LANGBOT_MCP_TOKEN}"), "{text}");
    assert!(text.contains("\"alwaysLoadTools\": true"), "{text}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

async fn hangs_until_the_deadline(cli: Cli) {
    let (model_url, fake) = fake_model(cli.wire(), Some("HANG")).await;
    let machine = Machine::new(cli, model_url).await;
    // Long enough for the CLI to start and ask, on a machine busy with
    // builds too (at 20 s Qwen Code once had not asked yet in CI).
    let turn = machine.turn("Please HANG", &["--timeout", "45"]).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.failed", "{}", turn.stderr);
    assert_eq!(end["data"]["code"], "deadline_exceeded", "{end}");
    let requests = fake.requests.lock().unwrap().len();
    assert!(
        fake.hanging.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the model never got the turn ({requests} requests): {end}\n{}",
        turn.stderr
    );
    assert!(processes_under(&machine.data.path().join("workspaces")).is_empty());
}

/// Ctrl-C while the model thinks: the turn ends `cancelled`, nothing left.
async fn ctrl_c_cancels(cli: Cli) {
    let (model_url, fake) = fake_model(cli.wire(), Some("HANG")).await;
    let machine = Machine::new(cli, model_url).await;
    let bin = common::cli(cli.harness()).display().to_string();
    let mut args = vec![
        "--harness",
        cli.harness(),
        "--bin",
        &bin,
        "--conversation",
        CONVERSATION,
        "--text",
        "Please HANG",
    ];
    args.extend_from_slice(cli.extra_args());
    let home = machine.home.path().display().to_string();
    let child = common::spawn_bridge_run(
        machine.data.path(),
        &args,
        &cli.env(&home, &machine.model_url),
    );
    let hanging = fake.hanging.clone();
    common::assert_ctrl_c_cancels(child, &machine.data.path().join("workspaces"), move || {
        hanging.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned gemini (npm ci --prefix tests/clis); scripts/test runs it"]
async fn ctrl_c_cancels_a_gemini_turn_with_nothing_left() {
    ctrl_c_cancels(Cli::Gemini).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned qwen (npm ci --prefix tests/clis); scripts/test runs it"]
async fn ctrl_c_cancels_a_qwen_turn_with_nothing_left() {
    ctrl_c_cancels(Cli::Qwen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned gemini (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_hanging_gemini_is_stopped_at_the_deadline_with_nothing_left() {
    hangs_until_the_deadline(Cli::Gemini).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned qwen (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_hanging_qwen_is_stopped_at_the_deadline_with_nothing_left() {
    hangs_until_the_deadline(Cli::Qwen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_gemini_or_qwen_binary_is_harness_not_found() {
    common::assert_harness_not_found("gemini", "npm install -g @google/gemini-cli").await;
    common::assert_harness_not_found("qwen", "npm install -g @qwen-code/qwen-code").await;
}
