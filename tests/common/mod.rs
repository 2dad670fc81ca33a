//! Shared fixtures for the integration tests.
#![allow(dead_code)]

pub mod anthropic;
pub mod openai;
pub mod pg;
pub mod scripted;
pub mod server;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;

use harness_bridge::host::prelude::*;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants, NewTranscriptItem, OpenRun};
use harness_bridge::protocol::{AgentRunContext, AgentRunnerPermissions};
use serde_json::json;

pub const RUNNER: &str = "plugin:langbot/harness-bridge/claude-code";

/// A run that may ask the person anything: every tool is offered.
#[allow(dead_code)]
pub const ALL_ASKING: harness_bridge::interaction::Asking = harness_bridge::interaction::Asking {
    questions: true,
    approvals: true,
};

/// A context for `conversation`, with every pull API opened by the host.
pub fn context(run_id: &str, conversation: &str) -> AgentRunContext {
    serde_json::from_value(json!({
        "run_id": run_id,
        "trigger": {"type": "message.received", "source": "platform"},
        "event": {"event_id": format!("ev-{run_id}"), "event_type": "message.received", "source": "platform"},
        "conversation": {"conversation_id": conversation, "bot_id": "bot-1", "workspace_id": "ws-1"},
        "actor": {"actor_type": "user", "actor_id": "user-1", "actor_name": "Ada"},
        "subject": {"subject_type": "message", "subject_id": "msg-1"},
        "input": {"text": "hello"},
        "delivery": {"surface": "platform"},
        "resources": {"storage": {"plugin_storage": true, "workspace_storage": true}},
        "context": {"available_apis": {
            "history_page": true, "history_search": true, "event_get": true, "event_page": true,
            "artifact_metadata": true, "artifact_read": true, "state": true, "storage": true
        }},
        "runtime": {"trace_id": "t"}
    }))
    .expect("fixture context parses")
}

/// Every permission the bridge's runners request.
pub fn all_permissions() -> AgentRunnerPermissions {
    harness_bridge::harness::discovery(harness_bridge::harness::Adapters::builtin()).runners[0]
        .manifest
        .permissions
        .clone()
}

pub struct Fixture {
    pub _dir: tempfile::TempDir,
    pub store: SqliteHost,
    pub grants: Grants,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteHost::open(dir.path()).expect("store opens");
    let grants = Grants::new(Arc::new(store.clone()));
    Fixture {
        _dir: dir,
        store,
        grants,
    }
}

impl Fixture {
    pub fn open(&self, run_id: &str, conversation: &str, policy: &GrantPolicy) -> OpenRun {
        self.grants
            .open_run(
                &context(run_id, conversation),
                RUNNER,
                &all_permissions(),
                policy,
            )
            .expect("run opens")
    }

    pub async fn say(&self, conversation: &str, role: &str, text: &str) {
        self.store
            .append_transcript(NewTranscriptItem {
                event_id: format!("ev-{text}"),
                conversation_id: conversation.into(),
                role: role.into(),
                content: Some(text.into()),
                ..NewTranscriptItem::default()
            })
            .await
            .expect("append transcript");
    }
}

/// Where the pinned test CLIs are installed (`tests/clis`).
pub fn cli_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clis")
}

/// A pinned harness CLI installed by `scripts/test` (`npm ci` in `tests/clis`).
/// Missing means the set-up did not run: fail with how to fix it.
pub fn cli(name: &str) -> PathBuf {
    let path = cli_dir().join("node_modules/.bin").join(name);
    assert!(
        path.exists(),
        "{name} is not installed at {}: run `scripts/test` (it runs `npm ci` in tests/clis), \
         or `npm ci --prefix tests/clis`",
        path.display()
    );
    path
}

/// Serve `app` on an OS-chosen 127.0.0.1 port; returns `http://127.0.0.1:PORT`.
pub async fn serve_local(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("fake server") });
    url
}

/// The transcript line the end-to-end tests expect a harness to fetch.
pub const DECISION: &str = "DECISION: we ship the release on Friday";

