//! The README's first command, run verbatim as a user runs it: the line
//! is read from README.md itself and given to `sh` in the checkout, with a
//! relative `./data`. Only the environment differs from a user's: the
//! model endpoint is a local fake, and the pinned Claude Code is on PATH.
//! Run twice, the second turn resumes the first one's session.

mod common;

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
async fn the_readmes_first_command_works_verbatim_and_resumes() {
    let command = readme_command();
    assert!(command.contains("./data"), "{command}");
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let _data = DataFolder::take(&checkout);
    let (url, fake) = fake_model(false).await;
    let home = tempfile::tempdir().unwrap();
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
