//! `harness-bridge run` with a scripted harness: a shell script, declared
//! by an operator's adapter spec, that records what it was given and
//! prints a recorded Claude stream-json turn. It shows what the real CLIs
//! cannot be made to do on cue: the exact environment the harness gets,
//! the prompt on stdin, outbox files becoming artifacts, a crash with
//! secrets in its stderr, a stderr line of 256 MiB, Ctrl-C, a bridge
//! killed outright, and a context that is not valid.

use harness_bridge_testkit as common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{BridgeTurn, bridge_run, processes_under};
use serde_json::Value;

struct Setup {
    data: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let tools = common::tempdir();
        common::scripted::install(tools.path());
        Setup {
            data: common::tempdir(),
            tools,
        }
    }

    fn args<'a>(&'a self, adapters: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["--adapters", adapters];
        if !extra.contains(&"--harness") {
            args.extend(["--harness", "scripted"]);
        }
        if !extra.contains(&"--context") {
            args.extend(["--conversation", "chat-7", "--text", "Summarise the plan"]);
        }
        args.extend_from_slice(extra);
        args
    }

    /// `harness-bridge run` with the harness hanging, as a child process
    /// (stdout piped) the test can signal.
    fn spawn_hanging_run(&self, extra: &[&str]) -> tokio::process::Child {
        self.spawn_run("hang", extra, &[])
    }

    /// `harness-bridge run` with the harness in `mode`, as a child process
    /// (stdout piped) the test can signal; `env` for the bridge.
    fn spawn_run(&self, mode: &str, extra: &[&str], env: &[(&str, &str)]) -> tokio::process::Child {
        let adapters = self.tools.path().join("adapters");
        let adapters = adapters.to_string_lossy().into_owned();
        tokio::process::Command::new(common::bridge_bin())
            .arg("--data-dir")
            .arg(self.data.path())
            .arg("run")
            .args(self.args(&adapters, extra))
            .env_clear()
            .env("PATH", self.path_with_script())
            .env("FAKE_MODE", mode)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the bridge starts")
    }

    fn path_with_script(&self) -> String {
        format!(
            "{}:{}",
            self.tools.path().display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    async fn run(&self, mode: &str, extra: &[&str]) -> BridgeTurn {
        self.run_with(mode, extra, &[]).await
    }

    /// [`Setup::run`] with more variables for the bridge.
    async fn run_with(&self, mode: &str, extra: &[&str], more: &[(&str, &str)]) -> BridgeTurn {
        let adapters = self.tools.path().join("adapters");
        let adapters = adapters.to_string_lossy().into_owned();
        let args = self.args(&adapters, extra);
        let mut env = vec![
            ("PATH", self.path_with_script()),
            ("FAKE_MODE", mode.to_string()),
            ("FAKE_VISIBLE", "yes".to_string()),
            ("BRIDGE_ONLY_SECRET", "do-not-pass".to_string()),
            ("HOME", self.data.path().to_string_lossy().into_owned()),
        ];
        env.extend(more.iter().map(|(k, v)| (*k, v.to_string())));
        bridge_run(self.data.path(), &args, &env).await
    }

    /// A context file for conversation `chat-7` saying `text`, as `edit`
    /// leaves it: what `--context` is given.
    fn context_file(
        &self,
        name: &str,
        text: &str,
        edit: impl FnOnce(&mut harness_bridge::protocol::AgentRunContext),
    ) -> String {
        let mut ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
            conversation: "chat-7",
            actor: "local-user",
            text,
            config: Default::default(),
            answer: None,
        })
        .unwrap();
        edit(&mut ctx);
        let file = self.data.path().join(name);
        std::fs::write(&file, serde_json::to_vec(&ctx).unwrap()).unwrap();
        file.to_string_lossy().into_owned()
    }

    fn workspace(&self, turn: &BridgeTurn) -> PathBuf {
        let dir = turn
            .state("external.working_directory")
            .and_then(Value::as_str)
            .map(PathBuf::from);
        dir.unwrap_or_else(|| {
            walkdir::WalkDir::new(self.data.path().join("workspaces"))
                .into_iter()
                .filter_map(Result::ok)
                .find(|e| e.file_name() == "received-env")
                .and_then(|e| e.path().parent().map(Path::to_path_buf))
                .expect("a workspace the harness ran in")
        })
    }
}

