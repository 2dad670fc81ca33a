//! The run's side of the result stream: numbering, delivery, and what the
//! run needs to remember of what it sent (the reply text, the outcome).
//!
//! Delivery is a queue the run fills without waiting ([`Emitter::push`])
//! and drains when it can ([`Emitter::flush`]): a consumer that stops
//! reading (a plugin, a pipe nobody reads) then holds results back, never
//! the run's deadline or its cancel, which the run keeps watching while
//! results wait.

use std::collections::VecDeque;

use tokio::sync::mpsc;

use crate::harness::decode::ResultStream;
use crate::protocol::{
    AgentRunResult, MessageContent, ResultPayload, ResultType, RunFailed, TokenUsage,
};

/// Most reply text a run keeps to record and to answer with when the
/// harness gives no final message; the results themselves carry it all.
pub const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;

/// Numbers payloads and sends them to the run's consumer.
///
/// A consumer that went away (a client disconnected) does not stop the
/// run: results keep being produced and recorded, and are dropped here.
pub struct Emitter {
    stream: ResultStream,
    out: mpsc::Sender<AgentRunResult>,
    /// Numbered, not yet taken by the consumer; in order.
    waiting: VecDeque<AgentRunResult>,
    reply: Vec<String>,
    reply_bytes: usize,
    outcome: Option<ResultType>,
    failure: Option<RunFailed>,
    consumer_gone: bool,
    /// The run's token usage, put on its terminal result.
    usage: Option<TokenUsage>,
    /// What a stop the run itself made means (a budget crossed), said in
    /// place of the `cancelled` the harness's stop ends with.
    stopped_because: Option<RunFailed>,
}

impl Emitter {
    /// An emitter for `run_id` that sends to `out`.
    pub fn new(run_id: &str, out: mpsc::Sender<AgentRunResult>) -> Self {
        Emitter {
            stream: ResultStream::new(run_id),
            out,
            waiting: VecDeque::new(),
            reply: Vec::new(),
            reply_bytes: 0,
            outcome: None,
            failure: None,
            consumer_gone: false,
            usage: None,
            stopped_because: None,
        }
    }

    /// The run stops its harness for `why`: the `cancelled` failure that
    /// stop ends with is sent as `why` instead.
    pub fn stopping_because(&mut self, why: RunFailed) {
        self.stopped_because = Some(why);
    }

    /// Stamp payloads and queue them, in order, without waiting.
    pub fn push(&mut self, mut payloads: Vec<ResultPayload>) {
        if let Some(why) = &self.stopped_because {
            for payload in &mut payloads {
                if let ResultPayload::RunFailed(f) = payload
                    && f.code == crate::protocol::FailureCode::Cancelled
                {
                    *f = why.clone();
                }
            }
        }
        for payload in &payloads {
            match payload {
                ResultPayload::MessageCompleted(m) => {
                    if let Some(MessageContent::Text(text)) = &m.message.content {
                        self.keep_reply(text);
                    }
                }
                ResultPayload::RunFailed(f) => self.failure = Some(f.clone()),
                _ => {}
            }
        }
        for mut result in self.stream.stamp(payloads) {
            if result.kind.is_terminal() {
                self.outcome = Some(result.kind.clone());
                result.usage = self.usage.clone();
            }
            if !self.consumer_gone {
                self.waiting.push_back(result);
            }
        }
    }

    /// Queue a payload said while the turn waits on its answer (a card
    /// about a connection its door holds): marked `in_turn: true`, so a
    /// front end that keeps a turn's questions for after its reply shows
    /// this one at once.
    pub fn push_in_turn(&mut self, payload: ResultPayload) {
        let before = self.waiting.len();
        self.push(vec![payload]);
        for result in self.waiting.iter_mut().skip(before) {
            result.extra.insert("in_turn".into(), true.into());
        }
    }

