//! The one I/O loop every harness process runs under, whether it serves
//! one turn or many: `engine` (the loop: the harness's lines in, results
//! out, deadlines, cancel, steering, the spend watch), `attempt` (a
//! process of the turn's own, started and ended with it), `emit` (the
//! result stream to the front door) and `outbox` (the files the agent
//! sends). A turn (`turn/`) and a kept process (`live`) both run on it.

pub(super) mod attempt;
pub(super) mod emit;
pub(super) mod engine;
pub(super) mod outbox;
