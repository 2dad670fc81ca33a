//! What each run cost, kept per run with who asked: the ledger an
//! operator reads (`host usage`), and what budgets will be checked
//! against. One row per run, written by the bridge at the run's end; a
//! harness has no call that reaches it.
//!
//! Tokens are the harness's own counts; cost is the harness's where it
//! reports one (Claude Code's `total_cost_usd`), else unknown (`None`),
//! never guessed.

use serde::{Deserialize, Serialize};

use crate::protocol::TokenUsage;

/// One run's usage, as the bridge records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// The run.
    pub run_id: String,
    /// The bot the conversation is with, when the host said.
    pub bot_id: Option<String>,
    /// The conversation, when there is one.
    pub conversation_id: Option<String>,
    /// Who asked, when the host said.
    pub actor_id: Option<String>,
    /// The harness that ran the turn.
    pub harness: String,
    /// The model the binding named (`None`: the harness's default).
    pub model: Option<String>,
    /// Epoch milliseconds.
    pub started_ms: i64,
    /// Epoch milliseconds.
    pub ended_ms: i64,
    /// `completed`, `failed`, or `refused` (a budget's limit reached:
    /// never started).
    pub outcome: String,
    /// The failure code, when it failed.
    pub code: Option<String>,
    /// Tokens sent to the model (without those read from its cache).
    pub input_tokens: u64,
    /// Tokens the model wrote.
    pub output_tokens: u64,
    /// Tokens read from the model's prompt cache.
    pub cache_read_tokens: u64,
    /// Tokens written to the model's prompt cache.
    pub cache_write_tokens: u64,
    /// What the harness says the run cost, in US dollars.
    pub cost_usd: Option<f64>,
}

impl UsageRecord {
    /// Take the counts of a harness's reported usage: the SDK's
    /// prompt/completion tokens, and the cache and cost fields the
    /// harnesses add under their own names.
    pub fn count(&mut self, usage: &TokenUsage) {
        let extra = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| usage.extra.get(*name).and_then(serde_json::Value::as_u64))
                .unwrap_or(0)
        };
        self.input_tokens = usage.prompt_tokens.unwrap_or(0);
        self.output_tokens = usage.completion_tokens.unwrap_or(0);
        self.cache_read_tokens = extra(&["cache_read_input_tokens", "cached_input_tokens"]);
        self.cache_write_tokens = extra(&["cache_creation_input_tokens"]);
        self.cost_usd = usage
            .extra
            .get("total_cost_usd")
            .and_then(serde_json::Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0);
    }
}

/// What the ledger's rows are summed by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    /// Who asked.
    #[default]
    Actor,
    /// The conversation.
    Conversation,
    /// The harness.
    Harness,
    /// The model the binding named.
    Model,
    /// The day (UTC) the run ended, keyed `YYYY-MM-DD`.
    Day,
}

impl UsageBy {
    /// Every grouping, by name.
    pub const ALL: [(&'static str, UsageBy); 5] = [
        ("actor", UsageBy::Actor),
        ("conversation", UsageBy::Conversation),
        ("harness", UsageBy::Harness),
        ("model", UsageBy::Model),
        ("day", UsageBy::Day),
    ];

    /// The grouping named `name`.
    pub fn named(name: &str) -> Option<UsageBy> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, by)| *by)
    }

    /// The SQL expression of the group's key over the ledger's columns
    /// (the same in SQLite and PostgreSQL).
    pub fn key_sql(self) -> &'static str {
        match self {
            UsageBy::Actor => "COALESCE(actor_id, '')",
            UsageBy::Conversation => "COALESCE(conversation_id, '')",
            UsageBy::Harness => "harness",
            UsageBy::Model => "COALESCE(model, '')",
            // Days since the epoch; said as a date when shown.
            UsageBy::Day => "CAST(ended_ms / 86400000 AS TEXT)",
        }
    }
}

