//! The fake harness of the `serve_load` bench: a tiny program that plays
//! one Claude Code turn. It reads its prompt, prints the recorded
//! `stream-json` of a turn (waiting `HB_FAKE_THINK_MS` after the first
//! line, as a model would), and appends `START_NS END_NS PID` (its own
//! time, from `main` to exit, and who it was) to `harness-timing` in its
//! working directory, so the bench can tell the harness's time from the
//! bridge's, and how long it waited to be reaped.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One turn of Claude Code's `stream-json` output, as recorded: the init
/// line, partial-message deltas, the whole message, the result.
const STREAM: &[&str] = &[
    r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11","tools":["Bash","Read"],"mcp_servers":[{"name":"langbot","status":"connected"}],"model":"claude-sonnet","permissionMode":"default","apiKeySource":"ANTHROPIC_API_KEY"}"#,
    r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet","content":[],"stop_reason":null,"usage":{"input_tokens":812,"output_tokens":1}}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"You decided "}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"to ship "}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"on Friday."}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"content_block_stop","index":0},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet","content":[{"type":"text","text":"You decided to ship on Friday."}],"stop_reason":null,"usage":{"input_tokens":812,"output_tokens":9}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"stream_event","event":{"type":"message_stop"},"session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11"}"#,
    r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1210,"num_turns":1,"result":"You decided to ship on Friday.","session_id":"6f1c9f1e-5b8e-4c55-9d8e-1c7a0c0a4b11","total_cost_usd":0.004,"usage":{"input_tokens":812,"output_tokens":9},"stop_reason":"end_turn"}"#,
];

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn main() {
    let think = std::env::var("HB_FAKE_THINK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    fake_harness(think);
}

/// The fake harness: note the start, print the stream, note the end.
fn fake_harness(think: Duration) {
    let start = now_ns();
    let mut prompt = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut prompt);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", STREAM[0]);
    let _ = out.flush();
    std::thread::sleep(think);
    for line in &STREAM[1..] {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    // Opened before the end is noted, and the process exits right after
    // the one write: the bench reads the end as when this harness
    // finished, to measure how long it then waits to be reaped.
    let mut timing = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("harness-timing")
        .expect("timing file");
    let end = now_ns();
    let _ = timing.write_all(format!("{start} {end} {}\n", std::process::id()).as_bytes());
    std::process::exit(0);
}
