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

use harness_bridge_testkit as common;

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

/// An agent under test: its name, its spec and how the user's machine
/// points it at the fake model.
#[derive(Clone, Copy, PartialEq)]
enum Agent {
    /// Claude Code through claude-agent-acp, added by the example spec.
    ClaudeAcp,
    /// Kimi Code CLI (`kimi acp`), built in, on the Node 22 it needs.
    Kimi,
    /// opencode (`opencode acp`), built in, its model an Anthropic
    /// provider in its configuration.
    Opencode,
    /// Kilo Code's CLI (`kilo acp`, an opencode fork), built in, its
    /// model an Anthropic provider in its configuration.
    Kilo,
    /// Cline's CLI (`cline --acp`), built in, a family of its own: its
    /// MCP servers and model endpoint in its own settings files, its
    /// model an OpenAI-compatible endpoint.
    Cline,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::ClaudeAcp => "claude-acp",
            Agent::Kimi => "kimi",
            Agent::Opencode => "opencode",
            Agent::Kilo => "kilo",
            Agent::Cline => "cline",
        }
    }

    /// The program, from the pinned test CLIs (opencode, Kilo and Cline as
    /// their linux x64 builds, the binaries their launcher packages would
    /// pick here).
    fn binary(self) -> std::path::PathBuf {
        match self {
            Agent::ClaudeAcp => common::cli("claude-agent-acp"),
            Agent::Kimi => common::cli("kimi"),
            Agent::Opencode => platform_build("opencode", "opencode-linux-x64/bin/opencode"),
            Agent::Cline => platform_build("Cline", "@cline/cli-linux-x64/bin/cline"),
            Agent::Kilo => platform_build("Kilo", "@kilocode/cli-linux-x64/bin/kilo"),
        }
    }

    /// The instructions file the spec writes: the agent's user-level one,
    /// in the conversation's home, for the specs the bridge ships.
    fn instructions_file(self) -> &'static str {
        match self {
            Agent::ClaudeAcp => "CLAUDE.md",
            Agent::Kimi => ".langbot/home/.kimi-code/AGENTS.md",
            Agent::Opencode => ".langbot/home/.config/opencode/AGENTS.md",
            Agent::Kilo => ".langbot/home/.config/kilo/AGENTS.md",
            Agent::Cline => ".langbot/home/.cline/rules/langbot.md",
        }
    }
}

/// A CLI pinned as its linux x64 build: `program` in tests/clis.
fn platform_build(name: &str, program: &str) -> std::path::PathBuf {
    let path = common::cli_dir().join("node_modules").join(program);
    assert!(
        path.exists(),
        "{name} is not installed at {}: run `scripts/test` (npm ci in tests/clis; \
         the pinned build is linux x64)",
        path.display()
    );
    path
}

