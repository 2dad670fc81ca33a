//! `harness-bridge serve`: the bridge as a service (see `serve`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::error::{CliError, Outcome};
use super::exit;
use crate::harness::cage;
use crate::host::postgres::PgHost;
use crate::host::store::StoreAt;
use crate::projection::Templates;
use crate::run::{Bridge, Settings};
use crate::serve::{ServeConfig, Service, tokens};

/// What `serve --help` adds after the options: the API in brief.
pub const AFTER_HELP: &str = "\
Settings: `serve --example-config > bridge.yaml` writes every key at its
default with what it does; `serve --config bridge.yaml --check` checks a
file (a misspelled key is named at its line, with the key meant).

API (bearer token on every route but /, /healthz and /v1/console/session:
one of api_tokens, or, when there are none, the one serve keeps in
STORE/api-token, or a console tab's session; every POST with
Content-Type: application/json; requests from pages of other sites are
refused):
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
  GET  /v1/runs/{id}        status and results so far (the result stream,
                            from the first, with Accept: application/x-ndjson
                            or text/event-stream)
  POST /v1/runs/{id}/cancel stop a run (run.failed, code cancelled)
  GET  /v1/runs?actor=&conversation=&harness=&limit=&before=
                            the runs that ended, newest first, with who
                            asked, how they ended and what they cost
                            (`next` pages on)
  GET  /v1/conversations?actor=&harness=&days=&limit=
                            the conversations, most recently active first
  GET  /v1/conversations/{id}
                            one conversation: usage, resume pointer, open
                            request, live process, runs
  GET  /v1/conversations/{id}/history?limit=N
  GET  /v1/usage?by=actor|day|harness|model|conversation&days=&actor=&harness=
                            the ledger summed by what is asked
  GET  /v1/live             this instance's live harness processes
  POST /v1/console/links    a one-time link to the page, /#link=CODE (an
                            API token only; `harness-bridge console-link`
                            asks for one, and serve prints one at start on
                            a terminal)
  POST /v1/console/session  {link}: the code for a session of the tab that
                            opened it (once, within 15 minutes; it lasts
                            12 hours, until serve restarts)
  GET  /v1/runners          the runner discovery JSON
  GET  /healthz
  GET  /metrics             Prometheus text: runs by outcome, queue depth,
                            run durations, MCP calls by tool and outcome

Turns of one conversation run one after another, in arrival order; a full
queue answers 429. With a PostgreSQL store (bridge.yaml `store:
postgres://…`, each instance its own data folder and instance_id), several
instances share one queue: post, stream, look up (GET /v1/runs/{id} with
Accept: application/x-ndjson streams it) and cancel any run on any of them.

SIGTERM or Ctrl-C: new runs get 503, queued turns are cancelled (on a
PostgreSQL store they stay queued for the other instances), running ones
get shutdown_grace_seconds to finish (a second signal: none), then are
cancelled. Every run is journaled beside the store (serve-runs.db; on a
PostgreSQL store, in it); a run in flight when the bridge died is marked
failed (code interrupted) at the next start, or, on a PostgreSQL store,
once its instance's lease_seconds have passed.

Logs: one line per event on stderr, each naming run_id and conversation;
--log-format json for collectors, RUST_LOG to filter (default info; the
MCP library's own lines at warn).";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The service's settings (YAML); every key has a default, and
    /// `--example-config` prints a file that explains each.
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the settings and exit, 0 when `serve` would start on them:
    /// every key and value, the harnesses and projects they name, the
    /// programs of the harnesses they route turns to (a path given that
    /// is not there, or one the cage would not let start, fails; one not
    /// installed is said), the projects' repositories; and say where the
    /// store, its journal and the workspaces would be. Nothing is started.
    #[arg(long)]
    check: bool,
    /// Print the annotated example settings (every key at its default,
    /// with what it does) and exit.
    #[arg(long, conflicts_with_all = ["config", "check"])]
    example_config: bool,
}

/// The example `bridge.yaml`, carried by the binary.
const EXAMPLE_CONFIG: &str = include_str!("../../docs/bridge.example.yaml");

