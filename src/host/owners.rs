//! Who owns a state or storage entry, every backend alike.
//!
//! Every state owner includes the runner id, so one runner never reads
//! another's state; the rest of the owner is the id of the scope itself
//! (conversation + thread, actor, subject), taken from the run, never from
//! the caller. Storage belongs to the runner's plugin or to its workspace.

use super::{HostResult, RunScope};
use crate::protocol::{AgentAPIError, StateScope, StorageKind};

const SEP: char = '\u{1f}';

/// The owner key of one state scope for this run.
pub fn state_owner(scope: &RunScope, state: StateScope) -> HostResult<String> {
    let missing =
        || AgentAPIError::invalid_argument(format!("this run has no {} scope", state.as_str()));
    let id = match state {
        StateScope::Conversation => {
            let conversation = scope.conversation_id.as_deref().ok_or_else(missing)?;
            format!(
                "{conversation}{SEP}{}",
                scope.thread_id.as_deref().unwrap_or("")
            )
        }
        StateScope::Actor => scope.actor_id.clone().ok_or_else(missing)?,
        StateScope::Subject => scope.subject_id.clone().ok_or_else(missing)?,
        StateScope::Runner => String::new(),
    };
    Ok(format!("{}{SEP}{id}", scope.runner_id))
}

/// Build a state owner for inspection (`host state`), as the bridge would.
pub fn inspect_owner(runner_id: &str, state: StateScope, id: &str, thread: Option<&str>) -> String {
    match state {
        StateScope::Conversation => format!("{runner_id}{SEP}{id}{SEP}{}", thread.unwrap_or("")),
        StateScope::Runner => format!("{runner_id}{SEP}"),
        _ => format!("{runner_id}{SEP}{id}"),
    }
}

/// The owner key of one storage area for this run.
pub fn storage_owner(scope: &RunScope, area: StorageKind) -> String {
    match area {
        StorageKind::Plugin => scope.plugin_id().to_string(),
        StorageKind::Workspace => scope
            .workspace_id
            .clone()
            .unwrap_or_else(|| "default".into()),
    }
}

/// The stored name of a storage area.
pub fn area_name(area: StorageKind) -> &'static str {
    match area {
        StorageKind::Plugin => "plugin",
        StorageKind::Workspace => "workspace",
    }
}
