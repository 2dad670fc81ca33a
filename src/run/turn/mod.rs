//! One turn, end to end: grant → workspace → resume pointer → harness →
//! results → what the host keeps. Three phases, a file each: `prepare`
//! (nothing started), `drive` (the harness runs, over the one I/O loop of
//! `run::io`: a process of the turn's own, or a kept one of `run::live`),
//! `settle` (what the host keeps, the terminal result). Beside them, what
//! a phase does for the turn alone: the answer to an open request
//! (`answers`), the turn's record (`record`), an approved publish
//! (`publish`), the token-filled MCP file (`mcp_file`), the usage counted
//! (`usage`, `ledger`).

use tokio_util::sync::CancellationToken;

use crate::protocol::AgentRunContext;
use crate::run::{Emitter, RunOptions, RunSummary};

/// What a turn is handed once and every phase reads: the run's context
/// (the person's choices of model and mode applied), the front door's
/// options and cancel, the stream its results go to and the summary the
/// ledger keeps. Each phase takes it whole, instead of the five as loose
/// arguments; what the phases decide is [`prepare::Prepared`].
pub(in crate::run) struct TurnIo<'r, 'w> {
    pub ctx: &'r AgentRunContext,
    pub options: &'r RunOptions,
    pub cancel: &'r CancellationToken,
    pub emit: &'w mut Emitter,
    pub summary: &'w mut RunSummary,
}

pub(super) mod answers;
pub(super) mod drive;
pub(super) mod ledger;
pub(super) mod mcp_file;
pub(super) mod prepare;
pub(super) mod publish;
pub(super) mod record;
pub(super) mod settle;
pub(super) mod usage;
