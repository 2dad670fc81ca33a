//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in tests/clis, on the pinned Node 22) against a run's MCP server:
//! a real run opened on the SQLite store, its streamable-HTTP server on
//! loopback, the suite's server scenarios sent to its URL with the run's
//! bearer token. Every scenario that applies to this server passes; the
//! ones that do not are listed below with the reason, as the suite's own
//! expected failures, so one that starts passing (or a new one) fails the
//! test until it is classified.

use harness_bridge_testkit as common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{RUNNER, all_permissions, cli_dir, context};
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantPolicy, Grants};
use harness_bridge::mcp::{McpHttpServer, RunTools};

/// The scenarios that apply: what this server does (the handshake, ping,
/// listing its tools, refusing a foreign Host or Origin).
const APPLICABLE: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
];

/// The scenarios that do not apply, each with why. The suite's server
/// scenarios test a reference "everything" server: fixed tools, prompts
/// and resources of its own, and capabilities this server does not
/// declare (it serves a run's host tools, nothing else).
const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "logging-set-level",
        "the logging capability is not declared: the server sends no log notifications",
    ),
    (
        "completion-complete",
        "the completions capability is not declared: no prompts or resource templates to complete",
    ),
    (
        "tools-call-simple-text",
        "calls the reference server's `test_simple_text` tool, which a run does not have",
    ),
    (
        "tools-call-image",
        "calls the reference server's `test_image_content` tool, which a run does not have",
    ),
    (
        "tools-call-audio",
        "calls the reference server's `test_audio_content` tool, which a run does not have",
    ),
    (
        "tools-call-embedded-resource",
        "calls the reference server's `test_embedded_resource` tool, which a run does not have",
    ),
    (
        "tools-call-mixed-content",
        "calls the reference server's `test_multiple_content_types` tool, which a run does not have",
    ),
    (
        "tools-call-with-logging",
        "calls the reference server's `test_tool_with_logging` tool; no logging capability either",
    ),
    (
        "tools-call-error",
        "calls the reference server's `test_error_handling` tool, which a run does not have",
    ),
    (
        "tools-call-with-progress",
        "calls the reference server's `test_tool_with_progress` tool, which a run does not have",
    ),
    (
        "tools-call-sampling",
        "calls the reference server's `test_sampling` tool: this server never asks the client to sample",
    ),
    (
        "tools-call-elicitation",
        "calls the reference server's `test_elicitation` tool: this server never asks the client to elicit",
    ),
    (
        "json-schema-2020-12",
        "looks for the reference server's `json_schema_2020_12_tool` tool, which a run does not have (its own tools' 2020-12 schemas are in the tools_list snapshot)",
    ),
    (
        "elicitation-sep1034-defaults",
        "calls the reference server's elicitation tool: this server never elicits",
    ),
    (
        "elicitation-sep1330-enums",
        "calls the reference server's elicitation tool: this server never elicits",
    ),
    (
        "server-sse-polling",
        "the server is stateless with plain JSON answers (allowed by the transport): no session, no SSE stream to poll; it also calls the reference server's `test_reconnection` tool",
    ),
    (
        "server-sse-multiple-streams",
        "the server is stateless with plain JSON answers (allowed by the transport): no session, no SSE streams",
    ),
    (
        "resources-list",
        "the resources capability is not declared (resources/list is method not found)",
    ),
    (
        "resources-read-text",
        "the resources capability is not declared",
    ),
    (
        "resources-read-binary",
        "the resources capability is not declared",
    ),
    (
        "resources-templates-read",
        "the resources capability is not declared",
    ),
    (
        "resources-subscribe",
        "the resources capability is not declared",
    ),
    (
        "resources-unsubscribe",
        "the resources capability is not declared",
    ),
    (
        "prompts-list",
        "the prompts capability is not declared (prompts/list is method not found)",
    ),
    (
        "prompts-get-simple",
        "the prompts capability is not declared",
    ),
    (
        "prompts-get-with-args",
        "the prompts capability is not declared",
    ),
    (
        "prompts-get-embedded-resource",
        "the prompts capability is not declared",
    ),
    (
        "prompts-get-with-image",
        "the prompts capability is not declared",
    ),
];