/// Which rows to sum, and by what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageQuery {
    /// What the rows are summed by.
    pub by: UsageBy,
    /// Only runs that ended at or after this (epoch milliseconds).
    pub since_ms: Option<i64>,
    /// Only this actor's runs.
    pub actor: Option<String>,
    /// Only this conversation's runs.
    pub conversation: Option<String>,
    /// Only this bot's runs (what `/usage` reads for a bot's budget).
    pub bot: Option<String>,
    /// Only this harness's runs.
    pub harness: Option<String>,
}

/// How many counts a group's sums begin with ([`UsageTotal::from_sums`]);
/// its cost and last end follow them.
pub const TOTAL_COUNTS: usize = 7;

/// The sum of a group's rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotal {
    /// The group (an actor id, a conversation id, a harness, a model, or a
    /// day as `YYYY-MM-DD`); empty where the runs did not say.
    pub key: String,
    /// Runs (turns that started).
    pub runs: u64,
    /// Of which failed.
    pub failed: u64,
    /// Turns a budget refused (not among the runs).
    pub refused: u64,
    /// Summed as in [`UsageRecord`].
    pub input_tokens: u64,
    /// Summed as in [`UsageRecord`].
    pub output_tokens: u64,
    /// Summed as in [`UsageRecord`].
    pub cache_read_tokens: u64,
    /// Summed as in [`UsageRecord`].
    pub cache_write_tokens: u64,
    /// The cost the harnesses reported; `None` when none of the runs did.
    pub cost_usd: Option<f64>,
    /// When the group's last run ended (epoch milliseconds).
    pub last_ms: i64,
}

impl UsageTotal {
    /// A group's sums as [`totals_sql`] selects them: its key, then the
    /// runs, failed runs, the four token counts and the refused turns
    /// (negative read as 0: [`TOTAL_COUNTS`] of them), the cost and the
    /// last end. A day's key is said as its date.
    pub fn from_sums(
        by: UsageBy,
        key: String,
        counts: [Option<i64>; TOTAL_COUNTS],
        cost_usd: Option<f64>,
        last_ms: Option<i64>,
    ) -> UsageTotal {
        let [
            runs,
            failed,
            input,
            output,
            cache_read,
            cache_write,
            refused,
        ] = counts.map(|n| n.unwrap_or(0).max(0) as u64);
        UsageTotal {
            key: match by {
                UsageBy::Day => key.parse().map_or(key, crate::protocol::time::date),
                _ => key,
            },
            runs,
            failed,
            refused,
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            cost_usd,
            last_ms: last_ms.unwrap_or(0),
        }
    }
}

/// Which runs to list, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunListQuery {
    /// Only this actor's runs.
    pub actor: Option<String>,
    /// Only this conversation's runs.
    pub conversation: Option<String>,
    /// Only this harness's runs.
    pub harness: Option<String>,
    /// Only this run (the run view's row).
    pub run_id: Option<String>,
    /// Only runs before this one in the list (its end, then its id): the
    /// last row of the page before.
    pub before: Option<(i64, String)>,
    /// How many (at most).
    pub limit: u32,
}

/// The columns a listed run is read from, in [`UsageRecord`]'s order.
pub const RUN_COLUMNS: &str = "run_id, bot_id, conversation_id, actor_id, harness, model, \
     started_ms, ended_ms, outcome, code, input_tokens, output_tokens, cache_read_tokens, \
     cache_write_tokens, cost_usd";

/// The ledger's list query for `query`, as [`totals_sql`] numbers its
/// placeholders (actor, conversation, harness, run, the page's end and
/// id, those set; the limit last).
pub fn list_sql(query: &RunListQuery) -> String {
    let mut filters = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    for (set, column) in [
        (query.actor.is_some(), "actor_id"),
        (query.conversation.is_some(), "conversation_id"),
        (query.harness.is_some(), "harness"),
        (query.run_id.is_some(), "run_id"),
    ] {
        if set {
            filters.push(format!("{column} = {}", next()));
        }
    }
    if query.before.is_some() {
        let (end, id) = (next(), next());
        filters.push(format!(
            "(ended_ms < {end} OR (ended_ms = {end} AND run_id < {id}))"
        ));
    }
    let filter = if filters.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", filters.join(" AND "))
    };
    format!(
        "SELECT {RUN_COLUMNS} FROM run_usage {filter} ORDER BY ended_ms DESC, run_id DESC LIMIT {}",
        next()
    )
}

