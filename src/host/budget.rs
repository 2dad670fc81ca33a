//! The operator's limits on what one person, one conversation or one bot
//! may spend: turns a minute, tokens and cost a day and a month. A turn
//! is admitted against them before anything of it is written, in one
//! store transaction that also counts it (`run_admissions`), so two
//! instances sharing a store cannot both admit the turn that crosses a
//! limit. What a finished run spent is the ledger's (`host::usage`).
//!
//! Days and months are UTC calendar days and months; tokens are those the
//! model read and wrote (input and output: prompt-cache reads are counted
//! by cost, where a cost is known, not here).

use serde::{Deserialize, Serialize};

/// A limit or price that cannot hold, or a `--budgets` file that cannot
/// be read: the sentence names the file, line or key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SpendingError(pub String);

/// The limits for each person, conversation or bot (every one unset:
/// no limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Turns started in any 60 seconds.
    pub turns_per_minute: Option<u32>,
    /// Input and output tokens of the runs that ended this UTC day.
    pub tokens_per_day: Option<u64>,
    /// Input and output tokens of the runs that ended this UTC month.
    pub tokens_per_month: Option<u64>,
    /// US dollars the harnesses reported (or the price table gave) for
    /// the runs that ended this UTC day.
    pub cost_usd_per_day: Option<f64>,
    /// As `cost_usd_per_day`, for this UTC month.
    pub cost_usd_per_month: Option<f64>,
}

impl Limits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        *self != Limits::default()
    }

    /// Whether a spending limit (tokens or cost) is set, the ones the
    /// ledger is summed for.
    pub fn spends(&self) -> bool {
        self.tokens_per_day.is_some()
            || self.tokens_per_month.is_some()
            || self.cost_usd_per_day.is_some()
            || self.cost_usd_per_month.is_some()
    }

    /// A limit that cannot hold (negative or not a number) by its key.
    pub fn check(&self) -> Result<(), SpendingError> {
        for (key, cost) in [
            ("cost_usd_per_day", self.cost_usd_per_day),
            ("cost_usd_per_month", self.cost_usd_per_month),
        ] {
            if cost.is_some_and(|c| !c.is_finite() || c < 0.0) {
                return Err(SpendingError(format!(
                    "{key} must be a number of dollars, 0 or more"
                )));
            }
        }
        Ok(())
    }
}

/// Where the operator says what each may spend (`budgets:` of
/// `bridge.yaml`, the relay's `--budgets` file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budgets {
    /// For each person (the context's actor), across conversations.
    pub actor: Limits,
    /// For each conversation, whoever speaks in it.
    pub conversation: Limits,
    /// For each bot, across its conversations.
    pub bot: Limits,
    /// What a turn that crosses a spending limit while it runs does.
    pub mid_turn: MidTurn,
}

/// What a turn that crosses a spending limit while it runs does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MidTurn {
    /// It finishes; the next turn is refused (the person gets the answer
    /// they were waiting for).
    #[default]
    Finish,
    /// It is stopped as soon as the harness reports spending past what
    /// was left (where the harness reports usage while it runs: Claude
    /// Code; a cost limit needs the harness's cost or a price), and fails
    /// `limit_reached`.
    Stop,
}

impl Budgets {
    /// Whether any limit is set: with none, no turn is counted.
    pub fn any(&self) -> bool {
        self.actor.any() || self.conversation.any() || self.bot.any()
    }

    /// A limit that cannot hold, named by its place (`budgets.actor...`).
    pub fn check(&self) -> Result<(), SpendingError> {
        for (per, limits) in self.each() {
            limits
                .check()
                .map_err(|e| SpendingError(format!("budgets.{}.{e}", per.key())))?;
        }
        Ok(())
    }

    /// Each kind of subject with its limits.
    pub fn each(&self) -> [(Per, &Limits); 3] {
        [
            (Per::Actor, &self.actor),
            (Per::Conversation, &self.conversation),
            (Per::Bot, &self.bot),
        ]
    }

