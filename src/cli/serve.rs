//! `harness-bridge serve`: the bridge as a service (see `serve`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::exit;
use crate::harness::cage;
use crate::projection::Templates;
use crate::run::{Bridge, Settings};
use crate::serve::{ServeConfig, Service};

/// What `serve --help` adds after the options: the API in brief.
pub const AFTER_HELP: &str = "\
API (bearer token on every route but / and /healthz: one of api_tokens,
or, when there are none, the one serve keeps in STORE/api-token; every
POST with Content-Type: application/json; requests from pages of other
sites are refused):
  GET  /                    the debug chat page: a harness, a conversation,
                            an actor; the reply, tool calls, resume pointer,
                            questions and approvals as cards with buttons
  POST /v1/runs             an AgentRunContext, or the short form
                            {conversation, text, actor?, harness?, config?,
                            run_id?, interaction?, policy?}; answers with the result
                            stream (NDJSON; SSE with Accept: text/event-stream)
                            interaction: {interaction_id, action_id?,
                            values?} answers a card the agent sent (text
                            may then be left out); policy: steer hands the
                            text to the conversation's running turn where
                            the harness takes input mid-turn (202
                            {steered_into}), else queues it (x-steer: queued)
  GET  /v1/runs/{id}        status and results so far
  POST /v1/runs/{id}/cancel stop a run (run.failed, code cancelled)
  GET  /v1/runners          the runner discovery JSON
  GET  /v1/conversations/{id}/history?limit=N
  GET  /healthz
  GET  /metrics             Prometheus text: runs by outcome, queue depth,
                            run durations, MCP calls by tool and outcome

Turns of one conversation run one after another, in arrival order; a full
queue answers 429. SIGTERM or Ctrl-C: new runs get 503, queued turns are
cancelled, running ones get shutdown_grace_seconds to finish (a second
signal: none), then are cancelled. Every run is journaled beside the store
(serve-runs.db); a run in flight when the bridge died is marked failed
(code interrupted) at the next start.

Logs: one line per event on stderr, each naming run_id and conversation;
--log-format json for collectors, RUST_LOG to filter (default info).";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The service's settings (YAML); every key has a default, and
    /// docs/bridge.example.yaml explains each.
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Serve until SIGTERM or Ctrl-C.
pub fn run(args: ServeArgs, data_dir: &Path) -> u8 {
    let mut config = match ServeConfig::load(args.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let adapters = match super::load_adapters(config.adapters.as_deref()) {
        Ok(adapters) => adapters,
        Err(code) => return code,
    };
    let store_dir = config
        .store
        .clone()
        .unwrap_or_else(|| data_dir.to_path_buf());
    for folder in [Some(&store_dir), config.workspace_root.as_ref()]
        .into_iter()
        .flatten()
    {
        if let Err(e) = super::private_folder(folder) {
            eprintln!("error: {e}");
            return exit::FAILURE;
        }
    }
    let (runtime, store) = match super::open_store(&store_dir) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    if let Err(e) = store.keep_audit_for(config.audit_retention()) {
        eprintln!("error: {e}");
        return exit::FAILURE;
    }
    match runtime.block_on(store.index_knowledge(config.knowledge_bases.clone())) {
        Ok(reports) => {
            for (kb_id, report) in reports {
                tracing::info!(
                    kb_id,
                    indexed = report.indexed,
                    unchanged = report.unchanged,
                    removed = report.removed,
                    skipped = report.skipped,
                    "knowledge base indexed"
                );
            }
        }
        Err(e) => {
            eprintln!("error: {}", e.message);
            return exit::FAILURE;
        }
    }
    if config.api_tokens.is_empty() && !config.no_auth {
        match api_token(&store_dir) {
            Ok((token, file)) => {
                eprintln!(
                    "API token: in {} (send Authorization: Bearer <token>; set api_tokens to choose your own)",
                    file.display()
                );
                config.api_tokens.push(token);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return exit::FAILURE;
            }
        }
    }
    let workspace_root = config
        .workspace_root
        .clone()
        .unwrap_or_else(|| data_dir.join("workspaces"));
    let retention = Duration::from_secs(config.retention_hours.saturating_mul(3600));
    let journal = match crate::serve::Journal::open(&store_dir, retention) {
        Ok((journal, interrupted)) => {
            for run in interrupted {
                tracing::warn!(
                    run_id = %run.run_id,
                    "run was in flight when the bridge last stopped; marked failed ({})",
                    crate::serve::INTERRUPTED
                );
                if let (Some(pgid), Some(workspace)) = (run.pgid, &run.workspace) {
                    cage::kill_leftover_group(pgid, workspace);
                }
                if let Some(marker) = &run.marker {
                    let killed = cage::kill_leftover_turn(marker);
                    if killed > 0 {
                        tracing::warn!(
                            run_id = %run.run_id,
                            killed,
                            "killed what the interrupted run's harness left running"
                        );
                    }
                }
            }
            journal
        }
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILURE;
        }
    };
    crate::listen::raise_fd_limit();
    // After the journal's own sweep, which names the runs it ends.
    if let Err(code) = super::contain() {
        return code;
    }
    let mut settings = Settings::new(workspace_root);
    settings.binaries = config.harness_binaries.clone();
    settings.pass_env = config.pass_env.clone();
    settings.set_env = config.set_env.clone();
    settings.mcp_servers = config.mcp_servers.clone();
    settings.turn_timeout = Duration::from_secs(config.turn_timeout_seconds.max(1));
    settings.kill_grace = Duration::from_secs(config.kill_grace_seconds);
    settings.live = config.live();
    let result = runtime.block_on(async move {
        let bridge = Bridge::start(
            Arc::new(store),
            adapters,
            Templates::load(None).map_err(|e| e.to_string())?,
            settings,
        )
        .await
        .map_err(|e| format!("cannot start the MCP server: {e}"))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("harness-bridge serving on http://{addr}");
        let (stop, hurry) = super::stop_and_hurry_on_signal();
        let service = Service::new(bridge, journal, config);
        crate::serve::serve(service, listener, stop, hurry)
            .await
            .map_err(|e| e.to_string())
    });
    cage::release();
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILURE
        }
    }
}

/// The service's own token, in `dir/api-token`: read when it is there,
/// generated (32 random bytes, hex, file mode 0600) when not. It lives in a
/// file, not in the log, so it never lands where logs are collected.
fn api_token(dir: &Path) -> Result<(String, PathBuf), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let file = dir.join("api-token");
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 {
                return Err(format!(
                    "{} holds a token of under 16 characters; delete it to get a new one",
                    file.display()
                ));
            }
            return Ok((token, file));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for the API token: {e}"))?;
    let token = hex::encode(bytes);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
    {
        Ok(mut f) => f
            .write_all(token.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?,
        // Another serve on this store made it first: use that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return api_token(dir),
        Err(e) => return Err(format!("cannot write {}: {e}", file.display())),
    }
    Ok((token, file))
}