/// The ledger's sum query for `query`, the same for SQLite and
/// PostgreSQL: `$1`-style placeholders for its filters in order (since,
/// actor, conversation, bot, harness: those set), and every sum cast to a whole number
/// (PostgreSQL's sum of integers is a decimal).
pub fn totals_sql(query: &UsageQuery) -> String {
    let mut filters = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    if query.since_ms.is_some() {
        filters.push(format!("ended_ms >= {}", next()));
    }
    if query.actor.is_some() {
        filters.push(format!("actor_id = {}", next()));
    }
    if query.conversation.is_some() {
        filters.push(format!("conversation_id = {}", next()));
    }
    if query.bot.is_some() {
        filters.push(format!("bot_id = {}", next()));
    }
    if query.harness.is_some() {
        filters.push(format!("harness = {}", next()));
    }
    let filter = if filters.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", filters.join(" AND "))
    };
    let key = query.by.key_sql();
    format!(
        "SELECT {key} AS k, \
         CAST(SUM(CASE WHEN outcome = 'refused' THEN 0 ELSE 1 END) AS BIGINT), \
         CAST(SUM(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END) AS BIGINT), \
         CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), \
         CAST(SUM(cache_read_tokens) AS BIGINT), CAST(SUM(cache_write_tokens) AS BIGINT), \
         CAST(SUM(CASE WHEN outcome = 'refused' THEN 1 ELSE 0 END) AS BIGINT), \
         SUM(cost_usd), MAX(ended_ms) \
         FROM run_usage {filter} GROUP BY k ORDER BY MAX(ended_ms) DESC"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_counts_of_every_kind_are_taken() {
        let claude: TokenUsage = serde_json::from_value(serde_json::json!({
            "prompt_tokens": 10, "completion_tokens": 5, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 7, "total_cost_usd": 0.0125
        }))
        .unwrap();
        let mut record = UsageRecord::default();
        record.count(&claude);
        assert_eq!(
            (record.input_tokens, record.output_tokens),
            (10, 5),
            "{record:?}"
        );
        assert_eq!(
            (record.cache_read_tokens, record.cache_write_tokens),
            (100, 7)
        );
        assert_eq!(record.cost_usd, Some(0.0125));
        let codex: TokenUsage = serde_json::from_value(serde_json::json!({
            "prompt_tokens": 3, "completion_tokens": 2, "cached_input_tokens": 1
        }))
        .unwrap();
        record.count(&codex);
        assert_eq!(record.cache_read_tokens, 1);
        assert_eq!(record.cost_usd, None, "no cost is guessed");
    }

    #[test]
    fn a_page_of_runs_starts_after_the_last_of_the_page_before() {
        let sql = list_sql(&RunListQuery {
            harness: Some("codex".into()),
            before: Some((5, "r".into())),
            limit: 10,
            ..RunListQuery::default()
        });
        assert!(
            sql.contains(
                "WHERE harness = $1 AND (ended_ms < $2 OR (ended_ms = $2 AND run_id < $3))"
            ) && sql.ends_with("LIMIT $4"),
            "{sql}"
        );
    }

    #[test]
    fn filters_are_numbered_in_order() {
        let sql = totals_sql(&UsageQuery {
            by: UsageBy::Day,
            since_ms: Some(1),
            actor: None,
            conversation: Some("c".into()),
            bot: Some("b".into()),
            harness: Some("codex".into()),
        });
        assert!(
            sql.contains(
                "WHERE ended_ms >= $1 AND conversation_id = $2 AND bot_id = $3 AND harness = $4"
            ),
            "{sql}"
        );
    }
}
