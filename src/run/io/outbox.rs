//! The workspace's `outbox/`: files the harness writes there become
//! `artifact.created` results, each exactly once per run.
//!
//! Files are picked up as soon as they are finished (notify's close-after-
//! write and moved-in events) so a user sees them while the run goes on,
//! and a walk at the end catches whatever the watcher missed. What was in
//! the folder before the run started is not sent again unless it changed.
//!
//! The outbox is the harness's to change at will: it is made, walked,
//! looked at and read only through folder handles beneath the workspace,
//! never through a link (the watcher only says where to look).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::Engine as _;
use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::host::{HostApi, NewArtifact, RunScope};
use crate::projection::{ConfinedDir, HardLinked, ProjectionError};
use crate::protocol::{ArtifactCreated, INLINE_ARTIFACT_MAX_BYTES};

/// The outbox folder's name in the workspace.
pub const OUTBOX_DIR: &str = "outbox";
/// Largest outbox file delivered: a file is read whole, so a runaway
/// harness output must not take the bridge's memory with it.
const MAX_ARTIFACT_BYTES: u64 = 256 * 1024 * 1024;

/// A file's size and mtime: a file whose stamp changed is new again.
type Stamp = (u64, SystemTime);

/// A run's view of the outbox. Files are named by their path inside it.
pub struct Outbox {
    dir: ConfinedDir,
    before: HashMap<String, Stamp>,
    sent: HashSet<String>,
    events: mpsc::UnboundedReceiver<PathBuf>,
    _watch: Option<Registration>,
}

/// One watcher for every run in the process. The kernel allows a user
/// only so many inotify instances (often 128): a watcher per run would
/// stop watching at the 129th concurrent run, while one instance holds
/// thousands of watches.
struct SharedWatcher {
    watcher: notify::RecommendedWatcher,
    routes: Arc<Mutex<Routes>>,
}

/// Outbox folder → the runs watching it (by registration id).
type Routes = HashMap<PathBuf, Vec<(u64, mpsc::UnboundedSender<PathBuf>)>>;

static SHARED: Mutex<Option<SharedWatcher>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A run's place in the shared watcher; dropping it stops the watch.
struct Registration {
    dir: PathBuf,
    id: u64,
}

impl SharedWatcher {
    fn start() -> notify::Result<SharedWatcher> {
        let routes: Arc<Mutex<Routes>> = Arc::default();
        let seen = routes.clone();
        // Links are not followed: a link in an outbox to `/` would
        // otherwise add a watch on every folder below it.
        let config = notify::Config::default().with_follow_symlinks(false);
        let handler = move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            let finished = matches!(
                event.kind,
                EventKind::Access(AccessKind::Close(AccessMode::Write))
                    | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
            );
            if !finished {
                return;
            }
            let routes = lock(&seen);
            for path in event.paths {
                // The nearest watched folder above the file is its outbox.
                if let Some(runs) = path.ancestors().skip(1).find_map(|dir| routes.get(dir)) {
                    for (_, tx) in runs {
                        let _ = tx.send(path.clone());
                    }
                }
            }
        };
        let watcher = notify::RecommendedWatcher::new(handler, config)?;
        Ok(SharedWatcher { watcher, routes })
    }
}