/// What a model request carries back from calls of the bridge's
/// `history_page` tool (each CLI names it its own way: the name's ending
/// tells), as the model receives it: Anthropic `tool_result` blocks and
/// chat-completions `tool` messages (each tied to its call by the call's
/// id), Gemini `functionResponse` parts (by the tool's name).
pub fn history_results(request: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let history = |name: &Value| name.as_str().is_some_and(|n| n.ends_with("history_page"));
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let mut results = Vec::new();
    let parts = request["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|content| content["parts"].as_array().into_iter().flatten());
    for part in parts {
        let response = &part["functionResponse"];
        if history(&response["name"]) {
            results.push(text(&response["response"]));
        }
    }
    let mut calls = Vec::new();
    for message in request["messages"].as_array().into_iter().flatten() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            if history(&call["function"]["name"]) {
                calls.push(call["id"].clone());
            }
        }
        if message["role"] == "tool" && calls.contains(&message["tool_call_id"]) {
            results.push(text(&message["content"]));
        }
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_use" && history(&block["name"]) {
                calls.push(block["id"].clone());
            }
            if block["type"] == "tool_result" && calls.contains(&block["tool_use_id"]) {
                results.push(text(&block["content"]));
            }
        }
    }
    results
}

/// The model got the store's transcript ([`DECISION`]) as the result of
/// its `history_page` call in one of `requests`; `context` (the bridge's
/// log, say) is shown when it did not.
pub fn assert_history_reached_model(
    requests: &[serde_json::Value],
    context: impl std::fmt::Display,
) {
    let results: Vec<String> = requests.iter().flat_map(history_results).collect();
    assert!(
        results.iter().any(|result| result.contains(DECISION)),
        "the history_page result never reached the model with the transcript; \
         the history_page results it got: {results:?}\n{context}"
    );
}

/// Everything a real-harness test needs: a store holding [`DECISION`] in
/// conversation `group-1`, the MCP server, an open run, and its projected
/// workspace for `harness`.
pub struct E2e {
    pub fixture: Fixture,
    pub grants: Arc<Grants>,
    pub http: harness_bridge::mcp::McpHttpServer,
    pub run: OpenRun,
    pub projection: harness_bridge::projection::Projection,
    pub _root: tempfile::TempDir,
}

impl E2e {
    pub async fn new(harness: &str, run_id: &str) -> E2e {
        use harness_bridge::projection::{ProjectRequest, Templates, project};
        let fixture = fixture();
        fixture
            .store
            .append_transcript(NewTranscriptItem {
                event_id: "old".into(),
                conversation_id: "group-1".into(),
                role: "user".into(),
                content: Some(DECISION.into()),
                ..NewTranscriptItem::default()
            })
            .await
            .expect("seed transcript");
        let grants = Arc::new(Grants::new(Arc::new(fixture.store.clone())));
        let tools = harness_bridge::mcp::RunTools::default();
        let http = harness_bridge::mcp::McpHttpServer::start(
            grants.clone(),
            tools,
            "127.0.0.1:0".parse().expect("addr"),
        )
        .await
        .expect("MCP server");
        let ctx = context(run_id, "group-1");
        let run = grants
            .open_run(&ctx, RUNNER, &all_permissions(), &GrantPolicy::default())
            .expect("open run");
        let root = tempfile::tempdir().expect("root");
        let target = harness_bridge::harness::find(harness)
            .expect("harness")
            .target();
        let names = harness_bridge::mcp::tool_names(&run.grant.apis, ALL_ASKING);
        let request = ProjectRequest {
            ctx: &ctx,
            target: &target,
            runner: harness,
            root: root.path(),
            tools: &names,
            mcp_url: http.url(),
            mcp_servers: &Default::default(),
            host: None,
            env: &Default::default(),
        };
        let projection = project(&request, &Templates::load(None).expect("templates"))
            .await
            .expect("projection");
        E2e {
            fixture,
            grants,
            http,
            run,
            projection,
            _root: root,
        }
    }

    /// The harness's history call reached the store through the grant.
    pub async fn assert_history_read(&self) {
        let run_id = self.run.grant.run_id().to_string();
        let audit = self
            .fixture
            .store
            .audit_tail(Some(run_id), 20)
            .await
            .expect("audit");
        assert!(
            audit
                .iter()
                .any(|r| r.entry.action == "history_page" && r.entry.outcome == "ok"),
            "{audit:?}"
        );
    }

    pub async fn finish(self) {
        self.grants.close_run(self.run.grant.run_id());
        self.http.shutdown().await;
    }
}

