//! `harness-bridge serve` as a client meets it, with the scripted harness:
//! turns of one conversation in order (the second resumes the first), 50
//! conversations × 3 turns at once, a full queue answers 429, cancel stops
//! a run and all its harness started (and nothing of another run's),
//! SIGTERM during a run leaves no process behind, a crash leaves the
//! in-flight run marked failed at the next start and what it left killed,
//! and the metrics and logs say what happened.

use harness_bridge_testkit as common;

use common::server::ServeProcess;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

/// A serve process whose harness is the scripted one.
struct Server {
    process: ServeProcess,
    tools: Arc<tempfile::TempDir>,
}

impl std::ops::Deref for Server {
    type Target = ServeProcess;
    fn deref(&self) -> &ServeProcess {
        &self.process
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut ServeProcess {
        &mut self.process
    }
}

impl Server {
    /// A server whose harness (`scripted`) acts as `mode` says.
    async fn start(mode: &str, extra: &str) -> Server {
        let tools = common::tempdir();
        common::scripted::install(tools.path());
        Server::start_in(Arc::new(common::tempdir()), Arc::new(tools), mode, extra).await
    }

    /// A server on an existing data folder (a restart).
    async fn start_in(
        data: Arc<tempfile::TempDir>,
        tools: Arc<tempfile::TempDir>,
        mode: &str,
        extra: &str,
    ) -> Server {
        Server::start_contained(data, tools, mode, extra, None).await
    }

