//! A run's results in the shared store: appended by the instance that runs
//! it as they come (batched: what queued while the last batch was written
//! goes in the next, with one notification), read by any instance.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::queue::parse_status;
use super::{Claim, Cluster, ClusterError, RUN_GUARD, sql};
use crate::protocol::AgentRunResult;
use crate::protocol::FailureCode;
use crate::serve::{JournalRun, RunEntry, RunStatus};

/// Most results one batch writes.
const BATCH: usize = 256;

enum Message {
    /// A result: its sequence, its JSON, and itself for the run's entry.
    Result(i64, String, Box<AgentRunResult>),
    /// Answered once everything before it is written (`true`), or known
    /// lost (`false`).
    Flush(oneshot::Sender<bool>),
}

/// Where a claimed run's results go: into the shared store, in order,
/// each batch only while the run holds its fence, and then, once written,
/// into the run's entry for the clients streaming it here. A client is
/// told a result only once the shared record holds it: a result this
/// instance made but could not write (it lost the run) reaches no one, so
/// what this instance's clients see is what every other instance's see.
/// A batch the fence refuses, or the store cannot take after retries,
/// stops the run (`lost` is cancelled): it would be running with nowhere
/// to say so.
pub struct ResultSink {
    messages: mpsc::UnboundedSender<Message>,
}

impl ResultSink {
    /// Queue one result (and its JSON).
    pub fn send(&self, result: AgentRunResult, body: String) {
        let seq = result.sequence.unwrap_or_default();
        let _ = self.messages.send(Message::Result(
            i64::try_from(seq).unwrap_or(i64::MAX),
            body,
            Box::new(result),
        ));
    }

    /// Wait until every result sent so far is written; `false` when some
    /// were not (the fence was lost, or the store failed).
    pub async fn flush(&self) -> bool {
        let (done, written) = oneshot::channel();
        if self.messages.send(Message::Flush(done)).is_err() {
            return false;
        }
        written.await.unwrap_or(false)
    }
}

impl Cluster {
    /// The sink for a claimed run's results, which reach `run` as they
    /// are written.
    pub fn sink(
        self: &Arc<Self>,
        claim: &Claim,
        lost: CancellationToken,
        run: Arc<RunEntry>,
    ) -> ResultSink {
        let (messages, mut inbox) = mpsc::unbounded_channel();
        let cluster = self.clone();
        let run_id = claim.run_id.clone();
        let fence = claim.fence;
        tokio::spawn(async move {
            let mut broken = false;
            while let Some(first) = inbox.recv().await {
                let mut batch = Vec::new();
                let mut flushes = Vec::new();
                let mut next = Some(first);
                while let Some(message) = next.take() {
                    match message {
                        Message::Result(seq, body, result) => batch.push((seq, body, result)),
                        Message::Flush(done) => flushes.push(done),
                    }
                    if batch.len() < BATCH {
                        next = inbox.try_recv().ok();
                    }
                }
                if !broken && !batch.is_empty() {
                    match cluster.append(&run_id, fence, &batch).await {
                        Ok(()) => {
                            for (_, _, result) in batch {
                                run.push(*result);
                            }
                        }
                        Err(why) => {
                            tracing::error!(run_id = %run_id, "{why}; stopping the run");
                            broken = true;
                            lost.cancel();
                        }
                    }
                }
                for done in flushes {
                    let _ = done.send(!broken);
                }
            }
        });
        ResultSink { messages }
    }

    /// Write one batch, guarded; a few tries when the store fails, none
    /// when the fence refuses.
    async fn append(
        &self,
        run_id: &str,
        fence: i64,
        batch: &[(i64, String, Box<AgentRunResult>)],
    ) -> Result<(), ClusterError> {
        let mut wait = Duration::from_millis(100);
        let mut tries = 0;
        loop {
            match self.append_once(run_id, fence, batch).await {
                Ok(true) => return Ok(()),
                Ok(false) => return Err(ClusterError::FenceLost(run_id.to_string())),
                Err(e) if tries < 5 => {
                    tracing::warn!(run_id, "cannot write results yet: {e}");
                    tries += 1;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => return Err(ClusterError::Results(Box::new(e))),
            }
        }
    }

    async fn append_once(
        &self,
        run_id: &str,
        fence: i64,
        batch: &[(i64, String, Box<AgentRunResult>)],
    ) -> Result<bool, ClusterError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let held = sql::query_opt(&tx, RUN_GUARD, &[&run_id, &fence.to_string()]).await?;
        if held.is_none() {
            return Ok(false);
        }
        let seqs: Vec<i64> = batch.iter().map(|(seq, _, _)| *seq).collect();
        let bodies: Vec<&str> = batch.iter().map(|(_, body, _)| body.as_str()).collect();
        sql::execute(
            &tx,
            "INSERT INTO run_results (run_id, seq, body)
             SELECT $1, s, b FROM unnest($2::bigint[], $3::text[]) AS t(s, b)
             ON CONFLICT DO NOTHING",
            &[&run_id, &seqs, &bodies],
        )
        .await?;
        sql::execute(&tx, "SELECT pg_notify('hb_results', $1)", &[&run_id]).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// A run as the shared store has it (any status), with its results.
    pub async fn record(&self, run_id: &str) -> Result<Option<JournalRun>, ClusterError> {
        let Some((status, code, conversation_id, harness)) = self.status(run_id).await? else {
            return Ok(None);
        };
        let results = self.results_after(run_id, 0).await?;
        Ok(Some(JournalRun {
            conversation_id,
            harness,
            status,
            code: code.map(FailureCode::from),
            results,
        }))
    }

    /// A run's status, failure code, conversation and harness.
    pub async fn status(
        &self,
        run_id: &str,
    ) -> Result<Option<(RunStatus, Option<String>, String, String)>, ClusterError> {
        let client = self.client().await?;
        let Some(row) = sql::query_opt(
            &client,
            "SELECT status, code, conversation_id, harness FROM runs WHERE run_id = $1",
            &[&run_id],
        )
        .await?
        else {
            return Ok(None);
        };
        Ok(Some((
            parse_status(row.try_get::<_, String>(0)?.as_str()),
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
        )))
    }

    /// A run's results numbered after `after`, in order.
    pub async fn results_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<AgentRunResult>, ClusterError> {
        let client = self.client().await?;
        let rows = sql::query(
            &client,
            "SELECT body FROM run_results WHERE run_id = $1 AND seq > $2 ORDER BY seq",
            &[&run_id, &i64::try_from(after).unwrap_or(i64::MAX)],
        )
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| r.try_get::<_, String>(0).ok())
            .filter_map(|body| serde_json::from_str(&body).ok())
            .collect())
    }

    /// What wakes a follower of run `run_id` when its results or status
    /// may have changed (create its `notified()` before reading, so a
    /// change between the read and the wait is not missed).
    pub fn watch(&self, run_id: &str) -> Arc<tokio::sync::Notify> {
        self.watcher(run_id)
    }

    /// Stop waking followers of `run_id`.
    pub fn forget(&self, run_id: &str) {
        self.unwatch(run_id);
    }

    /// Forget runs that ended longer than `retention` ago; how many.
    pub async fn prune(&self, retention: Duration) -> Result<u64, ClusterError> {
        let client = self.client().await?;
        sql::execute(
            &client,
            "DELETE FROM runs WHERE ended_at IS NOT NULL AND ended_at < hb_now_ms() - $1",
            &[&i64::try_from(retention.as_millis()).unwrap_or(i64::MAX)],
        )
        .await
        .map_err(ClusterError::from)
    }
}
