//! The `harness-bridge` binary: help, exit codes, and the store inspection
//! commands on a real store written through the library.

use harness_bridge_testkit as common;

use std::process::{Command, Output};

use common::fixture;
use harness_bridge::host::calls::StateSetCall;
use harness_bridge::host::prelude::*;
use harness_bridge::host::{GrantPolicy, HistoryQuery};
use harness_bridge::protocol::StateScope;
use serde_json::json;

fn bridge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .args(args)
        .env_remove("HARNESS_BRIDGE_DATA_DIR")
        .output()
        .expect("binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_lists_commands_and_exit_codes() {
    let out = bridge(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    for needle in [
        "context",
        "host",
        "manifest",
        "Exit codes:",
        "HARNESS_BRIDGE_DATA_DIR",
    ] {
        assert!(text.contains(needle), "help lacks {needle}:\n{text}");
    }
    // Every built-in harness, by the name its spec gives it (the help
    // wraps its lines: compared with single spaces).
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for spec in harness_bridge::harness::Adapters::builtin().all() {
        assert!(
            words.contains(&spec.label),
            "help lacks {}:\n{text}",
            spec.label
        );
    }
    assert_eq!(bridge(&["frobnicate"]).status.code(), Some(2));
    let missing = bridge(&["context", "validate", "/nonexistent/context.json"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/context.json")
    );
    let not_json = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_json.path(), "{ nope").unwrap();
    let out = bridge(&["context", "validate", not_json.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("error at $: not JSON"));
}

#[test]
fn example_context_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/context.json");
    let out = bridge(&["context", "validate", example, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["valid"], true);
}

#[test]
fn manifest_lists_each_harness() {
    let out = bridge(&["manifest"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = doc["runners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["manifest"]["id"].as_str().unwrap())
        .collect();
    let built_in: Vec<String> = common::built_in_harnesses()
        .into_iter()
        .map(|(name, _)| format!("plugin:langbot/harness-bridge/{name}"))
        .collect();
    assert_eq!(ids, built_in);
    assert_eq!(
        doc["runners"][0]["manifest"]["permissions"]["history"],
        json!(["page", "search"])
    );

    // The specs in force: an operator's folder adds its agent, and a
    // folder that does not load is an error, not a partial manifest.
    let out = bridge(&["manifest", "--adapters", "examples/adapters"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = doc["runners"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["manifest"]["id"].as_str())
        .collect();
    assert!(
        ids.ends_with(&[
            "plugin:langbot/harness-bridge/claude-acp",
            "plugin:langbot/harness-bridge/codex-acp"
        ]),
        "{ids:?}"
    );
    let out = bridge(&["manifest", "--adapters", "no/such/folder"]);
    assert_ne!(out.status.code(), Some(0));
}

#[tokio::test]
async fn host_commands_show_history_state_and_audit() {
    let f = fixture();
    f.say("group_1", "user", "first line\nwith a newline").await;
    f.say("group_1", "assistant", "second line").await;
    f.store
        .append_transcript(harness_bridge::host::NewTranscriptItem {
            event_id: "ev-ann".into(),
            conversation_id: "group_1".into(),
            role: "user".into(),
            content: Some("third, from Ann".into()),
            metadata: serde_json::from_value(json!({"actor_id": "u-7", "actor_name": "Ann Lee"}))
                .unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    let run = f.open("run-cli", "group_1", &GrantPolicy::default());
    let host = f.grants.granted(run.grant.clone());
    host.call(&StateSetCall {
        scope: StateScope::Conversation,
        key: "notes.session_id".into(),
        value: json!("sess-1"),
    })
    .await
    .unwrap();
    host.call(&StateSetCall {
        scope: StateScope::Conversation,
        key: "notes.long".into(),
        value: json!("x".repeat(1000)),
    })
    .await
    .unwrap();
    host.call(&HistoryQuery {
        limit: 500,
        ..HistoryQuery::default()
    })
    .await
    .unwrap_err();
    // The store writes audit rows on a thread of its own: a read in this
    // process flushes them before another process reads the file.
    f.store.audit_tail(None, 1).await.unwrap();
    let dir = f.store.dir().to_str().unwrap().to_string();

    let out = bridge(&["--data-dir", &dir, "host", "history", "group_1"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    // Each line: its number, when (UTC), the role, who said it.
    let first = text
        .lines()
        .find(|l| l.starts_with("#1 "))
        .unwrap_or_default();
    assert!(
        first.ends_with(" user      -                first line with a newline")
            && first.contains(&format!(
                " {} ",
                &harness_bridge::protocol::time::date_time(harness_bridge::host::now_ms() / 1000)
                    [..10]
            )),
        "{text}"
    );
    assert!(
        text.contains(" user      Ann Lee          third, from Ann"),
        "{text}"
    );
    assert!(text.contains("(3 of 3 items)"), "{text}");

    let out = bridge(&[
        "--data-dir",
        &dir,
        "host",
        "state",
        "conversation",
        "group_1",
    ]);
    let state = stdout(&out);
    let lines: Vec<&str> = state.lines().collect();
    assert_eq!(lines.len(), 2, "{state}");
    assert!(
        lines[0].starts_with("notes.long = \"xxx") && lines[0].ends_with("… (1002 bytes)"),
        "a long value is shown by its start and size: {state}"
    );
    assert_eq!(lines[1], "notes.session_id = \"sess-1\"");

    let out = Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .args(["host", "audit", "--run", "run-cli"])
        .env("HARNESS_BRIDGE_DATA_DIR", &dir)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(
            "run-cli state_set state:conversation/notes.session_id conversation:group_1 ok"
        ),
        "{text}"
    );
    assert!(text.contains("history_page conversation:group_1 conversation:group_1 invalid_argument (limit must be between 1 and 100, got 500)"), "{text}");

    let out = bridge(&["--data-dir", &dir, "host", "history", "nobody"]);
    assert!(stdout(&out).contains("no transcript items in conversation `nobody`"));
}

#[test]
fn adapters_list_show_and_refuse_a_malformed_spec() {
    let out = bridge(&["adapters", "list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    for (name, family) in common::built_in_harnesses() {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
        let fields: Vec<&str> = line
            .map(|l| {
                l.split("  ")
                    .filter(|f| !f.trim().is_empty())
                    .map(str::trim)
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            fields.contains(&family.as_str()) && fields.last() == Some(&"built-in"),
            "{name}: {text}"
        );
    }
    let out = bridge(&["adapters", "show", "claude-code"]);
    assert!(stdout(&out).contains("decoder: claude-stream-json"));
    let out = bridge(&["adapters", "show", "qwen"]);
    let text = stdout(&out);
    assert!(
        text.contains("family: qwen") && text.contains("decoder: claude-stream-json"),
        "{text}"
    );
    assert_eq!(bridge(&["adapters", "show", "vim"]).status.code(), Some(2));

    let dir = common::tempdir();
    std::fs::write(
        dir.path().join("broken.yaml"),
        "name: x\nbinary: [unclosed\n",
    )
    .unwrap();
    let out = bridge(&[
        "adapters",
        "list",
        "--adapters",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.yaml:"), "file and line: {err}");
}

#[tokio::test]
async fn run_prunes_audit_rows_past_the_retention_and_reading_them_does_not() {
    use harness_bridge::host::{AuditEntry, now_ms};
    let f = fixture();
    let day = 24 * 3600 * 1000;
    for (age_days, action) in [(400, "ancient"), (1, "recent")] {
        f.store
            .record_audit(AuditEntry {
                at_ms: now_ms() - age_days * day,
                run_id: "run-old".into(),
                runner_id: String::new(),
                action: action.into(),
                resource: String::new(),
                scope: String::new(),
                outcome: "ok".into(),
                detail: String::new(),
            })
            .await
            .unwrap();
    }
    f.store.audit_tail(None, 1).await.unwrap();
    let dir = f.store.dir().to_str().unwrap().to_string();
    let audit = || stdout(&bridge(&["--data-dir", &dir, "host", "audit"]));

    let before = audit();
    assert!(
        before.contains("ancient") && before.contains("recent"),
        "{before}"
    );
    // A turn (here one whose harness is missing) opens the store with the
    // default retention: rows older than it go, the others stay.
    let out = Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .args([
            "--data-dir",
            &dir,
            "run",
            "--conversation",
            "c",
            "--text",
            "hi",
        ])
        .env_remove("HARNESS_BRIDGE_DATA_DIR")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("harness_not_found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = audit();
    assert!(!after.contains("ancient"), "{after}");
    assert!(after.contains("recent"), "{after}");
}

#[test]
fn serve_refuses_a_worker_count_it_cannot_use_with_the_reason() {
    let dir = common::tempdir();
    for value in ["many", "0", "-2", "100000"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
            .args(["--data-dir"])
            .arg(dir.path())
            .arg("serve")
            .env("TOKIO_WORKER_THREADS", value)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A serve that took the value would start and run on: stopped.
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > std::time::Duration::from_secs(20) {
                child.kill().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "TOKIO_WORKER_THREADS is `{value}`; it must be a number of threads from 1 to 1024"
            )),
            "{value}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `doctor` says, for each harness installed, where its model key lives:
/// a sign-in file the bridge would carry into every conversation's home
/// (readable by its agent) is named with the variable that keeps the key
/// outside instead; with that variable set, the key is the gateway's.
#[test]
fn doctor_says_where_each_harnesss_key_lives() {
    let home = common::tempdir();
    let codex = home.path().join(".codex");
    std::fs::create_dir_all(&codex).unwrap();
    let config = home.path().join("bridge.yaml");
    std::fs::write(&config, "harness_binaries:\n  codex: /bin/true\n").unwrap();
    let doctor = |key: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_harness-bridge"));
        command
            .args(["doctor", "--config"])
            .arg(&config)
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", "/usr/bin:/bin");
        if let Some(key) = key {
            command.env("OPENAI_API_KEY", key);
        }
        let said = stdout(&command.output().expect("doctor runs"));
        said.lines()
            .find(|l| l.starts_with("sign-in: Codex: "))
            .unwrap_or_else(|| panic!("no line for Codex:\n{said}"))
            .to_string()
    };
    let nothing = doctor(None);
    assert!(
        nothing.contains("no key and no sign-in found: set OPENAI_API_KEY"),
        "{nothing}"
    );
    std::fs::write(codex.join("auth.json"), "{}").unwrap();
    let signed_in = doctor(None);
    assert!(
        signed_in.contains(&format!(
            "it signs in with {}, carried into each conversation's home, where its agent can read it",
            codex.join("auth.json").display()
        )) && signed_in.contains("set OPENAI_API_KEY or CODEX_API_KEY for the bridge instead"),
        "{signed_in}"
    );
    std::fs::remove_file(codex.join("auth.json")).unwrap();
    let keyed = doctor(Some("sk-not-said"));
    assert!(
        keyed.contains(
            "its key (OPENAI_API_KEY) is held by the model gateway and never enters a cage"
        ),
        "{keyed}"
    );
    assert!(!keyed.contains("sk-not-said"));
}

/// `doctor` as an ordinary user, whose session gives it no cgroup to
/// write, says the per-conversation limits do not hold and what makes
/// them hold (the unit with a delegated cgroup, root).
#[test]
fn doctor_as_an_ordinary_user_names_what_makes_the_limits_hold() {
    use std::os::unix::process::CommandExt as _;
    assert!(
        nix::unistd::geteuid().is_root(),
        "the tests run as root, to run the bridge as an ordinary user"
    );
    let home = common::tempdir();
    let out = Command::new(env!("CARGO_BIN_EXE_harness-bridge"))
        .arg("doctor")
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .uid(20002)
        .gid(20002)
        .output()
        .expect("doctor runs");
    let said = stdout(&out);
    let limits = said
        .lines()
        .find(|l| l.starts_with("limits: "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        limits.contains("not enforced here")
            && limits.contains("packaging/harness-bridge.service")
            && limits.contains("as root"),
        "{limits}"
    );
}