/// A file of the test set-up, or a failure saying how to make it.
fn installed(relative: &str) -> PathBuf {
    let path = cli_dir().join("node_modules").join(relative);
    assert!(
        path.exists(),
        "{relative} is not installed at {}: run `scripts/test` (it runs `npm ci` in tests/clis)",
        path.display()
    );
    path
}

/// Per scenario, from the suite's summary lines (`✓ NAME: 2 passed, 0
/// failed`): its passed and failed checks. (Warnings are not in these
/// lines; the suite's own baseline check counts them as failures.)
fn summary(stdout: &str) -> BTreeMap<String, (u32, u32)> {
    let mut scenarios = BTreeMap::new();
    let Some((_, tail)) = stdout.split_once("=== SUMMARY ===") else {
        return scenarios;
    };
    for line in tail.lines() {
        let Some(rest) = line.strip_prefix("✓ ").or_else(|| line.strip_prefix("✗ ")) else {
            continue;
        };
        let Some((name, counts)) = rest.split_once(": ") else {
            continue;
        };
        let count = |word: &str| {
            counts
                .split(", ")
                .find_map(|c| c.strip_suffix(word)?.trim().parse::<u32>().ok())
        };
        if let (Some(passed), Some(failed)) = (count(" passed"), count(" failed")) {
            scenarios.insert(name.to_string(), (passed, failed));
        }
    }
    scenarios
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned MCP conformance suite and Node (npm ci --prefix tests/clis); scripts/test runs it"]
async fn the_official_conformance_suite_passes_where_it_applies() {
    let node = installed("node/bin/node");
    let suite = installed("@modelcontextprotocol/conformance/dist/index.js");
    let preload = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/bearer.mjs");

    let dir = common::tempdir();
    let store = SqliteHost::open(dir.path()).unwrap();
    let grants = Arc::new(Grants::new(Arc::new(store)));
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let http = McpHttpServer::start(grants.clone(), RunTools::default(), addr)
        .await
        .unwrap();
    let run = grants
        .open_run(
            &context("run-conformance", "c1"),
            RUNNER,
            &all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();

    // The suite's own baseline: it fails on an unexpected failure and on
    // an expected one that passes.
    let baseline = dir.path().join("expected-failures.yml");
    let mut yaml = String::from("server:\n");
    for (scenario, reason) in NOT_APPLICABLE {
        yaml.push_str(&format!("  - {scenario}  # {reason}\n"));
    }
    std::fs::write(&baseline, yaml).unwrap();

    let run_suite = tokio::process::Command::new(&node)
        .arg("--import")
        .arg(&preload)
        .arg(&suite)
        .args(["server", "--suite", "all", "--url", http.url()])
        .arg("--expected-failures")
        .arg(&baseline)
        .env("MCP_BEARER", run.token.expose())
        .env("MCP_CONFORMANCE_MAIN", &suite)
        .current_dir(dir.path())
        .kill_on_drop(true)
        .output();
    // It takes seconds: every scenario is a handful of requests.
    let output = tokio::time::timeout(Duration::from_secs(90), run_suite)
        .await
        .expect("the suite finishes within 90 s")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    // Shown with --nocapture: what the suite checked.
    println!("{said}");

    let ran = summary(&stdout);
    for scenario in APPLICABLE {
        let (passed, failed) = ran
            .get(*scenario)
            .copied()
            .unwrap_or_else(|| panic!("{scenario} did not run\n{said}"));
        assert!(
            passed > 0 && failed == 0,
            "{scenario}: {passed} passed, {failed} failed\n{said}"
        );
    }
    let known: Vec<&str> = APPLICABLE
        .iter()
        .copied()
        .chain(NOT_APPLICABLE.iter().map(|(name, _)| *name))
        .collect();
    let missing: Vec<&&str> = known.iter().filter(|s| !ran.contains_key(**s)).collect();
    assert!(
        missing.is_empty(),
        "scenarios listed here that the suite did not run: {missing:?}\n{said}"
    );
    let unclassified: Vec<&String> = ran
        .keys()
        .filter(|s| !known.contains(&s.as_str()))
        .collect();
    assert!(
        unclassified.is_empty(),
        "scenarios neither applicable nor listed with a reason: {unclassified:?}\n{said}"
    );
    assert!(
        output.status.success(),
        "the suite's baseline check failed (an unexpected failure, or a listed one that passes)\n{said}"
    );
    http.shutdown().await;
}
