//! The run journal: one row per run the service accepted, written when it
//! is queued, started and ended, with its results at the end. It is what
//! makes a crash visible: a run still `queued` or `running` when the
//! service starts again was in flight when the last one died, and is
//! marked failed (`interrupted`) before anything else happens. It also
//! keeps finished runs retrievable by id after they leave memory, for
//! `retention_hours`.
//!
//! A SQLite file of its own beside the host store (`serve-runs.db`): the
//! host store is the host's, and the journal is the service's.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use super::RunStatus;
use crate::protocol::AgentRunResult;
use crate::run::Spawned;

const FILE: &str = "serve-runs.db";
/// Held (`flock`) by the one service that owns the journal.
const LOCK_FILE: &str = "serve.lock";

/// The failure code of a run found in flight at start.
pub const INTERRUPTED: &str = "interrupted";

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
    pub code: Option<String>,
    /// Its results (empty for a run that was interrupted).
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
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The journal file.
pub struct Journal {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// Released when the service exits, however it exits.
    _owner: nix::fcntl::Flock<std::fs::File>,
}

/// Become the one service on the store in `dir`. A second `serve` on the
/// same store would mark the first one's runs interrupted and kill their
/// harnesses, then run turns beside it; it is refused instead.
fn own_store(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::{Read as _, Seek as _, Write as _};

    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            let who = if pid.is_empty() {
                String::new()
            } else {
                format!(" (pid {pid})")
            };
            return Err(format!(
                "another harness-bridge serve{who} is using the store in {}; stop it first, or give this one another store",
                dir.display()
            ));
        }
        Err((_, e)) => return Err(format!("cannot lock {}: {e}", path.display())),
    };
    // The owner's pid, for the message above; the lock is what counts.
    let _ = lock.set_len(0);
    let _ = lock.rewind();
    let _ = writeln!(lock, "{}", std::process::id());
    Ok(lock)
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

