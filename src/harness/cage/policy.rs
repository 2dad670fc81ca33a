//! The operator's cage policy (`bridge.yaml`'s `cage:`, the `run` and
//! `relay` flags) and the [`Plan`] it gives one harness process: caged by
//! default, the network limited to the ports the harness is configured to
//! reach, and uncaged only when the operator says so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::egress::Egress;
use super::limits::Limits;
use super::wall::{self, Plan};

/// Whether a harness may connect anywhere or only to listed ports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Only the ports of the model endpoints the harness is configured
    /// with (HTTPS when none is), the bridge's MCP endpoint and `ports`.
    Ports,
    /// Any TCP port (file and process walls stay).
    Open,
    /// A network namespace of its own: nothing but its own loopback and
    /// the bridge's door in it (the run's MCP endpoint, the model
    /// gateway, which holds the operator's keys so the harness never
    /// does); no new unix socket. The default.
    #[default]
    Isolated,
}

/// How harnesses are caged.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CagePolicy {
    /// `false` runs harnesses uncaged: every conversation's agent reaches
    /// what the bridge's user reaches. Logged at start.
    pub enabled: bool,
    /// `isolated` (default), `ports` or `open`.
    pub network: Network,
    /// More TCP ports a harness may connect to (with `network: ports`).
    pub ports: Vec<u16>,
    /// More folders or files a harness may read (tools, data it needs).
    pub read_only: Vec<PathBuf>,
    /// Folders a harness may also write: shared between conversations,
    /// so only for what the operator means every conversation to share.
    pub read_write: Vec<PathBuf>,
    /// Memory, processes and CPU of each conversation's processes
    /// together (`harness::cage::limits`); apply caged or not.
    pub limits: Limits,
    /// Where a harness in a network of its own may connect through its
    /// door's proxy (`network: isolated`).
    pub egress: Egress,
}

impl Default for CagePolicy {
    fn default() -> Self {
        CagePolicy {
            enabled: true,
            network: Network::Isolated,
            ports: Vec::new(),
            read_only: Vec::new(),
            read_write: Vec::new(),
            limits: Limits::default(),
            egress: Egress::default(),
        }
    }
}

/// What one harness launch is, as the cage sees it.
#[derive(Debug)]
pub struct Subject<'a> {
    /// The conversation's workspace (its home and temp folder inside).
    pub workspace: &'a Path,
    /// The program about to run.
    pub program: &'a Path,
    /// Its complete environment: the URLs in it are where it connects.
    pub env: &'a BTreeMap<String, String>,
    /// Files of the operator's that the harness is given to read (its
    /// carried settings and credentials); the URLs in them count too.
    pub carried: &'a [PathBuf],
    /// The paths its command line names (a script its interpreter runs).
    pub named: &'a [PathBuf],
    /// The port it is told to serve itself on (`{own_port}`), if any.
    pub own_port: Option<u16>,
    /// What its conversation's project lets it read and write besides the
    /// workspace (the repository's git folder: objects, refs, its record).
    pub project: (&'a [PathBuf], &'a [PathBuf]),
}