/// Decode a harness's real stdout with `decoder` and return the result
/// types in order, checking the stream's invariants on the way.
pub fn decode(
    decoder: &str,
    stdout: &str,
    exit_code: Option<i32>,
) -> Vec<harness_bridge::protocol::AgentRunResult> {
    use harness_bridge::harness::decode::{Exit, LineBuffer, ResultStream};
    let mut d = harness_bridge::harness::decode::decoder(decoder).expect("known decoder");
    let mut lines = LineBuffer::default();
    let mut stream = ResultStream::new("run-decoded");
    let mut out = Vec::new();
    // Feed in small uneven chunks, as pipes deliver them.
    for chunk in stdout.as_bytes().chunks(97) {
        for line in lines.push(chunk) {
            out.extend(stream.stamp(d.line(&line)));
        }
    }
    if let Some(line) = lines.finish() {
        out.extend(stream.stamp(d.line(&line)));
    }
    out.extend(stream.stamp(d.finish(Exit { code: exit_code })));
    let sequences: Vec<u64> = out.iter().filter_map(|r| r.sequence).collect();
    assert_eq!(
        sequences,
        (1..=out.len() as u64).collect::<Vec<_>>(),
        "sequence runs 1, 2, 3…"
    );
    for result in &out {
        assert!(
            result.check().is_ok(),
            "decoded result fails validation: {result:?}"
        );
    }
    out
}

/// One `harness-bridge run` as a user runs it: its NDJSON results, each
/// with the moment it was read, the exit code and stderr.
pub struct BridgeTurn {
    pub results: Vec<(std::time::Instant, serde_json::Value)>,
    pub code: Option<i32>,
    pub stderr: String,
    pub elapsed: std::time::Duration,
}

impl BridgeTurn {
    pub fn kinds(&self) -> Vec<String> {
        self.results
            .iter()
            .map(|(_, r)| r["type"].as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn first(&self, kind: &str) -> Option<&serde_json::Value> {
        self.results
            .iter()
            .map(|(_, r)| r)
            .find(|r| r["type"] == kind)
    }

    /// The last result, which must be the terminal one.
    pub fn terminal(&self) -> &serde_json::Value {
        let (_, last) = self
            .results
            .last()
            .unwrap_or_else(|| panic!("no results at all; stderr:\n{}", self.stderr));
        last
    }

    /// The value of a `state.updated` result for `key`.
    pub fn state(&self, key: &str) -> Option<&serde_json::Value> {
        self.results
            .iter()
            .map(|(_, r)| r)
            .find(|r| r["type"] == "state.updated" && r["data"]["key"] == key)
            .map(|r| &r["data"]["value"])
    }

    /// Sequence 1, 2, 3… on every result, one run id, one terminal at the end.
    pub fn assert_well_formed(&self) {
        let sequences: Vec<u64> = self
            .results
            .iter()
            .map(|(_, r)| r["sequence"].as_u64().expect("sequence on every result"))
            .collect();
        assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
        let terminals = self
            .kinds()
            .iter()
            .filter(|k| *k == "run.completed" || *k == "run.failed")
            .count();
        assert_eq!(terminals, 1, "{:?}", self.kinds());
        let kind = self.terminal()["type"].as_str().unwrap_or("");
        assert!(kind == "run.completed" || kind == "run.failed", "{kind}");
    }
}

/// The bridge binary built for these tests.
pub fn bridge_bin() -> &'static str {
    env!("CARGO_BIN_EXE_harness-bridge")
}

/// Run `harness-bridge --data-dir DATA run ARGS` with exactly `env` (plus a
/// PATH), reading its stdout as it streams.
pub async fn bridge_run(
    data: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
) -> BridgeTurn {
    bridge_run_with(data, args, env, |_| {}).await
}

/// `harness-bridge --data-dir DATA run ARGS` with exactly `env` (plus a
/// PATH), stdout and stderr piped for the caller to read.
pub fn spawn_bridge_run(
    data: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
) -> tokio::process::Child {
    tokio::process::Command::new(bridge_bin())
        .arg("--data-dir")
        .arg(data)
        .arg("run")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the bridge starts")
}

/// [`bridge_run`], calling `at_end` with the terminal result the moment it
/// is read (the bridge may still be running): what holds when a run's end
/// is reported.
pub async fn bridge_run_with(
    data: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
    mut at_end: impl FnMut(&serde_json::Value),
) -> BridgeTurn {
    use tokio::io::AsyncBufReadExt;
    let start = std::time::Instant::now();
    let mut child = spawn_bridge_run(data, args, env);
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut results = Vec::new();
    let read = async {
        while let Ok(Some(line)) = lines.next_line().await {
            let value: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            if value["type"] == "run.completed" || value["type"] == "run.failed" {
                at_end(&value);
            }
            results.push((std::time::Instant::now(), value));
        }
        child.wait().await.expect("the bridge exits")
    };
    let status = tokio::time::timeout(std::time::Duration::from_secs(240), read)
        .await
        .expect("the bridge finished in time");
    let stderr = errors.await.unwrap_or_default();
    BridgeTurn {
        results,
        code: status.code(),
        stderr,
        elapsed: start.elapsed(),
    }
}

/// Processes whose working directory is under `root`: what a run must not
/// leave behind.
pub fn processes_under(root: &std::path::Path) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            if cwd.starts_with(&root) {
                let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                found.push(format!("{pid}: {cmd}"));
            }
        }
    }
    found
}

