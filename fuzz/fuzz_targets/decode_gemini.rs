//! Gemini CLI's `--output-format stream-json` output, cut into reads of any
//! size, with any exit: see `check_decoder` for what must hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    harness_bridge_fuzz::check_decoder("gemini-stream-json", data);
});
