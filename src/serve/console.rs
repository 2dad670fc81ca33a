//! What the operator console reads beyond the lists: one conversation
//! (`GET /v1/conversations/{id}`: its stored state, open request, live
//! process, last runs and usage), one run's facts (who, when, what it
//! cost, its audit rows, merged into `GET /v1/runs/{id}`), the ledger
//! summed (`GET /v1/usage`) and the live harness processes (`GET
//! /v1/live`). All of it from the store and the service's memory; no
//! token, and no stored value beyond its start, ever leaves.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::listing::store_failed;
use super::{RunEntry, Service, error};
use crate::harness::SESSION_FILES_KEY;
use crate::host::usage::{RunListQuery, UsageBy, UsageQuery};
use crate::host::{RunScope, now_ms};
use crate::interaction::PENDING_KEY;
use crate::protocol::StateScope;

/// Longest stored string shown whole; longer ones show their start and
/// size.
const SHOWN_CHARS: usize = 240;
/// Runs the conversation view and the run view list.
const LAST_RUNS: u32 = 20;
/// Audit rows a run view shows.
const AUDIT_ROWS: u32 = 200;

/// `value` as the console shows it: every string past [`SHOWN_CHARS`]
/// cut to its start, with its size.
fn clipped(value: &Value) -> Value {
    match value {
        Value::String(text) if text.chars().count() > SHOWN_CHARS => {
            let start: String = text.chars().take(SHOWN_CHARS).collect();
            Value::String(format!("{start}… ({} bytes)", text.len()))
        }
        Value::Array(items) => Value::Array(items.iter().map(clipped).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), clipped(v))).collect())
        }
        other => other.clone(),
    }
}

/// The bridge's own state of `conversation` with `harness` (the
/// `external.*` keys: resume pointer, open request, kept session copy),
/// each value clipped and the session copy said by its size only.
async fn harness_state(
    service: &Service,
    conversation: &str,
    harness: &str,
) -> Result<Map<String, Value>, crate::protocol::AgentAPIError> {
    let scope = RunScope {
        runner_id: crate::harness::runner_id(harness),
        conversation_id: Some(conversation.to_string()),
        ..RunScope::default()
    };
    let entries = service
        .bridge
        .host()
        .state_list(&scope, StateScope::Conversation, Some("external."), 50)
        .await?;
    Ok(entries
        .into_iter()
        .map(|e| {
            let shown = if e.key == SESSION_FILES_KEY {
                json!({"kept": true, "bytes": e.value.to_string().len()})
            } else {
                clipped(&e.value)
            };
            (e.key, shown)
        })
        .collect())
}

/// Whether the store holds a message of conversation `id` (one that has
/// no run yet: a command answered, a turn on its way).
async fn has_history(host: &Arc<dyn crate::host::HostApi>, id: &str) -> bool {
    let scope = crate::host::RunScope {
        conversation_id: Some(id.to_string()),
        ..Default::default()
    };
    let query = crate::host::HistoryQuery {
        conversation_id: Some(id.to_string()),
        limit: 1,
        ..Default::default()
    };
    host.history_page(&scope, &query)
        .await
        .is_ok_and(|page| !page.items.is_empty())
}

/// One conversation as the store and this instance know it: its usage,
/// the state the bridge keeps per harness (resume pointer, open request),
/// the live process in its workspace, runs in flight here and the last
/// runs that ended. 404 when nothing is known of it.
pub(super) async fn conversation(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Response {
    let host = service.bridge.host();
    let runs = host
        .usage_runs(RunListQuery {
            conversation: Some(id.clone()),
            limit: LAST_RUNS,
            ..RunListQuery::default()
        })
        .await;
    let runs = match runs {
        Ok(runs) => runs,
        Err(e) => return store_failed("conversation's runs", &e),
    };
    let in_flight: Vec<(String, Arc<RunEntry>)> = service
        .runs()
        .iter()
        .filter(|(_, run)| run.conversation_id == id && !run.ended())
        .map(|(run_id, run)| (run_id.clone(), run.clone()))
        .collect();
    let harnesses: BTreeSet<&str> = runs
        .iter()
        .map(|r| r.harness.as_str())
        .chain(in_flight.iter().map(|(_, r)| r.harness.as_str()))
        .collect();
    let mut state = Map::new();
    let mut pending = Map::new();
    let mut workspaces = Vec::new();
    for harness in harnesses {
        let mut kept = match harness_state(&service, &id, harness).await {
            Ok(kept) => kept,
            Err(e) => return store_failed("conversation's state", &e),
        };
        if let Some(open) = kept.remove(PENDING_KEY).filter(|v| !v.is_null()) {
            pending.insert(harness.to_string(), open);
        }
        if let Some(dir) = kept
            .get(crate::harness::WORKING_DIRECTORY_KEY)
            .and_then(Value::as_str)
        {
            workspaces.push(std::path::PathBuf::from(dir));
        }
        if !kept.is_empty() {
            state.insert(harness.to_string(), Value::Object(kept));
        }
    }
    if runs.is_empty() && in_flight.is_empty() && state.is_empty() && !has_history(host, &id).await
    {
        return error(StatusCode::NOT_FOUND, format!("no conversation {id}"));
    }
    let live: Vec<_> = service
        .bridge
        .live_sessions()
        .map(|live| live.list())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| {
            s.conversation.as_deref() == Some(id.as_str()) || workspaces.contains(&s.workspace)
        })
        .collect();
    let usage = host
        .usage_totals(UsageQuery {
            by: UsageBy::Conversation,
            conversation: Some(id.clone()),
            ..UsageQuery::default()
        })
        .await
        .ok()
        .and_then(|totals| totals.into_iter().next());
    let in_flight: Vec<Value> = in_flight
        .iter()
        .map(|(run_id, run)| in_flight_facts(run_id, run))
        .collect();
    axum::Json(json!({
        "conversation_id": id, "usage": usage, "state": state, "pending": pending,
        "live": live, "in_flight": in_flight, "runs": runs,
    }))
    .into_response()
}

