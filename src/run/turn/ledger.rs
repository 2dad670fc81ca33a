//! What a run cost, recorded with who asked (`host::usage`): one row at
//! the run's end, whatever its outcome, for every front end; the host
//! the run wrote through takes it (on a shared store, fenced as every
//! write of the run).

use crate::host::usage::UsageRecord;
use crate::host::{HostApi, now_ms};
use crate::protocol::{AgentRunContext, ResultType, RunFailed, TokenUsage};

/// The ledger's row for a run of `harness` on `ctx` that started at
/// `started_ms` and ended as `outcome`.
pub(in crate::run) fn row(
    ctx: &AgentRunContext,
    harness: &str,
    started_ms: i64,
    outcome: Option<&ResultType>,
    failure: Option<&RunFailed>,
    usage: Option<&TokenUsage>,
) -> UsageRecord {
    let conversation = ctx.conversation.as_ref();
    let mut row = UsageRecord {
        run_id: ctx.run_id.clone(),
        bot_id: conversation.and_then(|c| c.bot_id.clone()),
        conversation_id: ctx.conversation_id().map(str::to_string),
        actor_id: ctx.actor.as_ref().and_then(|a| a.actor_id.clone()),
        harness: harness.to_string(),
        model: ctx
            .config
            .get("model")
            .and_then(serde_json::Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_string),
        started_ms,
        ended_ms: now_ms(),
        outcome: match outcome {
            Some(ResultType::RunCompleted) => "completed".into(),
            _ => "failed".into(),
        },
        code: failure.map(|f| f.code.as_str().to_string()),
        ..UsageRecord::default()
    };
    if let Some(usage) = usage {
        row.count(usage);
        // A binding that names no model: the model the gateway saw
        // answer (its price then counts).
        if row.model.is_none() {
            row.model = usage
                .extra
                .get("models")
                .and_then(serde_json::Value::as_array)
                .and_then(|models| models.first())
                .and_then(serde_json::Value::as_str)
                .map(str::to_string);
        }
    }
    row
}

/// Count `row` in the process's metrics and record it; a host that
/// cannot is logged, the run being over.
pub(in crate::run) async fn record(host: &dyn HostApi, row: UsageRecord) {
    let metrics = crate::metrics::global();
    let model = row.model.as_deref();
    for (kind, n) in [
        ("input", row.input_tokens),
        ("output", row.output_tokens),
        ("cache_read", row.cache_read_tokens),
        ("cache_write", row.cache_write_tokens),
    ] {
        metrics.tokens(&row.harness, model, kind, n);
    }
    if let Some(usd) = row.cost_usd {
        metrics.cost(&row.harness, model, usd);
    }
    let wait = tokio::time::timeout(crate::run::HOST_CALL_TIMEOUT, host.record_usage(row));
    match wait.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot record the run's usage: {e}"),
        Err(_) => tracing::warn!("the host did not answer recording the run's usage"),
    }
}
