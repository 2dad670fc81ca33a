//! `state_get`, `state_set`, `state_delete`, `state_list`: small JSON
//! values the host keeps for the run's scopes across turns.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::HostCall;
use crate::host::{Api, HostApi, HostResult, RunGrant, StateEntry};
use crate::protocol::{AgentAPIError, StateScope};

fn hundred() -> u32 {
    100
}

/// The state keys the bridge keeps for itself: the resume pointer
/// (`external.session_id`, …) and the request open to the person
/// (`external.pending_interaction`). A harness may read them, never write
/// or delete them: a model that could would forge its own approval or send
/// the next turn into a session of its choosing.
pub const BRIDGE_KEY_PREFIX: &str = "external.";

/// Refuse a write to one of the bridge's own keys (any case: a host may
/// compare keys without it).
fn check_writable(key: &str) -> HostResult<()> {
    let lower = key.trim_start().to_ascii_lowercase();
    if lower.starts_with(BRIDGE_KEY_PREFIX) {
        return Err(AgentAPIError::unauthorized(format!(
            "`{key}` is one of the bridge's own keys (`{BRIDGE_KEY_PREFIX}*`): it can be read, \
             not written or deleted"
        )));
    }
    Ok(())
}

fn state_resource(state: StateScope, key: &str) -> String {
    format!("state:{}/{key}", state.as_str())
}

/// Arguments of `state_get`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateGetCall {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    pub scope: StateScope,
    /// The key, e.g. `memory.summary`.
    pub key: String,
}

#[async_trait]
impl HostCall for StateGetCall {
    const TOOL: &'static str = "state_get";
    const ACTION: &'static str = "state_get";
    const API: Api = Api::State;
    const DESCRIPTION: &'static str =
        "Read one value the host keeps for you across turns (e.g. notes, preferences).";
    type Output = Option<Value>;

    fn resource(&self, _grant: &RunGrant) -> String {
        state_resource(self.scope, &self.key)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_key(&self.key)?;
        grant.state_scope_id(self.scope)
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Option<Value>> {
        host.state_get(&grant.scope, self.scope, &self.key).await
    }

    fn reply(&self, value: Option<Value>) -> HostResult<Value> {
        Ok(json!({"key": self.key, "found": value.is_some(), "value": value}))
    }
}

/// Arguments of `state_set`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateSetCall {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    pub scope: StateScope,
    /// The key, e.g. `memory.summary`.
    pub key: String,
    /// Any JSON value (at most 256 KiB as JSON).
    pub value: Value,
}

#[async_trait]
impl HostCall for StateSetCall {
    const TOOL: &'static str = "state_set";
    const ACTION: &'static str = "state_set";
    const API: Api = Api::State;
    const DESCRIPTION: &'static str = "Keep a small JSON value across turns in a scope: conversation, actor (the user), subject, or runner.";
    type Output = ();

    fn resource(&self, _grant: &RunGrant) -> String {
        state_resource(self.scope, &self.key)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_key(&self.key)?;
        check_writable(&self.key)?;
        grant.state_scope_id(self.scope)?;
        let size = serde_json::to_vec(&self.value).map_or(usize::MAX, |v| v.len());
        let max = grant.caps.max_state_value_bytes;
        if size > max {
            return Err(AgentAPIError::too_large(format!(
                "state value is {size} bytes of JSON; the limit is {max} (use storage for large data)"
            )));
        }
        Ok(())
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<()> {
        host.state_set(&grant.scope, self.scope, &self.key, &self.value)
            .await
    }

    fn from_relay(_data: Value) -> HostResult<()> {
        Ok(())
    }

    fn reply(&self, (): ()) -> HostResult<Value> {
        Ok(json!({"key": self.key, "stored": true}))
    }
}

/// Arguments of `state_delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateDeleteCall {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    pub scope: StateScope,
    /// The key, e.g. `memory.summary`.
    pub key: String,
}

#[async_trait]
impl HostCall for StateDeleteCall {
    const TOOL: &'static str = "state_delete";
    const ACTION: &'static str = "state_delete";
    const API: Api = Api::State;
    const DESCRIPTION: &'static str = "Forget one kept value.";
    type Output = bool;

    fn resource(&self, _grant: &RunGrant) -> String {
        state_resource(self.scope, &self.key)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_key(&self.key)?;
        check_writable(&self.key)?;
        grant.state_scope_id(self.scope)
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<bool> {
        host.state_delete(&grant.scope, self.scope, &self.key).await
    }

    /// A host that cannot tell whether the key existed says nothing: true.
    fn from_relay(data: Value) -> HostResult<bool> {
        Ok(data.as_bool().unwrap_or(true))
    }

    fn reply(&self, existed: bool) -> HostResult<Value> {
        Ok(json!({"key": self.key, "deleted": existed}))
    }
}

/// Arguments of `state_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateListCall {
    /// Whose state: `conversation`, `actor`, `subject` or `runner`.
    pub scope: StateScope,
    /// Only keys starting with this.
    pub prefix: Option<String>,
    /// How many entries, 1-1000.
    #[serde(default = "hundred")]
    pub limit: u32,
}

#[async_trait]
impl HostCall for StateListCall {
    const TOOL: &'static str = "state_list";
    const ACTION: &'static str = "state_list";
    const API: Api = Api::State;
    const DESCRIPTION: &'static str = "List kept values of a scope, optionally by key prefix. Values past the first 1 MiB come back as keys only (`value_omitted`): read those with state_get.";
    type Output = Vec<StateEntry>;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!(
            "state:{}/{}*",
            self.scope.as_str(),
            self.prefix.as_deref().unwrap_or("")
        )
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_limit(self.limit, 1000, "limit")?;
        grant.state_scope_id(self.scope)
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Vec<StateEntry>> {
        host.state_list(&grant.scope, self.scope, self.prefix.as_deref(), self.limit)
            .await
    }

    fn reply(&self, entries: Vec<StateEntry>) -> HostResult<Value> {
        Ok(json!({"entries": entries_within(entries, STATE_LIST_VALUE_BYTES)}))
    }
}

/// Most bytes of values one `state_list` answer carries: a thousand values
/// of 256 KiB would flood the model's context.
const STATE_LIST_VALUE_BYTES: usize = 1024 * 1024;

/// State entries with their values while the values fit in `budget` bytes
/// (as JSON), and by key only after that.
fn entries_within(entries: Vec<StateEntry>, mut budget: usize) -> Vec<Value> {
    entries
        .into_iter()
        .map(|entry| {
            let size = serde_json::to_string(&entry.value).map_or(usize::MAX, |t| t.len());
            if size <= budget {
                budget -= size;
                json!({"key": entry.key, "value": entry.value})
            } else {
                budget = 0;
                json!({"key": entry.key, "value_omitted": true, "value_bytes": size})
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_list_values_stop_at_the_budget_and_keys_go_on() {
        let entry = |key: &str, text: &str| StateEntry {
            key: key.into(),
            value: Value::String(text.into()),
        };
        // Each value is its text plus two quotes as JSON.
        let listed = entries_within(
            vec![
                entry("a", "12345678"),
                entry("b", "12345678"),
                entry("c", "1"),
            ],
            15,
        );
        assert_eq!(listed[0], json!({"key": "a", "value": "12345678"}));
        assert_eq!(
            listed[1],
            json!({"key": "b", "value_omitted": true, "value_bytes": 10})
        );
        assert_eq!(listed[2]["value_omitted"], true, "{listed:?}");
    }
}
