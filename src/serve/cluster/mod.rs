//! `serve` as one of several instances on one PostgreSQL database: the
//! run queue and the run journal live in the database beside the host
//! store, so any instance accepts a turn, any instance with a free slot
//! runs it, and any instance answers for it.
//!
//! - **Order.** A conversation's arrivals serialize on its `conv_queue`
//!   row, which numbers them; an instance claims the lowest queued turn of
//!   a conversation that is not busy, so turns run one at a time, in
//!   arrival order, across instances.
//! - **Stickiness.** A conversation's workspace (and its harness's session
//!   files) live on the instance that ran it last (`owner`); only that
//!   instance takes its turns while it lives. When its lease lapses the
//!   conversation is anyone's: the taker starts a fresh session with a
//!   notice, and the transcript is in the shared store either way.
//! - **Leases.** Instances heartbeat (`lease / 6`); one whose heartbeat is
//!   older than the lease is dead, and the first instance to see it fails
//!   its running turns (`interrupted`: a turn has side effects, so it is
//!   never run twice) and frees its conversations.
//! - **Fences.** Each claim takes a new fence; every write the run makes
//!   (results, transcript, state, storage, artifacts, its end) commits only
//!   while its row is still `running` under that fence (a
//!   [`WriteGuard`]). An instance paused past its lease and resumed can
//!   change nothing; and one that has not heartbeat for two thirds of its
//!   lease stops its own harnesses before anyone can take over, decided on
//!   its own clock by a timer of its own, so a database call that hangs
//!   cannot hold it back.
//! - **Cancel anywhere.** A flag on the run and a `NOTIFY`; the owner also
//!   re-reads the flags on every heartbeat (a notification is not durable).
//! - **Results** are appended as produced (batched, one `NOTIFY` a batch),
//!   so an instance other than the owner streams a run by tailing them.

mod error;
mod listen;
mod queue;
mod results;
mod sql;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::host::migrations::Migration;
use crate::host::postgres::{PgHost, PgOpenError, WriteGuard};
pub use error::ClusterError;
pub use queue::{CancelOutcome, Claim, Enqueued};
pub use results::ResultSink;

/// The run queue's tables, step by step (component `serve` of the
/// database's `schema_migrations`).
pub static MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "run queue",
    sql: include_str!("0001_run_queue.sql"),
}];

/// What this instance is and how the cluster is bounded.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// This instance's name, stable across restarts: a restarted instance
    /// keeps its conversations (their workspaces are on its disk).
    pub instance_id: String,
    /// How long an instance lives without a heartbeat.
    pub lease: Duration,
    /// Turns waiting per conversation before 429.
    pub max_waiting: usize,
    /// Turns waiting in all conversations (all instances) before 429.
    pub max_total: usize,
    /// Where this instance listens, for people reading the table.
    pub addr: String,
}

/// What the cluster tells the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    /// Someone asked to cancel this run, which may be running here.
    Cancel(String),
    /// This instance lost its lease (it could not heartbeat for two thirds
    /// of it, or another instance declared it dead): stop every harness.
    Fenced,
}