    /// The subjects a turn by `actor` in `conversation` with `bot` is
    /// counted against: those with limits whose id the context names.
    pub fn subjects(
        &self,
        actor: Option<&str>,
        conversation: Option<&str>,
        bot: Option<&str>,
    ) -> Vec<Subject> {
        self.each()
            .into_iter()
            .zip([actor, conversation, bot])
            .filter_map(|((per, limits), id)| {
                let id = id.filter(|id| !id.is_empty())?;
                limits.any().then(|| Subject {
                    per,
                    id: id.to_string(),
                    limits: limits.clone(),
                })
            })
            .collect()
    }
}

/// The operator's limits with the prices the ledger costs runs by: a
/// file of their own for the relay (`--budgets`), keys of `bridge.yaml`
/// for the service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Spending {
    /// The limits.
    pub budgets: Budgets,
    /// The price table.
    pub prices: Prices,
}

impl Spending {
    /// Read and check `file`; the error names the file, and the line or
    /// the key that cannot hold.
    pub fn load(file: &std::path::Path) -> Result<Spending, SpendingError> {
        let at = |e: &dyn std::fmt::Display| SpendingError(format!("{}: {e}", file.display()));
        let text = std::fs::read_to_string(file)
            .map_err(|e| SpendingError(format!("cannot read {}: {e}", file.display())))?;
        let spending: Spending = serde_yaml::from_str(&text).map_err(|e| at(&e))?;
        spending
            .budgets
            .check()
            .and_then(|()| spending.prices.check())
            .map_err(|e| at(&e))?;
        Ok(spending)
    }
}

/// What a model's tokens cost, in US dollars per million, for a harness
/// that reports no cost of its own (`prices:` of `bridge.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Price {
    /// Per million tokens sent to the model.
    pub input: f64,
    /// Per million tokens the model wrote.
    pub output: f64,
    /// Per million tokens read from the prompt cache.
    pub cache_read: f64,
    /// Per million tokens written to the prompt cache.
    pub cache_write: f64,
}

impl Price {
    /// What a ledger row's tokens come to.
    pub fn of_row(&self, row: &super::usage::UsageRecord) -> f64 {
        [
            (row.input_tokens, self.input),
            (row.output_tokens, self.output),
            (row.cache_read_tokens, self.cache_read),
            (row.cache_write_tokens, self.cache_write),
        ]
        .iter()
        .map(|(tokens, per_million)| *tokens as f64 * per_million / 1e6)
        .sum()
    }

    /// What a harness's reported counts come to.
    pub fn cost_of(&self, usage: &crate::protocol::TokenUsage) -> f64 {
        let mut row = super::usage::UsageRecord::default();
        row.count(usage);
        self.of_row(&row)
    }
}

/// The operator's price table: model (as the binding names it) → price.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Prices(pub std::collections::BTreeMap<String, Price>);

impl Prices {
    /// Give `row` the cost its model's tokens come to, where the harness
    /// reported none and the table has its model: a reported cost is
    /// never replaced.
    pub fn price(&self, row: &mut super::usage::UsageRecord) {
        if row.cost_usd.is_some() {
            return;
        }
        let Some(price) = row.model.as_ref().and_then(|m| self.0.get(m)) else {
            return;
        };
        row.cost_usd = Some(price.of_row(row));
    }

    /// A price that cannot hold (negative or not a number), by model.
    pub fn check(&self) -> Result<(), SpendingError> {
        for (model, price) in &self.0 {
            let each = [
                price.input,
                price.output,
                price.cache_read,
                price.cache_write,
            ];
            if each.iter().any(|p| !p.is_finite() || *p < 0.0) {
                return Err(SpendingError(format!(
                    "prices.{model}: each price must be US dollars per million tokens, 0 or more"
                )));
            }
        }
        Ok(())
    }
}

/// Whose spending a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// One person.
    Actor,
    /// One conversation.
    Conversation,
    /// One bot.
    Bot,
}

impl Per {
    /// Its key in `budgets:`.
    pub fn key(self) -> &'static str {
        match self {
            Per::Actor => "actor",
            Per::Conversation => "conversation",
            Per::Bot => "bot",
        }
    }

    /// The ledger's and the admissions' column of its id.
    pub fn column(self) -> &'static str {
        match self {
            Per::Actor => "actor_id",
            Per::Conversation => "conversation_id",
            Per::Bot => "bot_id",
        }
    }
}

