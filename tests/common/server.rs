//! `harness-bridge serve` as a child process: started on an OS-chosen
//! loopback port with a given `bridge.yaml` and environment, its stderr
//! (JSON log lines) kept for the test to read.

use std::sync::{Arc, Mutex};

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

pub struct ServeProcess {
    pub child: tokio::process::Child,
    pub url: String,
    pub data: Arc<tempfile::TempDir>,
    /// Sends the service's token on every request.
    pub client: reqwest::Client,
    /// The token serve generated in `DATA/api-token` (none with `no_auth`).
    pub token: Option<String>,
    /// Every line serve wrote to stderr.
    pub log: Arc<Mutex<Vec<String>>>,
}

/// A test that fails with a serve running prints what it warned of: on
/// a loaded machine the reason is often there (a lease that lapsed, a
/// host call that timed out), and the log is lost with the process.
impl Drop for ServeProcess {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let warned: Vec<&String> = log
            .iter()
            .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
            .collect();
        let shown = &warned[warned.len().saturating_sub(30)..];
        eprintln!(
            "--- serve at {} warned {} times; the last {}:",
            self.url,
            warned.len(),
            shown.len()
        );
        for line in shown {
            eprintln!("{line}");
        }
    }
}

impl ServeProcess {
    /// Start serve on `data` with `config` (`listen: 127.0.0.1:0` is
    /// added) and exactly `env`.
    pub async fn spawn(
        data: Arc<tempfile::TempDir>,
        config: &str,
        env: &[(&str, String)],
    ) -> ServeProcess {
        Self::try_spawn(data, config, env)
            .await
            .unwrap_or_else(|said| panic!("serve exited before listening: {said:?}"))
    }

