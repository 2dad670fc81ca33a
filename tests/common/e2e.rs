//! What every real harness is held to the same way: its stdout decoded
//! by the bridge's decoder, and the shared checks — the history reached the model, a lost session falls back, the
//! deadline and Ctrl-C leave nothing running, a missing binary is
//! `harness_not_found`.

use super::bridge::{BridgeTurn, bridge_run};
use super::context::DECISION;
use super::procs::processes_under;

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

/// Decode a harness's real stdout with `decoder` and return the result
/// types in order, checking the stream's invariants on the way.
pub fn decode(
    decoder: &str,
    stdout: &str,
    exit_code: Option<i32>,
) -> Vec<harness_bridge::protocol::AgentRunResult> {
    use harness_bridge::harness::decode::{Exit, LineBuffer, ResultStream};
    let mut d = harness_bridge::harness::families::OneShotFormat::named(decoder)
        .expect("known decoder")
        .decoder();
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
    let data = crate::tempdir();
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

/// The stable instructions, as the bridge wrote them to `file` in
/// `workspace`, reach the model byte for byte in some request of each
/// turn (`requests[..asked]` the first's, the rest the second's).
pub fn assert_instructions_in_both_turns(
    workspace: &std::path::Path,
    file: &str,
    requests: &[serde_json::Value],
    asked: usize,
) {
    // A file in the conversation's home is the harness's user-level one:
    // the bridge writes nothing of the same name where a repository's own
    // would be.
    if let Some(in_home) = file.strip_prefix(".langbot/home/") {
        let name = in_home.rsplit('/').next().unwrap_or(in_home);
        for root_name in [name, "AGENTS.md"] {
            assert!(
                !workspace.join(root_name).exists(),
                "the bridge wrote {root_name} in the working folder"
            );
        }
    }
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
