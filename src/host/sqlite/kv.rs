//! Scoped state (small JSON values) and storage (blobs) in SQLite; whose
//! entry is whose is `host::owners`'.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::Value;

use super::{db_error, execute_cached};
use crate::host::grant::now_ms;
use crate::host::owners::area_name;
use crate::host::rows::state_value;
use crate::host::{HostResult, StateEntry};
use crate::protocol::{AgentAPIError, StateScope, StorageKind};

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
    text.map(state_value).transpose()
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
                value: state_value(text)?,
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