    /// [`ServeProcess::spawn`], or what serve said when it exited before
    /// listening (a start that fails is what some tests count).
    pub async fn try_spawn(
        data: Arc<tempfile::TempDir>,
        config: &str,
        env: &[(&str, String)],
    ) -> Result<ServeProcess, Vec<String>> {
        let file = data.path().join("bridge.yaml");
        std::fs::write(&file, format!("listen: 127.0.0.1:0\n{config}")).unwrap();
        let mut child = tokio::process::Command::new(super::bridge_bin())
            .arg("--data-dir")
            .arg(data.path())
            .args(["--log-format", "json", "serve"])
            .arg("--config")
            .arg(&file)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("serve starts");
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        let url = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("harness-bridge serving on ") {
                    return Some(url.to_string());
                }
                log.lock().unwrap().push(line);
            }
            None
        })
        .await
        .expect("serve listens in time");
        let Some(url) = url else {
            let said = log.lock().unwrap().clone();
            return Err(said);
        };
        // Keep draining stderr so the server never blocks on it.
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        let token = std::fs::read_to_string(data.path().join("api-token")).ok();
        let mut headers = reqwest::header::HeaderMap::new();
        // The API takes JSON only (a page of another site cannot send it).
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            "application/json".parse().unwrap(),
        );
        if let Some(token) = &token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap();
        Ok(ServeProcess {
            child,
            url,
            data,
            client,
            token,
            log,
        })
    }

    /// `harness-bridge console-link` as the operator runs it beside this
    /// serve (its data folder, its address).
    pub async fn console_link(&self) -> std::process::Output {
        tokio::process::Command::new(super::bridge_bin())
            .arg("--data-dir")
            .arg(self.data.path())
            .args(["console-link", "--url", &self.url])
            .output()
            .await
            .expect("console-link runs")
    }

    pub async fn get_text(&self, path: &str) -> String {
        let response = self.client.get(format!("{}{path}", self.url)).send().await;
        response.expect("answered").text().await.unwrap_or_default()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let text = self.get_text(path).await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// POST a run (`body`: either form) and read its whole result stream.
    pub async fn results(&self, body: Value) -> Vec<Value> {
        self.spawn_results(body).await.expect("the turn's task")
    }

    /// [`ServeProcess::results`] in a task of its own, for a turn that is
    /// still running while the test does something else.
    pub fn spawn_results(&self, body: Value) -> tokio::task::JoinHandle<Vec<Value>> {
        let (client, url) = (self.client.clone(), self.url.clone());
        tokio::spawn(async move {
            let response = client
                .post(format!("{url}/v1/runs"))
                .body(body.to_string())
                .send()
                .await
                .expect("answered");
            assert_eq!(response.status(), 200);
            let text = response.text().await.unwrap_or_default();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        })
    }

    /// POST a run and read its result stream as it comes: each result with
    /// the time it arrived, from the request.
    pub async fn timed_results(&self, body: Value) -> Vec<(Duration, Value)> {
        let started = std::time::Instant::now();
        let mut response = self
            .client
            .post(format!("{}/v1/runs", self.url))
            .body(body.to_string())
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), 200);
        let mut results = Vec::new();
        let mut pending = Vec::new();
        while let Some(chunk) = response.chunk().await.expect("the stream reads") {
            let at = started.elapsed();
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..end]).into_owned();
                if !line.trim().is_empty() {
                    let result =
                        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
                    results.push((at, result));
                }
            }
        }
        results
    }

    /// Cancel run `run_id` (it must be there to cancel) and wait for the
    /// results of `running`, the task that posted it.
    pub async fn cancel_and_wait(
        &self,
        run_id: &str,
        running: tokio::task::JoinHandle<Vec<Value>>,
    ) -> Vec<Value> {
        let cancelled = self
            .client
            .post(format!("{}/v1/runs/{run_id}/cancel", self.url))
            .send()
            .await
            .expect("answered");
        assert_eq!(cancelled.status(), 202);
        tokio::time::timeout(Duration::from_secs(30), running)
            .await
            .expect("the cancelled turn ends")
            .expect("the turn's task")
    }

    /// A run's results as `GET /v1/runs/{id}` streams them (NDJSON).
    pub async fn stream_of(&self, run_id: &str) -> Vec<Value> {
        stream_of(self.client.clone(), self.url.clone(), run_id.to_string()).await
    }

    pub fn workspaces(&self) -> std::path::PathBuf {
        self.data.path().join("workspaces")
    }

    /// Whether no turn has made a workspace yet (the folder that holds
    /// them may be there: a root bridge makes it at start, for its
    /// harnesses to pass through).
    pub fn holds_no_workspace(&self) -> bool {
        std::fs::read_dir(self.workspaces()).map_or(true, |mut entries| entries.next().is_none())
    }

    /// Stop this serve and start another on the same data folder and
    /// bridge.yaml, with `env`: an operator's restart.
    pub async fn restart(mut self, env: &[(&str, String)]) -> ServeProcess {
        self.stop().await;
        let config = std::fs::read_to_string(self.data.path().join("bridge.yaml")).unwrap();
        let config = config
            .strip_prefix("listen: 127.0.0.1:0\n")
            .unwrap_or(&config);
        ServeProcess::spawn(self.data.clone(), config, env).await
    }

    /// Wait (bounded) until serve has logged a line holding `text`: the
    /// lines of a process that just ended may still be on their way.
    pub async fn wait_for_log(&self, text: &str) {
        let logged = tokio::time::timeout(Duration::from_secs(10), async {
            while !self.log.lock().unwrap().iter().any(|l| l.contains(text)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if logged.is_err() {
            let log = self.log.lock().unwrap().join("\n");
            panic!("serve never logged {text:?}; it logged:\n{log}");
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id().expect("running") as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve exits")
            .unwrap()
    }
}

/// A real `serve` running the real Claude Code against the fake model at
/// `model_url`, with `extra` added to its bridge.yaml.
pub async fn serve_claude(model_url: String, extra: &str) -> (ServeProcess, tempfile::TempDir) {
    serve_claude_with(model_url, extra, &[]).await
}

/// [`serve_claude`] with more of serve's environment.
pub async fn serve_claude_with(
    model_url: String,
    extra: &str,
    more_env: &[(&str, String)],
) -> (ServeProcess, tempfile::TempDir) {
    let claude = super::cli("claude");
    let data = Arc::new(crate::tempdir());
    super::seed_decision(data.path(), super::anthropic::CONVERSATION).await;
    let home = crate::tempdir();
    let config = format!(
        "harness_binaries:\n  claude-code: {}\nshutdown_grace_seconds: 5\n{extra}",
        claude.display()
    );
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        (
            "CLAUDE_CONFIG_DIR",
            home.path().join(".claude").display().to_string(),
        ),
        ("ANTHROPIC_BASE_URL", model_url),
        ("ANTHROPIC_API_KEY", "test-key".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
    ];
    let mut env = env.to_vec();
    env.extend_from_slice(more_env);
    (ServeProcess::spawn(data, &config, &env).await, home)
}

/// The session a completed turn ran in: its id, and whether it resumed.
pub fn session_of(terminal: &Value) -> (String, bool) {
    assert_eq!(terminal["type"], "run.completed", "{terminal}");
    let session = &terminal["data"]["message"]["metadata"]["session"];
    (
        session["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        session["resumed"] == true,
    )
}

impl ServeProcess {
    /// A chat command as a person sends it: the bridge's answer (its
    /// `run.completed`, finish reason `command`) and how long it took.
    pub async fn command(&self, conversation: &str, actor: &str, text: &str) -> (String, Duration) {
        let asked = std::time::Instant::now();
        let body = serde_json::json!({"conversation": conversation, "actor": actor, "text": text});
        let results = self.results(body).await;
        let took = asked.elapsed();
        let end = results.last().expect("results");
        assert_eq!(end["data"]["finish_reason"], "command", "{results:?}");
        let said = end["data"]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        (said.to_string(), took)
    }
}

/// A run's results as `GET URL/v1/runs/{id}` streams them (NDJSON), with
/// owned arguments for a task of its own.
pub async fn stream_of(client: reqwest::Client, url: String, run_id: String) -> Vec<Value> {
    client
        .get(format!("{url}/v1/runs/{run_id}"))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

impl ServeProcess {
    /// An operator's restart after the one worktree of `repo` went `idle`
    /// without a turn (its use backdated): serve puts it away as it
    /// starts, and this returns once it has (its record, which goes last,
    /// gone).
    pub async fn restart_after_idle(
        self,
        repo: &std::path::Path,
        idle: Duration,
        env: &[(&str, String)],
    ) -> ServeProcess {
        let own = repo.join(".git/harness-bridge");
        let records: Vec<std::path::PathBuf> = std::fs::read_dir(&own)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "worktree"))
            .collect();
        assert_eq!(records.len(), 1, "{records:?}");
        std::fs::File::options()
            .write(true)
            .open(&records[0])
            .unwrap()
            .set_modified(std::time::SystemTime::now() - idle)
            .unwrap();
        let serve = self.restart(env).await;
        tokio::time::timeout(Duration::from_secs(30), async {
            while records[0].exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            let log = serve.log.lock().unwrap().join("\n");
            panic!("the idle worktree is put away at serve's start; serve said:\n{log}")
        });
        serve
    }
}
