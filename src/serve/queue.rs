//! Turn order: one turn of a conversation at a time, in arrival order, and
//! at most N turns at once overall. A conversation's queue is bounded; a
//! full one refuses at once (the caller answers 429), never drops.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// The conversation's queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull {
    /// Turns already waiting.
    pub waiting: usize,
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
    /// At most `max_running` turns at once, `max_waiting` queued per conversation.
    pub fn new(max_running: usize, max_waiting: usize) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            global: Arc::new(Semaphore::new(max_running)),
            conversations: Mutex::new(HashMap::new()),
            max_waiting,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Conversation>> {
        self.conversations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a place in `conversation`'s queue now (so arrival order is the
    /// order of these calls), or refuse when it is full.
    pub fn enqueue(self: &Arc<Self>, conversation: &str) -> Result<Ticket, QueueFull> {
        let mut conversations = self.lock();
        let entry = conversations.entry(conversation.to_string()).or_default();
        let turn = if entry.running {
            if entry.waiting.len() >= self.max_waiting {
                return Err(QueueFull {
                    waiting: entry.waiting.len(),
                });
            }
            let (tx, rx) = oneshot::channel();
            entry.waiting.push_back(tx);
            Some(rx)
        } else {
            entry.running = true;
            None
        };
        Ok(Ticket {
            scheduler: self.clone(),
            conversation: conversation.to_string(),
            holding: turn.is_none(),
            turn,
            started: false,
        })
    }

    /// Turns waiting in all conversations.
    pub fn queued(&self) -> usize {
        self.lock().values().map(|c| c.waiting.len()).sum()
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
        if let Some(turn) = self.turn.take() {
            // The sender stays queued until it is our turn.
            self.holding = turn.await.is_ok();
        }
        // The semaphore is closed only when the scheduler is dropped, and
        // the scheduler outlives every ticket.
        let permit = loop {
            if let Ok(permit) = self.scheduler.global.clone().acquire_owned().await {
                break permit;
            }
        };
        self.started = true;
        Turn {
            scheduler: self.scheduler.clone(),
            conversation: self.conversation.clone(),
            _permit: permit,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.holding && !self.started {
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
        let scheduler = Scheduler::new(4, 2);
        let first = scheduler.enqueue("c").unwrap();
        let second = scheduler.enqueue("c").unwrap();
        let third = scheduler.enqueue("c").unwrap();
        assert_eq!(scheduler.enqueue("c").err(), Some(QueueFull { waiting: 2 }));
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
}