/// Serve until SIGTERM or Ctrl-C.
pub fn run(args: ServeArgs, data_dir: &Path) -> Outcome {
    if args.example_config {
        print!("{EXAMPLE_CONFIG}");
        return Ok(exit::OK);
    }
    let mut config = ServeConfig::load(args.config.as_deref()).map_err(CliError::invalid)?;
    let adapters = checked_adapters(&config)?;
    let workspace_root = config.workspace_root(data_dir);
    let programs = crate::serve::check_programs(&config, &adapters, &workspace_root);
    if args.check {
        return check(&config, &adapters, &programs, data_dir);
    }
    for check in programs.iter().filter(|c| c.problem.is_some()) {
        tracing::warn!("harness {}", check.line());
    }
    // Held from here: nothing is written (the API token, the journal)
    // for a service that cannot listen.
    let listening = listen(&config)?;
    tracing::info!("where: {}", config.places(data_dir));
    super::spawners_ready()?;
    let store_at = config.store_at(data_dir);
    let store_dir = match &store_at {
        StoreAt::Folder(dir) => Some(dir.clone()),
        StoreAt::Postgres(_) => None,
    };
    for folder in [store_dir.as_ref(), config.workspace_root.as_ref()]
        .into_iter()
        .flatten()
    {
        super::private_folder(folder).map_err(CliError::failure)?;
    }
    let runtime = super::service_runtime()?;
    // The operator's projects, before anything is written: one that
    // cannot be opened is a mistake in the file.
    let projects = runtime
        .block_on(crate::repo::open_all(&config.projects, config.cage.owner()))
        .map_err(|e| CliError::invalid(format!("{}: {e}", config.file_name())))?;
    let retention = Duration::from_secs(config.retention_hours.saturating_mul(3600));
    super::cage::open_to_harnesses(&config.cage, data_dir, &workspace_root)?;
    let settings = run_settings(&config, workspace_root, &store_at);

    // The store, the record of runs and how turns wait: the embedded
    // store with its journal, or a PostgreSQL store shared with other
    // instances.
    let opened = match &store_at {
        StoreAt::Folder(dir) => open_embedded(&runtime, dir, &mut config, retention),
        StoreAt::Postgres(url) => open_shared(&runtime, url, data_dir, &mut config),
    };
    let (host, backlog) = opened?;
    crate::http_server::raise_fd_limit();
    // After the journal's own sweep, which names the runs it ends.
    super::contain()?;
    let result = runtime.block_on(async move {
        let mut settings = settings;
        settings.projects = projects;
        let bridge = Bridge::start(
            host,
            adapters,
            Templates::load(None).map_err(|e| e.to_string())?,
            settings,
        )
        .await
        .map_err(|e| format!("cannot start the MCP server: {e}"))?;
        let listener = tokio::net::TcpListener::from_std(listening)
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (stop, hurry) = super::stop_and_hurry_on_signal();
        eprintln!("harness-bridge serving on http://{addr}");
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            listen = %addr,
            max_concurrent_runs = config.max_concurrent_runs,
            "serving"
        );
        let service = match backlog {
            Backlog::Local(journal) => Service::new(bridge, journal, config),
            Backlog::Shared {
                cluster,
                events,
                _lock,
            } => {
                let service = Service::shared(bridge, cluster, events, config);
                announce_console(&service, addr);
                let served = crate::serve::serve(service, listener, stop, hurry).await;
                drop(_lock);
                return served.map_err(|e| e.to_string());
            }
        };
        announce_console(&service, addr);
        crate::serve::serve(service, listener, stop, hurry)
            .await
            .map_err(|e| e.to_string())
    });
    cage::release();
    result.map_err(CliError::failure)?;
    Ok(exit::OK)
}

