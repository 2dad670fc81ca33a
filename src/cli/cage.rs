//! The cage flags `run` and `relay` share (`serve` reads the same policy
//! from `bridge.yaml`'s `cage:`): one declaration, one start-up line.

use std::path::PathBuf;

use clap::Args;

use crate::harness::cage::{CagePolicy, Network};

/// How harnesses are caged (see README, "Security").
#[derive(Debug, Args, Default)]
pub struct CageArgs {
    /// Run harnesses uncaged: each reaches whatever this user reaches
    /// (other conversations, the store, the network). Logged at start.
    #[arg(long)]
    uncaged: bool,
    /// `ports`: a harness connects only to its model endpoints' ports
    /// (from the URLs it is configured with; HTTPS otherwise), the MCP
    /// endpoint and --allow-port; `open`: any TCP port.
    #[arg(long, value_name = "ports|open", default_value = "ports", value_parser = parse_network)]
    network: Network,
    /// Also let harnesses connect to this TCP port. Repeatable.
    #[arg(long = "allow-port", value_name = "PORT")]
    allow_port: Vec<u16>,
    /// Also let harnesses read this folder or file. Repeatable.
    #[arg(long = "read-only", value_parser = super::absolute_path, value_name = "PATH")]
    read_only: Vec<PathBuf>,
    /// Also let harnesses write this folder, which every conversation then
    /// shares. Repeatable.
    #[arg(long = "read-write", value_parser = super::absolute_path, value_name = "PATH")]
    read_write: Vec<PathBuf>,
}

fn parse_network(text: &str) -> Result<Network, String> {
    match text {
        "ports" => Ok(Network::Ports),
        "open" => Ok(Network::Open),
        other => Err(format!("`{other}`: it must be ports or open")),
    }
}

impl CageArgs {
    /// The policy these flags say.
    pub fn policy(&self) -> CagePolicy {
        CagePolicy {
            enabled: !self.uncaged,
            network: self.network,
            ports: self.allow_port.clone(),
            read_only: self.read_only.clone(),
            read_write: self.read_write.clone(),
        }
    }
}

/// Say at start which protections are in force (a warning when none).
pub fn announce(policy: &CagePolicy) {
    let line = policy.describe();
    if policy.enabled && crate::harness::cage::unavailable().is_none() {
        tracing::info!("cage: {line}");
    } else {
        tracing::warn!("cage: {line}");
    }
}

/// `doctor`: which protections a harness gets here, and what is missing.
pub fn doctor(config: Option<&std::path::Path>) -> u8 {
    let policy = match config {
        Some(file) => match crate::serve::ServeConfig::load(Some(file)) {
            Ok(config) => config.cage,
            Err(e) => {
                eprintln!("error: {e}");
                return super::exit::INVALID;
            }
        },
        None => CagePolicy::default(),
    };
    println!("cage: {}", policy.describe());
    match crate::harness::cage::mechanism() {
        Ok(mechanism) => println!("containment: {}", mechanism.describe()),
        Err(e) => println!("containment: none ({e})"),
    }
    crate::harness::cage::release();
    if policy.enabled && crate::harness::cage::unavailable().is_some() {
        return super::exit::FAILURE;
    }
    super::exit::OK
}
