//! Scoped state (small JSON values) and storage (blobs).
//!
//! Every state owner includes the runner id, so one runner never reads
//! another's state; the rest of the owner is the id of the scope itself
//! (conversation + thread, actor, subject), taken from the run, never from
//! the caller.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::Value;

use super::{db_error, execute_cached};
use crate::host::grant::now_ms;
use crate::host::{HostResult, RunScope, StateEntry};
use crate::protocol::{AgentAPIError, StateScope, StorageKind};

const SEP: char = '\u{1f}';

/// The owner key of one state scope for this run.
pub(super) fn state_owner(scope: &RunScope, state: StateScope) -> HostResult<String> {
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

pub(super) fn storage_owner(scope: &RunScope, area: StorageKind) -> String {
    match area {
        StorageKind::Plugin => scope.plugin_id().to_string(),
        StorageKind::Workspace => scope
            .workspace_id
            .clone()
            .unwrap_or_else(|| "default".into()),
    }
}

fn area_name(area: StorageKind) -> &'static str {
    match area {
        StorageKind::Plugin => "plugin",
        StorageKind::Workspace => "workspace",
    }
}

fn parse_value(text: String) -> HostResult<Value> {
    serde_json::from_str(&text)
        .map_err(|e| AgentAPIError::runtime(format!("stored state is not JSON: {e}")))
}

pub(super) fn state_get(
    conn: &Connection,
    state: StateScope,
    owner: &str,
    key: &str,
) -> HostResult<Option<Value>> {
    let text: Option<String> = conn
        .prepare_cached("SELECT value FROM state WHERE scope = ?1 AND owner = ?2 AND key = ?3")
        .and_then(|mut s| {
            s.query_row(params![state.as_str(), owner, key], |r| r.get(0))
                .optional()
        })
        .map_err(db_error)?;
    text.map(parse_value).transpose()
}

pub(super) fn state_set(
    tx: &Transaction<'_>,
    state: StateScope,
    owner: &str,
    key: &str,
    value: &Value,
) -> HostResult<()> {
    let text =
        serde_json::to_string(value).map_err(|e| AgentAPIError::invalid_argument(e.to_string()))?;
    execute_cached(tx,
        "INSERT INTO state (scope, owner, key, value, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (scope, owner, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        params![state.as_str(), owner, key, text, now_ms()],
    )
    .map_err(db_error)?;
    Ok(())
}

pub(super) fn state_delete(
    tx: &Transaction<'_>,
    state: StateScope,
    owner: &str,
    key: &str,
) -> HostResult<bool> {
    execute_cached(
        tx,
        "DELETE FROM state WHERE scope = ?1 AND owner = ?2 AND key = ?3",
        params![state.as_str(), owner, key],
    )
    .map(|n| n > 0)
    .map_err(db_error)
}

pub(super) fn state_list(
    conn: &Connection,
    state: StateScope,
    owner: &str,
    prefix: Option<&str>,
    limit: u32,
) -> HostResult<Vec<StateEntry>> {
    let prefix = prefix.unwrap_or("");
    let mut stmt = conn
        .prepare_cached(
            "SELECT key, value FROM state WHERE scope = ?1 AND owner = ?2
             AND substr(key, 1, length(?3)) = ?3 ORDER BY key LIMIT ?4",
        )
        .map_err(db_error)?;
    let rows = stmt
        .query_map(
            params![state.as_str(), owner, prefix, i64::from(limit)],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
        )
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(db_error)?;
    rows.into_iter()
        .map(|(key, text)| {
            Ok(StateEntry {
                key,
                value: parse_value(text)?,
            })
        })
        .collect()
}

pub(super) fn state_dump(
    conn: &Connection,
    state: StateScope,
    owner: &str,
) -> HostResult<Vec<StateEntry>> {
    state_list(conn, state, owner, None, u32::MAX)
}

pub(super) fn storage_get(
    conn: &Connection,
    area: StorageKind,
    owner: &str,
    key: &str,
) -> HostResult<Option<Vec<u8>>> {
    conn.prepare_cached("SELECT value FROM storage WHERE area = ?1 AND owner = ?2 AND key = ?3")
        .and_then(|mut s| {
            s.query_row(params![area_name(area), owner, key], |r| r.get(0))
                .optional()
        })
        .map_err(db_error)
}

pub(super) fn storage_set(
    tx: &Transaction<'_>,
    area: StorageKind,
    owner: &str,
    key: &str,
    value: &[u8],
) -> HostResult<()> {
    execute_cached(tx,
        "INSERT INTO storage (area, owner, key, value, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (area, owner, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        params![area_name(area), owner, key, value, now_ms()],
    )
    .map_err(db_error)?;
    Ok(())
}

pub(super) fn storage_delete(
    tx: &Transaction<'_>,
    area: StorageKind,
    owner: &str,
    key: &str,
) -> HostResult<bool> {
    execute_cached(
        tx,
        "DELETE FROM storage WHERE area = ?1 AND owner = ?2 AND key = ?3",
        params![area_name(area), owner, key],
    )
    .map(|n| n > 0)
    .map_err(db_error)
}

pub(super) fn storage_keys(
    conn: &Connection,
    area: StorageKind,
    owner: &str,
) -> HostResult<Vec<String>> {
    conn.prepare_cached("SELECT key FROM storage WHERE area = ?1 AND owner = ?2 ORDER BY key")
        .and_then(|mut s| {
            s.query_map(params![area_name(area), owner], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(db_error)
}
