//! How the LangBot plugin's replies reach the chat, case by case, through
//! the released SDK (`tests/interop/plugin_delivery.py`): the plugin's
//! runner runs in the SDK's `Runner.invoke` on contexts built from the SDK's
//! models, with scripted bridge results and a stand-in for LangBot's side
//! of `ctx.reply` (`call_tool` → `event_reply`) and `ctx.reply_stream()`.
//!
//! Where the binding delivers what the runner yields (`automatic_reply`, a
//! Pipeline) the plugin only yields; where it does not (an Agent) the plugin
//! sends the reply itself, once. Either way the final message is given
//! once, carrying the run's metadata.

use harness_bridge_testkit as common;

use std::path::PathBuf;

use serde_json::{Value, json};

const NARRATION: &str = "Let me look at the history.";
const ANSWER: &str = "You decided to ship on Friday.";
const LONG: &str = "First paragraph, one line.\n\nSecond paragraph: line one,\nline two.\n\nThird.";

fn context(automatic: bool, tools: &[&str], reply_stream: bool) -> Value {
    json!({
        "run_id": "run-1",
        "trigger": {"type": "message.received", "source": "platform"},
        "event": {"event_id": "ev-1", "event_type": "message.received", "source": "platform"},
        "conversation": {"conversation_id": "person_10001", "bot_id": "bot-1"},
        "actor": {"actor_type": "user", "actor_id": "10001"},
        "input": {"text": "What did we decide?"},
        "delivery": {
            "surface": "platform",
            "automatic_reply": automatic,
            "reply_target": {"target_type": "person", "target_id": "10001", "message_id": "1"},
        },
        "resources": {"tools": tools.iter().map(|t| json!({
            "tool_name": t, "tool_type": "platform", "operations": ["call"],
        })).collect::<Vec<_>>()},
        "context": {"available_apis": {"reply_stream": reply_stream}},
        "runtime": {},
    })
}

fn message(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// What the bridge sends for a Claude Code turn that narrates, calls a tool
/// and answers, numbered as the bridge numbers its results.
fn bridge_turn(answer: &str, deltas: &[&str]) -> Vec<Value> {
    let mut out = vec![
        json!({"type": "message.delta", "data": {"chunk": {"role": "assistant", "content": NARRATION}}}),
        json!({"type": "message.completed", "data": {"message": message(NARRATION)}}),
        json!({"type": "tool.call.started", "data": {"tool_call_id": "t1", "tool_name": "mcp__langbot__history_page", "parameters": {}}}),
        json!({"type": "tool.call.completed", "data": {"tool_call_id": "t1", "tool_name": "mcp__langbot__history_page", "result": {}}}),
    ];
    for piece in deltas {
        out.push(json!({"type": "message.delta", "data": {"chunk": {"role": "assistant", "content": piece}}}));
    }
    let mut last = message(answer);
    last["metadata"] =
        json!({"session": {"harness": "claude-code", "session_id": "s-1", "resumed": true}});
    out.extend([
        json!({"type": "message.completed", "data": {"message": message(answer)}}),
        json!({"type": "state.updated", "data": {"scope": "conversation", "key": "external.session_id", "value": "s-1"}}),
        json!({"type": "run.completed", "data": {"finish_reason": "end_turn", "message": last}}),
    ]);
    number(out)
}

fn number(results: Vec<Value>) -> Vec<Value> {
    results
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r["run_id"] = json!("run-1");
            r["sequence"] = json!(i + 1);
            r
        })
        .collect()
}

fn failure(error: &str) -> Vec<Value> {
    number(vec![
        json!({"type": "message.delta", "data": {"chunk": {"role": "assistant", "content": "Partial"}}}),
        json!({"type": "run.failed", "data": {"error": error, "code": "harness_error", "retryable": false}}),
    ])
}

struct Case {
    results: Vec<Value>,
    actions: Vec<Value>,
    context: Value,
    /// Every turn's context, as the runner relayed it.
    contexts: Vec<Value>,
    /// The follow-ups the runner offered the running turn.
    steers: Vec<Value>,
}

impl Case {
    fn kinds(&self) -> Vec<&str> {
        self.results
            .iter()
            .map(|r| r["type"].as_str().unwrap())
            .collect()
    }

