//! A line from the plugin as a relay frame: a frame that parses round-trips,
//! and reading a field from the start of a frame cut anywhere (what the
//! relay does with a frame over its cap) gives the frame's own value or
//! nothing, never a wrong one.
#![no_main]

use harness_bridge::relay::{Inbound, field_in_head};
use harness_bridge_fuzz::Input;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cut = usize::from(input.byte());
    let Ok(line) = std::str::from_utf8(input.rest()) else {
        return;
    };
    // Whatever the line is, reading its head does not fail.
    let _ = field_in_head::<String>(line, "type");
    let _ = field_in_head::<u64>(line, "id");
    let Ok(frame) = serde_json::from_str::<Inbound>(line) else {
        return;
    };
    let text = serde_json::to_string(&frame).expect("a frame serializes");
    let again: Inbound = serde_json::from_str(&text).expect("a serialized frame parses");
    assert_eq!(again, frame, "the frame changed through a round trip");

    // The frame as the bridge's own encoder writes it, cut after `cut`
    // bytes (on a character boundary).
    let mut end = cut.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    let (kind, run_id, id) = match &frame {
        Inbound::Hello { .. } => ("hello", None, None),
        Inbound::Run { run_id, .. } => ("run", Some(run_id), None),
        Inbound::Cancel { run_id } => ("cancel", Some(run_id), None),
        Inbound::Steer { run_id, id, .. } => ("steer", Some(run_id), Some(*id)),
        Inbound::HostReply { id, .. } => ("host_reply", None, Some(*id)),
    };
    if let Some(found) = field_in_head::<String>(head, "type") {
        assert_eq!(found, kind, "wrong type read from {head:?}");
    }
    if let (Some(run_id), Some(found)) = (run_id, field_in_head::<String>(head, "run_id")) {
        assert_eq!(&found, run_id, "wrong run_id read from {head:?}");
    }
    if let (Some(id), Some(found)) = (id, field_in_head::<u64>(head, "id")) {
        assert_eq!(found, id, "wrong id read from {head:?}");
    }
});
