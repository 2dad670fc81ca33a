//! Claude Code's live stream-json, line by line, with turns and interrupts
//! in between: nothing panics, a turn ends only on a `result` line, a
//! permission request is only a `can_use_tool` control request with its
//! id and tool, and what the driver writes is one JSON object a line.
#![no_main]

use harness_bridge::harness::families::claude::ClaudeLive;
use harness_bridge::harness::live::LiveDriver;
use harness_bridge::interaction::Decision;
use harness_bridge_fuzz::{live_setup, one_object_per_line};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut live = ClaudeLive::default();
    one_object_per_line(&live.open(None, &live_setup()));
    let text = String::from_utf8_lossy(data).into_owned();
    for (n, line) in text.lines().enumerate() {
        match n % 7 {
            0 => one_object_per_line(&live.turn(line)),
            5 => one_object_per_line(&live.interrupt()),
            _ => {}
        }
        let step = live.line(line);
        let parsed = serde_json::from_str::<Value>(line).ok();
        if step.ended.is_some() {
            assert!(
                parsed.as_ref().is_some_and(|v| v["type"] == "result"),
                "a turn ended on {line}"
            );
            assert!(step.ended.as_ref().is_some_and(|e| e.kind().is_terminal()));
        }
        if let Some(request) = &step.permission {
            let v = parsed.as_ref().expect("a request is JSON");
            assert_eq!(v["request"]["subtype"], "can_use_tool");
            assert_eq!(v["request_id"].as_str(), Some(request.id.as_str()));
            assert_eq!(
                v["request"]["tool_name"].as_str(),
                Some(request.tool.as_str())
            );
            let answer = live.permit(
                &request.id,
                &Decision::Deny {
                    message: line.to_string(),
                    interrupt: false,
                },
            );
            one_object_per_line(&answer);
        }
    }
});