/// One subject a turn is counted against, with its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Subject {
    /// What kind.
    pub per: Per,
    /// Its id.
    pub id: String,
    /// Its limits.
    pub limits: Limits,
}

impl Subject {
    /// The name a store locks the subject by while it admits a turn.
    pub fn lock_name(&self) -> String {
        format!("budget:{}:{}", self.per.key(), self.id)
    }
}

/// A turn to admit: counted in `run_admissions` when it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// The run.
    pub run_id: String,
    /// Epoch milliseconds.
    pub now_ms: i64,
    /// Whose limits it is counted against (ids kept in its row).
    pub subjects: Vec<Subject>,
}

impl Admission {
    /// The row's id of `per`, when the turn is counted against it.
    pub fn id_of(&self, per: Per) -> Option<&str> {
        self.subjects
            .iter()
            .find(|s| s.per == per)
            .map(|s| s.id.as_str())
    }

    /// Start of the minute a turn rate counts back over.
    pub fn minute_ago_ms(&self) -> i64 {
        self.now_ms - 60_000
    }

    /// Before this, admissions are forgotten: a minute more than any rate
    /// reads, so an instance whose clock runs ahead of another's never
    /// forgets what the other still counts.
    pub fn forget_before_ms(&self) -> i64 {
        self.now_ms - 120_000
    }

    /// The UTC day and month of `now_ms`.
    pub fn periods(&self) -> Periods {
        Periods::of(self.now_ms)
    }

    /// Whether any subject has a turn rate (older admissions are read).
    pub fn rated(&self) -> bool {
        self.subjects
            .iter()
            .any(|s| s.limits.turns_per_minute.is_some())
    }
}

/// The bounds of the periods a budget counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    /// Epoch milliseconds.
    pub day_start_ms: i64,
    /// Epoch milliseconds.
    pub day_end_ms: i64,
    /// Epoch milliseconds.
    pub month_start_ms: i64,
    /// Epoch milliseconds.
    pub month_end_ms: i64,
}

impl Periods {
    /// Start of the UTC day and of the UTC month of `now_ms`, and the
    /// ends of both.
    pub fn of(now_ms: i64) -> Periods {
        const DAY: i64 = 86_400_000;
        let today = now_ms.div_euclid(DAY);
        let (first, next) = crate::protocol::time::month_of(today);
        Periods {
            day_start_ms: today * DAY,
            day_end_ms: (today + 1) * DAY,
            month_start_ms: first * DAY,
            month_end_ms: next * DAY,
        }
    }
}

/// What a subject has spent, as a store counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Turns admitted in the last minute.
    pub turns_last_minute: u64,
    /// The earliest of them (epoch milliseconds), when any.
    pub first_turn_ms: Option<i64>,
    /// Input and output tokens today.
    pub tokens_today: u64,
    /// Input and output tokens this month.
    pub tokens_this_month: u64,
    /// Cost today.
    pub cost_today: f64,
    /// Cost this month.
    pub cost_this_month: f64,
}

/// Which limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `turns_per_minute`.
    TurnsPerMinute,
    /// `tokens_per_day`.
    TokensPerDay,
    /// `tokens_per_month`.
    TokensPerMonth,
    /// `cost_usd_per_day`.
    CostUsdPerDay,
    /// `cost_usd_per_month`.
    CostUsdPerMonth,
}

/// What an admitted turn may spend under one limit before it crosses it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headroom {
    /// Whose limit.
    pub per: Per,
    /// Their id.
    pub id: String,
    /// Which limit (a spending one).
    pub limit: Limit,
    /// What it allows.
    pub allowed: f64,
    /// What is left of it (tokens or dollars).
    pub left: f64,
    /// When it resets (epoch milliseconds).
    pub resets_ms: i64,
}

