//! Command-line interface: argument parsing and output rendering only.
//! Each subcommand's module turns arguments into library calls and prints
//! the outcome; none of them holds product logic.

/// `println!` that ignores a closed stdout (`harness-bridge ... | head`)
/// instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod adapters;
mod cage;
mod console_link;
mod context;
mod error;
mod host;
mod input;
mod logging;
mod project;
mod relay;
mod run;
mod serve;
mod sign_in;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};

use error::{CliError, Outcome};

/// Exit codes, as documented in `--help`.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The input was read but is not valid (e.g. a context with errors).
    pub const INVALID: u8 = 1;
    /// Wrong usage: unknown command or flag, missing argument.
    pub const USAGE: u8 = 2;
    /// The command could not do its work (unreadable file, store error).
    pub const FAILURE: u8 = 3;
}

const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  the input is not valid (problems are printed)
  2  usage error
  3  the command failed (unreadable file, store error, ...)

Data folder (embedded host store): --data-dir, else $HARNESS_BRIDGE_DATA_DIR,
else $XDG_DATA_HOME/harness-bridge, else ~/.local/share/harness-bridge.
Everything a harness starts ends with its turn: a cgroup per harness where
the system allows it, else a sweep by turn marker; HARNESS_BRIDGE_CONTAIN=
cgroup|subreaper|auto chooses (default auto).
Every harness runs caged to its conversation (Landlock: files, network,
processes; per-conversation limits): `harness-bridge doctor` says what
holds here, `--uncaged` (run, relay) or `cage:` (bridge.yaml) chooses.
Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more.";

/// The first line of the help: the built-in harnesses by the names their
/// specs give them (so a harness added by its YAML file is named there).
fn about() -> String {
    let labels: Vec<&str> = crate::harness::Adapters::builtin()
        .all()
        .iter()
        .map(|spec| spec.label.as_str())
        .collect();
    format!(
        "Plug code-agent CLIs ({}, any ACP agent) into IM bots through LangBot's \
         AgentRunner Protocol v1",
        labels.join(", ")
    )
}

/// What `--version` prints after the name: the crate's version and the
/// commit it was built from with that commit's date (`build.rs`), so a
/// report names the exact build.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("HARNESS_BRIDGE_COMMIT"),
    ")"
);

/// Plug code-agent CLIs into IM bots through LangBot's AgentRunner
/// Protocol v1 (the help names the built-in ones: [`about`]).
#[derive(Debug, Parser)]
#[command(name = "harness-bridge", version = VERSION, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// Folder of the embedded host store.
    #[arg(
        long,
        global = true,
        env = "HARNESS_BRIDGE_DATA_DIR",
        value_parser = absolute_path,
        value_name = "DIR"
    )]
    data_dir: Option<PathBuf>,

    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List and show the harness adapter specs in force.
    #[command(subcommand)]
    Adapters(adapters::AdaptersCommand),
    /// Check AgentRunContext documents.
    #[command(subcommand)]
    Context(context::ContextCommand),
    /// Inspect the host store (the data folder's, another folder, or a
    /// PostgreSQL store): history, state, audit.
    Host(host::HostArgs),
    /// Prepare a PostgreSQL store for `serve`: apply the schema it lacks
    /// (serve does this at start too, under a lock).
    Migrate(host::MigrateArgs),
    /// Print the runner discovery JSON (AgentRunnerDiscovery) for a host:
    /// one runner per harness in force.
    Manifest {
        /// A folder of harness specs (`*.yaml`) to add to the built-in ones
        /// (one of the same name replaces it), as `run --adapters` takes.
        #[arg(long, value_name = "DIR")]
        adapters: Option<std::path::PathBuf>,
    },
    /// Print a one-time link to a running `serve`'s console: opened once
    /// within minutes, its tab has a session, with no token to type.
    ConsoleLink(console_link::ConsoleLinkArgs),
    /// Print the codes a `run.failed` may carry, as a JSON array: the one
    /// list the LangBot plugin's own copy is generated from
    /// (`scripts/langbot-runners`).
    FailureCodes,
    /// Run one turn through a harness on the embedded host: results stream
    /// to stdout, and the next turn resumes the same session.
    #[command(after_help = run::AFTER_HELP)]
    Run(Box<run::RunArgs>),
    /// Serve a host plugin over stdio: runs in, results and host API calls
    /// out (the LangBot relay plugin starts this).
    #[command(after_help = relay::AFTER_HELP)]
    Relay(relay::RelayArgs),
    /// Serve the bridge over HTTP: runs queued per conversation, streamed
    /// results, cancel, graceful shutdown.
    #[command(after_help = serve::AFTER_HELP)]
    Serve(serve::ServeArgs),
    /// Say which protections every harness gets on this machine (the
    /// cage: files, network, processes; containment) and what is missing.
    /// Exits 3 when the cage is on but cannot be built here.
    Doctor {
        /// The service's bridge.yaml, for its `cage:` settings.
        #[arg(long, value_parser = absolute_path, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Write a run's workspace for a harness without launching it, and list
    /// the files written: exactly what the harness will get.
    Project(project::ProjectArgs),
    /// Serve the run's host tools on stdio, relaying to the bridge's MCP
    /// server: what a harness launches when it prefers a stdio MCP server.
    /// Reads LANGBOT_MCP_URL and LANGBOT_MCP_TOKEN, which the bridge sets in
    /// every harness's environment; the token goes only to http:// on a
    /// loopback address.
    McpStdio,
}