/// A folder holding the spec (for an agent that is not built in), and a
/// home for the agent.
struct Machine {
    agent: Agent,
    adapters: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Machine {
    fn new(agent: Agent) -> Machine {
        let adapters = common::tempdir();
        if agent == Agent::ClaudeAcp {
            std::fs::write(adapters.path().join("claude-acp.yaml"), SPEC).unwrap();
        }
        let home = common::tempdir();
        // Claude's agent tells a session whose model is not Anthropic's own
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
        Machine {
            agent,
            adapters,
            home,
        }
    }

    fn env(&self, model_url: &str) -> Vec<(&'static str, String)> {
        let path = std::env::var("PATH").unwrap_or_default();
        let home = self.home.path().display().to_string();
        match self.agent {
            Agent::ClaudeAcp => vec![
                ("PATH", path),
                ("HOME", home),
                (
                    "CLAUDE_CONFIG_DIR",
                    self.home.path().join(".claude").display().to_string(),
                ),
                ("ANTHROPIC_BASE_URL", model_url.to_string()),
                ("ANTHROPIC_API_KEY", "test-key".to_string()),
                ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
            ],
            Agent::Kimi => {
                let node = common::cli_dir().join("node_modules/node/bin");
                vec![
                    ("PATH", format!("{}:{path}", node.display())),
                    ("HOME", home.clone()),
                    ("KIMI_CODE_HOME", format!("{home}/.kimi")),
                    ("KIMI_MODEL_NAME", "fake-model".to_string()),
                    ("KIMI_MODEL_API_KEY", "test-key".to_string()),
                    ("KIMI_MODEL_PROVIDER_TYPE", "anthropic".to_string()),
                    ("KIMI_MODEL_BASE_URL", model_url.to_string()),
                ]
            }
            Agent::Opencode => {
                let config = json!({
                    "$schema": "https://opencode.ai/config.json",
                    "model": "anthropic/claude-sonnet-4-5",
                    "provider": {"anthropic": {"options": {"baseURL": format!("{model_url}/v1")}}},
                    "autoupdate": false,
                    "share": "disabled",
                });
                vec![
                    ("PATH", path),
                    ("HOME", home.clone()),
                    ("XDG_CONFIG_HOME", format!("{home}/.config")),
                    ("XDG_DATA_HOME", format!("{home}/.local/share")),
                    ("XDG_CACHE_HOME", format!("{home}/.cache")),
                    ("XDG_STATE_HOME", format!("{home}/.local/state")),
                    ("OPENCODE_CONFIG_CONTENT", config.to_string()),
                    ("ANTHROPIC_API_KEY", "test-key".to_string()),
                ]
            }
            // Its endpoint as the operator gives it: the bridge writes it
            // into Cline's provider settings.
            Agent::Cline => vec![
                ("PATH", path),
                ("HOME", home),
                ("CLINE_BASE_URL", format!("{model_url}/v1")),
                ("CLINE_API_KEY", "test-key".to_string()),
                ("CLINE_MODEL", "fake-model".to_string()),
            ],
            Agent::Kilo => {
                // Only the Anthropic provider: Kilo's own gateway, which
                // it would otherwise list models of, is off.
                let config = json!({
                    "model": "anthropic/claude-sonnet-4-5",
                    "enabled_providers": ["anthropic"],
                    "provider": {"anthropic": {"options": {"baseURL": format!("{model_url}/v1")}}},
                    "autoupdate": false,
                    "share": "disabled",
                });
                vec![
                    ("PATH", path),
                    ("HOME", home.clone()),
                    ("XDG_CONFIG_HOME", format!("{home}/.config")),
                    ("XDG_DATA_HOME", format!("{home}/.local/share")),
                    ("XDG_CACHE_HOME", format!("{home}/.cache")),
                    ("XDG_STATE_HOME", format!("{home}/.local/state")),
                    ("KILO_CONFIG_CONTENT", config.to_string()),
                    ("ANTHROPIC_API_KEY", "test-key".to_string()),
                ]
            }
        }
    }

    async fn serve(&self, model_url: &str) -> ServeProcess {
        self.serve_with(model_url, "").await
    }

    /// `serve` with `extra` in its bridge.yaml.
    async fn serve_with(&self, model_url: &str, extra: &str) -> ServeProcess {
        let data = Arc::new(common::tempdir());
        seed_decision(data.path(), CONVERSATION).await;
        let config = format!(
            "adapters: {}\nharness_binaries:\n  {}: {}\nshutdown_grace_seconds: 5\n{extra}",
            self.adapters.path().display(),
            self.agent.name(),
            self.agent.binary().display()
        );
        ServeProcess::spawn(data, &config, &self.env(model_url)).await
    }

    fn turn(&self, text: &str, run_id: &str) -> Value {
        json!({"conversation": CONVERSATION, "text": text, "run_id": run_id, "harness": self.agent.name()})
    }
}

/// The fake model an agent is pointed at: the Messages API, or for Cline
/// an OpenAI-compatible one (chat completions), scripted alike.
struct Model {
    url: String,
    /// Every request it got.
    requests: Arc<std::sync::Mutex<Vec<Value>>>,
    /// Requests it left hanging (their prompt held the `hang_on` word).
    hanging: Arc<std::sync::atomic::AtomicUsize>,
    /// The Messages API's own records (the keys it heard, the tokens it
    /// reported); `None` for chat completions.
    messages: Option<common::anthropic::Fake>,
}

impl Model {
    async fn start(agent: Agent, hang_on: Option<&str>) -> Model {
        if agent == Agent::Cline {
            let (url, fake) = common::wire::fake_model(common::wire::Wire::Chat, hang_on).await;
            return Model {
                url,
                requests: fake.requests,
                hanging: fake.hanging,
                messages: None,
            };
        }
        let (url, fake) = match hang_on {
            Some(word) => fake_model_hanging_on(word).await,
            None => fake_model(false).await,
        };
        Model {
            url,
            requests: fake.requests.clone(),
            hanging: fake.hanging.clone(),
            messages: Some(fake),
        }
    }
}

fn terminal(results: &[Value]) -> &Value {
    results.last().expect("a terminal result")
}

fn session(results: &[Value]) -> &Value {
    let done = terminal(results);
    assert_eq!(done["type"], "run.completed", "{results:?}");
    &done["data"]["message"]["metadata"]["session"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn an_acp_agent_added_by_yaml_serves_a_conversation_live() {
    live_conversation(Agent::ClaudeAcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn kimi_serves_a_conversation_live_over_acp() {
    live_conversation(Agent::Kimi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn opencode_serves_a_conversation_live_over_acp() {
    live_conversation(Agent::Opencode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn kilo_serves_a_conversation_live_over_acp() {
    live_conversation(Agent::Kilo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cline_serves_a_conversation_live_over_acp() {
    live_conversation(Agent::Cline).await;
}

/// Two turns of one conversation in one agent process: deltas, the
/// bridge's history tool answered from the store, the second turn
/// carrying the first, the instructions the same both turns.
async fn live_conversation(agent: Agent) {
    let fake = Model::start(agent, None).await;
    let model_url = fake.url.clone();
    let machine = Machine::new(agent);
    let mut server = machine.serve(&model_url).await;

    // `serve` offers the agent to hosts with the built-in harnesses.
    let runners = server.get_json("/v1/runners").await;
    assert!(
        runners["runners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["runner_name"] == agent.name()),
        "{runners}"
    );

    let timed = server.timed_results(machine.turn(ASK, "acp-1")).await;
    // The answer streamed as the model wrote it: the fake model pauses
    // after the answer's text, and its delta came that long before the end.
    let answer_delta = timed
        .iter()
        .find(|(_, r)| r["type"] == "message.delta" && r.to_string().contains(ANSWER))
        .map(|(at, _)| *at);
    let (end_at, _) = timed.last().expect("results").clone();
    let first: Vec<Value> = timed.into_iter().map(|(_, r)| r).collect();
    let answer_delta = answer_delta.unwrap_or_else(|| panic!("the answer as a delta: {first:?}"));
    assert!(
        end_at >= answer_delta + common::anthropic::PAUSE / 2,
        "the answer's delta came only with the end ({answer_delta:?}, end {end_at:?})"
    );
    // The turn's tokens: counted by the gateway its model calls passed,
    // for every agent (Kimi itself reports only how full its context is).
    let usage = &first.last().expect("results")["usage"];
    assert!(usage["total_tokens"].as_u64().unwrap_or(0) >= 17, "{usage}");
    let kinds: Vec<&str> = first.iter().filter_map(|r| r["type"].as_str()).collect();
    let delta = kinds.iter().position(|k| *k == "message.delta");
    let call = kinds.iter().position(|k| *k == "tool.call.started");
    assert!(
        delta.is_some() && call.is_some(),
        "deltas and the tool call: {first:?}\nthe model's last request: {}",
        fake.requests
            .lock()
            .unwrap()
            .last()
            .map(|r| r["messages"].to_string())
            .unwrap_or_default()
    );
    assert!(
        first.iter().any(|r| r.to_string().contains(ANSWER)),
        "{first:?}"
    );
    // The history tool answered from the store: the model saw the
    // transcript's decision in the tool result.
    let requests = fake.requests.lock().unwrap().clone();
    let log: Vec<String> = server
        .log
        .lock()
        .unwrap()
        .iter()
        .rev()
        .take(30)
        .cloned()
        .collect();
    common::assert_history_reached_model(&requests, format!("{log:?}"));
    let one = session(&first).clone();
    let workspace = common::workspace_of(&first);
    let instructions = std::fs::read_to_string(workspace.join(agent.instructions_file()))
        .expect("the instructions file in the workspace");
    assert!(!instructions.trim().is_empty());
    if agent != Agent::ClaudeAcp {
        // Its user-level file: nothing where a repository's own would be.
        assert!(!workspace.join("AGENTS.md").exists());
    }

    if agent == Agent::ClaudeAcp {
        // The agent's sessions stay in the conversation's own home; the
        // operator's global config, which Claude rewrites every start, is
        // not carried in (it would write through a link) and stays as the
        // operator left it.
        assert!(workspace.join(".langbot/home/.claude/projects").is_dir());
        assert!(!machine.home.path().join(".claude/projects").exists());
        let operator = machine.home.path().join(".claude/.claude.json");
        let text = std::fs::read_to_string(operator).unwrap_or_default();
        assert!(!text.contains("firstStartTime"), "{text}");
    }

    let asked = fake.requests.lock().unwrap().len();
    let second = server.results(machine.turn(FOLLOW_UP, "acp-2")).await;
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
    // The stable instructions (the file the bridge wrote) reach the model
    // byte for byte in both turns.
    let main =
        |r: &&Value| r["stream"] == true && r["tools"].as_array().is_some_and(|t| !t.is_empty());
    let before = requests[..asked]
        .iter()
        .find(main)
        .expect("a turn-1 request");
    let after = later.iter().find(main).expect("a turn-2 request");
    let escaped = serde_json::to_string(instructions.trim()).unwrap();
    let escaped = &escaped[1..escaped.len() - 1];
    assert!(
        escaped.contains("You are a code agent answering messages in an IM conversation"),
        "{instructions}"
    );
    for (turn, request) in [(1, before), (2, after)] {
        assert!(
            request.to_string().contains(escaped),
            "turn {turn}'s request does not carry the instructions file"
        );
    }

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cancel_interrupts_an_acp_turn_and_the_session_goes_on() {
    cancel_keeps_the_session(Agent::ClaudeAcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cancel_interrupts_a_kimi_turn_and_the_session_goes_on() {
    cancel_keeps_the_session(Agent::Kimi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cancel_interrupts_an_opencode_turn_and_the_session_goes_on() {
    cancel_keeps_the_session(Agent::Opencode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cancel_interrupts_a_kilo_turn_and_the_session_goes_on() {
    cancel_keeps_the_session(Agent::Kilo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cancel_interrupts_a_cline_turn_and_the_session_goes_on() {
    cancel_keeps_the_session(Agent::Cline).await;
}

/// Cancel mid-turn: `session/cancel`, the turn ends `cancelled`, the same
/// process serves the next turn with the earlier context; shutdown
/// leaves nothing.
async fn cancel_keeps_the_session(agent: Agent) {
    let fake = Model::start(agent, Some("HANG")).await;
    let model_url = fake.url.clone();
    let machine = Machine::new(agent);
    let mut server = machine.serve(&model_url).await;
    let first = server
        .results(machine.turn("Remember the word heliotrope.", "acp-c1"))
        .await;
    let pid = session(&first)["process"]["pid"].clone();

    let asked = fake.requests.lock().unwrap().len();
    let hung = server.spawn_results(machine.turn("Please HANG", "acp-c2"));
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

    let asked = fake.requests.lock().unwrap().len();
    let third = server
        .results(machine.turn("What was the word?", "acp-c3"))
        .await;
    assert_eq!(session(&third)["process"]["pid"], pid, "{third:?}");
    // (The agent may also ask the model for a title: the turn's own
    // request is the one with the conversation.)
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests[asked..]
            .iter()
            .any(|r| r["messages"].to_string().contains("heliotrope")),
        "the session lost turn 1"
    );

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

/// Under `approvals: chat` the agent's permission request for its shell
/// tool becomes the approval card; the answer through `serve` lets the
/// paused call go on in the same agent process, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn an_acp_agents_permission_request_is_answered_in_the_chat() {
    use common::anthropic::{BASH_DONE, fake_model_running};
    let (model_url, fake) = fake_model_running("touch approved-ran").await;
    let machine = Machine::new(Agent::ClaudeAcp);
    let mut server = machine
        .serve_with(&model_url, "default_config:\n  approvals: chat\n")
        .await;
    let asked = server
        .results(machine.turn("Please make the file", "acp-a1"))
        .await;
    let request = common::asked_card(&asked);
    assert_eq!(request["kind"], "confirmation", "{request}");
    assert!(
        request.to_string().contains("touch approved-ran"),
        "{request}"
    );
    let workspace = common::workspace_of(&asked);
    assert!(!workspace.join("approved-ran").exists(), "ran unasked");
    let pid = session(&asked)["process"]["pid"].clone();
    let before = fake.requests.lock().unwrap().len();

    let approved = server
        .results(json!({
            "conversation": CONVERSATION,
            "run_id": "acp-a2",
            "harness": "claude-acp",
            "interaction": {"interaction_id": request["interaction_id"], "action_id": "approve"},
        }))
        .await;
    assert_eq!(session(&approved)["process"]["pid"], pid, "{approved:?}");
    assert!(workspace.join("approved-ran").exists(), "{approved:?}");
    assert!(
        approved.iter().any(|r| r.to_string().contains(BASH_DONE)),
        "{approved:?}"
    );
    // The paused call went on: the model got the call's result, and the
    // turn was never replayed from its prompt. (A request of the agent's
    // own may come too: it asks the model for the session's title.)
    let after: Vec<Value> = fake.requests.lock().unwrap()[before..].to_vec();
    let summary: Vec<String> = after
        .iter()
        .map(|r| r["messages"].to_string().chars().take(300).collect())
        .collect();
    assert!(
        after
            .iter()
            .any(|r| r["messages"].to_string().contains("tool_result")),
        "{summary:?}"
    );
    let replayed = after.iter().any(|r| {
        let messages = r["messages"].to_string();
        let titling = messages.contains("Write the title");
        !titling && messages.contains("Please make the file") && !messages.contains("tool_result")
    });
    assert!(!replayed, "the turn started over: {summary:?}");

    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn run_drives_an_acp_agent_for_one_turn_and_resumes_it_the_next() {
    run_turns(Agent::ClaudeAcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn run_drives_kimi_for_one_turn_and_resumes_it_the_next() {
    run_turns(Agent::Kimi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn run_drives_opencode_for_one_turn_and_resumes_it_the_next() {
    run_turns(Agent::Opencode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn run_drives_kilo_for_one_turn_and_resumes_it_the_next() {
    run_turns(Agent::Kilo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn run_drives_cline_for_one_turn_and_resumes_it_the_next() {
    run_turns(Agent::Cline).await;
}

/// Kilo's shell tool runs inside the cage: a file it writes in the
/// workspace is there; a file it writes in a folder outside, one the test
/// itself can write, is refused by the kernel and never appears, and the
/// refusal is what the model is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn kilos_shell_writes_in_its_workspace_and_nowhere_else() {
    use common::anthropic::{CALLS_DONE, fake_model_calling};
    let outside = common::tempdir();
    std::fs::write(outside.path().join("probe"), "the test may write here").unwrap();
    let escaped = outside.path().join("escaped");
    let bash = |command: String| {
        (
            "bash".to_string(),
            json!({"command": command, "description": "Write a file"}),
        )
    };
    let (model_url, fake) = fake_model_calling(vec![
        bash("echo made > inside".to_string()),
        bash(format!("echo made > {}", escaped.display())),
    ])
    .await;
    let machine = Machine::new(Agent::Kilo);
    let data = common::tempdir();
    let bin = Agent::Kilo.binary().display().to_string();
    let args = [
        "--harness",
        "kilo",
        "--bin",
        bin.as_str(),
        "--conversation",
        "kilo-cage",
        "--text",
        "Write the two files",
    ];
    let turn = bridge_run(data.path(), &args, &machine.env(&model_url)).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.completed", "{end}\n{}", turn.stderr);
    assert!(end.to_string().contains(CALLS_DONE), "{end}");
    let workspace = common::turn_workspace(&turn);
    assert_eq!(
        std::fs::read_to_string(workspace.join("inside"))
            .ok()
            .as_deref(),
        Some("made\n"),
        "the write inside the workspace"
    );
    assert!(!escaped.exists(), "Kilo wrote outside its workspace");
    // The shell said why: the kernel refused the write.
    let requests = fake.requests.lock().unwrap().clone();
    let told = requests.iter().any(|r| {
        let messages = r["messages"].to_string();
        messages.contains("escaped") && messages.contains("ermission denied")
    });
    assert!(
        told,
        "the model was not told of the refusal: {:?}",
        requests.last().map(|r| r["messages"].to_string())
    );
    assert!(processes_under(&data.path().join("workspaces")).is_empty());
}

/// `run`: one turn in an agent process stopped after it, the next turn
/// resuming the stored session in a new one; a missing binary is
/// `harness_not_found` with the spec's install hint; a turn past its
/// deadline leaves no process.
async fn run_turns(agent: Agent) {
    let fake = Model::start(agent, Some("HANG")).await;
    let model_url = fake.url.clone();
    let machine = Machine::new(agent);
    let data = common::tempdir();
    seed_decision(data.path(), CONVERSATION).await;
    let adapters = machine.adapters.path().display().to_string();
    let acp = agent.binary().display().to_string();
    let args = |text: &'static str| {
        vec![
            "--adapters".to_string(),
            adapters.clone(),
            "--harness".into(),
            agent.name().into(),
            "--bin".into(),
            acp.clone(),
            "--conversation".into(),
            CONVERSATION.into(),
            "--text".into(),
            text.into(),
        ]
    };
    let env = machine.env(&model_url);
    let first_args = args("Remember the word heliotrope.");
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let first = bridge_run(data.path(), &first_args, &env).await;
    assert_eq!(
        first.terminal()["type"],
        "run.completed",
        "{}\n{}",
        first.terminal(),
        first.stderr
    );
    let root = data.path().join("workspaces");
    assert!(processes_under(&root).is_empty(), "the agent outlived run");

    let asked = fake.requests.lock().unwrap().len();
    let second_args = args("What was the word?");
    let second_args: Vec<&str> = second_args.iter().map(String::as_str).collect();
    let second = bridge_run(data.path(), &second_args, &env).await;
    let end = second.terminal();
    assert_eq!(end["type"], "run.completed", "{}", second.stderr);
    assert_eq!(
        end["data"]["message"]["metadata"]["session"]["resumed"], true,
        "{end}"
    );
    // (An agent may make a request of its own besides the turn's, a title
    // say: the turn's is the one that carries the history.)
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests[asked..]
            .iter()
            .any(|r| r["messages"].to_string().contains("heliotrope")),
        "not resumed: {:?}",
        requests[asked..]
            .iter()
            .map(|r| r["messages"].to_string())
            .collect::<Vec<_>>()
    );
    // The stable instructions (the file the bridge wrote) reach the model
    // byte for byte in both turns, the second in a new agent process that
    // resumed or loaded the session.
    common::assert_instructions_in_both_turns(
        &common::turn_workspace(&first),
        agent.instructions_file(),
        &requests,
        asked,
    );
    assert!(processes_under(&root).is_empty());

    // No such program: the spec's hint, in the failure.
    let missing = vec![
        "--adapters",
        adapters.as_str(),
        "--harness",
        agent.name(),
        "--bin",
        "/nonexistent/agent",
        "--conversation",
        CONVERSATION,
        "--text",
        "hi",
    ];
    let failed = bridge_run(data.path(), &missing, &env).await;
    let end = failed.terminal();
    assert_eq!(end["data"]["code"], "harness_not_found", "{end}");
    let hint = match agent {
        Agent::ClaudeAcp => "npm install -g @agentclientprotocol/claude-agent-acp",
        Agent::Kimi => "npm install -g @moonshot-ai/kimi-code",
        Agent::Opencode => "npm install -g opencode-ai",
        Agent::Kilo => "npm install -g @kilocode/cli",
        Agent::Cline => "npm install -g cline",
    };
    assert!(
        end["data"]["error"].as_str().unwrap_or("").contains(hint),
        "{end}"
    );

    // A turn the model never answers: stopped at its deadline, the agent
    // and all it started gone.
    let mut hang_args = args("Please HANG");
    hang_args.extend(["--timeout".to_string(), "45".to_string()]);
    let hang_args: Vec<&str> = hang_args.iter().map(String::as_str).collect();
    let hung = bridge_run(data.path(), &hang_args, &env).await;
    let end = hung.terminal();
    assert_eq!(end["data"]["code"], "deadline_exceeded", "{end}");
    assert!(fake.hanging.load(std::sync::atomic::Ordering::SeqCst) > 0);
    assert!(
        processes_under(&root).is_empty(),
        "the agent outlived its deadline"
    );

    // Ctrl-C while the model works: `cancelled`, exit 130, the agent and
    // all it started gone.
    let hanging_before = fake.hanging.load(std::sync::atomic::Ordering::SeqCst);
    let child = common::spawn_bridge_run(data.path(), &args_of(&args("Please HANG")), &env);
    let hanging = fake.hanging.clone();
    common::assert_ctrl_c_cancels(child, &root, move || {
        hanging.load(std::sync::atomic::Ordering::SeqCst) > hanging_before
    })
    .await;
}

/// `run` ends an ACP agent's process by closing its input once the turn
/// is over: an agent that exits at the end of its input (where Kimi saves
/// its session) ends within a fraction of a second and is never
/// signalled. (A scripted agent: it notes when it answered, when its input
/// ended, and any SIGTERM.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_closes_an_acp_agents_input_and_never_signals_it() {
    let tools = common::tempdir_for_harnesses();
    let agent = common::scripted::install_acp(tools.path());
    let adapters = tools.path().join("adapters");
    let log = tools.path().join("agent.log");
    let data = common::tempdir();
    let args = [
        "--adapters",
        adapters.to_str().unwrap(),
        "--harness",
        "acpscript",
        "--bin",
        agent.to_str().unwrap(),
        "--conversation",
        "acp-eof",
        "--text",
        "Hello",
        // The agent's log is the test's, beside it: the operator lets
        // every harness write there.
        "--read-write",
        tools.path().to_str().unwrap(),
    ];
    let env = [("ACPSCRIPT_LOG", log.display().to_string())];
    let turn = bridge_run(data.path(), &args, &env).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.completed", "{}", turn.stderr);
    assert_eq!(end["data"]["message"]["content"], "Done.", "{end}");

    let log = std::fs::read_to_string(&log).unwrap();
    let at = |what: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|t| t.trim().parse::<f64>().ok())
    };
    assert!(!log.contains("term"), "the agent was signalled: {log}");
    let answered = at("answered ").expect("the agent answered");
    let eof = at("eof ").unwrap_or_else(|| panic!("the agent never saw end of input: {log}"));
    assert!(
        eof - answered < 1.0,
        "end of input came {:.2} s after the turn: {log}",
        eof - answered
    );
}

/// What a harness needs to start, the cage lets it read: an agent its
/// spec runs as `sh SCRIPT` (the script in a folder of its own, on no
/// PATH) answers its turn; the same script given as the program from
/// inside the bridge's data folder, which holds the workspaces, is
/// refused before it starts, in words naming the setting, never as a
/// bare `Permission denied`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_harness_needs_to_start_is_readable_or_refused_in_words() {
    let tools = common::tempdir_for_harnesses();
    let script = common::scripted::install_acp(tools.path());
    let agent = tools.path().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    let named = agent.join("acpscript");
    std::fs::rename(&script, &named).unwrap();
    let spec = std::fs::read_to_string(tools.path().join("adapters/acpscript.yaml"))
        .unwrap()
        .replace("binary: acpscript", "binary: sh")
        .replace("  argv: []", &format!("  argv: [{}]", named.display()));
    std::fs::write(tools.path().join("adapters/acpscript.yaml"), spec).unwrap();
    let adapters = tools.path().join("adapters");
    let data = common::tempdir();
    let run = |program: Option<String>| {
        let mut args = vec![
            "--adapters".to_string(),
            adapters.display().to_string(),
            "--harness".into(),
            "acpscript".into(),
            "--conversation".into(),
            "acp-start".into(),
            "--text".into(),
            "Hello".into(),
        ];
        if let Some(program) = program {
            args.extend(["--bin".to_string(), program]);
        }
        let data = data.path().to_path_buf();
        async move { bridge_run(&data, &args_of(&args), &[]).await }
    };
    let turn = run(None).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.completed", "{}", turn.stderr);
    assert_eq!(end["data"]["message"]["content"], "Done.", "{end}");

    let inside = data.path().join("acpscript");
    std::fs::copy(&named, &inside).unwrap();
    let turn = run(Some(inside.display().to_string())).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.failed", "{}", turn.stderr);
    let said = end["data"]["error"].as_str().unwrap();
    assert!(
        said.contains("cannot start in its cage, which would not let it read `acpscript`")
            && said.contains("`harness_binaries`"),
        "{said}"
    );
    assert!(
        turn.stderr.contains(&format!(
            "{}, which holds the conversations' workspaces",
            data.path().display()
        )),
        "{}",
        turn.stderr
    );
}

fn args_of(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A picture sent with a turn reaches an agent that takes images as an
/// image of the prompt (ACP `image` content), and the model sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn an_image_sent_with_a_turn_reaches_the_agents_model() {
    const DOT: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let (model_url, fake) = fake_model(false).await;
    let machine = Machine::new(Agent::ClaudeAcp);
    let data = common::tempdir();
    let mut ctx = serde_json::to_value(common::context("acp-img-1", CONVERSATION)).unwrap();
    ctx["input"]["text"] = json!("What is in the picture?");
    ctx["input"]["attachments"] =
        json!([{"type": "image", "mime_type": "image/png", "name": "dot.png", "content": DOT}]);
    let file = data.path().join("turn.json");
    std::fs::write(&file, ctx.to_string()).unwrap();
    let adapters = machine.adapters.path().display().to_string();
    let bin = Agent::ClaudeAcp.binary().display().to_string();
    let args = [
        "--adapters",
        adapters.as_str(),
        "--harness",
        "claude-acp",
        "--bin",
        bin.as_str(),
        "--context",
        file.to_str().unwrap(),
    ];
    let turn = bridge_run(data.path(), &args, &machine.env(&model_url)).await;
    assert_eq!(turn.terminal()["type"], "run.completed", "{}", turn.stderr);
    let requests = fake.requests.lock().unwrap().clone();
    let saw = requests.iter().any(|r| {
        r["messages"].as_array().into_iter().flatten().any(|m| {
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|b| b["type"] == "image" && b["source"]["data"] == DOT)
        })
    });
    assert!(saw, "no request carried the picture: {requests:?}");
    assert!(processes_under(&data.path().join("workspaces")).is_empty());
}

/// Codex through its ACP adapter (`examples/adapters/codex-acp.yaml`, by
/// that file alone), against the fake Responses API: a turn whose model
/// calls the bridge's `history_page` (an HTTP server given in
/// `session/new`) and gets the store's transcript, streamed; the next
/// turn, in a new process, resumes the session by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn codex_runs_through_its_acp_adapter_added_by_yaml() {
    use common::openai::{ANSWER, ASK, FOLLOW_UP, SECOND_ANSWER, codex_home, fake_model};
    let (model_url, fake) = fake_model(false).await;
    let adapters = common::tempdir();
    std::fs::write(
        adapters.path().join("codex-acp.yaml"),
        include_str!("../examples/adapters/codex-acp.yaml"),
    )
    .unwrap();
    let home = common::tempdir();
    let codex = home.path().join(".codex");
    std::fs::create_dir_all(&codex).unwrap();
    codex_home(&codex, &model_url);
    let env = vec![
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        ("CODEX_HOME", codex.display().to_string()),
        ("OPENAI_API_KEY", "test-key".to_string()),
    ];
    let data = common::tempdir();
    seed_decision(data.path(), CONVERSATION).await;
    let adapters = adapters.path().display().to_string();
    let bin = common::cli("codex-acp").display().to_string();
    let turn = |text: &'static str| {
        vec![
            "--adapters".to_string(),
            adapters.clone(),
            "--harness".into(),
            "codex-acp".into(),
            "--bin".into(),
            bin.clone(),
            "--conversation".into(),
            CONVERSATION.into(),
            "--text".into(),
            text.into(),
        ]
    };
    let args = turn(ASK);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = bridge_run(data.path(), &args, &env).await;
    let end = first.terminal();
    assert_eq!(end["type"], "run.completed", "{}", first.stderr);
    let kinds = first.kinds();
    assert!(kinds.iter().any(|k| k == "message.delta"), "{kinds:?}");
    let done = first.first("tool.call.completed").expect("the tool call");
    assert!(done.to_string().contains(DECISION), "{done}");
    assert!(end.to_string().contains(ANSWER), "{end}");
    let root = data.path().join("workspaces");
    assert!(processes_under(&root).is_empty(), "the agent outlived run");
    let asked = fake.requests.lock().unwrap().len();

    let args = turn(FOLLOW_UP);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let second = bridge_run(data.path(), &args, &env).await;
    let end = second.terminal();
    assert_eq!(end["type"], "run.completed", "{}", second.stderr);
    assert_eq!(
        end["data"]["message"]["metadata"]["session"]["resumed"], true,
        "{end}"
    );
    assert!(end.to_string().contains(SECOND_ANSWER), "{end}");
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests[asked..]
            .iter()
            .any(|r| r["input"].to_string().contains(ANSWER)),
        "turn 2 did not carry turn 1"
    );
    assert!(processes_under(&root).is_empty());
}

/// In a network of its own (`--network isolated`) an agent answers a turn
/// with the bridge's history tool, reached at its door, and its model
/// reached only through the gateway: what the model hears is the
/// operator's key, never the stand-in the agent held.
async fn a_turn_behind_the_door(agent: Agent) {
    let fake = Model::start(agent, None).await;
    let model_url = fake.url.clone();
    let machine = Machine::new(agent);
    let data = common::tempdir();
    seed_decision(data.path(), CONVERSATION).await;
    let adapters = machine.adapters.path().display().to_string();
    let bin = agent.binary().display().to_string();
    let args = [
        "--adapters",
        adapters.as_str(),
        "--harness",
        agent.name(),
        "--bin",
        bin.as_str(),
        "--conversation",
        CONVERSATION,
        "--network",
        "isolated",
        "--text",
        ASK,
    ];
    let turn = bridge_run(data.path(), &args, &machine.env(&model_url)).await;
    let end = turn.terminal();
    assert_eq!(end["type"], "run.completed", "{end}\n{}", turn.stderr);
    assert!(end.to_string().contains(ANSWER), "{end}");
    let requests = fake.requests.lock().unwrap().clone();
    common::assert_history_reached_model(&requests, &turn.stderr);
    let usage = &end["usage"];
    assert_eq!(usage["model_calls"], requests.len(), "{usage}");
    match &fake.messages {
        Some(messages) => {
            let keys = messages.keys.lock().unwrap().clone();
            assert!(!keys.is_empty(), "no key reached the model");
            assert!(
                keys.iter()
                    .all(|k| k.ends_with("test-key") && !k.contains("hb-")),
                "the model heard {keys:?}"
            );
            // The turn's usage is what the model's answers said, summed
            // by the gateway: exact whether the agent reports usage (Kimi
            // does not).
            let (input, output) = *messages.reported.lock().unwrap();
            assert_eq!(usage["prompt_tokens"], input, "{usage}");
            assert_eq!(usage["completion_tokens"], output, "{usage}");
        }
        None => {
            // Cline's endpoint is a file it reads: the bridge wrote the
            // gateway there, and the key, which it reads from its
            // environment (a stand-in there), is in no file of its home.
            let workspace = common::turn_workspace(&turn);
            let settings = workspace.join(".langbot/home/.cline/data/settings");
            let providers = std::fs::read_to_string(settings.join("providers.json")).unwrap();
            assert!(providers.contains("/model/openai"), "{providers}");
            assert!(!providers.contains(&model_url), "{providers}");
            for entry in walkdir::WalkDir::new(workspace.join(".langbot/home")) {
                let entry = entry.unwrap();
                if entry.file_type().is_file() {
                    let text = std::fs::read(entry.path()).unwrap_or_default();
                    assert!(
                        !String::from_utf8_lossy(&text).contains("test-key"),
                        "the key in {}",
                        entry.path().display()
                    );
                }
            }
            assert_eq!(usage["prompt_tokens"], 10 * requests.len(), "{usage}");
        }
    }
    assert!(processes_under(&data.path().join("workspaces")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn an_acp_agent_added_by_yaml_reaches_its_model_through_the_gateway() {
    a_turn_behind_the_door(Agent::ClaudeAcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn kimi_reaches_its_model_through_the_gateway() {
    a_turn_behind_the_door(Agent::Kimi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn opencode_reaches_its_model_through_the_gateway() {
    a_turn_behind_the_door(Agent::Opencode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn kilo_reaches_its_model_through_the_gateway() {
    a_turn_behind_the_door(Agent::Kilo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned ACP agents and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn cline_reaches_its_model_through_the_gateway() {
    a_turn_behind_the_door(Agent::Cline).await;
}