impl Registration {
    fn new(dir: &Path, tx: mpsc::UnboundedSender<PathBuf>) -> notify::Result<Registration> {
        let mut guard = lock(&SHARED);
        let shared = match &mut *guard {
            Some(shared) => shared,
            None => guard.insert(SharedWatcher::start()?),
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let first = {
            let mut routes = lock(&shared.routes);
            let runs = routes.entry(dir.to_path_buf()).or_default();
            runs.push((id, tx));
            runs.len() == 1
        };
        if first && let Err(e) = shared.watcher.watch(dir, RecursiveMode::Recursive) {
            lock(&shared.routes).remove(dir);
            return Err(e);
        }
        Ok(Registration {
            dir: dir.to_path_buf(),
            id,
        })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut shared = lock(&SHARED);
        let Some(shared) = shared.as_mut() else {
            return;
        };
        let last = {
            let mut routes = lock(&shared.routes);
            let Some(runs) = routes.get_mut(&self.dir) else {
                return;
            };
            runs.retain(|(id, _)| *id != self.id);
            let last = runs.is_empty();
            if last {
                routes.remove(&self.dir);
            }
            last
        };
        if last {
            // Gone already when the folder was removed: nothing to undo.
            let _ = shared.watcher.unwatch(&self.dir);
        }
    }
}

impl Outbox {
    /// Watch `workspace/outbox/`, creating it if needed (a link or a file
    /// in its place is refused). A watcher that cannot start (inotify
    /// limits) is logged; the final walk still runs.
    pub fn watch(workspace: &ConfinedDir) -> Result<Outbox, ProjectionError> {
        let dir = workspace.ensure_dir(&[OUTBOX_DIR])?;
        let before = dir
            .files()
            .into_iter()
            .map(|file| (file.name, (file.len, file.modified)))
            .collect();
        let (tx, events) = mpsc::unbounded_channel();
        let watch = Registration::new(dir.path(), tx)
            .inspect_err(|e| {
                tracing::warn!("outbox watcher not started ({e}); files are collected at the end")
            })
            .ok();
        Ok(Outbox {
            dir,
            before,
            sent: HashSet::new(),
            events,
            _watch: watch,
        })
    }

    /// Wait for the next finished file the watcher saw; `None` once the
    /// watcher is gone (then only [`Outbox::sweep`] finds files). The
    /// file's name is its path inside the outbox, as the user sees it.
    pub async fn next(&mut self) -> Option<String> {
        loop {
            let path = self.events.recv().await?;
            let Some(name) = path
                .strip_prefix(self.dir.path())
                .ok()
                .and_then(Path::to_str)
            else {
                continue;
            };
            let stamp = self.dir.file(name).map(|file| (file.len, file.modified));
            if self.is_new(name, stamp) {
                self.sent.insert(name.to_string());
                return Some(name.to_string());
            }
        }
    }

    /// Every file not yet sent: the end-of-run walk.
    pub fn sweep(&mut self) -> Vec<String> {
        let mut fresh = Vec::new();
        for file in self.dir.files() {
            if self.is_new(&file.name, Some((file.len, file.modified))) {
                self.sent.insert(file.name.clone());
                fresh.push(file.name);
            }
        }
        fresh
    }

    fn is_new(&self, name: &str, stamp: Option<Stamp>) -> bool {
        match stamp {
            Some(now) => !self.sent.contains(name) && self.before.get(name) != Some(&now),
            None => false,
        }
    }

    /// The outbox folder (`WORKSPACE/outbox`), held open.
    pub fn dir(&self) -> &ConfinedDir {
        &self.dir
    }
}

fn mime_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "txt" | "log" => "text/plain",
        "diff" | "patch" => "text/x-diff",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        _ => return None,
    })
}

/// An `artifact.created` for a file whose bytes do not travel: its name and
/// size with the reason in `metadata.withheld`, so whoever delivers files
/// can tell the person about it rather than say nothing.
fn withheld(name: String, size: u64, reason: String) -> ArtifactCreated {
    tracing::warn!("{reason}");
    let mime = mime_type(&name).map(str::to_string);
    let mut metadata = crate::protocol::JsonMap::new();
    metadata.insert("withheld".into(), reason.into());
    ArtifactCreated {
        artifact_type: artifact_type(mime.as_deref()).into(),
        artifact_id: None,
        mime_type: mime,
        name: Some(name),
        size_bytes: Some(size),
        sha256: None,
        metadata: Some(metadata),
        content_base64: None,
    }
}

fn artifact_type(mime: Option<&str>) -> &'static str {
    match mime {
        Some(m) if m.starts_with("image/") => "image",
        Some(m) if m.starts_with("audio/") => "audio",
        Some(m) if m.starts_with("video/") => "video",
        _ => "file",
    }
}

/// Why an outbox file could not be read: it is logged and skipped, never
/// a failure of the run.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// Reading it beneath the outbox failed (a link, a folder, gone).
    #[error("cannot read outbox file {name}: {source}")]
    Unreadable {
        /// The file, relative to the outbox.
        name: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The blocking read did not finish (the runtime is going down).
    #[error("cannot read outbox file {name}: {source}")]
    Stopped {
        /// The file, relative to the outbox.
        name: String,
        /// Why the task ended.
        source: tokio::task::JoinError,
    },
}

