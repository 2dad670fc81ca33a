//! `/status`, `/usage` and `/stop`: what the conversation's turn is doing,
//! what the asker has spent, and the running turn stopped. Each says what
//! is true now, from the front door's turns, the kept processes and the
//! store; "nothing runs" is said only when nothing does.

use super::sessions::short;
use super::{Asked, Stopping, age};
use crate::host::budget::{Limit, Per, Periods, Spent, spending};
use crate::host::now_ms;
use crate::host::usage::{UsageBy, UsageQuery};
use crate::interaction::Ask;
use crate::run::Bridge;
use crate::run::budget::{amount, grouped};
use crate::run::turn::record;

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
    if let Some(line) = reach(bridge, asked).await {
        lines.push(line);
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
            .map(|p| {
                crate::run::turn::prepare::conversation_branch(
                    asked.asking.ctx,
                    p,
                    asked.asking.harness,
                )
            })
            .unwrap_or_default();
        lines.push(format!("Project: {project}, branch {branch}."));
    }
    lines.join("\n")
}

/// What `per` `id`'s runs cost since `since_ms`: tokens (input and
/// output, as the budgets count them), cost when known, and turns.
async fn spent(asked: &Asked<'_>, per: Per, id: &str, since_ms: i64) -> Option<Spending> {
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
            .fold(Spending::default(), |sum, t| Spending {
                tokens: sum.tokens + t.input_tokens + t.output_tokens,
                cost: match (sum.cost, t.cost_usd) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                },
                turns: sum.turns + t.runs,
            }),
    )
}

/// What a subject spent in a period, as the ledger sums it.
#[derive(Debug, Clone, Copy, Default)]
struct Spending {
    tokens: u64,
    /// Dollars, when any run reported or was priced.
    cost: Option<f64>,
    turns: u64,
}

/// `/usage`: the asker's own spending today and this month, then what is
/// left of each limit the operator set on them, this conversation and
/// this bot.
pub(super) async fn usage(bridge: &Bridge, asked: &Asked<'_>) -> String {
    let Some(actor) = asked.actor else {
        return "This message names no one, so there is no usage to show.".into();
    };
    let periods = Periods::of(now_ms());
    let unread = || "Your usage cannot be read now (the store did not answer).".to_string();
    let (Some(day), Some(month)) = (
        spent(asked, Per::Actor, actor, periods.day_start_ms).await,
        spent(asked, Per::Actor, actor, periods.month_start_ms).await,
    ) else {
        return unread();
    };
    let said = |s: Spending| {
        let cost = s.cost.map(|c| format!(", ${c:.2}")).unwrap_or_default();
        format!("{} tokens{cost} in {} turn(s)", grouped(s.tokens), s.turns)
    };
    let mut lines = vec![
        format!("Your usage today (UTC): {}.", said(day)),
        format!("This month: {}.", said(month)),
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
        let (day, month) = match per {
            Per::Actor => (day, month),
            _ => match (
                spent(asked, per, id, periods.day_start_ms).await,
                spent(asked, per, id, periods.month_start_ms).await,
            ) {
                (Some(day), Some(month)) => (day, month),
                _ => return unread(),
            },
        };
        let whose = match per {
            Per::Actor => "",
            Per::Conversation => " for this conversation",
            Per::Bot => " for this bot",
        };
        let spent = Spent {
            tokens_today: day.tokens,
            tokens_this_month: month.tokens,
            cost_today: day.cost.unwrap_or(0.0),
            cost_this_month: month.cost.unwrap_or(0.0),
            ..Spent::default()
        };
        for (limit, allowed, used, ends_ms) in spending(limits, &spent, &periods) {
            let Some(allowed) = allowed else { continue };
            let per = match limit {
                Limit::TokensPerDay | Limit::CostUsdPerDay => "today",
                _ => "this month",
            };
            if used >= allowed {
                lines.push(format!(
                    "Reached {per}{whose}: {} of {}; new turns are refused until {} UTC.",
                    amount(limit, used),
                    amount(limit, allowed),
                    crate::protocol::time::date_time(ends_ms.div_euclid(1000))
                ));
                continue;
            }
            lines.push(format!(
                "Left {per}{whose}: {} of {}.",
                amount(limit, allowed - used),
                amount(limit, allowed)
            ));
        }
        if let Some(rate) = limits.turns_per_minute {
            lines.push(format!(
                "At most {} a minute{whose}.",
                amount(Limit::TurnsPerMinute, rate.into())
            ));
        }
    }
    lines.join("\n")
}

/// Where the conversation's agent may connect behind its door: the
/// operator's destinations (with the binding's), those this conversation
/// allowed, what waits for an answer, and what happens to the rest.
async fn reach(bridge: &Bridge, asked: &Asked<'_>) -> Option<String> {
    let cage = bridge.cage_policy(&asked.binding);
    if !(cage.enabled && cage.network == crate::harness::cage::Network::Isolated) {
        return None;
    }
    let listed = |list: &[String]| {
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    };
    let allowed = crate::run::destinations::allowed(asked.host, &asked.scope).await;
    let waiting = bridge.asks.waiting(&asked.conversation);
    let rest = match cage.egress.ask {
        crate::harness::cage::Ask::On => "any other is asked of the person whose turn it is",
        crate::harness::cage::Ask::Off => "any other is refused",
    };
    let mut line = format!(
        "Reaches: its model and the bridge through its door; the operator's destinations: {}{}; allowed here: {}; {rest}.",
        listed(&cage.egress.allow),
        if cage.egress.deny.is_empty() {
            String::new()
        } else {
            format!(" (never {})", cage.egress.deny.join(", "))
        },
        listed(&allowed),
    );
    if !waiting.is_empty() {
        line.push_str(&format!(" Waiting for an answer: {}.", waiting.join(", ")));
    }
    Some(line)
}
