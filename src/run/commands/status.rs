//! `/status`, `/usage` and `/stop`: what the conversation's turn is doing,
//! what the asker has spent, and the running turn stopped. Each says what
//! is true now, from the front door's turns, the kept processes and the
//! store; "nothing runs" is said only when nothing does.

use super::sessions::short;
use super::{Asked, Stopping, age};
use crate::host::budget::{Limit, Limits, Per};
use crate::host::now_ms;
use crate::host::usage::{UsageBy, UsageQuery};
use crate::interaction::Ask;
use crate::run::budget::{amount, grouped};
use crate::run::{Bridge, record};

/// `/stop`.
pub(super) async fn stop(asked: &Asked<'_>) -> String {
    let turns = asked.asking.turns;
    match turns.stop(&asked.conversation).await {
        Stopping::Asked(turn) if turn.started_ms.is_none() => {
            "Stopped your message's turn before it began.".into()
        }
        Stopping::Asked(turn) => {
            let since = turn.started_ms.map(age).unwrap_or_default();
            let waiting = turns
                .in_flight(&asked.conversation)
                .await
                .map_or(0, |t| t.len());
            let next = match waiting {
                0 | 1 => String::new(),
                n => format!(" {} more waiting run after it.", n - 1),
            };
            format!(
                "Stopped the running turn (it ran for {since}). The session is kept: your next \
                 message continues it.{next}"
            )
        }
        Stopping::Nothing => "Nothing is running here, so there is nothing to stop.".into(),
        Stopping::Failed(why) => format!("The running turn could not be stopped now ({why})."),
    }
}

/// `/status`.
pub(super) async fn status(bridge: &Bridge, asked: &Asked<'_>) -> String {
    let mut lines = Vec::new();
    let in_flight = match asked.asking.turns.in_flight(&asked.conversation).await {
        Ok(turns) => turns,
        Err(why) => {
            lines.push(format!("What runs now cannot be read ({why})."));
            Vec::new()
        }
    };
    let running = in_flight.iter().find(|t| t.started_ms.is_some());
    match running {
        Some(turn) => lines.push(format!(
            "Running: a turn of {} for {}{} (run {}).",
            turn.harness,
            turn.started_ms.map(age).unwrap_or_default(),
            turn.actor
                .as_deref()
                .map(|a| format!(", asked by {a}"))
                .unwrap_or_default(),
            turn.run_id
        )),
        None if lines.is_empty() => lines.push("Nothing is running now.".into()),
        None => {}
    }
    let waiting = in_flight.len() - usize::from(running.is_some());
    if waiting > 0 {
        lines.push(format!("Waiting: {waiting} message(s), each its own turn."));
    }
    let chosen = super::switch::chosen(asked).await;
    let model = chosen.model.or(asked.binding.model.clone());
    let mode = chosen
        .permission_mode
        .or(asked.binding.permission_mode.clone());
    lines.push(format!(
        "Harness: {}; model: {}; permission mode: {}.",
        asked.asking.harness,
        model.as_deref().unwrap_or("its default"),
        mode.as_deref().unwrap_or("its default")
    ));
    if let Some(live) = bridge.live_sessions() {
        let kept = live
            .list()
            .into_iter()
            .filter(|s| s.conversation.as_deref() == Some(asked.conversation.as_str()));
        for process in kept {
            lines.push(format!(
                "Process: {} pid {}, {} MiB, {} turn(s), up {}{}.",
                process.harness,
                process.pid,
                process.rss_bytes / (1024 * 1024),
                process.turns,
                age(process.started_ms),
                if process.serving {
                    ", serving a turn"
                } else {
                    ", idle"
                }
            ));
        }
    }
    if let Some(pending) = record::pending(asked.host, &asked.scope).await {
        let what = match &pending.ask {
            Ask::Question { question, .. } => format!("the question \"{question}\""),
            Ask::Approval { summary, .. } => format!("approval of {summary}"),
            Ask::Publish(publish) => format!("approval to publish {}", publish.project),
        };
        lines.push(format!("Waiting for your answer: {what}."));
    }
    lines.push(
        match record::pointer(asked.host, &asked.scope, asked.asking.ctx).await {
            Some(p) => format!("Session: {} ({}).", short(&p.session_id), p.harness),
            None => "Session: none yet (the next message starts one).".into(),
        },
    );
    if let Some(project) = &asked.binding.project {
        let branch = bridge
            .project(project)
            .map(|p| p.branch_for(&asked.conversation, asked.asking.harness))
            .unwrap_or_default();
        lines.push(format!("Project: {project}, branch {branch}."));
    }
    lines.join("\n")
}

