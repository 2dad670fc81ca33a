//! What a project adds to a turn, on a repository of 10,000 files (100
//! folders of 100 small files): the first turn of a conversation (its
//! worktree made and checked out, then the state before the harness),
//! a later turn (the worktree found, the state before, one file changed,
//! every file looked at after, the summary and diff), a later turn
//! that changed nothing, and one whose harness committed its change (the
//! commit taken into the repository too). Medians of `RUNS` (default 9) first turns and 3 × `RUNS`
//! later ones. Run: `cargo bench --bench project` (`FILES=` for another
//! size).

use std::path::Path;
use std::time::{Duration, Instant};

use harness_bridge::repo::{Checkout, Project, ProjectSpec};

fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes none
    // and gets one quick pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let files = env_number("FILES", if quick { 200 } else { 10_000 });
    let runs = env_number("RUNS", if quick { 1 } else { 9 });
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = dir.path().join("repo");
    for i in 0..files {
        let folder = repo.join(format!("src/m{:03}", i / 100));
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(
            folder.join(format!("f{i:05}.rs")),
            format!("// file {i}\npub fn f{i}() -> u32 {{\n    {i}\n}}\n"),
        )
        .expect("file");
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=b@example.org",
            "commit",
            "-q",
            "-m",
            "Files",
        ],
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let spec = ProjectSpec {
            repository: repo.clone(),
            base: None,
            branch: "chat/{conversation}".into(),
            author: "Bench <b@example.org>".into(),
            mode: Default::default(),
            publish: None,
            carry: None,
            worktree_retention_hours: 0,
        };
        // The bridge's own worktrees: no harness runs here.
        let project = Project::open("bench", &spec, None).await.expect("project");
        let bridge_paths = [".langbot/".to_string()];
        let workspace = |n: usize| {
            let ws = dir.path().join(format!("ws/{n}"));
            std::fs::create_dir_all(ws.join(".langbot")).expect("workspace");
            std::fs::write(ws.join(".langbot/agent-context.json"), "{}").expect("file");
            ws
        };

        let mut first = Vec::new();
        for n in 0..runs {
            let ws = workspace(n);
            let started = Instant::now();
            let checkout = Checkout::ensure(&project, &ws, format!("chat/c{n}"), &bridge_paths)
                .await
                .expect("worktree");
            checkout.before().await.expect("state before");
            first.push(started.elapsed());
        }

        let ws = workspace(runs);
        let branch = format!("chat/c{runs}");
        Checkout::ensure(&project, &ws, branch.clone(), &bridge_paths)
            .await
            .expect("worktree");
        let (mut changed, mut unchanged, mut committed) = (Vec::new(), Vec::new(), Vec::new());
        // Where a later turn that changed one file spends its time.
        let (mut found, mut state_before, mut look_after, mut kept_after) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for n in 0..runs * 3 {
            for (times, edit, commit) in [
                (&mut changed, true, false),
                (&mut unchanged, false, false),
                (&mut committed, true, true),
            ] {
                let started = Instant::now();
                let checkout = Checkout::ensure(&project, &ws, branch.clone(), &bridge_paths)
                    .await
                    .expect("worktree");
                let is_found = started.elapsed();
                let before = checkout.before().await.expect("state before");
                let harness_ran = started.elapsed();
                if edit {
                    let file = ws.join("src/m000/f00000.rs");
                    let mut text = std::fs::read_to_string(&file).expect("read");
                    text.push_str(&format!("// turn {n}\n"));
                    std::fs::write(&file, text).expect("edit");
                }
                if commit {
                    // The harness's commit, as its git makes it: objects
                    // in the workspace, HEAD in the worktree's record.
                    let status = std::process::Command::new("git")
                        .current_dir(&ws)
                        .args(["commit", "-qam", "Turn"])
                        .envs(checkout.git_env())
                        .envs(project.git_env())
                        .env("GIT_CONFIG_GLOBAL", "/dev/null")
                        .status()
                        .expect("git runs");
                    assert!(status.success(), "the harness's commit");
                }
                let after = Instant::now();
                let changes = checkout.changes_since(&before).await.expect("changes");
                assert_eq!(changes.is_some(), edit);
                let looked = after.elapsed();
                // The state kept for the next turn, after the person has
                // the summary: a turn's own time, not the person's wait.
                let keeping = Instant::now();
                checkout.kept().await;
                if edit && !commit {
                    found.push(is_found);
                    state_before.push(harness_ran - is_found);
                    look_after.push(looked);
                    kept_after.push(keeping.elapsed());
                }
                times.push(harness_ran + looked);
            }
        }
        println!(
            "project of {files} files: first turn (worktree made + state) {:.1} ms; \
             later turn, one file changed (worktree found + state + summary and diff) {:.1} ms; \
             later turn, nothing changed {:.1} ms; \
             later turn, one file changed and committed (the commit taken in too) {:.1} ms",
            median(first),
            median(changed),
            median(unchanged),
            median(committed),
        );
        println!(
            "  of a later turn that changed one file: the worktree found {:.1} ms, \
             the state before (the watch) {:.1} ms, the look after {:.1} ms; \
             then, after the summary, the state kept for the next turn {:.1} ms",
            median(found),
            median(state_before),
            median(look_after),
            median(kept_after),
        );
    });
}
