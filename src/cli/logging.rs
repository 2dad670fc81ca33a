//! Logging setup: tracing to stderr, filtered by `RUST_LOG`, so stdout
//! stays clean for the JSON a command prints.

use tracing_subscriber::EnvFilter;

use super::LogFormat;

/// `default_level` applies when `RUST_LOG` is unset.
pub fn init(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not for a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // A second init (tests calling main twice) is harmless: keep the first.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
