//! Interop with the released `langbot-plugin` SDK: contexts and results
//! built with its pydantic models parse here, and what we serialize
//! validates back there. Needs the SDK venv the test command creates.

use harness_bridge_testkit as common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use harness_bridge::protocol::*;
use serde_json::{Value, json};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/sdk_models.py")
}

fn sdk(mode: &str, input: &str) -> Vec<Value> {
    let mut child = Command::new(common::sdk_python())
        .arg(script())
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "sdk {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Drop null-valued keys, and map the SDK's `attachment_refs` to the
/// protocol's `artifact_refs`: the only differences allowed after a round trip.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| {
                    (
                        if k == "attachment_refs" {
                            "artifact_refs".into()
                        } else {
                            k.clone()
                        },
                        normalize(v),
                    )
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn reserialize(kind: &str, json: &Value) -> Value {
    let back = match kind {
        "context" => {
            let (ctx, problems) = validate_context(json);
            let ctx = ctx.unwrap_or_else(|| panic!("SDK context rejected: {problems:?}"));
            assert!(
                problems.iter().all(|p| p.severity == Severity::Warning),
                "{problems:?}"
            );
            serde_json::to_value(ctx)
        }
        "result" => {
            let result: AgentRunResult = serde_json::from_value(json.clone()).unwrap();
            assert!(
                matches!(result.check(), Ok(CheckedResult::Known(_))),
                "{json}: {:?}",
                result.check()
            );
            serde_json::to_value(result)
        }
        "manifest" => serde_json::to_value(
            serde_json::from_value::<AgentRunnerManifest>(json.clone()).unwrap(),
        ),
        "history_page" => {
            serde_json::to_value(serde_json::from_value::<HistoryPage>(json.clone()).unwrap())
        }
        "history_search" => serde_json::to_value(
            serde_json::from_value::<HistorySearchResult>(json.clone()).unwrap(),
        ),
        "event_page" => {
            serde_json::to_value(serde_json::from_value::<EventPage>(json.clone()).unwrap())
        }
        "api_error" => {
            serde_json::to_value(serde_json::from_value::<AgentAPIError>(json.clone()).unwrap())
        }
        other => panic!("unknown sample kind {other}"),
    };
    back.unwrap()
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn sdk_samples_parse_here_and_our_output_validates_there() {
    let samples = sdk("samples", "");
    assert!(
        samples.len() >= 15,
        "the SDK produced {} samples",
        samples.len()
    );
    let mut lines = String::new();
    for sample in &samples {
        let (kind, name, original) = (
            sample["kind"].as_str().unwrap(),
            &sample["name"],
            &sample["json"],
        );
        let back = reserialize(kind, original);
        assert_eq!(
            normalize(&back),
            normalize(original),
            "{kind} {name} changed in the round trip"
        );
        lines.push_str(&json!({"kind": kind, "name": name, "json": back}).to_string());
        lines.push('\n');
    }
    // The SDK-only `variables` survives.
    let full = samples.iter().find(|s| s["name"] == "full").unwrap();
    let ctx: AgentRunContext = serde_json::from_value(full["json"].clone()).unwrap();
    assert_eq!(ctx.variables["user_name"], "Ada");
    assert_eq!(ctx.context.available_apis.extra["prompt_get"], true);

    for verdict in sdk("validate", &lines) {
        assert_eq!(
            verdict["ok"], true,
            "SDK rejected our {}: {}",
            verdict["name"], verdict["error"]
        );
    }
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn our_manifest_validates_in_the_sdk() {
    let mut lines = String::new();
    for runner in
        harness_bridge::harness::discovery(harness_bridge::harness::Adapters::builtin()).runners
    {
        let mut manifest = serde_json::to_value(&runner.manifest).unwrap();
        // The released SDK has no artifact permission (artifact APIs are in
        // the protocol document only); LangBot never sees this key.
        manifest["permissions"]
            .as_object_mut()
            .unwrap()
            .remove("artifacts");
        lines.push_str(
            &json!({"kind": "manifest", "name": runner.runner_name, "json": manifest}).to_string(),
        );
        lines.push('\n');
    }
    for verdict in sdk("validate", &lines) {
        assert_eq!(
            verdict["ok"], true,
            "SDK rejected manifest {}: {}",
            verdict["name"], verdict["error"]
        );
    }
}

#[test]
#[ignore = "tier sdk: needs the langbot-plugin SDK venv (target/sdk-venv or HARNESS_BRIDGE_SDK_PYTHON); scripts/test runs it"]
fn cli_validates_sdk_contexts_and_rejects_a_broken_one() {
    let dir = common::tempdir();
    let bin = env!("CARGO_BIN_EXE_harness-bridge");
    for sample in sdk("samples", "").iter().filter(|s| s["kind"] == "context") {
        let path = dir
            .path()
            .join(format!("{}.json", sample["name"].as_str().unwrap()));
        std::fs::write(&path, sample["json"].to_string()).unwrap();
        let out = Command::new(bin)
            .args(["context", "validate"])
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        assert!(stdout.contains("valid AgentRunContext"), "{stdout}");

        let mut broken = sample["json"].clone();
        broken["event"].as_object_mut().unwrap().remove("event_id");
        broken["trigger"]["source"] = json!("carrier-pigeon");
        let mut child = Command::new(bin)
            .args(["context", "validate", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(broken.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains("error at $.event: missing field `event_id`"),
            "{stdout}"
        );
        assert!(stdout.contains("error at $.trigger.source"), "{stdout}");
    }
}
