//! The LangBot plugin, for real but without LangBot: a stand-in runtime
//! (`tests/interop/fake_runtime.py`) starts the real plugin worker of the
//! pinned `langbot-plugin` SDK over stdio, as LangBot's runtime does; the
//! plugin relays to the real bridge, which runs the real Claude Code CLI
//! against a fake Messages API. Two turns of one conversation: the first
//! stores the session pointer in the host's state; the second resumes it
//! and reads the host's transcript through the history tool (a host call
//! of a later run: `ctx.api` must be used inside that run's invocation).
//! The plugin runs from a read-only copy whose bundled bridge has lost its
//! exec bit, as LangBot unpacks packages.
//! An operator's agent (an ACP spec) rides in the package with a runner
//! generated for it, and runs through the same worker.

use harness_bridge_testkit as common;

use std::path::PathBuf;
use std::time::Duration;

use common::anthropic::{ANSWER, ASK, SECOND_ANSWER, fake_model};
use serde_json::{Value, json};

const HOST_ONLY: &str = "HOST TRANSCRIPT: the launch code is tulip";
const FIRST: &str = "Remember this: the codeword is tulip.";

/// A copy of the plugin as LangBot unpacks it: read-only, with the bridge
/// bundled (compressed) in `bin/` and no exec bits.
fn unpacked_plugin(dir: &std::path::Path) -> PathBuf {
    unpacked_plugin_with(dir, None)
}

/// [`unpacked_plugin`], built with an operator's specs (`adapters`) as
/// `scripts/build-langbot-plugin --adapters DIR` builds it.
fn unpacked_plugin_with(dir: &std::path::Path, adapters: Option<&std::path::Path>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let plugin = common::copy_plugin(dir);
    if let Some(adapters) = adapters {
        let made = common::langbot_runners(adapters, &plugin);
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    std::fs::create_dir_all(plugin.join("bin")).unwrap();
    // Bundled as the package script bundles it: gzip-compressed.
    let packed = std::process::Command::new("gzip")
        .args(["-1", "-c"])
        .arg(common::bridge_bin())
        .output()
        .expect("gzip runs");
    assert!(packed.status.success(), "gzip failed");
    std::fs::write(plugin.join("bin/harness-bridge.gz"), packed.stdout).unwrap();
    for entry in walkdir::WalkDir::new(&plugin).contents_first(true) {
        let entry = entry.unwrap();
        let mode = if entry.file_type().is_dir() {
            0o555
        } else {
            0o444
        };
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    plugin
}

fn context(run_id: &str, text: &str, config: &Value) -> Value {
    json!({
        "run_id": run_id,
        "trigger": {"type": "message.received", "source": "platform"},
        "event": {"event_id": format!("ev-{run_id}"), "event_type": "message.received", "source": "platform"},
        "conversation": {"conversation_id": "group-42", "bot_id": "bot-1", "workspace_id": "ws-1"},
        "actor": {"actor_type": "user", "actor_id": "user-1", "actor_name": "Ada"},
        "input": {"text": text},
        "delivery": {"surface": "platform", "supports_streaming": true},
        "resources": {"storage": {"plugin_storage": true}},
        "context": {"available_apis": {"history_page": true, "history_search": true, "state": true}},
        "runtime": {"deadline_at": null},
        "config": config,
    })
}

/// The harness's history call went to the host (`ctx.api`), and the
/// host's transcript reached the model.
fn assert_history_reached_the_host(events: &Events, fake: &common::anthropic::Fake) {
    assert!(
        events
            .of("host_action")
            .any(|e| e["action"] == "history_page"),
        "the history call did not reach the host"
    );
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r.to_string().contains(HOST_ONLY)),
        "the model never saw the host's transcript"
    );
}

/// Run `scenario` in the stand-in runtime (`tests/interop/fake_runtime.py`)
/// within `secs`: the events it printed, and its stderr.
async fn run_scenario(dir: &std::path::Path, scenario: &Value, secs: u64) -> (Events, String) {
    let file = dir.join("scenario.json");
    std::fs::write(&file, scenario.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/fake_runtime.py");
    let output = tokio::process::Command::new(common::sdk_python())
        .arg(&script)
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(secs), output)
        .await
        .expect("the fake runtime finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let events = Events(
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect(),
    );
    (events, stderr)
}

struct Events(Vec<Value>);

impl Events {
    fn of(&self, event: &str) -> impl Iterator<Item = &Value> {
        self.0.iter().filter(move |e| e["event"] == event)
    }

