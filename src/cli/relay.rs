//! `harness-bridge relay`: serve a host plugin over stdio (see
//! `docs/relay-protocol.md`). Frames go to stdout; logs stay on stderr.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::error::{CliError, Outcome};
use super::exit;
use crate::run::Settings;

/// What `relay --help` adds after the options: who starts it and when it ends.
pub const AFTER_HELP: &str = "\
A host plugin (the LangBot plugin in integrations/langbot-plugin) starts
this command and speaks the relay protocol on its stdin/stdout: run
requests in, results and host API calls out. The host stays the source of
truth for history and state; only workspaces live under --root.

Turns of one conversation run one at a time, in the order their run frames
arrived (they share the conversation's workspace); different conversations
run in parallel up to --max-concurrent-runs. A turn beyond the queue limits
ends at once with run.failed (rate_limited).

What each run cost is kept in the bridge's own store in DATA_DIR (LangBot
keeps no such ledger): `harness-bridge --data-dir DATA_DIR host usage`
reads it. With --budgets, a turn over one of the operator's limits (per
person, conversation or bot) ends at once with run.failed
(limit_reached), a sentence saying which limit and when it resets.

When stdin closes, or on SIGTERM, every run is cancelled and its harness
process group killed before the command exits.";

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Folder under which conversation workspaces live [default: DATA_DIR/workspaces].
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Folder of adapter specs that add to or replace the built-in ones.
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    adapters: Option<PathBuf>,
    /// Folder of template overrides.
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    templates: Option<PathBuf>,
    /// Also pass this variable (or prefix ending in `*`) to harnesses. Repeatable.
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Seconds between SIGTERM and SIGKILL when a harness is stopped.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    kill_grace: u64,
    /// Turns running at once, across conversations.
    #[arg(long, value_name = "N", default_value_t = crate::relay::Limits::default().max_concurrent_runs)]
    max_concurrent_runs: usize,
    /// Turns waiting per conversation before new ones are refused.
    #[arg(long, value_name = "N", default_value_t = crate::relay::Limits::default().max_queue_per_conversation)]
    max_queue_per_conversation: usize,
    /// Harness processes kept alive between turns (one per conversation,
    /// for harnesses with a live driver), least recently used stopped
    /// first; 0 starts one process per turn.
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_live_sessions: usize,
    /// Seconds an idle live harness process is kept.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    idle_timeout_seconds: u64,
    /// YAML file of the operator's limits and prices: `budgets:` (per
    /// `actor`, `conversation`, `bot`: `turns_per_minute`,
    /// `tokens_per_day`, `tokens_per_month`, `cost_usd_per_day`,
    /// `cost_usd_per_month`) and `prices:` (model → USD per million
    /// `input`, `output`, `cache_read`, `cache_write` tokens), as in
    /// bridge.yaml.
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    budgets: Option<PathBuf>,
    #[command(flatten)]
    cage: super::cage::CageArgs,
}

/// Serve one relay session on stdio until the plugin goes away.
pub fn run(args: RelayArgs, data_dir: &Path) -> Outcome {
    let adapters = super::load_adapters(args.adapters.as_deref())?;
    let templates = super::load_templates(args.templates.as_deref())?;
    super::spawners_ready()?;
    let root = args.root.unwrap_or_else(|| data_dir.join("workspaces"));
    super::private_folder(&root).map_err(CliError::failure)?;
    let mut settings = Settings::new(root);
    settings.pass_env = args.pass_env;
    settings.kill_grace = Duration::from_secs(args.kill_grace);
    settings.cage = args.cage.policy();
    super::cage::settle_network(&mut settings.cage, args.cage.network_chosen());
    super::cage::announce(&settings.cage);
    super::cage::open_to_harnesses(&settings.cage, data_dir, &settings.workspace_root)?;
    settings.live = (args.max_live_sessions > 0).then(|| crate::run::LiveLimits {
        max_sessions: args.max_live_sessions,
        idle_timeout: Duration::from_secs(args.idle_timeout_seconds.max(1)),
    });
    if let Some(file) = &args.budgets {
        let spending = crate::host::budget::Spending::load(file).map_err(CliError::usage)?;
        settings.budgets = spending.budgets;
        settings.prices = spending.prices;
    }
    let (runtime, ledger) = super::open_store(data_dir)?;
    let result = runtime.block_on(async move {
        let stop = super::stop_on_signal();
        let limits = crate::relay::Limits {
            max_concurrent_runs: args.max_concurrent_runs,
            max_queue_per_conversation: args.max_queue_per_conversation,
            ..Default::default()
        };
        let setup = crate::relay::Setup {
            settings,
            adapters,
            templates,
            limits,
            ledger: Some(Arc::new(ledger)),
        };
        crate::relay::serve_stdio(setup, stop).await
    });
    // The stdin reader may still block a thread; do not wait for it.
    runtime.shutdown_background();
    result.map_err(CliError::failure)?;
    Ok(exit::OK)
}