/// Turn the outbox file `name` (relative to the outbox) into an
/// `artifact.created` payload: inline up to 1 MiB, stored in the host's
/// artifact store above that. A file over the size limit, or one the host
/// cannot store (the relay carries files inline only), is still reported,
/// [`withheld`]; only a file that cannot be read is an error.
///
/// The file is read beneath the outbox's handle without following links
/// and only up to the limit: the harness may swap a file for a link to
/// something outside, or let it grow, after it was seen.
pub async fn artifact(
    outbox: &ConfinedDir,
    name: String,
    scope: &RunScope,
    host: &dyn HostApi,
) -> Result<ArtifactCreated, OutboxError> {
    let (dir, relative) = (outbox.clone(), PathBuf::from(&name));
    let read =
        match tokio::task::spawn_blocking(move || dir.read_head(&relative, MAX_ARTIFACT_BYTES + 1))
            .await
        {
            Ok(read) => read,
            Err(source) => return Err(OutboxError::Stopped { name, source }),
        };
    let read = match read {
        Ok(read) => read,
        // A file of the outbox in name only: reported, never sent.
        Err(e) => match HardLinked::of(&e) {
            Some(linked) => {
                let size = linked.size;
                let reason = format!(
                    "outbox file {name} is not sent: it is a hard link (one of {} names of the \
                     same file), which may be a file from outside the workspace; a file copied \
                     or written into outbox/ is sent",
                    linked.links
                );
                return Ok(withheld(name, size, reason));
            }
            None => return Err(OutboxError::Unreadable { name, source: e }),
        },
    };
    let size = read.size.max(read.bytes.len() as u64);
    if size > MAX_ARTIFACT_BYTES {
        let reason = format!(
            "outbox file {name} is {size} bytes, over the {MAX_ARTIFACT_BYTES}-byte limit; it stays in the workspace"
        );
        return Ok(withheld(name, size, reason));
    }
    Ok(created(name, read.bytes, scope, host).await)
}

