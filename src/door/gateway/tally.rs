//! A model's answer read as it streams past, for the tokens it reports.
//!
//! The families' APIs say usage in a few shapes, and the same reading
//! takes them all: an object's `usage` (Anthropic's Messages, OpenAI's
//! Chat Completions), `message.usage` (Anthropic's `message_start`),
//! `response.usage` (OpenAI's Responses, `response.completed`) or
//! `usageMetadata` (Gemini), with the token counts under the names each
//! uses. A streamed answer (server-sent events) is read event by event; a
//! whole one (JSON) at its end. Counts that grow as the answer streams
//! (Anthropic's output, Gemini's every chunk) are taken at their largest.

use serde_json::Value;

use crate::host::meter::CallUsage;

/// The most of a whole (not streamed) answer read for its usage.
const MAX_WHOLE: usize = 8 * 1024 * 1024;
/// The longest event line read; a longer one is skipped.
const MAX_LINE: usize = 4 * 1024 * 1024;

/// One answer's reading so far.
#[derive(Debug)]
pub struct Tally {
    /// Server-sent events (read line by line) or a whole body.
    events: bool,
    /// The line (events) or the body (whole) not read yet.
    pending: Vec<u8>,
    /// The pending line went past [`MAX_LINE`]: skipped to its end.
    skipping: bool,
    usage: CallUsage,
}

impl Tally {
    /// A reading of an answer of `content_type`.
    pub fn new(content_type: Option<&str>) -> Tally {
        let events = content_type.is_some_and(|t| t.starts_with("text/event-stream"));
        Tally {
            events,
            pending: Vec::new(),
            skipping: false,
            usage: CallUsage::default(),
        }
    }

    /// Read the next bytes of the answer.
    pub fn feed(&mut self, bytes: &[u8]) {
        if !self.events {
            let room = MAX_WHOLE.saturating_sub(self.pending.len());
            self.pending
                .extend_from_slice(&bytes[..bytes.len().min(room)]);
            return;
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (piece, after) = rest.split_at(end);
            if !self.skipping {
                self.pending.extend_from_slice(piece);
                let line = std::mem::take(&mut self.pending);
                self.line(&line);
            }
            self.pending.clear();
            self.skipping = false;
            rest = &after[1..];
        }
        if !self.skipping {
            self.pending.extend_from_slice(rest);
            if self.pending.len() > MAX_LINE {
                self.pending.clear();
                self.skipping = true;
            }
        }
    }

    /// What the answer said, once it has all passed.
    pub fn finish(mut self) -> CallUsage {
        let pending = std::mem::take(&mut self.pending);
        if self.events {
            if !self.skipping {
                self.line(&pending);
            }
        } else if let Ok(value) = serde_json::from_slice::<Value>(&pending) {
            self.take(&value);
        }
        self.usage
    }

    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Most events are text on its way: only one that names a usage
        // or a model is read whole.
        let names = |word: &[u8]| memchr::memmem::find(data, word).is_some();
        if !(names(b"sage") || names(b"odel")) {
            return;
        }
        if let Ok(value) = serde_json::from_slice::<Value>(data.trim_ascii()) {
            self.take(&value);
        }
    }

    /// The usage and model one object of the answer says.
    fn take(&mut self, value: &Value) {
        for usage in [
            "/usage",
            "/message/usage",
            "/response/usage",
            "/usageMetadata",
        ] {
            if let Some(usage) = value.pointer(usage).filter(|u| u.is_object()) {
                self.counts(usage);
            }
        }
        let model = [
            "/model",
            "/message/model",
            "/response/model",
            "/modelVersion",
        ]
        .iter()
        .find_map(|at| value.pointer(at)?.as_str());
        if let Some(model) = model.filter(|m| !m.is_empty()) {
            self.usage.model = Some(model.to_string());
        }
    }

    fn counts(&mut self, usage: &Value) {
        let count = |names: &[&str]| -> u64 {
            names
                .iter()
                .filter_map(|n| usage.pointer(n)?.as_u64())
                .sum()
        };
        let largest = |was: &mut u64, now: u64| *was = (*was).max(now);
        largest(
            &mut self.usage.input,
            count(&["/input_tokens", "/prompt_tokens", "/promptTokenCount"]),
        );
        largest(
            &mut self.usage.output,
            count(&[
                "/output_tokens",
                "/completion_tokens",
                "/candidatesTokenCount",
                "/thoughtsTokenCount",
            ]),
        );
        largest(
            &mut self.usage.cache_read,
            count(&[
                "/cache_read_input_tokens",
                "/input_tokens_details/cached_tokens",
                "/prompt_tokens_details/cached_tokens",
                "/cachedContentTokenCount",
            ]),
        );
        largest(
            &mut self.usage.cache_write,
            count(&["/cache_creation_input_tokens"]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(content_type: &str, body: &str, cut: usize) -> CallUsage {
        let mut tally = Tally::new(Some(content_type));
        for piece in body.as_bytes().chunks(cut) {
            tally.feed(piece);
        }
        tally.finish()
    }

    #[test]
    fn each_familys_usage_is_read_however_the_answer_is_cut() {
        let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":4,\"cache_creation_input_tokens\":2,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n";
        let responses = "data: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-x\",\"usage\":{\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":5},\"output_tokens\":3}}}\n\n";
        let chat = "data: {\"choices\":[]}\n\ndata: {\"model\":\"q\",\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        let gemini = "data: {\"usageMetadata\":{\"promptTokenCount\":6,\"candidatesTokenCount\":1},\"modelVersion\":\"g\"}\r\n\r\ndata: {\"usageMetadata\":{\"promptTokenCount\":6,\"candidatesTokenCount\":4,\"thoughtsTokenCount\":2}}\r\n\r\n";
        for cut in [1, 7, 4096] {
            let a = read("text/event-stream", anthropic, cut);
            assert_eq!(
                (a.input, a.output, a.cache_read, a.cache_write),
                (10, 7, 4, 2)
            );
            assert_eq!(a.model.as_deref(), Some("claude-x"));
            let r = read("text/event-stream; charset=utf-8", responses, cut);
            assert_eq!((r.input, r.output, r.cache_read), (20, 3, 5));
            let c = read("text/event-stream", chat, cut);
            assert_eq!((c.input, c.output), (8, 2));
            let g = read("text/event-stream", gemini, cut);
            assert_eq!((g.input, g.output), (6, 6));
            assert_eq!(g.model.as_deref(), Some("g"));
        }
        let whole = read(
            "application/json",
            "{\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}",
            5,
        );
        assert_eq!((whole.input, whole.output), (3, 4));
        assert!(read("text/plain", "not json", 3).is_empty());
    }
}