/// A store's answer to an admission: the limit that refuses the turn, or
/// what the admitted turn may still spend under each spending limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// The first limit reached: the turn is not started (nor counted).
    pub refused: Option<LimitHit>,
    /// Each spending limit's headroom, when admitted.
    pub left: Vec<Headroom>,
}

impl Verdict {
    /// Judge `subjects` in order by what each `spent`: the first limit
    /// reached refuses; else every spending limit's headroom.
    pub fn of(admission: &Admission, spent: &[(&Subject, Spent)]) -> Verdict {
        let mut left = Vec::new();
        for (subject, spent) in spent {
            if let Some(hit) = first_hit(admission, subject, spent) {
                return Verdict {
                    refused: Some(hit),
                    left: Vec::new(),
                };
            }
            left.extend(headroom(admission, subject, spent));
        }
        Verdict {
            refused: None,
            left,
        }
    }
}

/// What `subject` may still spend under each of its spending limits.
fn headroom(admission: &Admission, subject: &Subject, spent: &Spent) -> Vec<Headroom> {
    spending(&subject.limits, spent, &admission.periods())
        .into_iter()
        .filter_map(|(limit, allowed, used, resets_ms)| {
            let allowed = allowed?;
            Some(Headroom {
                per: subject.per,
                id: subject.id.clone(),
                limit,
                allowed,
                left: (allowed - used).max(0.0),
                resets_ms,
            })
        })
        .collect()
}

/// Each spending limit of `limits`: what it allows (`None`: unset), what
/// `spent` holds against it, and when it resets (what admission checks,
/// and `/usage` says is left).
pub fn spending(
    limits: &Limits,
    spent: &Spent,
    periods: &Periods,
) -> [(Limit, Option<f64>, f64, i64); 4] {
    [
        (
            Limit::TokensPerDay,
            limits.tokens_per_day.map(|n| n as f64),
            spent.tokens_today as f64,
            periods.day_end_ms,
        ),
        (
            Limit::TokensPerMonth,
            limits.tokens_per_month.map(|n| n as f64),
            spent.tokens_this_month as f64,
            periods.month_end_ms,
        ),
        (
            Limit::CostUsdPerDay,
            limits.cost_usd_per_day,
            spent.cost_today,
            periods.day_end_ms,
        ),
        (
            Limit::CostUsdPerMonth,
            limits.cost_usd_per_month,
            spent.cost_this_month,
            periods.month_end_ms,
        ),
    ]
}

/// A limit a turn would cross: the turn is not started.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitHit {
    /// Whose limit.
    pub per: Per,
    /// Their id.
    pub id: String,
    /// Which limit.
    pub limit: Limit,
    /// What it allows.
    pub allowed: f64,
    /// What was spent (turns, tokens or dollars).
    pub used: f64,
    /// When it allows a turn again (epoch milliseconds).
    pub resets_ms: i64,
}

/// The first limit of `subject` that `spent` reaches, at `admission`'s
/// time: a turn rate full, or a day's or month's spending at or past
/// its limit.
pub fn first_hit(admission: &Admission, subject: &Subject, spent: &Spent) -> Option<LimitHit> {
    let limits = &subject.limits;
    let periods = admission.periods();
    let hit = |limit, allowed: f64, used: f64, resets_ms| LimitHit {
        per: subject.per,
        id: subject.id.clone(),
        limit,
        allowed,
        used,
        resets_ms,
    };
    if let Some(rate) = limits.turns_per_minute
        && spent.turns_last_minute >= u64::from(rate)
    {
        let resets = spent.first_turn_ms.unwrap_or(admission.now_ms) + 60_000;
        return Some(hit(
            Limit::TurnsPerMinute,
            f64::from(rate),
            spent.turns_last_minute as f64,
            resets,
        ));
    }
    spending(limits, spent, &periods)
        .into_iter()
        .find_map(|(limit, allowed, used, resets)| {
            let allowed = allowed?;
            (used >= allowed).then(|| hit(limit, allowed, used, resets))
        })
}

