//! Protocol v1 types: spec examples round-trip, compatibility rules hold,
//! and strict result validation names the wrong field.

use harness_bridge::protocol::*;
use serde_json::{Value, json};

/// The JSON examples of the protocol document (§5.3, §7.5, §9). The result
/// examples there omit the envelope's required `run_id`; it is added here.
#[test]
fn spec_examples_round_trip() {
    let trigger = json!({ "type": "message.received", "source": "host_adapter" });
    let parsed: AgentTrigger = serde_json::from_value(trigger.clone()).unwrap();
    assert_eq!(parsed.source, TriggerSource::HostAdapter);
    assert_eq!(serde_json::to_value(&parsed).unwrap(), trigger);

    let results = [
        json!({ "type": "message.delta", "data": { "chunk": { "role": "assistant", "content": "hel" } } }),
        json!({ "type": "message.completed", "data": { "message": { "role": "assistant", "content": "hello" } } }),
        json!({ "type": "state.updated", "data": { "scope": "conversation", "key": "external.session_id", "value": "abc" } }),
        json!({ "type": "action.requested", "data": { "action": "message.edit", "target": {"message_id": "..."}, "payload": {"text": "..."} } }),
        json!({ "type": "run.failed", "data": { "code": "runner.error", "error": "failed to call external agent", "retryable": false } }),
    ];
    for mut example in results {
        example["run_id"] = json!("run-1");
        let result: AgentRunResult = serde_json::from_value(example.clone()).unwrap();
        assert!(
            matches!(result.check(), Ok(CheckedResult::Known(_))),
            "{example}"
        );
        assert_eq!(serde_json::to_value(&result).unwrap(), example);
    }

    let error = json!({"code": "not_found", "message": "gone", "retryable": false, "details": {}});
    let parsed: AgentAPIError = serde_json::from_value(error.clone()).unwrap();
    assert_eq!(parsed.code, ErrorCode::NotFound);
    assert_eq!(serde_json::to_value(&parsed).unwrap(), error);
}

#[test]
fn typed_payloads_build_the_wire_shape() {
    let result = AgentRunResult::new(
        "r",
        ResultPayload::StateUpdated(StateUpdated {
            scope: StateScope::Conversation,
            key: "external.session_id".into(),
            value: json!("abc"),
        }),
    );
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"run_id": "r", "type": "state.updated", "data": {"scope": "conversation", "key": "external.session_id", "value": "abc"}})
    );
}

fn check(kind: &str, data: Value) -> Result<CheckedResult, PayloadError> {
    let result: AgentRunResult =
        serde_json::from_value(json!({"run_id": "r", "type": kind, "data": data})).unwrap();
    result.check()
}

#[test]
fn strict_payloads_report_the_wrong_field() {
    let cases = [
        (
            "message.delta",
            json!({"chunk": {"content": "x"}}),
            "data.chunk",
        ),
        (
            "message.delta",
            json!({"chunk": {"role": 5}}),
            "data.chunk.role",
        ),
        (
            "message.delta",
            json!({"chunk": {"role": "assistant"}, "extra": 1}),
            "data.extra",
        ),
        ("message.completed", json!({}), "data"),
        (
            "message.completed",
            json!({"message": {"role": "assistant", "content": 7}}),
            "data.message.content",
        ),
        ("artifact.created", json!({"name": "x"}), "data"),
        (
            "artifact.created",
            json!({"artifact_type": "file", "content_base64": "@@@"}),
            "data.content_base64",
        ),
        (
            "artifact.created",
            json!({"artifact_type": "file", "content_base64": "aGk=", "size_bytes": 9}),
            "data.size_bytes",
        ),
        (
            "artifact.created",
            json!({"artifact_type": "file", "sha256": "zz"}),
            "data.sha256",
        ),
        (
            "state.updated",
            json!({"scope": "galaxy", "key": "k", "value": 1}),
            "data.scope",
        ),
        (
            "state.updated",
            json!({"scope": "actor", "key": "", "value": 1}),
            "data.key",
        ),
        (
            "state.updated",
            json!({"scope": "actor", "value": 1}),
            "data",
        ),
        (
            "action.requested",
            json!({"action": "x", "target": "not-an-object"}),
            "data.target",
        ),
        (
            "run.completed",
            json!({"finish_reason": 3}),
            "data.finish_reason",
        ),
        (
            "run.failed",
            json!({"code": "x", "error": "y", "retryable": "no"}),
            "data.retryable",
        ),
        ("run.failed", json!({"error": "y"}), "data"),
    ];
    for (kind, data, path) in cases {
        let err = check(kind, data.clone()).expect_err(&format!("{kind} {data} must be rejected"));
        assert_eq!(err.path, path, "{kind} {data}: {err}");
        assert!(err.must_drop(), "{kind} is strict");
        assert!(err.to_string().contains(kind));
    }
}

