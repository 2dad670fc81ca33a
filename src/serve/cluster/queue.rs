//! The queue's transactions: a turn accepted (numbered in its
//! conversation, bounded), claimed (one ready conversation's lowest turn,
//! under a new fence), cancelled, ended; a dead instance reaped.
//!
//! Locks are taken in one order, a conversation's queue row before its
//! runs' rows, wherever both are, so no two of these wait on each other.

use super::{Cluster, ClusterError, Interrupted, sql};
use crate::protocol::FailureCode;
use crate::protocol::{AgentRunResult, ResultPayload, RunFailed};
use crate::serve::{QueueFull, RunStatus};

/// The advisory lock that orders arrivals against the global bound
/// (`max_queued_total`), the same key on every instance.
const TOTAL_LOCK: i64 = 7_245_019_284;

/// A turn this instance took to run.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The run.
    pub run_id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// The harness it asked for.
    pub harness: String,
    /// Its `AgentRunContext`, as accepted.
    pub context: String,
    /// The claim's fence: its writes land only while the run holds it.
    pub fence: i64,
    /// A cancel was asked for before it started.
    pub cancel_requested: bool,
    /// The instance that held the conversation before, when it was
    /// another one (it went away).
    pub taken_from: Option<String>,
}

/// What a cancel found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// No such run.
    NotFound,
    /// It had ended already (its status).
    Ended(RunStatus),
    /// It was waiting: it is now failed (`cancelled`) and will never run.
    Dropped,
    /// It runs: its instance was asked to stop it.
    Requested,
}

/// What accepting a turn came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued.
    Accepted,
    /// The run id was used before.
    Duplicate,
    /// A bound is reached.
    Busy(QueueFull),
}

/// A terminal `run.failed` the queue itself writes (the run never ran,
/// or its instance died), numbered `sequence`.
fn failure(run_id: &str, sequence: i64, code: FailureCode, error: &str) -> String {
    let mut failed = AgentRunResult::new(
        run_id,
        ResultPayload::RunFailed(RunFailed {
            retryable: code == FailureCode::Interrupted,
            code,
            error: error.into(),
        }),
    );
    failed.sequence = u64::try_from(sequence).ok();
    failed.timestamp = Some(crate::host::now_ms() / 1000);
    serde_json::to_string(&failed).unwrap_or_default()
}

/// End run `run_id` in `tx` with a terminal `run.failed` the queue writes
/// itself (numbered after its `last` result), and tell its followers.
async fn append_failure(
    tx: &deadpool_postgres::Transaction<'_>,
    run_id: &str,
    last: i64,
    code: FailureCode,
    error: &str,
) -> Result<(), ClusterError> {
    let body = failure(run_id, last + 1, code, error);
    sql::execute(
        tx,
        "INSERT INTO run_results (run_id, seq, body) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
        &[&run_id, &(last + 1), &body],
    )
    .await?;
    sql::execute(tx, "SELECT pg_notify('hb_results', $1)", &[&run_id]).await?;
    Ok(())
}

