//! The backlog of one instance of several on a PostgreSQL store: turns
//! wait in the database's queue and run on whichever instance claims
//! them; the database keeps every run, so any instance can stream, cancel
//! or look up any run, and a run whose instance died is ended for it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::backlog::{Backlog, PruneError};
use super::cluster::{self, CancelOutcome, Claim, Cluster, ClusterError, ClusterEvent};
use super::{Cancelled, JournalRun, LOOK_AGAIN, Record, Refused, RunEntry, RunStatus, Service};
use crate::protocol::{AgentRunContext, AgentRunResult, FailureCode, ResultPayload, RunFailed};
use crate::run::{RunOptions, SpawnHook, Spawned};

/// The shared queue, and what the cluster says until the service listens.
pub(super) struct Shared {
    pub(super) cluster: Arc<Cluster>,
    pub(super) events: Mutex<Option<mpsc::UnboundedReceiver<ClusterEvent>>>,
}

#[async_trait]
impl Backlog for Shared {
    async fn submit(
        &self,
        service: &Arc<Service>,
        ctx: AgentRunContext,
        harness: String,
    ) -> Result<Arc<RunEntry>, Refused> {
        if service.closing.load(Ordering::Acquire) {
            return Err(Refused::Unavailable(
                "this bridge instance is shutting down; send the turn to another one".into(),
            ));
        }
        if service.runs().contains_key(&ctx.run_id) {
            return Err(Refused::Duplicate);
        }
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        let context = serde_json::to_string(&ctx)
            .map_err(|e| Refused::Unavailable(format!("cannot keep the turn's context: {e}")))?;
        match self
            .cluster
            .enqueue(&ctx.run_id, &conversation, &harness, &context)
            .await
        {
            Ok(cluster::Enqueued::Accepted) => {}
            Ok(cluster::Enqueued::Duplicate) => return Err(Refused::Duplicate),
            Ok(cluster::Enqueued::Busy(full)) => return Err(Refused::Busy(full)),
            Err(why) => {
                return Err(Refused::Unavailable(format!(
                    "{why}; the turn was not accepted"
                )));
            }
        }
        let entry = service.entry(&ctx.run_id, &conversation, &harness);
        tokio::spawn(follow(
            service.clone(),
            self.cluster.clone(),
            ctx.run_id.clone(),
            entry.clone(),
        ));
        Ok(entry)
    }

    async fn past_run(&self, run_id: &str) -> Option<JournalRun> {
        match self.cluster.record(run_id).await {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(run_id, "cannot read the run: {e}");
                None
            }
        }
    }

    async fn watch(&self, service: &Arc<Service>, run_id: &str) -> Option<Arc<RunEntry>> {
        let (status, _, conversation, harness) =
            self.cluster.status(run_id).await.ok().flatten()?;
        let entry = service.entry(run_id, &conversation, &harness);
        if matches!(status, RunStatus::Completed | RunStatus::Failed) {
            // Ended: its results, once, from the store.
            service.runs().remove(run_id);
            for result in self.cluster.results_after(run_id, 0).await.ok()? {
                entry.push(result);
            }
            entry.set_status(status);
            return Some(entry);
        }
        tokio::spawn(follow(
            service.clone(),
            self.cluster.clone(),
            run_id.to_string(),
            entry.clone(),
        ));
        Some(entry)
    }

    async fn cancel(
        &self,
        run_id: &str,
        _here: Option<Arc<RunEntry>>,
    ) -> Result<Cancelled, ClusterError> {
        // A mirror here is not the run: the instance that runs it (or the
        // queue, while it waits) is told through the store.
        Ok(match self.cluster.cancel(run_id).await? {
            CancelOutcome::NotFound => Cancelled::Unknown,
            CancelOutcome::Ended(status) => Cancelled::Ended(status),
            CancelOutcome::Dropped => Cancelled::Asked(RunStatus::Failed),
            CancelOutcome::Requested => Cancelled::Asked(RunStatus::Running),
        })
    }

    async fn in_flight(
        &self,
        conversation: &str,
    ) -> Result<Option<Vec<crate::run::TurnNow>>, ClusterError> {
        self.cluster.in_flight(conversation).await.map(Some)
    }

    fn queued(&self) -> usize {
        self.cluster.waiting()
    }

    async fn prune(&self, retention: Duration) -> Result<u64, PruneError> {
        Ok(self.cluster.prune(retention).await?)
    }

    fn start(&self, service: &Arc<Service>, drained: CancellationToken) {
        tokio::spawn(claim_loop(service.clone(), self.cluster.clone()));
        // Kept up through the shutdown grace: the running turns still
        // hold their lease.
        tokio::spawn(self.cluster.clone().keep_alive(drained));
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(events) = events {
            tokio::spawn(cluster_events(service.clone(), events));
        }
    }

    fn closing(&self, _runs: &HashMap<String, Arc<RunEntry>>) {
        // Queued turns stay in the shared queue for the other instances.
    }

    async fn leave(&self) {
        self.cluster.leave().await;
    }
}

