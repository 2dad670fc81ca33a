//! A throwaway PostgreSQL server for the tests that need one: one per test
//! binary, started on first use on 127.0.0.1 (its socket in its own
//! folder), a fresh database per test. The server stops when the test
//! binary exits, however it exits: a shell beside it waits on a pipe from
//! this process and stops the server when the pipe closes.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const INSTALL: &str = "PostgreSQL's server is not installed: run `scripts/test` (it installs \
     Debian's postgresql package), or `apt-get install postgresql`; or set \
     HARNESS_BRIDGE_PG_BIN to a folder holding initdb and postgres";

/// The running server.
pub struct PgServer {
    port: u16,
    /// Held open for the server's life: its closing stops the server.
    _stop: std::process::ChildStdin,
    _watch: Child,
    _dir: tempfile::TempDir,
}

/// A database of its own for one test.
pub struct PgDatabase {
    /// `postgres://postgres@127.0.0.1:<port>/<name>`.
    pub url: String,
    /// Its name.
    pub name: String,
}

static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The folder of PostgreSQL's server programs: `HARNESS_BRIDGE_PG_BIN`, else
/// the newest Debian install.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("HARNESS_BRIDGE_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| INSTALL.to_string())?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| INSTALL.to_string())
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // The owner of this process's /proc entry is its effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A command run as the `postgres` user when this process is root
/// (`initdb` and `postgres` refuse to run as root).
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn start() -> Result<PgServer, String> {
    let bin = bin_dir()?;
    let dir = tempfile::Builder::new()
        .prefix("hb-pg-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cannot hand {} to the postgres user",
                dir.path().display()
            ));
        }
    }
    let data = dir.path().join("data");
    let init = as_server_user(&bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ])
        .output()
        .map_err(|e| format!("initdb: {e}; {INSTALL}"))?;
    if !init.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        ));
    }
    let port = free_port()?;
    let log = dir.path().join("server.log");
    // The shell starts the server, waits for its stdin to close (this test
    // binary exiting, however), then stops the server (fast shutdown) and
    // removes its folder: the server lives in a static, whose `TempDir` is
    // never dropped, and each run would leave hundreds of MB behind.
    let script = format!(
        "{postgres} -D '{data}' -p {port} -k '{sock}' -c listen_addresses=127.0.0.1 \
         -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
         -c max_connections=400 -c shared_buffers=128MB >'{log}' 2>&1 & pid=$!; \
         read _; kill -INT $pid; wait $pid; rm -rf '{sock}'",
        postgres = bin.join("postgres").display(),
        data = data.display(),
        sock = dir.path().display(),
        log = log.display(),
    );
    let mut watch = if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--", "sh", "-c", &script]);
        cmd
    } else {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]);
        cmd
    }
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .map_err(|e| format!("cannot start postgres: {e}"))?;
    let stop = watch.stdin.take().ok_or("no pipe to the server's shell")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline || watch.try_wait().ok().flatten().is_some() {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("postgres did not start on port {port}: {said}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(PgServer {
        port,
        _stop: stop,
        _watch: watch,
        _dir: dir,
    })
}

/// The binary's server, started on first use.
pub fn server() -> &'static PgServer {
    match SERVER.get_or_init(start) {
        Ok(server) => server,
        Err(e) => panic!("{e}"),
    }
}

impl PgServer {
    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

/// A fresh, empty database on the binary's server.
pub async fn database() -> PgDatabase {
    let server = server();
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    // The server accepts connections a moment before it accepts queries.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (client, connection) = loop {
        match tokio_postgres::connect(&server.url("postgres"), tokio_postgres::NoTls).await {
            Ok(pair) => break pair,
            Err(e) if Instant::now() > deadline => panic!("cannot connect to the test server: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let connection = tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8'"
        ))
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e:?}"));
    drop(client);
    let _ = connection.await;
    let _ = std::io::stderr().flush();
    PgDatabase {
        url: server.url(&name),
        name,
    }
}