/// One subject's spending this day and this month, from the running
/// totals the ledger keeps (`$1` its kind, `$2` its id, `$3` the day's
/// start, `$4` the month's): at most two rows, however many runs.
pub const SPENT_SQL: &str = "SELECT period, tokens, cost_usd FROM spend_totals \
     WHERE per = $1 AND id = $2 AND ((period = 'day' AND start_ms = $3) \
     OR (period = 'month' AND start_ms = $4))";

/// Add one run's spending to a running total (`$1` kind, `$2` id, `$3`
/// `day` or `month`, `$4` its start, `$5` tokens, `$6` dollars).
pub const ADD_SPENT_SQL: &str = "INSERT INTO spend_totals (per, id, period, start_ms, tokens, \
     cost_usd) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (per, id, period, start_ms) DO UPDATE \
     SET tokens = spend_totals.tokens + excluded.tokens, \
     cost_usd = spend_totals.cost_usd + excluded.cost_usd";

/// One running total a recorded run adds to.
#[derive(Debug, Clone, PartialEq)]
pub struct SpentAdd {
    /// `actor`, `conversation` or `bot`.
    pub per: &'static str,
    /// Its id.
    pub id: String,
    /// `day` or `month`.
    pub period: &'static str,
    /// The period's start (epoch milliseconds).
    pub start_ms: i64,
    /// Input and output tokens.
    pub tokens: i64,
    /// Dollars (0 when unknown).
    pub cost_usd: f64,
}

/// The running totals `row` adds to: its actor's, conversation's and
/// bot's (those it names), for the day and the month it ended in.
pub fn spent_adds(row: &super::usage::UsageRecord) -> Vec<SpentAdd> {
    const DAY: i64 = 86_400_000;
    let day = row.ended_ms.div_euclid(DAY);
    let (month, _) = crate::protocol::time::month_of(day);
    let tokens =
        i64::try_from(row.input_tokens.saturating_add(row.output_tokens)).unwrap_or(i64::MAX);
    let cost_usd = row.cost_usd.unwrap_or(0.0);
    [
        (Per::Actor, &row.actor_id),
        (Per::Conversation, &row.conversation_id),
        (Per::Bot, &row.bot_id),
    ]
    .into_iter()
    .filter_map(|(per, id)| Some((per, id.as_ref().filter(|id| !id.is_empty())?)))
    .flat_map(|(per, id)| {
        [("day", day * DAY), ("month", month * DAY)].map(|(period, start_ms)| SpentAdd {
            per: per.key(),
            id: id.clone(),
            period,
            start_ms,
            tokens,
            cost_usd,
        })
    })
    .collect()
}

/// Read one [`SPENT_SQL`] row into `spent`.
pub fn take_spent(spent: &mut Spent, period: &str, tokens: i64, cost_usd: f64) {
    let tokens = tokens.max(0) as u64;
    match period {
        "day" => (spent.tokens_today, spent.cost_today) = (tokens, cost_usd),
        _ => (spent.tokens_this_month, spent.cost_this_month) = (tokens, cost_usd),
    }
}

/// The admissions of one subject in the last minute (`$1` its id, `$2`
/// a minute ago): how many, and the earliest.
pub fn turns_sql(per: Per) -> String {
    format!(
        "SELECT COUNT(*), MIN(at_ms) FROM run_admissions WHERE {} = $1 AND at_ms > $2",
        per.column()
    )
}

/// The admission's row, once per run (`$1` run, `$2` actor, `$3` conversation, `$4`
/// bot, `$5` time).
pub const ADMIT_SQL: &str = "INSERT INTO run_admissions (run_id, actor_id, conversation_id, \
     bot_id, at_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id) DO NOTHING";

