//! Reading the plugin's frames: one JSON object per line, read in chunks.
//!
//! A line longer than the cap is not kept, but it is not forgotten either:
//! a run frame must get its one terminal result and a host reply must end
//! its call, or the plugin (or the harness) waits forever. So a dropped
//! line comes out as [`Incoming::TooLong`] with its first bytes, from which
//! the frame's type and id can usually still be read.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::harness::decode::{LineBuffer, Piece};

/// The longest frame the relay reads. A run frame carries the context,
/// inline attachments included (8 MiB each by default, base64 in JSON).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// One line from the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A whole line.
    Line(String),
    /// A line over [`MAX_FRAME_BYTES`], dropped: its first bytes.
    TooLong(String),
}

/// Reads lines; blank lines are skipped.
pub struct Frames<R> {
    reader: R,
    lines: LineBuffer,
    ready: VecDeque<Incoming>,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Frames<R> {
    /// Frames from `reader`, with the relay's line cap.
    pub fn new(reader: R) -> Self {
        Self::with_max_line(reader, MAX_FRAME_BYTES)
    }

    /// Frames from `reader` with another cap: a small one shows what the
    /// cap does without megabytes of input (tests, fuzzing).
    pub fn with_max_line(reader: R, max_line: usize) -> Self {
        Frames {
            reader,
            lines: LineBuffer::with_max_line(max_line),
            ready: VecDeque::new(),
            buf: vec![0; 64 * 1024],
        }
    }

    /// The next line; `None` at the end of input.
    pub async fn next(&mut self) -> std::io::Result<Option<Incoming>> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                if is_blank(&line) {
                    continue;
                }
                return Ok(Some(line));
            }
            let n = self.reader.read(&mut self.buf).await?;
            if n == 0 {
                return Ok(self
                    .lines
                    .finish()
                    .map(Incoming::Line)
                    .filter(|line| !is_blank(line)));
            }
            let pieces = self.lines.pieces(&self.buf[..n]);
            self.ready
                .extend(pieces.into_iter().map(|piece| match piece {
                    Piece::Line(line) => Incoming::Line(line),
                    Piece::TooLong(head) => {
                        Incoming::TooLong(String::from_utf8_lossy(&head).into_owned())
                    }
                }));
        }
    }
}

fn is_blank(line: &Incoming) -> bool {
    matches!(line, Incoming::Line(text) if text.trim().is_empty())
}

/// The value of the first `"key": value` in the start of a JSON object,
/// when it is there whole: enough to name a frame too long to parse.
pub fn field_in_head<T: serde::de::DeserializeOwned>(head: &str, key: &str) -> Option<T> {
    let quoted = format!("\"{key}\"");
    let after = &head[head.find(&quoted)? + quoted.len()..];
    let after = after.trim_start().strip_prefix(':')?;
    let mut values = serde_json::Deserializer::from_str(after).into_iter::<T>();
    let value = values.next()?.ok()?;
    // A number that runs to the end of the head may have been cut there
    // (`"id": 12` of `"id": 123`): nothing marks its end but what follows.
    let end = values.byte_offset();
    let cut = end == after.len() && after.ends_with(|c: char| c.is_ascii_digit());
    (!cut).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_the_start_of_a_cut_frame() {
        let head = r#"{"type": "run", "run_id": "r-\"7", "context": {"input": {"text": "aaaa"#;
        assert_eq!(
            field_in_head::<String>(head, "type").as_deref(),
            Some("run")
        );
        assert_eq!(
            field_in_head::<String>(head, "run_id").as_deref(),
            Some("r-\"7")
        );
        assert_eq!(field_in_head::<String>(head, "harness"), None);
        let reply = r#"{"type":"host_reply","id":42,"data":"xxxx"#;
        assert_eq!(field_in_head::<u64>(reply, "id"), Some(42));
        // A value cut off by the head's end is not guessed.
        assert_eq!(
            field_in_head::<String>(r#"{"run_id": "r-1"#, "run_id"),
            None
        );
        // Not even a number, whose end nothing marks.
        assert_eq!(
            field_in_head::<u64>(r#"{"type":"host_reply","id":12"#, "id"),
            None
        );
        assert_eq!(
            field_in_head::<u64>(r#"{"type":"host_reply","id":12 "#, "id"),
            Some(12)
        );
        assert_eq!(
            field_in_head::<String>(r#"{"type":"run","run_id":"r-1""#, "run_id").as_deref(),
            Some("r-1")
        );
    }

    #[tokio::test]
    async fn an_over_long_line_comes_out_as_its_head() {
        // Longer than one read, so it is cut while pending.
        let input = format!(
            "{{\"run_id\": \"big\", \"x\": \"{}\"}}\n\n{{\"ok\":1}}\n",
            "a".repeat(100_000)
        );
        let mut frames = Frames::with_max_line(input.as_bytes(), 50);
        let Some(Incoming::TooLong(head)) = frames.next().await.unwrap() else {
            panic!("expected the dropped line first");
        };
        assert_eq!(
            field_in_head::<String>(&head, "run_id").as_deref(),
            Some("big")
        );
        assert_eq!(
            frames.next().await.unwrap(),
            Some(Incoming::Line("{\"ok\":1}".into()))
        );
        assert_eq!(frames.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn lines_over_the_cap_come_out_in_their_place_and_blank_ones_never() {
        let line = |text: &str| Some(Incoming::Line(text.into()));
        // One read: a line over the cap that ends in it, then one that
        // does not end, after a line that came first.
        let input = b"{\"a\":1}\n0123456789\n{\"b\":2}\nabcdefghijkl";
        let mut frames = Frames::with_max_line(&input[..], 8);
        assert_eq!(frames.next().await.unwrap(), line("{\"a\":1}"));
        assert_eq!(
            frames.next().await.unwrap(),
            Some(Incoming::TooLong("0123456789".into()))
        );
        assert_eq!(frames.next().await.unwrap(), line("{\"b\":2}"));
        assert_eq!(
            frames.next().await.unwrap(),
            Some(Incoming::TooLong("abcdefghijkl".into()))
        );
        assert_eq!(frames.next().await.unwrap(), None);
        // A blank last line without its newline is skipped like any other.
        let mut frames = Frames::with_max_line(&b"{\"a\":1}\n \r"[..], 8);
        assert_eq!(frames.next().await.unwrap(), line("{\"a\":1}"));
        assert_eq!(frames.next().await.unwrap(), None);
    }
}