/// An `artifact.created` payload for `bytes` named `name`: inline up to
/// 1 MiB, stored in the host's artifact store above that, [`withheld`]
/// when the host cannot store it.
pub async fn created(
    name: String,
    bytes: Vec<u8>,
    scope: &RunScope,
    host: &dyn HostApi,
) -> ArtifactCreated {
    let mime = mime_type(&name).map(str::to_string);
    let artifact_type = artifact_type(mime.as_deref()).to_string();
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let size = bytes.len() as u64;
    let mut created = ArtifactCreated {
        artifact_type: artifact_type.clone(),
        artifact_id: None,
        mime_type: mime.clone(),
        name: Some(name.clone()),
        size_bytes: Some(size),
        sha256: Some(sha256),
        metadata: None,
        content_base64: None,
    };
    if bytes.len() <= INLINE_ARTIFACT_MAX_BYTES {
        created.content_base64 = Some(base64::engine::general_purpose::STANDARD.encode(&bytes));
    } else {
        let stored = host
            .put_artifact(
                NewArtifact {
                    artifact_type,
                    mime_type: mime,
                    name: Some(name.clone()),
                    source: "runner".into(),
                    conversation_id: scope.conversation_id.clone(),
                    run_id: Some(scope.run_id.clone()),
                    runner_id: Some(scope.runner_id.clone()),
                    ..NewArtifact::default()
                },
                bytes,
            )
            .await;
        match stored {
            Ok(stored) => created.artifact_id = Some(stored.artifact_id),
            Err(e) => {
                let reason = format!("cannot store {name} ({size} bytes): {e}");
                return withheld(name, size, reason);
            }
        }
    }
    created
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(workspace: &Path) -> ConfinedDir {
        ConfinedDir::create(workspace, &[], None).unwrap()
    }

    #[tokio::test]
    async fn hundreds_of_runs_at_once_are_all_watched() {
        // More than the usual per-user inotify instance limit (128).
        let workspaces: Vec<_> = (0..300).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut outboxes: Vec<_> = workspaces
            .iter()
            .map(|ws| Outbox::watch(&open(ws.path())).unwrap())
            .collect();
        for ws in [&workspaces[0], &workspaces[299]] {
            std::fs::write(ws.path().join("outbox/out.txt"), "x").unwrap();
        }
        for i in [0, 299] {
            let seen = tokio::time::timeout(std::time::Duration::from_secs(5), outboxes[i].next())
                .await
                .expect("the file is seen while the run goes on");
            assert_eq!(seen.as_deref(), Some("out.txt"));
        }
        // Another run's file is not this run's.
        assert!(outboxes[1].events.try_recv().is_err());
        // Runs that end stop watching; the folder may be watched again.
        outboxes.truncate(1);
        let again = Outbox::watch(&open(workspaces[299].path())).unwrap();
        assert!(again._watch.is_some());
    }

    #[tokio::test]
    async fn files_are_reported_once_and_old_ones_not_again() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(OUTBOX_DIR)).unwrap();
        std::fs::write(ws.path().join("outbox/old.txt"), "from an earlier turn").unwrap();
        let mut outbox = Outbox::watch(&open(ws.path())).unwrap();
        std::fs::write(ws.path().join("outbox/new.md"), "# report").unwrap();
        let seen = tokio::time::timeout(std::time::Duration::from_secs(5), outbox.next())
            .await
            .expect("the watcher reports the new file")
            .unwrap();
        assert_eq!(seen, "new.md");
        std::fs::create_dir(ws.path().join("outbox/sub")).unwrap();
        std::fs::write(ws.path().join("outbox/sub/late.csv"), "a,b").unwrap();
        let swept = outbox.sweep();
        assert_eq!(
            swept,
            vec!["sub/late.csv"],
            "new.md was already sent, old.txt predates the run"
        );
        assert!(outbox.sweep().is_empty());
    }

    #[tokio::test]
    async fn outbox_files_are_read_without_following_links() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "key").unwrap();
        let outbox = ws.path().join(OUTBOX_DIR);
        let mut watched = Outbox::watch(&open(ws.path())).unwrap();
        std::fs::write(outbox.join("ok.txt"), "fine").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), outbox.join("leak.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path(), outbox.join("folder")).unwrap();
        assert_eq!(
            watched.sweep(),
            ["ok.txt"],
            "links are not files of the outbox"
        );
        let outbox = watched.dir().clone();
        let host = crate::host::sqlite::SqliteHost::open(&ws.path().join("store")).unwrap();
        let scope = RunScope::default();
        let ok = artifact(&outbox, "ok.txt".into(), &scope, &host)
            .await
            .unwrap();
        assert_eq!(ok.size_bytes, Some(4));
        let err = artifact(&outbox, "leak.txt".into(), &scope, &host)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("leak.txt"), "{err}");
        let err = artifact(&outbox, "folder/secret".into(), &scope, &host)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("symlink"), "{err}");
    }

    #[tokio::test]
    async fn the_watcher_does_not_follow_links_out_of_the_outbox() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(OUTBOX_DIR)).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("outbox/elsewhere")).unwrap();
        let mut outbox = Outbox::watch(&open(ws.path())).unwrap();
        std::fs::write(outside.path().join("theirs.txt"), "x").unwrap();
        std::fs::write(ws.path().join("outbox/mine.txt"), "x").unwrap();
        // Events come in order: everything before `mine.txt` was seen first.
        let mut seen = Vec::new();
        while !seen.iter().any(|p: &PathBuf| p.ends_with("mine.txt")) {
            let event =
                tokio::time::timeout(std::time::Duration::from_secs(5), outbox.events.recv())
                    .await
                    .expect("the outbox's own file is seen");
            seen.extend(event);
        }
        assert!(
            !seen.iter().any(|p| p.ends_with("theirs.txt")),
            "the watcher followed a link out of the outbox: {seen:?}"
        );
    }

    #[test]
    fn mime_types_by_extension() {
        assert_eq!(mime_type("a/b.PNG"), Some("image/png"));
        assert_eq!(mime_type("notes"), None);
    }
}
