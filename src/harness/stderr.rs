//! A harness's stderr, kept as a short tail for failure messages. The pipe
//! is read in chunks and always drained (a harness blocked on a full
//! stderr pipe would hang its turn), and what is kept is bounded however
//! the harness writes: at most [`LINE_READ`] bytes of a line are held
//! while it is read and [`LINE_MAX`] kept, the rest of it counted and
//! dropped; at most [`TAIL_LINES`] lines are kept.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::projection::{is_secret_key, redact_text};

/// How many stderr lines are kept for a failure message.
pub const TAIL_LINES: usize = 20;
/// Longest stderr line kept, in bytes (before the note of what was cut).
pub const LINE_MAX: usize = 400;
/// How much of a line is held while it is read: more than is kept, so a
/// secret that starts inside the kept part is seen whole by redaction.
pub const LINE_READ: usize = 4096;
/// Bytes read from the pipe at a time.
const CHUNK: usize = 16 * 1024;

/// The last lines a process wrote to stderr, secrets redacted.
#[derive(Debug, Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    secrets: Arc<Vec<String>>,
}

impl StderrTail {
    /// A tail that also hides the values of the child's secret variables.
    pub fn new(env: &BTreeMap<String, String>) -> Self {
        let secrets = env
            .iter()
            .filter(|(k, _)| is_secret_key(k, &[]))
            .map(|(_, v)| v.clone())
            .collect();
        StderrTail {
            lines: Arc::default(),
            secrets: Arc::new(secrets),
        }
    }

    /// Read `pipe` to its end, keeping the tail (and logging each kept
    /// line at debug level).
    pub async fn read(&self, mut pipe: impl AsyncRead + Unpin) {
        let mut buf = vec![0u8; CHUNK];
        let mut line = Vec::with_capacity(LINE_READ);
        let mut dropped: u64 = 0;
        loop {
            let n = match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut chunk = &buf[..n];
            loop {
                let end = memchr::memchr(b'\n', chunk);
                let part = &chunk[..end.unwrap_or(chunk.len())];
                let room = LINE_READ - line.len();
                line.extend_from_slice(&part[..part.len().min(room)]);
                dropped += part.len().saturating_sub(room) as u64;
                match end {
                    Some(end) => {
                        self.finish(&line, dropped);
                        line.clear();
                        dropped = 0;
                        chunk = &chunk[end + 1..];
                    }
                    None => break,
                }
            }
        }
        self.finish(&line, dropped);
    }

    /// One line read (`held`, then `dropped` bytes not held).
    fn finish(&self, held: &[u8], dropped: u64) {
        let text = String::from_utf8_lossy(held);
        let text = text.trim_end();
        if text.trim().is_empty() && dropped == 0 {
            return;
        }
        let known: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        let mut line = redact_text(text, &known);
        let mut cut = dropped;
        if line.len() > LINE_MAX {
            let mut at = LINE_MAX;
            while !line.is_char_boundary(at) {
                at -= 1;
            }
            cut += (line.len() - at) as u64;
            line.truncate(at);
        }
        if cut > 0 {
            line.push_str(&format!("… ({cut} more bytes)"));
        }
        tracing::debug!(target: "harness_stderr", "{line}");
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail() -> StderrTail {
        let env = BTreeMap::from([("API_TOKEN".to_string(), "tok-0123456789abcdef".to_string())]);
        StderrTail::new(&env)
    }

    #[tokio::test]
    async fn a_huge_line_is_cut_and_says_how_much_and_the_next_lines_are_kept() {
        let tail = tail();
        let huge = tokio::io::repeat(b'x').take(50 * 1024 * 1024);
        let rest: &[u8] =
            b"\nleaked tok-0123456789abcdef here\n\n\xff not utf-8\nno newline at the end";
        tail.read(huge.chain(rest)).await;
        let lines = tail.lines();
        assert_eq!(lines.len(), 4, "{lines:?}");
        let cut = 50 * 1024 * 1024 - LINE_MAX;
        assert_eq!(
            lines[0],
            format!("{}… ({cut} more bytes)", "x".repeat(LINE_MAX))
        );
        assert!(!lines[1].contains("tok-0123456789abcdef"), "{}", lines[1]);
        assert_eq!(lines[2], "\u{fffd} not utf-8");
        assert_eq!(lines[3], "no newline at the end");
    }

    #[tokio::test]
    async fn only_the_last_lines_are_kept() {
        let tail = tail();
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        tail.read(text.as_bytes()).await;
        let lines = tail.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 80");
        assert_eq!(lines[TAIL_LINES - 1], "line 99");
    }
}
