//! An adapter spec (YAML) from an operator's folder: a bad one is refused
//! naming the file (and a line that exists); a good one gives argv in
//! which every value stands verbatim (a prompt that looks like a
//! placeholder is never filled in), and a resumed turn always passes the
//! session id (an ACP agent has no argv: its protocol passes it).
#![no_main]

use std::path::Path;

use harness_bridge::harness::{AdapterSpec, TurnValues};
use libfuzzer_sys::fuzz_target;

/// Marks no spec text contains (checked): values made of them can be found
/// again in the argv.
const MARK: char = '\u{E000}';

/// Values that each look like another placeholder.
const TRICKY: [&str; 8] = [
    "{session_id}",
    "{model}",
    "{prompt}",
    "{instructions}",
    "{permission_mode}",
    "{mcp_config|toml}",
    "k={prompt}",
    "{usage_file}",
];

fn values<'a>(v: &'a [String; 8], resume: bool, all: bool) -> TurnValues<'a> {
    TurnValues {
        prompt: &v[0],
        instructions: all.then_some(v[1].as_str()),
        mcp_config: all.then_some(Path::new(&v[2])),
        session_id: resume.then_some(v[3].as_str()),
        model: all.then_some(v[4].as_str()),
        permission_mode: all.then_some(v[5].as_str()),
        permission_prompt_tool: None,
        config_overrides: std::slice::from_ref(&v[6]),
        usage_file: all.then_some(Path::new(&v[7])),
        own_port: all.then_some(4242),
        sandbox: all.then_some("danger-full-access"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let spec = match AdapterSpec::parse("fuzz.yaml", text) {
        Ok(spec) => spec,
        Err(err) => {
            assert_eq!(err.file, "fuzz.yaml");
            assert!(!err.reason.is_empty());
            if let Some(line) = err.line {
                // YAML breaks lines at `\n`, `\r\n`, a lone `\r`, NEL, LS and PS.
                let lines = text
                    .replace("\r\n", "\n")
                    .replace(['\r', '\u{85}', '\u{2028}', '\u{2029}'], "\n")
                    .lines()
                    .count();
                assert!(line >= 1 && line <= lines + 1, "{err}");
            }
            return;
        }
    };
    let _ = spec.target();
    if spec.live_only() {
        // An ACP agent: no one-shot argv; the protocol carries the session.
        assert!(spec.argv.new.is_empty() && spec.argv.resume.is_empty());
        return;
    }
    if text.contains(MARK) {
        return;
    }
    let marks: [String; 8] = std::array::from_fn(|i| format!("{MARK}{i}{MARK}"));
    let tricky: [String; 8] = TRICKY.map(str::to_string);
    for resume in [false, true] {
        for all in [false, true] {
            // No value here starts with `-`, the one thing args refuses.
            let plain = spec
                .args(&values(&marks, resume, all))
                .expect("values not starting with '-' render");
            let filled = spec
                .args(&values(&tricky, resume, all))
                .expect("values not starting with '-' render");
            let expected: Vec<String> = plain
                .iter()
                .map(|arg| {
                    marks
                        .iter()
                        .zip(&tricky)
                        .fold(arg.clone(), |arg, (mark, value)| arg.replace(mark, value))
                })
                .collect();
            assert_eq!(filled, expected, "a value was not inserted verbatim");
            if resume {
                assert!(
                    plain.iter().any(|arg| arg.contains(&marks[3])),
                    "a resumed turn does not pass its session id: {plain:?}"
                );
            }
        }
    }
});
