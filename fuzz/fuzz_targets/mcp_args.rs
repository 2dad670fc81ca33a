//! The arguments of an MCP tool call, as the harness sends them: a known
//! tool refuses bad ones with `invalid_argument`, an unknown tool is
//! `not_found`, and no tool takes an argument it does not know.
#![no_main]

use std::collections::BTreeSet;

use harness_bridge::host::Api;
use harness_bridge::mcp::{check_arguments, tool_names};
use harness_bridge::protocol::ErrorCode;
use harness_bridge_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let all = harness_bridge::interaction::Asking {
        questions: true,
        approvals: true,
        publish: true,
    };
    let names = tool_names(&Api::ALL.into_iter().collect::<BTreeSet<_>>(), all);
    let pick = usize::from(input.byte());
    let (name, known) = match names.get(pick) {
        Some(name) => (*name, true),
        None => ("no_such_tool", false),
    };
    let Ok(Value::Object(args)) = serde_json::from_slice::<Value>(input.rest()) else {
        return;
    };
    match check_arguments(name, &args) {
        Ok(()) => {
            assert!(known, "an unknown tool took a call");
            let mut more = args.clone();
            more.insert("an_argument_no_tool_has".into(), Value::Null);
            let refused = check_arguments(name, &more).expect_err("an unknown argument was taken");
            assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused:?}");
        }
        Err(err) if known => assert_eq!(err.code, ErrorCode::InvalidArgument, "{err:?}"),
        Err(err) => assert_eq!(err.code, ErrorCode::NotFound, "{err:?}"),
    }
});
