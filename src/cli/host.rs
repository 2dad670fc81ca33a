//! `harness-bridge host ...`: read the host store as a person would: the
//! embedded one in the data folder, another folder, or a PostgreSQL store.
//! `harness-bridge migrate`: prepare a PostgreSQL store ahead of time.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::error::{CliError, Outcome};
use super::exit;
use crate::harness::runner_id;
use crate::host::owners::inspect_owner;
use crate::host::store::{Store, StoreAt};
use crate::host::usage::{UsageBy, UsageQuery, UsageTotal};
use crate::protocol::{AgentAPIError, StateScope};

/// Which store a command reads: `--store`, the `store` of a `--config`
/// file, or the data folder's.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The store: a folder (an embedded store) or a PostgreSQL URL without
    /// a password (one with a password belongs in bridge.yaml: pass
    /// --config). Default: the data folder's store.
    #[arg(long, global = true, value_name = "DIR|URL", conflicts_with = "config")]
    store: Option<String>,
    /// A bridge.yaml whose `store` to use, as `serve --config` does.
    #[arg(long, global = true, value_name = "FILE", value_parser = super::absolute_path)]
    config: Option<PathBuf>,
}

impl StoreArgs {
    /// Where the store is, or why it cannot be told.
    fn at(&self, data_dir: &Path) -> Result<StoreAt, String> {
        if let Some(store) = &self.store {
            if crate::host::postgres::is_url(store) && crate::host::postgres::has_password(store) {
                return Err(
                    "--store holds a password, which every local user could read in the process \
                     list; put the URL in bridge.yaml (`store:`) and pass --config"
                        .into(),
                );
            }
            let here = std::env::current_dir()
                .map_err(|e| format!("cannot tell the current folder: {e}"))?;
            return Ok(StoreAt::parse(store, &here));
        }
        if let Some(file) = &self.config {
            let config = crate::serve::ServeConfig::load(Some(file)).map_err(|e| e.to_string())?;
            return Ok(config.store_at(data_dir));
        }
        Ok(StoreAt::Folder(data_dir.to_path_buf()))
    }
}

/// `host`'s arguments: the store, and what to show of it.
#[derive(Debug, Args)]
pub struct HostArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: HostCommand,
}

