//! The cage flags `run` and `relay` share (`serve` reads the same policy
//! from `bridge.yaml`'s `cage:`): one declaration, one start-up line.

use std::path::PathBuf;

use clap::Args;

use crate::harness::cage::{CagePolicy, Limits, Network, Resource};

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
    /// Memory of each conversation's processes together, in MiB (0: no
    /// limit). Past it the kernel kills one and the turn fails
    /// `resource_limit`.
    #[arg(long = "memory-mb", value_name = "MIB", default_value_t = Limits::default().memory_mb)]
    memory_mb: u64,
    /// Processes and threads of each conversation together (0: no limit).
    /// Past it a fork is refused and the turn fails `resource_limit`.
    #[arg(long = "max-processes", value_name = "N", default_value_t = Limits::default().processes)]
    max_processes: u64,
    /// CPU of each conversation, in percent of one core (100: one core;
    /// 0: no limit).
    #[arg(long = "cpu-percent", value_name = "PERCENT", default_value_t = Limits::default().cpu_percent)]
    cpu_percent: u64,
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
            limits: Limits {
                memory_mb: self.memory_mb,
                processes: self.max_processes,
                cpu_percent: self.cpu_percent,
            },
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
    match crate::harness::cage::limits_status(&policy.limits) {
        Ok((true, line)) => tracing::info!("limits: {line}"),
        Ok((false, line)) => tracing::warn!("limits: {line}"),
        // Containment failing stops the command with its own message.
        Err(_) => {}
    }
    if let Some(line) = crate::harness::cage::slow_launches() {
        tracing::info!("launches: {line}");
    }
    for resource in Resource::ALL {
        crate::metrics::global().set_limit_enforced(
            resource.name(),
            policy.limits.of(resource) > 0 && crate::harness::cage::can_limit(resource),
        );
    }
}

/// `doctor`: which protections a harness gets here, and what is missing.
pub fn doctor(config: Option<&std::path::Path>) -> super::error::Outcome {
    let policy = match config {
        Some(file) => {
            crate::serve::ServeConfig::load(Some(file))
                .map_err(super::error::CliError::invalid)?
                .cage
        }
        None => CagePolicy::default(),
    };
    println!("cage: {}", policy.describe());
    match crate::harness::cage::mechanism() {
        Ok(mechanism) => println!("containment: {}", mechanism.describe()),
        Err(e) => println!("containment: none ({e})"),
    }
    if let Ok((_, line)) = crate::harness::cage::limits_status(&policy.limits) {
        println!("limits: {line}");
    }
    if let Some(line) = crate::harness::cage::slow_launches() {
        println!("launches: {line}");
    }
    crate::harness::cage::release();
    if policy.enabled && crate::harness::cage::unavailable().is_some() {
        return Ok(super::exit::FAILURE);
    }
    Ok(super::exit::OK)
}
