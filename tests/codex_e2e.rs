//! The real Codex CLI, offline, driven through `harness-bridge run` against
//! a fake Responses API on 127.0.0.1 (configured the operator's way: a
//! provider in `$CODEX_HOME/config.toml`, which the bridge passes through
//! untouched). Two turns of one conversation: the first calls the bridge's
//! `history_page` tool; the second resumes the first's thread. Also: a
//! deleted thread falls back to a fresh one, a hanging Codex is killed at
//! the deadline with nothing left behind, and a missing binary is reported.
//! And through `serve`, one live `codex app-server` process for every turn
//! of a conversation.

use harness_bridge_testkit as common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::openai::{
    self, ANSWER, ASK, FOLLOW_UP, LOOKING, MADE, PAUSE, SECOND_ANSWER, fake_model,
};
use common::{BridgeTurn, DECISION, bridge_run, processes_under, seed_decision};
use serde_json::{Value, json};

const CONVERSATION: &str = "group-1";
/// A user's machine: a data folder for the bridge, a `CODEX_HOME` whose
/// config.toml points Codex at the fake model.
struct Machine {
    data: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Machine {
    async fn new(model_url: &str) -> Machine {
        let data = common::tempdir();
        seed_decision(data.path(), CONVERSATION).await;
        let home = common::tempdir();
        openai::codex_home(home.path(), model_url);
        Machine { data, home }
    }

    async fn turn(&self, text: &str, extra: &[&str]) -> BridgeTurn {
        let codex = common::cli("codex");
        let codex = codex.to_string_lossy();
        let mut args = vec![
            "--harness",
            "codex",
            "--bin",
            &codex,
            "--conversation",
            CONVERSATION,
            "--text",
            text,
        ];
        args.extend_from_slice(extra);
        let home = self.home.path().to_string_lossy().into_owned();
        let env = [
            ("HOME", home.clone()),
            ("CODEX_HOME", home),
            ("OPENAI_API_KEY", "test-key".to_string()),
        ];
        bridge_run(self.data.path(), &args, &env).await
    }

    /// `serve` on this machine, Codex its default harness, `extra` added
    /// to its bridge.yaml; with the Codex home, which must outlive it.
    async fn serve(self, extra: &str) -> (common::server::ServeProcess, tempfile::TempDir) {
        let codex = common::cli("codex");
        let home = self.home.path().display().to_string();
        let env = [
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", home.clone()),
            ("CODEX_HOME", home),
            ("OPENAI_API_KEY", "test-key".to_string()),
        ];
        let config = format!(
            "harness_binaries:\n  codex: {}\ndefault_harness: codex\nshutdown_grace_seconds: 5\n{extra}",
            codex.display()
        );
        let server = common::server::ServeProcess::spawn(Arc::new(self.data), &config, &env).await;
        (server, self.home)
    }

    fn workspace_root(&self) -> std::path::PathBuf {
        self.data.path().join("workspaces")
    }

    /// Codex's thread files, in the conversations' own homes
    /// (`.langbot/home/.codex/sessions`), links not followed.
    fn rollouts(&self) -> Vec<std::path::PathBuf> {
        walkdir::WalkDir::new(self.workspace_root())
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_file())
            .filter(|e| {
                e.path()
                    .to_string_lossy()
                    .contains("/.langbot/home/.codex/sessions/")
            })
            .map(|e| e.into_path())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn two_turns_resume_one_codex_thread_and_read_the_real_history() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(&model_url).await;
    let config = machine.home.path().join("config.toml");
    let operator_config = std::fs::read(&config).unwrap();

    let first = machine.turn(ASK, &[]).await;
    first.assert_well_formed();
    first.completed();
    let usage = &first.terminal()["usage"];
    assert!(usage["total_tokens"].as_u64().unwrap_or(0) >= 15, "{usage}");
    let started = first.first("tool.call.started").expect("tool call");
    assert_eq!(started["data"]["tool_name"], "mcp__langbot__history_page");
    let tool_done = first.first("tool.call.completed").expect("tool result");
    assert!(tool_done.to_string().contains(DECISION), "{tool_done}");
    // The first message streamed out while the model was still thinking.
    let (note_at, _) = first
        .results
        .iter()
        .find(|(_, r)| {
            r["type"] == "message.completed" && r["data"]["message"]["content"] == LOOKING
        })
        .expect("the first message");
    let (end_at, _) = first.results.last().unwrap();
    assert!(
        *end_at - *note_at >= PAUSE - Duration::from_millis(300),
        "results were not streamed: {:?} before the end",
        *end_at - *note_at
    );
    let thread = first
        .state("external.session_id")
        .and_then(Value::as_str)
        .expect("state.updated external.session_id")
        .to_string();
    assert_eq!(first.state("external.harness"), Some(&json!("codex")));
    let workspace = first
        .state("external.working_directory")
        .and_then(Value::as_str)
        .expect("working directory")
        .to_string();
    let turn_1_requests = fake.requests.lock().unwrap().len();

    let second = machine.turn(FOLLOW_UP, &[]).await;
    second.assert_well_formed();
    second.completed();
    assert_eq!(second.session()["resumed"], true);
    assert_eq!(
        second.state("external.session_id").and_then(Value::as_str),
        Some(thread.as_str())
    );
    let requests = fake.requests.lock().unwrap().clone();
    let turn_2 = requests[turn_1_requests..]
        .iter()
        .find(|r| r.to_string().contains(FOLLOW_UP))
        .expect("turn 2 reached the model");
    let seen = turn_2["input"].to_string();
    assert!(
        seen.contains(ASK) && seen.contains(ANSWER),
        "turn 2 did not carry turn 1"
    );

    // The stable instructions reach the model as the same developer text.
    let instructions =
        std::fs::read_to_string(Path::new(&workspace).join(".langbot/instructions.md")).unwrap();
    let developer_text = |request: &Value| -> Vec<String> {
        request["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["role"] == "developer")
            .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["text"].as_str().map(str::to_string))
            .filter(|t| t.contains(instructions.trim()))
            .collect()
    };
    let turn_1 = &requests[0];
    let (one, two) = (developer_text(turn_1), developer_text(turn_2));
    assert!(
        !one.is_empty(),
        "instructions missing from turn 1's request"
    );
    assert_eq!(one[0], two[0], "instructions changed between turns");

    let texts = common::transcript(machine.data.path(), CONVERSATION).await;
    assert_eq!(
        texts,
        vec![
            format!("user: {DECISION}"),
            format!("user: {ASK}"),
            format!("assistant: {LOOKING}\n\n{ANSWER}"),
            format!("user: {FOLLOW_UP}"),
            format!("assistant: {SECOND_ANSWER}"),
        ]
    );
    // The history call is audited, and nothing Codex's MCP client did was
    // refused: probing for a stream the stateless server does not offer is
    // not a refusal. What Codex reaches for on its own at its start (its
    // plugin list, experiments) is refused at its door, said as its own.
    let store = harness_bridge::host::sqlite::SqliteHost::open(machine.data.path()).unwrap();
    let audit = store.audit_tail(None, 50).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|r| r.entry.action == "history_page" && r.entry.outcome == "ok"),
        "{audit:?}"
    );
    assert!(
        audit.iter().all(|r| r.entry.outcome == "ok"
            || (r.entry.action == "egress" && r.entry.detail.contains("on its own"))),
        "{audit:?}"
    );
    assert!(processes_under(&machine.workspace_root()).is_empty());
    // The operator's config reached Codex through a link in the
    // conversation's home, and Codex left it as it was.
    let link = common::turn_workspace(&first).join(".langbot/home/.codex/config.toml");
    assert_eq!(std::fs::read_link(link).unwrap(), config);
    assert_eq!(std::fs::read(&config).unwrap(), operator_config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_deleted_codex_thread_falls_back_to_a_fresh_one() {
    let (model_url, _fake) = fake_model(false).await;
    let machine = Machine::new(&model_url).await;
    common::assert_session_fallback(
        async |text: &str| machine.turn(text, &[]).await,
        || {
            machine
                .rollouts()
                .iter()
                .for_each(|f| std::fs::remove_file(f).unwrap())
        },
        || {
            machine
                .rollouts()
                .iter()
                .for_each(|f| std::fs::write(f, "").unwrap())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_hanging_codex_is_killed_at_the_deadline_with_nothing_left() {
    let (model_url, fake) = fake_model(true).await;
    let machine = Machine::new(&model_url).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_codex_binary_is_harness_not_found() {
    common::assert_harness_not_found("codex", "npm install -g @openai/codex").await;
}

/// Through `serve`, one `codex app-server` process serves the
/// conversation: turn 1 streams its answer as token deltas and calls the
/// bridge's history tool, turn 2 goes on in the same process and thread, a
/// cancelled turn is interrupted and keeps the thread, and after the
/// process is killed the next turn resumes the thread by id in a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_live_codex_app_server_serves_the_conversation() {
    let (model_url, fake) = fake_model(false).await;
    let (mut server, _home) = Machine::new(&model_url).await.serve("").await;
    let body = |text: &str, run_id: &str| json!({"conversation": CONVERSATION, "text": text, "run_id": run_id});
    let process = |results: &[Value]| {
        let last = results.last().expect("results").clone();
        assert_eq!(last["type"], "run.completed", "{results:?}");
        last["data"]["message"]["metadata"]["session"].clone()
    };

    let first = server.results(body(ASK, "codex-live-1")).await;
    // The app-server's token count for the turn rides its terminal result.
    let usage = &first.last().expect("results")["usage"];
    assert!(usage["total_tokens"].as_u64().unwrap_or(0) >= 15, "{usage}");
    let deltas: String = first
        .iter()
        .filter(|r| r["type"] == "message.delta")
        .map(|r| {
            r["data"]["chunk"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert!(
        deltas.contains(ANSWER),
        "Codex streamed no deltas: {first:?}"
    );
    assert!(
        first
            .iter()
            .any(|r| r["type"] == "tool.call.completed" && r.to_string().contains("history_page")),
        "{first:?}"
    );
    let one = process(&first);
    let pid = one["process"]["pid"].as_i64().expect("a live process");

    let second = server.results(body(FOLLOW_UP, "codex-live-2")).await;
    let two = process(&second);
    assert_eq!(two["process"]["pid"], pid, "{second:?}");
    assert_eq!(two["process"]["turn"], 2);
    assert_eq!(two["session_id"], one["session_id"]);
    assert!(second.iter().any(|r| r.to_string().contains(SECOND_ANSWER)));
    let carried = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(carried.contains(ANSWER), "turn 2 did not carry turn 1");

    // A follow-up sent with `policy: steer` while a turn works goes into
    // that turn: its next model request carries it, one turn for both.
    let asked = fake.requests.lock().unwrap().len();
    let slow = server.spawn_results(body("Take it SLOW", "codex-live-steer"));
    for _ in 0..200 {
        if fake.requests.lock().unwrap().len() > asked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let steered = server
        .client
        .post(format!("{}/v1/runs", server.url))
        .body(json!({"conversation": CONVERSATION, "text": "STEERED: make it Monday", "policy": "steer"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(steered.status(), 202);
    let steered: Value = steered.json().await.unwrap();
    assert_eq!(steered["steered_into"], "codex-live-steer", "{steered}");
    let slow = slow.await.unwrap();
    let with = process(&slow);
    assert_eq!(with["process"]["pid"], pid, "{slow:?}");
    assert_eq!(with["process"]["turn"], 3, "{slow:?}");
    let last = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(last.contains("STEERED: make it Monday"), "{last}");
    // The turn's stream says it answers two messages.
    assert!(
        slow.iter().any(|r| r["type"] == "processor.log"
            && r["data"]["text"]
                .as_str()
                .is_some_and(|t| t.ends_with("went into this turn: STEERED: make it Monday"))),
        "the stream does not report the follow-up: {slow:?}"
    );

    // A turn the model never answers, cancelled: interrupted, not killed.
    let hung = server.spawn_results(body("Please HANG", "codex-live-3"));
    let asked = fake.requests.lock().unwrap().len();
    for _ in 0..200 {
        if fake.requests.lock().unwrap().len() > asked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = server.cancel_and_wait("codex-live-3", hung).await;
    let end = third.last().unwrap();
    assert_eq!(end["data"]["code"], "cancelled", "{third:?}");
    let fourth = server.results(body(FOLLOW_UP, "codex-live-4")).await;
    assert_eq!(process(&fourth)["process"]["pid"], pid, "{fourth:?}");
    let carried = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(
        carried.contains(ANSWER),
        "the turn after the cancel lost the thread's context: {carried}"
    );

    // Killed: the next turn resumes the thread in a new process.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fifth = server.results(body(FOLLOW_UP, "codex-live-5")).await;
    let five = process(&fifth);
    assert_ne!(five["process"]["pid"], pid, "{fifth:?}");
    assert_eq!(five["resumed"], true, "{fifth:?}");
    assert_eq!(five["session_id"], one["session_id"], "{fifth:?}");
    let carried = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(carried.contains(ANSWER), "the resumed thread lost turn 1");

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;

    // The conversation's history has the steered follow-up, after the
    // message of the turn it went into.
    let said = common::transcript(server.data.path(), CONVERSATION).await;
    let at = |text: &str| {
        said.iter()
            .position(|line| line == &format!("user: {text}"))
            .unwrap_or_else(|| panic!("no user message {text:?} in {said:?}"))
    };
    assert!(
        at("Take it SLOW") < at("STEERED: make it Monday"),
        "{said:?}"
    );
}

/// Under `approvals: chat`, the live Codex asks before it runs a command:
/// the turn ends with the card while its process waits; the card's answer
/// lets that command run in the same process, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_live_codex_asks_before_a_command_and_the_answer_runs_it() {
    let (model_url, _fake) = fake_model(false).await;
    let (mut server, _home) = Machine::new(&model_url)
        .await
        .serve("default_config:\n  approvals: chat\n")
        .await;
    let asked = server
        .results(json!({"conversation": CONVERSATION, "text": "Please MAKEFILE", "run_id": "codex-ask-1"}))
        .await;
    let request = common::asked_card(&asked);
    let end = asked.last().unwrap();
    assert!(
        request["title"]
            .as_str()
            .unwrap()
            .contains("run `touch approved-ran`"),
        "{request}"
    );
    let workspace = common::workspace_of(&asked);
    assert!(
        !workspace.join("approved-ran").exists(),
        "ran before the approval"
    );
    let pid = end["data"]["message"]["metadata"]["session"]["process"]["pid"].clone();

    let approved = server
        .results(json!({
            "conversation": CONVERSATION, "run_id": "codex-ask-2",
            "interaction": {"interaction_id": request["interaction_id"], "action_id": "approve"},
        }))
        .await;
    let end = approved.last().unwrap();
    assert_eq!(end["type"], "run.completed", "{approved:?}");
    assert_eq!(
        end["data"]["message"]["metadata"]["session"]["process"]["pid"],
        pid
    );
    assert!(workspace.join("approved-ran").exists(), "{approved:?}");
    assert!(
        approved.iter().any(|r| r.to_string().contains(MADE)),
        "{approved:?}"
    );

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

/// An idle live Codex is stopped after `idle_timeout_seconds`, and the next
/// turn resumes its thread by id in a new process; a bridge killed
/// outright leaves no Codex behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn an_idle_live_codex_resumes_by_id_and_a_killed_bridge_leaves_none() {
    let (model_url, fake) = fake_model(false).await;
    let (mut server, _home) = Machine::new(&model_url)
        .await
        .serve("idle_timeout_seconds: 1\n")
        .await;
    let body = |text: &str, run_id: &str| json!({"conversation": CONVERSATION, "text": text, "run_id": run_id});
    let session = |results: &[Value]| {
        let last = results.last().expect("results").clone();
        assert_eq!(last["type"], "run.completed", "{results:?}");
        last["data"]["message"]["metadata"]["session"].clone()
    };
    let first = server.results(body(ASK, "codex-idle-1")).await;
    let one = session(&first);
    let pid = one["process"]["pid"].as_i64().expect("a live process") as i32;
    common::wait_until_gone(pid).await;
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics.contains(r#"harness_bridge_live_sessions_stopped_total{why="idle"} 1"#),
        "{metrics}"
    );

    let second = server.results(body(FOLLOW_UP, "codex-idle-2")).await;
    let two = session(&second);
    let new_pid = two["process"]["pid"].as_i64().expect("a live process") as i32;
    assert_ne!(new_pid, pid);
    assert_eq!(two["process"]["warm"], false);
    assert_eq!(two["resumed"], true, "{second:?}");
    assert_eq!(two["session_id"], one["session_id"]);
    let carried = fake.requests.lock().unwrap().last().unwrap().to_string();
    assert!(carried.contains(ANSWER), "the resumed thread lost turn 1");

    // The bridge dies outright while that process is kept: it goes too.
    assert!(common::alive(new_pid));
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
    common::wait_until_gone(new_pid).await;
    common::assert_none_left_under(&server.workspaces()).await;
}

/// Caged (the default), Codex's one-shot `exec` runs its own shell tool's
/// command in the conversation's workspace: what the cage lets through its
/// own sandbox still runs (`workspace-write` as the spec says, or the
/// cage's choice for Codex).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_caged_codex_runs_its_shell_commands_in_the_workspace() {
    let (model_url, _fake) = fake_model(false).await;
    let machine = Machine::new(&model_url).await;
    let turn = machine.turn("MAKEFILE now", &[]).await;
    assert_eq!(turn.terminal()["type"], "run.completed", "{}", turn.stderr);
    let made = walkdir::WalkDir::new(machine.workspace_root())
        .into_iter()
        .filter_map(Result::ok)
        .any(|e| e.file_name() == "approved-ran");
    assert!(made, "the command did not run: {:?}", turn.kinds());
}

/// In a network of its own Codex answers with the bridge's history tool
/// (at its door) and reaches its model only through the gateway: its
/// provider, from the operator's config.toml, pointed there by the
/// bridge; what the model hears is the operator's key, never the
/// stand-in Codex held. The conversation's home still links the
/// operator's config.toml, untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn codex_reaches_its_model_through_the_gateway_behind_its_door() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(&model_url).await;
    let before = std::fs::read(machine.home.path().join("config.toml")).unwrap();
    let turn = machine.turn(ASK, &["--network", "isolated"]).await;
    turn.completed();
    let tool_done = turn.first("tool.call.completed").expect("tool result");
    assert!(tool_done.to_string().contains(DECISION), "{tool_done}");
    let keys = fake.keys.lock().unwrap().clone();
    assert!(!keys.is_empty(), "no call reached the model");
    assert!(
        keys.iter().all(|k| k == "Bearer test-key"),
        "the model heard {keys:?}"
    );
    let after = std::fs::read(machine.home.path().join("config.toml")).unwrap();
    assert_eq!(before, after, "the operator's config.toml changed");
    assert!(processes_under(&machine.workspace_root()).is_empty());
}

/// With `mid_turn: stop` and a cost limit, a Codex turn is stopped once
/// its model calls cost more than is left, though Codex says its tokens
/// only at a turn's end: the gateway counted the first call (its model's
/// price from the operator's table), the turn fails `limit_reached`
/// saying so, and the model is asked no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_codex_turn_past_its_cost_limit_is_stopped_when_the_gateway_counts_it() {
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(&model_url).await;
    // 15 tokens a call at $0.10 a token: the first call costs $1.50.
    let (mut serve, _home) = machine
        .serve(
            "budgets:\n  actor: {cost_usd_per_day: 1}\n  mid_turn: stop\n\
             prices:\n  gpt-5-codex: {input: 100000, output: 100000}\n",
        )
        .await;
    let results = serve
        .results(json!({"conversation": "c-cost", "actor": "dora", "text": ASK}))
        .await;
    let end = results.last().unwrap();
    assert_eq!(end["data"]["code"], "limit_reached", "{results:#?}");
    let said = end["data"]["error"].as_str().unwrap_or_default();
    assert!(said.contains("stopped"), "{said}");
    let asked = fake.requests.lock().unwrap().len();
    assert!(
        asked <= 2,
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
    assert!(
        run["cost_usd"].as_f64().unwrap_or(0.0) >= 1.5,
        "what the stopped turn spent is kept: {run}"
    );
    serve.stop().await;
}

/// The chat commands with the real Codex through `serve`: `/status`
/// names the running turn, `/stop` ends it within a second (the
/// app-server's own interrupt) and the next message goes on in the same
/// thread; `/new` starts a fresh thread whose first request holds no
/// earlier message, and `/resume 1` goes back; no command reaches the
/// model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_person_stops_a_codex_turn_and_starts_over_from_the_chat() {
    let (model_url, fake) = fake_model(false).await;
    let (server, _home) = Machine::new(&model_url).await.serve("").await;
    let body = |text: &str| json!({"conversation": CONVERSATION, "text": text});
    let first = server.results(body("Remember the word PLUM")).await;
    let (thread, _) = common::server::session_of(first.last().unwrap());

    let hanging = server.spawn_results(
        json!({"conversation": CONVERSATION, "text": "Now HANG", "run_id": "codex-hang"}),
    );
    assert!(fake.until_asked("Now HANG", Duration::from_secs(60)).await);
    let (status, took) = server.command(CONVERSATION, "api-user", "/status").await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(
        status.contains("Running: a turn of codex") && status.contains("codex-hang"),
        "{status}"
    );
    let (stopped, took) = server.command(CONVERSATION, "api-user", "/stop").await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(stopped.starts_with("Stopped the running turn"), "{stopped}");
    let hung = tokio::time::timeout(Duration::from_secs(1), hanging)
        .await
        .expect("the stopped turn ends within a second")
        .unwrap();
    assert_eq!(
        hung.last().unwrap()["data"]["code"],
        "cancelled",
        "{hung:?}"
    );

    let next = server.results(body("What was the word?")).await;
    assert_eq!(
        common::server::session_of(next.last().unwrap()),
        (thread.clone(), true),
        "{next:?}"
    );

    let (new, _) = server.command(CONVERSATION, "api-user", "/new").await;
    assert!(new.starts_with("Started over"), "{new}");
    let asked = fake.requests.lock().unwrap().len();
    let fresh = server.results(body("Hello there")).await;
    let (fresh_thread, resumed) = common::server::session_of(fresh.last().unwrap());
    assert!(!resumed && fresh_thread != thread, "{fresh:?}");
    let first_request = fake.requests.lock().unwrap()[asked].to_string();
    assert!(
        !first_request.contains("PLUM"),
        "the fresh thread's first request holds an earlier message: {first_request}"
    );
    let (back, _) = server.command(CONVERSATION, "api-user", "/resume 1").await;
    assert!(back.starts_with("Back to session"), "{back}");
    let asked = fake.requests.lock().unwrap().len();
    let again = server.results(body("And now?")).await;
    assert_eq!(
        common::server::session_of(again.last().unwrap()),
        (thread, true),
        "{again:?}"
    );
    let request = fake.requests.lock().unwrap()[asked].to_string();
    assert!(
        request.contains("PLUM"),
        "the old thread's words: {request}"
    );

    let said = fake.people_said();
    assert!(said.iter().any(|t| t.contains("PLUM")), "{said:?}");
    for word in ["/status", "/stop", "/new", "/resume"] {
        assert!(
            !said.iter().any(|t| t.contains(word)),
            "{word} reached the model: {said:?}"
        );
    }
}
