//! What the fuzz targets share: reading a fuzz input as a few choices plus
//! a byte stream, cutting a stream into reads the way a pipe would, the
//! expected lines of a stream (a model of the line reader), and the checks
//! every decoder must pass.

use harness_bridge::harness::decode::{Exit, LineBuffer, ResultStream};
use harness_bridge::harness::families::OneShotFormat;
use harness_bridge::protocol::{AgentRunResult, CheckedResult};

/// A fuzz input read from the front: small choices first, then the rest.
pub struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    /// Read `data` from its first byte.
    pub fn new(data: &'a [u8]) -> Self {
        Input(data)
    }

    /// The next byte, 0 once the input is used up.
    pub fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        first
    }

    /// Whatever is left.
    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}

/// `stream` cut into reads whose sizes follow from `seed`: 0 gives the
/// whole stream in one read, anything else reads of 1 to `seed` bytes in a
/// fixed pseudo-random order, as a pipe hands a writer's output over in
/// pieces that have nothing to do with its lines.
pub fn reads(stream: &[u8], seed: u8) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![stream];
    }
    let mut out = Vec::new();
    let mut rest = stream;
    let mut state = u32::from(seed);
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (state >> 16) as usize % usize::from(seed);
        let (head, tail) = rest.split_at(size.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

/// What a line reader with cap `cap` must make of a stream: each line
/// (up to `\n`, and the last one even without it) as text without its
/// `\r`, or, when it is longer than the cap, as dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// A line within the cap, as text (invalid UTF-8 replaced).
    Line(String),
    /// A line over the cap: its whole bytes (the reader keeps a head).
    TooLong(Vec<u8>),
}

/// The lines of `stream` (the model the line reader is checked against).
pub fn expected_lines(stream: &[u8], cap: usize) -> Vec<Expected> {
    let mut pieces: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    // After the last newline: a line only if something is there.
    if pieces.last().is_some_and(|last| last.is_empty()) {
        pieces.pop();
    }
    pieces
        .into_iter()
        .map(|line| {
            if line.len() > cap {
                Expected::TooLong(line.to_vec())
            } else {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                Expected::Line(String::from_utf8_lossy(line).into_owned())
            }
        })
        .collect()
}

/// Whether `head` is what a reader may keep of the dropped `line`: its
/// start, at least as much of it as the cap allowed plus one byte (or all
/// of a head's 1 KiB), at most 1 KiB.
pub fn is_head_of(head: &[u8], line: &[u8], cap: usize) -> bool {
    line.starts_with(head) && head.len() <= 1024 && head.len() >= (cap + 1).min(1024)
}

/// [`is_head_of`] for a head that comes as text (invalid UTF-8 replaced).
pub fn is_text_head_of(head: &str, line: &[u8], cap: usize) -> bool {
    ((cap + 1).min(1024)..=line.len().min(1024))
        .any(|len| String::from_utf8_lossy(&line[..len]) == head)
}

/// Run a harness's output through decoder `name` as the bridge does
/// (reads of pipe-like sizes, lines, the decoder, the result stream, the
/// exit), and check what every run's results must be: numbered 1, 2, 3…,
/// exactly one terminal result and it is last, every payload one a host
/// accepts, and the same results however the output was cut into reads.
pub fn check_decoder(name: &str, data: &[u8]) {
    let mut input = Input::new(data);
    let exit = match input.byte() {
        0 => Exit { code: Some(0) },
        1 => Exit { code: None },
        b => Exit {
            code: Some(i32::from(b)),
        },
    };
    let seed = input.byte();
    let stream = input.rest();
    let results = decode(name, stream, seed, exit);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result.sequence, Some(i as u64 + 1), "numbered from 1");
        assert_eq!(
            result.kind.is_terminal(),
            i + 1 == results.len(),
            "one terminal result, last: {results:?}"
        );
        match result.check() {
            Ok(CheckedResult::Known(payload)) => assert_eq!(payload.kind(), result.kind),
            other => panic!("the decoder made a result a host would not take: {other:?}"),
        }
    }
    let whole = decode(name, stream, 0, exit);
    let without_stamps = |results: &[AgentRunResult]| -> Vec<AgentRunResult> {
        results
            .iter()
            .cloned()
            .map(|mut r| {
                r.timestamp = None;
                r
            })
            .collect()
    };
    assert_eq!(
        without_stamps(&results),
        without_stamps(&whole),
        "cutting the output differently changed the results"
    );
}

fn decode(name: &str, stream: &[u8], seed: u8, exit: Exit) -> Vec<AgentRunResult> {
    let mut decoder = OneShotFormat::named(name)
        .expect("a known decoder")
        .decoder();
    let mut lines = LineBuffer::default();
    let mut results = ResultStream::new("fuzz");
    let mut out = Vec::new();
    let mut line = |decoder: &mut Box<dyn harness_bridge::harness::decode::Decoder>, line: &str| {
        let payloads = decoder.line(line);
        assert!(
            payloads.iter().all(|p| !p.kind().is_terminal()),
            "only the exit ends a run: {payloads:?}"
        );
        results.stamp(payloads)
    };
    for read in reads(stream, seed) {
        for text in lines.push(read) {
            out.extend(line(&mut decoder, &text));
        }
    }
    if let Some(text) = lines.finish() {
        out.extend(line(&mut decoder, &text));
    }
    let end = decoder.finish(exit);
    assert!(
        end.len() == 1 && end[0].kind().is_terminal(),
        "the exit gives one terminal result: {end:?}"
    );
    out.extend(results.stamp(end));
    out
}

/// What a live driver writes must be one JSON object a line.
pub fn one_object_per_line(lines: &[String]) {
    for line in lines {
        assert!(!line.contains('\n'), "{line}");
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object()),
            "{line}"
        );
    }
}

/// What a live driver is opened with in a fuzz run: a workspace, the
/// bridge's MCP server as an ACP client would hand it over, and the
/// bridge's own history tool (allowed without asking).
pub fn live_setup() -> harness_bridge::harness::live::Setup {
    harness_bridge::harness::live::Setup {
        cwd: "/ws".into(),
        mcp_servers: serde_json::json!([{"type": "http", "name": "langbot", "url": "http://127.0.0.1:1/mcp", "headers": []}]),
        own_tools: vec!["mcp__langbot__history_page".into()],
    }
}