fn env_of(workspace: &Path) -> Vec<String> {
    std::fs::read_to_string(workspace.join("received-env"))
        .unwrap()
        .lines()
        .map(|l| l.split('=').next().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_gets_the_whitelist_the_prompt_and_its_outbox_back() {
    let setup = Setup::new();
    let turn = setup.run("ok", &[]).await;
    turn.completed();
    let workspace = setup.workspace(&turn);

    // Environment: the spec's whitelist, its fixed values and the run's
    // own variables (MCP token and endpoint, turn marker, the home of the
    // conversation's own, the proxy at its door); nothing else from the
    // bridge's environment.
    let mut names = env_of(&workspace);
    names.retain(|n| !n.is_empty() && n != "PWD" && n != "SHLVL" && n != "_");
    names.sort();
    assert_eq!(
        names,
        vec![
            "ALL_PROXY",
            "CLAUDE_CONFIG_DIR",
            "FAKE_MODE",
            "FAKE_VISIBLE",
            "FIXED_BY_SPEC",
            "HARNESS_BRIDGE_TURN",
            "HOME",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "LANGBOT_MCP_TOKEN",
            "LANGBOT_MCP_URL",
            "NO_PROXY",
            "PATH",
            "TMPDIR",
            "all_proxy",
            "http_proxy",
            "https_proxy",
            "no_proxy"
        ]
    );
    let received = std::fs::read_to_string(workspace.join("received-env")).unwrap();
    let home = workspace.join(".langbot/home");
    assert!(
        received.contains(&format!("\nHOME={}\n", home.display()))
            || received.starts_with(&format!("HOME={}\n", home.display())),
        "{received}"
    );
    assert!(
        received.contains(&format!(
            "CLAUDE_CONFIG_DIR={}\n",
            home.join(".claude").display()
        )),
        "{received}"
    );
    // The prompt went to stdin (the spec says so) and argv; the token did not ride argv.
    let stdin = std::fs::read_to_string(workspace.join("received-stdin")).unwrap();
    assert!(stdin.contains("Summarise the plan"), "{stdin}");
    let args = std::fs::read_to_string(workspace.join("received-args")).unwrap();
    assert!(args.starts_with("--new\n"), "{args}");
    let env = std::fs::read_to_string(workspace.join("received-env")).unwrap();
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("LANGBOT_MCP_TOKEN="))
        .unwrap();
    assert!(!args.contains(token));
    // The endpoint rides along, for a stdio relay the harness may launch.
    let url = env
        .lines()
        .find_map(|l| l.strip_prefix("LANGBOT_MCP_URL="))
        .unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );

    // Outbox files: each exactly once; small inline, large in the store.
    let artifacts: Vec<&Value> = turn
        .results
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r["type"] == "artifact.created")
        .collect();
    let mut names: Vec<&str> = artifacts
        .iter()
        .map(|a| a["data"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["charts/big.bin", "note.txt"]);
    let note = artifacts
        .iter()
        .find(|a| a["data"]["name"] == "note.txt")
        .unwrap();
    assert_eq!(note["data"]["content_base64"], "aGVsbG8=");
    assert_eq!(note["data"]["mime_type"], "text/plain");
    let big = artifacts
        .iter()
        .find(|a| a["data"]["name"] == "charts/big.bin")
        .unwrap();
    assert!(big["data"].get("content_base64").is_none());
    assert_eq!(big["data"]["size_bytes"], 2 * 1024 * 1024);
    let id = big["data"]["artifact_id"]
        .as_str()
        .expect("stored artifact");
    let store = harness_bridge::host::sqlite::SqliteHost::open(setup.data.path()).unwrap();
    let scope = harness_bridge::host::RunScope {
        conversation_id: Some("chat-7".into()),
        ..Default::default()
    };
    use harness_bridge::host::HostProxy as _;
    let meta = store.artifact_metadata(&scope, id).await.unwrap();
    assert_eq!(meta.size_bytes, Some(2 * 1024 * 1024));
    // The malformed line was skipped, not fatal; the reply was recorded.
    assert_eq!(
        turn.first("message.completed").unwrap()["data"]["message"]["content"],
        "Done."
    );

    // Turn 2 resumes the scripted session and writes nothing: turn 1's
    // outbox files are not sent again.
    let second = setup.run("quiet", &[]).await;
    second.completed();
    assert_eq!(second.session()["resumed"], true);
    let args = std::fs::read_to_string(workspace.join("received-args")).unwrap();
    assert!(args.starts_with("--resume\nscripted-1\n"), "{args}");
    assert!(
        second.first("artifact.created").is_none(),
        "{:?}",
        second.kinds()
    );
}