/// End a run whose instance went away: when its results already end in a
/// terminal one (the instance wrote it, then stopped before it recorded
/// the run's end) the run ends as that says, with nothing appended (a
/// stream has one terminal result); else `interrupted`, with a terminal
/// result saying `why`. The run's row is updated already (`failed`,
/// `interrupted`), so no more results can land.
///
/// The last result is read here, in a statement of its own, not by the
/// `UPDATE` that ended the run: that statement may have waited for a
/// batch of results holding the run's row, and its snapshot, taken
/// before the batch committed, would not see it; the terminal appended
/// after a last seen too low would collide with the batch's and be
/// dropped, the record left with no end or with the lost instance's.
async fn settle(
    tx: &deadpool_postgres::Transaction<'_>,
    run_id: &str,
    why: &str,
) -> Result<(), ClusterError> {
    let newest = sql::query_opt(
        tx,
        "SELECT seq, body FROM run_results WHERE run_id = $1 ORDER BY seq DESC LIMIT 1",
        &[&run_id],
    )
    .await?;
    let last: i64 = match &newest {
        Some(row) => row.try_get(0)?,
        None => 0,
    };
    let said = newest
        .and_then(|row| row.try_get::<_, String>(1).ok())
        .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok());
    let ended = said
        .as_ref()
        .and_then(|result| match result["type"].as_str() {
            Some("run.completed") => Some((RunStatus::Completed, None)),
            Some("run.failed") => Some((
                RunStatus::Failed,
                result["data"]["code"].as_str().map(str::to_string),
            )),
            _ => None,
        });
    match ended {
        Some((status, code)) => {
            sql::execute(
                tx,
                "UPDATE runs SET status = $2, code = $3 WHERE run_id = $1",
                &[&run_id, &status.as_str(), &code],
            )
            .await?;
            Ok(())
        }
        None => append_failure(tx, run_id, last, FailureCode::Interrupted, why).await,
    }
}

pub(super) fn parse_status(name: &str) -> RunStatus {
    match name {
        "queued" => RunStatus::Queued,
        "running" => RunStatus::Running,
        "completed" => RunStatus::Completed,
        _ => RunStatus::Failed,
    }
}

