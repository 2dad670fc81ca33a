//! The bridge binary as a user runs it: `harness-bridge run` spawned with
//! exactly the environment a test gives, its NDJSON results read as they
//! stream ([`BridgeTurn`]), and what a turn's results say (its workspace,
//! the card it asked with).

use std::path::PathBuf;

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

/// The bridge binary built for these tests: cargo puts it in the
/// profile's folder, and a test or bench binary in its `deps/` below
/// (`CARGO_BIN_EXE_*` is set only when compiling the tests themselves).
pub fn bridge_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("a test binary in target/<profile>/deps");
        let bin = profile.join("harness-bridge");
        assert!(
            bin.is_file(),
            "the bridge is not built at {}",
            bin.display()
        );
        bin.to_string_lossy().into_owned()
    })
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