/// This instance's handle on the shared queue.
pub struct Cluster {
    pool: Pool,
    host: PgHost,
    settings: ClusterSettings,
    /// This start of the instance: a restart is a new boot, and the old
    /// boot's running turns are interrupted.
    boot: String,
    /// Woken when a turn was queued or a conversation freed.
    queued: Notify,
    /// Runs being followed here, woken when their results or status change.
    watchers: Mutex<HashMap<String, Arc<Notify>>>,
    events: mpsc::UnboundedSender<ClusterEvent>,
    /// When the last heartbeat that went through was sent.
    last_beat: Mutex<Instant>,
    /// When this instance last fenced itself in the current silence
    /// (`None` once a heartbeat goes through again).
    fenced_at: Mutex<Option<Instant>>,
    /// Turns queued in all conversations, as of the last heartbeat.
    waiting: std::sync::atomic::AtomicUsize,
    /// Where the heartbeat connects.
    beat_config: tokio_postgres::Config,
    /// The heartbeat's own connection, outside the pool: a burst of
    /// turns that takes every pooled connection must not read as this
    /// instance's silence (it would fence itself and stop its running
    /// turns). `None` until the first beat, and after one that failed.
    beat_client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

/// Why a heartbeat did not go through.
enum Silence {
    /// The database said no, or could not be reached.
    Failed(ClusterError),
    /// No answer within the heartbeat's patience.
    NoAnswer,
}

/// The write guard of a claimed run: its row is still `running` under the
/// fence of the claim.
const RUN_GUARD: &str = "SELECT 1 FROM runs WHERE run_id = $1 AND fence = $2::text::bigint \
                         AND status = 'running' FOR SHARE";

/// A run found in flight for this instance's previous start: what is left
/// of its harness on this machine is the new start's to kill.
pub type Interrupted = super::Interrupted;

impl Cluster {
    /// Join the cluster on `host`'s database: migrate the queue's tables,
    /// register (ending what a previous start of this instance left
    /// running), and start the heartbeat and the notification listener.
    /// Returns the cluster, the runs found in flight for this instance,
    /// and the events for the service.
    pub async fn join(
        host: PgHost,
        url: &str,
        settings: ClusterSettings,
    ) -> Result<
        (
            Arc<Cluster>,
            Vec<Interrupted>,
            mpsc::UnboundedReceiver<ClusterEvent>,
        ),
        PgOpenError,
    > {
        let database = crate::host::postgres::database_of(url);
        let beat_config = crate::host::postgres::connection_config(url)?;
        let pool = host.pool().clone();
        crate::host::postgres::migrate_component(&pool, &database, "serve", MIGRATIONS).await?;
        let connect = |reason: String| PgOpenError::Connect {
            database: database.clone(),
            reason,
        };
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| connect(format!("no randomness: {e}")))?;
        let (events, receiver) = mpsc::unbounded_channel();
        let cluster = Arc::new(Cluster {
            pool,
            host,
            boot: hex::encode(bytes),
            settings,
            queued: Notify::new(),
            watchers: Mutex::new(HashMap::new()),
            events,
            last_beat: Mutex::new(Instant::now()),
            fenced_at: Mutex::new(None),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            beat_config,
            beat_client: tokio::sync::Mutex::new(None),
        });
        let interrupted = cluster
            .register()
            .await
            .map_err(|e| connect(e.to_string()))?;
        listen::start(cluster.clone(), url)
            .await
            .map_err(|e| connect(e.to_string()))?;
        Ok((cluster, interrupted, receiver))
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.settings.instance_id
    }

    /// The host store as a claimed run writes to it: every write guarded
    /// by the claim's fence.
    pub fn host_for(&self, claim: &Claim) -> PgHost {
        self.host.guarded(guard(&claim.run_id, claim.fence))
    }