/// What `per` `id`'s runs cost since `since_ms`: tokens (input and
/// output, as the budgets count them), cost when known, and turns.
async fn spent(asked: &Asked<'_>, per: Per, id: &str, since_ms: i64) -> Option<Spent> {
    let id = Some(id.to_string());
    let mut query = UsageQuery {
        by: UsageBy::Actor,
        since_ms: Some(since_ms),
        ..Default::default()
    };
    match per {
        Per::Actor => query.actor = id,
        Per::Conversation => query.conversation = id,
        Per::Bot => query.bot = id,
    }
    let totals = asked.host.usage_totals(query).await.ok()?;
    Some(
        totals
            .into_iter()
            .fold((0, None, 0), |(tokens, cost, turns), t| {
                let cost = match (cost, t.cost_usd) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                (
                    tokens + t.input_tokens + t.output_tokens,
                    cost,
                    turns + t.runs,
                )
            }),
    )
}

/// Tokens, dollars (when known) and turns.
type Spent = (u64, Option<f64>, u64);

/// `/usage`: the asker's own spending today and this month, then what is
/// left of each limit the operator set on them, this conversation and
/// this bot.
pub(super) async fn usage(bridge: &Bridge, asked: &Asked<'_>) -> String {
    let Some(actor) = asked.actor else {
        return "This message names no one, so there is no usage to show.".into();
    };
    const DAY: i64 = 86_400_000;
    let today = now_ms().div_euclid(DAY);
    let (month, _) = crate::protocol::time::month_of(today);
    let unread = || "Your usage cannot be read now (the store did not answer).".to_string();
    let (Some(day), Some(this_month)) = (
        spent(asked, Per::Actor, actor, today * DAY).await,
        spent(asked, Per::Actor, actor, month * DAY).await,
    ) else {
        return unread();
    };
    let said = |(tokens, cost, turns): Spent| {
        let cost = cost.map(|c| format!(", ${c:.2}")).unwrap_or_default();
        format!("{} tokens{cost} in {turns} turn(s)", grouped(tokens))
    };
    let mut lines = vec![
        format!("Your usage today (UTC): {}.", said(day)),
        format!("This month: {}.", said(this_month)),
    ];
    let bot = asked
        .asking
        .ctx
        .conversation
        .as_ref()
        .and_then(|c| c.bot_id.as_deref());
    // The ids budgets count against (a message without a conversation
    // counts against none).
    let ids = [Some(actor), asked.asking.ctx.conversation_id(), bot];
    for ((per, limits), id) in bridge.settings.budgets.each().into_iter().zip(ids) {
        let Some(id) = id.filter(|id| !id.is_empty() && limits.any()) else {
            continue;
        };
        let (day, this_month) = match per {
            Per::Actor => (day, this_month),
            _ => match (
                spent(asked, per, id, today * DAY).await,
                spent(asked, per, id, month * DAY).await,
            ) {
                (Some(day), Some(this_month)) => (day, this_month),
                _ => return unread(),
            },
        };
        let whose = match per {
            Per::Actor => "",
            Per::Conversation => " for this conversation",
            Per::Bot => " for this bot",
        };
        lines.extend(left(limits, day, this_month, whose));
    }
    lines.join("\n")
}

/// What is left of each of `limits` after `day`'s and `month`'s spending.
fn left(limits: &Limits, day: Spent, month: Spent, whose: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let left = [
        (
            Limit::TokensPerDay,
            limits.tokens_per_day.map(|l| l as f64),
            day.0 as f64,
        ),
        (
            Limit::TokensPerMonth,
            limits.tokens_per_month.map(|l| l as f64),
            month.0 as f64,
        ),
        (
            Limit::CostUsdPerDay,
            limits.cost_usd_per_day,
            day.1.unwrap_or(0.0),
        ),
        (
            Limit::CostUsdPerMonth,
            limits.cost_usd_per_month,
            month.1.unwrap_or(0.0),
        ),
    ];
    for (limit, allowed, used) in left {
        let Some(allowed) = allowed else { continue };
        let per = match limit {
            Limit::TokensPerDay | Limit::CostUsdPerDay => "today",
            _ => "this month",
        };
        lines.push(format!(
            "Left {per}{whose}: {} of {}.",
            amount(limit, (allowed - used).max(0.0)),
            amount(limit, allowed)
        ));
    }
    if let Some(rate) = limits.turns_per_minute {
        lines.push(format!(
            "At most {} a minute{whose}.",
            amount(Limit::TurnsPerMinute, rate.into())
        ));
    }
    lines
}