impl Journal {
    /// Open (or create) the journal in `dir`, mark every run left in flight
    /// as failed, and drop runs that ended more than `retention` ago. Fails
    /// while another service has the journal open.
    /// Returns the journal and the runs it marked.
    pub fn open(dir: &Path, retention: Duration) -> Result<(Journal, Vec<Interrupted>), String> {
        let path = dir.join(FILE);
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let owner = own_store(dir)?;
        let fail = |e: rusqlite::Error| format!("run journal {}: {e}", path.display());
        let conn = Connection::open(&path).map_err(fail)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
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
             CREATE INDEX IF NOT EXISTS runs_ended ON runs(ended_at_ms);",
        )
        .map_err(fail)?;
        add_marker_column(&conn).map_err(fail)?;
        let journal = Journal {
            conn: Mutex::new(conn),
            path: path.clone(),
            _owner: owner,
        };
        let interrupted = journal.recover().map_err(fail)?;
        journal.prune(retention).map_err(fail)?;
        Ok((journal, interrupted))
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recover(&self) -> rusqlite::Result<Vec<Interrupted>> {
        let conn = self.conn();
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
            params![INTERRUPTED, now_ms()],
        )?;
        Ok(runs)
    }

    /// Forget runs that ended longer than `retention` ago.
    pub fn prune(&self, retention: Duration) -> rusqlite::Result<usize> {
        let cutoff = now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        self.conn().execute(
            "DELETE FROM runs WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?1",
            params![cutoff],
        )
    }

    /// Run one write through the statement cache; a failure is reported,
    /// not returned.
    fn write(&self, sql: &str, params: impl rusqlite::Params) {
        let written = self
            .conn()
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(params));
        if let Err(e) = written {
            self.report(e);
        }
    }

    fn report(&self, e: rusqlite::Error) {
        // The journal is bookkeeping: a run goes on when it cannot be
        // written, and the operator hears why.
        tracing::error!(journal = %self.path.display(), "cannot write the run journal: {e}");
    }

    /// Whether a run with this id was accepted within the retention (run
    /// ids are used once). An error means the journal cannot tell, and
    /// the caller should not guess.
    pub fn contains(&self, run_id: &str) -> Result<bool, String> {
        self.conn()
            .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1")
            .and_then(|mut statement| statement.exists([run_id]))
            .map_err(|e| {
                let message = format!("cannot read the run journal: {e}");
                tracing::error!(journal = %self.path.display(), "{message}");
                message
            })
    }

    /// A run was accepted.
    pub fn queued(&self, run_id: &str, conversation_id: &str, harness: &str) {
        self.write(
            "INSERT OR IGNORE INTO runs (run_id, conversation_id, harness, status, queued_at_ms)
             VALUES (?1, ?2, ?3, 'queued', ?4)",
            params![run_id, conversation_id, harness, now_ms()],
        );
    }

    /// A run started.
    pub fn started(&self, run_id: &str) {
        self.write(
            "UPDATE runs SET status = 'running' WHERE run_id = ?1",
            [run_id],
        );
    }

    /// A run's harness started: its process group, workspace and turn
    /// marker (a run may start two, when a stale session is retried fresh:
    /// the last one counts).
    pub fn spawned(&self, run_id: &str, harness: &Spawned<'_>) {
        self.write(
            "UPDATE runs SET pgid = ?2, workspace = ?3, boot_id = ?4, marker = ?5 WHERE run_id = ?1",
            params![
                run_id,
                harness.pgid,
                harness.workspace.to_string_lossy(),
                boot_id(),
                harness.marker
            ],
        );
    }

    /// A run ended, with everything it produced.
    pub fn ended(
        &self,
        run_id: &str,
        status: RunStatus,
        code: Option<&str>,
        results: &[AgentRunResult],
    ) {
        let results = serde_json::to_string(results).unwrap_or_else(|_| "[]".into());
        self.write(
            "UPDATE runs SET status = ?2, code = ?3, ended_at_ms = ?4, results = ?5
             WHERE run_id = ?1",
            params![run_id, status.as_str(), code, now_ms(), results],
        );
    }

    /// A run by id.
    pub fn get(&self, run_id: &str) -> Option<JournalRun> {
        let row = self
            .conn()
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
        let (conversation_id, harness, status, code, results) = match row {
            Ok(row) => row?,
            Err(e) => {
                self.report(e);
                return None;
            }
        };
        Some(JournalRun {
            conversation_id,
            harness,
            status: status_of(&status),
            code,
            results: results
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_left_in_flight_is_failed_on_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        {
            let (journal, interrupted) = Journal::open(dir.path(), day).unwrap();
            assert!(interrupted.is_empty());
            journal.queued("r1", "c", "claude-code");
            journal.started("r1");
            journal.spawned(
                "r1",
                &Spawned {
                    pgid: 4242,
                    workspace: Path::new("/w/c"),
                    marker: "1-2-3-4",
                },
            );
            journal.queued("r2", "c", "claude-code");
            journal.queued("r3", "d", "codex");
            journal.started("r3");
            journal.ended("r3", RunStatus::Completed, None, &[]);
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
        assert_eq!(r1.code.as_deref(), Some(INTERRUPTED));
        assert_eq!(journal.get("r3").unwrap().status, RunStatus::Completed);
        assert!(journal.get("nope").is_none());
        // Retention: everything ended counts as older than zero.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(journal.prune(Duration::ZERO).unwrap(), 3);
        assert!(!journal.contains("r1").unwrap());
    }

    #[test]
    fn a_journal_from_before_turn_markers_is_opened_and_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (
                 run_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL,
                 harness TEXT NOT NULL, status TEXT NOT NULL, code TEXT,
                 pgid INTEGER, workspace TEXT, boot_id TEXT,
                 queued_at_ms INTEGER NOT NULL, ended_at_ms INTEGER, results TEXT);
             INSERT INTO runs (run_id, conversation_id, harness, status, queued_at_ms)
             VALUES ('old', 'c', 'codex', 'running', 1);",
        )
        .unwrap();
        drop(conn);
        let day = Duration::from_secs(86_400);
        let (journal, interrupted) = Journal::open(dir.path(), day).unwrap();
        assert_eq!(interrupted.len(), 1);
        assert_eq!(interrupted[0].marker, None);
        journal.queued("new", "c", "codex");
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

    #[test]
    fn a_second_service_on_the_store_is_refused_and_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let (first, _) = Journal::open(dir.path(), day).unwrap();
        first.queued("r1", "c", "claude-code");
        first.started("r1");
        let refused = Journal::open(dir.path(), day).err().unwrap();
        assert!(
            refused.contains(&format!(
                "another harness-bridge serve (pid {})",
                std::process::id()
            )),
            "{refused}"
        );
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
