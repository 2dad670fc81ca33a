//! A turn admitted against the operator's budgets (`host::budget`) before
//! anything of it is written: a turn over a limit is not started, the
//! person is told which limit and when it resets, and the audit gets a
//! row. A turn that crosses a spending limit while it runs finishes (the
//! ledger then holds what it spent, and the next turn is refused), or,
//! with `mid_turn: stop`, is stopped once its harness reports spending
//! past the headroom its admission left ([`SpendWatch`]).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::host::budget::{Admission, Headroom, Limit, LimitHit, MidTurn, Per, Price, Prices};
use crate::host::{AuditEntry, HostApi, now_ms};
use crate::protocol::{AgentRunContext, ErrorCode, FailureCode, RunFailed, TokenUsage};

/// What an admitted turn may spend before it is stopped.
pub(crate) struct SpendWatch {
    /// Each spending limit's headroom.
    left: Vec<Headroom>,
    /// The price of the binding's model, for a cost limit when the
    /// harness reports no cost while it runs.
    price: Option<Price>,
    /// The operator's prices, for a turn whose binding names no model:
    /// the price of the model the gateway saw answer.
    prices: Prices,
    /// Said once: the stop is made once.
    fired: AtomicBool,
}

impl SpendWatch {
    /// The failure to end the turn with, the first time `usage` is past
    /// a headroom.
    pub(crate) fn crossed(&self, usage: Option<&TokenUsage>) -> Option<RunFailed> {
        let usage = usage?;
        let tokens = usage
            .prompt_tokens
            .unwrap_or(0)
            .saturating_add(usage.completion_tokens.unwrap_or(0));
        let reported = usage
            .extra
            .get("total_cost_usd")
            .and_then(serde_json::Value::as_f64);
        let answered = || {
            let models = usage.extra.get("models")?.as_array()?;
            models.iter().find_map(|m| self.prices.0.get(m.as_str()?))
        };
        let cost = reported.or_else(|| {
            self.price
                .as_ref()
                .or_else(answered)
                .map(|p| p.cost_of(usage))
        });
        let over = self.left.iter().find(|h| match h.limit {
            Limit::TokensPerDay | Limit::TokensPerMonth => tokens as f64 > h.left,
            Limit::CostUsdPerDay | Limit::CostUsdPerMonth => cost.is_some_and(|c| c > h.left),
            Limit::TurnsPerMinute => false,
        })?;
        if self.fired.swap(true, Ordering::SeqCst) {
            return None;
        }
        Some(RunFailed {
            code: FailureCode::LimitReached,
            error: stopped(over, now_ms()),
            retryable: false,
        })
    }
}

/// The audit action of a refused turn.
const ACTION: &str = "budget";

/// Admit `ctx`'s turn of `harness`, counting it against every limit its
/// actor, conversation and bot have: what it may spend before it is
/// stopped (with `mid_turn: stop`), or the refusal to send when a limit
/// is reached (audited), or when the store cannot say.
pub(super) async fn admit(
    host: &dyn HostApi,
    settings: &super::Settings,
    ctx: &AgentRunContext,
    harness: &str,
) -> Result<Option<SpendWatch>, RunFailed> {
    let budgets = &settings.budgets;
    let subjects = budgets.subjects(
        ctx.actor.as_ref().and_then(|a| a.actor_id.as_deref()),
        ctx.conversation_id(),
        ctx.conversation.as_ref().and_then(|c| c.bot_id.as_deref()),
    );
    if subjects.is_empty() {
        return Ok(None);
    }
    let now = now_ms();
    let admission = Admission {
        run_id: ctx.run_id.clone(),
        now_ms: now,
        subjects,
    };
    let verdict = tokio::time::timeout(super::HOST_CALL_TIMEOUT, host.admit_run(admission)).await;
    let verdict = match verdict {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(e)) => return Err(unchecked(e.to_string())),
        Err(_) => return Err(unchecked("the store did not answer in time".into())),
    };
    let Some(hit) = verdict.refused else {
        let watched = budgets.mid_turn == MidTurn::Stop && !verdict.left.is_empty();
        return Ok(watched.then(|| SpendWatch {
            left: verdict.left,
            price: ctx
                .config
                .get("model")
                .and_then(serde_json::Value::as_str)
                .and_then(|m| settings.prices.0.get(m))
                .cloned(),
            prices: settings.prices.clone(),
            fired: AtomicBool::new(false),
        }));
    };
    let entry = AuditEntry {
        at_ms: now,
        run_id: ctx.run_id.clone(),
        runner_id: crate::harness::runner_id(harness),
        action: ACTION.into(),
        resource: format!("{}:{}", hit.per.key(), hit.id),
        scope: ctx
            .conversation_id()
            .map(|c| format!("conversation:{c}"))
            .unwrap_or_default(),
        outcome: ErrorCode::RateLimited.to_string(),
        detail: format!(
            "refused: {} {} reached ({} used); resets {} UTC",
            limit_key(hit.limit),
            amount(hit.limit, hit.allowed),
            amount(hit.limit, hit.used),
            crate::protocol::time::date_time(hit.resets_ms.div_euclid(1000)),
        ),
    };
    if let Err(e) = host.record_audit(entry).await {
        tracing::error!(error = %e, "could not write the budget refusal's audit row");
    }
    tracing::info!(
        per = hit.per.key(),
        limit = limit_key(hit.limit),
        "turn refused by a budget"
    );
    Err(RunFailed {
        code: FailureCode::LimitReached,
        error: sentence(&hit, now),
        retryable: false,
    })
}

