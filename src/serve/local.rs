//! The backlog of a service alone on its store: turns wait in memory (the
//! scheduler: one at a time per conversation, in arrival order), and the
//! SQLite journal beside the store keeps every run, so a client that went
//! away, or a restarted service, still finds it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::backlog::{Backlog, PruneError};
use super::cluster::ClusterError;
use super::{Cancelled, Journal, JournalRun, Record, Refused, RunEntry, RunStatus, Service};
use crate::protocol::AgentRunContext;
use crate::run::{RunOptions, Scheduler, SpawnHook, Spawned, Ticket};

/// The scheduler and the journal.
pub(super) struct Local {
    pub(super) scheduler: Arc<Scheduler>,
    pub(super) journal: Arc<Journal>,
}

#[async_trait]
impl Backlog for Local {
    async fn submit(
        &self,
        service: &Arc<Service>,
        ctx: AgentRunContext,
        harness: String,
    ) -> Result<Arc<RunEntry>, Refused> {
        // Runs that ended are in the journal (read off the async workers);
        // runs in flight are in memory, checked below under the lock.
        let ended = {
            let journal = self.journal.clone();
            let run_id = ctx.run_id.clone();
            tokio::task::spawn_blocking(move || journal.contains(&run_id))
                .await
                .map_err(|e| Refused::Unavailable(format!("cannot read the run journal: {e}")))?
                .map_err(|e| Refused::Unavailable(e.to_string()))?
        };
        if ended {
            return Err(Refused::Duplicate);
        }
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        let (entry, ticket) = {
            // Under the runs lock, as shutdown sets it: a turn is either
            // refused here or in the map (and tracked) before shutdown looks.
            let mut runs = service.runs();
            if service.closing.load(Ordering::Acquire) {
                return Err(Refused::Unavailable(
                    "the bridge is shutting down; send the turn again when it is back".into(),
                ));
            }
            if runs.contains_key(&ctx.run_id) {
                return Err(Refused::Duplicate);
            }
            let ticket = self
                .scheduler
                .enqueue(&conversation)
                .map_err(Refused::Busy)?;
            let entry = RunEntry::new(conversation.clone(), harness.clone());
            runs.insert(ctx.run_id.clone(), entry.clone());
            (entry, ticket)
        };
        // A run the journal cannot record (a full disk) is refused, not
        // run unrecorded: its id would be accepted again, and a crash
        // would leave no trace of it.
        if let Err(why) = self
            .journal
            .queued(&ctx.run_id, &conversation, &harness)
            .await
        {
            service.runs().remove(&ctx.run_id);
            drop(ticket);
            return Err(Refused::Unavailable(format!(
                "{why}; the turn was not accepted"
            )));
        }
        service.tasks.spawn(execute(
            service.clone(),
            self.journal.clone(),
            ctx,
            entry.clone(),
            ticket,
        ));
        Ok(entry)
    }

    async fn past_run(&self, run_id: &str) -> Option<JournalRun> {
        let journal = self.journal.clone();
        let run_id = run_id.to_string();
        tokio::task::spawn_blocking(move || journal.get(&run_id))
            .await
            .ok()
            .flatten()
    }

    async fn watch(&self, _service: &Arc<Service>, _run_id: &str) -> Option<Arc<RunEntry>> {
        None
    }

    async fn cancel(
        &self,
        run_id: &str,
        here: Option<Arc<RunEntry>>,
    ) -> Result<Cancelled, ClusterError> {
        // A run in memory here is this service's, queued or running.
        if let Some(run) = here {
            run.cancel();
            return Ok(Cancelled::Asked(run.status()));
        }
        Ok(match self.past_run(run_id).await {
            Some(past) => Cancelled::Ended(past.status),
            None => Cancelled::Unknown,
        })
    }

    fn queued(&self) -> usize {
        self.scheduler.queued()
    }

    async fn prune(&self, retention: Duration) -> Result<u64, PruneError> {
        Ok(self.journal.prune(retention).await? as u64)
    }

    fn start(&self, _service: &Arc<Service>, _drained: CancellationToken) {}

    fn closing(&self, runs: &HashMap<String, Arc<RunEntry>>) {
        // They have not started: cancelled at once, each still ending
        // with its one `run.failed` (`cancelled`).
        for run in runs.values() {
            if run.status() == RunStatus::Queued {
                run.cancel();
            }
        }
    }

    async fn leave(&self) {}
}

/// One run, from its place in the queue to its record in the journal.
async fn execute(
    service: Arc<Service>,
    journal: Arc<Journal>,
    ctx: AgentRunContext,
    run: Arc<RunEntry>,
    ticket: Ticket,
) {
    run.executing.store(true, Ordering::Release);
    let run_id = ctx.run_id.clone();
    let spawned = SpawnHook(Arc::new({
        let journal = journal.clone();
        let run_id = run_id.clone();
        move |spawned: &Spawned<'_>| journal.spawned(&run_id, spawned)
    }));
    let options = RunOptions {
        on_spawn: Some(spawned),
        steer: Some(run.inbox.clone()),
        ..RunOptions::default()
    };
    let (status, code) = service
        .run_turn(ctx, &run, options, Some(ticket), Record::Journal(&journal))
        .await;
    // Journal first, then out of memory: a lookup always finds it. Its
    // results are journaled already, one by one as they came.
    let journaled = journal.ended(&run_id, status, code).await;
    run.set_status(status);
    match journaled {
        Ok(()) => {
            service.runs().remove(&run_id);
        }
        // Kept in memory instead, so lookups tell the truth until the
        // service restarts (the journal then calls it interrupted).
        Err(e) => tracing::error!(run_id, "{e}; the run stays in memory"),
    }
}
