//! The debug chat page in a real browser: headless Chromium (Debian's
//! package) driven by playwright-core (pinned in tests/clis) against a
//! real `serve` running the real Claude Code, offline against the fake
//! model. An operator types a message, sees the answer stream in (with the
//! history tool call it made), sends a second one, and sees the same
//! Claude session resumed and the stored resume pointer. A question and an
//! approval Claude asks show as cards, and their buttons answer them. A
//! turn on a project shows the reply, then the summary of what changed,
//! and the diff, which opens on the page. The console, after two people's
//! turns, lists the conversations and runs (filtered by person), shows a
//! conversation's history with who said what, keeps it over a reload,
//! shows a run's facts and audit rows, and each person's usage as the
//! ledger has it.

use harness_bridge_testkit as common;

use std::path::{Path, PathBuf};

use common::anthropic::{
    ANSWER, ASK, BASH_DONE, CONVERSATION, FOLLOW_UP, GOING_WITH, SECOND_ANSWER,
};
use common::server::ServeProcess;
use serde_json::{Value, json};

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

/// Run `script` (in tests/browser) in headless Chromium against `server`'s
/// page with `vars` in its environment; what the page showed, as JSON.
async fn browse(script: &str, server: &ServeProcess, vars: &[(&str, &str)]) -> Value {
    let (chromium, playwright) = (chromium(), playwright_core());
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join(script.trim_end_matches(".cjs"));
    std::fs::create_dir_all(&shots).unwrap();
    let output = tokio::process::Command::new("node")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/browser")
                .join(script),
        )
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", chromium)
        .env("URL", format!("{}/", server.url))
        .env(
            "TOKEN",
            server.token.as_deref().expect("serve made a token"),
        )
        .env("CONVERSATION", CONVERSATION)
        .env("HARNESS", "claude-code")
        .env("SCREENSHOTS", &shots)
        .envs(vars.iter().copied())
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
    serde_json::from_slice(&output.stdout).expect("the script prints JSON")
}

