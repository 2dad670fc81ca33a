//! What an operator lists of the service: the runs that ended (`GET
//! /v1/runs`) and the conversations (`GET /v1/conversations`), read from
//! the store's run ledger, so every instance on a shared store answers
//! the same. A run in flight is looked up by id (`GET /v1/runs/{id}`).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{Service, error};
use crate::host::usage::{RunListQuery, UsageBy, UsageQuery};

/// Most rows one page holds.
const MAX_PAGE: u32 = 200;

/// `GET /v1/runs`'s filters and page.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunsQuery {
    actor: Option<String>,
    conversation: Option<String>,
    harness: Option<String>,
    /// The `next` of the page before.
    before: Option<String>,
    limit: Option<u32>,
}

/// The runs that ended, newest first, with who asked, when, how they
/// ended and what they cost; `next` pages on.
pub(super) async fn list_runs(
    State(service): State<Arc<Service>>,
    Query(query): Query<RunsQuery>,
) -> Response {
    let before = match query.before.as_deref().map(page_mark) {
        None => None,
        Some(Some(mark)) => Some(mark),
        Some(None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "before: expected the `next` of the page before",
            );
        }
    };
    let limit = query.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let listed = service
        .bridge
        .host()
        .usage_runs(RunListQuery {
            actor: query.actor,
            conversation: query.conversation,
            harness: query.harness,
            run_id: None,
            before,
            limit,
        })
        .await;
    match listed {
        Ok(runs) => {
            let next = (runs.len() == limit as usize)
                .then(|| runs.last().map(|r| format!("{}:{}", r.ended_ms, r.run_id)))
                .flatten();
            axum::Json(json!({"runs": runs, "next": next})).into_response()
        }
        Err(e) => store_failed("run list", &e),
    }
}

/// `GET /v1/conversations`' filters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConversationsQuery {
    actor: Option<String>,
    /// Only conversations with runs of this harness (only those runs
    /// counted).
    harness: Option<String>,
    /// Only conversations active in the last N days.
    days: Option<u32>,
    limit: Option<u32>,
}

/// The conversations, the most recently active first, each with its runs
/// and what they cost.
pub(super) async fn list_conversations(
    State(service): State<Arc<Service>>,
    Query(query): Query<ConversationsQuery>,
) -> Response {
    let summed = service
        .bridge
        .host()
        .usage_totals(UsageQuery {
            by: UsageBy::Conversation,
            since_ms: query
                .days
                .map(|d| crate::host::now_ms() - i64::from(d) * 86_400_000),
            actor: query.actor,
            conversation: None,
            bot: None,
            harness: query.harness,
        })
        .await;
    match summed {
        Ok(mut conversations) => {
            conversations.truncate(query.limit.unwrap_or(50).clamp(1, MAX_PAGE) as usize);
            let listed: Vec<_> = conversations
                .into_iter()
                .map(|c| {
                    json!({
                        "conversation_id": c.key, "last_activity_ms": c.last_ms,
                        "runs": c.runs, "failed": c.failed, "refused": c.refused, "input_tokens": c.input_tokens,
                        "output_tokens": c.output_tokens, "cache_read_tokens": c.cache_read_tokens,
                        "cache_write_tokens": c.cache_write_tokens, "cost_usd": c.cost_usd,
                    })
                })
                .collect();
            axum::Json(json!({"conversations": listed})).into_response()
        }
        Err(e) => store_failed("conversation list", &e),
    }
}

/// A page mark, `ENDED_MS:RUN_ID`.
fn page_mark(text: &str) -> Option<(i64, String)> {
    let (end, id) = text.split_once(':')?;
    Some((end.parse().ok()?, id.to_string()))
}

/// The store's failure: a 500 whose details stay in the log.
pub(super) fn store_failed(what: &str, e: &crate::protocol::AgentAPIError) -> Response {
    tracing::error!(error = %e, "{what} read failed");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the store could not read the {what}; the bridge's log says why"),
    )
}
