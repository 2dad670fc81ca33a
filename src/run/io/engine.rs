//! The one I/O loop every harness attempt runs in, one-shot or live.
//!
//! What is the same for both is here, once: the run's cancel and deadline
//! are watched in every state (also while results wait for a consumer that
//! stopped reading: back-pressure pauses reading the harness's output,
//! never its stop), results are flushed as the consumer takes them, outbox
//! files become artifacts as they are finished, and follow-ups are taken
//! where the engine takes them. What differs — how output is read, what a
//! cancel or the deadline does, when the attempt is over — is the
//! [`Engine`]'s: [`OneShot`](super::attempt) ends its process, a live one
//! interrupts its turn the harness's own way.

use std::process::ExitStatus;

use crate::harness::spawn::Stdout;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::emit::Emitter;
use super::outbox::{self, Outbox};
use crate::harness::HarnessProcess;
use crate::host::{HostApi, RunScope};
use crate::protocol::ResultPayload;
use crate::run::Steer;

/// What the run needs while the process lives.
pub struct Live<'a> {
    /// Where results go.
    pub emit: &'a mut Emitter,
    /// Results that come from beside the harness while it runs: a card
    /// asking the person about a destination its door holds.
    pub notices: &'a mut tokio::sync::mpsc::UnboundedReceiver<ResultPayload>,
    /// The workspace's outbox.
    pub outbox: &'a mut Outbox,
    /// For outbox files too large to send inline.
    pub host: &'a dyn HostApi,
    /// Who the run is, for stored artifacts.
    pub scope: &'a RunScope,
    /// When the run must be over.
    pub deadline: Instant,
    /// Set when the run is cancelled.
    pub cancel: &'a CancellationToken,
    /// How long the group gets between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Told each harness that starts.
    pub on_spawn: Option<&'a crate::run::SpawnHook>,
    /// Binds the run's token to each harness that starts (its only
    /// holder from then on).
    pub bind: &'a (dyn Fn(&HarnessProcess) + Send + Sync),
    /// Follow-ups for the running turn (a live harness that takes them).
    pub steer: Option<&'a mut tokio::sync::mpsc::Receiver<crate::run::Steer>>,
    /// What the turn may spend before it is stopped (`mid_turn: stop`).
    pub spend: Option<&'a crate::run::budget::SpendWatch>,
    /// What the turn's model calls through the gateway used, as each
    /// ends: its spending whatever the harness reports.
    pub meter: &'a crate::host::meter::Meter,
}

/// Queue one outbox file as `artifact.created` (a file that cannot be read
/// is logged and skipped: it never fails the run).
pub async fn push_artifact(live: &mut Live<'_>, name: String) {
    match outbox::artifact(live.outbox.dir(), name, live.scope, live.host).await {
        Ok(created) => live
            .emit
            .push(vec![ResultPayload::ArtifactCreated(created)]),
        Err(e) => tracing::warn!("{e}"),
    }
}

/// Why the run stopped a harness (rather than the harness ending).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::run) enum Stop {
    Deadline,
    Cancelled,
}

/// What woke the loop, for the engine to act on.
pub(in crate::run) enum Event<'b> {
    /// The run was cancelled.
    Cancelled,
    /// The engine's timer ([`Engine::until`]) passed.
    Timer,
    /// A follow-up for the running turn.
    Steer(Steer),
    /// Output read from the harness; empty when stdout closed.
    Output(&'b [u8]),
    /// The harness process exited.
    Exited(std::io::Result<ExitStatus>),
}

/// Which of the loop's sources the engine wants watched now.
#[derive(Debug, Clone, Copy)]
pub(in crate::run) struct Watch {
    pub cancel: bool,
    pub steer: bool,
    pub output: bool,
    pub exit: bool,
}

/// One kind of attempt (one-shot, live) over the shared loop.
pub(in crate::run) trait Engine {
    /// How the attempt ended, for the engine to turn into its result.
    type Over;