/// `migrate`'s arguments: the PostgreSQL store.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Show the latest transcript items of a conversation, oldest first.
    History {
        /// Conversation id.
        conversation: String,
        /// Thread id within the conversation.
        #[arg(long)]
        thread: Option<String>,
        /// How many items (1-100).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        /// Print the HistoryPage JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the state a runner keeps in one scope.
    State {
        /// conversation, actor, subject or runner.
        scope: StateScope,
        /// The scope's id (conversation, actor or subject id; ignored for runner).
        #[arg(default_value = "")]
        id: String,
        /// Runner name (claude-code, codex) or full runner id.
        #[arg(long, default_value = "claude-code")]
        runner: String,
        /// Thread id, for conversation scope.
        #[arg(long)]
        thread: Option<String>,
    },
    /// Sum what runs cost (tokens, and dollars where the harness reported
    /// them), by actor, conversation, harness, model or day; the latest
    /// first.
    Usage {
        /// What to sum by.
        #[arg(long, default_value = "actor", value_parser = ["actor", "conversation", "harness", "model", "day"])]
        by: String,
        /// Only runs that ended in the last N days.
        #[arg(long, value_name = "N")]
        days: Option<u32>,
        /// Only this actor's runs.
        #[arg(long)]
        actor: Option<String>,
        /// Only this conversation's runs.
        #[arg(long)]
        conversation: Option<String>,
        /// One JSON object per group.
        #[arg(long)]
        json: bool,
    },
    /// Show the newest audit rows: every host call a run made, and its outcome.
    Audit {
        /// Only this run.
        #[arg(long)]
        run: Option<String>,
        /// How many rows.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: HostArgs, data_dir: &Path) -> Outcome {
    let at = args.store.at(data_dir).map_err(CliError::usage)?;
    let runtime = super::runtime()?;
    let store = runtime
        .block_on(Store::open(&at))
        .map_err(CliError::failure)?;
    runtime
        .block_on(execute(args.command, &store))
        .map_err(CliError::failure)?;
    Ok(exit::OK)
}

/// Apply what a PostgreSQL store lacks of the schema (the host store's
/// tables, then the run queue's), and say what was applied.
pub fn migrate(args: MigrateArgs, data_dir: &Path) -> Outcome {
    let url = match args.store.at(data_dir).map_err(CliError::usage)? {
        StoreAt::Postgres(url) => url,
        StoreAt::Folder(dir) => {
            return Err(CliError::usage(format!(
                "{} is an embedded store, which every command migrates as it opens it; \
                 migrate prepares a PostgreSQL store (--store postgres://…, or --config with a \
                 PostgreSQL `store`)",
                dir.display()
            )));
        }
    };
    let runtime = super::runtime()?;
    let applied = runtime.block_on(async {
        let host = crate::host::postgres::migrate(&url).await?;
        let store = crate::host::postgres::PgHost::connect(&url).await?;
        let queue = crate::host::postgres::migrate_component(
            store.pool(),
            &crate::host::postgres::database_of(&url),
            "serve",
            crate::serve::cluster::MIGRATIONS,
        )
        .await?;
        Ok::<_, crate::host::postgres::PgOpenError>((host, queue))
    });
    let (host, queue) = applied.map_err(CliError::failure)?;
    let place = crate::host::postgres::describe_url(&url);
    for (what, steps, all) in [
        ("host store", host, crate::host::postgres::MIGRATIONS),
        ("run queue", queue, crate::serve::cluster::MIGRATIONS),
    ] {
        let latest = all.last().map_or(0, |m| m.version);
        if steps.is_empty() {
            out!("{place}: {what} schema up to date (version {latest})");
        }
        for step in steps {
            out!(
                "{place}: {what} migration {} applied ({})",
                step.version,
                step.name
            );
        }
    }
    Ok(exit::OK)
}

/// One state entry. A value kept for the bridge (a session's files) can be
/// megabytes: a person gets its start and its size.
fn print_state(key: &str, value: &serde_json::Value) {
    let value = value.to_string();
    if value.len() > 400 {
        out!("{key} = {} ({} bytes)", clip(&value, 200), value.len());
    } else {
        out!("{key} = {value}");
    }
}

/// The ledger's sums as a table a person reads.
fn print_usage(by: &str, totals: &[UsageTotal]) {
    if totals.is_empty() {
        out!("no runs recorded");
        return;
    }
    out!(
        "{:<24} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  last run ended (UTC)",
        by,
        "runs",
        "failed",
        "refused",
        "input",
        "output",
        "cache rd",
        "cache wr",
        "cost $"
    );
    for t in totals {
        let key = if t.key.is_empty() { "-" } else { &t.key };
        let cost = t.cost_usd.map_or("-".to_string(), |c| format!("{c:.4}"));
        out!(
            "{:<24} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
            clip(key, 24),
            t.runs,
            t.failed,
            t.refused,
            t.input_tokens,
            t.output_tokens,
            t.cache_read_tokens,
            t.cache_write_tokens,
            cost,
            utc(t.last_ms)
        );
    }
}

/// Epoch milliseconds as `YYYY-MM-DD HH:MM:SS`, UTC.
fn utc(ms: i64) -> String {
    crate::protocol::time::date_time(ms.div_euclid(1000))
}

fn clip(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// A conversation's transcript items, a line each: who said it, when, what.
fn print_history(conversation: &str, page: &crate::protocol::HistoryPage) {
    if page.items.is_empty() {
        out!("no transcript items in conversation `{conversation}`");
    }
    for item in &page.items {
        // Who said it: the person (their name, else id), or the
        // harness that answered.
        let who = ["actor_name", "actor_id", "harness"]
            .iter()
            .find_map(|key| item.metadata.get(*key)?.as_str())
            .unwrap_or("-");
        out!(
            "#{:<5} {} {:<9} {:<16} {}",
            item.seq.unwrap_or(0),
            item.created_at.map_or("-".into(), utc),
            item.role,
            clip(who, 16),
            clip(item.content.as_deref().unwrap_or(""), 160)
        );
    }
    if let Some(total) = page.total_count {
        out!("({} of {total} items)", page.items.len());
    }
}

/// One audit row, a line: when, run, action, resource, scope, outcome and
/// why.
fn print_audit(e: &crate::host::AuditEntry) {
    out!(
        "{} {} {} {} {} {}{}",
        utc(e.at_ms),
        if e.run_id.is_empty() { "-" } else { &e.run_id },
        e.action,
        e.resource,
        e.scope,
        e.outcome,
        if e.detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", e.detail)
        }
    );
}

async fn execute(cmd: HostCommand, store: &Store) -> Result<(), AgentAPIError> {
    let host = store.host();
    match cmd {
        HostCommand::History {
            conversation,
            thread,
            limit,
            json,
        } => {
            let page = host
                .conversation_history(&conversation, thread.as_deref(), limit)
                .await?;
            if json {
                out!(
                    "{}",
                    serde_json::to_string_pretty(&page).unwrap_or_default()
                );
                return Ok(());
            }
            print_history(&conversation, &page);
        }
        HostCommand::State {
            scope,
            id,
            runner,
            thread,
        } => {
            let runner = if runner.starts_with("plugin:") {
                runner
            } else {
                runner_id(&runner)
            };
            let owner = inspect_owner(&runner, scope, &id, thread.as_deref());
            let entries = store.state_dump(scope, owner).await?;
            if entries.is_empty() {
                out!("no {} state for `{id}` (runner {runner})", scope.as_str());
            }
            for entry in entries {
                print_state(&entry.key, &entry.value);
            }
        }
        HostCommand::Usage {
            by,
            days,
            actor,
            conversation,
            json,
        } => {
            let query = UsageQuery {
                by: UsageBy::named(&by).unwrap_or_default(),
                since_ms: days.map(|d| crate::host::now_ms() - i64::from(d) * 86_400_000),
                actor,
                conversation,
                bot: None,
                harness: None,
            };
            let totals = store.usage_totals(query).await?;
            if json {
                for total in &totals {
                    out!("{}", serde_json::to_string(total).unwrap_or_default());
                }
            } else {
                print_usage(&by, &totals);
            }
        }
        HostCommand::Audit { run, limit, json } => {
            let rows = store.audit_tail(run.clone(), limit).await?;
            if rows.is_empty() && !json {
                match &run {
                    Some(run) => out!("no audit rows for run `{run}`"),
                    None => out!("no audit rows"),
                }
            }
            for row in rows {
                if json {
                    out!("{}", serde_json::to_string(&row).unwrap_or_default());
                } else {
                    print_audit(&row.entry);
                }
            }
        }
    }
    Ok(())
}
