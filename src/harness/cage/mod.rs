//! Containment: every process a harness starts ends with its turn, even
//! one that left the harness's process group (`setsid`, `nohup … &`, a
//! double fork) — which the group kill alone does not reach.
//!
//! One mechanism per bridge process, chosen once ([`start`], or the first
//! harness launch): a **cgroup** per harness process where the system
//! lets the bridge make one below its own cgroup (`cgroup.kill` ends it
//! whole), else the bridge as **child subreaper**, which kills the
//! descendants that carry the turn's marker (`HARNESS_BRIDGE_TURN`, set
//! in every harness's environment). `HARNESS_BRIDGE_CONTAIN=cgroup|
//! subreaper|auto` forces one (for tests, and for systems where cgroups
//! misbehave); `cgroup` forced where it cannot work is an error.
//!
//! A bridge killed outright cannot clean up; what it leaves is ended by the
//! next bridge that starts ([`start`]): the cgroups of bridges that are
//! gone, found beside its own, and every process whose marker names a
//! bridge that is gone.

mod cgroup;
mod door;
mod egress;
mod limits;
mod marker;
mod policy;
mod procs;
mod start;
mod subreaper;
mod wall;

use std::collections::BTreeSet;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::spawn;

use crate::host::Holder;
pub use cgroup::CgroupError;
pub use door::DOOR_PORT;
pub use egress::{Ask, Egress, Verdict, is_public};
pub use limits::{Counters, Limits, Quota, Resource};
pub use marker::TURN_ENV;
use marker::{BridgeId, Marker};
pub use policy::{CagePolicy, Network, Subject};
pub use start::{Unreadable, unreadable};
pub use wall::{
    INSIDE_UID, NEEDED_ABI, Plan, SYSTEM_READ_ONLY, SYSTEM_READ_WRITE, USERNS_FIX,
    free_loopback_port, installation, kernel_abi, unavailable, url_ports,
};

/// The variable that chooses the mechanism: `cgroup`, `subreaper`, or
/// `auto` (the default: cgroup where it works).
pub const CONTAIN_ENV: &str = "HARNESS_BRIDGE_CONTAIN";

/// How a bridge keeps what a harness starts within its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// A cgroup v2 per harness process.
    Cgroup,
    /// The bridge as child subreaper, with a sweep by turn marker.
    Subreaper,
}

impl Mechanism {
    /// A sentence for `doctor` and the logs.
    pub fn describe(self) -> &'static str {
        match self {
            Mechanism::Cgroup => {
                "a cgroup per harness process: everything a harness starts ends with its turn"
            }
            Mechanism::Subreaper => {
                "the bridge as subreaper, swept by turn marker: everything a harness starts ends with its turn"
            }
        }
    }
}

/// The process-wide choice.
struct Cage {
    id: BridgeId,
    mechanism: Mechanism,
    /// The bridge's own cgroup, with the cgroup mechanism.
    tree: Option<cgroup::Tree>,
    /// Where per-conversation limits are set, if anywhere.
    limits: limits::Backend,
    next: AtomicU64,
}

/// Why no turn can be contained here: every command that runs turns
/// refuses to start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ContainError {
    /// `HARNESS_BRIDGE_CONTAIN` names no mechanism.
    #[error("HARNESS_BRIDGE_CONTAIN is `{0}`; it must be cgroup, subreaper or auto")]
    UnknownChoice(String),
    /// `cgroup` was asked for where the bridge cannot make one (why;
    /// shared, as the choice is kept for the process and cloned).
    #[error("HARNESS_BRIDGE_CONTAIN=cgroup, but {0}")]
    NoCgroup(#[source] Arc<cgroup::CgroupError>),
    /// Neither a cgroup nor the subreaper is available.
    #[error("cannot become a child subreaper: {0}")]
    NoSubreaper(#[source] nix::errno::Errno),
}

static CAGE: OnceLock<Result<Cage, ContainError>> = OnceLock::new();

fn cage() -> Result<&'static Cage, ContainError> {
    CAGE.get_or_init(|| choose(std::env::var(CONTAIN_ENV).ok().as_deref()))
        .as_ref()
        .map_err(Clone::clone)
}