#[test]
fn oversize_inline_artifact_is_rejected() {
    use base64::Engine as _;
    let big =
        base64::engine::general_purpose::STANDARD.encode(vec![0u8; INLINE_ARTIFACT_MAX_BYTES + 1]);
    let err = check(
        "artifact.created",
        json!({"artifact_type": "file", "content_base64": big}),
    )
    .unwrap_err();
    assert_eq!(err.path, "data.content_base64");
    let ok = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 10]);
    assert!(
        check(
            "artifact.created",
            json!({"artifact_type": "file", "content_base64": ok, "size_bytes": 10})
        )
        .is_ok()
    );
}

#[test]
fn telemetry_payload_errors_are_not_fatal_and_unknown_types_are_kept() {
    let err = check("tool.call.started", json!({"tool_name": "x"})).unwrap_err();
    assert!(!err.must_drop());
    let unknown: AgentRunResult = serde_json::from_value(
        json!({"run_id": "r", "type": "thinking.delta", "data": {"x": 1}, "sequence": 3}),
    )
    .unwrap();
    assert_eq!(unknown.kind, ResultType::Unknown("thinking.delta".into()));
    assert_eq!(
        unknown.check().unwrap(),
        CheckedResult::Unknown("thinking.delta".into())
    );
    assert_eq!(
        serde_json::to_value(&unknown).unwrap()["type"],
        "thinking.delta"
    );
}

#[test]
fn capabilities_and_permissions_reject_unknown_keys() {
    let err = serde_json::from_value::<AgentRunnerCapabilities>(
        json!({"streaming": true, "telepathy": true}),
    )
    .unwrap_err();
    assert!(err.to_string().contains("telepathy"), "{err}");
    let err = serde_json::from_value::<AgentRunnerPermissions>(
        json!({"history": ["page"], "shell": ["exec"]}),
    )
    .unwrap_err();
    assert!(err.to_string().contains("shell"), "{err}");
    let err = serde_json::from_value::<AgentRunnerPermissions>(json!({"history": ["delete"]}))
        .unwrap_err();
    assert!(err.to_string().contains("delete"), "{err}");
}

#[test]
fn permissions_intersect_key_by_key() {
    let manifest: AgentRunnerPermissions =
        serde_json::from_value(json!({"history": ["page", "search"], "storage": ["plugin"]}))
            .unwrap();
    let binding: AgentRunnerPermissions = serde_json::from_value(
        json!({"history": ["page"], "events": ["get"], "storage": ["plugin", "workspace"]}),
    )
    .unwrap();
    let effective = manifest.intersect(&binding);
    assert_eq!(effective.history, vec![HistoryOperation::Page]);
    assert!(effective.events.is_empty());
    assert_eq!(effective.storage, vec![StorageKind::Plugin]);
}