impl CagePolicy {
    /// Who a caged harness is outside its namespace when that is not the
    /// bridge's own user (a root bridge's): what it must write is given
    /// to it. `None` uncaged, or for an ordinary user's bridge.
    pub fn owner(&self) -> Option<&'static crate::owner::Owner> {
        self.enabled.then(crate::owner::of_cage).flatten()
    }

    /// The wall for `subject`, or `None` when the operator runs harnesses
    /// uncaged.
    pub fn plan(&self, subject: &Subject<'_>) -> Option<Plan> {
        if !self.enabled {
            return None;
        }
        let mut read_only: Vec<PathBuf> =
            wall::SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
        // The harness's installation and the programs on its PATH (a node
        // the CLI runs on), but never a folder that holds the workspace
        // (`/`, a home the data folder is in): that would open every
        // conversation and the store to reading.
        let workspace = subject
            .workspace
            .canonicalize()
            .unwrap_or_else(|_| subject.workspace.to_path_buf());
        let beside = |dir: &PathBuf| {
            let real = dir.canonicalize().unwrap_or_else(|_| dir.clone());
            !workspace.starts_with(&real)
        };
        read_only.extend(
            self.needs(subject)
                .iter()
                .map(|path| wall::installation(path))
                .chain(
                    subject
                        .env
                        .get("PATH")
                        .into_iter()
                        .flat_map(std::env::split_paths)
                        .filter(|dir| dir.is_absolute()),
                )
                .filter(beside),
        );
        // The bridge itself: harnesses start it as their stdio MCP server.
        if let Ok(me) = std::env::current_exe() {
            read_only.push(me);
        }
        read_only.extend(subject.carried.iter().cloned());
        read_only.extend(self.read_only.iter().cloned());
        read_only.extend(subject.project.0.iter().cloned());

        let mut read_write = vec![subject.workspace.to_path_buf()];
        read_write.extend(wall::SYSTEM_READ_WRITE.iter().map(PathBuf::from));
        read_write.extend(self.read_write.iter().cloned());
        read_write.extend(subject.project.1.iter().cloned());

        // In a namespace of its own every port is its own loopback's.
        let connect = match self.network {
            Network::Open | Network::Isolated => None,
            Network::Ports => Some(self.ports_for(subject)),
        };
        Some(Plan {
            read_write,
            read_only,
            connect,
            bind: subject.own_port.into_iter().collect(),
            own_network: self.network == Network::Isolated,
        })
    }

    /// What `subject`'s harness must read to start: its program, the
    /// interpreter of a script, the files its command line names.
    pub fn needs(&self, subject: &Subject<'_>) -> Vec<PathBuf> {
        super::start::needs(
            subject.program,
            subject.named,
            subject.env.get("PATH").map(String::as_str),
        )
    }

    /// The TCP ports a harness may reach with `network: ports`: those of
    /// the URLs in its environment and carried files (the model
    /// endpoints, a proxy, the bridge's MCP endpoint), HTTPS when no
    /// other endpoint is set, and the operator's.
    fn ports_for(&self, subject: &Subject<'_>) -> BTreeSet<u16> {
        let carried: Vec<String> = subject
            .carried
            .iter()
            .filter_map(|file| {
                let meta = std::fs::metadata(file).ok()?;
                (meta.is_file() && meta.len() <= MAX_SCANNED_BYTES)
                    .then(|| std::fs::read_to_string(file).ok())
                    .flatten()
            })
            .collect();
        let mut ports = wall::url_ports(
            subject
                .env
                .values()
                .map(String::as_str)
                .chain(carried.iter().map(String::as_str)),
        );
        ports.insert(443);
        ports.extend(&self.ports);
        ports.extend(subject.own_port);
        ports
    }

    /// One line for the start-up log and the runners listing: which
    /// protections are in force.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "uncaged (cage.enabled: false): every harness reaches what the bridge's user reaches"
                .into();
        }
        if let Some(why) = wall::unavailable() {
            return format!("caged, but {why}: no harness can start");
        }
        let network = match self.network {
            Network::Open => "any TCP port".to_string(),
            Network::Ports => "only its model endpoints' ports and the MCP endpoint".to_string(),
            Network::Isolated => format!(
                "nothing but its own loopback, in a network namespace of its own, and the bridge's door there (127.0.0.1:{}: the MCP endpoint and the model gateway, which holds the model keys); no unix socket outside it",
                super::door::DOOR_PORT
            ),
        };
        let user = match crate::owner::of_cage() {
            Some(owner) => format!(
                "; as uid {} in a user namespace, {} outside (never root)",
                wall::INSIDE_UID,
                owner.describe()
            ),
            None => String::new(),
        };
        format!(
            "caged (Landlock ABI {}): each harness writes only its conversation's workspace, reads the system and its installation, connects to {network}, signals and traces only what it started{user}",
            wall::kernel_abi()
        )
    }
}

/// Carried files larger than this are not read for URLs.
const MAX_SCANNED_BYTES: u64 = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_cages_to_the_endpoints_ports() {
        let policy = CagePolicy {
            network: Network::Ports,
            ..CagePolicy::default()
        };
        let env = BTreeMap::from([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "http://127.0.0.1:18010".to_string(),
            ),
            ("PATH".to_string(), "/usr/bin:relative".to_string()),
        ]);
        let plan = policy
            .plan(&Subject {
                workspace: Path::new("/data/ws/a"),
                program: Path::new("/usr/bin/true"),
                env: &env,
                carried: &[],
                named: &[],
                own_port: None,
                project: (&[], &[]),
            })
            .expect("caged");
        assert_eq!(plan.read_write[0], Path::new("/data/ws/a"));
        assert!(!plan.read_only.iter().any(|p| p == Path::new("relative")));
        assert_eq!(
            plan.connect.unwrap().into_iter().collect::<Vec<_>>(),
            vec![443, 18010]
        );
    }

    #[test]
    fn uncaged_and_open_are_the_operators_to_choose() {
        let off: CagePolicy = serde_yaml::from_str("enabled: false").unwrap();
        let env = BTreeMap::new();
        let subject = Subject {
            workspace: Path::new("/w"),
            program: Path::new("/usr/bin/true"),
            env: &env,
            carried: &[],
            named: &[],
            own_port: None,
            project: (&[], &[]),
        };
        assert!(off.plan(&subject).is_none());
        let open: CagePolicy = serde_yaml::from_str("network: open").unwrap();
        assert_eq!(open.plan(&subject).unwrap().connect, None);
        let wrong = serde_yaml::from_str::<CagePolicy>("network: closed").unwrap_err();
        assert!(wrong.to_string().contains("ports"), "{wrong}");
    }
}