fn choose(wanted: Option<&str>) -> Result<Cage, ContainError> {
    let forced = match wanted.map(str::trim) {
        None | Some("" | "auto") => None,
        Some("cgroup") => Some(Mechanism::Cgroup),
        Some("subreaper") => Some(Mechanism::Subreaper),
        Some(other) => return Err(ContainError::UnknownChoice(other.to_string())),
    };
    let id = BridgeId::current();
    let mut why_not = format!("{CONTAIN_ENV}=subreaper");
    if forced != Some(Mechanism::Subreaper) {
        match cgroup::own_dir().and_then(|own| cgroup::Tree::create(&own, &id)) {
            Ok(tree) => {
                tracing::info!(
                    cgroup = %tree.dir().display(),
                    "containment: a cgroup per harness process"
                );
                let limits = limits::Backend::choose(Some(tree.dir()), &id);
                return Ok(Cage {
                    id,
                    mechanism: Mechanism::Cgroup,
                    tree: Some(tree),
                    limits,
                    next: AtomicU64::new(1),
                });
            }
            Err(why) if forced == Some(Mechanism::Cgroup) => {
                return Err(ContainError::NoCgroup(Arc::new(why)));
            }
            Err(why) => why_not = why.to_string(),
        }
    }
    subreaper::enable().map_err(ContainError::NoSubreaper)?;
    tracing::info!(
        "containment: the bridge is the subreaper of its harnesses, swept by turn marker (not a cgroup: {why_not})"
    );
    let limits = limits::Backend::choose(None, &id);
    Ok(Cage {
        id,
        mechanism: Mechanism::Subreaper,
        tree: None,
        limits,
        next: AtomicU64::new(1),
    })
}

/// Choose the mechanism (once per process; logged), then end what bridges
/// that are gone left running. Every command that runs turns calls this
/// first; an error (a bad `HARNESS_BRIDGE_CONTAIN`, or `cgroup` forced
/// where it cannot work) means no turn can be contained.
pub fn start() -> Result<Mechanism, ContainError> {
    static SWEPT: OnceLock<()> = OnceLock::new();
    // A command that runs turns may move itself into a leaf cgroup to
    // hand the limits' controllers down (`limits::delegate_v2`).
    limits::REARRANGE.store(true, std::sync::atomic::Ordering::SeqCst);
    let cage = cage()?;
    SWEPT.get_or_init(|| {
        let mut killed = marker::sweep_gone(&cage.id);
        if let Some(tree) = &cage.tree {
            killed += cgroup::sweep_gone(tree.parent(), &cage.id);
        }
        killed += limits::sweep_gone(&cage.limits, &cage.id);
        if killed > 0 {
            tracing::warn!(
                killed,
                "killed processes left by a harness-bridge that died before its turns ended"
            );
        }
    });
    Ok(cage.mechanism)
}

/// The mechanism this process would contain turns with, without ending
/// anything (for `doctor`; [`release`] after).
pub fn mechanism() -> Result<Mechanism, ContainError> {
    cage().map(|cage| cage.mechanism)
}

/// When the bridge exits: remove its cgroup, or (subreaper) kill what it
/// adopted and could not tell apart — nothing a turn started outlives the
/// bridge that ran the turn.
pub fn release() {
    let Some(Ok(cage)) = CAGE.get() else {
        return;
    };
    let killed = match &cage.tree {
        Some(tree) => tree.remove(),
        None => subreaper::kill_descendants(),
    };
    cage.limits.release();
    if killed > 0 {
        tracing::warn!(killed, "killed processes still running as the bridge exits");
    }
}

/// Whether `limits` hold here, and the line that says by what (or why
/// not), for the start-up log, `doctor` and `/metrics`. An error when
/// turns cannot be contained at all.
pub fn limits_status(limits: &Limits) -> Result<(bool, String), ContainError> {
    cage().map(|cage| cage.limits.describe(limits))
}

/// When launches here wait for the kernel to move each harness into its
/// cgroup, a sentence saying so and what makes them quick; `None` when
/// they do not: no containment cgroup (v1 limits are joined by a move of
/// the child's only thread, which takes no lock), each harness cloned
/// into its cgroup v2, or a hierarchy mounted with `favordynmods`. For
/// the log at start and `doctor`: the wait is the host's setting, and
/// only its operator can change it.
pub fn slow_launches() -> Option<String> {
    let cage = cage().ok()?;
    // Only a move into a cgroup v2 takes the lock (v1 limits are joined
    // by a move of the child's only thread), and v2 limits come with the
    // containment's cgroup tree.
    if cage.mechanism != Mechanism::Cgroup || spawn::clones_into_cgroups() {
        return None;
    }
    let remedy = cgroup::slow_moves()?;
    Some(format!(
        "each harness launch may wait 10-15 ms for the kernel to move it into its cgroups \
         (no cgroup hierarchy is mounted with favordynmods); {remedy} makes a move take microseconds"
    ))
}

