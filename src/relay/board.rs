//! The relay session's turns as the chat commands see them (`/stop`,
//! `/status`): which conversation each belongs to, whether it has begun,
//! and how to stop it. Shared with the command's task, since a command
//! waits on host calls that only the session's read loop can answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::run::{Stopping, TurnNow, Turns};

/// One run of the session.
pub(super) struct OnBoard {
    pub(super) conversation: String,
    pub(super) harness: String,
    pub(super) actor: Option<String>,
    /// When its turn began (epoch milliseconds; 0: it waits).
    pub(super) started_ms: Arc<AtomicI64>,
    /// When it was accepted, for the order of those waiting.
    pub(super) accepted_ms: i64,
    pub(super) cancel: CancellationToken,
    /// Set once its terminal result went to the plugin: the host has
    /// ended the run, though its task may not have returned yet.
    pub(super) ended: Arc<std::sync::atomic::AtomicBool>,
}

/// The session's runs in flight, by run id.
#[derive(Default)]
pub(super) struct Board(Mutex<HashMap<String, OnBoard>>);

impl Board {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, OnBoard>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn add(&self, run_id: String, run: OnBoard) {
        self.runs().insert(run_id, run);
    }

    pub(super) fn remove(&self, run_id: &str) {
        self.runs().remove(run_id);
    }
}

#[async_trait]
impl Turns for Board {
    async fn in_flight(&self, conversation: &str) -> Result<Vec<TurnNow>, String> {
        let mut turns: Vec<(i64, TurnNow)> = self
            .runs()
            .iter()
            .filter(|(_, run)| {
                run.conversation == conversation && !run.ended.load(Ordering::Acquire)
            })
            .map(|(run_id, run)| {
                let started = Some(run.started_ms.load(Ordering::Acquire)).filter(|ms| *ms > 0);
                let order = started.map_or(run.accepted_ms, |_| i64::MIN);
                let turn = TurnNow {
                    run_id: run_id.clone(),
                    harness: run.harness.clone(),
                    started_ms: started,
                    actor: run.actor.clone(),
                };
                (order, turn)
            })
            .collect();
        turns.sort_by_key(|(order, _)| *order);
        Ok(turns.into_iter().map(|(_, turn)| turn).collect())
    }

    async fn stop(&self, conversation: &str) -> Stopping {
        let running = self
            .in_flight(conversation)
            .await
            .ok()
            .and_then(|t| t.into_iter().next());
        let Some(running) = running.filter(|t| t.started_ms.is_some()) else {
            return Stopping::Nothing;
        };
        match self.runs().get(&running.run_id) {
            Some(run) => run.cancel.cancel(),
            None => return Stopping::Nothing,
        }
        Stopping::Asked(running)
    }
}

/// The board as a command asked in a run's stream sees it: a stop is only
/// noted, and made by [`Deferred::stop_now`] once the answer is sent.
pub(super) struct Deferred<'a> {
    board: &'a Board,
    /// The run the follow-up came to.
    steered: &'a str,
    stop: Mutex<Option<String>>,
}

impl<'a> Deferred<'a> {
    pub(super) fn new(board: &'a Board, steered: &'a str) -> Self {
        Deferred {
            board,
            steered,
            stop: Mutex::new(None),
        }
    }

    /// Stop the run a command asked to stop, if one did.
    pub(super) fn stop_now(&self) {
        let run_id = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(run) = run_id
            .as_ref()
            .and_then(|id| self.board.runs().get(id).map(|r| r.cancel.clone()))
        {
            run.cancel();
        }
    }
}

#[async_trait]
impl Turns for Deferred<'_> {
    async fn in_flight(&self, conversation: &str) -> Result<Vec<TurnNow>, String> {
        self.board.in_flight(conversation).await
    }

    async fn stop(&self, conversation: &str) -> Stopping {
        let turns = self.in_flight(conversation).await.unwrap_or_default();
        // The running turn; else the person's own turn the follow-up came
        // to, still waiting for its place.
        let running = turns.iter().find(|t| t.started_ms.is_some());
        let own = turns.iter().find(|t| t.run_id == self.steered);
        let Some(turn) = running.or(own).cloned() else {
            return Stopping::Nothing;
        };
        *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(turn.run_id.clone());
        Stopping::Asked(turn)
    }
}
