//! An `AgentRunContext` from a host: `validate_context` and
//! `checked_context` agree, every problem has a path, and a context they
//! accept serializes to a document that parses back to the same context.
#![no_main]

use harness_bridge::protocol::{Severity, checked_context, validate_context};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let (ctx, problems) = validate_context(&doc);
    for problem in &problems {
        assert!(problem.path.starts_with('$'), "{problem}");
        assert!(!problem.message.is_empty(), "{problem}");
    }
    let has_errors = problems.iter().any(|p| p.severity == Severity::Error);
    assert_eq!(ctx.is_some(), !has_errors, "{problems:?}");
    let checked = checked_context(&doc);
    match (&ctx, &checked) {
        (Some(ctx), Ok(checked)) => assert_eq!(ctx, checked),
        (None, Err(why)) => assert!(
            why.to_string().starts_with("invalid AgentRunContext: "),
            "{why}"
        ),
        _ => panic!("validate_context and checked_context disagree: {problems:?} / {checked:?}"),
    }
    let Some(ctx) = ctx else {
        return;
    };
    let again = serde_json::to_value(&ctx).expect("a context serializes");
    let reparsed = checked_context(&again).expect("a serialized context is valid");
    assert_eq!(reparsed, ctx, "the context changed through a round trip");
    assert_eq!(
        serde_json::to_value(&reparsed).expect("a context serializes"),
        again,
        "serializing is not stable"
    );
});