/// Admissions no rate counts any more (`$1`:
/// [`Admission::forget_before_ms`]): forgotten so the table holds two
/// minutes of turns.
pub const FORGET_SQL: &str = "DELETE FROM run_admissions WHERE at_ms <= $1";

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(now_ms: i64, limits: Limits) -> (Admission, Subject) {
        let subject = Subject {
            per: Per::Actor,
            id: "alice".into(),
            limits,
        };
        let admission = Admission {
            run_id: "r".into(),
            now_ms,
            subjects: vec![subject.clone()],
        };
        (admission, subject)
    }

    #[test]
    fn a_full_minute_is_hit_until_its_first_turn_is_a_minute_old() {
        let (admission, subject) = admission(
            100_000,
            Limits {
                turns_per_minute: Some(2),
                ..Limits::default()
            },
        );
        let spent = Spent {
            turns_last_minute: 2,
            first_turn_ms: Some(70_000),
            ..Spent::default()
        };
        let hit = first_hit(&admission, &subject, &spent).expect("the rate is full");
        assert_eq!(
            (hit.limit, hit.resets_ms, hit.used),
            (Limit::TurnsPerMinute, 130_000, 2.0)
        );
        let one = Spent {
            turns_last_minute: 1,
            ..spent
        };
        assert_eq!(first_hit(&admission, &subject, &one), None);
    }

    #[test]
    fn spending_is_hit_at_its_limit_and_resets_at_the_periods_end() {
        // 2026-11-29 10:36:31 UTC.
        let now = 1_795_948_591_000;
        let (admission, subject) = admission(
            now,
            Limits {
                tokens_per_day: Some(1000),
                cost_usd_per_month: Some(5.0),
                ..Limits::default()
            },
        );
        let day = Spent {
            tokens_today: 1000,
            tokens_this_month: 1000,
            ..Spent::default()
        };
        let hit = first_hit(&admission, &subject, &day).expect("the day's tokens");
        assert_eq!(hit.limit, Limit::TokensPerDay);
        assert_eq!(
            crate::protocol::time::date_time(hit.resets_ms / 1000),
            "2026-11-30 00:00:00"
        );
        let month = Spent {
            cost_this_month: 5.01,
            ..Spent::default()
        };
        let hit = first_hit(&admission, &subject, &month).expect("the month's cost");
        assert_eq!(hit.limit, Limit::CostUsdPerMonth);
        assert_eq!(
            crate::protocol::time::date_time(hit.resets_ms / 1000),
            "2026-12-01 00:00:00"
        );
        assert_eq!(first_hit(&admission, &subject, &Spent::default()), None);
    }

    #[test]
    fn a_price_is_used_only_where_no_cost_was_reported() {
        let prices: Prices =
            serde_yaml::from_str("gpt-5: {input: 1.25, output: 10, cache_read: 0.125}\n").unwrap();
        let mut row = super::super::usage::UsageRecord {
            model: Some("gpt-5".into()),
            input_tokens: 2_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 1_000_000,
            ..Default::default()
        };
        prices.price(&mut row);
        assert_eq!(row.cost_usd, Some(2.5 + 1.0 + 0.125));
        row.cost_usd = Some(0.5);
        prices.price(&mut row);
        assert_eq!(row.cost_usd, Some(0.5), "the harness's own cost stays");
        let mut other = super::super::usage::UsageRecord {
            model: Some("o3".into()),
            input_tokens: 10,
            ..Default::default()
        };
        prices.price(&mut other);
        assert_eq!(other.cost_usd, None, "no price, no guess");
        let negative: Prices = serde_yaml::from_str("m: {input: -1}\n").unwrap();
        assert!(negative.check().is_err());
    }

    #[test]
    fn only_subjects_with_limits_and_ids_are_counted() {
        let budgets = Budgets {
            actor: Limits {
                turns_per_minute: Some(3),
                ..Limits::default()
            },
            bot: Limits {
                tokens_per_day: Some(10),
                ..Limits::default()
            },
            ..Budgets::default()
        };
        let subjects = budgets.subjects(Some("alice"), Some("c1"), None);
        assert_eq!(subjects.len(), 1, "{subjects:?}");
        assert_eq!(subjects[0].per, Per::Actor);
        assert!(budgets.subjects(Some(""), Some("c1"), None).is_empty());
        let negative = Budgets {
            conversation: Limits {
                cost_usd_per_day: Some(-1.0),
                ..Limits::default()
            },
            ..Budgets::default()
        };
        assert_eq!(
            negative.check().unwrap_err().0,
            "budgets.conversation.cost_usd_per_day must be a number of dollars, 0 or more"
        );
    }
}