/// Console errors other than the 401 the page shows before the token.
fn console_errors(page: &Value) -> Vec<&Value> {
    page["console_errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e.as_str().unwrap().contains("401"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier chromium+clis: needs /usr/bin/chromium (apt-get install chromium) and the pinned claude and playwright-core (tests/clis); scripts/test runs it"]
async fn an_operator_chats_through_the_debug_page_and_the_session_resumes() {
    let (model_url, fake) = common::anthropic::fake_model(false).await;
    let (mut server, _home) = common::server::serve_claude(model_url, "").await;
    let page = browse(
        "chat_page.cjs",
        &server,
        &[
            ("FIRST", ASK),
            ("SECOND", FOLLOW_UP),
            ("THIRD", "/status"),
            ("STREAMED", ANSWER),
        ],
    )
    .await;
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

    // The conversation opened as it was: its stored history on the page
    // before the first message.
    assert!(
        first["earlier"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == common::DECISION),
        "{page}"
    );

    // The second message continued the same Claude session.
    assert_eq!(second["user"][1], FOLLOW_UP, "{page}");
    assert_eq!(second["assistant"][1], SECOND_ANSWER, "{page}");
    assert_eq!(second["resumed"], "yes", "{page}");
    assert_eq!(second["session_id"], session, "{page}");
    // Both turns ran in one live Claude Code process.
    let process = first["process"].as_str().unwrap();
    assert!(process.ends_with(", turn 1, kept"), "{page}");
    assert_eq!(
        second["process"],
        process.replace("turn 1", "turn 2"),
        "{page}"
    );
    assert_ne!(second["run_id"], first["run_id"]);
    // A chat command typed in the console is answered by the bridge.
    let status = page["third"]["assistant"][2].as_str().unwrap_or_default();
    assert!(
        status.starts_with("Nothing is running now.") && status.contains(&session[..8]),
        "{page}"
    );
    let asked = fake.requests.lock().unwrap().clone();
    assert!(
        !common::anthropic::people_said(&asked)
            .iter()
            .any(|t| t.contains("/status")),
        "the command reached the model"
    );
    // Before the token was entered the page said what it needs (and the
    // browser logged that 401); nothing else went wrong.
    assert!(
        first["events"][0]
            .as_str()
            .unwrap()
            .contains("enter the API token"),
        "{page}"
    );
    assert!(console_errors(&page).is_empty(), "{page}");
    // All that ran under the page's policy (a violation is a console
    // error): its own inline script and style by digest, nothing else, no
    // framing.
    let headers = &page["page_headers"];
    let policy = headers["content-security-policy"].as_str().unwrap_or("");
    for part in [
        "default-src 'self'",
        "script-src 'sha256-",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ] {
        assert!(policy.contains(part), "{part} is not in {policy:?}");
    }
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert_eq!(headers["x-frame-options"], "DENY", "{headers}");
    assert_eq!(headers["x-content-type-options"], "nosniff", "{headers}");
    assert_eq!(headers["referrer-policy"], "no-referrer", "{headers}");
    // The token the operator typed is kept for the tab only, never in
    // localStorage (on disk, for any page of this origin).
    let token = server.token.clone().expect("serve made a token");
    let local = page["storage"]["local"]
        .as_object()
        .expect("localStorage read");
    assert!(
        local.values().all(|v| v.as_str() != Some(token.as_str())),
        "{local:?}"
    );
    assert!(local.is_empty(), "nothing is kept on disk: {local:?}");
    assert_eq!(page["storage"]["session"]["hb.token"], token.as_str());
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
    // On the same service, a second person's turn; then the console.
    the_console_shows_what_ran_and_who_it_cost(&server).await;
    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

/// A question the real Claude Code asks with `ask_user` shows on the page
/// as a card with a button per choice; pressing one answers it as a new
/// turn, which resumes the same session with the choice. One asked over
/// the API stays open in its conversation's view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier chromium+clis: needs /usr/bin/chromium (apt-get install chromium) and the pinned claude and playwright-core (tests/clis); scripts/test runs it"]
async fn a_question_shows_as_a_card_and_a_button_answers_it() {
    let (model_url, _fake) =
        common::anthropic::fake_model_asking("Which environment?", &["staging", "production"])
            .await;
    let (mut server, _home) = common::server::serve_claude(model_url, "").await;
    let expect = format!("{GOING_WITH} production");
    let page = browse(
        "card.cjs",
        &server,
        &[
            ("FIRST", "Deploy it"),
            ("PRESS", "production"),
            ("EXPECT", &expect),
        ],
    )
    .await;
    let (asked, answered) = (&page["asked"], &page["answered"]);
    let card = &asked["cards"][0];
    assert_eq!(card["title"], "Which environment?", "{page}");
    let labels: Vec<&Value> = card["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["label"])
        .collect();
    assert_eq!(labels, ["staging", "production"], "{page}");
    assert!(card["buttons"][0]["disabled"] == false, "{page}");
    assert!(
        card["expiry"].as_str().unwrap().starts_with("open until"),
        "{page}"
    );
    let session = asked["session_id"].as_str().unwrap();
    assert!(session.len() > 8, "{page}");
    assert!(
        asked["pointer"]["external.pending_interaction"]
            .as_str()
            .unwrap()
            .contains("Which environment?"),
        "{page}"
    );

    // The button's answer ran as a new turn of the same session; the card
    // is closed and the open request cleared.
    let card = &answered["cards"][0];
    assert_eq!(card["outcome"], "answered: production", "{page}");
    assert!(
        card["buttons"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["disabled"] == true),
        "{page}"
    );
    assert_eq!(answered["user"][1], "production", "{page}");
    assert_eq!(answered["resumed"], "yes", "{page}");
    assert_eq!(answered["session_id"], session, "{page}");
    assert_eq!(
        answered["pointer"]["external.pending_interaction"], "null",
        "{page}"
    );
    assert!(console_errors(&page).is_empty(), "{page}");
    an_open_question_is_in_its_conversations_view(&server).await;
    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

/// With `approvals: chat`, Claude Code's request to run a command shows as
/// a confirmation card; "Approve once" lets that command run, in the same
/// session. (That nothing runs before, and only once, is claude_e2e's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier chromium+clis: needs /usr/bin/chromium (apt-get install chromium) and the pinned claude and playwright-core (tests/clis); scripts/test runs it"]
async fn an_approval_card_on_the_page_lets_the_command_run() {
    let (model_url, _fake) = common::anthropic::fake_model_running("touch approved-ran").await;
    let (mut server, _home) =
        common::server::serve_claude(model_url, "default_config:\n  approvals: chat\n").await;
    let page = browse(
        "card.cjs",
        &server,
        &[
            ("FIRST", "Please make the file"),
            ("PRESS", "Approve once"),
            ("EXPECT", BASH_DONE),
        ],
    )
    .await;
    let (asked, answered) = (&page["asked"], &page["answered"]);
    let card = &asked["cards"][0];
    assert!(
        card["title"]
            .as_str()
            .unwrap()
            .contains("run `touch approved-ran`"),
        "{page}"
    );
    let buttons: Vec<(&Value, &Value)> = card["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (&b["label"], &b["style"]))
        .collect();
    assert_eq!(
        buttons,
        [
            (&json!("Approve once"), &json!("primary")),
            (&json!("Deny"), &json!("danger"))
        ],
        "{page}"
    );
    let workspace = PathBuf::from(
        asked["pointer"]["external.working_directory"]
            .as_str()
            .expect("the workspace is in the pointer"),
    );

    assert_eq!(
        answered["cards"][0]["outcome"], "answered: Approve once",
        "{page}"
    );
    assert_eq!(answered["resumed"], "yes", "{page}");
    assert_eq!(answered["session_id"], asked["session_id"], "{page}");
    assert!(
        workspace.join("approved-ran").exists(),
        "the approved command did not run: {page}"
    );
    assert!(console_errors(&page).is_empty(), "{page}");
    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

/// An operator opens the console with the one-time link
/// `harness-bridge console-link` prints, typing no token: the tab has a
/// session (the harnesses load, a reload keeps it), the code is gone from
/// its address, nothing is in localStorage; the same link in a second tab
/// is refused in words, and a new tab without it asks for the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier chromium+clis: needs /usr/bin/chromium (apt-get install chromium) and the pinned claude and playwright-core (tests/clis); scripts/test runs it"]
async fn a_one_time_link_opens_the_console_in_its_tab_without_the_token() {
    let (model_url, _fake) = common::anthropic::fake_model(false).await;
    let (mut server, _home) = common::server::serve_claude(model_url, "").await;
    let output = server.console_link().await;
    assert!(output.status.success(), "{output:?}");
    let link = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let page = browse("link.cjs", &server, &[("LINK", &link)]).await;
    let token = server.token.clone().unwrap();
    let address = page["address"].as_str().unwrap();
    assert!(
        !address.contains("link="),
        "the code stays in the address: {page}"
    );
    assert!(
        page["notes"]
            .to_string()
            .contains("Signed in by a one-time link"),
        "{page}"
    );
    let session = &page["storage"]["session"]["hb.token"];
    assert!(
        session
            .as_str()
            .is_some_and(|s| s.len() == 64 && s != token),
        "the tab keeps a session of its own: {page}"
    );
    assert_eq!(page["storage"]["local"], json!({}), "{page}");
    assert!(
        !page["after_reload"]["notes"].to_string().contains("401"),
        "a reload keeps the session: {page}"
    );
    let second = page["second"]["notes"].to_string();
    assert!(second.contains("used already"), "{page}");
    assert_eq!(page["second"]["harnesses"], 0, "{page}");
    assert!(
        page["second"]["storage"]["session"]["hb.token"].is_null(),
        "{page}"
    );
    assert!(
        page["third"]["notes"]
            .to_string()
            .contains("401: enter the API token"),
        "{page}"
    );
    assert!(console_errors(&page).is_empty(), "{page}");
    let root = server.workspaces();
    assert!(server.stop().await.success());
    common::assert_none_left_under(&root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier chromium+clis: needs /usr/bin/chromium (apt-get install chromium) and the pinned claude and playwright-core (tests/clis); scripts/test runs it"]
async fn a_project_turn_on_the_page_shows_the_reply_the_changes_and_the_diff() {
    let dir = common::tempdir();
    let repo = common::repo::repository(dir.path());
    let (model_url, _fake) =
        common::anthropic::fake_model_running("echo 'hello from the page' >> greeting.txt").await;
    let extra = format!(
        "projects:\n  web:\n    repository: {}\n\
         default_config:\n  permission_mode: bypassPermissions\n  project: web\n",
        repo.display()
    );
    let (mut server, _home) = common::server::serve_claude(model_url, &extra).await;
    let page = browse(
        "project_turn.cjs",
        &server,
        &[("FIRST", "Greet from the page")],
    )
    .await;
    let turn = &page["turn"];
    // The reply stays the reply; the bridge's summary is a message of its
    // own after it, and the diff opens on the page.
    assert_eq!(turn["assistant"][0], BASH_DONE, "{page}");
    let summary = turn["project"][0].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("Changes on branch `chat/") && summary.contains("greeting.txt (+1 −0)"),
        "{page}"
    );
    let file = &turn["files"][0];
    assert!(
        file["about"]
            .as_str()
            .unwrap_or_default()
            .contains("changes-"),
        "{page}"
    );
    assert!(
        file["text"]
            .as_str()
            .unwrap_or_default()
            .contains("+hello from the page"),
        "{page}"
    );
    assert_eq!(page["diff_open"], true, "{page}");
    assert!(console_errors(&page).is_empty(), "{page}");
    assert!(server.stop().await.success());
}

/// Numbers as the console shows them (`1,234`).
fn number(text: &Value) -> u64 {
    let digits: String = text.as_str().unwrap_or("").replace(',', "");
    digits
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text}"))
}

/// The cells of the rows of a table the console script read.
fn cells(rows: &Value) -> Vec<Vec<&str>> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect()
        })
        .collect()
}

/// After alice's two turns on the chat page, bob asks through the API (the
/// real Claude Code, the fake model reporting 10 tokens in and 7 out a
/// request); the console then shows both, by person, as the ledger does.
async fn the_console_shows_what_ran_and_who_it_cost(server: &ServeProcess) {
    let results = server
        .results(json!({"conversation": "bob-chat", "actor": "bob", "text": ASK}))
        .await;
    assert_eq!(
        results.last().unwrap()["type"],
        "run.completed",
        "{results:?}"
    );
    let page = browse("console.cjs", server, &[("ACTOR", "bob")]).await;
    let listed: Vec<&str> = page["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(listed, ["bob-chat", CONVERSATION], "{page}");
    let of_bob = &page["conversations_of_actor"];
    assert_eq!(of_bob[0]["id"], "bob-chat", "{page}");
    // Three runs, each with the tokens the fake model reported; the
    // filter leaves bob's one.
    let runs = cells(&page["runs"]);
    assert_eq!(runs.len(), 3, "{page}");
    for run in &runs {
        assert!(
            number(&json!(run[8])) >= 10 && number(&json!(run[9])) >= 7,
            "{run:?}"
        );
    }
    let actors: Vec<&str> = runs.iter().map(|r| r[1]).collect();
    assert_eq!(actors, ["bob", "alice", "alice"], "{page}");
    assert_eq!(cells(&page["runs_of_actor"]).len(), 1, "{page}");

    // The conversation: who said what, its stored pointer; the same after
    // a reload, read anew.
    let view = &page["conversation"];
    assert_eq!(
        view["hash"],
        format!("#conversations/{CONVERSATION}"),
        "{page}"
    );
    let said: Vec<(&str, &str)> = view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["who"].as_str().unwrap(), i["text"].as_str().unwrap()))
        .collect();
    assert!(said.contains(&("alice", ASK)), "{page}");
    assert!(said.contains(&("alice", FOLLOW_UP)), "{page}");
    assert!(said.contains(&("claude-code", SECOND_ANSWER)), "{page}");
    assert!(
        view["state"]["external.session_id"]
            .as_str()
            .unwrap_or("")
            .len()
            > 8,
        "{page}"
    );
    assert_eq!(cells(&view["runs"]).len(), 2, "{page}");
    // Its Claude Code process is kept between turns: shown with its memory.
    let live = view["live"].as_str().unwrap_or("");
    assert!(
        live.starts_with("pid ") && live.contains("idle") && live.ends_with(" MiB"),
        "{page}"
    );
    let reloaded = &page["reloaded"];
    assert_eq!(reloaded["hash"], view["hash"], "{page}");
    assert_eq!(reloaded["shown"], true, "{page}");
    assert_eq!(reloaded["history"], view["history"], "{page}");

    // A run: who, when, what it cost, and the host call it made.
    let run = &page["run"];
    assert_eq!(run["facts"]["actor"], "alice", "{page}");
    assert!(
        run["facts"]["ended"].as_str().unwrap().ends_with(" UTC"),
        "{page}"
    );
    assert!(number(&run["facts"]["input tokens"]) >= 10, "{page}");
    let audit = cells(&run["audit"]);
    assert!(
        audit.iter().any(|row| row.join(" ").contains("history")),
        "the history call is audited: {page}"
    );

    usage_is_shown_as_the_ledger_has_it(server, &page).await;

    // Continued in the chat: the conversation as it is, its actor the
    // one who goes on.
    let continued = &page["continued"];
    assert_eq!(continued["hash"], "#chat", "{page}");
    assert_eq!(continued["conversation"], CONVERSATION, "{page}");
    assert_eq!(continued["actor"], "alice", "{page}");
    let log: Vec<(&str, &str)> = continued["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["role"].as_str().unwrap(), i["text"].as_str().unwrap()))
        .collect();
    assert!(log.contains(&("user", ASK)), "{page}");
    assert!(log.contains(&("assistant", SECOND_ANSWER)), "{page}");
    assert_eq!(
        continued["pointer"]["external.session_id"], view["state"]["external.session_id"],
        "{page}"
    );
}

/// The console's usage tab and live tab, the page's storage and policy:
/// each person's runs and tokens as `GET /v1/usage` sums them.
async fn usage_is_shown_as_the_ledger_has_it(server: &ServeProcess, page: &Value) {
    // Usage by person, as the ledger sums it.
    let ledger = server.get_json("/v1/usage?by=actor&days=30").await;
    let usage = cells(&page["usage"]["actors"]);
    for person in ["alice", "bob"] {
        let total = ledger["totals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["key"] == person)
            .unwrap_or_else(|| panic!("{person} not in {ledger}"));
        let shown = usage
            .iter()
            .find(|r| r[0] == person)
            .unwrap_or_else(|| panic!("{person} not shown: {page}"));
        assert_eq!(
            (
                number(&json!(shown[1])),
                number(&json!(shown[3])),
                number(&json!(shown[4])),
                number(&json!(shown[5]))
            ),
            (
                total["runs"].as_u64().unwrap(),
                total["refused"].as_u64().unwrap(),
                total["input_tokens"].as_u64().unwrap(),
                total["output_tokens"].as_u64().unwrap()
            ),
            "{page}"
        );
    }
    assert_eq!(
        page["usage"]["actor_bars"].as_array().unwrap().len(),
        2,
        "{page}"
    );
    assert_eq!(page["usage"]["day_bars"], 1, "{page}");
    // Claude Code stays live between turns: its processes, with memory.
    let live = cells(&page["live"]["rows"]);
    assert!(!live.is_empty(), "{page}");
    let mut served: Vec<&str> = live.iter().map(|r| r[6]).collect();
    served.sort();
    assert_eq!(served, ["bob-chat", CONVERSATION], "{page}");
    assert!(
        live.iter()
            .all(|r| r[0] == "claude-code" && r[5].ends_with(" MiB")),
        "{page}"
    );

    // Nothing on disk, no token in the page's storage but the tab's, and
    // nothing the page's policy refused.
    assert_eq!(page["storage"]["local"], json!({}), "{page}");
    assert!(console_errors(page).is_empty(), "{page}");
    let policy = page["page_headers"]["content-security-policy"]
        .as_str()
        .unwrap_or("");
    assert!(
        policy.contains("script-src 'sha256-") && !policy.contains("unsafe"),
        "{policy}"
    );
}

/// A question asked over the API stays open in its conversation's view
/// (what the console shows under "Open request"): who may answer, what
/// was asked; the answered one of the page's conversation is not.
async fn an_open_question_is_in_its_conversations_view(server: &ServeProcess) {
    let results = server
        .results(
            json!({"conversation": "asked-over-api", "actor": "carol", "text": "Deploy it too"}),
        )
        .await;
    let asked = results
        .iter()
        .any(|r| r["data"]["action"] == "interaction.requested");
    assert!(asked, "{results:?}");
    let view = server.get_json("/v1/conversations/asked-over-api").await;
    let open = &view["pending"]["claude-code"];
    assert_eq!(open["question"], "Which environment?", "{view}");
    assert_eq!(open["asked_by"]["id"], "carol", "{view}");
    assert!(open["expires_at"].as_i64() > Some(0), "{view}");
    let answered = server
        .get_json(&format!("/v1/conversations/{CONVERSATION}"))
        .await;
    assert_eq!(answered["pending"], json!({}), "{answered}");
}