/// Live processes whose command line contains `needle` (a marker the
/// test put in their arguments): found wherever they went, whatever their
/// working directory or parent.
pub fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == std::process::id().to_string() {
            continue;
        }
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// A number no other test process uses, for markers in argv.
pub fn unique_tag() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "{}{:03}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Kill what a failed test left running (markers in argv).
pub fn kill_processes_with(needle: &str) {
    for p in processes_with(needle) {
        if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The containment mechanisms a bridge can be told to use
/// (`HARNESS_BRIDGE_CONTAIN`); tests run both.
pub const MECHANISMS: [&str; 2] = ["cgroup", "subreaper"];

/// How many processes the bridge's log says a harness left running.
pub fn left_running(log: &str) -> usize {
    log.lines()
        .filter_map(|l| l.split("the harness left ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum()
}

/// Put [`DECISION`] into `conversation`'s history in the store at `data`.
pub async fn seed_decision(data: &std::path::Path, conversation: &str) {
    let store = SqliteHost::open(data).expect("store opens");
    store
        .append_transcript(NewTranscriptItem {
            event_id: "old".into(),
            conversation_id: conversation.into(),
            role: "user".into(),
            content: Some(DECISION.into()),
            ..NewTranscriptItem::default()
        })
        .await
        .expect("seed transcript");
}

impl BridgeTurn {
    /// The terminal result, which must be `run.completed` with exit code 0.
    pub fn completed(&self) -> &serde_json::Value {
        self.assert_well_formed();
        let terminal = self.terminal();
        assert_eq!(
            terminal["type"],
            "run.completed",
            "{terminal}\nkinds: {:?}\nstderr:\n{}",
            self.kinds(),
            self.stderr
        );
        assert_eq!(self.code, Some(0), "{}", self.stderr);
        terminal
    }

    /// The session facts the run reported in its final message.
    pub fn session(&self) -> &serde_json::Value {
        &self.terminal()["data"]["message"]["metadata"]["session"]
    }

    /// A `run.failed` with `code`, and the bridge's exit code for it (1
    /// for `invalid_argument`, 3 otherwise).
    pub fn assert_failed(&self, code: &str) -> &serde_json::Value {
        self.assert_well_formed();
        let terminal = self.terminal();
        assert_eq!(terminal["type"], "run.failed", "{terminal}");
        assert_eq!(terminal["data"]["code"], code, "{terminal}");
        let exit = if code == "invalid_argument" { 1 } else { 3 };
        assert_eq!(self.code, Some(exit), "{}", self.stderr);
        terminal
    }
}

/// A session that vanished falls back to a fresh one (noticed before the
/// resume), and one the harness cannot resume is retried once as fresh.
pub async fn assert_session_fallback(
    turn: impl AsyncFn(&str) -> BridgeTurn,
    delete_sessions: impl Fn(),
    corrupt_sessions: impl Fn(),
) {
    let first = turn("Hello there").await;
    first.completed();
    let old = first
        .state("external.session_id")
        .cloned()
        .expect("session");

    delete_sessions();
    let second = turn("Hello again").await;
    second.completed();
    let meta = second.session();
    assert_eq!(meta["resumed"], false);
    let notice = meta["notice"].as_str().unwrap_or("");
    assert!(notice.contains("no longer exists"), "{meta}");
    let new = second
        .state("external.session_id")
        .cloned()
        .expect("new session");
    assert_ne!(new, old);

    corrupt_sessions();
    let third = turn("Third time").await;
    third.completed();
    let meta = third.session();
    assert_eq!(meta["resumed"], false, "{meta}");
    let notice = meta["notice"].as_str().unwrap_or("");
    assert!(notice.contains("could not be resumed"), "{meta}");
    assert_ne!(third.state("external.session_id"), Some(&new));
}

/// A harness that hangs is stopped at the deadline, and nothing it started
/// is left running under `workspaces`.
pub fn assert_killed_at_deadline(turn: &BridgeTurn, workspaces: &std::path::Path) {
    turn.assert_failed("deadline_exceeded");
    assert!(
        turn.elapsed < std::time::Duration::from_secs(30),
        "{:?}",
        turn.elapsed
    );
    let left = processes_under(workspaces);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// `harness` cannot be found: `harness_not_found` with its install hint.
pub async fn assert_harness_not_found(harness: &str, hint: &str) {
    let data = tempfile::tempdir().expect("data dir");
    let turn = bridge_run(
        data.path(),
        &["--conversation", "c", "--text", "hi", "--harness", harness],
        &[("PATH", "/nonexistent".to_string())],
    )
    .await;
    let terminal = turn.assert_failed("harness_not_found");
    let error = terminal["data"]["error"].as_str().unwrap_or("");
    assert!(error.contains(hint), "{error}");
    let named = bridge_run(
        data.path(),
        &[
            "--conversation",
            "c",
            "--text",
            "hi",
            "--harness",
            harness,
            "--bin",
            "/nonexistent/bin",
        ],
        &[],
    )
    .await;
    named.assert_failed("harness_not_found");
}

/// The venv's python: `HARNESS_BRIDGE_SDK_PYTHON`, else `target/sdk-venv`.
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("HARNESS_BRIDGE_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/sdk-venv/bin/python")
        });
    assert!(
        path.exists(),
        "the langbot-plugin SDK venv is missing at {}: run `scripts/test` (it creates it from \
         tests/interop/requirements.txt), or set HARNESS_BRIDGE_SDK_PYTHON to a python with the SDK installed",
        path.display()
    );
    path
}

/// A copy of the LangBot plugin's source (`integrations/langbot-plugin`)
/// at `dir/code`, without build leftovers (`bin/`, `__pycache__`).
pub fn copy_plugin(dir: &std::path::Path) -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integrations/langbot-plugin");
    let plugin = dir.join("code");
    for entry in walkdir::WalkDir::new(&source) {
        let entry = entry.expect("plugin source readable");
        let rel = entry
            .path()
            .strip_prefix(&source)
            .expect("under the source");
        if rel
            .components()
            .any(|c| c.as_os_str() == "__pycache__" || c.as_os_str() == "bin")
        {
            continue;
        }
        let to = plugin.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&to).expect("mkdir");
        } else {
            std::fs::copy(entry.path(), &to).expect("copy");
        }
    }
    plugin
}