    /// [`Server::start_in`] with the containment mechanism forced.
    async fn start_contained(
        data: Arc<tempfile::TempDir>,
        tools: Arc<tempfile::TempDir>,
        mode: &str,
        extra: &str,
        mechanism: Option<&str>,
    ) -> Server {
        let config = format!(
            "adapters: {}\ndefault_harness: scripted\nkill_grace_seconds: 1\nset_env:\n  FAKE_MODE: {mode}\n{extra}",
            tools.path().join("adapters").display()
        );
        let path = format!(
            "{}:{}",
            tools.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut env = vec![("PATH", path)];
        env.extend(mechanism.map(|m| ("HARNESS_BRIDGE_CONTAIN", m.to_string())));
        Server {
            process: ServeProcess::spawn(data, &config, &env).await,
            tools,
        }
    }

    /// The run id of the (only) run whose harness has started, from the
    /// context projected into its workspace.
    fn started_run_id(&self) -> String {
        let file = walkdir::WalkDir::new(self.workspaces())
            .into_iter()
            .filter_map(Result::ok)
            .find(|e| e.file_name() == "received-env")
            .expect("the harness ran");
        let ctx: Value = serde_json::from_str(
            &std::fs::read_to_string(
                file.path()
                    .parent()
                    .unwrap()
                    .join(".langbot/agent-context.json"),
            )
            .unwrap(),
        )
        .unwrap();
        ctx["run_id"].as_str().unwrap().to_string()
    }

    /// Post a short-form turn; the whole NDJSON stream, or the refusal.
    async fn turn(&self, conversation: &str, text: &str) -> (u16, Vec<Value>) {
        let response = self
            .client
            .post(format!("{}/v1/runs", self.url))
            .body(json!({"conversation": conversation, "text": text}).to_string())
            .send()
            .await
            .expect("the request is answered");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        let results = if status == 200 {
            body.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        } else {
            vec![serde_json::from_str(&body).unwrap_or(Value::Null)]
        };
        (status, results)
    }

    /// Post a turn and read its stream in the background.
    fn post_in_background(&self) -> tokio::task::JoinHandle<String> {
        self.post_body_in_background(json!({"conversation": "c", "text": "hi"}))
    }

    /// Post a full context with our own run id, in the background.
    fn post_run_in_background(
        &self,
        run_id: &str,
        conversation: &str,
        text: &str,
    ) -> tokio::task::JoinHandle<String> {
        let mut ctx = serde_json::to_value(common::context(run_id, conversation)).unwrap();
        ctx["input"]["text"] = json!(text);
        self.post_body_in_background(ctx)
    }

    fn post_body_in_background(&self, body: Value) -> tokio::task::JoinHandle<String> {
        let client = self.client.clone();
        let url = self.url.clone();
        tokio::spawn(async move {
            let response = client
                .post(format!("{url}/v1/runs"))
                .body(body.to_string())
                .send()
                .await;
            match response {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        })
    }

    /// POST a run body; the status and the body (the last NDJSON line, or
    /// the error).
    async fn post_json(&self, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}/v1/runs", self.url))
            .body(body.to_string())
            .send()
            .await
            .expect("answered");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let last = text.lines().last().unwrap_or("null");
        (status, serde_json::from_str(last).unwrap_or(Value::Null))
    }

    /// POST a path with no body; the status.
    async fn post_status(&self, path: &str) -> u16 {
        let response = self.client.post(format!("{}{path}", self.url)).send().await;
        response.expect("answered").status().as_u16()
    }

    /// Poll `/metrics` until it holds every line in `expected`.
    async fn wait_for_metrics(&self, expected: &[&str]) {
        let mut metrics = String::new();
        for _ in 0..100 {
            metrics = self.get_text("/metrics").await;
            if expected.iter().all(|e| metrics.contains(e)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{expected:?} not in:\n{metrics}");
    }

    /// Poll `GET /v1/runs/{run_id}` until the run has `status`; the run.
    async fn wait_for_status(&self, run_id: &str, status: &str) -> Value {
        let mut run = Value::Null;
        for _ in 0..200 {
            run = self.get_json(&format!("/v1/runs/{run_id}")).await;
            if run["status"] == status {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("run {run_id} never reached {status}: {run}");
    }

    /// Wait (bounded) until no process works under the workspaces.
    async fn assert_nothing_left(&self) {
        common::assert_none_left_under(&self.workspaces()).await;
    }

    /// Wait until the harness and its child run.
    async fn wait_for_harness(&self) {
        common::wait_for_processes(&self.workspaces(), 2).await;
    }
}

fn terminal(results: &[Value]) -> &Value {
    results.last().expect("results")
}

/// Every conversation workspace under `root` logged `turns` turns, each
/// ending before the next started.
fn assert_sequential(root: &std::path::Path, turns: usize) {
    let logs: Vec<_> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "turn-log")
        .collect();
    assert!(!logs.is_empty(), "no turn logged under {}", root.display());
    for log in logs {
        let text = std::fs::read_to_string(log.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 * turns, "{}: {text}", log.path().display());
        for pair in lines.chunks(2) {
            let (start, end) = (pair[0], pair[1]);
            assert_eq!(
                start.strip_prefix("start "),
                end.strip_prefix("end "),
                "turns overlapped in {}: {text}",
                log.path().display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_one_conversation_run_in_order_and_resume() {
    let server = Server::start("slow", "").await;
    // Posted at the same instant: which one arrives first is the server's
    // to decide, and the other must wait for it.
    let (a, b) = tokio::join!(server.turn("chat-1", "one"), server.turn("chat-1", "two"));
    let session = |r: &(u16, Vec<Value>)| {
        r.1.last().unwrap()["data"]["message"]["metadata"]["session"].clone()
    };
    let (first, second) = if session(&a)["resumed"] == false {
        (a, b)
    } else {
        (b, a)
    };
    for (status, results) in [&first, &second] {
        assert_eq!(*status, 200);
        assert_eq!(terminal(results)["type"], "run.completed", "{results:?}");
        let sequences: Vec<u64> = results
            .iter()
            .map(|r| r["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(sequences, (1..=results.len() as u64).collect::<Vec<_>>());
    }
    // The second waited for the first: it resumed the session the first stored.
    assert_eq!(session(&first)["resumed"], false);
    assert_eq!(session(&second)["resumed"], true);
    assert_eq!(
        session(&second)["session_id"],
        session(&first)["session_id"]
    );
    // Strictly one after the other: the harness logged both turns in the
    // conversation's workspace, and they do not overlap.
    assert_sequential(&server.workspaces(), 2);
    // Results stay retrievable by run id.
    let run_id = terminal(&second.1)["run_id"].as_str().unwrap();
    let run = server.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["results"].as_array().unwrap().len(), second.1.len());
    let history = server.get_json("/v1/conversations/chat-1/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 4, "{history}");
}

/// The console without the token typed: `harness-bridge console-link`
/// (run as the operator would, with serve's data folder) asks the running
/// service for a one-time link; its code opens one session, once, which
/// the API takes as the token; a session cannot make itself another link;
/// a used, lapsed or made-up code opens nothing, said in words. serve,
/// whose stderr is no terminal here, prints no link, only how to get one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_time_link_opens_one_session_once_and_only_a_token_makes_links() {
    let server = Server::start("echo", "").await;
    let output = server.console_link().await;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let code = stdout
        .strip_prefix(&format!("{}/#link=", server.url))
        .unwrap_or_else(|| panic!("a link to the console: {stdout}"))
        .to_string();
    assert!(stderr.contains("within 15 minutes, once"), "{stderr}");
    let token = server.token.clone().expect("a token");
    assert!(!stdout.contains(&token), "the link is not the token");

    let bare = reqwest::Client::new();
    let open = |code: String| {
        bare.post(format!("{}/v1/console/session", server.url))
            .header("Content-Type", "application/json")
            .body(json!({"link": code}).to_string())
            .send()
    };
    let opened = open(code.clone()).await.unwrap();
    assert_eq!(opened.status().as_u16(), 200);
    let session: Value = opened.json().await.unwrap();
    let session_token = session["token"].as_str().expect("a session").to_string();
    assert_eq!(session["lasts_seconds"], 12 * 3600);
    // The session is taken as the token is.
    let runners = bare
        .get(format!("{}/v1/runners", server.url))
        .bearer_auth(&session_token)
        .send()
        .await
        .unwrap();
    assert_eq!(runners.status().as_u16(), 200);
    // Once: the same code again, and a made-up one, open nothing.
    for code in [code, "0".repeat(64)] {
        let again = open(code).await.unwrap();
        assert_eq!(again.status().as_u16(), 401);
        let said = again.text().await.unwrap();
        assert!(
            said.contains("used already") && said.contains("console-link"),
            "{said}"
        );
    }
    // Only a token makes a link; a session cannot renew itself.
    let link = |bearer: String| {
        bare.post(format!("{}/v1/console/links", server.url))
            .header("Content-Type", "application/json")
            .bearer_auth(bearer)
            .body("{}")
            .send()
    };
    let refused = link(session_token).await.unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    assert_eq!(link("wrong".into()).await.unwrap().status().as_u16(), 401);
    let made: Value = link(token).await.unwrap().json().await.unwrap();
    assert!(made["url"].as_str().unwrap().contains("/#link="), "{made}");
    // No link in serve's log (a secret while it lasts): how to get one.
    let log = server.log.lock().unwrap().join("\n");
    assert!(log.contains("console-link"), "{log}");
    assert!(!log.contains("#link="), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429() {
    let server = Server::start("hang", "max_queue_per_conversation: 1\n").await;
    let _running = server.post_run_in_background("busy-1", "busy", "a");
    server.wait_for_harness().await;
    let _queued = server.post_run_in_background("busy-2", "busy", "b");
    // The queue depth counts the waiting turn; one harness runs.
    server
        .wait_for_metrics(&[
            "harness_bridge_queue_depth 1",
            "harness_bridge_runs_running 1",
        ])
        .await;
    let (status, refused) = server.turn("busy", "c").await;
    assert_eq!(status, 429, "{refused:?}");
    assert!(
        refused[0]["error"]
            .as_str()
            .unwrap()
            .contains("1 turns waiting"),
        "{refused:?}"
    );
    // Another conversation is not held up by this one's queue.
    assert_eq!(server.post_status("/v1/runs/busy-2/cancel").await, 202);
    assert_eq!(server.post_status("/v1/runs/busy-1/cancel").await, 202);
    server
        .wait_for_metrics(&[
            "harness_bridge_queue_depth 0",
            "harness_bridge_runs_running 0",
        ])
        .await;
    server.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cancelled_while_queued_leaves_no_trace_and_the_queue_moves_on() {
    let server = Server::start("slow", "").await;
    let first = server.post_run_in_background("q-1", "q", "first");
    server.wait_for_harness().await;
    let second = server.post_run_in_background("q-2", "q", "never run");
    let third = server.post_run_in_background("q-3", "q", "third");
    // q-2 and q-3 wait behind q-1; cancel q-2 while it waits.
    server
        .wait_for_metrics(&["harness_bridge_queue_depth 2"])
        .await;
    assert_eq!(server.post_status("/v1/runs/q-2/cancel").await, 202);
    let second = second.await.unwrap();
    let results: Vec<Value> = second
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 1, "one result, the terminal one: {second}");
    assert_eq!(results[0]["data"]["code"], "cancelled");
    assert_eq!(results[0]["sequence"], 1);
    // The queue moved on: q-1 and q-3 both complete, in order.
    for run in [first, third] {
        let body = run.await.unwrap();
        let last: Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
        assert_eq!(last["type"], "run.completed", "{body}");
    }
    assert_sequential(&server.workspaces(), 2);
    // The cancelled turn was never recorded.
    let history = server.get_json("/v1/conversations/q/history").await;
    assert!(!history.to_string().contains("never run"), "{history}");
    assert_eq!(history["items"].as_array().unwrap().len(), 4, "{history}");
    // Run ids are used once; an ended run cannot be cancelled.
    let again = server
        .post_run_in_background("q-1", "q", "again")
        .await
        .unwrap();
    assert!(again.contains("used once"), "{again}");
    assert_eq!(server.post_status("/v1/runs/q-1/cancel").await, 409);
    // The short form takes the client's own run id, checked.
    let (status, refused) = server
        .post_json(json!({"conversation": "q", "text": "x", "run_id": "no spaces"}))
        .await;
    assert_eq!(status, 422, "{refused}");
    let (status, body) = server
        .post_json(json!({"conversation": "q2", "text": "x", "run_id": "mine-1"}))
        .await;
    assert_eq!(status, 200);
    assert!(body.to_string().contains("\"run_id\":\"mine-1\""), "{body}");
    assert_eq!(server.post_status("/v1/runs/nope/cancel").await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_does_not_stop_its_run() {
    let server = Server::start("slow", "").await;
    let run = server.post_run_in_background("gone-1", "gone", "hello");
    server.wait_for_harness().await;
    run.abort(); // the client hangs up mid-stream
    let _ = run.await;
    let status = server.wait_for_status("gone-1", "completed").await;
    let results = status["results"].as_array().unwrap();
    assert_eq!(results.last().unwrap()["type"], "run.completed");
    // Asked for the stream instead, its results come as the run made them.
    let streamed: Vec<Value> = server.stream_of("gone-1").await;
    assert_eq!(&streamed, results);
}

/// A client that joins a run while it runs (`GET /v1/runs/{id}` asking
/// for the stream) gets its results from the first, then each as it comes,
/// until the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_be_streamed_by_id_while_it_runs() {
    let server = Server::start("slow", "").await;
    let run = server.post_run_in_background("joined-1", "joined", "hello");
    server.wait_for_harness().await;
    let joined: Vec<Value> = server.stream_of("joined-1").await;
    let posted = run.await.unwrap();
    assert_eq!(
        joined.last().unwrap()["type"],
        "run.completed",
        "{joined:?}"
    );
    assert_eq!(joined.len(), posted.lines().count());
    let missing = server
        .client
        .get(format!("{}/v1/runs/nope", server.url))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_run_and_its_process_group() {
    let server = Server::start("hang", "").await;
    let run = server.post_in_background();
    server.wait_for_harness().await;
    let run_id = server.started_run_id();
    let cancel = server
        .client
        .post(format!("{}/v1/runs/{run_id}/cancel", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status().as_u16(), 202);
    let body = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the stream ends")
        .unwrap();
    let last: Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["data"]["code"], "cancelled", "{last}");
    server.assert_nothing_left().await;
}

/// Two turns at once: the end of one (cancelled) leaves the other's
/// processes alone — also the one that left its harness's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier cgroup: needs a cgroup v2 the bridge may write (root or delegated); scripts/test runs it"]
async fn a_turn_that_ends_leaves_another_turns_processes_alone() {
    for mechanism in common::MECHANISMS {
        let tools = common::tempdir();
        common::scripted::install(tools.path());
        let data = Arc::new(common::tempdir());
        let server =
            Server::start_contained(data, Arc::new(tools), "hang", "", Some(mechanism)).await;
        let first = server.post_run_in_background("first", "a", "hi");
        let second = server.post_run_in_background("second", "b", "hi");
        // Two hanging harnesses with three children each.
        common::wait_for_processes(&server.workspaces(), 8).await;
        let workspace = |run_id: &str| {
            let file = walkdir::WalkDir::new(server.workspaces())
                .into_iter()
                .filter_map(Result::ok)
                .find(|e| {
                    e.file_name() == "agent-context.json"
                        && std::fs::read_to_string(e.path())
                            .ok()
                            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                            .is_some_and(|ctx| ctx["run_id"] == run_id)
                })
                .expect("the run's workspace");
            file.path()
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .to_path_buf()
        };
        let second_workspace = workspace("second");
        assert_eq!(server.post_status("/v1/runs/first/cancel").await, 202);
        let body = first.await.unwrap();
        assert!(body.contains("cancelled"), "{body}");
        let left = common::processes_under(&second_workspace);
        assert_eq!(
            left.len(),
            4,
            "{mechanism}: the other turn lost processes: {left:?}"
        );
        assert_eq!(server.post_status("/v1/runs/second/cancel").await, 202);
        assert!(second.await.unwrap().contains("cancelled"));
        server.assert_nothing_left().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_run_stops_everything() {
    let mut server = Server::start("hang", "shutdown_grace_seconds: 1\n").await;
    let run = server.post_in_background();
    server.wait_for_harness().await;
    let queued = server.post_run_in_background("behind", "c", "queued");
    server
        .wait_for_metrics(&["harness_bridge_queue_depth 1"])
        .await;
    let root = server.workspaces();
    let status = server.stop().await;
    assert!(status.success(), "{status:?}");
    // The log says the signal, the shutdown and the end.
    for said in [
        "SIGTERM",
        "shutting down",
        "runs_here\":2",
        "stopped: every turn",
    ] {
        server.wait_for_log(said).await;
    }
    let queued = queued.await.unwrap();
    assert!(
        queued.contains("cancelled") && queued.lines().count() == 1,
        "the queued turn ended at once, cancelled: {queued}"
    );
    let body = run.await.unwrap();
    let last: Value =
        serde_json::from_str(body.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    assert_eq!(
        last["data"]["code"], "cancelled",
        "the client saw the run end: {body}"
    );
    server.assert_nothing_left().await;

    // The store is consistent: after a restart the run is a finished,
    // cancelled run with all its results (not an interrupted one), the
    // pointer it stored on the way out is resumed, and the transcript
    // holds both turns.
    let run_id = last["run_id"].as_str().unwrap().to_string();
    let (data, tools) = (server.data.clone(), server.tools.clone());
    drop(server);
    let server = Server::start_in(data, tools, "quiet", "").await;
    let run = server.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["results"].as_array().unwrap().last().unwrap(), &last);
    let (_, results) = server.turn("c", "again").await;
    let session = &terminal(&results)["data"]["message"]["metadata"]["session"];
    assert_eq!(session["resumed"], true, "{results:?}");
    let args = std::fs::read_to_string(
        walkdir::WalkDir::new(&root)
            .into_iter()
            .filter_map(Result::ok)
            .find(|e| e.file_name() == "received-args")
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(args.starts_with("--resume\nscripted-hang\n"), "{args}");
    let history = server.get_json("/v1/conversations/c/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 3, "{history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_conversations_of_three_turns_at_once() {
    let server = Server::start("quiet", "max_concurrent_runs: 8\n").await;
    let server = &server;
    let posts = (0..50).flat_map(|c| {
        (0..3).map(move |t| async move {
            let conversation = format!("conv-{c}");
            let (status, results) = server.turn(&conversation, &format!("turn {t}")).await;
            (conversation, status, results)
        })
    });
    let answers = futures::future::join_all(posts).await;
    assert_eq!(answers.len(), 150);
    let mut run_ids = HashSet::new();
    let mut fresh: HashMap<String, usize> = HashMap::new();
    for (conversation, status, results) in &answers {
        assert_eq!(*status, 200, "{results:?}");
        // Every result once, in sequence, one terminal result, last.
        let sequences: Vec<u64> = results
            .iter()
            .map(|r| r["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(sequences, (1..=results.len() as u64).collect::<Vec<_>>());
        let terminals = results
            .iter()
            .filter(|r| matches!(r["type"].as_str(), Some("run.completed" | "run.failed")))
            .count();
        assert_eq!(terminals, 1, "{results:?}");
        assert_eq!(terminal(results)["type"], "run.completed", "{results:?}");
        let run_id = terminal(results)["run_id"].as_str().unwrap().to_string();
        assert!(results.iter().all(|r| r["run_id"] == run_id.as_str()));
        assert!(run_ids.insert(run_id), "a run answered twice");
        if terminal(results)["data"]["message"]["metadata"]["session"]["resumed"] == false {
            *fresh.entry(conversation.clone()).or_default() += 1;
        }
    }
    // Each conversation started one session and resumed it twice.
    assert_eq!(fresh.len(), 50, "{fresh:?}");
    assert!(fresh.values().all(|n| *n == 1), "{fresh:?}");
    assert_sequential(&server.workspaces(), 3);
    let history = server.get_json("/v1/conversations/conv-7/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 6, "{history}");

    let metrics = server.get_text("/metrics").await;
    for expected in [
        r#"harness_bridge_runs_total{harness="scripted",outcome="completed",code=""} 150"#,
        "harness_bridge_run_duration_seconds_count 150",
        "harness_bridge_queue_depth 0",
        "harness_bridge_runs_running 0",
    ] {
        assert!(metrics.contains(expected), "{expected} not in:\n{metrics}");
    }

    // Every log line written inside a run names it and its conversation.
    let log = server.log.lock().unwrap().clone();
    let run_lines: Vec<Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["span"]["name"] == "run")
        .collect();
    let started = run_lines
        .iter()
        .filter(|l| l["fields"]["message"] == "run started")
        .count();
    assert_eq!(started, 150, "{log:?}");
    for line in &run_lines {
        assert!(
            line["span"]["run_id"].is_string()
                && line["span"]["conversation"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("conv-")),
            "{line}"
        );
    }
}

/// Tests that watch what a bridge killed outright leaves behind: any
/// bridge that starts on this machine meanwhile sweeps it, so
/// `scripts/test` runs `alone::` tests after every other test binary.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "tier cgroup: needs a cgroup v2 the bridge may write (root or delegated); scripts/test runs it"]
    async fn a_run_in_flight_at_a_crash_is_marked_failed_on_restart() {
        for mechanism in common::MECHANISMS {
            a_crash_is_recovered_from(mechanism).await;
        }
    }

    async fn a_crash_is_recovered_from(mechanism: &str) {
        let tools = common::tempdir();
        common::scripted::install(tools.path());
        let (data, tools) = (Arc::new(common::tempdir()), Arc::new(tools));
        let mut server =
            Server::start_contained(data.clone(), tools.clone(), "hang", "", Some(mechanism)).await;
        let run = server.post_in_background();
        // The hanging harness and its three children, one out of its group.
        common::wait_for_processes(&server.workspaces(), 4).await;
        let run_id = server.started_run_id();
        assert_eq!(
            server.get_json(&format!("/v1/runs/{run_id}")).await["status"],
            "running"
        );
        // A crash: no shutdown, no chance to tidy up.
        server.child.kill().await.unwrap();
        let _ = run.await;
        drop(server);
        // What the harness started itself may outlive a bridge killed outright
        // (in its group or not); the next start (same data folder, same
        // workspaces) finds the run in the journal and ends it.
        let server = Server::start_contained(data, tools, "quiet", "", Some(mechanism)).await;
        server.assert_nothing_left().await;
        let run = server.get_json(&format!("/v1/runs/{run_id}")).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(run["code"], "interrupted", "{run}");
        let log = server.log.lock().unwrap().join("\n");
        assert!(
            log.contains(&run_id) && log.contains("marked failed"),
            "the restart says which run it marked: {log}"
        );
        assert!(
            log.lines().any(|l| l.contains(&run_id)
                && l.contains("killed what the interrupted run's harness left running")),
            "{mechanism}: the restart says it ended what the run left: {log}"
        );
        // The conversation goes on: the interrupted turn's message is in the
        // transcript with no reply, and the next turn runs and is recorded.
        let (status, results) = server.turn("c", "again").await;
        assert_eq!(status, 200);
        assert_eq!(terminal(&results)["type"], "run.completed", "{results:?}");
        let history = server.get_json("/v1/conversations/c/history").await;
        let texts: Vec<String> = history["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| format!("{}:{}", i["role"], i["content"]))
            .collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_hold_up_shutdown() {
    use tokio::io::AsyncWriteExt;
    let mut server = Server::start("flood", "").await;
    // A client that sends its turn and never reads the answer.
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = json!({"conversation": "c", "text": "hi", "run_id": "unread-1"}).to_string();
    let token = server.token.clone().expect("a token");
    let request = format!(
        "POST /v1/runs HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    server.wait_for_status("unread-1", "completed").await;
    // The run is over and journaled; the stream is still unread. SIGTERM
    // ends serve anyway (`stop` fails if it takes over 30 s).
    let started = std::time::Instant::now();
    assert!(server.stop().await.success());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    drop(tcp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_harness_is_refused_before_it_queues() {
    let server = Server::start("quiet", "").await;
    let (status, body) = server
        .post_json(json!({"conversation": "c", "text": "hi", "harness": "nope"}))
        .await;
    assert_eq!(status, 422, "{body}");
    let why = body["error"].as_str().unwrap_or_default();
    assert!(why.contains("`nope`") && why.contains("scripted"), "{body}");
    let metrics = server.get_text("/metrics").await;
    assert!(!metrics.contains("nope"), "{metrics}");
    let (status, _) = server
        .post_json(json!({"conversation": "c", "text": "hi"}))
        .await;
    assert_eq!(status, 200);
}

/// A typo in the operator's file would leave a setting off (the permission
/// lock open) or fail every turn later: `serve` does not start on it, and
/// says where, and what was meant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_does_not_start_on_a_mistyped_setting_and_says_what_was_meant() {
    let dir = common::tempdir();
    let not_a_repository = format!(
        "projects:\n  web:\n    repository: {}\n",
        dir.path().display()
    );
    let not_a_repository_said = format!(
        "bridge.yaml: project `web`: {} is not a git repository (no .git in it: name the folder",
        dir.path().display()
    );
    for (text, said) in [
        (
            "listen: 127.0.0.1:0\nfixed_config:\n  permision_mode: default\n",
            "bridge.yaml:3",
        ),
        (not_a_repository.as_str(), not_a_repository_said.as_str()),
        (
            "fixed_config:\n  permision_mode: default\n",
            "did you mean `permission_mode`?",
        ),
        ("default_harness: claude\n", "did you mean `claude-code`?"),
        (
            "harness_config:\n  codx:\n    model: m\n",
            "did you mean `codex`?",
        ),
        (
            "default_config:\n  project: wbe\n",
            "bridge.yaml:2: default_config: project `wbe` is not declared in `projects`",
        ),
        (
            "default_config:\n  model: m\n  permission_mode: yolo\n",
            "bridge.yaml:3: default_config: `yolo` is not a permission mode of Claude Code",
        ),
        (
            "harness_config:\n  codex:\n    model: m\n  claude-code:\n    permission_mode: yolo\n",
            "bridge.yaml:5: harness_config.claude-code: `yolo` is not a permission mode",
        ),
        (
            "default_config:\n  model: m\n  commands:\n    allow:\n      stop: partcipants\n",
            "bridge.yaml:3: binding config: at `commands`: `partcipants` is neither an actor id nor a word (did you mean `participants`?)",
        ),
    ] {
        std::fs::write(dir.path().join("bridge.yaml"), text).unwrap();
        for check in [&[][..], &["--check"][..]] {
            let serve = serve_in(
                dir.path(),
                &[&["serve", "--config", "bridge.yaml"], check].concat(),
            )
            .await;
            let stderr = String::from_utf8_lossy(&serve.stderr);
            assert_eq!(serve.status.code(), Some(1), "{text} {check:?}: {stderr}");
            assert!(stderr.contains(said), "{text} {check:?}: {stderr}");
        }
    }
    assert!(
        !dir.path().join("data/workspaces").exists(),
        "nothing was started"
    );
    // The example the binary carries is a file serve starts on.
    let example = serve_in(dir.path(), &["serve", "--example-config"]).await;
    assert_eq!(example.status.code(), Some(0));
    std::fs::write(dir.path().join("bridge.yaml"), &example.stdout).unwrap();
    let checked = serve_in(dir.path(), &["serve", "--config", "bridge.yaml", "--check"]).await;
    let said = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(checked.status.code(), Some(0), "{said}");
    assert!(
        said.contains("serve would start on these settings"),
        "{said}"
    );
}

/// `harness-bridge --data-dir data ARGS` in `dir`, to its end.
async fn serve_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let serve = tokio::process::Command::new(common::bridge_bin())
        .current_dir(dir)
        .args(["--data-dir", "data"])
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(20), serve)
        .await
        .expect("serve exits")
        .unwrap()
}

/// `harness-bridge ARGS` on `server`'s data folder, to its end.
async fn beside(server: &Server, args: &[&str]) -> std::process::Output {
    let command = tokio::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(server.data.path())
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(20), command)
        .await
        .expect("the command exits")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_store_is_refused_and_harms_nothing() {
    let server = Server::start("hang", "").await;
    let run = server.post_in_background();
    server.wait_for_harness().await;
    let run_id = server.started_run_id();
    let config = server.data.path().join("second.yaml");
    std::fs::write(&config, "listen: 127.0.0.1:0\n").unwrap();
    let config = config.to_str().unwrap();
    let second = beside(&server, &["serve", "--config", config]).await;
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(
        said.contains("another harness-bridge serve (pid "),
        "says why: {said}"
    );
    // So is a one-off run on its data folder: it would resume the same
    // conversations' sessions in a second process.
    let run_beside = beside(&server, &["run", "--conversation", "c1", "--text", "hi"]).await;
    let said = String::from_utf8_lossy(&run_beside.stderr);
    assert_eq!(run_beside.status.code(), Some(1), "{said}");
    let serving = format!(
        "harness-bridge serve (pid {}) is running on",
        server.child.id().unwrap()
    );
    assert!(
        said.contains(&serving) && said.contains("POST /v1/runs"),
        "says why: {said}"
    );
    assert!(run_beside.stdout.is_empty(), "no turn began");
    // The first service's run is untouched: still running, harness alive.
    assert_eq!(
        server.get_json(&format!("/v1/runs/{run_id}")).await["status"],
        "running"
    );
    assert!(common::processes_under(&server.workspaces()).len() >= 2);
    assert_eq!(
        server
            .post_status(&format!("/v1/runs/{run_id}/cancel"))
            .await,
        202
    );
    let _ = tokio::time::timeout(Duration::from_secs(20), run).await;
    server.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_needs_the_token_serve_keeps_unless_auth_is_off() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start("quiet", "").await;
    let token = server.token.clone().expect("serve generates a token");
    let file = server.data.path().join("api-token");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only the operator reads the token");
    let log = server.log.lock().unwrap().join("\n");
    assert!(!log.contains(&token), "the token is never logged: {log}");
    assert!(log.contains("api-token"), "serve says where it is: {log}");

    let stranger = reqwest::Client::new();
    let status = |r: reqwest::Response| r.status().as_u16();
    for path in ["/v1/runners", "/metrics", "/v1/runs/nope"] {
        let url = format!("{}{path}", server.url);
        assert_eq!(
            status(stranger.get(&url).send().await.unwrap()),
            401,
            "{path}"
        );
        let wrong = stranger.get(&url).bearer_auth("0123456789abcdef0123");
        assert_eq!(status(wrong.send().await.unwrap()), 401, "{path}");
    }
    let post = stranger
        .post(format!("{}/v1/runs", server.url))
        .header("content-type", "application/json")
        .body(json!({"conversation": "c", "text": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(status(post), 401);
    for path in ["/", "/healthz"] {
        let open = stranger.get(format!("{}{path}", server.url)).send().await;
        assert_eq!(status(open.unwrap()), 200, "{path}");
    }
    let runners = server.get_json("/v1/runners").await;
    assert!(runners["runners"].is_array(), "{runners}");
    // The scheme is case-insensitive; a token with anything after it is not it.
    let lower = stranger
        .get(format!("{}/v1/runners", server.url))
        .header("authorization", format!("bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(status(lower), 200);
    let longer = stranger
        .get(format!("{}/v1/runners", server.url))
        .bearer_auth(format!("{token}x"))
        .send()
        .await
        .unwrap();
    assert_eq!(status(longer), 401);

    // A restart keeps the token; `no_auth` turns it off (on loopback).
    let (data, tools) = (server.data.clone(), server.tools.clone());
    drop(server);
    let again = Server::start_in(data, tools.clone(), "quiet", "").await;
    assert_eq!(again.token.as_deref(), Some(token.as_str()));
    let open = Server::start_in(
        Arc::new(common::tempdir()),
        tools,
        "quiet",
        "no_auth: true\n",
    )
    .await;
    assert!(open.token.is_none());
    let answer = stranger
        .get(format!("{}/v1/runners", open.url))
        .send()
        .await
        .unwrap();
    assert_eq!(status(answer), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_stream_as_server_sent_events_when_asked() {
    let server = Server::start("quiet", "").await;
    let response = server
        .client
        .post(format!("{}/v1/runs", server.url))
        .header("accept", "text/event-stream")
        .body(json!({"conversation": "sse", "text": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let body = response.text().await.unwrap();
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(events.len() >= 3, "{body}");
    for (i, event) in events.iter().enumerate() {
        let field = |name: &str| {
            event
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {event:?}"))
        };
        let data: Value = serde_json::from_str(field("data: ")).unwrap();
        let sequence = i as u64 + 1;
        assert_eq!(data["sequence"], sequence, "{event}");
        assert_eq!(field("id: "), sequence.to_string());
        assert_eq!(field("event: "), data["type"].as_str().unwrap());
    }
    assert!(
        events.last().unwrap().contains("event: run.completed"),
        "{body}"
    );
}

/// Post `body`: the answer is `status`, its error saying `said`.
async fn assert_refused(server: &Server, body: Value, status: u16, said: &str) {
    let (got, answer) = server.post_json(body).await;
    assert_eq!(got, status, "{answer}");
    assert!(
        answer["error"].as_str().unwrap_or("").contains(said),
        "{answer}"
    );
}

/// Which extra MCP servers exist is the operator's to say: a request in
/// either form that tries to define one is refused before it queues, and
/// one that names a configured server gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_picks_the_operators_mcp_servers_by_name_and_defines_none() {
    let server = Server::start(
        "quiet",
        "mcp_servers:\n  search:\n    url: http://127.0.0.1:9/search\n    headers: {X-Key: op-secret}\n",
    )
    .await;
    let hostile = json!({"x": {"command": "/bin/sh", "args": ["-c", "touch /tmp/pwned"]}});
    assert_refused(
        &server,
        json!({"conversation": "c", "text": "hi", "config": {"mcp_servers": hostile}}),
        422,
        "cannot define one",
    )
    .await;
    let mut ctx = serde_json::to_value(common::context("run-hostile", "c")).unwrap();
    ctx["config"] = json!({"mcp_servers": hostile});
    let (status, body) = server.post_json(ctx).await;
    assert_eq!(status, 422, "{body}");
    // An empty conversation id, in either form, is the client's to fix too.
    assert_refused(
        &server,
        json!({"conversation": "", "text": "hi"}),
        422,
        "must not be empty",
    )
    .await;
    let mut ctx = serde_json::to_value(common::context("run-empty", "c")).unwrap();
    ctx["conversation"]["conversation_id"] = "".into();
    let (status, body) = server.post_json(ctx).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        server.holds_no_workspace(),
        "a refused request starts nothing and writes no workspace"
    );

    let (status, body) = server
        .post_json(
            json!({"conversation": "c", "text": "hi", "config": {"mcp_servers": ["search"]}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["type"], "run.completed", "{body}");
    let config = walkdir::WalkDir::new(server.workspaces())
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name() == "mcp.json")
        .expect("the harness's MCP config");
    let config: Value = serde_json::from_slice(&std::fs::read(config.path()).unwrap()).unwrap();
    assert_eq!(
        config["mcpServers"]["search"]["url"],
        "http://127.0.0.1:9/search"
    );
    let (status, body) = server
        .post_json(json!({"conversation": "c", "text": "hi", "config": {"mcp_servers": ["nope"]}}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["code"], "invalid_argument", "{body}");
    assert!(
        body["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("`nope` is not an MCP server the operator configured (configured: search)"),
        "{body}"
    );
}

/// A harness that prints without end does not take the service's memory
/// with it: past `max_run_output_bytes` the run is stopped and fails with
/// `output_too_large`, and what was kept is bounded and journaled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_output_passes_the_cap_is_stopped_and_says_why() {
    let server = Server::start("flood", "max_run_output_bytes: 1048576\n").await;
    let (status, results) = server.turn("c", "hi").await;
    assert_eq!(status, 200);
    let last = terminal(&results);
    assert_eq!(last["type"], "run.failed", "{last}");
    assert_eq!(last["data"]["code"], "output_too_large", "{last}");
    let streamed: usize = results.iter().map(|r| r.to_string().len()).sum();
    assert!(streamed < 2 * 1024 * 1024, "{streamed} bytes kept");
    let run_id = last["run_id"].as_str().unwrap();
    let run = server.wait_for_status(run_id, "failed").await;
    assert_eq!(
        run["results"].as_array().map(Vec::len),
        Some(results.len()),
        "the journal has what the stream had"
    );
    assert_failure_logged(&server, last).await;
    server.assert_nothing_left().await;
}

/// A run that fails is one WARN line in the operator's log: its code,
/// its reason and the run's fields; what the harness printed of a key is
/// not in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_logged_with_its_code_and_reason() {
    let server = Server::start("crash", "").await;
    let (status, results) = server.turn("c", "hi").await;
    assert_eq!(status, 200);
    let last = terminal(&results);
    assert_eq!(last["type"], "run.failed", "{last}");
    let line = assert_failure_logged(&server, last).await;
    assert!(!line.contains("sk-abcdefghij"), "{line}");
}

/// The operator's log line for the failed run `last` ended: found within
/// 5 s, at WARN, with its code, the start of its reason and its run id.
async fn assert_failure_logged(server: &Server, last: &Value) -> String {
    let run_id = last["run_id"].as_str().unwrap();
    let code = last["data"]["code"].as_str().unwrap();
    let reason = last["data"]["error"].as_str().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let line = loop {
        let log = server.log.lock().unwrap().clone();
        let found = log
            .into_iter()
            .find(|l| l.contains("run failed:") && l.contains(run_id));
        match found {
            Some(line) => break line,
            None if std::time::Instant::now() < until => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            None => panic!("no log line for the failed run {run_id}: {last}"),
        }
    };
    let start: String = reason.chars().take(24).collect();
    assert!(
        line.contains("WARN") && line.contains(code) && line.contains(&start),
        "{line}"
    );
    line
}

/// Connections are bounded: one that trickles half a request is closed at
/// the header deadline, idle ones beyond `max_connections` are closed as
/// they come (the service's descriptors stay bounded), and real requests
/// are served once the idle ones are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start("quiet", "header_timeout_seconds: 1\nmax_connections: 16\n").await;
    let addr = server.url.trim_start_matches("http://").to_string();

    let mut trickle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    trickle
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 256];
        loop {
            if trickle.write_all(b"X").await.is_err() {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(300), trickle.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(_)) | Err(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a trickling request was never closed");

    let pid = server.child.id().unwrap();
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let before = fds();
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = fds();
    assert!(
        during <= before + 16 + 4,
        "200 idle connections took {} descriptors",
        during - before
    );
    // The idle ones are closed at the header deadline; then real requests
    // get through again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let health = server.get_json("/healthz").await;
    assert_eq!(health["status"], "ok");
    drop(idle);
}

/// While running turns wind down after SIGTERM, the API still answers: a
/// new run hears why it is refused (503) instead of finding the port shut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sent_during_shutdown_gets_503() {
    let mut server = Server::start("hang", "shutdown_grace_seconds: 3\n").await;
    let run = server.post_in_background();
    server.wait_for_harness().await;
    let pid = nix::unistd::Pid::from_raw(server.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_refused(
        &server,
        json!({"conversation": "other", "text": "hi"}),
        503,
        "shutting down",
    )
    .await;
    let status = server.stop().await;
    assert!(status.success(), "{status:?}");
    let body = run.await.unwrap();
    assert!(body.contains("cancelled"), "{body}");
    server.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_is_a_500_whose_details_stay_in_the_log() {
    let server = Server::start("quiet", "").await;
    // Break the store under the running service.
    let db = rusqlite::Connection::open(server.data.path().join("host.db")).unwrap();
    db.execute_batch("DROP TABLE streams").unwrap();
    let response = server
        .client
        .get(format!("{}/v1/conversations/c/history", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 500);
    let body = response.text().await.unwrap();
    assert!(body.contains("log"), "{body}");
    assert!(
        !body.contains("streams"),
        "store details reached the client: {body}"
    );
    // The log keeps the details (read as serve writes it).
    let logged = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let logged = server.log.lock().unwrap().join("\n");
            if logged.contains("history read failed") {
                return logged;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the failure is logged");
    assert!(logged.contains("streams"), "{logged}");
}

/// Without tokens (`no_auth`, for development), any web page the user
/// opens could otherwise drive the API: a cross-site "simple" POST, a page
/// of another origin, or a name rebound to 127.0.0.1. Only programs and
/// the service's own page get through; every answer says it may not be
/// framed or sniffed, and the page's policy admits only its own script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_sites_cannot_drive_the_api() {
    let server = Server::start("quiet", "no_auth: true\n").await;
    let bare = reqwest::Client::new();
    let url = format!("{}/v1/runs", server.url);
    let body = json!({"conversation": "c", "text": "hi"}).to_string();
    let status = |r: reqwest::Response| r.status().as_u16();

    // What a form or a no-cors fetch of another site sends.
    let simple = bare
        .post(&url)
        .header("content-type", "text/plain")
        .header("origin", "http://evil.example")
        .body(body.clone());
    assert_eq!(status(simple.send().await.unwrap()), 403);
    let simple = bare
        .post(&url)
        .header("content-type", "text/plain")
        .body(body.clone());
    assert_eq!(status(simple.send().await.unwrap()), 415);
    let foreign = bare
        .post(&url)
        .header("content-type", "application/json")
        .header("origin", "http://evil.example")
        .body(body.clone());
    assert_eq!(status(foreign.send().await.unwrap()), 403);
    // A name that resolves here (DNS rebinding): its page is same-origin
    // with itself, but not addressed to a loopback name.
    let port = server.url.rsplit(':').next().unwrap();
    let rebound = bare
        .post(&url)
        .header("host", format!("evil.example:{port}"))
        .header("origin", format!("http://evil.example:{port}"))
        .header("content-type", "application/json")
        .body(body.clone());
    assert_eq!(status(rebound.send().await.unwrap()), 403);
    assert!(
        server.holds_no_workspace(),
        "no refused request started a turn"
    );
    let logged = server.log.lock().unwrap().join("\n");
    assert!(logged.contains("request refused"), "{logged}");

    // The service's own page, and programs, get through.
    let own = bare
        .post(&url)
        .header("content-type", "application/json")
        .header("origin", server.url.clone())
        .body(body.clone());
    assert_eq!(status(own.send().await.unwrap()), 200);
    let page = bare.get(format!("{}/", server.url)).send().await.unwrap();
    // The page runs only its own inline script (by digest) and cannot be
    // framed; every other answer, a refusal too, allows nothing at all.
    let policy = |r: &reqwest::Response| {
        let h = |name: &str| {
            r.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(h("x-frame-options").as_deref(), Some("DENY"));
        assert_eq!(h("x-content-type-options").as_deref(), Some("nosniff"));
        assert_eq!(h("referrer-policy").as_deref(), Some("no-referrer"));
        h("content-security-policy").unwrap_or_default()
    };
    let csp = policy(&page);
    assert!(
        csp.contains("script-src 'sha256-") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(status(page), 200);
    let refused = bare
        .get(format!("{}/v1/runners", server.url))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert!(policy(&refused).starts_with("default-src 'none'"));
    assert_eq!(status(refused), 403);
}

/// The scripted harness with a spec that passes the model on, to see what
/// reached it.
fn tools_passing_the_model() -> Arc<tempfile::TempDir> {
    let dir = common::tempdir();
    common::scripted::install(dir.path());
    let spec = std::fs::read_to_string(dir.path().join("adapters/scripted.yaml")).unwrap();
    std::fs::write(
        dir.path().join("adapters/scripted.yaml"),
        spec.replace(
            "new: [\"--new\", \"{prompt}\"]",
            "new: [\"--new\", [\"--model={model}\"], \"{prompt}\"]",
        ),
    )
    .unwrap();
    Arc::new(dir)
}

/// The arguments each harness of the server was given.
fn harness_args(server: &Server) -> Vec<String> {
    walkdir::WalkDir::new(server.workspaces())
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "received-args")
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect()
}

/// A request's key no binding reads would leave the setting it meant off:
/// refused, naming it, in either form, unless the operator lets such keys
/// through. A harness gets the operator's defaults for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_unknown_config_key_is_refused_and_a_harness_gets_its_own_defaults() {
    let server = Server::start_in(
        Arc::new(common::tempdir()),
        tools_passing_the_model(),
        "quiet",
        "default_config:\n  model: everyone\nharness_config:\n  scripted:\n    model: scripted-own\n",
    )
    .await;
    let (status, body) = server
        .post_json(json!({"conversation": "c1", "text": "hi", "config": {"modle": "x"}}))
        .await;
    assert_eq!(status, 422, "{body}");
    let said = body["error"].as_str().unwrap();
    assert!(
        said.contains("unknown binding key `modle` (did you mean `model`?)"),
        "{body}"
    );
    let mut ctx = serde_json::to_value(common::context("run-full", "c2")).unwrap();
    ctx["config"] = json!({"working_directory": "/srv/app"});
    let (status, body) = server.post_json(ctx).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("`working_directory`"),
        "{body}"
    );
    // A permission mode its harness lacks, or does not know: refused, named.
    let (status, body) = server
        .post_json(json!({"conversation": "c2", "text": "hi", "config": {"permission_mode": "acceptEdits"}}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("has no permission mode (`permission_mode: acceptEdits` would be left off)"),
        "{body}"
    );
    let (status, body) = server
        .post_json(
            json!({"conversation": "c2", "text": "hi", "harness": "claude-code",
            "config": {"permission_mode": "yolo"}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("`yolo` is not a permission mode of Claude Code"),
        "{body}"
    );
    assert!(harness_args(&server).is_empty(), "nothing ran");
    let (status, body) = server
        .post_json(json!({"conversation": "c3", "text": "hi"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let args = harness_args(&server);
    assert_eq!(args.len(), 1, "{args:?}");
    assert!(args[0].contains("--model=scripted-own"), "{args:?}");
    drop(server);
    // Let through where the operator says so: such a key is ignored.
    let server = Server::start_in(
        Arc::new(common::tempdir()),
        tools_passing_the_model(),
        "quiet",
        "ignore_unknown_config_keys: true\n",
    )
    .await;
    let (status, body) = server
        .post_json(json!({"conversation": "c1", "text": "hi", "config": {"client_setting": 1}}))
        .await;
    assert_eq!(status, 200, "{body}");
}

/// What the operator fixes, no request changes, in either form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_config_wins_over_every_request() {
    let tools = tools_passing_the_model();
    let server = Server::start_in(
        Arc::new(common::tempdir()),
        tools,
        "quiet",
        "fixed_config:\n  model: operator-model\n",
    )
    .await;
    let (status, body) = server
        .post_json(json!({"conversation": "c1", "text": "hi", "config": {"model": "client-model"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut ctx = serde_json::to_value(common::context("run-full", "c2")).unwrap();
    ctx["config"] = json!({"model": "client-model"});
    let (status, body) = server.post_json(ctx).await;
    assert_eq!(status, 200, "{body}");
    let args = harness_args(&server);
    assert_eq!(args.len(), 2, "{args:?}");
    for args in args {
        assert!(args.contains("--model=operator-model"), "{args}");
        assert!(!args.contains("client-model"), "{args}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_answer_needs_an_open_request_and_says_so_in_a_sentence() {
    let server = Server::start("quiet", "").await;
    // An answer to a card that was never asked (or answered, or expired):
    // the person is told, and no harness runs.
    let (status, done) = server
        .post_json(json!({
            "conversation": "c",
            "interaction": {"interaction_id": "ask-run-gone", "action_id": "submit", "values": {"answer": "1"}},
        }))
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["type"], "run.completed", "{done}");
    let said = done["data"]["message"]["content"].to_string();
    assert!(said.contains("no longer open"), "{done}");
    assert!(
        !walkdir::WalkDir::new(server.workspaces())
            .into_iter()
            .filter_map(Result::ok)
            .any(|e| e.file_name() == "received-args"),
        "no harness ran"
    );
    // A malformed answer is the client's to fix, said before anything queues.
    let (status, body) = server
        .post_json(
            json!({"conversation": "c", "interaction": {"interaction_id": "x", "choice": 1}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `choice`"),
        "{body}"
    );
    let (status, body) = server.post_json(json!({"conversation": "c"})).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("give the turn's text"),
        "{body}"
    );
}

/// What the operator console reads: a run by id says who asked and when
/// (while it runs, from the service; once ended, from the ledger) with its
/// audit rows; a conversation says its stored resume pointer and last
/// runs; usage sums the ledger by person or day; the live list and the
/// runner list (only installed harnesses marked so) answer; none of it
/// without the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_runs_conversations_usage_and_live_processes() {
    let tools = common::tempdir();
    common::scripted::install(tools.path());
    // A harness whose program is nowhere: listed, but not installed.
    let absent = common::scripted::SPEC
        .replace("name: scripted", "name: absent")
        .replace("binary: scripted-harness", "binary: no-such-harness-here");
    std::fs::write(tools.path().join("adapters/absent.yaml"), absent).unwrap();
    let server = Server::start_in(Arc::new(common::tempdir()), Arc::new(tools), "slow", "").await;
    let running = server.post_body_in_background(
        json!({"conversation": "c-ann", "actor": "ann", "text": "hi", "run_id": "run-ann"}),
    );
    let run = server.wait_for_status("run-ann", "running").await;
    assert_eq!(
        (run["actor_id"].as_str(), run["conversation_id"].as_str()),
        (Some("ann"), Some("c-ann")),
        "{run}"
    );
    assert!(
        run["started_ms"].as_i64() >= run["accepted_ms"].as_i64(),
        "{run}"
    );
    assert!(run["ended_ms"].is_null(), "{run}");
    running.await.unwrap();
    let (status, _) = server
        .post_json(
            json!({"conversation": "c-bob", "actor": "bob", "text": "hi", "run_id": "run-bob"}),
        )
        .await;
    assert_eq!(status, 200);

    // Ended: the ledger's row (who, when, how it ended) and its audit rows.
    let run = server.get_json("/v1/runs/run-ann").await;
    assert_eq!(
        (
            run["status"].as_str(),
            run["actor_id"].as_str(),
            run["outcome"].as_str()
        ),
        (Some("completed"), Some("ann"), Some("completed")),
        "{run}"
    );
    assert!(
        run["ended_ms"].as_i64() >= run["started_ms"].as_i64(),
        "{run}"
    );
    assert!(run["audit"].is_array(), "{run}");
    assert!(!run["results"].as_array().unwrap().is_empty(), "{run}");

    // The conversation: its resume pointer from the store, its runs.
    let chat = server.get_json("/v1/conversations/c-ann").await;
    let state = &chat["state"]["scripted"];
    assert_eq!(state["external.session_id"], "scripted-1", "{chat}");
    assert_eq!(state["external.harness"], "scripted", "{chat}");
    assert_eq!(chat["runs"][0]["run_id"], "run-ann", "{chat}");
    assert_eq!(chat["usage"]["runs"], 1, "{chat}");
    assert_eq!(chat["pending"], json!({}), "{chat}");
    assert_eq!(chat["in_flight"], json!([]), "{chat}");
    let missing = server
        .client
        .get(format!("{}/v1/conversations/nobody-here", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    the_ledger_is_summed_by_what_is_asked(&server).await;

    // The scripted harness is one-shot: nothing stays live.
    let live = server.get_json("/v1/live").await;
    assert_eq!(live["sessions"], json!([]), "{live}");
    let runners = server.get_json("/v1/runners").await;
    let installed = |name: &str| {
        runners["runners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["runner_name"] == name)
            .map(|r| r["installed"].clone())
    };
    assert_eq!(installed("scripted"), Some(json!(true)), "{runners}");
    assert_eq!(installed("absent"), Some(json!(false)), "{runners}");

    let stranger = reqwest::Client::new();
    for path in [
        "/v1/runs/run-ann",
        "/v1/conversations/c-ann",
        "/v1/usage",
        "/v1/live",
    ] {
        let answer = stranger
            .get(format!("{}{path}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 401, "{path}");
    }
}

/// `GET /v1/usage` by person, day and harness (filtered by actor), a
/// grouping it does not know refused; the conversations of a harness
/// that ran nothing: none.
async fn the_ledger_is_summed_by_what_is_asked(server: &Server) {
    // Usage by person and by day; a grouping it does not know is refused.
    let by_actor = server.get_json("/v1/usage?by=actor&days=7").await;
    let mut people: Vec<(&str, u64)> = by_actor["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["key"].as_str().unwrap(), t["runs"].as_u64().unwrap()))
        .collect();
    people.sort();
    assert_eq!(people, [("ann", 1), ("bob", 1)], "{by_actor}");
    let by_day = server.get_json("/v1/usage?by=day").await;
    assert_eq!(by_day["totals"][0]["runs"], 2, "{by_day}");
    let bob = server.get_json("/v1/usage?by=harness&actor=bob").await;
    assert_eq!(bob["totals"][0]["key"], "scripted", "{bob}");
    assert_eq!(bob["totals"][0]["runs"], 1, "{bob}");
    let wrong = server
        .client
        .get(format!("{}/v1/usage?by=colour", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 400);
    let filtered = server.get_json("/v1/conversations?harness=absent").await;
    assert_eq!(filtered["conversations"], json!([]), "{filtered}");
}

/// A harness the settings route turns to that cannot start is said
/// before any turn: `serve --check` fails naming a `harness_binaries`
/// path that is not there, and a program in the folder that holds the
/// workspaces (the cage would not let it start), each with the fix;
/// `doctor --config` says where the store, its journal and the workspaces
/// are and each routed harness's program.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_cannot_start_is_said_before_any_turn() {
    let dir = common::tempdir();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let inside = data.join("claude");
    std::fs::copy("/bin/true", &inside).unwrap();
    for (program, said) in [
        (
            "/opt/claude/bin/claude".to_string(),
            "harness_binaries names /opt/claude/bin/claude, which is not an executable file there",
        ),
        (
            inside.display().to_string(),
            "which holds the conversations' workspaces, and no harness may read that folder whole",
        ),
    ] {
        std::fs::write(
            dir.path().join("bridge.yaml"),
            format!("harness_binaries:\n  claude-code: {program}\n"),
        )
        .unwrap();
        let checked = serve_in(dir.path(), &["serve", "--config", "bridge.yaml", "--check"]).await;
        let stderr = String::from_utf8_lossy(&checked.stderr);
        assert_eq!(checked.status.code(), Some(1), "{stderr}");
        assert!(
            stderr
                .contains("bridge.yaml: a harness it routes turns to cannot start: claude-code: ")
                && stderr.contains(said),
            "{stderr}"
        );
    }
    let doctor = tokio::process::Command::new(common::bridge_bin())
        .current_dir(dir.path())
        .args(["--data-dir", "data", "doctor", "--config"])
        .arg(dir.path().join("bridge.yaml"))
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.contains(&format!(
            "where: the store in {}, its journal {}; the workspaces (worktrees and homes) in {}",
            data.display(),
            data.join("serve-runs.db").display(),
            data.join("workspaces").display()
        )),
        "{said}"
    );
    assert!(
        said.contains("harness: claude-code: the cage would not let it start"),
        "{said}"
    );
}

/// A port another program holds fails `serve --check`, and `serve` on it
/// stops saying so before it writes anything (no API token, no journal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_fails_the_check_and_serve_writes_nothing() {
    let dir = common::tempdir();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    std::fs::write(
        dir.path().join("bridge.yaml"),
        format!("listen: 127.0.0.1:{port}\ndefault_harness: codex\n"),
    )
    .unwrap();
    for check in [&["--check"][..], &[][..]] {
        let out = serve_in(
            dir.path(),
            &[&["serve", "--config", "bridge.yaml"], check].concat(),
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{check:?}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot listen on 127.0.0.1:{port}"))
                && stderr.contains("choose another `listen`"),
            "{check:?}: {stderr}"
        );
    }
    let data = dir.path().join("data");
    for written in ["api-token", "serve-runs.db"] {
        assert!(!data.join(written).exists(), "{written} was written");
    }
    drop(held);
}

/// A turn a budget refuses is a row of its own (outcome `refused`, the
/// limit's code) in the runs listed and counted apart from the runs and
/// the failures in the usage; `/usage` says a limit reached now, and
/// when it resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_a_budget_refuses_is_listed_and_counted_apart() {
    let tools = common::tempdir();
    common::scripted::install(tools.path());
    let server = Server::start_in(
        Arc::new(common::tempdir()),
        Arc::new(tools),
        "usage",
        "budgets:\n  actor: {turns_per_minute: 1, tokens_per_day: 1}\n",
    )
    .await;
    let turn = |run_id: &str| json!({"conversation": "c-rate", "actor": "ann", "text": "hi", "run_id": run_id});
    let first = server.results(turn("rate-1")).await;
    assert_eq!(first.last().unwrap()["type"], "run.completed", "{first:?}");
    let second = server.results(turn("rate-2")).await;
    let end = second.last().unwrap();
    assert_eq!(end["data"]["code"], "limit_reached", "{end}");

    let runs = server.get_json("/v1/runs?actor=ann").await;
    let refused = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == "rate-2")
        .unwrap_or_else(|| panic!("the refused turn is not listed: {runs}"));
    assert_eq!(
        (refused["outcome"].as_str(), refused["code"].as_str()),
        (Some("refused"), Some("limit_reached")),
        "{refused}"
    );
    let usage = server.get_json("/v1/usage?by=actor&actor=ann").await;
    let row = &usage["totals"][0];
    assert_eq!(
        (
            row["runs"].as_u64(),
            row["failed"].as_u64(),
            row["refused"].as_u64()
        ),
        (Some(1), Some(0), Some(1)),
        "{usage}"
    );
    let conversation = server.get_json("/v1/conversations/c-rate").await;
    assert_eq!(conversation["usage"]["refused"], 1, "{conversation}");

    let said = server
        .results(json!({"conversation": "c-rate", "actor": "ann", "text": "/usage"}))
        .await;
    let said = said.last().unwrap()["data"]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        said.contains("Reached today: ") && said.contains("new turns are refused until "),
        "{said}"
    );
}