/// The runtime a command drives its work on, or the exit code after
/// saying why not.
fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    build_runtime(Some(2))
}

/// A multi-thread runtime with `workers` (`None`: one per core).
fn build_runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime, CliError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))
}

/// The runtime of a long-running service: a worker per core (or
/// `TOKIO_WORKER_THREADS`), since every turn's reading, decoding and
/// relaying runs on them and a busy `serve` on many cores would
/// otherwise queue behind two.
fn service_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    // Read here, not by tokio, which panics on a value it cannot use.
    let workers = std::env::var_os(WORKERS_ENV)
        .map(|value| {
            value
                .to_str()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| (1..=MAX_WORKERS).contains(n))
                .ok_or_else(|| {
                    CliError::usage(format!(
                        "{WORKERS_ENV} is `{}`; it must be a number of threads from 1 to {MAX_WORKERS}",
                        value.to_string_lossy()
                    ))
                })
        })
        .transpose()?;
    build_runtime(workers)
}

/// The variable that sets a service's runtime workers (tokio's own name).
const WORKERS_ENV: &str = "TOKIO_WORKER_THREADS";
/// More workers than this is a typing error, not a machine.
const MAX_WORKERS: usize = 1024;

/// The embedded store and a runtime to drive it, or the exit code after
/// saying why not: what every store-backed command starts with.
fn open_store(
    data_dir: &std::path::Path,
) -> Result<(tokio::runtime::Runtime, crate::host::sqlite::SqliteHost), CliError> {
    let runtime = runtime()?;
    let store = crate::host::sqlite::SqliteHost::open(data_dir).map_err(CliError::failure)?;
    Ok((runtime, store))
}

/// Contain every turn this command runs (`harness::cage`): choose the
/// mechanism and end what bridges killed outright left behind; or the exit
/// code after saying why turns cannot be contained.
fn contain() -> Result<(), CliError> {
    crate::harness::cage::start()
        .map(drop)
        .map_err(CliError::failure)
}

/// Run `command` (which runs turns) contained, and end whatever its turns
/// left when it is done.
fn contained(command: impl FnOnce() -> Outcome) -> Outcome {
    contain()?;
    let outcome = command();
    crate::harness::cage::release();
    outcome
}

/// `failure-codes`: every failure code this build produces.
fn failure_codes() -> Outcome {
    let codes: Vec<&str> = crate::protocol::FailureCode::ALL
        .iter()
        .map(crate::protocol::FailureCode::as_str)
        .collect();
    out!("{}", serde_json::Value::from(codes));
    Ok(exit::OK)
}

/// `manifest`: the discovery JSON for the specs in force.
fn manifest(adapters: Option<&std::path::Path>) -> Outcome {
    let adapters = load_adapters(adapters)?;
    let json = serde_json::to_string_pretty(&crate::harness::discovery(&adapters))
        .map_err(|e| CliError::failure(format!("cannot render the manifest: {e}")))?;
    out!("{json}");
    Ok(exit::OK)
}

/// The adapter specs in force: built-in, plus an operator folder; a bad
/// spec is reported (file, line, reason) and gives the exit code.
fn load_adapters(dir: Option<&std::path::Path>) -> Result<crate::harness::Adapters, CliError> {
    match dir {
        Some(dir) => crate::harness::Adapters::load(dir).map_err(CliError::invalid),
        None => Ok(crate::harness::Adapters::builtin().clone()),
    }
}