    fn results(&self, run_id: &str) -> Vec<&Value> {
        self.of("result")
            .filter(|e| e["run_id"] == run_id)
            .map(|e| &e["result"])
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier sdk+clis: needs the SDK venv (target/sdk-venv) and the pinned claude and claude-agent-acp (tests/clis); scripts/test runs it"]
async fn the_real_plugin_worker_relays_two_resumed_claude_turns() {
    let claude = common::cli("claude");
    let (model_url, fake) = fake_model(false).await;
    // A model that never answers, for a run LangBot cancels.
    let (stuck_url, stuck) = fake_model(true).await;
    let dir = common::tempdir();
    let workspaces = dir.path().join("bridge");
    let home = dir.path().join("home");
    let config = json!({
        "harness_path": claude,
        "api_key": "test-key",
        "base_url": model_url,
        "extra_env": format!(
            "HOME={home}\nCLAUDE_CONFIG_DIR={home}/.claude\nCLAUDE_CODE_MAX_RETRIES=0",
            home = home.display()
        ),
        "timeout": 120,
    });
    let mut stuck_config = config.clone();
    stuck_config["base_url"] = json!(stuck_url);
    let plugin_dir = unpacked_plugin(dir.path());
    let scenario = json!({
        "plugin_dir": plugin_dir,
        "plugin_config": {"workspace_root": workspaces},
        "watch_dir": workspaces,
        "transcript": [{
            "transcript_id": "t1", "event_id": "e0", "conversation_id": "group-42",
            "role": "user", "item_type": "message", "content": HOST_ONLY, "seq": 1,
        }],
        "runs": [
            {"runner_name": "claude-code", "context": context("lb-1", FIRST, &config)},
            {"runner_name": "claude-code", "context": context("lb-2", ASK, &config)},
            {"runner_name": "claude-code", "context": context("lb-3", "Still there?", &stuck_config), "cancel_after": 5},
        ],
    });
    let (events, stderr) = run_scenario(dir.path(), &scenario, 240).await;

    // Turn 1: streamed (LangBot reads `all_content`), a pointer stored.
    let first = events.results("lb-1");
    let kinds: Vec<&str> = first.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.last(), Some(&"run.completed"), "{kinds:?}\n{stderr}");
    let delta = first
        .iter()
        .find(|r| r["type"] == "message.delta")
        .expect("a streamed delta");
    assert_eq!(
        delta["data"]["chunk"]["all_content"], SECOND_ANSWER,
        "{delta}"
    );
    let done = events.of("done").next().expect("the runtime finished");
    let session = done["state"]["conversation:external.session_id"].clone();
    assert!(
        session.is_string(),
        "no pointer in the host's state: {done}"
    );

    // Turn 2: the host put the pointer into the context; the session goes
    // on, and the history tool is answered by the host through `ctx.api`.
    let second = events.results("lb-2");
    let last = second.last().expect("turn 2 results");
    assert_eq!(last["type"], "run.completed", "{last}");
    let tool = second
        .iter()
        .find(|r| r["type"] == "tool.call.completed")
        .expect("the history tool ran");
    assert!(
        tool["data"]["error"].is_null(),
        "the host call failed: {tool}"
    );
    assert_history_reached_the_host(&events, &fake);
    let requests = fake.requests.lock().unwrap().clone();
    let turn_2 = requests
        .iter()
        .find(|r| r["stream"] == true && r.to_string().contains(ASK))
        .expect("turn 2 reached the model");
    let seen = turn_2["messages"].to_string();
    assert!(seen.contains(FIRST), "turn 2 did not carry turn 1");
    assert!(second.iter().any(|r| r.to_string().contains(ANSWER)));
    let pointer = second
        .iter()
        .find(|r| r["type"] == "state.updated" && r["data"]["key"] == "external.session_id")
        .expect("state.updated");
    assert_eq!(pointer["data"]["value"], session);

    // Turn 3 hung at the model and LangBot cancelled it: the plugin told the
    // bridge, which interrupted the turn. The conversation's live harness
    // (started anew: turn 3's binding names another model endpoint, so the
    // first one was replaced) stays for its next turn, alone.
    assert!(
        !stuck.requests.lock().unwrap().is_empty(),
        "turn 3 never reached the model"
    );
    assert!(events.of("cancel_sent").any(|e| e["run_id"] == "lb-3"));
    let left = events
        .of("processes")
        .find(|e| e["run_id"] == "lb-3")
        .expect("processes checked after the cancel");
    let groups = left["groups"].as_array().expect("the process groups");
    assert!(
        groups.len() <= 1,
        "more than the conversation's one live harness works there: {left}"
    );

    // The worker is gone, and with it the bridge and every harness.
    let left = common::processes_under(&workspaces);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// An operator's agent, added to the package by its spec alone
/// (`examples/adapters/claude-acp.yaml`): the generated runner loads in the
/// real plugin worker, the plugin's bridge runs the spec, and the agent's
/// history tool is answered by the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier sdk+clis: needs the SDK venv (target/sdk-venv) and the pinned claude and claude-agent-acp (tests/clis); scripts/test runs it"]
async fn an_operators_agent_runs_through_the_plugin_by_its_spec() {
    let (model_url, fake) = fake_model(false).await;
    let dir = common::tempdir();
    let workspaces = dir.path().join("bridge");
    let home = dir.path().join("home");
    // Acknowledged once, as a person would: the adapter's notice about
    // another endpoint's billing.
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::write(
        home.join(".claude/.claude.json"),
        json!({"autoModeClassifierBillingNoticeAcknowledgedAt": 4_102_444_800_000_u64}).to_string(),
    )
    .unwrap();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/adapters");
    let plugin_dir = unpacked_plugin_with(dir.path(), Some(&examples));
    let config = json!({
        "harness_path": common::cli("claude-agent-acp"),
        "extra_env": format!(
            "HOME={home}\nCLAUDE_CONFIG_DIR={home}/.claude\nCLAUDE_CODE_MAX_RETRIES=0\n\
             ANTHROPIC_BASE_URL={model_url}\nANTHROPIC_API_KEY=test-key",
            home = home.display()
        ),
        "timeout": 120,
    });
    let scenario = json!({
        "plugin_dir": plugin_dir,
        "plugin_config": {"workspace_root": workspaces},
        "watch_dir": workspaces,
        "transcript": [{
            "transcript_id": "t1", "event_id": "e0", "conversation_id": "group-42",
            "role": "user", "item_type": "message", "content": HOST_ONLY, "seq": 1,
        }],
        "runs": [{"runner_name": "claude-acp", "context": context("lb-acp-1", ASK, &config)}],
    });
    let (events, stderr) = run_scenario(dir.path(), &scenario, 180).await;
    let results = events.results("lb-acp-1");
    let last = results.last().expect("results");
    assert_eq!(last["type"], "run.completed", "{last}\n{stderr}");
    assert!(
        results.iter().any(|r| r.to_string().contains(ANSWER)),
        "{results:?}"
    );
    assert_history_reached_the_host(&events, &fake);
    let left = common::processes_under(&workspaces);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// The plugin's answer to `state_list` carries each key's value: the host
/// lists keys only, so the plugin reads the values.
#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn the_plugin_lists_state_with_values() {
    let plugin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integrations/langbot-plugin");
    let script = r#"
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from components.runner import bridge

class Api:
    async def state_list(self, scope, prefix=None, limit=100):
        assert (scope, prefix, limit) == ("conversation", "external.", 100)
        return {"keys": ["external.harness", "external.session_id"], "has_more": False}

    async def state_get(self, scope, key):
        return {"value": {"external.harness": "codex", "external.session_id": {"id": 7}}[key]}

args = {"scope": "conversation", "prefix": "external."}
print(json.dumps(asyncio.run(bridge.answer(Api(), "state_list", args))))
"#;
    let out = std::process::Command::new(common::sdk_python())
        .arg("-c")
        .arg(script)
        .arg(&plugin)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entries: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        entries,
        json!([
            {"key": "external.harness", "value": "codex"},
            {"key": "external.session_id", "value": {"id": 7}},
        ])
    );
}

const PASSAGE: &str = "HANDBOOK: deployments freeze on the last Friday of each month";
const FORECAST: &str = "HOST TOOL: sunny over Lisbon";

/// The host's own tools and knowledge bases, as LangBot grants a run
/// (`resources.tools`, `resources.knowledge_bases`), reach the real Claude
/// Code CLI through the bridge's MCP tools: `retrieve_knowledge` and
/// `call_tool` go through the plugin to the runtime's proxy actions
/// (`retrieve_knowledge_base`, `call_tool`), and the model reads the
/// host's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier sdk+clis: needs the SDK venv (target/sdk-venv) and the pinned claude and claude-agent-acp (tests/clis); scripts/test runs it"]
async fn the_hosts_tools_and_knowledge_reach_claude_through_the_plugin() {
    use common::anthropic::{CALLS_DONE, fake_model_calling};
    let claude = common::cli("claude");
    let (model_url, fake) = fake_model_calling(vec![
        (
            "mcp__langbot__retrieve_knowledge".into(),
            json!({"kb_id": "kb-handbook", "query": "deployment freeze", "top_k": 3}),
        ),
        (
            "mcp__langbot__call_tool".into(),
            json!({"tool_name": "weather", "parameters": {"city": "Lisbon"}}),
        ),
        // Not granted to this run: refused by the bridge, never asked of the host.
        (
            "mcp__langbot__call_tool".into(),
            json!({"tool_name": "shell", "parameters": {}}),
        ),
    ])
    .await;
    let dir = common::tempdir();
    let workspaces = dir.path().join("bridge");
    let home = dir.path().join("home");
    let config = json!({
        "harness_path": claude,
        "api_key": "test-key",
        "base_url": model_url,
        "extra_env": format!(
            "HOME={home}\nCLAUDE_CONFIG_DIR={home}/.claude\nCLAUDE_CODE_MAX_RETRIES=0",
            home = home.display()
        ),
        "timeout": 120,
    });
    let mut run = context(
        "lb-kb",
        "When is the deployment freeze, and the weather?",
        &config,
    );
    run["resources"]["tools"] = json!([{
        "tool_name": "weather",
        "tool_type": "plugin",
        "description": "Weather by city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "operations": ["detail", "call"],
    }]);
    run["resources"]["knowledge_bases"] = json!([{
        "kb_id": "kb-handbook", "kb_name": "Handbook", "kb_type": "vector", "operations": ["list", "retrieve"],
    }]);
    let plugin_dir = unpacked_plugin(dir.path());
    let scenario = json!({
        "plugin_dir": plugin_dir,
        "plugin_config": {"workspace_root": workspaces},
        "tools": {"weather": {
            "description": "Weather by city",
            "parameters": {"type": "object"},
            "result": {"forecast": FORECAST},
        }},
        "knowledge": {"kb-handbook": [{
            "id": "chunk-1",
            "content": [{"type": "text", "text": PASSAGE}],
            "metadata": {"file": "handbook.md"},
            "distance": 0.1,
        }]},
        "runs": [{"runner_name": "claude-code", "context": run}],
    });
    let (events, stderr) = run_scenario(dir.path(), &scenario, 240).await;
    let results = events.results("lb-kb");
    let last = results.last().expect("results");
    assert_eq!(last["type"], "run.completed", "{last}\n{stderr}");
    assert!(
        results.iter().any(|r| r.to_string().contains(CALLS_DONE)),
        "{results:?}"
    );

    // The host was asked, through its proxy actions, with the run's id.
    let asked: Vec<&Value> = events.of("host_action").collect();
    let retrieve = asked
        .iter()
        .find(|e| e["action"] == "retrieve_knowledge_base")
        .unwrap_or_else(|| panic!("no retrieval reached the host: {asked:?}"));
    assert_eq!(retrieve["data"]["kb_id"], "kb-handbook");
    assert_eq!(retrieve["data"]["query_text"], "deployment freeze");
    assert_eq!(retrieve["data"]["top_k"], 3);
    assert_eq!(retrieve["data"]["run_id"], "lb-kb");
    let tool = asked
        .iter()
        .find(|e| e["action"] == "call_tool")
        .unwrap_or_else(|| panic!("no tool call reached the host: {asked:?}"));
    assert_eq!(tool["data"]["tool_name"], "weather");
    assert_eq!(tool["data"]["parameters"], json!({"city": "Lisbon"}));
    assert!(
        !asked
            .iter()
            .any(|e| e["action"] == "call_tool" && e["data"]["tool_name"] == "shell"),
        "a tool the run was not given reached the host"
    );

    // And the model read the host's answers, and the refusal.
    let requests = fake.requests.lock().unwrap().clone();
    let seen: String = requests.iter().map(Value::to_string).collect();
    assert!(seen.contains(PASSAGE), "the model never saw the passage");
    assert!(
        seen.contains(FORECAST),
        "the model never saw the tool's result"
    );
    assert!(
        seen.contains("tool `shell` is not granted to this run"),
        "the model never heard the refusal"
    );
}
