//! One accepted run, from its place in its conversation's queue to exactly
//! one terminal result, whichever front door took it (`relay`, `serve`, a
//! run claimed from the shared queue). The turn runs in a task of its own,
//! so a bug that panics in it is caught here: the run still ends, with one
//! `internal_error` numbered after what its client already has, never with
//! silence and never with two terminals.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Bridge, RunOptions, RunSummary, Ticket};
use crate::protocol::{
    AgentRunContext, AgentRunResult, FailureCode, ResultPayload, ResultType, RunFailed,
};

/// Where a dispatched run's results go: the plugin's frames, the
/// service's memory and journal, the shared store.
pub trait Deliver: Send {
    /// The run got its turn (`true`), or was cancelled while it waited
    /// (`false`: the bridge then ends it at once, touching nothing).
    fn begins(&mut self, got_turn: bool) {
        let _ = got_turn;
    }

    /// Pass one result on; `false` once no one takes more (the rest of
    /// the run's results are then dropped, and the run still ends).
    fn deliver(&mut self, result: AgentRunResult) -> impl Future<Output = bool> + Send;
}

/// One run the front door accepted and checked.
pub struct Dispatch {
    /// The bridge that runs it.
    pub bridge: Arc<Bridge>,
    /// Its context, checked.
    pub ctx: AgentRunContext,
    /// The harness it runs on.
    pub harness: String,
    /// What the front door adds (steering, the spawn hook, the host).
    pub options: RunOptions,
    /// Stops it, whether it waits or runs.
    pub cancel: CancellationToken,
}

/// How a dispatched run ended.
pub struct Dispatched {
    /// The turn's summary; a turn whose task failed reads `internal_error`.
    pub summary: RunSummary,
    /// Results delivered, the terminal one included.
    pub sent: u64,
}

impl Dispatch {
    /// Wait for the run's place (`ticket`; `None` when the caller already
    /// holds one, as a claim from the shared queue does), run the turn,
    /// hand every result to `sink`. The place is given back once every
    /// result was delivered, so the conversation's next turn starts after
    /// this one's record is whole.
    pub async fn run(self, ticket: Option<Ticket>, sink: &mut impl Deliver) -> Dispatched {
        let Dispatch {
            bridge,
            ctx,
            harness,
            options,
            cancel,
        } = self;
        let run_id = ctx.run_id.clone();
        let (got_turn, place) = match ticket {
            Some(ticket) => tokio::select! {
                place = ticket.start() => (true, Some(place)),
                () = cancel.cancelled() => (false, None),
            },
            None => (true, None),
        };
        sink.begins(got_turn);
        let (tx, rx) = mpsc::channel::<AgentRunResult>(256);
        // A run cancelled while it waited still goes through the bridge,
        // which sees the cancel first and sends the run's one `run.failed`
        // (`cancelled`).
        let turn =
            tokio::spawn(async move { bridge.run(&ctx, &harness, &options, tx, cancel).await });
        let dispatched = finish(&run_id, turn, rx, sink).await;
        drop(place);
        dispatched
    }
}

/// Deliver a turn's results as they come, then its end; a turn whose task
/// failed gets its terminal result here, unless one was delivered.
async fn finish(
    run_id: &str,
    turn: tokio::task::JoinHandle<RunSummary>,
    mut results: mpsc::Receiver<AgentRunResult>,
    sink: &mut impl Deliver,
) -> Dispatched {
    let (mut sent, mut last, mut terminal) = (0u64, 0u64, false);
    while let Some(result) = results.recv().await {
        let is_terminal = result.kind.is_terminal();
        last = last.max(result.sequence.unwrap_or(sent + 1));
        if !sink.deliver(result).await {
            break;
        }
        sent += 1;
        terminal |= is_terminal;
    }
    drop(results);
    let summary = match turn.await {
        Ok(summary) => summary,
        Err(e) => {
            tracing::error!(run_id, "the run's task failed: {e}");
            if !terminal && sink.deliver(internal_failure(run_id, last + 1)).await {
                sent += 1;
            }
            RunSummary {
                outcome: ResultType::RunFailed,
                failure_code: Some(FailureCode::InternalError),
                session_id: None,
                resumed: false,
                workspace: None,
            }
        }
    };
    Dispatched { summary, sent }
}

