//! An `AgentRunResult` from a runner: the envelope round-trips, `check`
//! names a field under `data` when it refuses, and a payload it accepts,
//! sent again as a new result, is accepted as the same payload.
#![no_main]

use harness_bridge::protocol::{AgentRunResult, CheckedResult, ResultType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(result) = serde_json::from_slice::<AgentRunResult>(data) else {
        return;
    };
    let text = serde_json::to_string(&result).expect("a result serializes");
    let again: AgentRunResult = serde_json::from_str(&text).expect("a serialized result parses");
    assert_eq!(again, result, "the envelope changed through a round trip");
    match result.check() {
        Ok(CheckedResult::Known(payload)) => {
            assert_eq!(payload.kind(), result.kind);
            let resent = AgentRunResult::new(result.run_id.clone(), (*payload).clone());
            assert_eq!(
                resent.check(),
                Ok(CheckedResult::Known(payload)),
                "a checked payload did not survive being sent again"
            );
        }
        Ok(CheckedResult::Unknown(name)) => {
            assert!(matches!(&result.kind, ResultType::Unknown(n) if *n == name));
        }
        Err(err) => {
            assert_eq!(err.kind, result.kind);
            assert!(err.path.starts_with("data"), "{err}");
        }
    }
});
