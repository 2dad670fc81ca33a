//! Reassembling lines from a byte stream read in arbitrary chunks.

/// Bytes in, complete lines out; a partial line waits for the rest. A line
/// longer than the cap is dropped (with a warning) rather than growing
/// memory without bound, whether it ends in the same read or not; its
/// first bytes are kept, in its place among the lines, so that a reader
/// whose every line must be answered can still tell whose line it was.
#[derive(Debug)]
pub struct LineBuffer {
    pending: Vec<u8>,
    max_line: usize,
    overflowed: bool,
}

/// One piece of a stream, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A line within the cap: lossy UTF-8, without its `\n` or a `\r` before it.
    Line(String),
    /// A line over the cap, dropped: its first bytes (at most 1 KiB).
    TooLong(Vec<u8>),
}

/// How much of a dropped line is kept.
const DROPPED_HEAD: usize = 1024;

impl Default for LineBuffer {
    fn default() -> Self {
        LineBuffer::with_max_line(16 * 1024 * 1024)
    }
}

impl LineBuffer {
    /// A buffer that drops lines longer than `max_line` bytes.
    pub fn with_max_line(max_line: usize) -> Self {
        LineBuffer {
            pending: Vec::new(),
            max_line,
            overflowed: false,
        }
    }

    /// Feed a chunk; returns the lines it completed (lossy UTF-8, no `\n`).
    /// Lines over the cap are left out.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.pieces(chunk)
            .into_iter()
            .filter_map(|piece| match piece {
                Piece::Line(line) => Some(line),
                Piece::TooLong(_) => None,
            })
            .collect()
    }

    /// Feed a chunk; returns the lines it completed and the heads of the
    /// lines it found over the cap, in stream order. A line over the cap
    /// comes out as soon as it is known to be too long, not at its end.
    pub fn pieces(&mut self, chunk: &[u8]) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let mut rest = chunk;
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            let (head, tail) = rest.split_at(pos);
            if !self.overflowed {
                pieces.push(if self.pending.len() + head.len() > self.max_line {
                    self.drop_line(head)
                } else if self.pending.is_empty() {
                    Piece::Line(text(head))
                } else {
                    self.pending.extend_from_slice(head);
                    Piece::Line(text(&self.pending))
                });
            }
            self.pending.clear();
            self.overflowed = false;
            rest = &tail[1..];
        }
        if !self.overflowed {
            if self.pending.len() + rest.len() > self.max_line {
                pieces.push(self.drop_line(rest));
                self.overflowed = true;
            } else {
                self.pending.extend_from_slice(rest);
            }
        }
        pieces
    }

    /// The pending line, continued by `more`, is over the cap: keep its head.
    fn drop_line(&mut self, more: &[u8]) -> Piece {
        tracing::warn!(
            bytes = self.pending.len() + more.len(),
            "output line over the cap; dropped"
        );
        let mut head = std::mem::take(&mut self.pending);
        let room = DROPPED_HEAD.saturating_sub(head.len());
        head.extend_from_slice(&more[..room.min(more.len())]);
        head.truncate(DROPPED_HEAD);
        Piece::TooLong(head)
    }

    /// The last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<String> {
        let line = (!self.pending.is_empty() && !self.overflowed).then(|| text(&self.pending));
        self.pending.clear();
        line
    }
}

/// A line's text without a trailing `\r`; invalid UTF-8 is replaced, not
/// fatal (checked strictly first: the common case is valid and faster).
fn text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_reads_are_joined() {
        let mut buffer = LineBuffer::default();
        assert!(buffer.push(b"{\"a\":").is_empty());
        assert_eq!(buffer.push(b"1}\n{\"b\""), vec!["{\"a\":1}".to_string()]);
        assert_eq!(
            buffer.push(b":2}\r\n\n"),
            vec!["{\"b\":2}".to_string(), String::new()]
        );
        assert_eq!(buffer.push(b"tail"), Vec::<String>::new());
        assert_eq!(buffer.finish().as_deref(), Some("tail"));
        // Split inside a multi-byte character.
        let text = "héllo\n".as_bytes();
        assert!(buffer.push(&text[..2]).is_empty());
        assert_eq!(buffer.push(&text[2..]), vec!["héllo".to_string()]);
    }

    #[test]
    fn over_long_lines_are_dropped_not_buffered() {
        let mut buffer = LineBuffer::with_max_line(8);
        assert_eq!(
            buffer.pieces(b"0123456789"),
            vec![Piece::TooLong(b"0123456789".to_vec())]
        );
        assert!(buffer.push(b"more of it").is_empty());
        assert_eq!(buffer.push(b"\nok\n"), vec!["ok".to_string()]);
    }

    #[test]
    fn a_line_over_the_cap_is_dropped_in_its_place_even_when_it_ends_in_the_read() {
        let mut buffer = LineBuffer::with_max_line(8);
        assert_eq!(
            buffer.pieces(b"ok\n0123456789\nnext\n"),
            vec![
                Piece::Line("ok".into()),
                Piece::TooLong(b"0123456789".to_vec()),
                Piece::Line("next".into()),
            ]
        );
        // Over the cap only once its end arrives.
        assert!(buffer.push(b"01234").is_empty());
        assert_eq!(buffer.push(b"56789\nok\n"), vec!["ok".to_string()]);
        // Exactly at the cap is a line.
        assert_eq!(buffer.push(b"01234567\n"), vec!["01234567".to_string()]);
    }

    #[test]
    fn a_dropped_line_keeps_one_kib_of_its_start() {
        let mut buffer = LineBuffer::with_max_line(8);
        let long = [b'a'; 3000];
        let Piece::TooLong(head) = &buffer.pieces(&long)[0] else {
            panic!("expected the line dropped");
        };
        assert_eq!(head.len(), 1024);
        assert!(buffer.pieces(&long).is_empty(), "reported once");
        assert_eq!(buffer.push(b"\nok\n"), vec!["ok".to_string()]);
    }
}