/// The terminal result of a run whose task failed.
fn internal_failure(run_id: &str, sequence: u64) -> AgentRunResult {
    let mut failed = AgentRunResult::new(
        run_id,
        ResultPayload::RunFailed(RunFailed {
            code: FailureCode::InternalError,
            error: "the bridge failed while running this turn; see its log".into(),
            retryable: true,
        }),
    );
    failed.sequence = Some(sequence);
    failed.timestamp = Some(crate::host::now_ms() / 1000);
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{MessageChunk, MessageDelta, RunCompleted};

    /// Keeps what it is given; refuses after `take` results.
    struct Kept {
        results: Vec<AgentRunResult>,
        take: usize,
    }

    impl Deliver for Kept {
        async fn deliver(&mut self, result: AgentRunResult) -> bool {
            if self.results.len() == self.take {
                return false;
            }
            self.results.push(result);
            true
        }
    }

    fn numbered(payload: ResultPayload, sequence: u64) -> AgentRunResult {
        let mut result = AgentRunResult::new("r1", payload);
        result.sequence = Some(sequence);
        result
    }

    fn delta(sequence: u64) -> AgentRunResult {
        numbered(
            ResultPayload::MessageDelta(MessageDelta {
                chunk: serde_json::from_value::<MessageChunk>(serde_json::json!({
                    "role": "assistant",
                    "content": "hi",
                }))
                .expect("a chunk"),
            }),
            sequence,
        )
    }

    /// A turn that sends `results`, then panics when `panics`.
    async fn dispatched(
        results: Vec<AgentRunResult>,
        panics: bool,
        take: usize,
    ) -> (Kept, u64, Option<FailureCode>) {
        let (tx, rx) = mpsc::channel(8);
        let turn = tokio::spawn(async move {
            for result in results {
                let _ = tx.send(result).await;
            }
            assert!(!panics, "a bug in the turn");
            RunSummary {
                outcome: ResultType::RunCompleted,
                failure_code: None,
                session_id: None,
                resumed: false,
                workspace: None,
            }
        });
        let mut kept = Kept {
            results: Vec::new(),
            take,
        };
        let done = finish("r1", turn, rx, &mut kept).await;
        (kept, done.sent, done.summary.failure_code)
    }

    #[tokio::test]
    async fn a_turn_that_panics_midway_ends_with_one_internal_error_after_what_was_sent() {
        let (kept, sent, code) = dispatched(vec![delta(1), delta(2)], true, usize::MAX).await;
        assert_eq!(sent, 3);
        assert_eq!(code, Some(FailureCode::InternalError));
        let last = kept.results.last().expect("a terminal");
        assert_eq!(last.sequence, Some(3));
        assert_eq!(last.kind, ResultType::RunFailed);
        assert_eq!(last.data["code"], "internal_error");
        assert_eq!(last.data["retryable"], true);
    }

    #[tokio::test]
    async fn a_turn_that_panics_after_its_terminal_gets_no_second_one() {
        let done = numbered(
            ResultPayload::RunCompleted(RunCompleted {
                finish_reason: "stop".into(),
                message: None,
            }),
            2,
        );
        let (kept, sent, code) = dispatched(vec![delta(1), done], true, usize::MAX).await;
        assert_eq!(sent, 2);
        assert_eq!(
            kept.results.iter().filter(|r| r.kind.is_terminal()).count(),
            1
        );
        assert_eq!(code, Some(FailureCode::InternalError));
    }

    #[tokio::test]
    async fn a_turn_ends_whole_and_a_sink_that_stops_taking_drops_the_rest() {
        let done = numbered(
            ResultPayload::RunCompleted(RunCompleted {
                finish_reason: "stop".into(),
                message: None,
            }),
            3,
        );
        let (kept, sent, code) =
            dispatched(vec![delta(1), delta(2), done.clone()], false, usize::MAX).await;
        assert_eq!((sent, code), (3, None));
        assert_eq!(kept.results.len(), 3);
        let (kept, sent, _) = dispatched(vec![delta(1), delta(2), done], false, 1).await;
        assert_eq!((sent, kept.results.len()), (1, 1));
    }
}