/// A hard link the harness puts in its outbox, to a file outside the
/// workspace (a regular file: no `O_NOFOLLOW` refuses it), is named with a
/// sentence saying why it is withheld; its bytes reach neither a result
/// nor the artifact store, small or large. The outbox's own files go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_link_in_the_outbox_is_named_and_withheld() {
    const MARK: &str = "outside-the-workspace-4f2a";
    let setup = Setup::new();
    // Beside the data folder: the same file system, as a link needs.
    let outside = tempfile::tempdir_in(setup.data.path().parent().unwrap()).unwrap();
    let (small, big) = (
        outside.path().join("key.txt"),
        outside.path().join("dump.bin"),
    );
    std::fs::write(&small, MARK).unwrap();
    std::fs::write(&big, MARK.repeat(100_000)).unwrap();
    let (small, big) = (small.display().to_string(), big.display().to_string());
    // Uncaged, as an operator may choose: the bridge's own check is what
    // stands (caged, the kernel refuses the link: the test below).
    let turn = setup
        .run_with(
            "hardlink",
            &["--uncaged"],
            &[("FAKE_LINK", &small), ("FAKE_BIG_LINK", &big)],
        )
        .await;
    turn.completed();
    let artifact = |name: &str| {
        turn.results
            .iter()
            .map(|(_, r)| r)
            .find(|r| r["type"] == "artifact.created" && r["data"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not named: {:?}", turn.kinds()))
            .clone()
    };
    for name in ["linked.txt", "linked.bin"] {
        let data = &artifact(name)["data"];
        let why = data["metadata"]["withheld"].as_str().unwrap_or_default();
        assert!(why.contains("hard link"), "{data}");
        assert!(data.get("content_base64").is_none(), "{data}");
        assert!(data.get("artifact_id").is_none(), "{data}");
    }
    assert_eq!(artifact("note.txt")["data"]["content_base64"], "aGVsbG8=");
    let sent: String = turn.results.iter().map(|(_, r)| r.to_string()).collect();
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(MARK);
    assert!(!sent.contains(MARK) && !sent.contains(&encoded[..20]));
    for stored in walkdir::WalkDir::new(setup.data.path().join("artifacts"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
    {
        let bytes = std::fs::read(stored.path()).unwrap();
        assert!(
            !bytes.windows(MARK.len()).any(|w| w == MARK.as_bytes()),
            "{} holds the linked file",
            stored.path().display()
        );
    }
}

/// Caged (the default), a harness cannot even make the link: a file
/// outside its workspace is not its to name, so nothing of it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caged_harness_cannot_link_a_file_from_outside_into_its_outbox() {
    const MARK: &str = "outside-the-workspace-91c3";
    let setup = Setup::new();
    let outside = tempfile::tempdir_in(setup.data.path().parent().unwrap()).unwrap();
    let (small, big) = (
        outside.path().join("key.txt"),
        outside.path().join("dump.bin"),
    );
    std::fs::write(&small, MARK).unwrap();
    std::fs::write(&big, MARK.repeat(1000)).unwrap();
    let (small, big) = (small.display().to_string(), big.display().to_string());
    let turn = setup
        .run_with(
            "hardlink",
            &[],
            &[("FAKE_LINK", &small), ("FAKE_BIG_LINK", &big)],
        )
        .await;
    let names: Vec<&Value> = turn
        .results
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r["type"] == "artifact.created")
        .map(|r| &r["data"]["name"])
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| *n == "linked.txt" || *n == "linked.bin"),
        "{names:?}"
    );
    let sent: String = turn.results.iter().map(|(_, r)| r.to_string()).collect();
    assert!(!sent.contains(MARK));
    let workspace = setup.workspace(&turn);
    assert!(!workspace.join("outbox/linked.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_harness_error_with_the_stderr_tail_redacted() {
    let setup = Setup::new();
    let turn = setup.run("crash", &[]).await;
    let terminal = turn.assert_failed("harness_error");
    let error = terminal["data"]["error"].as_str().unwrap();
    assert!(
        error.contains("exited (code 2)") || error.contains("code 2"),
        "{error}"
    );
    // After a line that is not UTF-8: the reading went on.
    assert!(error.contains("not UTF-8: \u{fffd}"), "{error}");
    assert!(error.contains("fatal: auth failed"), "{error}");
    assert!(
        !error.contains("sk-abcdefghijklmnopqrstuvwxyz0123"),
        "{error}"
    );
    let workspace = setup.workspace(&turn);
    let env = std::fs::read_to_string(workspace.join("received-env")).unwrap();
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("LANGBOT_MCP_TOKEN="))
        .unwrap();
    assert!(
        !error.contains(token),
        "the run token leaked into the error"
    );
    assert!(
        !turn.stderr.contains(token),
        "the run token leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_run_and_stops_the_whole_group() {
    let setup = Setup::new();
    let child = setup.spawn_hanging_run(&["--kill-grace", "1"]);
    let root = setup.data.path().join("workspaces");
    common::assert_ctrl_c_cancels(child, &root, || processes_under(&root).len() >= 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_context_is_invalid_argument_with_its_path() {
    let data = common::tempdir();
    let file = data.path().join("turn.json");
    std::fs::write(
        &file,
        r#"{"run_id": "r-bad", "trigger": {"type": "message.received", "source": "platform"},
            "event": {"event_id": "e", "event_type": "message.received", "source": "platform"},
            "input": {"text": 7}, "delivery": {"surface": "platform"}, "resources": {}, "runtime": {}}"#,
    )
    .unwrap();
    let turn = bridge_run(data.path(), &["--context", &file.to_string_lossy()], &[]).await;
    turn.assert_well_formed();
    let terminal = turn.terminal();
    assert_eq!(terminal["run_id"], "r-bad");
    assert_eq!(terminal["data"]["code"], "invalid_argument", "{terminal}");
    let error = terminal["data"]["error"].as_str().unwrap();
    assert!(error.contains("$.input.text"), "{error}");
    assert_eq!(turn.code, Some(1));
}

/// An empty conversation id, typed or in a context, is refused as the
/// caller's to fix before anything is written for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_conversation_id_is_refused_before_anything_is_written() {
    let data = common::tempdir();
    let typed = bridge_run(data.path(), &["--conversation", " ", "--text", "hi"], &[]).await;
    let failed = typed.assert_failed("invalid_argument");
    assert!(
        failed["data"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("$.conversation.conversation_id: must not be empty")),
        "{failed}"
    );
    let file = data.path().join("turn.json");
    let mut ctx = serde_json::to_value(common::context("r-empty", "c")).unwrap();
    ctx["conversation"]["conversation_id"] = "".into();
    ctx["context"]["conversation_id"] = "".into();
    std::fs::write(&file, ctx.to_string()).unwrap();
    let given = bridge_run(data.path(), &["--context", &file.to_string_lossy()], &[]).await;
    let failed = given.assert_failed("invalid_argument");
    assert_eq!(failed["run_id"], "r-empty");
    assert!(
        !data.path().join("workspaces").exists(),
        "no workspace is written for it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pretty_output_is_for_a_person() {
    let setup = Setup::new();
    let adapters = setup.tools.path().join("adapters");
    let output = std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(setup.data.path())
        .arg("run")
        .args(setup.args(&adapters.to_string_lossy(), &["--format", "pretty"]))
        .env_clear()
        .env("PATH", setup.path_with_script())
        .env("FAKE_MODE", "ok")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("Done."), "{text}");
    assert!(text.contains("📎 note.txt (5 bytes)"), "{text}");
    // Whether the session is new or resumed is said on the last line.
    assert!(
        text.contains("✓ completed (end_turn) · session scripted new"),
        "{text}"
    );
    assert!(
        !text.contains("\"type\""),
        "NDJSON in pretty output: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_turn_that_quotes_session_not_found_is_not_run_again() {
    let setup = Setup::new();
    let first = setup.run("quiet", &[]).await;
    first.completed();
    let workspace = setup.workspace(&first);
    let failed = setup.run("quote", &[]).await;
    assert_eq!(
        failed.kinds().last().map(String::as_str),
        Some("run.failed")
    );
    // Once for the first turn, once for this one: no fresh-session retry,
    // which would run the turn's tool actions a second time.
    let log = std::fs::read_to_string(workspace.join("turn-log")).unwrap();
    assert_eq!(log.matches("start").count(), 2, "{log}");
    let results: Vec<&Value> = failed.results.iter().map(|(_, r)| r).collect();
    let text = serde_json::to_string(&results).unwrap();
    assert!(!text.contains("could not be resumed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_harness_starts_fresh_and_a_context_pointer_is_used_first() {
    let setup = Setup::new();
    let first = setup.run("quiet", &[]).await;
    first.completed();
    let workspace = setup.workspace(&first);

    // The conversation moves to another harness: a fresh session, no error
    // (each runner keeps its own state, so scripted-b has no pointer yet).
    let switched = setup.run("quiet", &["--harness", "scripted-b"]).await;
    switched.completed();
    assert_eq!(switched.session()["resumed"], false);
    let args = std::fs::read_to_string(setup.workspace(&switched).join("received-args")).unwrap();
    assert!(args.starts_with("--new\n"), "{args}");
    assert_eq!(
        switched.state("external.harness"),
        Some(&Value::from("scripted-b"))
    );

    // A pointer of another harness in the context is not resumed either.
    let file = setup.context_file("switch.json", "Go on", |ctx| {
        ctx.state.conversation = serde_json::from_value(serde_json::json!({
            "external.session_id": "scripted-1",
            "external.harness": "scripted",
        }))
        .unwrap();
    });
    let other = setup
        .run("quiet", &["--harness", "scripted-b", "--context", &file])
        .await;
    other.completed();
    let session = other.session();
    assert_eq!(session["resumed"], false);
    assert!(
        session["notice"]
            .as_str()
            .unwrap_or("")
            .contains("switched to Scripted"),
        "{session}"
    );

    // A host that sends the pointer in the context is believed first, over
    // the embedded host's state (which now points at scripted-b).
    let file = setup.context_file("turn.json", "Go on", |ctx| {
        ctx.state.conversation = serde_json::from_value(serde_json::json!({
            "external.session_id": "from-the-host",
            "external.harness": "scripted",
            "external.working_directory": workspace,
        }))
        .unwrap();
    });
    let from_ctx = setup.run("quiet", &["--context", &file]).await;
    from_ctx.completed();
    assert_eq!(from_ctx.session()["resumed"], true);
    let args = std::fs::read_to_string(workspace.join("received-args")).unwrap();
    assert!(args.starts_with("--resume\nfrom-the-host\n"), "{args}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_bridge_takes_its_harness_with_it() {
    let setup = Setup::new();
    let mut child = setup.spawn_hanging_run(&[]);
    let root = setup.data.path().join("workspaces");
    common::wait_for_processes(&root, 2).await;
    // SIGKILL: the bridge cannot clean up; the kernel tells the harness.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let mut leader_gone = false;
    for _ in 0..50 {
        let left = processes_under(&root);
        if !left.iter().any(|p| p.contains("scripted-harness")) {
            leader_gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What the harness started itself (`sleep 300 &`) is the bridge's to
    // kill normally; clean it up here.
    for p in processes_under(&root) {
        if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    assert!(leader_gone, "the harness outlived a killed bridge");
}

/// A stored pointer is data anyone who can write the conversation's state
/// may have set: an id that is not a session id is never passed to the
/// harness, so it cannot become one of its options.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_session_id_that_looks_like_an_option_is_never_passed() {
    let setup = Setup::new();
    let first = setup.run("quiet", &[]).await;
    first.completed();
    let workspace = setup.workspace(&first);
    let file = setup.context_file("hostile.json", "Go on", |ctx| {
        ctx.state.conversation = serde_json::from_value(serde_json::json!({
            "external.session_id": "--dangerously-skip-permissions",
            "external.harness": "scripted",
            "external.working_directory": workspace,
        }))
        .unwrap();
    });
    let turn = setup.run("quiet", &["--context", &file]).await;
    turn.completed();
    let session = turn.session();
    assert_eq!(session["resumed"], false, "{session}");
    assert!(
        session["notice"]
            .as_str()
            .unwrap_or("")
            .contains("is not a Scripted session id"),
        "{session}"
    );
    let args = std::fs::read_to_string(workspace.join("received-args")).unwrap();
    assert!(args.starts_with("--new\n"), "{args}");
    assert!(!args.contains("--dangerously-skip-permissions"), "{args}");
}

/// An extra server's environment reaches a Codex-style harness through
/// its own environment: it may add variables, never change one the
/// harness reads itself (a planted `CODEX_HOME` would pick its config).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_servers_env_never_changes_the_harnesss_own() {
    let setup = Setup::new();
    let adapters = setup.tools.path().join("adapters");
    let spec = std::fs::read_to_string(adapters.join("scripted.yaml")).unwrap();
    std::fs::write(
        adapters.join("scripted-codex.yaml"),
        spec.replace("name: scripted", "name: scripted-codex")
            .replace("family: claude", "family: codex"),
    )
    .unwrap();
    let servers = setup.data.path().join("servers.yaml");
    std::fs::write(
        &servers,
        "tools:\n  command: /opt/tools\n  env: {FAKE_MODE: crash}\n",
    )
    .unwrap();
    let servers = servers.to_string_lossy().into_owned();
    let refused = setup
        .run(
            "quiet",
            &["--harness", "scripted-codex", "--mcp-servers", &servers],
        )
        .await;
    let failed = refused.assert_failed("invalid_argument");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("sets `FAKE_MODE`, which Scripted reads itself"),
        "{failed}"
    );
    assert!(
        walkdir::WalkDir::new(setup.data.path().join("workspaces"))
            .into_iter()
            .filter_map(Result::ok)
            .all(|e| e.file_name() != "received-env"),
        "the harness never started"
    );

    let servers = setup.data.path().join("servers-ok.yaml");
    std::fs::write(
        &servers,
        "tools:\n  command: /opt/tools\n  env: {TOOLS_KEY: tk-1}\n",
    )
    .unwrap();
    let servers = servers.to_string_lossy().into_owned();
    let turn = setup
        .run(
            "quiet",
            &["--harness", "scripted-codex", "--mcp-servers", &servers],
        )
        .await;
    // (The script answers in Claude's format, which the codex family does
    // not read: the turn fails after the harness ran, which is enough.)
    turn.assert_failed("harness_error");
    let env = std::fs::read_to_string(setup.workspace(&turn).join("received-env")).unwrap();
    let env: Vec<&str> = env.lines().collect();
    assert!(env.contains(&"TOOLS_KEY=tk-1"), "{env:?}");
    assert!(env.contains(&"FAKE_MODE=quiet"), "{env:?}");
}

/// A consumer that stops reading (`run ... | a reader that stalls`) holds
/// the results back, never the deadline: the harness is stopped on time
/// while its output still waits to be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_holds_while_nobody_reads_the_results() {
    let setup = Setup::new();
    let mut bridge = setup.spawn_run("flood", &["--timeout", "2", "--kill-grace", "1"], &[]);
    let workspaces = setup.data.path().join("workspaces");
    common::wait_for_processes(&workspaces, 1).await;
    // Nobody reads the bridge's stdout: ten megabytes fill every buffer
    // on the way and the harness blocks on its writes. At the deadline it
    // is gone all the same.
    common::assert_none_left_under(&workspaces).await;
    // The bridge still holds the rest for its reader, and ends once read.
    let mut out = bridge.stdout.take().unwrap();
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut out, &mut text)
        .await
        .unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "run.failed", "{last}");
    assert_eq!(last["data"]["code"], "deadline_exceeded", "{last}");
    assert_eq!(bridge.wait().await.unwrap().code(), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_sent_to_the_client_name_no_path_of_the_bridges_machine() {
    let setup = Setup::new();
    let first = setup.run("quiet", &[]).await;
    first.completed();
    let workspace = setup.workspace(&first);
    let data = setup.data.path().to_string_lossy().into_owned();
    let tools = setup.tools.path().to_string_lossy().into_owned();
    let private = |turn: &BridgeTurn, code: &str, names: &str| {
        let terminal = turn.assert_failed(code);
        let error = terminal["data"]["error"].as_str().unwrap().to_string();
        assert!(error.contains(names), "{error}");
        assert!(
            !error.contains(&data) && !error.contains(&tools),
            "a path of the bridge's machine: {error}"
        );
    };

    // The harness swapped its .langbot folder for a link: refused, and
    // named relative to the workspaces.
    let elsewhere = common::tempdir();
    std::fs::rename(workspace.join(".langbot"), workspace.join("moved")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), workspace.join(".langbot")).unwrap();
    private(
        &setup.run("quiet", &[]).await,
        "workspace_error",
        ".langbot",
    );
    std::fs::remove_file(workspace.join(".langbot")).unwrap();
    std::fs::rename(workspace.join("moved"), workspace.join(".langbot")).unwrap();

    // Its outbox is a file now.
    std::fs::remove_dir_all(workspace.join("outbox")).unwrap();
    std::fs::write(workspace.join("outbox"), "not a folder").unwrap();
    private(&setup.run("quiet", &[]).await, "workspace_error", "outbox");
    std::fs::remove_file(workspace.join("outbox")).unwrap();

    // A configured program that cannot start, and one that is not there.
    let broken = setup.tools.path().join("broken-harness");
    std::fs::write(&broken, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let broken = broken.to_string_lossy().into_owned();
    private(
        &setup.run("quiet", &["--bin", &broken]).await,
        "harness_error",
        "cannot start Scripted",
    );
    let missing = format!("{tools}/nowhere/scripted-harness");
    private(
        &setup.run("quiet", &["--bin", &missing]).await,
        "harness_not_found",
        "Scripted",
    );
}

/// Transcripts, state, the cursor secret and workspaces are the owner's
/// alone: a data folder others could read is made private (with a
/// warning), and nothing a turn creates under it can another user read
/// or write (a root bridge's caged harness, another user, owns its own
/// workspace; the folders that lead there it may only pass through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_folder_and_what_a_turn_writes_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let setup = Setup::new();
    std::fs::set_permissions(setup.data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let turn = setup.run("quiet", &[]).await;
    turn.completed();
    assert!(turn.stderr.contains("now 0700"), "{}", turn.stderr);
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(setup.data.path()) & 0o766, 0o700);
    let mut open = Vec::new();
    for entry in walkdir::WalkDir::new(setup.data.path()).min_depth(1) {
        let entry = entry.unwrap();
        if entry.file_type().is_symlink() {
            continue;
        }
        if mode(entry.path()) & 0o066 != 0 {
            open.push(format!(
                "{:o} {}",
                mode(entry.path()),
                entry.path().display()
            ));
        }
    }
    assert!(open.is_empty(), "readable by others: {open:#?}");
}

/// Tests that watch what a bridge killed outright leaves behind: any
/// bridge that starts on this machine meanwhile sweeps it, so
/// `scripts/test` runs `alone::` tests after every other test binary.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "tier cgroup: needs a cgroup v2 the bridge may write (root or delegated); scripts/test runs it"]
    async fn what_a_killed_bridge_left_running_dies_at_the_next_start() {
        for mechanism in common::MECHANISMS {
            let setup = Setup::new();
            let tag = common::unique_tag();
            let needle = format!("sleep 300.{tag}");
            let _cleanup = Cleanup(needle.clone());
            let env = [
                ("FAKE_TAG", tag.as_str()),
                ("HARNESS_BRIDGE_CONTAIN", mechanism),
            ];
            let mut child = setup.spawn_run("stubborn", &[], &env);
            let mut running = 0;
            for _ in 0..200 {
                running = common::processes_with(&needle).len();
                if running == 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(
                running, 2,
                "{mechanism}: the harness never started its sleepers"
            );
            // SIGKILL: the bridge cannot clean up, and the harness ignores the
            // SIGTERM the kernel sends it: all of it outlives the bridge.
            child.start_kill().unwrap();
            child.wait().await.unwrap();
            let root = setup.data.path().join("workspaces");
            // The next bridge (this one, or any other test's that starts first)
            // ends it all before its own turn.
            let next = setup
                .run_with("quiet", &[], &[("HARNESS_BRIDGE_CONTAIN", mechanism)])
                .await;
            next.completed();
            let left = common::processes_with(&needle);
            assert!(left.is_empty(), "{mechanism}: left running: {left:?}");
            let left = processes_under(&root);
            assert!(left.is_empty(), "{mechanism}: left running: {left:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_stderr_line_is_cut_without_being_held() {
    use tokio::io::AsyncBufReadExt;
    let setup = Setup::new();
    let mut child = setup.spawn_run("shout", &[], &[]);
    let root = setup.data.path().join("workspaces");
    let mut shouted = None;
    for _ in 0..600 {
        shouted = walkdir::WalkDir::new(&root)
            .into_iter()
            .filter_map(Result::ok)
            .find(|e| e.file_name() == "shouted")
            .and_then(|e| e.path().parent().map(Path::to_path_buf));
        if shouted.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let workspace = shouted.expect("the harness wrote its line");
    // All but a pipe's worth of the line has been read by now.
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id().unwrap())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    std::fs::write(workspace.join("done"), "").unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last = Value::Null;
    while let Some(line) = lines.next_line().await.unwrap() {
        last = serde_json::from_str(&line).unwrap();
    }
    child.wait().await.unwrap();
    assert!(
        peak_kib < 128 * 1024,
        "the bridge's peak memory was {peak_kib} KiB while reading a 256 MiB line"
    );
    assert_eq!(last["data"]["code"], "harness_error", "{last}");
    let error = last["data"]["error"].as_str().unwrap();
    let kept = format!("{}… ({} more bytes)", "x".repeat(400), 268435456 - 400);
    assert!(error.contains(&kept), "{}", &error[..error.len().min(2000)]);
    assert!(error.len() < 4096, "{} bytes", error.len());
}

/// Kills what a failed test left running, by the marker in its argv.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        common::kill_processes_with(&self.0);
    }
}

/// A context whose deadline passed before the turn began (it waited in a
/// host's queue) starts nothing and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_past_its_deadline_starts_nothing() {
    let setup = Setup::new();
    let file = setup.context_file("late.json", "Too late", |ctx| {
        ctx.runtime.deadline_at = Some(1_000_000_000.0);
    });
    let turn = setup.run("quiet", &["--context", &file]).await;
    let failed = turn.assert_failed("deadline_exceeded");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("nothing was started"),
        "{failed}"
    );
    assert!(
        walkdir::WalkDir::new(setup.data.path().join("workspaces"))
            .into_iter()
            .filter_map(Result::ok)
            .all(|e| e.file_name() != "received-args"),
        "the harness never started"
    );
}

/// A run id names journal rows, archive folders and log lines: one with a
/// newline (a forged log line) or of a megabyte is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_that_could_forge_a_log_line_is_refused() {
    let setup = Setup::new();
    for run_id in [
        "r-1\nINFO run ended outcome=run.completed".to_string(),
        "x".repeat(1 << 20),
    ] {
        let file = setup.context_file("bad-id.json", "hi", |ctx| {
            ctx.run_id = run_id;
        });
        let turn = setup.run("quiet", &["--context", &file]).await;
        let failed = turn.assert_failed("invalid_argument");
        assert!(
            failed["data"]["error"]
                .as_str()
                .unwrap_or("")
                .contains("$.run_id"),
            "{failed}"
        );
    }
}

/// `approvals: chat` needs a harness that hands its permission prompts to
/// the bridge: with one that cannot, the turn is refused in a sentence
/// before anything starts, rather than running with prompts nobody answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_in_the_chat_need_a_harness_that_can_ask() {
    let setup = Setup::new();
    let file = setup.context_file("approvals.json", "Do it", |ctx| {
        ctx.config
            .insert("approvals".into(), serde_json::json!("chat"));
    });
    let refused = setup.run("quiet", &["--context", &file]).await;
    let failed = refused.assert_failed("invalid_argument");
    let error = failed["data"]["error"].as_str().unwrap_or("");
    assert!(
        error.contains("`approvals: chat`") && error.contains("permission_mode"),
        "{error}"
    );
    let bad = setup.context_file("bad.json", "Do it", |ctx| {
        ctx.config
            .insert("approvals".into(), serde_json::json!("always"));
    });
    let refused = setup.run("quiet", &["--context", &bad]).await;
    let failed = refused.assert_failed("invalid_argument");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("approvals"),
        "{failed}"
    );
}