/// Whether a harness can have a network of its own here (`network:
/// isolated`), found by starting one (`/bin/true`, in a folder of its
/// own) that way; the error says why not and what makes it work. For the
/// start-up log and `doctor`.
pub async fn own_network_works() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let env = std::collections::BTreeMap::new();
    let program = Path::new("/bin/true");
    let policy = CagePolicy {
        network: Network::Isolated,
        ..CagePolicy::default()
    };
    let plan = policy.plan(&Subject {
        workspace: dir.path(),
        program,
        env: &env,
        carried: &[],
        named: &[],
        own_port: None,
        project: (&[], &[]),
    });
    let mut turn = TurnCage::new(None)?;
    let request = spawn::Request {
        program,
        args: &[],
        cwd: dir.path(),
        env: env.clone(),
        stdin: false,
        hooks: Vec::new(),
        around: None,
        cgroup: None,
    };
    let outcome = match turn.spawn(request, plan.as_ref(), None).await {
        Ok(mut spawned) => {
            let status = spawned.process.wait().await?;
            match (turn.take_door(), status.success()) {
                (Some(_), true) => Ok(()),
                (None, _) => Err(io::Error::other("the harness's door never came")),
                (_, false) => Err(io::Error::other(format!("the probe ended {status}"))),
            }
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("{e}. {USERNS_FIX}"))),
    };
    turn.clear().await;
    outcome
}

/// Whether `resource` can be limited here (for `/metrics`).
pub fn can_limit(resource: Resource) -> bool {
    cage().is_ok_and(|cage| cage.limits.missing(resource).is_none())
}

/// The group of the conversation working in `workspace`, which every
/// harness process it runs joins; `None` when no limit is asked or none
/// can be enforced here (which the bridge said at start).
pub fn quota(workspace: &Path, limits: &Limits) -> io::Result<Option<Quota>> {
    let cage = cage().map_err(io::Error::other)?;
    Quota::open(&cage.limits, workspace, limits)
}

/// What a bridge that died left of one turn, by the marker its journal
/// kept: its cgroup (if any) and every process carrying the marker.
/// Nothing is done while the bridge that ran the turn is alive. Returns
/// how many processes were killed.
pub fn kill_leftover_turn(marker: &str) -> usize {
    let Some(turn) = Marker::parse(marker) else {
        return 0;
    };
    if !turn.bridge.is_gone(&BridgeId::current()) {
        return 0;
    }
    let mut killed = 0;
    if let Some(tree) = cage().ok().and_then(|c| c.tree.as_ref()) {
        let dir = cgroup::turn_dir(tree.parent(), &turn.bridge, turn.seq);
        killed += cgroup::clear(&dir, dir.join("cgroup.kill").exists());
    }
    killed + marker::kill_marked(marker)
}