/// How the operator opens the console: on a terminal, a one-time link
/// (opened once within minutes, the tab has a session); where stderr goes
/// to a journal or a collector, only how to get one, since the link is a
/// secret while it lasts.
fn announce_console(service: &Service, addr: std::net::SocketAddr) {
    use std::io::IsTerminal as _;
    let mut at = addr;
    if at.ip().is_unspecified() {
        at.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    if !std::io::stderr().is_terminal() {
        if service.takes_tokens() {
            tracing::info!(
                "console: http://{at}/ (`harness-bridge console-link` prints a one-time link \
                 that opens it without typing the token)"
            );
        }
        return;
    }
    match service.console_link() {
        Some(Ok(code)) => eprintln!(
            "console: {} (opens once, within {} minutes; `harness-bridge console-link` prints \
             another)",
            crate::serve::link_url(&at.to_string(), &code),
            crate::serve::LINK_LIFETIME.as_secs() / 60
        ),
        Some(Err(e)) => tracing::warn!("no one-time console link: {e}"),
        None => eprintln!("console: http://{at}/"),
    }
}

/// The harness specs `config` loads, its harness names and permission
/// modes checked against them.
fn checked_adapters(config: &ServeConfig) -> Result<crate::harness::Adapters, CliError> {
    let adapters = super::load_adapters(config.adapters.as_deref())?;
    config
        .check_harness_names(adapters.all().iter().map(|spec| spec.name.as_str()))
        .map_err(CliError::invalid)?;
    config
        .check_permission_modes(&adapters)
        .map_err(CliError::invalid)?;
    let refused = config.refused_by_defaults(&adapters);
    if !refused.is_empty() {
        tracing::warn!(
            harnesses = %refused.join(", "),
            "default_config sets `approvals: chat`, which these harnesses cannot take: their \
             short-form turns will be refused; set it under harness_config for those that can"
        );
    }
    Ok(adapters)
}

/// The service's listening socket, or why `listen` cannot be had (in
/// use, not this machine's address).
fn listen(config: &ServeConfig) -> Result<std::net::TcpListener, CliError> {
    let listener = std::net::TcpListener::bind(config.listen).map_err(|e| {
        CliError::invalid(format!(
            "cannot listen on {}: {e}; choose another `listen` in bridge.yaml (or stop what holds it)",
            config.listen
        ))
    })?;
    listener.set_nonblocking(true).map_err(CliError::failure)?;
    Ok(listener)
}

/// `serve --check`: every harness it routes to can start (one that is not
/// installed is said), the projects open; where things would be kept.
fn check(
    config: &ServeConfig,
    adapters: &crate::harness::Adapters,
    programs: &[crate::serve::ProgramCheck],
    data_dir: &Path,
) -> Outcome {
    let file = config.file_name();
    let failing: Vec<String> = programs
        .iter()
        .filter(|c| c.fails_check())
        .map(crate::serve::ProgramCheck::line)
        .collect();
    if !failing.is_empty() {
        return Err(CliError::invalid(format!(
            "{file}: a harness it routes turns to cannot start: {}",
            failing.join("; ")
        )));
    }
    for check in programs.iter().filter(|c| c.problem.is_some()) {
        println!("warning: {}", check.line());
    }
    let projects = super::runtime()?
        .block_on(crate::repo::open_all(&config.projects, config.cage.owner()))
        .map_err(|e| CliError::invalid(format!("{file}: {e}")))?;
    // Taken and let go: a port another program holds fails the check.
    drop(listen(config)?);
    println!("where: {}", config.places(data_dir));
    let count = |n: usize, one: &str, many: &str| match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    };
    println!(
        "{file}: serve would start on these settings ({}, {})",
        count(adapters.all().len(), "harness", "harnesses"),
        count(projects.len(), "project", "projects")
    );
    Ok(exit::OK)
}

/// How the opened service keeps its runs.
enum Backlog {
    /// The embedded store's journal.
    Local(crate::serve::Journal),
    /// The shared queue, its events, and this data folder held.
    Shared {
        cluster: Arc<crate::serve::cluster::Cluster>,
        events: tokio::sync::mpsc::UnboundedReceiver<crate::serve::cluster::ClusterEvent>,
        _lock: nix::fcntl::Flock<std::fs::File>,
    },
}

type Opened = (Arc<dyn crate::host::HostApi>, Backlog);