impl Cluster {
    /// Accept a turn: numbered after its conversation's earlier ones,
    /// within the bounds, once per run id.
    pub async fn enqueue(
        &self,
        run_id: &str,
        conversation: &str,
        harness: &str,
        context: &str,
    ) -> Result<Enqueued, ClusterError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        sql::execute(
            &tx,
            "INSERT INTO conv_queue (conversation_id) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&conversation],
        )
        .await?;
        // The row lock orders this conversation's arrivals, whichever
        // instance they reach.
        let row = sql::query_one(
            &tx,
            "SELECT busy, queued FROM conv_queue WHERE conversation_id = $1 FOR UPDATE",
            &[&conversation],
        )
        .await?;
        let busy: bool = row.try_get(0)?;
        let queued: i32 = row.try_get(1)?;
        let exists =
            sql::query_opt(&tx, "SELECT 1 FROM runs WHERE run_id = $1", &[&run_id]).await?;
        if exists.is_some() {
            return Ok(Enqueued::Duplicate);
        }
        // As on one machine: the first turn of an idle conversation holds
        // it at once; the ones behind it wait.
        let queued = usize::try_from(queued).unwrap_or(0);
        let waiting = if busy {
            queued
        } else {
            queued.saturating_sub(1)
        };
        if (busy || queued > 0) && waiting >= self.settings.max_waiting {
            return Ok(Enqueued::Busy(QueueFull::Conversation(waiting)));
        }
        // The global bound counts every conversation's turns, which
        // arrivals in other conversations (other row locks) change
        // meanwhile: one transaction-scoped lock, taken after the
        // conversation's, orders every instance's count-and-insert, so
        // concurrent arrivals cannot overshoot the bound. It is held for
        // the count, the insert and the commit (a few round trips), and
        // nothing else takes it, so it waits on no one.
        sql::execute(&tx, "SELECT pg_advisory_xact_lock($1)", &[&TOTAL_LOCK]).await?;
        let total: i64 = sql::query_one(
            &tx,
            "SELECT count(*) FROM runs WHERE status = 'queued'",
            &[],
        )
        .await
        .and_then(|r| r.try_get(0))?;
        let total = usize::try_from(total).unwrap_or(0);
        if total >= self.settings.max_total {
            return Ok(Enqueued::Busy(QueueFull::Total(total)));
        }
        let inserted = sql::execute(
            &tx,
            "INSERT INTO runs (run_id, conversation_id, seq, harness, context, status,
                     accepted_by, created_at)
                 SELECT $1, $2, next_seq, $3, $4, 'queued', $5, hb_now_ms()
                 FROM conv_queue WHERE conversation_id = $2
                 ON CONFLICT (run_id) DO NOTHING",
            &[
                &run_id,
                &conversation,
                &harness,
                &context,
                &self.settings.instance_id,
            ],
        )
        .await?;
        if inserted == 0 {
            return Ok(Enqueued::Duplicate);
        }
        sql::execute(
            &tx,
            "UPDATE conv_queue SET queued = queued + 1, next_seq = next_seq + 1,
                 head_at = CASE WHEN queued = 0 THEN hb_now_ms() ELSE head_at END
             WHERE conversation_id = $1",
            &[&conversation],
        )
        .await?;
        sql::execute(&tx, "SELECT pg_notify('hb_queued', '')", &[]).await?;
        tx.commit().await?;
        self.wake_claims();
        Ok(Enqueued::Accepted)
    }

    /// Take the next turn this instance may run: the oldest waiting
    /// conversation that is not busy and is this instance's, nobody's, or a
    /// dead instance's (its own first); that conversation's lowest turn.
    pub async fn claim(&self) -> Result<Option<Claim>, ClusterError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let me = &self.settings.instance_id;
        // Only while this start is registered, and it stays so until the
        // claim commits: a reaper deleting its row waits for the claim (or
        // the claim finds the row gone and takes nothing), so no turn is
        // claimed by an instance already declared dead.
        let registered = sql::query_opt(
            &tx,
            "SELECT 1 FROM instances WHERE id = $1 AND boot_id = $2 FOR KEY SHARE",
            &[me, &self.boot],
        )
        .await?;
        if registered.is_none() {
            return Ok(None);
        }
        let Some(pick) = sql::query_opt(
            &tx,
            "SELECT q.conversation_id, q.owner FROM conv_queue q
                 WHERE q.queued > 0 AND NOT q.busy
                   AND (q.owner IS NULL OR q.owner = $1
                        OR NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = q.owner))
                 ORDER BY (q.owner IS NOT DISTINCT FROM $1) DESC, q.head_at
                 LIMIT 1
                 FOR UPDATE OF q SKIP LOCKED",
            &[me],
        )
        .await?
        else {
            return Ok(None);
        };
        let conversation: String = pick.try_get(0)?;
        let owner: Option<String> = pick.try_get(1)?;
        let Some(run) = sql::query_opt(
            &tx,
            "SELECT run_id, harness, coalesce(context, ''), cancel_requested FROM runs
                 WHERE conversation_id = $1 AND status = 'queued' ORDER BY seq LIMIT 1",
            &[&conversation],
        )
        .await?
        else {
            // A count with no turn behind it (a run pruned while queued):
            // set it right and look again next time.
            sql::execute(
                &tx,
                "UPDATE conv_queue SET queued = 0 WHERE conversation_id = $1",
                &[&conversation],
            )
            .await?;
            tx.commit().await?;
            return Ok(None);
        };
        let run_id: String = run.try_get(0)?;
        let fence: i64 = sql::query_one(
            &tx,
            "UPDATE runs SET status = 'running', owner = $2, owner_boot = $3,
                     fence = nextval('run_fence'), started_at = hb_now_ms()
                 WHERE run_id = $1 RETURNING fence",
            &[&run_id, me, &self.boot],
        )
        .await
        .and_then(|r| r.try_get(0))?;
        sql::execute(
            &tx,
            "UPDATE conv_queue SET busy = true, owner = $2, queued = greatest(queued - 1, 0),
                 head_at = coalesce((SELECT min(created_at) FROM runs
                                     WHERE conversation_id = $1 AND status = 'queued'), head_at)
             WHERE conversation_id = $1",
            &[&conversation, me],
        )
        .await?;
        tx.commit().await?;
        let taken_from = owner.filter(|o| o != me);
        if let Some(from) = &taken_from {
            tracing::info!(
                run_id = %run_id,
                conversation = %conversation,
                from = %from,
                "took over a conversation whose instance went away"
            );
        }
        Ok(Some(Claim {
            run_id,
            conversation_id: conversation,
            harness: run.try_get(1)?,
            context: run.try_get(2)?,
            fence,
            cancel_requested: run.try_get(3)?,
            taken_from,
        }))
    }

    /// A claimed run ended: its status, and its conversation free for the
    /// next turn (still this instance's). `false` when the run no longer
    /// held its fence (its instance was declared dead meanwhile): nothing
    /// was changed.
    pub async fn end(
        &self,
        claim: &Claim,
        status: RunStatus,
        code: Option<&FailureCode>,
    ) -> Result<bool, ClusterError> {
        let code = code.map(FailureCode::as_str);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The conversation's row first, as every transaction here.
        sql::execute(
            &tx,
            "SELECT 1 FROM conv_queue WHERE conversation_id = $1 FOR UPDATE",
            &[&claim.conversation_id],
        )
        .await?;
        let ended = sql::execute(
            &tx,
            "UPDATE runs SET status = $3, code = $4, ended_at = hb_now_ms(), context = NULL
                 WHERE run_id = $1 AND fence = $2 AND status = 'running'",
            &[&claim.run_id, &claim.fence, &status.as_str(), &code],
        )
        .await?;
        if ended == 0 {
            return Ok(false);
        }
        sql::execute(
            &tx,
            "UPDATE conv_queue SET busy = false WHERE conversation_id = $1",
            &[&claim.conversation_id],
        )
        .await?;
        sql::execute(
            &tx,
            "SELECT pg_notify('hb_queued', ''), pg_notify('hb_results', $1)",
            &[&claim.run_id],
        )
        .await?;
        tx.commit().await?;
        self.wake_claims();
        self.wake_followers(&claim.run_id);
        Ok(true)
    }

    /// Note the harness a claimed run started (its process group,
    /// workspace and turn marker, on this machine's boot), for a restart
    /// of this instance to kill what is left of it.
    pub async fn spawned(
        &self,
        claim_run: &str,
        fence: i64,
        pgid: i32,
        workspace: &str,
        marker: &str,
    ) -> Result<(), ClusterError> {
        let client = self.client().await?;
        sql::execute(
            &client,
            "UPDATE runs SET pgid = $3, workspace = $4, marker = $5, machine_boot = $6
                 WHERE run_id = $1 AND fence = $2 AND status = 'running'",
            &[
                &claim_run,
                &fence,
                &pgid,
                &workspace,
                &marker,
                &crate::serve::journal::boot_id(),
            ],
        )
        .await?;
        Ok(())
    }

    /// A conversation's turns that wait or run, on any instance: the
    /// running one first, then those waiting in order (`/status`, `/stop`).
    pub async fn in_flight(
        &self,
        conversation: &str,
    ) -> Result<Vec<crate::run::TurnNow>, ClusterError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT run_id, harness, status, started_at,
                        context::json -> 'actor' ->> 'actor_id'
                 FROM runs
                 WHERE conversation_id = $1 AND status IN ('queued', 'running')
                 ORDER BY status = 'running' DESC, seq",
                &[&conversation],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let running = row.try_get::<_, String>(2)? == "running";
                Ok(crate::run::TurnNow {
                    run_id: row.try_get(0)?,
                    harness: row.try_get(1)?,
                    started_ms: row
                        .try_get::<_, Option<i64>>(3)?
                        .filter(|_| running)
                        .or(running.then(crate::host::now_ms)),
                    actor: row.try_get(4)?,
                })
            })
            .collect()
    }

    /// Cancel a run, wherever it is: one that waits is failed at once
    /// (`cancelled`) and never runs; one that runs is flagged for its
    /// instance (told at once by a notification, and again on its next
    /// heartbeat).
    pub async fn cancel(&self, run_id: &str) -> Result<CancelOutcome, ClusterError> {
        let mut client = self.client().await?;
        let Some(row) = sql::query_opt(
            &client,
            "SELECT conversation_id, status FROM runs WHERE run_id = $1",
            &[&run_id],
        )
        .await?
        else {
            return Ok(CancelOutcome::NotFound);
        };
        let conversation: String = row.try_get(0)?;
        match parse_status(row.try_get::<_, String>(1)?.as_str()) {
            RunStatus::Queued | RunStatus::Running => {}
            ended => return Ok(CancelOutcome::Ended(ended)),
        }
        let tx = client.transaction().await?;
        // The conversation's row first (the order every transaction
        // keeps), then the run's, read again under the lock.
        sql::execute(
            &tx,
            "SELECT 1 FROM conv_queue WHERE conversation_id = $1 FOR UPDATE",
            &[&conversation],
        )
        .await?;
        let now: String = sql::query_one(
            &tx,
            "SELECT status FROM runs WHERE run_id = $1 FOR UPDATE",
            &[&run_id],
        )
        .await
        .and_then(|r| r.try_get(0))?;
        let outcome = match parse_status(&now) {
            RunStatus::Queued => {
                sql::execute(
                    &tx,
                    "UPDATE runs SET status = 'failed', code = 'cancelled', ended_at = hb_now_ms(),
                         context = NULL
                     WHERE run_id = $1",
                    &[&run_id],
                )
                .await?;
                sql::execute(
                    &tx,
                    "UPDATE conv_queue SET queued = greatest(queued - 1, 0),
                         head_at = coalesce((SELECT min(created_at) FROM runs
                                             WHERE conversation_id = $1 AND status = 'queued'),
                                            head_at)
                     WHERE conversation_id = $1",
                    &[&conversation],
                )
                .await?;
                append_failure(
                    &tx,
                    run_id,
                    0,
                    FailureCode::Cancelled,
                    "cancelled before it started; nothing ran",
                )
                .await?;
                CancelOutcome::Dropped
            }
            RunStatus::Running => {
                let flagged = sql::execute(
                    &tx,
                    "UPDATE runs SET cancel_requested = true
                         WHERE run_id = $1 AND NOT cancel_requested",
                    &[&run_id],
                )
                .await?;
                if flagged > 0 {
                    sql::execute(&tx, "SELECT pg_notify('hb_cancel', $1)", &[&run_id]).await?;
                }
                CancelOutcome::Requested
            }
            ended => CancelOutcome::Ended(ended),
        };
        tx.commit().await?;
        self.wake_followers(run_id);
        Ok(outcome)
    }

    /// End the running turns whose owner's start is no longer registered
    /// (it was reaped while one of its claims was still committing, or its
    /// row went some other way): they are nobody's, and their
    /// conversations are freed. Returns how many.
    pub(super) async fn sweep_orphans(&self) -> Result<usize, ClusterError> {
        let mut client = self.client().await?;
        let orphans = sql::query(
            &client,
            "SELECT conversation_id FROM runs r WHERE status = 'running'
                   AND NOT EXISTS (SELECT 1 FROM instances i
                                   WHERE i.id = r.owner AND i.boot_id = r.owner_boot)",
            &[],
        )
        .await?;
        if orphans.is_empty() {
            return Ok(0);
        }
        let mut conversations: Vec<String> =
            orphans.iter().filter_map(|r| r.try_get(0).ok()).collect();
        conversations.sort();
        let tx = client.transaction().await?;
        // Their conversations' rows first, then the runs, checked again.
        sql::execute(
            &tx,
            "SELECT 1 FROM conv_queue WHERE conversation_id = ANY($1)
             ORDER BY conversation_id FOR UPDATE",
            &[&conversations],
        )
        .await?;
        let rows = sql::query(
            &tx,
            "UPDATE runs r SET status = 'failed', code = 'interrupted',
                     ended_at = hb_now_ms(), context = NULL
                 WHERE status = 'running' AND conversation_id = ANY($1)
                   AND NOT EXISTS (SELECT 1 FROM instances i
                                   WHERE i.id = r.owner AND i.boot_id = r.owner_boot)
                 RETURNING run_id, conversation_id",
            &[&conversations],
        )
        .await?;
        let mut freed = Vec::new();
        for row in &rows {
            let run_id: String = row.try_get(0)?;
            freed.push(row.try_get::<_, String>(1)?);
            settle(
                &tx,
                &run_id,
                "the bridge instance running this turn went away before it finished; it is \
                 not run again",
            )
            .await?;
        }
        sql::execute(
            &tx,
            "UPDATE conv_queue q SET busy = false, owner = NULL
             WHERE conversation_id = ANY($1)
               AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = q.owner)",
            &[&freed],
        )
        .await?;
        sql::execute(&tx, "SELECT pg_notify('hb_queued', '')", &[]).await?;
        tx.commit().await?;
        for row in &rows {
            if let Ok(run_id) = row.try_get::<_, String>(0) {
                self.wake_followers(&run_id);
            }
        }
        self.wake_claims();
        Ok(rows.len())
    }

    /// End what instance `id` was running (`interrupted`, with a terminal
    /// result), free its conversations and delete its row; only when its
    /// lease has lapsed if `stale_only`. The runs ended, with what is left
    /// of their harnesses (for the instance's own restart to kill).
    pub(super) async fn reap(
        &self,
        id: &str,
        stale_only: bool,
    ) -> Result<Vec<Interrupted>, ClusterError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let found = sql::query_opt(
            &tx,
            "SELECT 1 FROM instances WHERE id = $1
                   AND (NOT $2 OR heartbeat_at < hb_now_ms() - lease_ms)
                 FOR UPDATE SKIP LOCKED",
            &[&id, &stale_only],
        )
        .await?;
        if found.is_none() {
            return Ok(Vec::new());
        }
        // Its conversations' rows first, then their runs.
        sql::execute(
            &tx,
            "SELECT 1 FROM conv_queue WHERE owner = $1 ORDER BY conversation_id FOR UPDATE",
            &[&id],
        )
        .await?;
        let rows = sql::query(
            &tx,
            "UPDATE runs SET status = 'failed', code = 'interrupted', ended_at = hb_now_ms(),
                     context = NULL
                 WHERE owner = $1 AND status = 'running'
                 RETURNING run_id, pgid, workspace, marker, machine_boot",
            &[&id],
        )
        .await?;
        let boot = crate::serve::journal::boot_id();
        let mut ended = Vec::new();
        for row in &rows {
            let run_id: String = row.try_get(0)?;
            settle(
                &tx,
                &run_id,
                "the bridge instance running this turn stopped (its lease lapsed) before it \
                 finished; it is not run again",
            )
            .await?;
            // Process groups and markers mean something on the machine
            // boot they were noted in only.
            let same_boot = row.try_get::<_, Option<String>>(4)?.as_deref() == Some(&boot);
            ended.push(Interrupted {
                run_id,
                pgid: if same_boot { row.try_get(1)? } else { None },
                workspace: row
                    .try_get::<_, Option<String>>(2)?
                    .map(std::path::PathBuf::from),
                marker: if same_boot { row.try_get(3)? } else { None },
            });
        }
        sql::execute(
            &tx,
            "UPDATE conv_queue SET busy = false, owner = NULL WHERE owner = $1",
            &[&id],
        )
        .await?;
        sql::execute(&tx, "DELETE FROM instances WHERE id = $1", &[&id]).await?;
        sql::execute(&tx, "SELECT pg_notify('hb_queued', '')", &[]).await?;
        tx.commit().await?;
        for run in &ended {
            self.wake_followers(&run.run_id);
        }
        self.wake_claims();
        Ok(ended)
    }
}