/// What a run in flight here says of itself before the ledger has it.
fn in_flight_facts(run_id: &str, run: &RunEntry) -> Value {
    let who = run.who().cloned().unwrap_or_default();
    json!({
        "run_id": run_id, "conversation_id": run.conversation_id, "harness": run.harness,
        "status": run.status(), "actor_id": who.actor, "model": who.model,
        "accepted_ms": run.accepted_ms, "started_ms": run.started_ms(),
    })
}

/// What the run view adds to a run's status and results: who asked,
/// when, how it ended and what it cost (the ledger's row, once it ended;
/// the service's memory while in flight), and the host calls it made
/// (its audit rows).
pub(super) async fn run_facts(service: &Service, run_id: &str, body: &mut Value) {
    let host = service.bridge.host();
    let row = host
        .usage_runs(RunListQuery {
            run_id: Some(run_id.to_string()),
            limit: 1,
            ..RunListQuery::default()
        })
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(run_id, error = %e, "cannot read the run's ledger row");
            Vec::new()
        });
    let facts = match (row.into_iter().next(), service.run(run_id)) {
        (Some(row), _) => serde_json::to_value(row).unwrap_or_default(),
        (None, Some(run)) => in_flight_facts(run_id, &run),
        (None, None) => Value::Null,
    };
    if let (Value::Object(facts), Value::Object(body)) = (facts, &mut *body) {
        for (key, value) in facts {
            body.entry(key).or_insert(value);
        }
    }
    let audit = host
        .audit_rows(Some(run_id.to_string()), AUDIT_ROWS)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(run_id, error = %e, "cannot read the run's audit rows");
            Vec::new()
        });
    body["audit"] = json!(audit);
}

/// `GET /v1/usage`'s question.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UsageAsked {
    /// `actor`, `day`, `harness`, `model` or `conversation`.
    by: Option<String>,
    /// Only runs that ended in the last N days.
    days: Option<u32>,
    actor: Option<String>,
    harness: Option<String>,
    /// The latest groups, at most this many (default and most 200).
    limit: Option<u32>,
}

/// Most groups `GET /v1/usage` answers with.
const MAX_GROUPS: u32 = 200;

/// The ledger summed by what is asked (the console's per-person table
/// and chart), the latest group first.
pub(super) async fn usage(
    State(service): State<Arc<Service>>,
    Query(asked): Query<UsageAsked>,
) -> Response {
    let name = asked.by.as_deref().unwrap_or("actor");
    let Some(by) = UsageBy::named(name) else {
        let names: Vec<&str> = UsageBy::ALL.iter().map(|(n, _)| *n).collect();
        return error(
            StatusCode::BAD_REQUEST,
            format!("by: expected one of {}", names.join(", ")),
        );
    };
    let summed = service
        .bridge
        .host()
        .usage_totals(UsageQuery {
            by,
            since_ms: asked
                .days
                .map(|d| now_ms() - i64::from(d.min(36_500)) * 86_400_000),
            actor: asked.actor,
            conversation: None,
            bot: None,
            harness: asked.harness,
        })
        .await;
    match summed {
        Ok(mut totals) => {
            let shown = asked.limit.unwrap_or(MAX_GROUPS).clamp(1, MAX_GROUPS) as usize;
            let more = totals.len() > shown;
            totals.truncate(shown);
            axum::Json(json!({"by": name, "totals": totals, "more": more})).into_response()
        }
        Err(e) => store_failed("usage", &e),
    }
}

/// The live harness processes of this instance, serving a turn or idle,
/// with their memory.
pub(super) async fn live(State(service): State<Arc<Service>>) -> Response {
    let sessions = service.bridge.live_sessions();
    axum::Json(json!({
        "enabled": sessions.is_some(),
        "sessions": sessions.map(|s| s.list()).unwrap_or_default(),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_show_their_start_and_size() {
        let long = "x".repeat(1000);
        let shown = clipped(&json!({"a": [long], "b": "short"}));
        let a = shown["a"][0].as_str().unwrap();
        assert!(a.ends_with("… (1000 bytes)") && a.len() < 300, "{a}");
        assert_eq!(shown["b"], "short");
    }
}
