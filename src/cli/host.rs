//! `harness-bridge host ...`: read the embedded store as a person would.

use std::path::Path;

use clap::Subcommand;

use super::exit;
use crate::harness::runner_id;
use crate::host::HostProxy as _;
use crate::host::owners::inspect_owner;
use crate::host::sqlite::SqliteHost;
use crate::protocol::{AgentAPIError, StateScope};

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

pub fn run(cmd: HostCommand, data_dir: &Path) -> u8 {
    let (runtime, host) = match super::open_store(data_dir) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    match runtime.block_on(execute(cmd, &host)) {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILURE
        }
    }
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

async fn execute(cmd: HostCommand, host: &SqliteHost) -> Result<(), AgentAPIError> {
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
            if page.items.is_empty() {
                out!("no transcript items in conversation `{conversation}`");
            }
            for item in &page.items {
                out!(
                    "#{:<5} {:<9} {}",
                    item.seq.unwrap_or(0),
                    item.role,
                    clip(item.content.as_deref().unwrap_or(""), 160)
                );
            }
            if let Some(total) = page.total_count {
                out!("({} of {total} items)", page.items.len());
            }
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
            let entries = host.state_dump(scope, owner).await?;
            if entries.is_empty() {
                out!("no {} state for `{id}` (runner {runner})", scope.as_str());
            }
            for entry in entries {
                out!("{} = {}", entry.key, entry.value);
            }
        }
        HostCommand::Audit { run, limit, json } => {
            for row in host.audit_tail(run, limit).await? {
                if json {
                    out!("{}", serde_json::to_string(&row).unwrap_or_default());
                } else {
                    let e = &row.entry;
                    out!(
                        "{} {} {} {} {} {}{}",
                        e.at_ms,
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
            }
        }
    }
    Ok(())
}