    /// The texts of the messages yielded, in order.
    fn said(&self) -> Vec<&str> {
        self.results
            .iter()
            .filter(|r| r["type"] == "message.completed")
            .filter_map(|r| r["data"]["message"]["content"].as_str())
            .collect()
    }

    fn last(&self) -> &Value {
        self.results.last().expect("results")
    }

    /// The texts the plugin sent through `event_reply`.
    fn replies(&self) -> Vec<&str> {
        self.actions
            .iter()
            .filter(|a| a["action"] == "call_tool")
            .inspect(|a| assert_eq!(a["data"]["tool_name"], "event_reply", "{a}"))
            .map(|a| a["data"]["parameters"]["text"].as_str().unwrap())
            .collect()
    }

    fn stream_ops(&self) -> Vec<(&str, &str)> {
        self.actions
            .iter()
            .filter(|a| a["action"] == "reply_stream")
            .map(|a| {
                (
                    a["data"]["operation"].as_str().unwrap(),
                    a["data"]["text"].as_str().unwrap(),
                )
            })
            .collect()
    }

    /// The results that give LangBot `text` as a message to deliver.
    fn giving(&self, text: &str) -> Vec<&Value> {
        self.results
            .iter()
            .filter(|r| {
                let message = &r["data"]["message"];
                matches!(
                    r["type"].as_str(),
                    Some("message.completed" | "run.completed")
                ) && message["content"] == text
            })
            .collect()
    }

    /// LangBot's orchestrator numbers the results a runner yields and drops
    /// one whose number it saw already: nothing may be dropped.
    fn assert_numbering_keeps_all(&self) {
        let mut seen = std::collections::BTreeSet::new();
        let mut last = 0;
        for result in &self.results {
            let number = match result["sequence"].as_i64() {
                None => last + 1,
                Some(n) => {
                    assert!(
                        seen.insert(n),
                        "LangBot drops {result}: number {n} seen already"
                    );
                    n
                }
            };
            seen.insert(number);
            last = last.max(number);
        }
    }
}

fn run_cases(cases: Vec<Value>) -> Vec<Case> {
    let dir = common::tempdir();
    let plugin = common::copy_plugin(dir.path());
    let file = dir.path().join("scenario.json");
    let scenario = json!({"plugin_dir": plugin, "cases": cases});
    std::fs::write(&file, scenario.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/plugin_delivery.py");
    let out = std::process::Command::new(common::sdk_python())
        .arg(&script)
        .arg(&file)
        .output()
        .expect("python starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            Case {
                results: v["results"].as_array().unwrap().clone(),
                actions: v["actions"].as_array().unwrap().clone(),
                context: v["context"].clone(),
                contexts: v["contexts"].as_array().cloned().unwrap_or_default(),
                steers: v["steers"].as_array().cloned().unwrap_or_default(),
            }
        })
        .collect()
}