/// Wait until at least `n` processes run under `root` (a harness and its
/// child); panics after 20 s.
pub async fn wait_for_processes(root: &std::path::Path, n: usize) {
    for _ in 0..200 {
        if processes_under(root).len() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the harness never started under {}", root.display());
}

/// Whether process `pid` runs (a reaped process has no /proc entry; a
/// zombie says `Z`).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')))
}

/// Wait (bounded, 10 s) until process `pid` is gone; panics otherwise.
pub async fn wait_until_gone(pid: i32) {
    for _ in 0..200 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("process {pid} is still running");
}

/// Wait (bounded, 10 s) until no process works under `root`, and fail
/// with what is left otherwise: a group's members may take a moment to die
/// after its leader, more so on a loaded machine.
pub async fn assert_none_left_under(root: &std::path::Path) {
    let mut left = processes_under(root);
    for _ in 0..100 {
        if left.is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = processes_under(root);
    }
    panic!("processes left behind under {}: {left:?}", root.display());
}

/// A conversation's transcript in the store at `data`, as `role: text`.
pub async fn transcript(data: &std::path::Path, conversation: &str) -> Vec<String> {
    let store = SqliteHost::open(data).expect("store opens");
    let history = store
        .conversation_history(conversation, None, 50)
        .await
        .expect("history");
    history
        .items
        .iter()
        .map(|i| format!("{}: {}", i.role, i.content.clone().unwrap_or_default()))
        .collect()
}

