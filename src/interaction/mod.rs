//! A question or an approval waiting for the person in the chat.
//!
//! A harness cannot wait for a person: a chat turn has a deadline, and the
//! answer comes as a later message. So asking ends the turn. The harness
//! asks (the `ask_user` tool, or a permission prompt routed to the
//! `approve` tool under `approvals: chat`); the turn ends with an
//! `action.requested` interaction (a card, or its fallback text) and the
//! request kept in the conversation's state ([`PENDING_KEY`]); the next
//! turn reads it, takes that turn's input (a card's submission, or plain
//! text on surfaces without cards) as the answer, and resumes the session
//! with a prompt saying what was answered. An approval lets exactly the
//! approved action (same tool, same arguments) run once, in that turn only.
//!
//! Everything here is pure: the run reads and writes the state, the MCP
//! tools deposit into [`Interactions`].

mod card;
mod pending;
mod reply;
mod runs;

pub use card::*;
pub use pending::*;
pub use reply::*;
pub use runs::*;

#[cfg(test)]
mod tests;
