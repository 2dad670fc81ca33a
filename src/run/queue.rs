//! Turn order: one turn of a conversation at a time, in arrival order, and
//! at most N turns at once overall. A conversation's queue is bounded; a
//! full one refuses at once (the caller answers 429), never drops.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// No room for another turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueFull {
    /// The conversation has this many turns waiting already.
    #[error("this conversation already has {0} turns waiting; try again when one has run")]
    Conversation(usize),
    /// This many turns wait across all conversations already.
    #[error("the bridge already has {0} turns waiting (max_queued_total); try again shortly")]
    Total(usize),
}

#[derive(Default)]
struct Conversation {
    running: bool,
    waiting: VecDeque<oneshot::Sender<()>>,
}

/// Schedules turns.
pub struct Scheduler {
    global: Arc<Semaphore>,
    conversations: Mutex<HashMap<String, Conversation>>,
    max_waiting: usize,
    max_total: usize,
    /// Tickets not yet started: behind their conversation or waiting for
    /// a free slot.
    pending: AtomicUsize,
}

/// A place in a conversation's queue, taken in arrival order.
pub struct Ticket {
    scheduler: Arc<Scheduler>,
    conversation: String,
    /// Resolves when the conversation is ours; `None` once waited for.
    turn: Option<oneshot::Receiver<()>>,
    /// The conversation is ours (whether or not a slot is yet).
    holding: bool,
    /// Handed over to a [`Turn`], which releases the conversation.
    started: bool,
}

/// A turn that may run now; dropping it lets the next one in.
pub struct Turn {
    scheduler: Arc<Scheduler>,
    conversation: String,
    _permit: OwnedSemaphorePermit,
}

impl Scheduler {
    /// At most `max_running` turns at once, `max_waiting` queued per
    /// conversation and `max_total` not yet started in all.
    pub fn new(max_running: usize, max_waiting: usize, max_total: usize) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            global: Arc::new(Semaphore::new(max_running)),
            conversations: Mutex::new(HashMap::new()),
            max_waiting,
            max_total,
            pending: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Conversation>> {
        self.conversations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a place in `conversation`'s queue now (so arrival order is the
    /// order of these calls), or refuse when it is full.
    pub fn enqueue(self: &Arc<Self>, conversation: &str) -> Result<Ticket, QueueFull> {
        let mut conversations = self.lock();
        let pending = self.pending.load(Ordering::Acquire);
        if pending >= self.max_total {
            return Err(QueueFull::Total(pending));
        }
        let entry = conversations.entry(conversation.to_string()).or_default();
        let turn = if entry.running {
            if entry.waiting.len() >= self.max_waiting {
                return Err(QueueFull::Conversation(entry.waiting.len()));
            }
            let (tx, rx) = oneshot::channel();
            entry.waiting.push_back(tx);
            Some(rx)
        } else {
            entry.running = true;
            None
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        Ok(Ticket {
            scheduler: self.clone(),
            conversation: conversation.to_string(),
            holding: turn.is_none(),
            turn,
            started: false,
        })
    }

    /// Turns accepted and not yet started, in all conversations.
    pub fn queued(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The conversation's turn is over: wake the next one, if any.
    fn next(&self, conversation: &str) {
        let mut conversations = self.lock();
        let Some(entry) = conversations.get_mut(conversation) else {
            return;
        };
        while let Some(next) = entry.waiting.pop_front() {
            if next.send(()).is_ok() {
                return;
            }
            // That turn was abandoned (cancelled while queued): skip it.
        }
        conversations.remove(conversation);
    }
}

impl Ticket {
    /// Wait for the conversation's turn, then for a free slot. Dropping
    /// the future gives the place up (and the conversation, if it was ours).
    pub async fn start(mut self) -> Turn {
        if let Some(turn) = self.turn.as_mut() {
            // The sender stays queued until it is our turn. The receiver
            // stays in the ticket, so a ticket dropped right as the turn
            // was handed over still passes it on (see `Drop`).
            self.holding = turn.await.is_ok();
            self.turn = None;
        }
        // The semaphore is closed only when the scheduler is dropped, and
        // the scheduler outlives every ticket.
        let permit = loop {
            if let Ok(permit) = self.scheduler.global.clone().acquire_owned().await {
                break permit;
            }
        };
        self.started = true;
        self.scheduler.pending.fetch_sub(1, Ordering::AcqRel);
        Turn {
            scheduler: self.scheduler.clone(),
            conversation: self.conversation.clone(),
            _permit: permit,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        self.scheduler.pending.fetch_sub(1, Ordering::AcqRel);
        if let Some(mut turn) = self.turn.take() {
            // Closing first settles the race with `next`: either the turn
            // was handed over already (and is ours to pass on), or the
            // hand-over fails and `next` skips to the following ticket.
            turn.close();
            self.holding |= turn.try_recv().is_ok();
        }
        if self.holding {
            self.scheduler.next(&self.conversation);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.scheduler.next(&self.conversation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_turn_per_conversation_in_order_and_a_bounded_queue() {
        let scheduler = Scheduler::new(4, 2, 100);
        let first = scheduler.enqueue("c").unwrap();
        let second = scheduler.enqueue("c").unwrap();
        let third = scheduler.enqueue("c").unwrap();
        assert_eq!(
            scheduler.enqueue("c").err(),
            Some(QueueFull::Conversation(2))
        );
        assert_eq!(scheduler.queued(), 3, "accepted, none started");
        let other = scheduler.enqueue("d").unwrap().start().await;
        let running = first.start().await;
        let waiting = tokio::spawn(second.start());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the second turn waits for the first"
        );
        drop(running);
        let running = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the second turn starts")
            .unwrap();
        drop(third); // cancelled while queued: skipped
        drop(running);
        drop(other);
        assert_eq!(scheduler.queued(), 0);
        assert!(
            scheduler.enqueue("c").unwrap().turn.is_none(),
            "the queue is free again"
        );
    }

    #[tokio::test]
    async fn a_turn_handed_over_to_a_dropped_ticket_is_passed_on() {
        let scheduler = Scheduler::new(4, 4, 100);
        let first = scheduler.enqueue("c").unwrap().start().await;
        let second = scheduler.enqueue("c").unwrap();
        let third = scheduler.enqueue("c").unwrap();
        // The second's wait is polled once (registered), then the first
        // ends (handing the turn over) and the second is dropped before
        // it sees that: the turn must reach the third.
        let mut waiting = Box::pin(second.start());
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        drop(first);
        drop(waiting);
        let third = tokio::time::timeout(Duration::from_secs(1), third.start())
            .await
            .expect("the conversation was passed on");
        drop(third);
        assert_eq!(scheduler.queued(), 0);
    }

    #[tokio::test]
    async fn turns_waiting_for_a_slot_are_counted_and_capped() {
        let scheduler = Scheduler::new(1, 4, 2);
        let running = scheduler.enqueue("a").unwrap().start().await;
        let b = scheduler.enqueue("b").unwrap();
        let _c = scheduler.enqueue("c").unwrap();
        assert_eq!(scheduler.queued(), 2, "waiting for the one slot");
        assert_eq!(scheduler.enqueue("d").err(), Some(QueueFull::Total(2)));
        drop(running);
        let b = tokio::time::timeout(Duration::from_secs(1), b.start())
            .await
            .expect("b gets the slot");
        assert_eq!(scheduler.queued(), 1);
        drop(b);
    }
}