/// A 1×1 PNG, base64: what the tests' harnesses write to their outbox as an
/// image (under a name that does not say so, where the test wants it
/// recognised by its content).
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The workspace a run's results name (its `external.working_directory`
/// state update).
pub fn workspace_of(results: &[serde_json::Value]) -> std::path::PathBuf {
    let update = results
        .iter()
        .find(|r| r["type"] == "state.updated" && r["data"]["key"] == "external.working_directory")
        .expect("the run names its workspace");
    std::path::PathBuf::from(update["data"]["value"].as_str().expect("a path"))
}

/// The card a turn that asked the person ended with: it ended
/// `interaction_requested`, and its `action.requested` carries the
/// `InteractionRequest`.
pub fn asked_card(results: &[serde_json::Value]) -> &serde_json::Value {
    let end = results.last().expect("results");
    assert_eq!(
        end["data"]["finish_reason"], "interaction_requested",
        "{results:?}"
    );
    let card = results
        .iter()
        .find(|r| r["type"] == "action.requested")
        .expect("the card");
    &card["data"]["payload"]
}

/// The workspace a `run` turn worked in, from its resume pointer.
pub fn turn_workspace(turn: &BridgeTurn) -> PathBuf {
    turn.results
        .iter()
        .find(|(_, r)| r["data"]["key"] == "external.working_directory")
        .and_then(|(_, r)| r["data"]["value"].as_str())
        .map(PathBuf::from)
        .expect("the workspace")
}

/// The stable instructions, as the bridge wrote them to `file` in
/// `workspace`, reach the model byte for byte in some request of each
/// turn (`requests[..asked]` the first's, the rest the second's).
pub fn assert_instructions_in_both_turns(
    workspace: &std::path::Path,
    file: &str,
    requests: &[serde_json::Value],
    asked: usize,
) {
    let instructions = std::fs::read_to_string(workspace.join(file)).expect("the instructions");
    assert!(!instructions.trim().is_empty(), "{file} is empty");
    let escaped = serde_json::to_string(instructions.trim()).unwrap_or_default();
    let escaped = &escaped[1..escaped.len() - 1];
    for (turn, range) in [(1, &requests[..asked]), (2, &requests[asked..])] {
        assert!(
            range.iter().any(|r| r.to_string().contains(escaped)),
            "turn {turn} did not carry the instructions"
        );
    }
}

/// Ctrl-C to a `run` (from [`spawn_bridge_run`]) once `started` holds:
/// its last result must be `run.failed` `cancelled`, its exit 130, and
/// nothing left running under `workspaces`.
pub async fn assert_ctrl_c_cancels(
    mut child: tokio::process::Child,
    workspaces: &std::path::Path,
    started: impl Fn() -> bool,
) {
    use tokio::io::AsyncBufReadExt;
    let waited = std::time::Instant::now();
    while !started() {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "the turn never reached the model"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut last = serde_json::Value::Null;
    while let Ok(Some(line)) = lines.next_line().await {
        last = serde_json::from_str(&line).unwrap_or(serde_json::Value::Null);
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait())
        .await
        .expect("the bridge exits")
        .expect("its status");
    assert_eq!(last["type"], "run.failed", "{last}");
    assert_eq!(last["data"]["code"], "cancelled", "{last}");
    assert_eq!(status.code(), Some(130));
    let left = processes_under(workspaces);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// `scripts/langbot-runners`: runners in the plugin at `plugin` for the
/// specs in `adapters`, as `scripts/build-langbot-plugin --adapters`
/// makes them.
pub fn langbot_runners(
    adapters: &std::path::Path,
    plugin: &std::path::Path,
) -> std::process::Output {
    std::process::Command::new(sdk_python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/langbot-runners"))
        .arg(bridge_bin())
        .arg(adapters)
        .arg(plugin)
        .output()
        .expect("the runner generator runs")
}
