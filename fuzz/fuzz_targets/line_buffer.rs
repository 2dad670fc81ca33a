//! The line buffer every harness's output and the relay's input go
//! through, with a small cap and reads of any size: it yields exactly the
//! stream's lines within the cap, none longer than the cap, and in place
//! of each line over it, that line's start; `push` gives the same lines.
#![no_main]

use harness_bridge::harness::decode::{LineBuffer, Piece};
use harness_bridge_fuzz::{Expected, Input, expected_lines, is_head_of, reads};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cap = 1 + usize::from(input.byte() % 64);
    let seed = input.byte();
    let stream = input.rest();
    let mut buffer = LineBuffer::with_max_line(cap);
    let mut lines_only = LineBuffer::with_max_line(cap);
    let mut pieces = Vec::new();
    let mut lines = Vec::new();
    for read in reads(stream, seed) {
        pieces.extend(buffer.pieces(read));
        lines.extend(lines_only.push(read));
    }
    pieces.extend(buffer.finish().map(Piece::Line));
    lines.extend(lines_only.finish());

    let expected = expected_lines(stream, cap);
    assert_eq!(pieces.len(), expected.len(), "{pieces:?} for {expected:?}");
    for (piece, expected) in pieces.iter().zip(&expected) {
        match (piece, expected) {
            (Piece::Line(line), Expected::Line(want)) => assert_eq!(line, want),
            (Piece::TooLong(head), Expected::TooLong(line)) => {
                assert!(
                    is_head_of(head, line, cap),
                    "{head:?} is not the head of {line:?}"
                )
            }
            _ => panic!("{piece:?} where {expected:?} was due"),
        }
    }
    let within: Vec<&String> = pieces
        .iter()
        .filter_map(|piece| match piece {
            Piece::Line(line) => Some(line),
            Piece::TooLong(_) => None,
        })
        .collect();
    assert_eq!(
        lines.iter().collect::<Vec<_>>(),
        within,
        "push and pieces disagree"
    );
});
