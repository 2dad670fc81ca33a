//! The run journal: one row per run the service accepted, written when it
//! is queued, started and ended, and its results as they come. It is what
//! makes a crash visible: a run still `queued` or `running` when the
//! service starts again was in flight when the last one died, and is
//! marked failed (`interrupted`) before anything else happens. It also
//! keeps finished runs retrievable by id after they leave memory, for
//! `retention_hours`.
//!
//! A SQLite file of its own beside the host store (`serve-runs.db`): the
//! host store is the host's, and the journal is the service's.
//!
//! Writes go to one writer thread, in order, batched while it is busy: a
//! run's results are journaled one by one as they come (a crash keeps what
//! was produced; no run ends with one giant write), and no SQLite work
//! runs on the async workers. The few writes a caller must know succeeded
//! (a run accepted, a run ended) are acknowledged. Reads use their own
//! connection (WAL readers never wait for the writer) and block: callers
//! on async workers run them on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::RunStatus;
use crate::protocol::AgentRunResult;
use crate::protocol::FailureCode;
use crate::run::Spawned;

pub(super) const FILE: &str = "serve-runs.db";
/// Held (`flock`) by the one service that owns the journal.
const LOCK_FILE: &str = "serve.lock";

/// A run as the journal has it.
#[derive(Debug, Clone)]
pub struct JournalRun {
    /// The run's conversation.
    pub conversation_id: String,
    /// The harness it ran on.
    pub harness: String,
    /// Where it got to.
    pub status: RunStatus,
    /// The failure code, when it failed.
    pub code: Option<FailureCode>,
    /// Its results, in order (what was produced before an interruption).
    pub results: Vec<AgentRunResult>,
}

/// A run found in flight when the journal was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The run.
    pub run_id: String,
    /// Its harness's process group, if one had started since the machine
    /// last booted: what may be left of it is the new service's to kill.
    pub pgid: Option<i32>,
    /// The harness's working directory (its conversation's workspace).
    pub workspace: Option<PathBuf>,
    /// The turn marker its processes carry (`harness::cage`), same boot
    /// only, like the group.
    pub marker: Option<String>,
}

/// This boot of the machine: a process group id from another boot means
/// nothing now.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Where an acknowledged write's outcome goes.
type Ack = oneshot::Sender<Result<(), JournalError>>;

/// One write, for the writer thread.
enum Write {
    Queued {
        run_id: String,
        conversation_id: String,
        harness: String,
        done: Ack,
    },
    Started(String),
    Spawned {
        run_id: String,
        pgid: i32,
        workspace: String,
        marker: String,
    },
    Result {
        run_id: String,
        seq: i64,
        body: String,
    },
    Ended {
        run_id: String,
        status: RunStatus,
        code: Option<FailureCode>,
        done: Option<Ack>,
    },
    Prune {
        retention: Duration,
        done: oneshot::Sender<Result<usize, JournalError>>,
    },
}

/// The journal file.
pub struct Journal {
    /// `None` once the journal is closing.
    writes: Mutex<Option<std_mpsc::Sender<Write>>>,
    /// Joined on drop: everything sent is written before the store's lock
    /// is let go.
    writer: Option<std::thread::JoinHandle<()>>,
    /// Reads only; the writer thread has its own connection.
    reader: Mutex<Connection>,
    path: PathBuf,
    /// Released when the service exits, however it exits.
    _owner: nix::fcntl::Flock<std::fs::File>,
}

