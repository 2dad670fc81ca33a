//! The cage flags `run` and `relay` share (`serve` reads the same policy
//! from `bridge.yaml`'s `cage:`): one declaration, one start-up line.

use std::path::{Path, PathBuf};

use clap::Args;

use super::error::{CliError, Outcome};
use super::exit;
use crate::harness::cage::{CagePolicy, Limits, Network, Resource};

/// How harnesses are caged (see README, "Security").
#[derive(Debug, Args, Default)]
pub struct CageArgs {
    /// Run harnesses uncaged: each reaches whatever this user reaches
    /// (other conversations, the store, the network). Logged at start.
    #[arg(long)]
    uncaged: bool,
    /// `isolated` (the default): a network namespace of its own, whose one
    /// way out is the bridge's door (the MCP endpoint, the model gateway
    /// that holds the keys, and a proxy to --allow-host destinations);
    /// where none can be made here, `ports`, said at start. `ports`: a
    /// harness connects only to its model endpoints' ports (from the URLs
    /// it is configured with; HTTPS otherwise), the MCP endpoint and
    /// --allow-port, and holds the keys; `open`: any TCP port.
    #[arg(long, value_name = "isolated|ports|open", value_parser = parse_network)]
    network: Option<Network>,
    /// With `--network isolated`: a destination harnesses may reach
    /// through their door's proxy (`example.org`, `*.example.org`,
    /// `example.org:8443`; no port: 80 and 443), never at a private
    /// address. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]", value_parser = parse_host_rule)]
    allow_host: Vec<String>,
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
    /// Disk each conversation's files may take, in MiB (0: no limit),
    /// measured after each turn: past it the turn fails `resource_limit`
    /// and the next one may remove files.
    #[arg(long = "disk-mb", value_name = "MIB", default_value_t = Limits::default().disk_mb)]
    disk_mb: u64,
}

fn parse_host_rule(text: &str) -> Result<String, String> {
    let rules = crate::harness::cage::Egress {
        allow: vec![text.to_string()],
        deny: Vec::new(),
        ..Default::default()
    };
    rules
        .check_rules()
        .map(|()| text.to_string())
        .map_err(|e| e.0)
}

fn parse_network(text: &str) -> Result<Network, String> {
    match text {
        "ports" => Ok(Network::Ports),
        "open" => Ok(Network::Open),
        "isolated" => Ok(Network::Isolated),
        other => Err(format!("`{other}`: it must be ports, open or isolated")),
    }
}

impl CageArgs {
    /// Whether `--network` was given: the operator's choice, kept even
    /// where it cannot be had (a turn then fails saying why).
    pub fn network_chosen(&self) -> bool {
        self.network.is_some()
    }

