//! The README's first command, run verbatim as a user runs it: the line
//! is read from README.md itself and given to `sh` in the checkout, with a
//! relative `./data`. Only the environment differs from a user's: the
//! model endpoint is a local fake, and the pinned Claude Code is on PATH.
//! Run twice, the second turn resumes the first one's session.

use harness_bridge_testkit as common;

use std::path::{Path, PathBuf};

use common::anthropic::{SECOND_ANSWER, fake_model};

/// The first `cargo run` line of the README's first `sh` block.
fn readme_command() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block in README.md");
    block
        .lines()
        .find(|line| line.starts_with("cargo run"))
        .expect("a cargo run line in the README's first sh block")
        .to_string()
}

/// `./data` of the checkout, put back as it was when the test ends: a
/// developer may have one from running the command themselves.
struct DataFolder {
    path: PathBuf,
    kept: Option<PathBuf>,
}

impl DataFolder {
    fn take(checkout: &Path) -> DataFolder {
        let path = checkout.join("data");
        let kept = path.exists().then(|| {
            let kept = checkout.join(format!("data.kept-by-readme-test-{}", std::process::id()));
            std::fs::rename(&path, &kept).expect("move the existing ./data aside");
            kept
        });
        DataFolder { path, kept }
    }
}

impl Drop for DataFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if let Some(kept) = &self.kept {
            let _ = std::fs::rename(kept, &self.path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn the_readmes_first_command_works_verbatim_and_resumes() {
    let command = readme_command();
    assert!(command.contains("./data"), "{command}");
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let _data = DataFolder::take(&checkout);
    let (url, fake) = fake_model(false).await;
    let home = common::tempdir();
    let clis = checkout.join("tests/clis/node_modules/.bin");
    assert!(
        clis.join("claude").exists(),
        "Claude Code is not installed in tests/clis: run scripts/test"
    );
    let path = format!(
        "{}:{}",
        clis.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for turn in 1..=2 {
        let output = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(&checkout)
            .env("PATH", &path)
            .env("HOME", home.path())
            .env("ANTHROPIC_BASE_URL", &url)
            .env("ANTHROPIC_API_KEY", "sk-test-readme")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env_remove("HARNESS_BRIDGE_DATA_DIR")
            .output()
            .await
            .expect("sh runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "turn {turn}: {command}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(stdout.contains(SECOND_ANSWER), "turn {turn}: {stdout}");
    }
    assert!(
        checkout.join("data/host.db").exists(),
        "the store is in ./data"
    );
    // The second turn continued the first one's session: the model saw
    // the first question again, in the history Claude Code resumed.
    let requests = fake.requests.lock().unwrap();
    let last = requests.last().expect("the model was called").to_string();
    assert!(
        last.matches("What is in this folder?").count() >= 2,
        "the second turn did not resume the first: {last}"
    );
}

/// The README's serving example, verbatim: `serve --config bridge.yaml`
/// (a relative config whose paths are relative to its folder) on the
/// default port, then the `curl` that posts a turn with the token serve
/// keeps under `~/.local/share`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis) and curl; scripts/test runs it"]
async fn the_readmes_serving_example_works_verbatim() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let block = readme
        .split("## Serving over HTTP")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("the serving example");
    let serve = block.lines().next().expect("the serve line").to_string();
    assert!(serve.starts_with("harness-bridge serve"), "{serve}");
    let post = block.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert!(post.starts_with("curl"), "{post}");

    let (url, _fake) = fake_model(false).await;
    let home = common::tempdir();
    let folder = common::tempdir();
    std::fs::write(
        folder.path().join("bridge.yaml"),
        "workspace_root: ./workspaces\n",
    )
    .unwrap();
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = Path::new(common::bridge_bin())
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        checkout.join("tests/clis/node_modules/.bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |line: &str| {
        let mut command = tokio::process::Command::new("sh");
        command
            .arg("-c")
            .arg(line)
            .current_dir(folder.path())
            .env("PATH", &path)
            .env("HOME", home.path())
            .env("ANTHROPIC_BASE_URL", &url)
            .env("ANTHROPIC_API_KEY", "sk-test-readme")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env_remove("HARNESS_BRIDGE_DATA_DIR")
            .env_remove("XDG_DATA_HOME")
            .kill_on_drop(true);
        command
    };
    // Its own process group, so that the service `sh` started is stopped
    // with it at the end.
    let mut server = shell(&serve)
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("serve starts");
    let group = nix::unistd::Pid::from_raw(server.id().expect("running") as i32);
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(server.stderr.take().unwrap()));
    let listening = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("serving on") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(listening, Ok(true), "serve did not start listening");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let output = shell(&post).output().await.expect("curl runs");
    let body = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{body}");
    let last: serde_json::Value =
        serde_json::from_str(body.lines().last().unwrap_or("null")).unwrap_or_default();
    assert_eq!(last["type"], "run.completed", "{body}");
    assert!(
        std::fs::read_dir(folder.path().join("workspaces")).is_ok(),
        "workspace_root is relative to bridge.yaml's folder"
    );
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(30), server.wait()).await;
    assert!(stopped.is_ok(), "serve did not stop on SIGTERM");
}

/// A row of README's harness table and what it names as verified:
/// (row, [(the name before the version in its last column, the package)]).
type Row = (String, Vec<(String, String)>);

/// What each row of README's harness table names as verified, and the
/// package in tests/clis that pins it, as `tests/clis/package.json` says
/// beside its pins (`readmeRows`): (row, [(the name before the version in
/// the row's last column, the package)]), and the pinned packages that
/// are no harness.
fn verified(package_json: &serde_json::Value) -> (Vec<Row>, Vec<String>) {
    let table = &package_json["readmeRows"];
    let rows = table["rows"]
        .as_object()
        .expect("readmeRows.rows in tests/clis/package.json")
        .iter()
        .map(|(row, names)| {
            let names = names
                .as_object()
                .expect("a row's names and packages")
                .iter()
                .map(|(name, package)| {
                    let package = package.as_str().expect("a package name");
                    (name.clone(), package.to_string())
                })
                .collect();
            (row.clone(), names)
        })
        .collect();
    let others = table["others"]
        .as_array()
        .expect("readmeRows.others in tests/clis/package.json")
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    (rows, others)
}

/// The rows of README's harness table: (the first column without its
/// backticks, the last column).
fn harness_rows(readme: &str) -> Vec<(String, String)> {
    let table = readme
        .split("\n## Harnesses\n")
        .nth(1)
        .expect("a `## Harnesses` section in README.md");
    table
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            let first = cells.first().copied().unwrap_or_default();
            let last = cells.last().copied().unwrap_or_default();
            (first.trim().trim_matches('`').to_string(), last.to_string())
        })
        .collect()
}

