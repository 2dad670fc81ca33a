//! An ACP agent's JSON-RPC, line by line, with turns and interrupts in
//! between: nothing panics, every request the agent makes is answered at
//! once with its own id (none asks the person: no `approvals: chat`), a
//! turn ends only on a response to one of the driver's requests, and what
//! the driver writes is one JSON object a line.
#![no_main]

use harness_bridge::harness::families::acp::Acp;
use harness_bridge::harness::live::LiveDriver;
use harness_bridge_fuzz::{live_setup, one_object_per_line};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let resume = data.first().is_some_and(|b| b % 2 == 1);
    let mut live = Acp::default();
    let setup = live_setup();
    one_object_per_line(&live.open(resume.then_some("s-1"), &setup));
    let text = String::from_utf8_lossy(data.get(1..).unwrap_or_default()).into_owned();
    for (n, line) in text.lines().enumerate() {
        match n % 5 {
            0 => one_object_per_line(&live.turn(line)),
            3 => one_object_per_line(&live.interrupt()),
            _ => {}
        }
        let step = live.line(line);
        one_object_per_line(&step.write);
        assert!(
            step.permission.is_none(),
            "the person was asked, though nobody is to be: {line}"
        );
        let parsed = serde_json::from_str::<Value>(line).ok();
        let asks = parsed.as_ref().is_some_and(|v| {
            v["method"].is_string() && (v["id"].is_number() || v["id"].is_string())
        });
        if asks {
            assert_eq!(step.write.len(), 1, "{line}");
            let answer: Value = serde_json::from_str(&step.write[0]).expect("JSON");
            assert_eq!(answer["id"], parsed.as_ref().expect("parsed")["id"]);
        }
        if step.ended.is_some() {
            let v = parsed.expect("a turn ends on JSON");
            assert!(
                v["method"].is_null() && v["id"].is_number(),
                "a turn ended on {line}"
            );
        }
    }
});