/// Why the run journal could not do what was asked. Cloned into every
/// acknowledgement of a failed batch, so causes are kept as sentences.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// Another `serve` holds the store.
    #[error(
        "another harness-bridge serve{holder} is using the store in {dir}; stop it first, or give this one another store"
    )]
    Held {
        /// ` (pid N)` when the holder wrote its pid, else empty.
        holder: String,
        /// The store's folder.
        dir: String,
    },
    /// A file or folder of the journal could not be made or locked.
    #[error("cannot {doing} {path}: {cause}")]
    File {
        /// What was tried: `open`, `lock`, `create`.
        doing: &'static str,
        /// The file or folder.
        path: String,
        /// What the system said.
        cause: String,
    },
    /// The journal's database failed as it opened.
    #[error("run journal {path}: {cause}")]
    Open {
        /// The journal's file.
        path: String,
        /// What SQLite said.
        cause: String,
    },
    /// The writer thread could not start.
    #[error("cannot start the run journal's writer: {0}")]
    Writer(String),
    /// A write (or the batch it was in) was not committed.
    #[error("cannot write the run journal: {0}")]
    Write(String),
    /// A lookup failed: the journal cannot tell.
    #[error("cannot read the run journal: {0}")]
    Read(String),
    /// The writer thread has ended.
    #[error("the run journal's writer has stopped")]
    Stopped,
}

/// Become the one service on the store (or data folder) in `dir`. A
/// second `serve` on the same store would mark the first one's runs
/// interrupted and kill their harnesses, then run turns beside it; one
/// on the same data folder would share its workspaces: it is refused
/// instead.
pub fn own_store(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, JournalError> {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::{Seek as _, Write as _};

    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| JournalError::File {
            doing: "open",
            path: path.display().to_string(),
            cause: e.to_string(),
        })?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            return Err(JournalError::Held {
                holder: holder(&mut file),
                dir: dir.display().to_string(),
            });
        }
        Err((_, e)) => {
            return Err(JournalError::File {
                doing: "lock",
                path: path.display().to_string(),
                cause: e.to_string(),
            });
        }
    };
    // The owner's pid, for the message above; the lock is what counts.
    let _ = lock.set_len(0);
    let _ = lock.rewind();
    let _ = writeln!(lock, "{}", std::process::id());
    Ok(lock)
}

/// ` (pid N)`: the holder of a lock file, as it wrote itself there.
fn holder(file: &mut std::fs::File) -> String {
    use std::io::Read as _;
    let mut pid = String::new();
    let _ = file.read_to_string(&mut pid);
    match pid.trim() {
        "" => String::new(),
        pid => format!(" (pid {pid})"),
    }
}

/// The `serve` using the store in `dir`, if one is (` (pid N)`, or empty
/// when it wrote no pid): a one-off `run` beside it would resume the same
/// conversations' sessions in a second process and split them.
pub fn served_by(dir: &Path) -> Option<String> {
    use nix::fcntl::{Flock, FlockArg};
    let file = std::fs::File::open(dir.join(LOCK_FILE)).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_free) => None,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => Some(holder(&mut file)),
        Err(_) => None,
    }
}