/// A budget the store could not check: the turn is not started (a limit
/// nobody can check would be no limit), and may be sent again.
fn unchecked(cause: String) -> RunFailed {
    RunFailed {
        code: FailureCode::RuntimeError,
        error: format!("the bridge could not check this turn against its budgets: {cause}"),
        retryable: true,
    }
}

/// The limit's key in `budgets:`.
fn limit_key(limit: Limit) -> &'static str {
    match limit {
        Limit::TurnsPerMinute => "turns_per_minute",
        Limit::TokensPerDay => "tokens_per_day",
        Limit::TokensPerMonth => "tokens_per_month",
        Limit::CostUsdPerDay => "cost_usd_per_day",
        Limit::CostUsdPerMonth => "cost_usd_per_month",
    }
}

/// `n` as the person reads the limit's unit.
pub(super) fn amount(limit: Limit, n: f64) -> String {
    match limit {
        Limit::CostUsdPerDay | Limit::CostUsdPerMonth => format!("${n:.2}"),
        Limit::TurnsPerMinute if n == 1.0 => "1 turn".into(),
        Limit::TurnsPerMinute => format!("{n:.0} turns"),
        Limit::TokensPerDay | Limit::TokensPerMonth if n == 1.0 => "1 token".into(),
        Limit::TokensPerDay | Limit::TokensPerMonth => format!("{} tokens", grouped(n as u64)),
    }
}

/// `1234567` as `1,234,567`.
pub(super) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `ms` as a person reads a wait: `42 s`, `5 min`, `3 h 12 min`, `2 d 3 h`.
fn wait(ms: i64) -> String {
    let s = (ms.max(0) + 999) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", (s + 59) / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// What the person is told of a turn stopped mid-way: whose limit it went
/// past, and when it resets.
fn stopped(over: &Headroom, now_ms: i64) -> String {
    let whose = match over.per {
        Per::Actor => "your",
        Per::Conversation => "this conversation's",
        Per::Bot => "this bot's",
    };
    let allowed = amount(over.limit, over.allowed);
    let until = wait(over.resets_ms - now_ms);
    let period = match over.limit {
        Limit::TokensPerDay | Limit::CostUsdPerDay => "a day",
        _ => "a month",
    };
    let reset_day = crate::protocol::time::date(over.resets_ms.div_euclid(86_400_000));
    format!(
        "This turn was stopped when it went past what was left of {whose} {allowed} \
         {period}; the limit resets on {reset_day} at 00:00 UTC (in {until})."
    )
}

/// What the person is told: whose limit, which, what was used, and when
/// a turn is taken again.
pub(super) fn sentence(hit: &LimitHit, now_ms: i64) -> String {
    let (who, each) = match hit.per {
        Per::Actor => ("You have", "each person"),
        Per::Conversation => ("This conversation has", "a conversation"),
        Per::Bot => ("This bot has", "this bot"),
    };
    let allowed = amount(hit.limit, hit.allowed);
    let used = amount(hit.limit, hit.used);
    let until = wait(hit.resets_ms - now_ms);
    let reset_day = crate::protocol::time::date(hit.resets_ms.div_euclid(86_400_000));
    match hit.limit {
        Limit::TurnsPerMinute => format!(
            "{who} started {used} in the last minute, the most allowed for {each} \
             ({allowed} a minute); try again in {until}."
        ),
        Limit::TokensPerDay | Limit::CostUsdPerDay => format!(
            "{who} used {used} today, the most allowed for {each} ({allowed} a day); \
             the limit resets at 00:00 UTC (in {until})."
        ),
        Limit::TokensPerMonth | Limit::CostUsdPerMonth => format!(
            "{who} used {used} this month, the most allowed for {each} ({allowed} a \
             month); the limit resets on {reset_day} at 00:00 UTC (in {until})."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_person_is_told_which_limit_and_when_it_resets() {
        let hit = LimitHit {
            per: Per::Actor,
            id: "alice".into(),
            limit: Limit::TokensPerDay,
            allowed: 200_000.0,
            used: 201_345.0,
            resets_ms: 86_400_000,
        };
        assert_eq!(
            sentence(&hit, 86_400_000 - 5 * 3_600_000 - 12 * 60_000),
            "You have used 201,345 tokens today, the most allowed for each person \
             (200,000 tokens a day); the limit resets at 00:00 UTC (in 5 h 12 min)."
        );
        let rate = LimitHit {
            per: Per::Conversation,
            limit: Limit::TurnsPerMinute,
            allowed: 6.0,
            used: 6.0,
            resets_ms: 42_000,
            ..hit.clone()
        };
        assert_eq!(
            sentence(&rate, 0),
            "This conversation has started 6 turns in the last minute, the most allowed \
             for a conversation (6 turns a minute); try again in 42 s."
        );
        let month = LimitHit {
            per: Per::Bot,
            limit: Limit::CostUsdPerMonth,
            allowed: 20.0,
            used: 20.134,
            resets_ms: 1_796_083_200_000,
            ..hit
        };
        assert_eq!(
            sentence(&month, 1_796_083_200_000 - 2 * 86_400_000 - 3 * 3_600_000),
            "This bot has used $20.13 this month, the most allowed for this bot ($20.00 \
             a month); the limit resets on 2026-12-01 at 00:00 UTC (in 2 d 3 h)."
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