/// The operator's extra MCP servers from a YAML (or JSON) file mapping a
/// name to `{command, args, env}` or `{url, headers}`; none without a file.
/// A bad file is reported (file, line, reason) and gives the exit code.
fn load_mcp_servers(
    file: Option<&std::path::Path>,
) -> Result<crate::projection::McpCatalog, CliError> {
    let Some(file) = file else {
        return Ok(Default::default());
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::failure(format!("cannot read {}: {e}", file.display())))?;
    let catalog: crate::projection::McpCatalog = serde_yaml::from_str(&text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(":{}", l.line()))
            .unwrap_or_default();
        CliError::invalid(format!("{}{at}: {e}", file.display()))
    })?;
    crate::projection::check_mcp_catalog(&catalog)
        .map_err(|e| CliError::invalid(format!("{}: {e}", file.display())))?;
    Ok(catalog)
}

/// The templates in force: built-in, or an operator folder's overrides; a
/// broken one is reported and gives the exit code.
fn load_templates(dir: Option<&std::path::Path>) -> Result<crate::projection::Templates, CliError> {
    crate::projection::Templates::load(dir).map_err(CliError::invalid)
}

/// Start the threads harness processes are cloned from before a service
/// opens its stores and sockets, so each child's own part of the
/// descriptor table stays small however many turns run.
fn spawners_ready() -> Result<(), CliError> {
    crate::harness::spawn::ready()
        .map_err(|e| CliError::failure(format!("cannot start harness processes: {e}")))
}

/// A token cancelled by SIGTERM or Ctrl-C: how long-running commands
/// learn to stop.
fn stop_on_signal() -> tokio_util::sync::CancellationToken {
    stop_and_hurry_on_signal().0
}

/// Two tokens: the first signal (SIGTERM or Ctrl-C) cancels the first
/// (stop gracefully), a second one the second (stop now: an operator who
/// presses Ctrl-C twice does not want to wait out the grace).
fn stop_and_hurry_on_signal() -> (
    tokio_util::sync::CancellationToken,
    tokio_util::sync::CancellationToken,
) {
    let (stop, hurry) = (
        tokio_util::sync::CancellationToken::new(),
        tokio_util::sync::CancellationToken::new(),
    );
    let (on_stop, on_hurry) = (stop.clone(), hurry.clone());
    // Registered here, before the caller says it is ready: a signal that
    // comes at once is a stop, not the default death by signal.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    tokio::spawn(async move {
        let mut signal = async || {
            let term = async {
                match term.as_mut() {
                    Some(term) => term.recv().await,
                    None => std::future::pending().await,
                }
            };
            let interrupt = async {
                match interrupt.as_mut() {
                    Some(interrupt) => interrupt.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term => "SIGTERM",
                _ = interrupt => "SIGINT",
            }
        };
        let first = signal().await;
        tracing::info!(
            signal = first,
            "stopping: no new turns; running ones get their grace to finish (a second signal cancels them)"
        );
        on_stop.cancel();
        signal().await;
        tracing::warn!("second signal: cancelling every run now");
        on_hurry.cancel();
    });
    (stop, hurry)
}

/// A path from the command line, made absolute against the working
/// directory once, here: it reaches harnesses that run elsewhere (their
/// workspace), which would read a relative one from there.
fn absolute_path(text: &str) -> Result<PathBuf, String> {
    if text.is_empty() {
        return Err("an empty path".into());
    }
    std::path::absolute(text).map_err(|e| format!("cannot make `{text}` absolute: {e}"))
}

/// Run a store-backed command in the data folder, or say why there is none.
fn in_data_dir(
    flag: Option<PathBuf>,
    command: impl FnOnce(&std::path::Path) -> Outcome,
) -> Outcome {
    let dir = data_dir(flag).map_err(CliError::failure)?;
    private_folder(&dir).map_err(CliError::failure)?;
    command(&dir)
}