fn case(name: &str, context: Value, bridge: Vec<Value>) -> Value {
    json!({"name": name, "context": context, "bridge": bridge})
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn an_agent_binding_gets_the_reply_sent_once_and_a_pipeline_gets_it_yielded_once() {
    let turn = bridge_turn(ANSWER, &["You decided", " to ship on Friday."]);
    let cases = run_cases(vec![
        case(
            "agent",
            context(false, &["event_reply"], false),
            turn.clone(),
        ),
        case("pipeline", context(true, &["event_reply"], false), turn),
    ]);
    let (agent, pipeline) = (&cases[0], &cases[1]);

    // Agent: one explicit reply with the final answer; the narration before
    // the tool call is not sent.
    assert_eq!(agent.replies(), [ANSWER], "{:?}", agent.actions);
    assert_eq!(agent.last()["type"], "run.completed", "{:?}", agent.kinds());
    // Pipeline: nothing sent, LangBot delivers what is yielded.
    assert_eq!(pipeline.actions, Vec::<Value>::new());
    assert_eq!(pipeline.last()["type"], "run.completed");

    for case in [agent, pipeline] {
        // The answer is given once (run.completed does not repeat it) and
        // carries the run's metadata.
        let given = case.giving(ANSWER);
        assert_eq!(given.len(), 1, "{:?}", case.results);
        assert_eq!(given[0]["type"], "message.completed");
        assert_eq!(
            given[0]["data"]["message"]["metadata"]["session"]["resumed"],
            true
        );
        assert!(case.last()["data"]["message"].is_null(), "{}", case.last());
        assert_eq!(case.giving(NARRATION).len(), 1);
        case.assert_numbering_keeps_all();
    }
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_streamed_reply_is_one_message_updated_with_snapshots() {
    let pieces: Vec<String> = (0..20).map(|i| format!("word{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let answer = pieces.concat();
    let mut streamed = case(
        "stream",
        context(false, &["event_reply"], true),
        bridge_turn(&answer, &refs),
    );
    // The answer comes over about two seconds.
    streamed["delay"] = json!(0.1);
    let cases = run_cases(vec![streamed]);
    let stream = &cases[0];
    assert!(
        stream.replies().is_empty(),
        "sent beside the stream: {:?}",
        stream.replies()
    );
    let ops = stream.stream_ops();
    let ids: std::collections::BTreeSet<&str> = stream
        .actions
        .iter()
        .filter_map(|a| a["data"]["stream_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 1, "one reply, one stream: {ops:?}");
    let (last, updates) = ops.split_last().expect("stream operations");
    assert_eq!(*last, ("finish", answer.as_str()), "{ops:?}");
    assert_eq!(updates.last().map(|u| u.1), Some(answer.as_str()));
    assert!(updates.iter().all(|u| u.0 == "update"), "{ops:?}");
    // Full-text snapshots: the narration, then the answer while it was
    // still coming; fewer than the deltas (throttled).
    assert_eq!(updates[0].1, NARRATION);
    assert!(
        updates
            .iter()
            .any(|u| u.1.len() < answer.len() && answer.starts_with(u.1)),
        "{ops:?}"
    );
    assert!(updates.len() < pieces.len(), "not throttled: {ops:?}");
    assert_eq!(stream.giving(&answer).len(), 1);
    stream.assert_numbering_keeps_all();
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_long_reply_is_split_at_paragraphs_and_lines_in_order() {
    let sized = |mut ctx: Value| {
        ctx["delivery"]["max_message_size"] = json!(40);
        ctx
    };
    let cases = run_cases(vec![
        case(
            "split",
            sized(context(false, &["event_reply"], false)),
            bridge_turn(LONG, &[LONG]),
        ),
        case(
            "split-stream",
            sized(context(false, &["event_reply"], true)),
            bridge_turn(LONG, &[LONG]),
        ),
    ]);
    let parts = [
        "First paragraph, one line.",
        "Second paragraph: line one,\nline two.",
        "Third.",
    ];
    assert_eq!(cases[0].replies(), parts);
    // Streamed: the stream ends with the first part, the rest follow.
    let ops = cases[1].stream_ops();
    assert_eq!(ops.last(), Some(&("finish", parts[0])), "{ops:?}");
    assert!(ops.iter().all(|(_, text)| text.len() <= 40), "{ops:?}");
    assert_eq!(cases[1].replies(), parts[1..]);
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_failure_reaches_the_person_as_a_sentence_where_the_runner_sends() {
    let error = "Claude Code failed (error_during_execution): API Error: 500 upstream down\n\
                 last stderr lines:\n  /srv/bridge/workspaces/secret";
    let mut missing_bridge = case(
        "no-bridge",
        context(false, &["event_reply"], false),
        Vec::new(),
    );
    missing_bridge["plugin_config"] = json!({"bridge_path": "bin/harness-bridge"});
    let mut relative_root = case(
        "relative-root",
        context(false, &["event_reply"], false),
        Vec::new(),
    );
    relative_root["plugin_config"] =
        json!({"bridge_path": "/bin/true", "workspace_root": "data/workspaces"});
    let cases = run_cases(vec![
        case(
            "agent",
            context(false, &["event_reply"], false),
            failure(error),
        ),
        missing_bridge,
        relative_root,
        case(
            "pipeline",
            context(true, &["event_reply"], false),
            failure(error),
        ),
    ]);
    // The first line of the error, not the stderr the operator reads.
    assert_eq!(
        cases[0].replies(),
        ["Claude Code failed (error_during_execution): API Error: 500 upstream down"]
    );
    assert_eq!(cases[0].last()["type"], "run.failed");
    assert_eq!(cases[0].last()["data"]["error"], error);

    let told = cases[1].replies();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].starts_with("Claude Code could not answer: bridge_path must be an absolute path"),
        "{told:?}"
    );
    assert_eq!(cases[1].last()["data"]["code"], "harness_not_found");

    // A workspace folder relative to nothing the operator chose is refused
    // in words too, not used from wherever the plugin runtime runs.
    let told = cases[2].replies();
    assert!(
        told.len() == 1 && told[0].contains("workspace_root must be an absolute path"),
        "{told:?}"
    );
    assert_eq!(cases[2].last()["data"]["code"], "workspace_error");

    // A Pipeline tells the person itself (its failure hint): nothing sent.
    assert!(cases[3].actions.is_empty(), "{:?}", cases[3].actions);
    assert_eq!(cases[3].last()["type"], "run.failed");
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_reply_that_cannot_be_sent_is_said_not_silent() {
    let mut refused = case(
        "refused",
        context(false, &["event_reply"], false),
        bridge_turn(ANSWER, &[ANSWER]),
    );
    refused["fail"] = json!(["call_tool"]);
    let cases = run_cases(vec![
        case(
            "not-granted",
            context(false, &[], false),
            bridge_turn(ANSWER, &[ANSWER]),
        ),
        refused,
    ]);
    // No event_reply granted (a manifest without tool calling): nothing is
    // tried, and the run's record says the reply stays there.
    let ungranted = &cases[0];
    assert!(ungranted.actions.is_empty());
    let warning = ungranted
        .results
        .iter()
        .find(|r| r["type"] == "processor.log" && r["data"]["level"] == "warning")
        .expect("a warning");
    assert!(
        warning["data"]["text"]
            .as_str()
            .unwrap()
            .contains("event_reply")
    );
    // The host refused the reply: the run fails, saying so.
    let refused = &cases[1];
    assert_eq!(refused.replies(), [ANSWER]);
    assert_eq!(refused.last()["type"], "run.failed");
    assert_eq!(refused.last()["data"]["code"], "delivery_failed");
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_stream_that_fails_falls_back_only_while_nothing_can_have_been_sent() {
    let streaming = || context(false, &["event_reply"], true);
    let mut no_stream = case("no-stream", streaming(), bridge_turn(ANSWER, &[ANSWER]));
    no_stream["fail"] = json!(["reply_stream"]);
    let mut no_finish = case("no-finish", streaming(), bridge_turn(ANSWER, &[ANSWER]));
    no_finish["fail"] = json!(["reply_stream:finish"]);
    let cases = run_cases(vec![no_stream, no_finish]);
    // Updates refused: nothing was finished, so one plain reply instead.
    assert_eq!(cases[0].replies(), [ANSWER]);
    assert_eq!(cases[0].last()["type"], "run.completed");
    // The finish refused: a surface that cannot edit may have sent it
    // then; it is not sent again, and the run says delivery failed.
    assert!(cases[1].replies().is_empty(), "{:?}", cases[1].replies());
    assert_eq!(cases[1].last()["data"]["code"], "delivery_failed");
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn the_harness_stops_before_langbot_ends_the_run() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let with_deadline = |seconds: f64| {
        let mut ctx = context(false, &["event_reply"], false);
        ctx["runtime"]["deadline_at"] = json!(now + seconds);
        ctx
    };
    let cases = run_cases(vec![
        case("long", with_deadline(100.0), bridge_turn(ANSWER, &[ANSWER])),
        case("short", with_deadline(20.0), bridge_turn(ANSWER, &[ANSWER])),
    ]);
    let given = |c: &Case| c.context["runtime"]["deadline_at"].as_f64().unwrap() - now;
    // 10 s before a far deadline, a quarter of the time before a near one.
    assert!(
        (given(&cases[0]) - 90.0).abs() < 1.0,
        "{}",
        given(&cases[0])
    );
    assert!(
        (given(&cases[1]) - 15.0).abs() < 1.0,
        "{}",
        given(&cases[1])
    );
}

/// A turn that leaves three outbox files, reported as the bridge reports
/// them after the final message: an image under a name that does not say
/// so, a text file, and one too large to relay (named, no bytes).
fn turn_with_files() -> Vec<Value> {
    let mut turn = bridge_turn(ANSWER, &[ANSWER]);
    let notes = "line\n".repeat(400);
    let files = [
        json!({"type": "artifact.created", "data": {
            "artifact_type": "file", "name": "chart.dat", "size_bytes": 70,
            "content_base64": common::PNG_BASE64,
        }}),
        json!({"type": "artifact.created", "data": {
            "artifact_type": "file", "name": "notes.txt", "mime_type": "text/plain",
            "size_bytes": notes.len(), "content_base64": base64(notes.as_bytes()),
        }}),
        json!({"type": "artifact.created", "data": {
            "artifact_type": "file", "name": "big.bin", "size_bytes": 2_097_152,
            "metadata": {"withheld": "cannot store outbox file big.bin: the relay sends artifacts inline only (up to 1 MiB)"},
        }}),
    ];
    // After the final message.completed, before state.updated: where the
    // bridge's end-of-run sweep puts them.
    let at = turn.len() - 2;
    for (i, file) in files.into_iter().enumerate() {
        turn.insert(at + i, file);
    }
    number(
        turn.into_iter()
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("sequence");
                r
            })
            .collect(),
    )
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Case {
    /// The message chains the plugin sent through the platform reply API.
    fn chains(&self) -> Vec<&Vec<Value>> {
        self.actions
            .iter()
            .filter(|a| a["action"] == "call_platform_api")
            .inspect(|a| assert_eq!(a["data"]["context_tool"], "event_reply", "{a}"))
            .map(|a| a["data"]["params"]["message"].as_array().unwrap())
            .collect()
    }
}

fn png_data_url() -> String {
    format!("data:image/png;base64,{}", common::PNG_BASE64)
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn outbox_files_reach_the_chat_in_both_bindings_and_the_rest_are_named() {
    let mut refused = case(
        "refused",
        context(false, &["event_reply"], false),
        turn_with_files(),
    );
    refused["fail"] = json!(["call_platform_api"]);
    let mut capped = case(
        "capped",
        context(false, &["event_reply"], false),
        turn_with_files(),
    );
    capped["plugin_config"] = json!({"bridge_path": "/bin/true", "turn_file_limit_kb": 1});
    let cases = run_cases(vec![
        case(
            "agent",
            context(false, &["event_reply"], false),
            turn_with_files(),
        ),
        case(
            "pipeline",
            context(true, &["event_reply"], false),
            turn_with_files(),
        ),
        refused,
        capped,
    ]);
    let (agent, pipeline, refused, capped) = (&cases[0], &cases[1], &cases[2], &cases[3]);
    for case in &cases {
        // The bytes stay out of LangBot's record of the run.
        assert!(
            !case.kinds().contains(&"artifact.created"),
            "{:?}",
            case.kinds()
        );
        assert_eq!(case.last()["type"], "run.completed", "{:?}", case.kinds());
        case.assert_numbering_keeps_all();
    }

    // Agent: the reply, then the image (known by its content) in one
    // message and the text file in another, then a sentence naming the
    // file too large to come.
    let chains = agent.chains();
    assert_eq!(chains.len(), 2, "{chains:?}");
    assert_eq!(chains[0].len(), 1);
    assert_eq!(chains[0][0]["type"], "Image");
    assert_eq!(chains[0][0]["base64"], png_data_url().as_str());
    assert_eq!(chains[1][0]["type"], "File");
    assert_eq!(chains[1][0]["name"], "notes.txt");
    assert_eq!(chains[1][0]["size"], 2000);
    let replies = agent.replies();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0], ANSWER);
    assert!(
        replies[1].contains("big.bin (2.0 MB") && !replies[1].contains("notes.txt"),
        "{replies:?}"
    );
    // The text reply went first.
    let first_reply = agent
        .actions
        .iter()
        .position(|a| a["action"] == "call_tool");
    let first_file = agent
        .actions
        .iter()
        .position(|a| a["action"] == "call_platform_api");
    assert!(first_reply < first_file, "{:?}", agent.actions);

    // Pipeline: nothing sent; the one final message carries the answer, the
    // sentence for what cannot go there (all but images) and the image.
    assert!(pipeline.actions.is_empty(), "{:?}", pipeline.actions);
    let finals: Vec<&Value> = pipeline
        .results
        .iter()
        .filter(|r| r["data"]["message"]["content"].is_array())
        .collect();
    assert_eq!(finals.len(), 1, "{:?}", pipeline.results);
    assert_eq!(finals[0]["type"], "message.completed");
    let content = finals[0]["data"]["message"]["content"].as_array().unwrap();
    let text = content[0]["text"].as_str().unwrap();
    assert!(text.starts_with(ANSWER), "{text}");
    assert!(
        text.contains("notes.txt (2.0 KB") && text.contains("big.bin (2.0 MB"),
        "{text}"
    );
    assert!(!text.contains("chart.dat"), "{text}");
    assert_eq!(
        content[1],
        json!({"type": "image_base64", "image_base64": png_data_url()})
    );
    assert_eq!(content.len(), 2);
    assert_eq!(
        pipeline.giving(ANSWER).len(),
        0,
        "the answer is given once, with its files"
    );

    // The platform refused the files: the reply stands, and a sentence
    // names each file that did not come.
    let replies = refused.replies();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0], ANSWER);
    for name in ["chart.dat", "notes.txt", "big.bin"] {
        assert!(replies[1].contains(name), "{replies:?}");
    }
    assert!(replies[1].contains("did not take"), "{replies:?}");

    // Over the operator's limit for one answer (1 KB): the image (70 bytes)
    // goes, the text file (2000 bytes) is named.
    let chains = capped.chains();
    assert_eq!(chains.len(), 1, "{chains:?}");
    assert_eq!(chains[0][0]["type"], "Image");
    let replies = capped.replies();
    assert!(
        replies[1].contains("notes.txt (2.0 KB, over the 1.0 KB"),
        "{replies:?}"
    );
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn images_are_known_by_their_content() {
    // GIF, JPEG and WebP headers under names that say nothing.
    let heads: [(&str, &[u8]); 4] = [
        ("image/gif", b"GIF89a\x01\x00\x01\x00"),
        ("image/jpeg", b"\xff\xd8\xff\xe0\x00\x10JFIF"),
        ("image/webp", b"RIFF\x24\x00\x00\x00WEBPVP8 "),
        ("", b"%PDF-1.7 not an image"),
    ];
    let mut turn = bridge_turn(ANSWER, &[ANSWER]);
    for (i, (_, bytes)) in heads.iter().enumerate() {
        turn.insert(
            turn.len() - 2,
            json!({"type": "artifact.created", "data": {
                "artifact_type": "file", "name": format!("out-{i}"), "size_bytes": bytes.len(),
                "content_base64": base64(bytes),
            }}),
        );
    }
    let cases = run_cases(vec![case(
        "agent",
        context(false, &["event_reply"], false),
        turn,
    )]);
    let chains = cases[0].chains();
    // The three images in one message, the rest as a file.
    assert_eq!(chains.len(), 2, "{chains:?}");
    for (part, (mime, _)) in chains[0].iter().zip(&heads[..3]) {
        assert_eq!(part["type"], "Image");
        assert!(
            part["base64"]
                .as_str()
                .unwrap()
                .starts_with(&format!("data:{mime};base64,")),
            "{part}"
        );
    }
    assert_eq!(chains[0].len(), 3);
    assert_eq!(chains[1][0]["type"], "File");
    assert_eq!(chains[1][0]["name"], "out-3");
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_flood_of_outbox_files_stays_bounded_and_is_summed_up() {
    // Fifty small images: ten are sent, the rest named (ten by name, then a
    // count), and the run's record does not list them all.
    let mut turn = bridge_turn(ANSWER, &[ANSWER]);
    for i in 0..50 {
        turn.insert(
            turn.len() - 2,
            json!({"type": "artifact.created", "data": {
                "artifact_type": "file", "name": format!("frame-{i:02}.png"), "size_bytes": 70,
                "content_base64": common::PNG_BASE64,
            }}),
        );
    }
    let cases = run_cases(vec![case(
        "agent",
        context(false, &["event_reply"], false),
        turn,
    )]);
    let flood = &cases[0];
    let chains = flood.chains();
    assert_eq!(chains.len(), 1, "{chains:?}");
    assert_eq!(chains[0].len(), 10);
    let replies = flood.replies();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert!(
        replies[1].contains("frame-10.png") && replies[1].contains("and 30 more"),
        "{replies:?}"
    );
    assert!(
        !replies[1].contains("frame-09.png"),
        "sent, not named: {replies:?}"
    );
    let logs = flood
        .results
        .iter()
        .filter(|r| r["type"] == "processor.log")
        .count();
    assert!(logs <= 21, "{logs} log lines for 50 files");
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn an_operator_who_sends_no_files_still_has_them_named() {
    let mut off = case(
        "off",
        context(false, &["event_reply"], false),
        turn_with_files(),
    );
    off["plugin_config"] = json!({"bridge_path": "/bin/true", "file_limit_kb": 0});
    let cases = run_cases(vec![off]);
    assert!(cases[0].chains().is_empty(), "{:?}", cases[0].actions);
    let replies = cases[0].replies();
    assert_eq!(replies.len(), 2, "{replies:?}");
    for name in [
        "chart.dat (70 bytes",
        "notes.txt (2.0 KB",
        "big.bin (2.0 MB",
    ] {
        assert!(replies[1].contains(name), "{replies:?}");
    }
    assert!(
        replies[1].contains("files are not sent to this chat"),
        "{replies:?}"
    );
}

const QUESTION: &str = "Claude Code asks: Which colour?\n\n1. red\n2. blue\n\nReply with a number, or with your own answer.";

/// A turn that ends with a question: the model's words, then the card.
fn turn_with_question(interaction_id: &str) -> Vec<Value> {
    let card = json!({
        "interaction_id": interaction_id, "kind": "choice", "title": "Which colour?",
        "fields": [{"id": "answer", "label": "Answer", "type": "select", "required": true,
                    "options": [{"value": "1", "label": "red"}, {"value": "2", "label": "blue"}]}],
        "actions": [{"id": "submit", "label": "Send", "style": "primary"}],
        "expires_at": 4_102_444_800i64, "fallback_text": QUESTION,
    });
    number(vec![
        json!({"type": "message.completed", "data": {"message": message("I need to know one thing.")}}),
        json!({"type": "action.requested", "data": {"action": "interaction.requested", "payload": card}}),
        json!({"type": "state.updated", "data": {"scope": "conversation", "key": "external.pending_interaction", "value": {}}}),
        json!({"type": "run.completed", "data": {"finish_reason": "end_turn", "message": message("I need to know one thing.")}}),
    ])
}

/// On a surface without cards (OneBot, the HTTP bot: no
/// `delivery.interactions`), the question reaches the person as its text,
/// after the model's words, once, in both bindings; LangBot is never asked
/// to draw a card it cannot. Where cards are drawn, the card is yielded
/// after the reply for LangBot to send; one LangBot would refuse is asked
/// as text instead (a refused card fails the whole run).
#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_question_reaches_the_person_as_a_card_or_its_text() {
    let with_cards = |automatic: bool| {
        let mut ctx = context(automatic, &["event_reply"], false);
        ctx["delivery"]["interactions"] = json!({"field_types": ["select"],
            "action_styles": ["default", "primary", "danger"], "supports_updates": true, "max_fields": 1});
        ctx
    };
    let mut bad = turn_with_question("");
    bad[1]["data"]["payload"]["interaction_id"] = json!("");
    let cases = run_cases(vec![
        case(
            "agent",
            context(false, &["event_reply"], false),
            turn_with_question("ask-1"),
        ),
        case(
            "pipeline",
            context(true, &["event_reply"], false),
            turn_with_question("ask-1"),
        ),
        case(
            "agent-cards",
            with_cards(false),
            turn_with_question("ask-1"),
        ),
        case(
            "pipeline-cards",
            with_cards(true),
            turn_with_question("ask-1"),
        ),
        case("agent-bad-card", with_cards(false), bad),
    ]);
    let (agent, pipeline, agent_cards, pipeline_cards, agent_bad) =
        (&cases[0], &cases[1], &cases[2], &cases[3], &cases[4]);

    assert_eq!(
        agent.replies(),
        ["I need to know one thing.", QUESTION],
        "{:?}",
        agent.actions
    );
    let asked = format!("I need to know one thing.\n\n{QUESTION}");
    assert_eq!(pipeline.giving(&asked).len(), 1, "{:?}", pipeline.results);
    assert!(pipeline.actions.is_empty());
    for case in [agent, pipeline, agent_bad] {
        assert!(
            !case.kinds().contains(&"action.requested"),
            "{:?}",
            case.kinds()
        );
        assert_eq!(case.last()["type"], "run.completed");
    }
    assert_eq!(agent_bad.replies(), ["I need to know one thing.", QUESTION]);

    for case in [agent_cards, pipeline_cards] {
        let kinds = case.kinds();
        let card = kinds
            .iter()
            .position(|k| *k == "action.requested")
            .expect("the card");
        assert_eq!(kinds.last(), Some(&"run.completed"));
        assert_eq!(card, kinds.len() - 2, "{kinds:?}");
        assert_eq!(
            case.giving(&asked).len(),
            0,
            "the text is not sent beside the card"
        );
        case.assert_numbering_keeps_all();
    }
    assert_eq!(agent_cards.replies(), ["I need to know one thing."]);
    assert_eq!(pipeline_cards.giving("I need to know one thing.").len(), 1);
}

/// LangBot's steering as the Codex runner takes it, in a Pipeline: a
/// follow-up pulled while the turn works is offered to that turn. Taken:
/// one turn. Not taken (the turn was ending): it runs as the run's next
/// turn, with its own input and without the run's stale state, and the run
/// still ends once; both answers are given, in order, in its last message.
#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn a_follow_up_goes_into_the_running_turn_or_is_the_runs_next_turn() {
    const LATER: &str = "And make it Monday.";
    let mut ctx = context(true, &[], false);
    ctx["context"]["available_apis"]["steering_pull"] = json!(true);
    ctx["state"] = json!({"conversation": {"external.session_id": "old"}});
    let item = json!({
        "claimed_run_id": "run-1", "runner_id": "plugin:langbot/harness-bridge/codex",
        "event": {"event_id": "ev-2", "event_type": "message.received", "source": "platform"},
        "input": {"text": LATER},
        "actor": {"actor_type": "user", "actor_id": "user-9"},
    });
    let steered = |name: &str, taken: bool, turns: Vec<Vec<Value>>| {
        json!({
            "name": name, "context": ctx, "runner": "codex", "turns": turns,
            "steering": [item], "taken": taken, "delay": 0.1,
        })
    };
    let first = number(bridge_turn(ANSWER, &[]));
    let second = number(bridge_turn("Monday it is.", &[]));
    let cases = run_cases(vec![
        steered("taken", true, vec![first.clone()]),
        steered("queued", false, vec![first, second.clone()]),
        steered(
            "after a failure",
            false,
            vec![failure("exited with code 1"), second],
        ),
    ]);
    let (taken, queued, after_failure) = (&cases[0], &cases[1], &cases[2]);

    for case in [taken, queued] {
        assert_eq!(
            case.steers,
            [json!({"run_id": "run-1", "text": LATER, "actor": "user-9", "only_command": false})],
            "offered to the running turn, with who sent it"
        );
        let kinds = case.kinds();
        let ends = kinds
            .iter()
            .filter(|k| matches!(**k, "run.completed" | "run.failed"))
            .count();
        assert_eq!(ends, 1, "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"run.completed"));
        case.assert_numbering_keeps_all();
    }
    assert_eq!(taken.contexts.len(), 1, "taken: one turn");

    assert_eq!(queued.contexts.len(), 2, "not taken: the next turn");
    let next = &queued.contexts[1];
    assert_eq!(next["run_id"], "run-1.2");
    assert_eq!(next["input"]["text"], LATER);
    assert_eq!(next["event"]["event_id"], "ev-2");
    assert!(next.get("state").is_none(), "{next}");
    assert_eq!(
        next["conversation"], queued.contexts[0]["conversation"],
        "the same conversation"
    );
    // Both answers, in order, in the run's last message (a Pipeline over
    // a surface that shows only that one loses neither); the first is not
    // given on its own as well (a surface that shows each would repeat it).
    let said = queued.said();
    assert_eq!(
        said.last().copied(),
        Some(format!("{ANSWER}\n\nMonday it is.").as_str()),
        "{said:?}"
    );
    assert!(!said.contains(&ANSWER), "{said:?}");

    // A turn that fails does not drop the follow-up behind it: the failure
    // is told in words, then the follow-up's turn runs and ends the run.
    assert_eq!(after_failure.contexts.len(), 2, "the follow-up still ran");
    assert_eq!(after_failure.kinds().last(), Some(&"run.completed"));
    assert_eq!(
        after_failure.said().last().copied(),
        Some("Codex could not answer: exited with code 1\n\nMonday it is."),
        "{:?}",
        after_failure.results
    );
    assert!(
        queued.results.iter().all(|r| r["run_id"] == "run-1"),
        "every result is the LangBot run's"
    );
}