/// Mirror a run of the shared queue into `entry` for the clients
/// streaming it here, until it ends: its results as the instance that
/// runs it writes them, its status, and a cancel asked here passed on.
/// Once this instance runs it itself, the run feeds its entry directly.
async fn follow(
    service: Arc<Service>,
    cluster: Arc<Cluster>,
    run_id: String,
    entry: Arc<RunEntry>,
) {
    let watch = cluster.watch(&run_id);
    let mut cancel_sent = false;
    loop {
        if entry.executing.load(Ordering::Acquire) {
            break;
        }
        let notified = watch.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if entry.cancel.is_cancelled() && !cancel_sent {
            cancel_sent = true;
            if let Err(e) = cluster.cancel(&run_id).await {
                tracing::error!(run_id, "cannot pass the cancel on: {e}");
            }
        }
        let status = match cluster.status(&run_id).await {
            Ok(Some((status, ..))) => status,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(run_id, "cannot follow the run: {e}");
                tokio::time::sleep(LOOK_AGAIN).await;
                continue;
            }
        };
        match cluster.results_after(&run_id, entry.last_sequence()).await {
            Ok(results) => {
                for result in results {
                    entry.push(result);
                }
            }
            Err(e) => tracing::warn!(run_id, "cannot read the run's results: {e}"),
        }
        if entry.executing.load(Ordering::Acquire) {
            break;
        }
        match status {
            RunStatus::Completed | RunStatus::Failed => {
                entry.set_status(status);
                break;
            }
            RunStatus::Running if entry.status() == RunStatus::Queued => {
                entry.set_status(RunStatus::Running);
            }
            _ => {}
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(LOOK_AGAIN) => {}
            () = entry.cancel.cancelled(), if !cancel_sent => {}
        }
    }
    cluster.forget(&run_id);
    if !entry.executing.load(Ordering::Acquire) {
        let mut runs = service.runs();
        if runs.get(&run_id).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
            runs.remove(&run_id);
        }
    }
}

/// Take turns from the shared queue while this instance has free slots,
/// until shutdown.
async fn claim_loop(service: Arc<Service>, cluster: Arc<Cluster>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(
        service.config.max_concurrent_runs.max(1),
    ));
    'slots: loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        loop {
            if service.closing.load(Ordering::Acquire) {
                return;
            }
            let work = cluster.work().notified();
            tokio::pin!(work);
            work.as_mut().enable();
            match cluster.claim().await {
                Ok(Some(claim)) => {
                    let run = execute_claimed(service.clone(), cluster.clone(), claim);
                    service.tasks.spawn(async move {
                        run.await;
                        drop(permit);
                    });
                    continue 'slots;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("cannot take a turn from the shared queue: {e}"),
            }
            tokio::select! {
                () = &mut work => {}
                () = tokio::time::sleep(LOOK_AGAIN) => {}
            }
        }
    }
}

/// What the cluster says: cancels for runs here, and the loss of this
/// instance's lease (every harness stops; the store takes none of their
/// writes anyway).
async fn cluster_events(service: Arc<Service>, mut events: mpsc::UnboundedReceiver<ClusterEvent>) {
    while let Some(event) = events.recv().await {
        match event {
            ClusterEvent::Cancel(run_id) => {
                if let Some(run) = service.run(&run_id)
                    && run.executing.load(Ordering::Acquire)
                {
                    tracing::info!(run_id, "cancel asked on another instance");
                    run.cancel();
                }
            }
            ClusterEvent::Fenced => {
                let running: Vec<Arc<RunEntry>> = service
                    .runs()
                    .values()
                    .filter(|r| r.executing.load(Ordering::Acquire))
                    .cloned()
                    .collect();
                for run in &running {
                    run.cancel();
                }
                // Once they have ended (their processes back among the
                // kept ones), stop every kept process: the sessions they
                // hold may have gone on elsewhere meanwhile.
                let grace =
                    Duration::from_secs(service.config.kill_grace_seconds) + LOOK_AGAIN * 10;
                let deadline = tokio::time::Instant::now() + grace;
                while running.iter().any(|r| !r.ended()) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if let Some(live) = service.bridge.live_sessions() {
                    live.shutdown().await;
                }
            }
        }
    }
}