/// The turns' settings from the service's configuration.
fn run_settings(config: &ServeConfig, workspace_root: PathBuf, store_at: &StoreAt) -> Settings {
    let mut settings = Settings::new(workspace_root);
    settings.binaries = config.harness_binaries.clone();
    settings.pass_env = config.pass_env.clone();
    settings.set_env = config.set_env.clone();
    settings.mcp_servers = config.mcp_servers.clone();
    settings.turn_timeout = Duration::from_secs(config.turn_timeout_seconds.max(1));
    settings.kill_grace = Duration::from_secs(config.kill_grace_seconds);
    settings.live = config.live();
    settings.cage = config.cage.clone();
    super::cage::settle_network(&mut settings.cage, false);
    super::cage::announce(&settings.cage);
    // Only a shared store moves a conversation between instances.
    if matches!(store_at, StoreAt::Postgres(_)) && config.session_copy_max_mib > 0 {
        settings.follow_sessions = Some(config.session_copy_max_mib.saturating_mul(1024 * 1024));
    }
    settings.budgets = config.budgets.clone();
    settings.prices = config.prices.clone();
    settings
}

/// The embedded store in `dir`: its knowledge bases indexed, its API
/// token, its journal (what a crash left in flight ended first).
fn open_embedded(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    config: &mut ServeConfig,
    retention: Duration,
) -> Result<Opened, CliError> {
    let store = crate::host::sqlite::SqliteHost::open(dir).map_err(CliError::failure)?;
    store
        .keep_audit_for(config.audit_retention())
        .map_err(CliError::failure)?;
    let reports = runtime
        .block_on(store.index_knowledge(config.knowledge_bases.clone()))
        .map_err(|e| CliError::failure(e.message))?;
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
    if config.api_tokens.is_empty() && !config.no_auth {
        let (token, file) = tokens::api_token(dir).map_err(CliError::failure)?;
        eprintln!(
            "API token: in {} (send Authorization: Bearer <token>; set api_tokens to choose your own)",
            file.display()
        );
        config.api_tokens.push(token);
    }
    let (journal, interrupted) =
        crate::serve::Journal::open(dir, retention).map_err(CliError::failure)?;
    crate::serve::end_leftovers(&interrupted);
    Ok((Arc::new(store), Backlog::Local(journal)))
}

/// A PostgreSQL store shared with other instances: migrated, joined (what
/// this instance's last start left in flight ended), its API token shared.
fn open_shared(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    data_dir: &Path,
    config: &mut ServeConfig,
) -> Result<Opened, CliError> {
    if !config.knowledge_bases.is_empty() {
        return Err(CliError::failure(
            "knowledge_bases are indexed into the embedded store; with a PostgreSQL store \
             leave them out (a harness then has no knowledge bases of this bridge's)",
        ));
    }
    // One instance per data folder: its workspaces are its own.
    let lock = crate::serve::own_store(data_dir).map_err(CliError::failure)?;
    let store = runtime
        .block_on(PgHost::connect(url))
        .map_err(CliError::failure)?;
    store
        .keep_audit_for(config.audit_retention())
        .map_err(|e| CliError::failure(e.message))?;
    if config.api_tokens.is_empty() && !config.no_auth {
        let (token, file) = runtime
            .block_on(tokens::shared_api_token(&store, data_dir))
            .map_err(CliError::failure)?;
        eprintln!(
            "API token: in {} (the same for every instance on this store; set api_tokens to choose your own)",
            file.display()
        );
        config.api_tokens.push(token);
    }
    let instance_id = config
        .instance_id
        .clone()
        .unwrap_or_else(|| crate::serve::cluster::default_instance_id(data_dir));
    let settings = crate::serve::cluster::ClusterSettings {
        instance_id: instance_id.clone(),
        lease: Duration::from_secs(config.lease_seconds),
        max_waiting: config.max_queue_per_conversation,
        max_total: config.max_queued_total,
        addr: config.listen.to_string(),
    };
    let (cluster, interrupted, events) = runtime
        .block_on(crate::serve::cluster::Cluster::join(
            store.clone(),
            url,
            settings,
        ))
        .map_err(CliError::failure)?;
    crate::serve::end_leftovers(&interrupted);
    eprintln!(
        "instance {instance_id} of the bridges sharing {}",
        crate::host::postgres::describe_url(url)
    );
    Ok((
        Arc::new(store),
        Backlog::Shared {
            cluster,
            events,
            _lock: lock,
        },
    ))
}
