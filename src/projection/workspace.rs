//! Where a conversation's workspace lives, and the bridge's fixed paths in
//! it.
//!
//! The path is a pure function of the session key (workspace, bot, runner,
//! conversation, thread; seed 000 §6), so every turn of a conversation
//! lands in the same folder (Claude Code resumes only from the same cwd)
//! and no two conversations share one.

use super::names::safe_component;
use crate::protocol::AgentRunContext;

/// Bridge-owned files, at fixed paths so the stable instructions can name
/// them identically every turn.
pub mod paths {
    /// The bridge's folder in the workspace.
    pub const DIR: &str = ".langbot";
    /// The projected run context, JSON.
    pub const AGENT_CONTEXT: [&str; 2] = [DIR, "agent-context.json"];
    /// The human-readable summary.
    pub const CONTEXT_MD: [&str; 2] = [DIR, "LANGBOT_CONTEXT.md"];
    /// The stable instructions (system-prompt channel).
    pub const INSTRUCTIONS: [&str; 2] = [DIR, "instructions.md"];
    /// The current turn's prompt, for inspection.
    pub const TURN_PROMPT: [&str; 2] = [DIR, "turn-prompt.md"];
    /// The harness's MCP config file, when its format is a file (0600).
    pub const MCP_CONFIG: [&str; 2] = [DIR, "mcp.json"];
    /// Where a harness writes its token counts (`{usage_file}`).
    pub const USAGE: [&str; 2] = [DIR, "usage.json"];
    /// The conversation's own home for its harness (sessions, config).
    pub const HOME: [&str; 2] = [DIR, "home"];
    /// The caged harness's temp folder (`TMPDIR`): the system's `/tmp` is
    /// shared by every conversation, so a caged harness gets its own.
    pub const TMP: [&str; 2] = [DIR, "tmp"];
    /// Copies of earlier runs' files.
    pub const RUNS: [&str; 2] = [DIR, "runs"];
    /// Files copied into `runs/<run>/` before the next run replaces them.
    /// The MCP config is not among them: it may hold secrets.
    pub const ARCHIVED: [[&str; 2]; 4] = [AGENT_CONTEXT, CONTEXT_MD, INSTRUCTIONS, TURN_PROMPT];
}

/// The path below the root of the workspace every conversation of the
/// shared project `name` works in: `_projects/<name>`, which no
/// conversation's path can be (its first component is `_` or a slug
/// ending in a hash).
pub fn shared(name: &str) -> Vec<String> {
    vec!["_projects".into(), safe_component(name)]
}

/// Placeholder component for an id the context does not have.
const NONE: &str = "_";

/// The workspace's path components below the projection root:
/// `<workspace>/<bot>/<runner>/<conversation>/<thread>`. Every id goes
/// through [`safe_component`]; a missing one is `_`, which no safe
/// component can equal (they always end in `-<hash>`).
pub fn components(ctx: &AgentRunContext, runner: &str) -> Vec<String> {
    let conversation = ctx.conversation.as_ref();
    let part = |id: Option<&str>| id.map_or_else(|| NONE.to_string(), safe_component);
    vec![
        part(conversation.and_then(|c| c.workspace_id.as_deref())),
        part(conversation.and_then(|c| c.bot_id.as_deref())),
        part(Some(runner)),
        part(ctx.conversation_id()),
        part(ctx.thread_id()),
    ]
}