/// A version as npm pins one exactly (`1.2.3`, `1.2.3-beta.1`), not a range.
fn exact(spec: &str) -> bool {
    let core = spec.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// The version tests/clis installs of `package`: package.json's pin, or
/// where that is a range, the version package-lock.json resolved it to.
fn pinned(package_json: &serde_json::Value, lock: &serde_json::Value, package: &str) -> String {
    let spec = package_json["devDependencies"][package]
        .as_str()
        .unwrap_or_else(|| panic!("tests/clis/package.json does not pin {package}"));
    if exact(spec) {
        return spec.to_string();
    }
    lock["packages"][format!("node_modules/{package}")]["version"]
        .as_str()
        .unwrap_or_else(|| panic!("tests/clis/package-lock.json does not resolve {package}"))
        .to_string()
}

/// The version a cell gives after `name ` (`Gemini CLI 0.61.0 (offline…`).
fn version_after(cell: &str, name: &str) -> Option<String> {
    let at = cell.find(&format!("{name} "))? + name.len() + 1;
    let version: String = cell[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || ".-+".contains(*c))
        .collect();
    (!version.is_empty()).then_some(version)
}

/// README's harness table says which CLI versions the tests verified:
/// they must be the ones tests/clis pins, row by row, and every harness
/// pinned there must have its row.
#[test]
fn the_readmes_harness_table_names_the_pinned_versions() {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| {
        std::fs::read_to_string(checkout.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let readme = read("README.md");
    let package_json: serde_json::Value =
        serde_json::from_str(&read("tests/clis/package.json")).expect("package.json is JSON");
    let lock: serde_json::Value =
        serde_json::from_str(&read("tests/clis/package-lock.json")).expect("the lock is JSON");
    let rows = harness_rows(&readme);
    let (verified, not_harnesses) = verified(&package_json);
    assert!(rows.len() >= verified.len(), "the harness table: {rows:?}");

    let mut wrong = Vec::new();
    for (row, cell) in &rows {
        let Some((_, names)) = verified.iter().find(|(name, _)| name == row) else {
            wrong.push(format!(
                "row `{row}`: no package of tests/clis is known for it (add it to readmeRows in tests/clis/package.json)"
            ));
            continue;
        };
        for (name, package) in names.iter() {
            let want = pinned(&package_json, &lock, package);
            match version_after(cell, name) {
                Some(said) if said == want => {}
                Some(said) => wrong.push(format!(
                    "row `{row}`: says {name} {said}, tests/clis pins {package} {want}"
                )),
                None => wrong.push(format!(
                    "row `{row}`: names no version after `{name}`, tests/clis pins {package} {want}"
                )),
            }
        }
    }
    for (row, _) in &verified {
        if !rows.iter().any(|(name, _)| name == row) {
            wrong.push(format!("no row `{row}` in the table"));
        }
    }
    let pinned_packages = package_json["devDependencies"]
        .as_object()
        .expect("devDependencies in tests/clis/package.json");
    for package in pinned_packages.keys() {
        let named = verified
            .iter()
            .any(|(_, names)| names.iter().any(|(_, p)| p == package));
        if !named && !not_harnesses.contains(package) {
            wrong.push(format!(
                "tests/clis pins {package}, which no row names (add its row, and its entry in readmeRows in tests/clis/package.json)"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "README.md's harness table (section `## Harnesses`) disagrees with the versions \
         tests/clis pins; fix these rows:\n  {}",
        wrong.join("\n  ")
    );
}
