//! The debug chat page in a real browser: headless Chromium (Debian's
//! package) driven by playwright-core (pinned in tests/clis) against a
//! real `serve` running the real Claude Code, offline against the fake
//! model. An operator types a message, sees the answer stream in (with the
//! history tool call it made), sends a second one, and sees the same
//! Claude session resumed and the stored resume pointer.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::anthropic::{ANSWER, ASK, CONVERSATION, FOLLOW_UP, SECOND_ANSWER};
use common::server::ServeProcess;
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";

fn playwright_core() -> PathBuf {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clis/node_modules/playwright-core");
    assert!(
        path.join("package.json").exists(),
        "playwright-core is not installed at {}: run `scripts/test` (it runs `npm ci` in tests/clis)",
        path.display()
    );
    path
}

fn chromium() -> &'static str {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium package (`apt-get install chromium`; scripts/test does this when it runs as root)"
    );
    CHROMIUM
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_chats_through_the_debug_page_and_the_session_resumes() {
    let (chromium, playwright) = (chromium(), playwright_core());
    let claude = common::cli("claude");
    let (model_url, fake) = common::anthropic::fake_model(false).await;
    let data = Arc::new(tempfile::tempdir().unwrap());
    common::seed_decision(data.path(), CONVERSATION).await;
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "harness_binaries:\n  claude-code: {}\nshutdown_grace_seconds: 5\n",
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
    let mut server = ServeProcess::spawn(data.clone(), &config, &env).await;

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page");
    std::fs::create_dir_all(&shots).unwrap();
    let output = tokio::process::Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/chat_page.cjs"))
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", chromium)
        .env("URL", format!("{}/", server.url))
        .env(
            "TOKEN",
            server.token.as_deref().expect("serve made a token"),
        )
        .env("CONVERSATION", CONVERSATION)
        .env("HARNESS", "claude-code")
        .env("FIRST", ASK)
        .env("SECOND", FOLLOW_UP)
        .env("STREAMED", ANSWER)
        .env("SCREENSHOTS", &shots)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(300), output)
        .await
        .expect("the browser session ends in time")
        .expect("node runs (Node.js is needed for the browser test)");
    assert!(
        output.status.success(),
        "the browser session failed: {}\nserve log: {:?}",
        String::from_utf8_lossy(&output.stderr),
        server.log.lock().unwrap()
    );
    let page: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
    let (first, second) = (&page["first"], &page["second"]);

    // The first answer was on the page while its run was still going
    // (the fake model pauses mid-answer): it streamed.
    assert_eq!(page["status_when_streamed"], "running", "{page}");
    assert_eq!(first["assistant"][0], ANSWER, "{page}");
    assert!(
        first["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().contains("history_page")),
        "the page shows the tool call: {page}"
    );
    assert_eq!(first["resumed"], "no", "{page}");
    let session = first["session_id"].as_str().unwrap();
    assert!(session.len() > 8, "{page}");
    assert_eq!(first["pointer"]["external.session_id"], session, "{page}");
    assert_eq!(
        first["pointer"]["external.harness"], "claude-code",
        "{page}"
    );

    // The second message continued the same Claude session.
    assert_eq!(second["user"][1], FOLLOW_UP, "{page}");
    assert_eq!(second["assistant"][1], SECOND_ANSWER, "{page}");
    assert_eq!(second["resumed"], "yes", "{page}");
    assert_eq!(second["session_id"], session, "{page}");
    assert_ne!(second["run_id"], first["run_id"]);
    // Before the token was entered the page said what it needs (and the
    // browser logged that 401); nothing else went wrong.
    assert!(
        first["events"][0]
            .as_str()
            .unwrap()
            .contains("enter the API token"),
        "{page}"
    );
    let errors: Vec<&Value> = page["console_errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e.as_str().unwrap().contains("401"))
        .collect();
    assert!(errors.is_empty(), "{page}");
    // Claude sent the second request with turn 1 in it: a resumed session.
    let requests = fake.requests.lock().unwrap().clone();
    let last = requests.last().expect("the model was asked");
    assert!(
        last.to_string().contains(ANSWER),
        "the resumed request carries turn 1"
    );

    // The tool call is counted, and the service stops cleanly.
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics.contains(r#"harness_bridge_mcp_calls_total{tool="history_page",outcome="ok"} 1"#),
        "{metrics}"
    );
    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}