    /// Whether results wait for the consumer.
    pub fn pending(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Hand every waiting result to the consumer. Cancel-safe: dropped
    /// part-way, it has lost nothing, and the next flush goes on in order.
    pub async fn flush(&mut self) {
        while !self.waiting.is_empty() {
            match self.out.reserve().await {
                Ok(permit) => {
                    if let Some(result) = self.waiting.pop_front() {
                        permit.send(result);
                    }
                }
                Err(_) => {
                    tracing::info!("the result consumer went away; the run goes on");
                    self.consumer_gone = true;
                    self.waiting.clear();
                }
            }
        }
    }

    /// Stamp, queue and deliver payloads, in order.
    pub async fn send(&mut self, payloads: Vec<ResultPayload>) {
        self.push(payloads);
        self.flush().await;
    }

    fn keep_reply(&mut self, text: &str) {
        let room = MAX_REPLY_BYTES.saturating_sub(self.reply_bytes);
        if room == 0 {
            return;
        }
        let mut cut = text.len().min(room);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.reply_bytes += cut;
        self.reply.push(text[..cut].to_string());
        if cut < text.len() {
            self.reply_bytes = MAX_REPLY_BYTES;
            self.reply.push(format!(
                "[the reply was cut here: it is over {} MiB]",
                MAX_REPLY_BYTES / (1024 * 1024)
            ));
        }
    }

    /// The assistant's text of this run, message by message.
    pub fn reply(&self) -> String {
        self.reply.join("\n\n")
    }

    /// The terminal type sent, once the run has ended.
    pub fn outcome(&self) -> Option<&ResultType> {
        self.outcome.as_ref()
    }

    /// The token usage the harness reported for the run, which its
    /// terminal result carries (the SDK's `usage`).
    pub fn set_usage(&mut self, usage: Option<TokenUsage>) {
        self.usage = usage;
    }

    /// The usage set for the run, if the harness reported any.
    pub fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// The failure sent, if the run failed.
    pub fn failure(&self) -> Option<&RunFailed> {
        self.failure.as_ref()
    }
}

/// What the bridge says of the conversation's project, marked as its own
/// (`metadata.project`): a front end that sends only a turn's final
/// message (the LangBot plugin, in an Agent binding) sends these too.
pub(in crate::run) fn project_message(text: String, branch: &str) -> crate::protocol::Message {
    let mut message = crate::protocol::Message::assistant(text);
    message.extra.insert(
        "metadata".into(),
        serde_json::json!({"project": {"branch": branch}}),
    );
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Message, MessageCompleted};

    fn text(t: &str) -> ResultPayload {
        ResultPayload::MessageCompleted(MessageCompleted {
            message: Message::assistant(t.to_string()),
            file_ids: Vec::new(),
        })
    }

    #[tokio::test]
    async fn a_flush_dropped_part_way_loses_nothing_and_keeps_the_order() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut emit = Emitter::new("r", tx);
        emit.push(vec![text("a"), text("b"), text("c")]);
        // Room for one: the flush waits for the consumer and is abandoned.
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), emit.flush()).await;
        assert!(waited.is_err());
        assert!(emit.pending());
        let mut seen = vec![rx.recv().await.unwrap().sequence];
        let drain = tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                seen.push(r.sequence);
            }
            seen
        });
        emit.flush().await;
        drop(emit);
        assert_eq!(drain.await.unwrap(), [Some(1), Some(2), Some(3)]);
    }

    #[test]
    fn the_kept_reply_stops_at_its_cap() {
        let (tx, _rx) = mpsc::channel(1);
        let mut emit = Emitter::new("r", tx);
        let big = "é".repeat(MAX_REPLY_BYTES);
        emit.push(vec![text(&big), text("more")]);
        let reply = emit.reply();
        assert!(reply.len() < MAX_REPLY_BYTES + 200, "{}", reply.len());
        assert!(
            reply.ends_with("it is over 4 MiB]"),
            "{}",
            &reply[reply.len() - 60..]
        );
    }
}