    /// The policy these flags say.
    pub fn policy(&self) -> CagePolicy {
        CagePolicy {
            enabled: !self.uncaged,
            network: self.network.unwrap_or_default(),
            ports: self.allow_port.clone(),
            read_only: self.read_only.clone(),
            read_write: self.read_write.clone(),
            limits: Limits {
                memory_mb: self.memory_mb,
                disk_mb: self.disk_mb,
                processes: self.max_processes,
                cpu_percent: self.cpu_percent,
            },
            egress: crate::harness::cage::Egress {
                allow: self.allow_host.clone(),
                deny: Vec::new(),
                ..Default::default()
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
    if let Some(line) = user_line(policy) {
        tracing::warn!("user: {line}");
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

/// With `network: isolated` (the default), whether harnesses can have a
/// network of their own here, tried once at start. Where they cannot and
/// `chosen` is false, they get `ports` instead for as long as the bridge
/// runs, said with the fix; a chosen `isolated` stays, and a turn fails
/// saying why.
pub fn settle_network(policy: &mut CagePolicy, chosen: bool) {
    if !(policy.enabled && policy.network == Network::Isolated) {
        return;
    }
    // On a thread of its own: the callers may be inside a runtime.
    let works = std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .and_then(|runtime| runtime.block_on(crate::harness::cage::own_network_works()))
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the probe did not finish")));
    match works {
        Ok(()) => tracing::debug!("network: each harness has a network of its own"),
        Err(why) if chosen => tracing::warn!(
            "network: harnesses cannot have a network of their own here, so none can start: {why}"
        ),
        Err(why) => {
            policy.network = Network::Ports;
            tracing::warn!(
                "network: harnesses cannot have a network of their own here, so they connect \
                 to their model endpoints' ports instead, holding the model keys: {why}"
            );
        }
    }
}

/// `doctor`: which protections a harness gets here, and what is missing;
/// with the service's settings, where it keeps things and whether the
/// harnesses they route to can start (`data_dir`: the data folder, when
/// one can be named).
pub fn doctor(
    config: Option<&std::path::Path>,
    data_dir: Option<&std::path::Path>,
) -> super::error::Outcome {
    let loaded = match config {
        Some(file) => Some(
            crate::serve::ServeConfig::load(Some(file)).map_err(super::error::CliError::invalid)?,
        ),
        None => None,
    };
    let policy = loaded
        .as_ref()
        .map_or_else(CagePolicy::default, |config| config.cage.clone());
    println!("cage: {}", policy.describe());
    if let Some(line) = user_line(&policy) {
        println!("user: {line}");
    }
    if let (Some(config), Some(data_dir)) = (&loaded, data_dir) {
        println!("where: {}", config.places(data_dir));
        let adapters = super::load_adapters(config.adapters.as_deref())?;
        let root = config.workspace_root(data_dir);
        for check in crate::serve::check_programs(config, &adapters, &root) {
            println!("harness: {}", check.line());
        }
    }
    if let Some(config) = &loaded {
        let runtime = super::runtime()?;
        for (name, spec) in &config.projects {
            if let Some(said) = runtime.block_on(crate::repo::credentials_in(&spec.repository)) {
                println!("project {name}: {said}");
            }
        }
    }
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
    let own_network = super::runtime()?.block_on(crate::harness::cage::own_network_works());
    println!("network: {}", network_line(own_network.as_ref().err()));
    let behind_door = policy.enabled && policy.network == Network::Isolated && own_network.is_ok();
    let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    for line in super::sign_in::lines(loaded.as_ref(), &env, behind_door) {
        println!("sign-in: {line}");
    }
    crate::harness::cage::release();
    if policy.enabled && crate::harness::cage::unavailable().is_some() {
        return Ok(super::exit::FAILURE);
    }
    Ok(super::exit::OK)
}

/// Whether a harness can have a network of its own here (`why` not), in
/// a line.
fn network_line(why: Option<&std::io::Error>) -> String {
    match why {
        None => format!(
            "a harness can have a network of its own here (`cage.network: isolated`: its one way out the bridge's door on 127.0.0.1:{}, which holds the model keys)",
            crate::harness::cage::DOOR_PORT
        ),
        Some(why) => format!(
            "a harness cannot have a network of its own here, so under the default (`cage.network: isolated`) harnesses get `ports`: they connect to their model endpoints' ports and hold the model keys: {why}"
        ),
    }
}

/// What the operator should hear of the user a root bridge's harnesses
/// are outside their namespace, when it is `nobody`: other programs may
/// run as it, and its workspaces are its own.
pub fn user_line(policy: &CagePolicy) -> Option<String> {
    let owner = policy.owner().filter(|owner| !owner.is_own_account())?;
    Some(format!(
        "harnesses run as {} outside their namespace, which other programs of this machine may \
         run as too (and so reach the workspaces it owns): make the account {} for them alone \
         (`systemd-sysusers` with packaging/harness-bridge.sysusers, or `useradd --system \
         --no-create-home --shell /usr/sbin/nologin {}`) and restart",
        owner.describe(),
        crate::owner::CAGE_ACCOUNT,
        crate::owner::CAGE_ACCOUNT
    ))
}

/// The folders that lead to the workspaces, open to pass through (0711)
/// for a root bridge's caged harnesses, which are another user outside
/// their namespace ([`crate::owner`]): the data folder (when it holds
/// them) and the workspaces' root. Refused, with the folder in the way
/// named, when they cannot reach their workspaces whatever the bridge
/// does (a home folder shut to others above the data folder).
pub fn open_to_harnesses(policy: &CagePolicy, data_dir: &Path, root: &Path) -> Outcome {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(owner) = policy.owner() else {
        return Ok(exit::OK);
    };
    super::private_folder(root).map_err(CliError::failure)?;
    let passable = |dir: &Path| -> std::io::Result<()> {
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o711))?;
        }
        Ok(())
    };
    // The root, and every folder above it up to the data folder when it
    // is there (the bridge's own folders).
    let root_real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let data_real = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let folders: Vec<&Path> = match root_real.starts_with(&data_real) {
        true => root_real
            .ancestors()
            .take_while(|dir| dir.starts_with(&data_real))
            .collect(),
        false => vec![root],
    };
    for dir in folders {
        passable(dir).map_err(|e| {
            CliError::failure(format!(
                "cannot open {} to pass through: {e}",
                dir.display()
            ))
        })?;
    }
    // What the operator lets harnesses read or write, they must reach as
    // their own user: said now, with the fix, rather than by a failing
    // tool in a turn.
    let listed = policy
        .read_only
        .iter()
        .map(|path| (path, crate::owner::Want::Read))
        .chain(
            policy
                .read_write
                .iter()
                .map(|path| (path, crate::owner::Want::Write)),
        );
    for (path, want) in listed {
        if let Some(blocked) = owner.cannot_reach(path, want) {
            tracing::warn!(
                "cage: {} is listed for harnesses, which run as {} outside their namespace: {blocked}; \
                 give it to that user or let every user {}",
                path.display(),
                owner.describe(),
                blocked.what
            );
        }
    }
    owner.let_pass(root, "to reach its workspaces");
    match owner.cannot_reach(root, crate::owner::Want::Pass) {
        None => Ok(exit::OK),
        Some(blocked) => Err(CliError::invalid(format!(
            "harnesses run as {who} outside their namespace (the bridge runs as root) and \
             cannot reach their workspaces in {root}: {blocked}. Give the data folder \
             (--data-dir) or `workspace_root` a place other users may pass through, let \
             them pass (`chmod o+x` on that folder), or run the bridge as an ordinary user \
             (packaging/harness-bridge.service)",
            who = owner.describe(),
            root = root.display()
        ))),
    }
}
