//! The relay's line reader (`Frames`) over input arriving in reads of any
//! size, with a small cap: it yields the stream's non-blank lines within
//! the cap and, in their place, the head of each line over it, in order.
#![no_main]

use std::collections::VecDeque;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use harness_bridge::relay::{Frames, Incoming};
use harness_bridge_fuzz::{Expected, Input, expected_lines, is_text_head_of, reads};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, ReadBuf};

/// Input that arrives in the given reads, each ready at once.
struct Reads<'a>(VecDeque<&'a [u8]>);

impl AsyncRead for Reads<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let reads = &mut self.get_mut().0;
        if let Some(read) = reads.front_mut() {
            let n = read.len().min(buf.remaining());
            buf.put_slice(&read[..n]);
            *read = &read[n..];
            if read.is_empty() {
                reads.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

fn next(frames: &mut Frames<Reads<'_>>) -> Option<Incoming> {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(frames.next()).poll(&mut cx) {
        Poll::Ready(next) => next.expect("reading from memory cannot fail"),
        Poll::Pending => panic!("input that is always ready made the reader wait"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cap = 1 + usize::from(input.byte() % 64);
    let seed = input.byte();
    let stream = input.rest();
    let mut frames = Frames::with_max_line(Reads(reads(stream, seed).into()), cap);
    let mut got = Vec::new();
    while let Some(incoming) = next(&mut frames) {
        got.push(incoming);
    }
    let expected: Vec<Expected> = expected_lines(stream, cap)
        .into_iter()
        .filter(|e| !matches!(e, Expected::Line(line) if line.trim().is_empty()))
        .collect();
    assert_eq!(got.len(), expected.len(), "{got:?} for {expected:?}");
    for (got, expected) in got.iter().zip(&expected) {
        match (got, expected) {
            (Incoming::Line(line), Expected::Line(want)) => assert_eq!(line, want),
            (Incoming::TooLong(head), Expected::TooLong(line)) => assert!(
                is_text_head_of(head, line, cap),
                "{head:?} is not the head of {line:?}"
            ),
            _ => panic!("{got:?} where {expected:?} was due"),
        }
    }
});