/// The operator's paths given relative, as a person types them in their
/// own folder (`--data-dir ./data --adapters ./adapters --templates
/// ./templates`): each is taken from the working directory the command
/// ran in, once, at the edge (the harness runs elsewhere, in the
/// workspace), and the turn uses that folder's spec and templates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_operator_paths_are_taken_from_where_the_command_ran() {
    let setup = Setup::new();
    let folder = setup.tools.path();
    let templates = folder.join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("templates")).unwrap()
    {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), templates.join(entry.file_name())).unwrap();
    }
    let prompt = std::fs::read_to_string(templates.join("turn-prompt.md")).unwrap();
    std::fs::write(
        templates.join("turn-prompt.md"),
        format!("OPERATOR TEMPLATE\n{prompt}"),
    )
    .unwrap();
    // The harness is installed elsewhere, as a real one is: the cage
    // never lets a harness read a folder that holds the data folder.
    let programs = common::tempdir();
    std::fs::copy(
        folder.join("scripted-harness"),
        programs.path().join("scripted-harness"),
    )
    .unwrap();
    let path = format!("{}:{}", programs.path().display(), setup.path_with_script());
    let out = tokio::process::Command::new(common::bridge_bin())
        .args(["--data-dir", "./data", "run", "--adapters", "./adapters"])
        .args(["--templates", "./templates", "--harness", "scripted"])
        .args(["--conversation", "chat-7", "--text", "Summarise the plan"])
        .current_dir(folder)
        .env_clear()
        .env("PATH", path)
        .env("FAKE_MODE", "quiet")
        .env("HOME", folder)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("the bridge runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let workspace = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["data"]["key"] == "external.working_directory")
        .and_then(|r| r["data"]["value"].as_str().map(PathBuf::from))
        .expect("the turn names its workspace");
    // Absolute, under the folder the command ran in: the pointer and the
    // workspace are found again from anywhere.
    assert!(workspace.is_absolute(), "{}", workspace.display());
    assert!(
        workspace.starts_with(folder.join("data")),
        "{}",
        workspace.display()
    );
    let stdin = std::fs::read_to_string(workspace.join("received-stdin")).unwrap();
    assert!(stdin.starts_with("OPERATOR TEMPLATE"), "{stdin}");
}