#[test]
fn context_keeps_unknown_fields_everywhere() {
    let doc = json!({
        "run_id": "r", "future_top": {"a": 1},
        "trigger": {"type": "message.received", "source": "api", "future": 1},
        "event": {"event_id": "e", "event_type": "message.received", "source": "api", "future": [1]},
        "input": {"text": "hi", "future": "x", "attachments": [{"name": "a.txt", "future": true}]},
        "delivery": {"surface": "api", "future": null},
        "resources": {"future": {}},
        "runtime": {"future": 2},
        "variables": {"v": 1}
    });
    let ctx: AgentRunContext = serde_json::from_value(doc).unwrap();
    let back = serde_json::to_value(&ctx).unwrap();
    assert_eq!(back["future_top"], json!({"a": 1}));
    assert_eq!(back["trigger"]["future"], json!(1));
    assert_eq!(back["event"]["future"], json!([1]));
    assert_eq!(back["input"]["future"], json!("x"));
    assert_eq!(back["input"]["attachments"][0]["future"], json!(true));
    assert_eq!(back["resources"]["future"], json!({}));
    assert_eq!(back["runtime"]["future"], json!(2));
    assert_eq!(back["variables"], json!({"v": 1}));
}

#[test]
fn validate_reports_every_broken_part_with_its_path() {
    let doc = json!({
        "run_id": "r",
        "trigger": {"type": "message.received", "source": "carrier-pigeon"},
        "event": {"event_type": "message.received", "source": "api"},
        "input": {"contents": [{"text": "no type"}]},
        "delivery": {"surface": "api"},
        "resources": {},
    });
    let (ctx, problems) = validate_context(&doc);
    assert!(ctx.is_none());
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"$.trigger.source"), "{problems:?}");
    assert!(paths.contains(&"$.event"), "{problems:?}");
    assert!(paths.contains(&"$.input.contents[0]"), "{problems:?}");
    assert!(paths.contains(&"$.runtime"), "{problems:?}");
    assert!(problems.iter().all(|p| p.severity == Severity::Error));

    let (ctx, problems) = validate_context(&json!([1]));
    assert!(ctx.is_none());
    assert_eq!(problems[0].path, "$");
}

#[test]
fn validate_semantic_checks() {
    let mut doc = serde_json::to_value(common_context()).unwrap();
    doc["context"]["conversation_id"] = json!("other");
    doc["runtime"]["deadline_at"] = json!(-5.0);
    let (ctx, problems) = validate_context(&doc);
    assert!(ctx.is_none());
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"$.context.conversation_id"), "{problems:?}");
    assert!(paths.contains(&"$.runtime.deadline_at"), "{problems:?}");
}

fn common_context() -> AgentRunContext {
    serde_json::from_value(json!({
        "run_id": "r",
        "trigger": {"type": "message.received"},
        "event": {"event_id": "e", "event_type": "message.received", "source": "api"},
        "conversation": {"conversation_id": "c"},
        "input": {"text": "hi"},
        "delivery": {"surface": "api"},
        "resources": {},
        "runtime": {}
    }))
    .unwrap()
}

#[test]
fn numbers_keep_their_exact_value_through_a_round_trip() {
    // A host's number the bridge passes on (here in a result's unknown
    // field and a context's config) comes out as it came in: a long
    // integer used to come back one unit in the last place off.
    let text = r#"{"run_id":"r","type":"x.new","n":17670000333333333333333333333333333300}"#;
    let once: AgentRunResult = serde_json::from_str(text).unwrap();
    let twice: AgentRunResult =
        serde_json::from_str(&serde_json::to_string(&once).unwrap()).unwrap();
    assert_eq!(once, twice);
    assert_eq!(twice.extra["n"].as_f64(), Some(1.7670000333333332e37));

    let mut doc = serde_json::to_value(common_context()).unwrap();
    doc["config"]["budget"] = serde_json::from_str("0.30000000000000004441").unwrap();
    let ctx = checked_context(&doc).unwrap();
    let again = checked_context(&serde_json::to_value(&ctx).unwrap()).unwrap();
    assert_eq!(ctx, again);
}