/// One run of the shared queue that this instance claimed, from its claim
/// to its end in the database.
async fn execute_claimed(service: Arc<Service>, cluster: Arc<Cluster>, claim: Claim) {
    let run = service.entry(&claim.run_id, &claim.conversation_id, &claim.harness);
    run.executing.store(true, Ordering::Release);
    let sink = cluster.sink(&claim, run.cancel.clone(), run.clone());
    let ctx: AgentRunContext = match serde_json::from_str(&claim.context) {
        Ok(ctx) => ctx,
        Err(e) => {
            // Checked when it was accepted; a store that changed it is the
            // store's fault, said so.
            let mut failed = AgentRunResult::new(
                &claim.run_id,
                ResultPayload::RunFailed(RunFailed {
                    code: FailureCode::InvalidArgument,
                    error: format!("the turn's context, as the store kept it, does not read: {e}"),
                    retryable: false,
                }),
            );
            failed.sequence = Some(1);
            if let Ok(body) = serde_json::to_string(&failed) {
                sink.send(failed, body);
            }
            let code = Some(FailureCode::InvalidArgument);
            finish_claimed(
                &service,
                &cluster,
                &claim,
                &run,
                &sink,
                RunStatus::Failed,
                code,
            )
            .await;
            return;
        }
    };
    if claim.cancel_requested {
        run.cancel();
    }
    let options = RunOptions {
        on_spawn: Some(note_spawned(&cluster, &claim)),
        steer: Some(run.inbox.clone()),
        host: Some(Arc::new(cluster.host_for(&claim))),
        ..RunOptions::default()
    };
    let (status, code) = service
        .run_turn(ctx, &run, options, None, Record::Shared(&sink))
        .await;
    finish_claimed(&service, &cluster, &claim, &run, &sink, status, code).await;
}

/// Note each harness process of a claimed run in the store, so that the
/// instance that ends the run after this one died can stop it.
fn note_spawned(cluster: &Arc<Cluster>, claim: &Claim) -> SpawnHook {
    let cluster = cluster.clone();
    let (run_id, fence) = (claim.run_id.clone(), claim.fence);
    SpawnHook(Arc::new(move |spawned: &Spawned<'_>| {
        let cluster = cluster.clone();
        let run_id = run_id.clone();
        let pgid = spawned.pgid;
        let workspace = spawned.workspace.to_string_lossy().into_owned();
        let marker = spawned.marker.to_string();
        tokio::spawn(async move {
            if let Err(e) = cluster
                .spawned(&run_id, fence, pgid, &workspace, &marker)
                .await
            {
                tracing::warn!(run_id, "cannot note the harness's process: {e}");
            }
        });
    }))
}

/// End a claimed run in the shared record, and its entry here with what
/// the record says. When every result was written and the end recorded,
/// that is what this instance made; when not (the run was lost: the
/// instance was declared dead, its writes refused, and another instance
/// ended the run `interrupted`), the entry stops being fed from here and
/// follows the record like any other instance's mirror: its clients get
/// the record's own terminal result, never the one this instance made and
/// could not write.
async fn finish_claimed(
    service: &Arc<Service>,
    cluster: &Arc<Cluster>,
    claim: &Claim,
    run: &Arc<RunEntry>,
    sink: &cluster::ResultSink,
    status: RunStatus,
    code: Option<FailureCode>,
) {
    // Every result is in before the end is: a follower that sees the end
    // has them all.
    let written = sink.flush().await;
    let recorded = cluster.end(claim, status, code.as_ref()).await;
    match &recorded {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            run_id = %claim.run_id,
            "the run ended after this instance lost its lease; its end was not recorded \
             (another instance marked it interrupted); its clients are told what the \
             record says"
        ),
        Err(e) => tracing::error!(run_id = %claim.run_id, "cannot record the run's end: {e}"),
    }
    if written && matches!(recorded, Ok(true)) {
        run.set_status(status);
        service.runs().remove(&claim.run_id);
        return;
    }
    run.executing.store(false, Ordering::Release);
    tokio::spawn(follow(
        service.clone(),
        cluster.clone(),
        claim.run_id.clone(),
        run.clone(),
    ));
}