    /// Turns waiting in all conversations, as of the last heartbeat.
    pub fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What wakes the claim loop when a turn may be ready (create its
    /// `notified()` before claiming, so a turn queued meanwhile is not
    /// missed).
    pub fn work(&self) -> &Notify {
        &self.queued
    }

    fn wake_claims(&self) {
        self.queued.notify_waiters();
    }

    /// Claims and every follower look again (notifications were missed).
    fn wake_everyone(&self) {
        self.wake_claims();
        let watchers: Vec<_> = self
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for watcher in watchers {
            watcher.notify_waiters();
        }
    }

    /// The notification handle of run `run_id`, for a follower.
    fn watcher(&self, run_id: &str) -> Arc<Notify> {
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(run_id.to_string())
            .or_default()
            .clone()
    }

    fn unwatch(&self, run_id: &str) {
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
    }

    fn wake_followers(&self, run_id: &str) {
        let watcher = self
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned();
        if let Some(watcher) = watcher {
            watcher.notify_waiters();
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, ClusterError> {
        self.pool.get().await.map_err(ClusterError::Unavailable)
    }

    /// Register this start: a row of a previous start of this instance
    /// (it died without leaving) is reaped first, its running turns
    /// returned for their leftovers to be killed here.
    async fn register(&self) -> Result<Vec<Interrupted>, ClusterError> {
        let client = self.client().await?;
        let previous = sql::query_opt(
            &client,
            "SELECT boot_id FROM instances WHERE id = $1",
            &[&self.settings.instance_id],
        )
        .await?;
        let mut interrupted = Vec::new();
        if previous.is_some() {
            interrupted = self
                .reap(&self.settings.instance_id, false)
                .await
                .map_err(|e| ClusterError::PreviousStart(Box::new(e)))?;
        }
        sql::execute(
            &client,
            "INSERT INTO instances (id, boot_id, addr, lease_ms, started_at, heartbeat_at)
                 VALUES ($1, $2, $3, $4, hb_now_ms(), hb_now_ms())",
            &[
                &self.settings.instance_id,
                &self.boot,
                &self.settings.addr,
                &(self.settings.lease.as_millis() as i64),
            ],
        )
        .await
        .map_err(|e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
                ClusterError::InstanceTaken(self.settings.instance_id.clone())
            } else {
                ClusterError::Database(e)
            }
        })?;
        self.heard(Instant::now());
        Ok(interrupted)
    }

    /// A heartbeat sent at `sent` went through: the lease runs from then.
    fn heard(&self, sent: Instant) {
        *self.last_beat.lock().unwrap_or_else(|p| p.into_inner()) = sent;
        *self.fenced_at.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Stop this instance's harnesses when it has gone two thirds of its
    /// lease without a heartbeat going through (a pause, a lost or hung
    /// database): the others may soon take its turns. Decided on this
    /// process's clock alone, no database call; said again every sixth
    /// of the lease while the silence lasts (turns claimed meanwhile stop
    /// too). Whether it is silent.
    fn fence_if_silent(&self) -> bool {
        let since = self
            .last_beat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if since <= self.settings.lease * 2 / 3 {
            return false;
        }
        let mut fenced_at = self.fenced_at.lock().unwrap_or_else(|p| p.into_inner());
        if fenced_at.is_some_and(|at| at.elapsed() < self.settings.lease / 6) {
            return true;
        }
        if fenced_at.is_none() {
            tracing::error!(
                instance = %self.settings.instance_id,
                silent_ms = since.as_millis() as u64,
                "no heartbeat for two thirds of the lease; stopping this instance's harnesses"
            );
        }
        *fenced_at = Some(Instant::now());
        let _ = self.events.send(ClusterEvent::Fenced);
        true
    }

    /// [`Cluster::fence_if_silent`] on a timer of its own, a twelfth of
    /// the lease, until `stop`: a heartbeat stuck in a database call that
    /// does not return cannot hold the fence back.
    async fn watch_lease(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = ticker((self.settings.lease / 12).max(Duration::from_millis(50)));
        while ticked(&mut tick, &stop).await {
            self.fence_if_silent();
        }
    }

    /// Heartbeat, reap dead instances and re-read cancel flags, every
    /// sixth of the lease, until `stop`; and fence this instance when its
    /// heartbeats stop going through.
    pub async fn keep_alive(self: Arc<Self>, stop: CancellationToken) {
        tokio::spawn(self.clone().watch_lease(stop.clone()));
        tokio::spawn(self.clone().keep_looking(stop.clone()));
        let mut tick = ticker(self.beat_period());
        while ticked(&mut tick, &stop).await {
            self.beat().await;
        }
    }

    fn beat_period(&self) -> Duration {
        (self.settings.lease / 6).max(Duration::from_millis(100))
    }

    /// [`Cluster::look_around`] at the heartbeat's pace, until `stop`, on
    /// a loop of its own: it takes pooled connections, and a pool that a
    /// burst of turns holds must not delay the renewals.
    async fn keep_looking(self: Arc<Self>, stop: CancellationToken) {
        let patience = self.settings.lease / 3;
        let mut tick = ticker(self.beat_period());
        while ticked(&mut tick, &stop).await {
            if tokio::time::timeout(patience, self.look_around())
                .await
                .is_err()
            {
                tracing::warn!(
                    "cancel flags and dead instances were not read within {} ms",
                    patience.as_millis()
                );
            }
        }
    }

    async fn beat(&self) {
        // First, on this process's clock: a heartbeat due after a pause
        // fences before it asks the database anything.
        let silent = self.fence_if_silent();
        let sent = Instant::now();
        // A call that does not return within a third of the lease is
        // given up (the next beat tries again; the watchdog fences).
        let patience = self.settings.lease / 3;
        match self.renew(patience).await {
            Ok(true) => self.heard(sent),
            Ok(false) => {
                // Declared dead meanwhile: its turns were failed and its
                // conversations freed. Stop what still runs and join again.
                tracing::error!(
                    instance = %self.settings.instance_id,
                    "this instance's lease lapsed and it was declared dead; its running turns \
                     were ended elsewhere; joining again"
                );
                if !silent {
                    *self.fenced_at.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(Instant::now());
                    let _ = self.events.send(ClusterEvent::Fenced);
                }
                match tokio::time::timeout(patience, self.register()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::error!("cannot join the cluster again: {e}"),
                    Err(_) => tracing::error!(
                        "cannot join the cluster again: no answer within {} ms",
                        patience.as_millis()
                    ),
                }
            }
            Err(Silence::Failed(e)) => tracing::warn!("heartbeat failed: {e}"),
            Err(Silence::NoAnswer) => tracing::warn!(
                "heartbeat did not go through within {} ms; trying again",
                patience.as_millis()
            ),
        }
    }

    /// The rest of a heartbeat: cancel requests for this instance's runs,
    /// instances whose lease lapsed, turns nobody runs.
    async fn look_around(&self) {
        match self.cancel_flags().await {
            Ok(runs) => {
                for run_id in runs {
                    let _ = self.events.send(ClusterEvent::Cancel(run_id));
                }
            }
            Err(e) => tracing::warn!("cannot read cancel requests: {e}"),
        }
        match self.dead_instances().await {
            Ok(dead) => {
                for id in dead {
                    match self.reap(&id, true).await {
                        Ok(runs) if !runs.is_empty() => tracing::warn!(
                            instance = %id,
                            runs = runs.len(),
                            "an instance's lease lapsed; its running turns were marked failed \
                             (interrupted) and its conversations freed"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(instance = %id, "cannot reap: {e}"),
                    }
                }
            }
            Err(e) => tracing::warn!("cannot look for dead instances: {e}"),
        }
        match self.sweep_orphans().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                runs = n,
                "turns left running by instances that are gone were marked failed (interrupted)"
            ),
            Err(e) => tracing::warn!("cannot look for turns nobody runs: {e}"),
        }
    }

    /// Renew this start's lease within `patience`, on the heartbeat's own
    /// connection; `false` when its row is gone (reaped). A connection
    /// that did not answer in time, or failed, is closed (the statement
    /// may still be pending on it) and the next beat opens another.
    async fn renew(&self, patience: Duration) -> Result<bool, Silence> {
        let mut slot = self.beat_client.lock().await;
        let answered = tokio::time::timeout(patience, async {
            let client = match slot.take() {
                Some(client) if !client.is_closed() => client,
                _ => {
                    let (client, connection) =
                        self.beat_config.connect(tokio_postgres::NoTls).await?;
                    tokio::spawn(connection);
                    client
                }
            };
            // Sent as text (prepared each time): the pool's statement
            // cache is not this connection's, and a beat is rare.
            let renewed = client
                .execute(
                    "UPDATE instances SET heartbeat_at = hb_now_ms() WHERE id = $1 AND boot_id = $2",
                    &[&self.settings.instance_id, &self.boot],
                )
                .await?;
            let waiting: i64 = client
                .query_one("SELECT count(*) FROM runs WHERE status = 'queued'", &[])
                .await
                .and_then(|r| r.try_get(0))?;
            Ok::<_, tokio_postgres::Error>((client, renewed, waiting))
        })
        .await;
        let Ok(answer) = answered else {
            return Err(Silence::NoAnswer);
        };
        let (client, renewed, waiting) = answer.map_err(|e| Silence::Failed(e.into()))?;
        *slot = Some(client);
        self.waiting.store(
            usize::try_from(waiting).unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(renewed == 1)
    }

    /// Runs of this instance whose cancel was asked for.
    async fn cancel_flags(&self) -> Result<Vec<String>, ClusterError> {
        let client = self.client().await?;
        let rows = sql::query(
            &client,
            "SELECT run_id FROM runs WHERE owner = $1 AND status = 'running' \
                 AND cancel_requested",
            &[&self.settings.instance_id],
        )
        .await?;
        Ok(rows.iter().filter_map(|r| r.try_get(0).ok()).collect())
    }

    /// Instances whose lease lapsed (by the database's clock).
    async fn dead_instances(&self) -> Result<Vec<String>, ClusterError> {
        let client = self.client().await?;
        let rows = sql::query(
            &client,
            "SELECT id FROM instances WHERE heartbeat_at < hb_now_ms() - lease_ms \
                 AND id <> $1",
            &[&self.settings.instance_id],
        )
        .await?;
        Ok(rows.iter().filter_map(|r| r.try_get(0).ok()).collect())
    }

    /// Leave: this instance's conversations that are not busy are
    /// anyone's at once (no lease to wait out), and its row goes.
    pub async fn leave(&self) {
        let left = async {
            let client = self.client().await?;
            sql::execute(
                &client,
                "UPDATE conv_queue SET owner = NULL WHERE owner = $1 AND NOT busy",
                &[&self.settings.instance_id],
            )
            .await?;
            sql::execute(
                &client,
                "DELETE FROM instances WHERE id = $1 AND boot_id = $2",
                &[&self.settings.instance_id, &self.boot],
            )
            .await?;
            sql::execute(&client, "SELECT pg_notify('hb_queued', '')", &[]).await?;
            Ok::<_, ClusterError>(())
        };
        if let Err(e) = left.await {
            tracing::warn!("cannot leave the cluster cleanly (the lease will lapse): {e}");
        }
    }
}

/// A timer every `period`; ticks missed (a pause) come late, not in a burst.
fn ticker(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// The next tick of `tick`; `false` once `stop` is cancelled.
async fn ticked(tick: &mut tokio::time::Interval, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tick.tick() => true,
        () = stop.cancelled() => false,
    }
}

/// The guard of run `run_id` under `fence`.
fn guard(run_id: &str, fence: i64) -> WriteGuard {
    WriteGuard {
        sql: RUN_GUARD,
        args: vec![run_id.to_string(), fence.to_string()],
        refusal: format!(
            "run {run_id} no longer holds its conversation (this bridge instance lost its \
             lease); nothing it writes is kept"
        ),
    }
}

/// The id an instance takes when `bridge.yaml` names none: the machine's
/// name and a digest of its data folder, so two instances on one machine
/// (two data folders) differ and a restarted one is the same.
pub fn default_instance_id(data_dir: &std::path::Path) -> String {
    use sha2::Digest as _;
    let machine = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let place = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = sha2::Sha256::digest(place.to_string_lossy().as_bytes());
    format!("{machine}-{}", &hex::encode(digest)[..8])
}