    /// When the timer fires next: the deadline, a drain window, a grace.
    fn until(&self, io: &Live<'_>) -> Instant;

    /// Which sources to watch now.
    fn watch(&self) -> Watch;

    /// The harness's output pipe and process, watched by the loop.
    fn pipes(&mut self) -> (&mut Stdout, &mut HarnessProcess);

    /// Act on one event; `Some` ends the loop.
    async fn on(&mut self, event: Event<'_>, io: &mut Live<'_>) -> Option<Self::Over>;

    /// What the turn spent so far, where the harness says while it runs.
    fn spent(&self) -> Option<crate::protocol::TokenUsage>;
}

/// Run `engine` until it says the attempt is over.
pub(in crate::run) async fn pump<E: Engine>(engine: &mut E, io: &mut Live<'_>) -> E::Over {
    let mut buf = vec![0u8; 64 * 1024];
    let mut inbox = io.steer.take();
    let over = loop {
        let until = engine.until(io);
        let watch = engine.watch();
        let (stdout, process) = engine.pipes();
        // Which branch fired, with what it brought; `None` for what the
        // loop handles itself (a flush, an outbox file).
        let woke = tokio::select! {
            biased;
            () = io.cancel.cancelled(), if watch.cancel => Some(Woke::Cancelled),
            () = tokio::time::sleep_until(until) => Some(Woke::Timer),
            Some(steer) = next_follow_up(&mut inbox), if watch.steer => Some(Woke::Steer(steer)),
            () = io.emit.flush(), if io.emit.pending() => None,
            read = stdout.read(&mut buf), if watch.output && !io.emit.pending() => {
                Some(Woke::Read(read.unwrap_or(0)))
            }
            status = process.wait(), if watch.exit => Some(Woke::Exited(status)),
            Some(name) = io.outbox.next(), if !io.emit.pending() => {
                push_artifact(io, name).await;
                None
            }
            () = io.meter.changed(), if io.spend.is_some() => Some(Woke::Metered),
            Some(notice) = io.notices.recv() => {
                io.emit.push_in_turn(notice);
                None
            }
        };
        let event = match woke {
            None => continue,
            Some(Woke::Metered) => None,
            Some(Woke::Cancelled) => Some(Event::Cancelled),
            Some(Woke::Timer) => Some(Event::Timer),
            Some(Woke::Steer(steer)) => Some(Event::Steer(steer)),
            Some(Woke::Read(n)) => Some(Event::Output(&buf[..n])),
            Some(Woke::Exited(status)) => Some(Event::Exited(status)),
        };
        if let Some(event) = event
            && let Some(over) = engine.on(event, io).await
        {
            break over;
        }
        // Past a budget's headroom: stopped as a cancel is, said as the
        // budget it crossed; the gateway refuses the calls after it.
        let spent = crate::host::meter::metered_over(engine.spent(), io.meter.usage());
        if let Some(why) = io.spend.and_then(|watch| watch.crossed(spent.as_ref())) {
            tracing::info!("the turn went past a budget; stopping it");
            io.meter.refuse(why.error.clone());
            io.emit.stopping_because(why);
            if let Some(over) = engine.on(Event::Cancelled, io).await {
                break over;
            }
        }
    };
    io.steer = inbox;
    over
}

/// A branch of the loop that fired, before its bytes are lent out.
enum Woke {
    /// A model call through the gateway ended.
    Metered,
    Cancelled,
    Timer,
    Steer(Steer),
    Read(usize),
    Exited(std::io::Result<ExitStatus>),
}

/// The next follow-up, or never when the turn takes none.
async fn next_follow_up(
    inbox: &mut Option<&mut tokio::sync::mpsc::Receiver<Steer>>,
) -> Option<Steer> {
    match inbox {
        Some(inbox) => inbox.recv().await,
        None => std::future::pending().await,
    }
}
