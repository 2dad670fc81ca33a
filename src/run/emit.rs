//! The run's side of the result stream: numbering, delivery, and what the
//! run needs to remember of what it sent (the reply text, the outcome).

use tokio::sync::mpsc;

use crate::harness::decode::ResultStream;
use crate::protocol::{AgentRunResult, MessageContent, ResultPayload, ResultType, RunFailed};

/// Numbers payloads and sends them to the run's consumer.
///
/// A consumer that went away (a client disconnected) does not stop the
/// run: results keep being produced and recorded, and are dropped here.
pub struct Emitter {
    stream: ResultStream,
    out: mpsc::Sender<AgentRunResult>,
    reply: Vec<String>,
    outcome: Option<ResultType>,
    failure: Option<RunFailed>,
    consumer_gone: bool,
}

impl Emitter {
    /// An emitter for `run_id` that sends to `out`.
    pub fn new(run_id: &str, out: mpsc::Sender<AgentRunResult>) -> Self {
        Emitter {
            stream: ResultStream::new(run_id),
            out,
            reply: Vec::new(),
            outcome: None,
            failure: None,
            consumer_gone: false,
        }
    }

    /// Stamp and send payloads, in order.
    pub async fn send(&mut self, payloads: Vec<ResultPayload>) {
        for payload in &payloads {
            match payload {
                ResultPayload::MessageCompleted(m) => {
                    if let Some(MessageContent::Text(text)) = &m.message.content {
                        self.reply.push(text.clone());
                    }
                }
                ResultPayload::RunFailed(f) => self.failure = Some(f.clone()),
                _ => {}
            }
        }
        for result in self.stream.stamp(payloads) {
            if result.kind.is_terminal() {
                self.outcome = Some(result.kind.clone());
            }
            if !self.consumer_gone && self.out.send(result).await.is_err() {
                tracing::info!("the result consumer went away; the run goes on");
                self.consumer_gone = true;
            }
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

    /// The failure sent, if the run failed.
    pub fn failure(&self) -> Option<&RunFailed> {
        self.failure.as_ref()
    }
}
