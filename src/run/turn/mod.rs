//! One turn, end to end: grant → workspace → resume pointer → harness →
//! results → what the host keeps. Three phases, a file each: `prepare`
//! (nothing started), `drive` (the harness runs, over the one I/O loop of
//! `run::io`: a process of the turn's own, or a kept one of `run::live`),
//! `settle` (what the host keeps, the terminal result). Beside them, what
//! a phase does for the turn alone: the answer to an open request
//! (`answers`), the turn's record (`record`), an approved publish
//! (`publish`), the token-filled MCP file (`mcp_file`), the usage counted
//! (`usage`, `ledger`).

pub(super) mod answers;
pub(super) mod drive;
pub(super) mod ledger;
pub(super) mod mcp_file;
pub(super) mod prepare;
pub(super) mod publish;
pub(super) mod record;
pub(super) mod settle;
pub(super) mod usage;