/// Kill what is left of a harness process group a previous bridge started
/// and could not stop (it was killed outright): every process in group
/// `pgid` gets SIGKILL, but only when one of them still works in `root`
/// (the run's own workspace), so a group id the system has since reused
/// for something else is left alone. Returns how many processes of the
/// group were found.
pub fn kill_leftover_group(pgid: i32, root: &Path) -> usize {
    // The kernel reports cwd resolved; the root may be relative or linked.
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let members: Vec<i32> = procs::table()
        .into_iter()
        .filter(|(_, stat)| stat.pgrp == pgid)
        .map(|(pid, _)| pid)
        .collect();
    if members.iter().any(|pid| procs::works_in(*pid, &root)) {
        tracing::warn!(
            pgid,
            members = members.len(),
            "killing a harness group left by a bridge that died"
        );
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    members.len()
}

/// One harness process's containment, from before its spawn until
/// everything it started is gone.
#[derive(Debug)]
pub struct TurnCage {
    marker: String,
    group: Option<cgroup::Group>,
    mechanism: Mechanism,
    leader: Option<i32>,
    done: bool,
    /// The harness's door (see [`TurnCage::take_door`]).
    door: Option<std::net::TcpListener>,
}

/// What is left to end, owned, so it can run on another thread.
enum Clearing {
    Cgroup(PathBuf, bool),
    Marked(String),
}

impl Clearing {
    /// SIGKILL everything, without waiting.
    fn kill(&self) {
        match self {
            Clearing::Cgroup(dir, kill_file) => cgroup::kill_all(dir, *kill_file),
            Clearing::Marked(marker) => {
                subreaper::kill_turn(marker);
            }
        }
    }

    /// Kill everything, wait until it is gone; how many there were.
    fn run(self) -> usize {
        match self {
            Clearing::Cgroup(dir, kill_file) => cgroup::clear(&dir, kill_file),
            Clearing::Marked(marker) => subreaper::clear_turn(&marker),
        }
    }
}

impl TurnCage {
    /// Prepare the containment of one harness process (with the cgroup
    /// mechanism, its cgroup: below the conversation's limits on cgroup v2).
    pub fn new(quota: Option<&Quota>) -> io::Result<TurnCage> {
        let cage = cage().map_err(io::Error::other)?;
        let seq = cage.next.fetch_add(1, Ordering::Relaxed);
        let name = cgroup::turn_name(seq);
        let group = match &cage.tree {
            Some(tree) => Some(
                match quota.and_then(Quota::v2_dir) {
                    Some(dir) => tree.group_in(dir, &name),
                    None => tree.group(&name),
                }
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot make the harness's cgroup: {e}"))
                })?,
            ),
            None => None,
        };
        Ok(TurnCage {
            marker: Marker {
                bridge: cage.id,
                seq,
            }
            .to_string(),
            group,
            mechanism: cage.mechanism,
            leader: None,
            done: false,
            door: None,
        })
    }

    /// The door the harness's network namespace was made with (its
    /// listening socket, inside), taken once to be served.
    pub fn take_door(&mut self) -> Option<std::net::TcpListener> {
        self.door.take()
    }

    /// How this turn is contained.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The turn's marker (the value of [`TURN_ENV`]), for the journal.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Spawn `request` inside the cage: with the marker in its
    /// environment, in its conversation's limits (`quota`), (cgroup) in
    /// its cgroup, and behind the wall `plan` describes (none: uncaged,
    /// the operator's choice) before it runs anything. `quota` must be
    /// the one given to [`TurnCage::new`].
    pub async fn spawn(
        &mut self,
        mut request: spawn::Request<'_>,
        plan: Option<&Plan>,
        quota: Option<&Quota>,
    ) -> io::Result<spawn::Spawned> {
        let wall = plan.map(wall::Wall::build).transpose()?;
        request
            .env
            .insert(TURN_ENV.to_string(), self.marker.clone());
        // Each step makes only system calls, on descriptors and strings
        // it owns. The process starts in its cgroup v2 (the turn's own,
        // below its conversation's limits, or those alone), then joins
        // the limits' v1 hierarchies, then enters the wall.
        request.cgroup = match (&self.group, quota) {
            (Some(group), _) => Some(group.start_in()?),
            (None, Some(quota)) => quota.start_in()?,
            (None, None) => None,
        };
        if let Some(hook) = quota.map(Quota::enter_hook).transpose()?.flatten() {
            request.hooks.push(hook);
        }
        let mut door = None;
        if let Some(wall) = wall {
            let (hook, made) = wall.enter_hook();
            request.hooks.push(hook);
            door = made;
        }
        if self.mechanism == Mechanism::Subreaper {
            request.around = Some(subreaper::noting);
        }
        let spawned = spawn::spawn(request, spawn::Method::chosen()).await?;
        self.leader = i32::try_from(spawned.process.id()).ok();
        if let Some(door) = door {
            match door.receive() {
                Ok(listener) => self.door = Some(listener),
                Err(e) => {
                    if let Some(leader) = self.leader {
                        let _ = killpg(Pid::from_raw(leader), Signal::SIGKILL);
                    }
                    return Err(e);
                }
            }
        }
        Ok(spawned)
    }

    /// Once the harness has exited and been waited for: kill everything it
    /// left running and wait until it is gone (and, cgroup, removed).
    /// Returns how many processes had to be killed. Later calls do nothing.
    pub async fn clear(&mut self) -> usize {
        let Some(clearing) = self.take() else {
            return 0;
        };
        if let Some(pid) = self.leader {
            subreaper::forget(pid);
        }
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || span.in_scope(|| clearing.run()))
            .await
            .unwrap_or(0)
    }

    fn take(&mut self) -> Option<Clearing> {
        if std::mem::replace(&mut self.done, true) {
            return None;
        }
        Some(match self.group.take() {
            Some(group) => {
                let (dir, kill_file) = group.into_parts();
                Clearing::Cgroup(dir, kill_file)
            }
            None => Clearing::Marked(self.marker.clone()),
        })
    }
}