/// A journal from before turn markers gets the column.
fn add_marker_column(conn: &Connection) -> rusqlite::Result<()> {
    let has = conn
        .prepare("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'marker'")?
        .exists([])?;
    if !has {
        conn.execute_batch("ALTER TABLE runs ADD COLUMN marker TEXT")?;
    }
    Ok(())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn status_of(name: &str) -> RunStatus {
    match name {
        "queued" => RunStatus::Queued,
        "running" => RunStatus::Running,
        "completed" => RunStatus::Completed,
        _ => RunStatus::Failed,
    }
}

const SCHEMA: &str = "
    PRAGMA journal_mode = WAL;
    PRAGMA synchronous = NORMAL;
    PRAGMA busy_timeout = 5000;
    CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        harness TEXT NOT NULL,
        status TEXT NOT NULL,
        code TEXT,
        pgid INTEGER,
        workspace TEXT,
        boot_id TEXT,
        marker TEXT,
        queued_at_ms INTEGER NOT NULL,
        ended_at_ms INTEGER,
        results TEXT
    );
    CREATE INDEX IF NOT EXISTS runs_ended ON runs(ended_at_ms);
    CREATE TABLE IF NOT EXISTS results (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;";

impl Journal {
    /// Open (or create) the journal in `dir`, mark every run left in flight
    /// as failed, and drop runs that ended more than `retention` ago. Fails
    /// while another service has the journal open.
    /// Returns the journal and the runs it marked.
    pub fn open(
        dir: &Path,
        retention: Duration,
    ) -> Result<(Journal, Vec<Interrupted>), JournalError> {
        let path = dir.join(FILE);
        std::fs::create_dir_all(dir).map_err(|e| JournalError::File {
            doing: "create",
            path: dir.display().to_string(),
            cause: e.to_string(),
        })?;
        let owner = own_store(dir)?;
        let fail = |e: rusqlite::Error| JournalError::Open {
            path: path.display().to_string(),
            cause: e.to_string(),
        };
        let mut conn = Connection::open(&path).map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        add_marker_column(&conn).map_err(fail)?;
        let interrupted = recover(&conn).map_err(fail)?;
        prune(&mut conn, retention).map_err(fail)?;
        let reader = Connection::open(&path).map_err(fail)?;
        reader
            .execute_batch("PRAGMA busy_timeout = 5000;")
            .map_err(fail)?;
        let (writes, inbox) = std_mpsc::channel();
        let where_ = path.clone();
        let writer = std::thread::Builder::new()
            .name("run-journal".into())
            .spawn(move || write_loop(conn, inbox, &where_))
            .map_err(|e| JournalError::Writer(e.to_string()))?;
        Ok((
            Journal {
                writes: Mutex::new(Some(writes)),
                writer: Some(writer),
                reader: Mutex::new(reader),
                path,
                _owner: owner,
            },
            interrupted,
        ))
    }

    fn send(&self, write: Write) {
        let writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        let sent = writes.as_ref().map(|writes| writes.send(write));
        if !matches!(sent, Some(Ok(()))) {
            tracing::error!(journal = %self.path.display(), "the run journal's writer has stopped");
        }
    }

    fn reader(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn report(&self, e: &rusqlite::Error) {
        tracing::error!(journal = %self.path.display(), "cannot read the run journal: {e}");
    }

    /// Whether a run with this id was accepted within the retention (run
    /// ids are used once). An error means the journal cannot tell, and
    /// the caller should not guess. Blocks.
    pub fn contains(&self, run_id: &str) -> Result<bool, JournalError> {
        self.reader()
            .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1")
            .and_then(|mut statement| statement.exists([run_id]))
            .map_err(|e| {
                self.report(&e);
                JournalError::Read(e.to_string())
            })
    }

    /// A run was accepted; resolves once it is written (a journal that
    /// cannot write, a full disk, refuses the run rather than lose it).
    pub async fn queued(
        &self,
        run_id: &str,
        conversation_id: &str,
        harness: &str,
    ) -> Result<(), JournalError> {
        let (done, written) = oneshot::channel();
        self.send(Write::Queued {
            run_id: run_id.into(),
            conversation_id: conversation_id.into(),
            harness: harness.into(),
            done,
        });
        written.await.unwrap_or(Err(JournalError::Stopped))
    }

    /// A run started.
    pub fn started(&self, run_id: &str) {
        self.send(Write::Started(run_id.into()));
    }

    /// A run's harness started: its process group, workspace and turn
    /// marker (a run may start two, when a stale session is retried fresh:
    /// the last one counts).
    pub fn spawned(&self, run_id: &str, harness: &Spawned<'_>) {
        self.send(Write::Spawned {
            run_id: run_id.into(),
            pgid: harness.pgid,
            workspace: harness.workspace.to_string_lossy().into_owned(),
            marker: harness.marker.to_string(),
        });
    }

    /// One result of a run, as its JSON text (`seq` orders them).
    pub fn result(&self, run_id: &str, seq: u64, body: String) {
        self.send(Write::Result {
            run_id: run_id.into(),
            seq: i64::try_from(seq).unwrap_or(i64::MAX),
            body,
        });
    }

    /// A run ended; resolves once that and every result before it is written.
    pub async fn ended(
        &self,
        run_id: &str,
        status: RunStatus,
        code: Option<FailureCode>,
    ) -> Result<(), JournalError> {
        let (done, written) = oneshot::channel();
        self.send(Write::Ended {
            run_id: run_id.into(),
            status,
            code,
            done: Some(done),
        });
        written.await.unwrap_or(Err(JournalError::Stopped))
    }

    /// Forget runs that ended longer than `retention` ago; how many.
    pub async fn prune(&self, retention: Duration) -> Result<usize, JournalError> {
        let (done, pruned) = oneshot::channel();
        self.send(Write::Prune { retention, done });
        pruned.await.unwrap_or(Err(JournalError::Stopped))
    }

    /// A run by id. Blocks.
    pub fn get(&self, run_id: &str) -> Option<JournalRun> {
        let conn = self.reader();
        let row = conn
            .query_row(
                "SELECT conversation_id, harness, status, code, results FROM runs WHERE run_id = ?1",
                [run_id],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<String>>(3)?,
                        row.get::<_, Option<String>>(4)?,
                    ))
                },
            )
            .optional();
        let (conversation_id, harness, status, code, legacy) = match row {
            Ok(row) => row?,
            Err(e) => {
                self.report(&e);
                return None;
            }
        };
        let results = conn
            .prepare_cached("SELECT body FROM results WHERE run_id = ?1 ORDER BY seq")
            .and_then(|mut statement| {
                statement
                    .query_map([run_id], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            });
        let results = match results {
            Ok(bodies) if !bodies.is_empty() => bodies
                .iter()
                .filter_map(|body| serde_json::from_str(body).ok())
                .collect(),
            // Journals written before results had a table of their own
            // kept them whole in the run's row.
            Ok(_) => legacy
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default(),
            Err(e) => {
                self.report(&e);
                Vec::new()
            }
        };
        Some(JournalRun {
            conversation_id,
            harness,
            status: status_of(&status),
            code: code.map(FailureCode::from),
            results,
        })
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.writes.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn recover(conn: &Connection) -> rusqlite::Result<Vec<Interrupted>> {
    let boot = boot_id();
    let runs = conn
        .prepare(
            "SELECT run_id, pgid, workspace, boot_id, marker FROM runs
             WHERE status IN ('queued', 'running')",
        )?
        .query_map([], |row| {
            let same_boot = row.get::<_, Option<String>>(3)?.as_deref() == Some(&boot);
            Ok(Interrupted {
                run_id: row.get(0)?,
                pgid: row.get::<_, Option<i32>>(1)?.filter(|_| same_boot),
                workspace: row.get::<_, Option<String>>(2)?.map(PathBuf::from),
                marker: row.get::<_, Option<String>>(4)?.filter(|_| same_boot),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    conn.execute(
        "UPDATE runs SET status = 'failed', code = ?1, ended_at_ms = ?2
         WHERE status IN ('queued', 'running')",
        params![FailureCode::Interrupted.as_str(), now_ms()],
    )?;
    Ok(runs)
}

fn prune(conn: &mut Connection, retention: Duration) -> rusqlite::Result<usize> {
    let cutoff = now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let tx = conn.transaction()?;
    tx.execute(
        "DELETE FROM results WHERE run_id IN
         (SELECT run_id FROM runs WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?1)",
        params![cutoff],
    )?;
    let pruned = tx.execute(
        "DELETE FROM runs WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?1",
        params![cutoff],
    )?;
    tx.commit()?;
    Ok(pruned)
}

/// One write; acknowledgements wait for the batch's commit.
fn apply(
    tx: &rusqlite::Transaction<'_>,
    write: Write,
    acks: &mut Vec<(Ack, Result<(), JournalError>)>,
) -> rusqlite::Result<()> {
    let fail = |e: &rusqlite::Error| Err(JournalError::Write(e.to_string()));
    match write {
        Write::Queued {
            run_id,
            conversation_id,
            harness,
            done,
        } => {
            let written = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO runs (run_id, conversation_id, harness, status, queued_at_ms)
                     VALUES (?1, ?2, ?3, 'queued', ?4)",
                )
                .and_then(|mut s| s.execute(params![run_id, conversation_id, harness, now_ms()]));
            acks.push((done, written.as_ref().map(|_| ()).or_else(fail)));
            written.map(|_| ())
        }
        Write::Started(run_id) => tx
            .prepare_cached("UPDATE runs SET status = 'running' WHERE run_id = ?1")
            .and_then(|mut s| s.execute([run_id]))
            .map(|_| ()),
        Write::Spawned {
            run_id,
            pgid,
            workspace,
            marker,
        } => tx
            .prepare_cached(
                "UPDATE runs SET pgid = ?2, workspace = ?3, boot_id = ?4, marker = ?5 WHERE run_id = ?1",
            )
            .and_then(|mut s| s.execute(params![run_id, pgid, workspace, boot_id(), marker]))
            .map(|_| ()),
        Write::Result { run_id, seq, body } => tx
            .prepare_cached(
                "INSERT OR REPLACE INTO results (run_id, seq, body) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut s| s.execute(params![run_id, seq, body]))
            .map(|_| ()),
        Write::Ended {
            run_id,
            status,
            code,
            done,
        } => {
            let written = tx
                .prepare_cached(
                    "UPDATE runs SET status = ?2, code = ?3, ended_at_ms = ?4 WHERE run_id = ?1",
                )
                .and_then(|mut s| s.execute(params![
                    run_id,
                    status.as_str(),
                    code.as_ref().map(FailureCode::as_str),
                    now_ms()
                ]));
            if let Some(done) = done {
                acks.push((done, written.as_ref().map(|_| ()).or_else(fail)));
            }
            written.map(|_| ())
        }
        // Handled outside a batch: it has its own transaction.
        Write::Prune { .. } => Ok(()),
    }
}

/// The writer thread: everything waiting is one transaction; it ends when
/// the journal is dropped.
fn write_loop(mut conn: Connection, inbox: std_mpsc::Receiver<Write>, path: &Path) {
    while let Ok(first) = inbox.recv() {
        if let Write::Prune { retention, done } = first {
            let _ = done
                .send(prune(&mut conn, retention).map_err(|e| JournalError::Write(e.to_string())));
            continue;
        }
        let mut batch = vec![first];
        // What queued meanwhile, up to a bound so acknowledgements stay prompt.
        while batch.len() < 512 {
            match inbox.try_recv() {
                Ok(Write::Prune { retention, done }) => {
                    let _ = done.send(
                        prune(&mut conn, retention).map_err(|e| JournalError::Write(e.to_string())),
                    );
                }
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        let mut acks = Vec::new();
        let committed = conn.transaction().and_then(|tx| {
            for write in batch {
                if let Err(e) = apply(&tx, write, &mut acks) {
                    // One bad write does not lose the others of the batch.
                    tracing::error!(journal = %path.display(), "cannot write the run journal: {e}");
                }
            }
            tx.commit()
        });
        for (done, result) in acks {
            let result = match &committed {
                Ok(()) => result,
                Err(e) => Err(JournalError::Write(e.to_string())),
            };
            let _ = done.send(result);
        }
        if let Err(e) = committed {
            tracing::error!(journal = %path.display(), "cannot write the run journal: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{AgentRunResult, ResultPayload, RunFailed};

    fn failed(run_id: &str, seq: u64) -> AgentRunResult {
        let mut result = AgentRunResult::new(
            run_id,
            ResultPayload::RunFailed(RunFailed {
                code: "x".into(),
                error: "y".into(),
                retryable: false,
            }),
        );
        result.sequence = Some(seq);
        result
    }

    #[tokio::test]
    async fn a_run_left_in_flight_is_failed_on_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        {
            let (journal, interrupted) = Journal::open(dir.path(), day).unwrap();
            assert!(interrupted.is_empty());
            journal.queued("r1", "c", "claude-code").await.unwrap();
            journal.started("r1");
            journal.spawned(
                "r1",
                &Spawned {
                    pgid: 4242,
                    workspace: Path::new("/w/c"),
                    marker: "1-2-3-4",
                },
            );
            journal.result("r1", 1, serde_json::to_string(&failed("r1", 1)).unwrap());
            journal.queued("r2", "c", "claude-code").await.unwrap();
            journal.queued("r3", "d", "codex").await.unwrap();
            journal.started("r3");
            journal.result("r3", 1, serde_json::to_string(&failed("r3", 1)).unwrap());
            journal
                .ended("r3", RunStatus::Completed, None)
                .await
                .unwrap();
            assert!(journal.contains("r2").unwrap());
        }
        let (journal, mut interrupted) = Journal::open(dir.path(), day).unwrap();
        interrupted.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        let r = |run_id: &str, pgid, workspace: Option<&str>, marker: Option<&str>| Interrupted {
            run_id: run_id.into(),
            pgid,
            workspace: workspace.map(PathBuf::from),
            marker: marker.map(str::to_string),
        };
        assert_eq!(
            interrupted,
            [
                r("r1", Some(4242), Some("/w/c"), Some("1-2-3-4")),
                r("r2", None, None, None)
            ]
        );
        let r1 = journal.get("r1").unwrap();
        assert_eq!(r1.status, RunStatus::Failed);
        assert_eq!(r1.code, Some(FailureCode::Interrupted));
        assert_eq!(
            r1.results.len(),
            1,
            "what the run produced before the crash"
        );
        let r3 = journal.get("r3").unwrap();
        assert_eq!(r3.status, RunStatus::Completed);
        assert_eq!(r3.results[0].sequence, Some(1));
        assert!(journal.get("nope").is_none());
        // Retention: everything ended counts as older than zero.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(journal.prune(Duration::ZERO).await.unwrap(), 3);
        assert!(!journal.contains("r1").unwrap());
    }

    #[tokio::test]
    async fn a_journal_from_before_turn_markers_and_result_rows_is_opened_and_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (
                 run_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL,
                 harness TEXT NOT NULL, status TEXT NOT NULL, code TEXT,
                 pgid INTEGER, workspace TEXT, boot_id TEXT,
                 queued_at_ms INTEGER NOT NULL, ended_at_ms INTEGER, results TEXT);
             INSERT INTO runs (run_id, conversation_id, harness, status, queued_at_ms)
             VALUES ('old', 'c', 'codex', 'running', 1);
             INSERT INTO runs (run_id, conversation_id, harness, status, queued_at_ms, ended_at_ms, results)
             VALUES ('done', 'c', 'codex', 'completed', 1, 2, '[]');",
        )
        .unwrap();
        drop(conn);
        let day = Duration::from_secs(86_400 * 365 * 100);
        let (journal, interrupted) = Journal::open(dir.path(), day).unwrap();
        assert_eq!(interrupted.len(), 1);
        assert_eq!(interrupted[0].marker, None);
        assert_eq!(journal.get("done").unwrap().status, RunStatus::Completed);
        journal.queued("new", "c", "codex").await.unwrap();
        journal.spawned(
            "new",
            &Spawned {
                pgid: 7,
                workspace: Path::new("/w"),
                marker: "1-2-3-4",
            },
        );
        drop(journal);
        let (_, interrupted) = Journal::open(dir.path(), day).unwrap();
        assert_eq!(interrupted[0].marker.as_deref(), Some("1-2-3-4"));
    }

    #[tokio::test]
    async fn a_second_service_on_the_store_is_refused_and_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let (first, _) = Journal::open(dir.path(), day).unwrap();
        first.queued("r1", "c", "claude-code").await.unwrap();
        first.started("r1");
        let refused = Journal::open(dir.path(), day).err().unwrap().to_string();
        assert!(
            refused.contains(&format!(
                "another harness-bridge serve (pid {})",
                std::process::id()
            )),
            "{refused}"
        );
        // The writer is asynchronous: an acknowledged write orders it.
        first.ended("r0", RunStatus::Failed, None).await.unwrap();
        assert_eq!(first.get("r1").unwrap().status, RunStatus::Running);
        drop(first);
        let (_, interrupted) = Journal::open(dir.path(), day).unwrap();
        assert_eq!(
            interrupted.len(),
            1,
            "once the first is gone, the next one recovers"
        );
    }
}