/// Why a folder for the bridge's data cannot be had private: the command
/// stops rather than write where other users could read.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// It does not exist and cannot be made.
    #[error("cannot create {}: {source}", dir.display())]
    Create {
        /// The folder.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Its mode cannot be read.
    #[error("cannot inspect {}: {source}", dir.display())]
    Inspect {
        /// The folder.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Other users may read or enter it, and its mode cannot be changed.
    #[error(
        "{} can be read by other users ({mode:o}) and cannot be made private: {source}",
        dir.display()
    )]
    Exposed {
        /// The folder.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Make sure a folder that holds transcripts, state, secrets or
/// workspaces exists and is the owner's alone (0700): created so, or put
/// right (with a warning) when another user could read or write it. What
/// is inside then needs no mode of its own to be private; new files are
/// 0600 anyway (the process's umask). Others may only pass through where
/// a root bridge's caged harnesses must (0711, `cage::open_to_harnesses`).
pub(crate) fn private_folder(dir: &std::path::Path) -> Result<(), FolderError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let folder = || dir.to_path_buf();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| FolderError::Create {
            dir: folder(),
            source,
        })?;
    let mode = std::fs::metadata(dir)
        .map_err(|source| FolderError::Inspect {
            dir: folder(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o066 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| FolderError::Exposed {
                dir: folder(),
                mode: mode & 0o777,
                source,
            },
        )?;
        tracing::warn!(
            folder = %dir.display(),
            "the folder could be read by other users (mode {:o}); it is now 0700",
            mode & 0o777
        );
    }
    Ok(())
}

/// Resolve the data folder: flag or env var, then XDG, then `~/.local/share`.
fn data_dir(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(dir) = flag {
        return Ok(dir);
    }
    let nonempty = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = if let Some(xdg) = nonempty("XDG_DATA_HOME") {
        xdg.join("harness-bridge")
    } else if let Some(home) = nonempty("HOME") {
        home.join(".local/share/harness-bridge")
    } else {
        return Err(
            "no data folder: pass --data-dir, or set HARNESS_BRIDGE_DATA_DIR or HOME".into(),
        );
    };
    std::path::absolute(&dir).map_err(|e| format!("cannot make {} absolute: {e}", dir.display()))
}

/// Parse arguments, run the command, and map the outcome to an exit code.
pub fn main() -> ExitCode {
    // Everything the bridge and its harnesses create (store, journal,
    // workspaces, tokens) is the owner's alone.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let parsed = Cli::command()
        .about(about())
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    // A service's operator wants to see turns start and end; a one-shot
    // command keeps stderr for warnings. The MCP library's own notes (three
    // a session, outside any run) are not the operator's news.
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info,rmcp=warn"
    } else {
        "warn"
    };
    logging::init(cli.log_format, default_level);
    let outcome = match cli.command {
        Command::Adapters(cmd) => adapters::run(cmd),
        Command::Context(cmd) => context::run(cmd),
        Command::Manifest { adapters } => manifest(adapters.as_deref()),
        Command::FailureCodes => failure_codes(),
        Command::Doctor { config } => {
            cage::doctor(config.as_deref(), data_dir(cli.data_dir).ok().as_deref())
        }
        Command::Host(args) => in_data_dir(cli.data_dir, |dir| host::run(args, dir)),
        Command::Migrate(args) => data_dir(cli.data_dir)
            .map_err(CliError::failure)
            .and_then(|dir| host::migrate(args, &dir)),
        Command::McpStdio => mcp_stdio(),
        Command::Run(args) => in_data_dir(cli.data_dir, |dir| contained(|| run::run(*args, dir))),
        Command::Relay(args) => {
            in_data_dir(cli.data_dir, |dir| contained(|| relay::run(args, dir)))
        }
        Command::Serve(args) => in_data_dir(cli.data_dir, |dir| serve::run(args, dir)),
        Command::ConsoleLink(args) => data_dir(cli.data_dir)
            .map_err(CliError::failure)
            .and_then(|dir| console_link::run(args, &dir)),
        Command::Project(args) => data_dir(cli.data_dir)
            .map_err(CliError::failure)
            .and_then(|dir| project::run(args, &dir)),
    };
    ExitCode::from(outcome.unwrap_or_else(CliError::report))
}

/// `mcp-stdio`: the run's host tools on stdio, for a harness that prefers
/// a stdio MCP server.
fn mcp_stdio() -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let done = runtime.block_on(crate::mcp::run_stdio_shim());
    // The stdin reader blocks a runtime thread until input arrives; do not
    // wait for it, so the shim exits as soon as it is done.
    runtime.shutdown_background();
    done.map(|()| exit::OK).map_err(CliError::failure)
}
