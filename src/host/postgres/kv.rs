//! Scoped state (small JSON values) and storage (bytes) on PostgreSQL;
//! whose entry is whose is `host::owners`'.

use serde_json::Value;

use deadpool_postgres::GenericClient;

use super::db_error;
use crate::host::owners::area_name;
use crate::host::rows::state_value;
use crate::host::{HostResult, StateEntry, now_ms};
use crate::protocol::{AgentAPIError, StateScope, StorageKind};

pub(super) async fn state_get(
    client: &impl GenericClient,
    state: StateScope,
    owner: &str,
    key: &str,
) -> HostResult<Option<Value>> {
    let stmt = client
        .prepare_cached("SELECT value FROM state WHERE scope = $1 AND owner = $2 AND key = $3")
        .await
        .map_err(db_error)?;
    let text: Option<String> = client
        .query_opt(&stmt, &[&state.as_str(), &owner, &key])
        .await
        .and_then(|row| row.map(|r| r.try_get(0)).transpose())
        .map_err(db_error)?;
    text.map(state_value).transpose()
}

pub(super) async fn state_set(
    client: &impl GenericClient,
    state: StateScope,
    owner: &str,
    key: &str,
    value: &Value,
) -> HostResult<()> {
    let text =
        serde_json::to_string(value).map_err(|e| AgentAPIError::invalid_argument(e.to_string()))?;
    let stmt = client
        .prepare_cached(
            "INSERT INTO state (scope, owner, key, value, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (scope, owner, key)
             DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .await
        .map_err(db_error)?;
    client
        .execute(&stmt, &[&state.as_str(), &owner, &key, &text, &now_ms()])
        .await
        .map_err(db_error)?;
    Ok(())
}

pub(super) async fn state_delete(
    client: &impl GenericClient,
    state: StateScope,
    owner: &str,
    key: &str,
) -> HostResult<bool> {
    let stmt = client
        .prepare_cached("DELETE FROM state WHERE scope = $1 AND owner = $2 AND key = $3")
        .await
        .map_err(db_error)?;
    client
        .execute(&stmt, &[&state.as_str(), &owner, &key])
        .await
        .map(|n| n > 0)
        .map_err(db_error)
}

/// Keys in byte order (`COLLATE "C"`), as the embedded store lists them,
/// whatever the database's locale.
pub(super) async fn state_list(
    client: &impl GenericClient,
    state: StateScope,
    owner: &str,
    prefix: Option<&str>,
    limit: u32,
) -> HostResult<Vec<StateEntry>> {
    let stmt = client
        .prepare_cached(
            "SELECT key, value FROM state WHERE scope = $1 AND owner = $2
             AND starts_with(key, $3) ORDER BY key COLLATE \"C\" LIMIT $4",
        )
        .await
        .map_err(db_error)?;
    let rows = client
        .query(
            &stmt,
            &[
                &state.as_str(),
                &owner,
                &prefix.unwrap_or(""),
                &i64::from(limit),
            ],
        )
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|r| {
            let key: String = r.try_get(0).map_err(db_error)?;
            let text: String = r.try_get(1).map_err(db_error)?;
            Ok(StateEntry {
                key,
                value: state_value(text)?,
            })
        })
        .collect()
}

pub(super) async fn storage_get(
    client: &impl GenericClient,
    area: StorageKind,
    owner: &str,
    key: &str,
) -> HostResult<Option<Vec<u8>>> {
    let stmt = client
        .prepare_cached("SELECT value FROM storage WHERE area = $1 AND owner = $2 AND key = $3")
        .await
        .map_err(db_error)?;
    client
        .query_opt(&stmt, &[&area_name(area), &owner, &key])
        .await
        .and_then(|row| row.map(|r| r.try_get(0)).transpose())
        .map_err(db_error)
}

pub(super) async fn storage_set(
    client: &impl GenericClient,
    area: StorageKind,
    owner: &str,
    key: &str,
    value: &[u8],
) -> HostResult<()> {
    let stmt = client
        .prepare_cached(
            "INSERT INTO storage (area, owner, key, value, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (area, owner, key)
             DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .await
        .map_err(db_error)?;
    client
        .execute(&stmt, &[&area_name(area), &owner, &key, &value, &now_ms()])
        .await
        .map_err(db_error)?;
    Ok(())
}

pub(super) async fn storage_delete(
    client: &impl GenericClient,
    area: StorageKind,
    owner: &str,
    key: &str,
) -> HostResult<bool> {
    let stmt = client
        .prepare_cached("DELETE FROM storage WHERE area = $1 AND owner = $2 AND key = $3")
        .await
        .map_err(db_error)?;
    client
        .execute(&stmt, &[&area_name(area), &owner, &key])
        .await
        .map(|n| n > 0)
        .map_err(db_error)
}

pub(super) async fn storage_keys(
    client: &impl GenericClient,
    area: StorageKind,
    owner: &str,
) -> HostResult<Vec<String>> {
    let stmt = client
        .prepare_cached(
            "SELECT key FROM storage WHERE area = $1 AND owner = $2 ORDER BY key COLLATE \"C\"",
        )
        .await
        .map_err(db_error)?;
    client
        .query(&stmt, &[&area_name(area), &owner])
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| r.try_get(0).map_err(db_error))
        .collect()
}
