//! `harness-bridge serve` as a client meets it, with the scripted harness:
//! turns of one conversation in order (the second resumes the first), a
//! full queue answers 429, cancel stops a run's process group, and SIGTERM
//! during a run leaves no process behind.

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

struct Server {
    child: tokio::process::Child,
    url: String,
    data: tempfile::TempDir,
    _tools: tempfile::TempDir,
    client: reqwest::Client,
}

impl Server {
    /// A server whose harness (`scripted`) acts as `mode` says.
    async fn start(mode: &str, extra: &str) -> Server {
        let tools = tempfile::tempdir().unwrap();
        common::scripted::install(tools.path());
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("bridge.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:0\nadapters: {}\ndefault_harness: scripted\nkill_grace_seconds: 1\nset_env:\n  FAKE_MODE: {mode}\n{extra}",
                tools.path().join("adapters").display()
            ),
        )
        .unwrap();
        let mut child = tokio::process::Command::new(common::bridge_bin())
            .arg("--data-dir")
            .arg(data.path())
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    tools.path().display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("serve starts");
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("harness-bridge serving on ") {
                    return url.to_string();
                }
            }
            panic!("serve exited before listening");
        })
        .await
        .expect("serve listens in time");
        // Keep draining stderr so the server never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server {
            child,
            url,
            data,
            _tools: tools,
            client: reqwest::Client::new(),
        }
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

    async fn get_json(&self, path: &str) -> Value {
        let response = self.client.get(format!("{}{path}", self.url)).send().await;
        let text = response.expect("answered").text().await.unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    fn workspaces(&self) -> std::path::PathBuf {
        self.data.path().join("workspaces")
    }

    /// Post a turn and read its stream in the background.
    fn post_in_background(&self) -> tokio::task::JoinHandle<String> {
        let client = self.client.clone();
        let url = self.url.clone();
        tokio::spawn(async move {
            let response = client
                .post(format!("{url}/v1/runs"))
                .body(json!({"conversation": "c", "text": "hi"}).to_string())
                .send()
                .await;
            match response {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        })
    }

    /// Wait until the (hanging) harness and its child run.
    async fn wait_for_harness(&self) {
        common::wait_for_processes(&self.workspaces(), 2).await;
    }
}

fn terminal(results: &[Value]) -> &Value {
    results.last().expect("results")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_one_conversation_run_in_order_and_resume() {
    let server = Server::start("slow", "").await;
    let (first, second) = tokio::join!(server.turn("chat-1", "one"), async {
        // Sent right behind the first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.turn("chat-1", "two").await
    });
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
    assert_eq!(
        first.1.last().unwrap()["data"]["message"]["metadata"]["session"]["resumed"],
        false
    );
    assert_eq!(
        second.1.last().unwrap()["data"]["message"]["metadata"]["session"]["resumed"],
        true
    );
    // Results stay retrievable by run id.
    let run_id = terminal(&second.1)["run_id"].as_str().unwrap();
    let run = server.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["results"].as_array().unwrap().len(), second.1.len());
    let history = server.get_json("/v1/conversations/chat-1/history").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 4, "{history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429() {
    let server = Server::start("slow", "max_queue_per_conversation: 1\n").await;
    let (a, b, c) = tokio::join!(
        server.turn("busy", "a"),
        server.turn("busy", "b"),
        server.turn("busy", "c")
    );
    let statuses = [a.0, b.0, c.0];
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
    let refused = [&a, &b, &c].into_iter().find(|r| r.0 == 429).unwrap();
    assert!(refused.1[0]["error"].as_str().unwrap().contains("waiting"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_run_and_its_process_group() {
    let server = Server::start("hang", "").await;
    let run = server.post_in_background();
    server.wait_for_harness().await;
    let root = server.workspaces();
    // The run id is in the run's first results; find it through the runner's workspace.
    let run_id = {
        let file = walkdir::WalkDir::new(&root)
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
    };
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
    assert!(common::processes_under(&root).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_run_stops_everything() {
    let mut server = Server::start("hang", "shutdown_grace_seconds: 1\n").await;
    let run = server.post_in_background();
    server.wait_for_harness().await;
    let root = server.workspaces();
    let pid = nix::unistd::Pid::from_raw(server.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), server.child.wait())
        .await
        .expect("serve exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let body = run.await.unwrap();
    let last: Value =
        serde_json::from_str(body.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    assert_eq!(
        last["data"]["code"], "cancelled",
        "the client saw the run end: {body}"
    );
    let left = common::processes_under(&root);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
