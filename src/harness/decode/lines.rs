//! Reassembling lines from a byte stream read in arbitrary chunks.

/// Bytes in, complete lines out; a partial line waits for the rest. A line
/// longer than the cap is dropped (with a warning) rather than growing
/// memory without bound; its first bytes are kept, so that a reader whose
/// every line must be answered can still tell whose line it was.
#[derive(Debug)]
pub struct LineBuffer {
    pending: Vec<u8>,
    max_line: usize,
    overflowed: bool,
    dropped: Vec<Vec<u8>>,
}

/// How much of a dropped line is kept.
const DROPPED_HEAD: usize = 1024;
/// How many dropped lines' heads are kept until taken.
const DROPPED_KEPT: usize = 16;

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
            dropped: Vec::new(),
        }
    }

    /// The first bytes of each line dropped since the last call (at most
    /// 16 lines; older ones beyond that are forgotten).
    pub fn take_dropped(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.dropped)
    }

    /// Feed a chunk; returns the lines it completed (lossy UTF-8, no `\n`).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            let (head, tail) = rest.split_at(pos);
            if !self.overflowed {
                let line = if self.pending.is_empty() {
                    text(head)
                } else {
                    self.pending.extend_from_slice(head);
                    text(&self.pending)
                };
                lines.push(line);
            }
            self.pending.clear();
            self.overflowed = false;
            rest = &tail[1..];
        }
        if !self.overflowed {
            self.pending.extend_from_slice(rest);
            if self.pending.len() > self.max_line {
                tracing::warn!(
                    bytes = self.pending.len(),
                    "output line over the cap; dropped"
                );
                if self.dropped.len() < DROPPED_KEPT {
                    self.dropped
                        .push(self.pending[..DROPPED_HEAD.min(self.pending.len())].to_vec());
                }
                self.pending.clear();
                self.overflowed = true;
            }
        }
        lines
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
        assert!(buffer.push(b"0123456789").is_empty());
        assert!(buffer.push(b"more of it").is_empty());
        assert_eq!(buffer.push(b"\nok\n"), vec!["ok".to_string()]);
        assert_eq!(buffer.take_dropped(), vec![b"0123456789".to_vec()]);
        assert!(buffer.take_dropped().is_empty());
    }
}