impl TurnCage {
    /// While the harness lives on (a live process kept for the next
    /// turn): kill what the turn started that has left the harness's
    /// process tree (a detached `nohup … &`, a daemon, a shell's orphaned
    /// background job) and wait until it is gone. What is still below the
    /// harness is its own (a helper it keeps, an agent's subprocess) and
    /// ends with it. Returns how many processes were killed.
    pub async fn clear_detached(&self) -> usize {
        let Some(leader) = self.leader else {
            return 0;
        };
        if self.done {
            return 0;
        }
        let span = tracing::Span::current();
        let work: Box<dyn FnOnce() -> usize + Send> = match &self.group {
            Some(group) => {
                let dir = group.dir().to_path_buf();
                Box::new(move || {
                    let killed = kill_outside(|| cgroup::all_procs(&dir), leader);
                    marker::wait_dead(&killed);
                    killed.len()
                })
            }
            None => {
                let marker = self.marker.clone();
                Box::new(move || subreaper::clear_detached(&marker, leader))
            }
        };
        tokio::task::spawn_blocking(move || span.in_scope(work))
            .await
            .unwrap_or(0)
    }
}

/// The harness process a run's token went to, with all it started (its
/// cgroup, or its process tree): the only [`Holder`] of that token. Read
/// from the kernel on each check (which process holds the connection's
/// socket), so nothing a process says about itself counts.
#[derive(Debug)]
struct CageHolder {
    leader: i32,
    cgroup: Option<PathBuf>,
}

impl Holder for CageHolder {
    fn holds(&self, client: SocketAddr, server: SocketAddr) -> bool {
        // Read in the harness's own network (behind a door, its own
        // namespace; else the bridge's).
        // (When the harness itself has gone, what it left is read in the
        // bridge's.)
        let me = std::process::id() as i32;
        let Some(inode) = procs::tcp_socket_inode(client, server, self.leader)
            .or_else(|| procs::tcp_socket_inode(client, server, me))
        else {
            return false;
        };
        let members = match &self.cgroup {
            Some(dir) => cgroup::all_procs(dir),
            None => procs::tree(self.leader),
        };
        procs::any_holds_socket(&members, inode)
    }
}

/// The holder that is process `pid` and what it starts (its process
/// tree), for a token given to a process the bridge did not cage (and
/// for measuring the check).
pub fn process_holder(pid: i32) -> Arc<dyn Holder> {
    Arc::new(CageHolder {
        leader: pid,
        cgroup: None,
    })
}

impl TurnCage {
    /// Who may present the token of the run this cage's harness serves:
    /// the harness and what it started (`None` before the spawn).
    pub fn holder(&self) -> Option<Arc<dyn Holder>> {
        let leader = self.leader?;
        Some(Arc::new(CageHolder {
            leader,
            cgroup: self.group.as_ref().map(|g| g.dir().to_path_buf()),
        }))
    }
}

/// SIGKILL every process `candidates` names that is neither `leader` nor
/// below it (nor the bridge). Returns the processes killed, with their
/// start times.
fn kill_outside(candidates: impl Fn() -> Vec<i32>, leader: i32) -> BTreeSet<(i32, u64)> {
    let me = std::process::id() as i32;
    kill_rounds(marker::ROUNDS, |table| {
        let mut keep: BTreeSet<i32> = procs::descendants(table, leader).into_iter().collect();
        keep.insert(leader);
        keep.insert(me);
        candidates()
            .into_iter()
            .filter(|pid| !keep.contains(pid))
            .collect()
    })
}

/// SIGKILL, round after round (what they start meanwhile is found too),
/// every live process `pick` names from a fresh process table. Returns
/// the processes killed, with their start times.
fn kill_rounds(
    rounds: usize,
    pick: impl Fn(&std::collections::BTreeMap<i32, procs::Stat>) -> Vec<i32>,
) -> BTreeSet<(i32, u64)> {
    let mut killed = BTreeSet::new();
    for _ in 0..rounds {
        let table = procs::table();
        let found: Vec<(i32, u64)> = pick(&table)
            .into_iter()
            .filter_map(|pid| {
                let stat = table.get(&pid)?;
                (!stat.is_zombie()).then_some((pid, stat.start))
            })
            .filter(|p| !killed.contains(p))
            .collect();
        if found.is_empty() {
            break;
        }
        for (pid, start) in found {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.insert((pid, start));
        }
    }
    killed
}

impl Drop for TurnCage {
    fn drop(&mut self) {
        // A run abandoned mid-turn (the harness itself is killed by its
        // `Child`, and reaped by the runtime): kill the rest now, and wait
        // for it to be gone on a thread of its own.
        if let Some(clearing) = self.take() {
            clearing.kill();
            let _ = std::thread::Builder::new()
                .name("harness-cage".into())
                .spawn(move || clearing.run());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mechanism_is_named_or_refused() {
        let refused = choose(Some("jail")).err().unwrap().to_string();
        assert!(
            refused.contains("HARNESS_BRIDGE_CONTAIN is `jail`"),
            "{refused}"
        );
        assert!(refused.contains("cgroup, subreaper or auto"), "{refused}");
    }
}
