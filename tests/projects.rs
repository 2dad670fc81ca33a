//! Projects: a chat bound to a code repository, through `serve` as an
//! operator runs it. A real git repository; a scripted harness (caged, as
//! every harness is by default) that edits a file, commits when told, and
//! waits when told so two conversations can be held at the same moment;
//! and the real Claude Code and Codex against fake models, alone and side
//! by side on one project (its own branch each, or one shared folder).

use harness_bridge_testkit as common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::repo::{git, repository};
use common::server::ServeProcess;
use serde_json::{Value, json};

/// The harness: appends the word after `WRITE:` to greeting.txt, commits
/// on `COMMIT`, and on `WAIT` says it is ready and waits for `go`; tries
/// to write each `PROBE:path`, read each `PEEK:path`, move each
/// `REF:ref` to its HEAD and push to each `PUSH:remote` (`HELD` or
/// `BROKE` in `.langbot/probes`); runs what `SH:[…]` holds; on `REPOINT`
/// points its worktree's `.git` elsewhere; on `PUBLISH` calls the bridge's
/// `publish` tool. What it saw of greeting.txt, its prompt and its
/// environment are kept in the bridge's folder.
const HARNESS: &str = r#"#!/bin/sh
prompt=$(cat)
word=$(printf '%s' "$prompt" | grep -o 'WRITE:[a-z]*' | head -n 1 | cut -d: -f2)
echo "start $word" >> .langbot/turn-log
if [ -n "$word" ]; then echo "$word" >> greeting.txt; fi
case "$prompt" in *COMMIT*)
  { git add greeting.txt && git commit -q -m "Greet $word"; } > .langbot/commit.log 2>&1 ;;
esac
case "$prompt" in *WAIT*)
  touch .langbot/ready
  i=0
  while [ ! -e .langbot/go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done ;;
esac
for target in $(printf '%s' "$prompt" | grep -o 'PROBE:[^ ]*' | cut -d: -f2-); do
  if ( echo probe >> "$target" ) 2>/dev/null; then echo "BROKE write $target"; else echo "HELD write $target"; fi
done >> .langbot/probes
for target in $(printf '%s' "$prompt" | grep -o 'PEEK:[^ ]*' | cut -d: -f2-); do
  if cat "$target" > /dev/null 2>&1; then echo "BROKE read $target"; else echo "HELD read $target"; fi
done >> .langbot/probes
case "$prompt" in *REPOINT*) echo "gitdir: /nonexistent/elsewhere" > .git ;; esac
for target in $(printf '%s' "$prompt" | grep -o 'REF:[^ ]*' | cut -d: -f2-); do
  if git update-ref "$target" HEAD 2>/dev/null; then echo "BROKE ref $target"; else echo "HELD ref $target"; fi
done >> .langbot/probes
for target in $(printf '%s' "$prompt" | grep -o 'PUSH:[^ ]*' | cut -d: -f2-); do
  if git push -q "$target" HEAD:refs/heads/escaped 2>/dev/null; then echo "BROKE push $target"; else echo "HELD push $target"; fi
done >> .langbot/probes
sh_command=$(printf '%s' "$prompt" | sed -n 's/.*SH:\[\(.*\)\].*/\1/p')
if [ -n "$sh_command" ]; then sh -c "$sh_command" >> .langbot/sh.log 2>&1; fi
case "$prompt" in *PUBLISH*)
  curl -s -X POST "$LANGBOT_MCP_URL" -H "Authorization: Bearer $LANGBOT_MCP_TOKEN" \
    -H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"publish","arguments":{}}}' \
    > .langbot/publish.out 2>&1 ;;
esac
printf '%s' "$prompt" > .langbot/prompt
env > .langbot/env
cp greeting.txt .langbot/seen
echo "end $word" >> .langbot/turn-log
echo '{"type":"system","subtype":"init","session_id":"p-1","mcp_servers":[]}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Edited."}]},"session_id":"p-1"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"Edited.","session_id":"p-1","stop_reason":"end_turn"}'
"#;

const SPEC: &str = r#"
name: editor
label: Editor
description: A shell script that edits the project's files.
binary: project-harness
argv:
  new: ["--new"]
  resume: ["--resume", "{session_id}"]
stdin: prompt
env:
  pass: [PATH]
family: claude
skills_dir: .editor/skills
session_store: unknown
session_id_format: token
install_hint: "it is written by the test"
"#;

struct Setup {
    serve: ServeProcess,
    repo: PathBuf,
    _dir: tempfile::TempDir,
}

async fn serve_with_project() -> Setup {
    serve_with_project_as("").await
}

/// [`serve_with_project`] with more of the project's settings (`mode: shared`).
async fn serve_with_project_as(settings: &str) -> Setup {
    serve_with_project_and(settings, "", &[]).await
}

/// The harness and its spec, in `dir/tools` (the harness) and
/// `dir/tools/adapters`.
fn write_tools(dir: &Path) -> PathBuf {
    let tools = dir.join("tools");
    std::fs::create_dir_all(tools.join("adapters")).unwrap();
    let script = tools.join("project-harness");
    std::fs::write(&script, HARNESS).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(tools.join("adapters/editor.yaml"), SPEC).unwrap();
    tools
}

/// `PATH` with the test's harness first.
fn path_with(tools: &Path) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", tools.display())
}

/// [`serve_with_project_as`] with bridge.yaml's own `top` settings and
/// more of serve's environment.
async fn serve_with_project_and(settings: &str, top: &str, env: &[(&str, String)]) -> Setup {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q", "-b", "main"]);
    std::fs::write(other.join("secret.txt"), "another project's\n").unwrap();
    let tools = write_tools(dir.path());
    let config = format!(
        "adapters: {}\ndefault_harness: editor\nkill_grace_seconds: 1\n{top}\
         projects:\n  web:\n    repository: {}\n{settings}",
        tools.join("adapters").display(),
        repo.display()
    );
    // The other project is the operator's too, but not this binding's.
    let _ = &other;
    let path = path_with(&tools);
    let mut env = env.to_vec();
    env.push(("PATH", path));
    let serve = ServeProcess::spawn(Arc::new(common::tempdir()), &config, &env).await;
    Setup {
        serve,
        repo,
        _dir: dir,
    }
}

fn turn(conversation: &str, text: &str, project: &str) -> Value {
    json!({"conversation": conversation, "text": text, "config": {"project": project}})
}

fn of_type<'a>(results: &'a [Value], kind: &str) -> Vec<&'a Value> {
    results.iter().filter(|r| r["type"] == kind).collect()
}

fn terminal(results: &[Value]) -> &Value {
    results.last().expect("a terminal result")
}

/// The summary the turn sent, if any.
fn summary(results: &[Value]) -> Option<String> {
    of_type(results, "message.completed")
        .into_iter()
        .filter_map(|r| r["data"]["message"]["content"].as_str())
        .find(|t| t.starts_with("Changes on branch"))
        .map(str::to_string)
}

/// The diff file the turn sent, decoded.
fn diff(results: &[Value]) -> String {
    use base64::Engine as _;
    let file = of_type(results, "artifact.created")
        .into_iter()
        .find(|r| {
            r["data"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("changes-") && n.ends_with(".diff"))
        })
        .expect("the diff is sent as a file");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(file["data"]["content_base64"].as_str().expect("inline"))
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

/// That a completed turn told of its own one-line edit of greeting.txt
/// (`mine`), in the summary and the diff, and nothing of `theirs`.
fn told_only_its_own_edit(results: &[Value], mine: &str, theirs: &str) {
    assert_eq!(terminal(results)["type"], "run.completed", "{results:#?}");
    let said = summary(results).expect("a turn that changed the worktree says so");
    assert!(
        said.contains("1 file changed, +1 −0") && said.contains("- greeting.txt (+1 −0)"),
        "{said}"
    );
    let diff = diff(results);
    assert!(diff.contains(&format!("+{mine}")), "{diff}");
    assert!(!diff.contains(theirs), "{diff}");
    assert!(
        !diff.contains(".langbot"),
        "the bridge's files are not in the diff: {diff}"
    );
}

/// The workspaces whose harness wrote `.langbot/<file>`.
fn workspaces_with(root: &Path, file: &str) -> Vec<PathBuf> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.path().ends_with(Path::new(".langbot").join(file)))
        .filter_map(|e| Some(e.path().parent()?.parent()?.to_path_buf()))
        .collect()
}

/// The conversation's branch a worktree works for: its HEAD is detached
/// (a harness moves no shared ref), at the branch's commit between turns.
fn branch_of(worktree: &Path) -> String {
    let head = git(worktree, &["rev-parse", "HEAD"]);
    let repo = git(
        worktree,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    );
    let branches = git(
        Path::new(repo.trim()),
        &[
            "branch",
            "--format=%(refname:short)",
            "--points-at",
            head.trim(),
        ],
    );
    let mine: Vec<&str> = branches
        .lines()
        .filter(|b| b.starts_with("chat/"))
        .collect();
    assert_eq!(mine.len(), 1, "the branch at {head}: {branches}");
    mine[0].to_string()
}

/// The worktree of `conversation`: the workspace whose context names it.
fn workspace_of(root: &Path, conversation: &str) -> PathBuf {
    workspaces_with(root, "seen")
        .into_iter()
        .find(|ws| {
            let context =
                std::fs::read_to_string(ws.join(".langbot/agent-context.json")).unwrap_or_default();
            let context: Value = serde_json::from_str(&context).unwrap_or_default();
            names_conversation(&context, conversation)
        })
        .unwrap_or_else(|| panic!("no worktree of {conversation}"))
}

/// Whether a projected context is of `conversation`.
fn names_conversation(value: &Value, conversation: &str) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| {
            (k == "conversation_id" && v == conversation) || names_conversation(v, conversation)
        }),
        Value::Array(items) => items.iter().any(|v| names_conversation(v, conversation)),
        _ => false,
    }
}

/// The worktrees whose harness has said it is ready, once there are `n`.
async fn ready_worktrees(root: &Path, n: usize) -> Vec<PathBuf> {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let ready = workspaces_with(root, "ready");
            if ready.len() >= n {
                return ready;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} harnesses ready"))
}

#[tokio::test]
async fn two_conversations_edit_one_file_on_their_own_branches_at_the_same_time() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    let alice = serve.spawn_results(turn("alice", "WAIT WRITE:alpha", "web"));
    let bob = serve.spawn_results(turn("bob", "WAIT WRITE:beta", "web"));
    // Both harnesses are running, each has written its word: neither
    // goes on until both have.
    let ready = ready_worktrees(&serve.workspaces(), 2).await;
    for workspace in &ready {
        std::fs::write(workspace.join(".langbot/go"), "").unwrap();
    }
    let (alice, bob) = (alice.await.unwrap(), bob.await.unwrap());
    told_only_its_own_edit(&alice, "alpha", "beta");
    told_only_its_own_edit(&bob, "beta", "alpha");
    // Each saw only its own change, on its own branch.
    for workspace in &ready {
        let seen = std::fs::read_to_string(workspace.join(".langbot/seen")).unwrap();
        assert!(
            seen == "hello\nalpha\n" || seen == "hello\nbeta\n",
            "one conversation saw the other's change: {seen:?}"
        );
        let status = git(workspace, &["status", "--porcelain"]);
        assert_eq!(
            status.trim(),
            "M greeting.txt",
            "only the harness's change is git's to see"
        );
    }
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    assert_eq!(
        branches.lines().filter(|b| b.starts_with("chat/")).count(),
        2,
        "{branches}"
    );
    // The operator's own checkout is untouched.
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "");
}

#[tokio::test]
async fn a_later_turns_summary_names_exactly_what_it_changed() {
    let Setup { serve, _dir, .. } = serve_with_project().await;
    let first = serve.results(turn("lee", "WRITE:alpha", "web")).await;
    assert_eq!(summary_of(&first).lines().count(), 3, "{first:#?}");
    // A folder made and filled, a file removed, one made and removed
    // again, one changed back as it was.
    let text = "SH:[mkdir -p docs/deep && echo hi > docs/deep/new.md && rm greeting.txt && \
                echo x > scratch.txt && rm scratch.txt && cp .git .langbot/keep && \
                echo later >> .langbot/keep]";
    let second = serve.results(turn("lee", text, "web")).await;
    assert_eq!(terminal(&second)["type"], "run.completed", "{second:#?}");
    let said = summary_of(&second);
    assert!(
        said.contains("2 files changed, +1 −2")
            && said.contains("- docs/deep/new.md (+1 −0)")
            && said.contains("- greeting.txt (+0 −2)")
            && !said.contains("scratch"),
        "{said}"
    );
    let shown = diff(&second);
    assert!(
        shown.contains("+hi") && !shown.contains(".langbot"),
        "{shown}"
    );
    // Nothing this time, then one line again: each turn tells its own.
    let third = serve.results(turn("lee", "just look", "web")).await;
    assert_eq!(summary(&third), None, "{third:#?}");
    let fourth = serve
        .results(turn("lee", "SH:[echo more >> docs/deep/new.md]", "web"))
        .await;
    let said = summary_of(&fourth);
    assert!(
        said.contains("1 file changed, +1 −0") && said.contains("docs/deep/new.md"),
        "{said}"
    );
    // A file git ignores, written beside a change: only the change.
    let fifth = serve
        .results(turn("lee", "SH:[echo '*.log' > .gitignore]", "web"))
        .await;
    assert!(
        summary_of(&fifth).contains("- .gitignore (+1 −0)"),
        "{fifth:#?}"
    );
    let noisy = "SH:[echo noise > build.log && echo again >> docs/deep/new.md]";
    let sixth = serve.results(turn("lee", noisy, "web")).await;
    let said = summary_of(&sixth);
    assert!(
        said.contains("1 file changed, +1 −0")
            && said.contains("docs/deep/new.md")
            && !said.contains("build.log"),
        "{said}"
    );
    // A write the kernel reports on no watched folder (through a hard
    // link from the bridge's), then committed: a turn that commits is
    // looked at whole, so the commit's content is shown all the same.
    let sneaky = "SH:[ln docs/deep/new.md .langbot/link && echo sneaky >> .langbot/link && \
                  git commit -qam Sneaky]";
    let seventh = serve.results(turn("lee", sneaky, "web")).await;
    let said = summary_of(&seventh);
    assert!(said.contains("Sneaky"), "{said}");
    assert!(diff(&seventh).contains("+sneaky"), "{seventh:#?}");
}

#[tokio::test]
async fn a_commit_made_in_the_cage_is_on_the_conversations_branch_and_told() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    let first = serve
        .results(turn("carol", "WRITE:gamma COMMIT", "web"))
        .await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    let said = summary(&first).expect("a summary");
    assert!(
        said.contains("1 new commit") && said.contains("Greet gamma"),
        "{said}"
    );
    let workspace = workspace_of(&serve.workspaces(), "carol");
    let branch = branch_of(&workspace);
    let log = git(&repo, &["log", "--format=%s|%an", branch.trim()]);
    assert!(
        log.starts_with("Greet gamma|harness-bridge\n"),
        "the commit is in the repository, by the project's author: {log}"
    );
    // The worktree is kept: a turn that changes nothing says nothing.
    let second = serve.results(turn("carol", "just look", "web")).await;
    assert_eq!(terminal(&second)["type"], "run.completed", "{second:#?}");
    assert_eq!(summary(&second), None, "{second:#?}");
    assert!(of_type(&second, "artifact.created").is_empty());
    assert_eq!(
        std::fs::read_to_string(workspace.join(".langbot/seen")).unwrap(),
        "hello\ngamma\n"
    );
    // A worktree folder removed by hand comes back from its branch, with
    // the commit, and the turn changed nothing.
    std::fs::remove_dir_all(&workspace).unwrap();
    let third = serve.results(turn("carol", "just look", "web")).await;
    assert_eq!(terminal(&third)["type"], "run.completed", "{third:#?}");
    assert_eq!(summary(&third), None, "{third:#?}");
    assert_eq!(
        std::fs::read_to_string(workspace.join(".langbot/seen")).unwrap(),
        "hello\ngamma\n"
    );
}

#[tokio::test]
async fn a_project_is_picked_by_name_and_an_unknown_one_starts_nothing() {
    let Setup { serve, _dir, .. } = serve_with_project().await;
    for (config, expected) in [
        (
            json!({"project": "mobile"}),
            "unknown project `mobile` (known: web)",
        ),
        // A path is not a name.
        (
            json!({"project": {"repository": "/etc"}}),
            "picks a project by name",
        ),
    ] {
        let response = serve
            .client
            .post(format!("{}/v1/runs", serve.url))
            .body(
                json!({"conversation": "dave", "text": "WRITE:delta", "config": config})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 422, "refused before it queues");
        let body = response.text().await.unwrap();
        assert!(body.contains(expected), "{body}");
    }
    assert!(
        workspaces_with(&serve.workspaces(), "seen").is_empty(),
        "no harness ran"
    );
}

/// Every entry of a folder, links not followed: its path and what it
/// holds (a file's bytes, a link's target).
fn tree_of(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| {
            let held = if e.path_is_symlink() {
                std::fs::read_link(e.path())
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if e.file_type().is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (e.path().to_path_buf(), held)
        })
        .collect()
}

/// The harness's view of the repository's folder (`.langbot/git-common`,
/// its git's `commondir`) is in its workspace, so the harness may put
/// anything there; the bridge writes it again at every turn and follows
/// nothing it finds. A link to another conversation's worktree in its
/// place, then a link to that worktree's file in place of the packed
/// refs and a folder holding a link in place of `refs`: the other
/// worktree is untouched, the view is made again, and the next commit
/// works, its git reading the repository's packed refs through the copy.
#[tokio::test]
async fn what_a_harness_puts_in_place_of_its_view_of_the_repository_is_replaced_never_followed() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    // `main` only in the packed refs: the copy is what the harness reads.
    git(&repo, &["pack-refs", "--all"]);
    let bob = serve.results(turn("bob", "WRITE:beta", "web")).await;
    assert_eq!(terminal(&bob)["type"], "run.completed", "{bob:#?}");
    let bob_ws = workspace_of(&serve.workspaces(), "bob");
    let bob_before = tree_of(&bob_ws);
    let first = serve.results(turn("carol", "WRITE:gamma", "web")).await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    let bob_file = bob_ws.join("greeting.txt");
    let carol_ws = workspace_of(&serve.workspaces(), "carol");
    let view = carol_ws.join(".langbot/git-common");
    for (plant, planted_at) in [
        format!(
            "SH:[rm -rf .langbot/git-common && ln -s {} .langbot/git-common]",
            bob_ws.display()
        ),
        format!(
            "SH:[rm -rf .langbot/git-common/packed-refs .langbot/git-common/refs && \
             ln -s {} .langbot/git-common/packed-refs && mkdir .langbot/git-common/refs && \
             ln -s {} .langbot/git-common/refs/into]",
            bob_file.display(),
            bob_ws.display()
        ),
    ]
    .into_iter()
    .zip([view.clone(), view.join("packed-refs")])
    {
        let planted = serve.results(turn("carol", &plant, "web")).await;
        assert_eq!(terminal(&planted)["type"], "run.completed", "{planted:#?}");
        assert!(
            std::fs::symlink_metadata(&planted_at).is_ok_and(|m| m.is_symlink()),
            "the harness planted its link at {}",
            planted_at.display()
        );
    }
    let text = "WRITE:delta COMMIT SH:[git rev-parse main > .langbot/main.txt]";
    let results = serve.results(turn("carol", text, "web")).await;
    assert_eq!(terminal(&results)["type"], "run.completed", "{results:#?}");
    let log = std::fs::read_to_string(carol_ws.join(".langbot/commit.log")).unwrap_or_default();
    assert!(!log.contains("error") && !log.contains("fatal"), "{log}");
    let branch = branch_of(&carol_ws);
    let subjects = git(&repo, &["log", "--format=%s", branch.trim()]);
    assert!(subjects.starts_with("Greet delta\n"), "{subjects}");
    let main = std::fs::read_to_string(carol_ws.join(".langbot/main.txt")).unwrap_or_default();
    assert_eq!(main.trim(), git(&repo, &["rev-parse", "main"]).trim());
    // The view is the bridge's again, and the other worktree as it was.
    assert!(std::fs::symlink_metadata(&view).unwrap().is_dir());
    assert_eq!(
        std::fs::read_link(view.join("refs")).unwrap(),
        repo.join(".git/refs")
    );
    assert_eq!(
        std::fs::read(view.join("packed-refs")).unwrap(),
        std::fs::read(repo.join(".git/packed-refs")).unwrap()
    );
    assert!(
        !std::fs::symlink_metadata(view.join("packed-refs"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(tree_of(&bob_ws), bob_before, "another worktree changed");
}

#[tokio::test]
async fn a_caged_agent_commits_on_its_branch_and_reaches_nothing_else_of_the_repository() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    // Another conversation's worktree, to try to read.
    let bob = serve.results(turn("bob", "WRITE:beta", "web")).await;
    assert_eq!(terminal(&bob)["type"], "run.completed", "{bob:#?}");
    let bob_ws = workspace_of(&serve.workspaces(), "bob");
    let bob_branch = branch_of(&bob_ws);
    let refs_before = git(&repo, &["for-each-ref"]);
    let other = repo.parent().unwrap().join("other");
    let git_dir = repo.join(".git");
    let probes = [
        format!("PROBE:{}", git_dir.join("config").display()),
        format!("PROBE:{}", git_dir.join("hooks/post-checkout").display()),
        format!("PROBE:{}", git_dir.join("info/exclude").display()),
        format!("PROBE:{}", repo.join("greeting.txt").display()),
        format!("PROBE:{}", other.join(".git/config").display()),
        format!("PEEK:{}", other.join("secret.txt").display()),
        format!("PEEK:{}", bob_ws.join("greeting.txt").display()),
        // The refs and objects every conversation and the operator share.
        format!("PROBE:{}", git_dir.join("refs/heads/main").display()),
        format!("PROBE:{}", git_dir.join("objects/forged").display()),
        format!("PROBE:{}", git_dir.join("packed-refs").display()),
        // The same, through the harness's own view of the repository's
        // folder (its git's `commondir`, in the workspace).
        "PROBE:.langbot/git-common/refs/heads/main".to_string(),
        "PROBE:.langbot/git-common/config".to_string(),
        "PROBE:.langbot/git-common/info/exclude".to_string(),
        "REF:refs/heads/main".to_string(),
        format!("REF:refs/heads/{bob_branch}"),
        "REF:refs/heads/planted".to_string(),
    ];
    let text = format!("WRITE:gamma COMMIT REPOINT {}", probes.join(" "));
    let results = serve.results(turn("carol", &text, "web")).await;
    assert_eq!(terminal(&results)["type"], "run.completed", "{results:#?}");
    // A worktree whose `.git` the agent pointed elsewhere is still read by
    // the bridge's own paths, and is put back for the next turn.
    let summary = summary(&results).expect("a summary despite the moved .git");
    assert!(summary.contains("1 new commit"), "{summary}");
    let again = serve.results(turn("carol", "WRITE:delta", "web")).await;
    assert!(summary_of(&again).contains("+1 −0"), "{again:#?}");
    let carol_ws = workspace_of(&serve.workspaces(), "carol");
    let said = std::fs::read_to_string(carol_ws.join(".langbot/probes")).unwrap();
    assert_eq!(said.lines().count(), probes.len(), "{said}");
    assert!(
        !said.contains("BROKE"),
        "the cage let the agent through:\n{said}"
    );
    // The control: its own commit landed, on its branch only.
    let log = std::fs::read_to_string(carol_ws.join(".langbot/commit.log")).unwrap_or_default();
    // Not a word of error: git locks the packed refs it would delete a
    // pseudo-ref from in the harness's own folder, not the repository's.
    assert!(
        !log.contains("error") && !log.contains("fatal"),
        "the commit said it failed in the cage: {log}"
    );
    let branch = branch_of(&carol_ws);
    let subjects = git(&repo, &["log", "--format=%s", branch.trim()]);
    assert!(subjects.starts_with("Greet gamma\n"), "{subjects}");
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello\n"
    );
    let config = std::fs::read_to_string(git_dir.join("config")).unwrap();
    assert!(!config.contains("probe"), "{config}");
    // Of the shared refs, only carol's own branch moved, and the bridge
    // moved it; the repository is whole.
    let refs_after = git(&repo, &["for-each-ref"]);
    let changed: Vec<&str> = refs_after
        .lines()
        .filter(|l| !refs_before.lines().any(|b| b == *l))
        .collect();
    assert_eq!(changed.len(), 1, "{refs_before}\n{refs_after}");
    assert!(
        changed[0].ends_with(&format!("refs/heads/{}", branch.trim())),
        "{changed:?}"
    );
    git(&repo, &["fsck", "--no-dangling", "--strict"]);
}

fn summary_of(results: &[Value]) -> String {
    summary(results).unwrap_or_else(|| panic!("no summary in {results:#?}"))
}

#[tokio::test]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_code_edits_and_commits_in_its_worktree_and_the_chat_is_told() {
    use common::anthropic::{BASH_DONE, fake_model_running};
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let (model_url, fake) = fake_model_running(
        "echo 'hello from claude' >> greeting.txt && git commit -qam 'Claude greets'",
    )
    .await;
    let extra = format!(
        "projects:\n  web:\n    repository: {}\n    author: \"Chat agent <agent@example.org>\"\n\
         default_config:\n  permission_mode: bypassPermissions\n  project: web\n",
        repo.display()
    );
    let (serve, _home) = common::server::serve_claude(model_url, &extra).await;
    let results = serve
        .results(json!({"conversation": "erin", "text": "Greet, and commit it."}))
        .await;
    assert_eq!(terminal(&results)["type"], "run.completed", "{results:#?}");
    let said: Vec<&str> = of_type(&results, "message.completed")
        .into_iter()
        .filter_map(|r| r["data"]["message"]["content"].as_str())
        .collect();
    assert!(said.iter().any(|t| t.contains(BASH_DONE)), "{said:?}");
    // What the commit printed, as the model read it: no error.
    let requests = fake.requests.lock().unwrap().clone();
    let read = serde_json::to_string(&requests).unwrap();
    assert!(
        !read.contains("error:") && !read.contains("fatal:"),
        "the model read an error from its commit: {read}"
    );
    let summary = summary_of(&results);
    assert!(
        summary.contains("1 file changed, +1 −0")
            && summary.contains("1 new commit")
            && summary.contains("Claude greets"),
        "{summary}"
    );
    let diff = diff(&results);
    assert!(diff.contains("+hello from claude"), "{diff}");
    assert!(
        !diff.contains(".claude") && !diff.contains(".langbot"),
        "{diff}"
    );
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    let branch = branches
        .lines()
        .find(|b| b.starts_with("chat/erin-"))
        .unwrap_or_else(|| panic!("{branches}"));
    let log = git(&repo, &["log", "-1", "--format=%s|%ae", branch]);
    assert_eq!(log.trim(), "Claude greets|agent@example.org");
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn codex_edits_and_commits_in_its_worktree_and_the_chat_is_told() {
    use common::openai::{self, RUN};
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let (model_url, _fake) = openai::fake_model(false).await;
    let home = common::tempdir();
    openai::codex_home(home.path(), &model_url);
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        ("CODEX_HOME", home.path().display().to_string()),
        ("OPENAI_API_KEY", "test-key".to_string()),
    ];
    let config = format!(
        "harness_binaries:\n  codex: {}\ndefault_harness: codex\nshutdown_grace_seconds: 5\n\
         projects:\n  web:\n    repository: {}\ndefault_config:\n  project: web\n",
        common::cli("codex").display(),
        repo.display()
    );
    let serve = ServeProcess::spawn(Arc::new(common::tempdir()), &config, &env).await;
    let command = "echo 'hello from codex' >> greeting.txt && git commit -qam 'Codex greets'";
    let results = serve
        .results(json!({"conversation": "frank", "text": format!("{RUN}{command}")}))
        .await;
    assert_eq!(terminal(&results)["type"], "run.completed", "{results:#?}");
    let summary = summary_of(&results);
    assert!(
        summary.contains("1 file changed, +1 −0") && summary.contains("Codex greets"),
        "{summary}"
    );
    assert!(diff(&results).contains("+hello from codex"));
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    let branch = branches
        .lines()
        .find(|b| b.starts_with("chat/frank-"))
        .unwrap_or_else(|| panic!("{branches}"));
    let log = git(&repo, &["log", "-1", "--format=%s", branch]);
    assert_eq!(log.trim(), "Codex greets");
}

/// A command that appends `word` to greeting.txt, says it is ready and
/// waits (a minute at most) for the test's `go`, then keeps what it saw.
fn edit_and_wait(word: &str) -> String {
    format!(
        "echo {word} >> greeting.txt && touch .langbot/ready && i=0 && \
         while [ ! -e .langbot/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done && \
         cp greeting.txt .langbot/seen"
    )
}

/// `serve` with Claude Code and Codex on project `web` (`settings` more
/// of its declaration), each against a fake model: Claude Code runs
/// `claude_runs` with its Bash tool; Codex runs what follows
/// [`common::openai::RUN`] in its prompt.
struct TwoClis {
    serve: ServeProcess,
    repo: PathBuf,
    _keep: (
        tempfile::TempDir,
        tempfile::TempDir,
        common::anthropic::Fake,
        common::openai::Fake,
    ),
}

async fn serve_claude_and_codex(settings: &str, claude_runs: &str) -> TwoClis {
    use common::{anthropic, openai};
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let (claude_model, claude_fake) = anthropic::fake_model_running(claude_runs).await;
    let (codex_model, codex_fake) = openai::fake_model(false).await;
    let home = common::tempdir();
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    openai::codex_home(&codex_home, &codex_model);
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        (
            "CLAUDE_CONFIG_DIR",
            home.path().join(".claude").display().to_string(),
        ),
        ("ANTHROPIC_BASE_URL", claude_model),
        ("ANTHROPIC_API_KEY", "test-key".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
        ("CODEX_HOME", codex_home.display().to_string()),
        ("OPENAI_API_KEY", "test-key".to_string()),
    ];
    let config = format!(
        "harness_binaries:\n  claude-code: {}\n  codex: {}\nshutdown_grace_seconds: 5\n\
         projects:\n  web:\n    repository: {}\n{settings}",
        common::cli("claude").display(),
        common::cli("codex").display(),
        repo.display()
    );
    let serve = ServeProcess::spawn(Arc::new(common::tempdir()), &config, &env).await;
    TwoClis {
        serve,
        repo,
        _keep: (dir, home, claude_fake, codex_fake),
    }
}

/// A turn of `conversation` on project `web`: Claude Code's (with every
/// permission) or Codex's running `command`.
fn cli_turn(conversation: &str, harness: &str, command: &str) -> Value {
    match harness {
        "codex" => json!({
            "conversation": conversation, "harness": "codex",
            "text": format!("{}{command}", common::openai::RUN),
            "config": {"project": "web"}
        }),
        _ => json!({
            "conversation": conversation, "harness": "claude-code", "text": "Go on.",
            "config": {"project": "web", "permission_mode": "bypassPermissions"}
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude and codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_and_codex_edit_one_file_on_their_own_branches_at_the_same_time() {
    let TwoClis { serve, repo, _keep } = serve_claude_and_codex("", &edit_and_wait("alpha")).await;
    let root = serve.workspaces();
    // Claude Code's turn edits and holds; Codex's starts while it holds,
    // edits the same file on its own branch, and holds too: both are in
    // the middle of their turns at once when the test lets them go.
    let alice = serve.spawn_results(cli_turn("alice", "claude-code", ""));
    let first = ready_worktrees(&root, 1).await;
    let bob = serve.spawn_results(cli_turn("bob", "codex", &edit_and_wait("beta")));
    let both = ready_worktrees(&root, 2).await;
    assert!(!alice.is_finished(), "Claude Code's turn is still running");
    for worktree in &both {
        std::fs::write(worktree.join(".langbot/go"), "").unwrap();
    }
    let (alice, bob) = (alice.await.unwrap(), bob.await.unwrap());
    told_only_its_own_edit(&alice, "alpha", "beta");
    told_only_its_own_edit(&bob, "beta", "alpha");
    for worktree in &both {
        let seen = std::fs::read_to_string(worktree.join(".langbot/seen")).unwrap();
        let mine = if *worktree == first[0] {
            "alpha"
        } else {
            "beta"
        };
        assert_eq!(
            seen,
            format!("hello\n{mine}\n"),
            "each saw only its own edit"
        );
        assert_eq!(
            git(worktree, &["status", "--porcelain"]).trim(),
            "M greeting.txt",
            "only the harness's edit is git's to see"
        );
    }
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    assert!(
        branches.lines().any(|b| b.starts_with("chat/alice-"))
            && branches.lines().any(|b| b.starts_with("chat/bob-")),
        "{branches}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude and codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_and_codex_take_turns_in_a_shared_project() {
    let claude_runs = format!(
        "echo 'start alpha' >> .langbot/turn-log && {} && echo 'end alpha' >> .langbot/turn-log",
        edit_and_wait("alpha")
    );
    let TwoClis { serve, repo, _keep } =
        serve_claude_and_codex("    mode: shared\n", &claude_runs).await;
    let alice = serve.spawn_results(cli_turn("alice", "claude-code", ""));
    let shared = ready_worktrees(&serve.workspaces(), 1).await.remove(0);
    // Bob's Codex turn arrives while Claude Code's holds the project: it
    // waits, its harness not started.
    let bob = serve.spawn_results(cli_turn(
        "bob",
        "codex",
        "echo 'start beta' >> .langbot/turn-log && echo beta >> greeting.txt && \
         echo 'end beta' >> .langbot/turn-log",
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !bob.is_finished(),
        "bob's turn ran while alice's held the project"
    );
    let log = || std::fs::read_to_string(shared.join(".langbot/turn-log")).unwrap();
    assert_eq!(log(), "start alpha\n");
    std::fs::write(shared.join(".langbot/go"), "").unwrap();
    let (alice, bob) = (alice.await.unwrap(), bob.await.unwrap());
    assert_eq!(terminal(&alice)["type"], "run.completed", "{alice:#?}");
    assert_eq!(terminal(&bob)["type"], "run.completed", "{bob:#?}");
    assert_eq!(log(), "start alpha\nend alpha\nstart beta\nend beta\n");
    // One folder: bob's Codex found alice's edit; each summary is its own.
    assert_eq!(
        std::fs::read_to_string(shared.join("greeting.txt")).unwrap(),
        "hello\nalpha\nbeta\n"
    );
    let (mine, theirs) = (diff(&alice), diff(&bob));
    assert!(mine.contains("+alpha") && !mine.contains("+beta"), "{mine}");
    assert!(
        theirs.contains("+beta") && !theirs.contains("+alpha"),
        "{theirs}"
    );
    assert!(summary_of(&bob).contains("Changes on branch `chat/shared`"));
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test]
async fn a_shared_project_runs_the_turns_of_two_conversations_one_after_another() {
    let Setup { serve, repo, _dir } = serve_with_project_as("    mode: shared\n").await;
    let alice = serve.spawn_results(turn("alice", "WAIT WRITE:alpha", "web"));
    let root = serve.workspaces();
    tokio::time::timeout(Duration::from_secs(30), async {
        while workspaces_with(&root, "ready").is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("alice's turn runs");
    // Bob asks while alice's turn holds the project: his waits. Carol's,
    // given a second, waits no longer than that.
    let bob = serve.spawn_results(turn("bob", "WRITE:beta", "web"));
    let mut hurried = turn("carol", "WRITE:gamma", "web");
    hurried["config"]["timeout_seconds"] = json!(1);
    let carol = serve.spawn_results(hurried);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !bob.is_finished(),
        "bob's turn ran while alice's held the project"
    );
    let carol = tokio::time::timeout(Duration::from_secs(10), carol)
        .await
        .expect("carol's turn ends at its deadline, alice's still running")
        .unwrap();
    let end = terminal(&carol);
    assert_eq!(end["type"], "run.failed", "{carol:?}");
    assert_eq!(end["data"]["code"], "deadline_exceeded", "{end}");
    let said = end["data"]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("shared project `web`") && said.contains("nothing of it ran"),
        "{said}"
    );
    let shared = workspaces_with(&root, "ready").pop().unwrap();
    std::fs::write(shared.join(".langbot/go"), "").unwrap();
    let (alice, bob) = (alice.await.unwrap(), bob.await.unwrap());
    let log = std::fs::read_to_string(shared.join(".langbot/turn-log")).unwrap();
    assert_eq!(log, "start alpha\nend alpha\nstart beta\nend beta\n");
    // One folder: bob found alice's change, and his summary is his own.
    assert_eq!(
        std::fs::read_to_string(shared.join(".langbot/seen")).unwrap(),
        "hello\nalpha\nbeta\n"
    );
    assert!(summary_of(&alice).contains("Changes on branch `chat/shared`"));
    let theirs = diff(&bob);
    assert!(
        theirs.contains("+beta") && !theirs.contains("+alpha"),
        "{theirs}"
    );
    assert_eq!(
        workspaces_with(&root, "seen").len(),
        1,
        "one folder for both"
    );
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    assert_eq!(
        branches
            .lines()
            .filter(|b| b.starts_with("chat/"))
            .collect::<Vec<_>>(),
        ["chat/shared"]
    );
}

/// A conversation's worktree with a commit and changes not committed,
/// left a week and a day without a turn, then serve restarted (which
/// puts away what is past its retention as it starts): the worktree's
/// folder and the repository, once it is put away.
async fn put_away_after_a_week(
    conversation: &str,
    turns: &[&str],
    meddle: impl FnOnce(&Path),
) -> (Setup, PathBuf) {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    for text in turns {
        let results = serve.results(turn(conversation, text, "web")).await;
        assert_eq!(terminal(&results)["type"], "run.completed", "{results:#?}");
    }
    let worktree = workspace_of(&serve.workspaces(), conversation);
    meddle(&worktree);
    let week_and_a_day = Duration::from_secs(8 * 24 * 3600);
    let env = [("PATH", path_with(&_dir.path().join("tools")))];
    let serve = serve.restart_after_idle(&repo, week_and_a_day, &env).await;
    (Setup { serve, repo, _dir }, worktree)
}

#[tokio::test]
async fn a_worktree_idle_past_its_retention_is_put_away_and_comes_back_as_it_was() {
    // What its harness could leave behind: links out of the worktree,
    // one where the bridge removes a folder of its own.
    let victim = common::tempdir();
    std::fs::write(victim.path().join("keep.txt"), "not the bridge's\n").unwrap();
    let meddle = |worktree: &Path| {
        std::os::unix::fs::symlink(victim.path(), worktree.join("escape")).unwrap();
        let objects = worktree.join(".langbot/git-objects");
        std::fs::remove_dir_all(&objects).unwrap();
        std::os::unix::fs::symlink(victim.path(), &objects).unwrap();
    };
    let (Setup { serve, repo, _dir }, worktree) = put_away_after_a_week(
        "ida",
        &["WRITE:alpha COMMIT", "WRITE:beta PROBE:notes.txt"],
        meddle,
    )
    .await;
    // Its files and its record are gone, links removed, not followed; its
    // branch, its commit and the bridge's folder (the conversation's
    // context, its home) stay.
    for gone in ["notes.txt", ".git", ".langbot/git-objects", "escape"] {
        assert!(
            std::fs::symlink_metadata(worktree.join(gone)).is_err(),
            "{gone} is left"
        );
    }
    assert_eq!(
        std::fs::read_to_string(victim.path().join("keep.txt")).unwrap(),
        "not the bridge's\n"
    );
    assert!(worktree.join(".langbot/agent-context.json").is_file());
    let listed = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(
        !listed.contains(&worktree.display().to_string()),
        "{listed}"
    );
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    let branch = branches
        .lines()
        .find(|b| b.starts_with("chat/ida-"))
        .unwrap_or_else(|| panic!("the branch stays: {branches}"));
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", branch]).trim(),
        "Greet alpha"
    );
    let wip = git(
        &repo,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/harness-bridge/wip/",
        ],
    );
    assert_eq!(
        wip.lines().count(),
        1,
        "the changes not committed are kept: {wip}"
    );
    assert_eq!(
        git(&repo, &["show", &format!("{}:notes.txt", wip.trim())]),
        "probe\n"
    );
    // The next turn finds it as it was, is told so, and tells of no
    // change it did not make.
    let back = serve.results(turn("ida", "just look", "web")).await;
    assert_eq!(terminal(&back)["type"], "run.completed", "{back:#?}");
    let told = said(&back);
    assert!(
        told.contains("had been put away after 8 days without a turn")
            && told.contains("made again as it was")
            && told.contains("Files git ignores"),
        "{told}"
    );
    assert_eq!(summary(&back), None, "{back:#?}");
    assert_eq!(
        std::fs::read_to_string(worktree.join(".langbot/seen")).unwrap(),
        "hello\nalpha\nbeta\n"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("notes.txt")).unwrap(),
        "probe\n"
    );
    let status = git(&worktree, &["status", "--porcelain"]);
    assert_eq!(
        status.lines().collect::<Vec<_>>(),
        [" M greeting.txt", "?? escape", "?? notes.txt"],
        "back as changes not committed on the branch's commit"
    );
    // A link comes back as git keeps one: a link, its target not read.
    assert!(
        std::fs::symlink_metadata(worktree.join("escape"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let wip = git(&repo, &["for-each-ref", "refs/harness-bridge/wip/"]);
    assert_eq!(wip, "", "put back, the kept changes are let go");
    // Turns go on as before.
    let next = serve
        .results(turn("ida", "WRITE:gamma COMMIT", "web"))
        .await;
    let told = summary_of(&next);
    assert!(
        told.contains("Greet gamma") && told.contains("+1 −0"),
        "{told}"
    );
}

/// A person's commit on the branch starting `prefix`, writing `file`,
/// from a worktree of their own.
fn commit_on_branch(repo: &Path, prefix: &str, file: &str, text: &str) {
    let branches = git(repo, &["branch", "--format=%(refname:short)"]);
    let branch = branches
        .lines()
        .find(|b| b.starts_with(prefix))
        .unwrap_or_else(|| panic!("{branches}"))
        .to_string();
    let elsewhere = repo.with_file_name("elsewhere");
    let elsewhere_arg = elsewhere.display().to_string();
    git(repo, &["worktree", "add", "-q", &elsewhere_arg, &branch]);
    std::fs::write(elsewhere.join(file), text).unwrap();
    git(&elsewhere, &["add", file]);
    common::repo::commit(&elsewhere, "A person's commit");
    git(repo, &["worktree", "remove", &elsewhere_arg]);
}

#[tokio::test]
async fn changes_not_committed_come_back_onto_a_branch_that_moved_elsewhere() {
    let (Setup { serve, repo, _dir }, worktree) =
        put_away_after_a_week("kim", &["WRITE:alpha"], |_| {}).await;
    commit_on_branch(&repo, "chat/kim-", "other.txt", "another file\n");
    let back = serve.results(turn("kim", "just look", "web")).await;
    assert_eq!(terminal(&back)["type"], "run.completed", "{back:#?}");
    assert!(said(&back).contains("made again as it was"), "{back:#?}");
    assert_eq!(summary(&back), None, "{back:#?}");
    assert_eq!(
        std::fs::read_to_string(worktree.join(".langbot/seen")).unwrap(),
        "hello\nalpha\n"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("other.txt")).unwrap(),
        "another file\n"
    );
    assert_eq!(
        git(&worktree, &["status", "--porcelain"]).trim(),
        "M greeting.txt"
    );
}

#[tokio::test]
async fn changes_a_moved_branch_conflicts_with_are_kept_and_the_person_told_how_to_get_them() {
    let (Setup { serve, repo, _dir }, worktree) =
        put_away_after_a_week("jay", &["WRITE:alpha"], |_| {}).await;
    // Meanwhile a person commits on the conversation's branch, on the
    // same line.
    commit_on_branch(&repo, "chat/jay-", "greeting.txt", "hello\nzeta\n");
    let back = serve.results(turn("jay", "just look", "web")).await;
    assert_eq!(terminal(&back)["type"], "run.completed", "{back:#?}");
    let told = said(&back);
    assert!(
        told.contains("which has moved since")
            && told.contains("conflict with the branch's new commits (in `greeting.txt`)")
            && told.contains("git cherry-pick --no-commit"),
        "{told}"
    );
    // The worktree is the branch as it is now; the kept changes are where
    // the sentence says.
    assert_eq!(
        std::fs::read_to_string(worktree.join(".langbot/seen")).unwrap(),
        "hello\nzeta\n"
    );
    let kept = git(
        &repo,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/harness-bridge/kept/",
        ],
    );
    assert_eq!(kept.lines().count(), 1, "{kept}");
    let short = kept.trim().rsplit('/').next().unwrap();
    assert!(
        told.contains(&format!("kept as commit `{short}`")),
        "{told}"
    );
    assert_eq!(
        git(&repo, &["show", &format!("{short}:greeting.txt")]),
        "hello\nalpha\n"
    );
    assert_eq!(
        git(&repo, &["for-each-ref", "refs/harness-bridge/wip/"]),
        ""
    );
}

/// The messages a turn sent the person, its terminal's text included.
fn said(results: &[Value]) -> String {
    let mut texts: Vec<String> = of_type(results, "message.completed")
        .into_iter()
        .filter_map(|r| r["data"]["message"]["content"].as_str())
        .map(str::to_string)
        .collect();
    texts.extend(
        terminal(results)["data"]["error"]
            .as_str()
            .map(str::to_string),
    );
    texts.join("\n")
}

/// The operator's checkout of the base branch has a change not committed:
/// a new conversation's first turn says its branch starts without it, and
/// the operator's checkout keeps it (git took no lock there).
#[tokio::test]
async fn a_change_the_operator_has_not_committed_is_said_to_be_left_out() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    std::fs::write(repo.join("greeting.txt"), "hello, draft\n").unwrap();
    let index = std::fs::read(repo.join(".git/index")).unwrap();
    let first = serve.results(turn("erin", "WRITE:delta", "web")).await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    let told = said(&first);
    assert!(
        told.contains(
            "The repository's checkout of `main` has changes not committed (1 file); \
             this conversation's branch starts from `main`'s last commit, without them."
        ),
        "{told}"
    );
    let workspace = workspace_of(&serve.workspaces(), "erin");
    assert_eq!(
        std::fs::read_to_string(workspace.join(".langbot/seen")).unwrap(),
        "hello\ndelta\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello, draft\n"
    );
    assert_eq!(std::fs::read(repo.join(".git/index")).unwrap(), index);
    // Said once, when the branch is made.
    let second = serve.results(turn("erin", "just look", "web")).await;
    assert!(!said(&second).contains("not committed"), "{second:#?}");
    // Once committed, a new conversation hears nothing of it.
    git(&repo, &["add", "greeting.txt"]);
    common::repo::commit(&repo, "Draft");
    let other = serve.results(turn("frank", "just look", "web")).await;
    assert_eq!(terminal(&other)["type"], "run.completed", "{other:#?}");
    assert!(!said(&other).contains("not committed"), "{other:#?}");
}

/// The turn failed before anything ran, telling the person `sentence`
/// and never the repository's path.
fn refused_in_a_sentence(results: &[Value], sentence: &str, repo: &Path) {
    assert_eq!(terminal(results)["type"], "run.failed", "{results:#?}");
    assert_eq!(terminal(results)["data"]["code"], "workspace_error");
    let told = said(results);
    assert!(told.contains(sentence), "{told}");
    assert!(
        !told.contains(&repo.display().to_string()),
        "no path: {told}"
    );
}

#[tokio::test]
async fn a_deleted_branch_a_deleted_base_and_a_moved_repository_each_get_a_sentence() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    let first = serve
        .results(turn("carol", "WRITE:gamma COMMIT", "web"))
        .await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    let workspace = workspace_of(&serve.workspaces(), "carol");
    let branch = branch_of(&workspace);
    let branch = branch.trim();
    let commit = git(&repo, &["rev-parse", branch]);

    // Her branch deleted under the bridge: made again at its last commit,
    // and she is told; her turn runs on it.
    git(
        &repo,
        &["update-ref", "-d", &format!("refs/heads/{branch}")],
    );
    let second = serve.results(turn("carol", "WRITE:delta", "web")).await;
    assert_eq!(terminal(&second)["type"], "run.completed", "{second:#?}");
    let told = said(&second);
    assert!(
        told.contains(&format!(
            "branch `{branch}` had been deleted outside the bridge"
        )) && told.contains(&format!("at its last commit `{}`", &commit[..12])),
        "{told}"
    );
    assert_eq!(git(&repo, &["rev-parse", branch]), commit);
    assert!(
        summary(&second).is_some_and(|s| s.contains("greeting.txt")),
        "{second:#?}"
    );

    // The base deleted: a new conversation cannot start, and hears why;
    // nothing ran for it. Carol's, on her own branch, goes on.
    git(&repo, &["checkout", "-q", "--detach"]);
    git(&repo, &["update-ref", "-d", "refs/heads/main"]);
    let dave = serve.results(turn("dave", "WRITE:epsilon", "web")).await;
    refused_in_a_sentence(
        &dave,
        "Project `web` cannot take a new conversation now: its base branch `main` no longer exists",
        &repo,
    );
    let carols = serve.results(turn("carol", "just look", "web")).await;
    assert_eq!(terminal(&carols)["type"], "run.completed", "{carols:#?}");

    // The repository moved: every turn hears it, nothing runs; put back,
    // the conversation goes on where it was.
    let moved = repo.with_file_name("web-moved");
    std::fs::rename(&repo, &moved).unwrap();
    let log = workspace.join(".langbot/turn-log");
    let turns_before = std::fs::read_to_string(&log).unwrap();
    let gone = serve.results(turn("carol", "WRITE:zeta", "web")).await;
    refused_in_a_sentence(
        &gone,
        "Project `web` cannot be used now: its repository is no longer where the operator set it up",
        &repo,
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        turns_before,
        "nothing ran"
    );
    std::fs::rename(&moved, &repo).unwrap();
    let back = serve.results(turn("carol", "WRITE:eta", "web")).await;
    assert_eq!(terminal(&back)["type"], "run.completed", "{back:#?}");
    assert_eq!(
        std::fs::read_to_string(workspace.join(".langbot/seen")).unwrap(),
        "hello\ngamma\ndelta\neta\n"
    );
}

/// The token serve is given to push with.
const PUSH_TOKEN: &str = "push-token-7f3a9c0e12b4d7";

/// A turn of `actor` in `conversation`.
fn turn_of(actor: &str, conversation: &str, text: &str) -> Value {
    json!({"conversation": conversation, "actor": actor, "text": text, "config": {"project": "web"}})
}

/// The branches of the bare repository `remote`.
fn remote_branches(remote: &Path) -> String {
    git(
        remote,
        &[
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            "refs/heads",
        ],
    )
}

#[tokio::test]
async fn a_publish_request_becomes_a_card_and_only_the_askers_approval_pushes_it() {
    let remote_dir = common::tempdir();
    let remote = remote_dir.path().join("web.git");
    git(remote_dir.path(), &["init", "-q", "--bare", "web.git"]);
    // The operator even lets harnesses inherit the token's variable: the
    // bridge takes it out all the same.
    // The operator's pull request command: a stand-in for the forge's
    // CLI, which keeps what it was given and prints an address.
    let opened = remote_dir.path().join("opened");
    let open_pr = remote_dir.path().join("open-pr");
    std::fs::write(
        &open_pr,
        format!(
            "#!/bin/sh\necho \"$* token:${{WEB_PUSH_TOKEN:+set}} in:$(pwd)\" > '{}'\n\
             echo 'Creating pull request'\necho 'https://git.example.org/team/web/pull/7'\n",
            opened.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &open_pr,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let settings = format!(
        "    publish:\n      remote: {}\n      token_env: WEB_PUSH_TOKEN\n\
         \x20     pull_request: [\"{}\", --head, \"{{branch}}\", --base, \"{{base}}\"]\n",
        remote.display(),
        open_pr.display()
    );
    let Setup { serve, repo, _dir } = serve_with_project_and(
        &settings,
        "pass_env: [WEB_PUSH_TOKEN]\n",
        &[("WEB_PUSH_TOKEN", PUSH_TOKEN.to_string())],
    )
    .await;
    let push = format!("PUSH:{}", remote.display());
    let text = format!("WRITE:alpha COMMIT {push} PUBLISH");
    let asked = serve.results(turn_of("alice", "alice", &text)).await;
    assert_eq!(terminal(&asked)["type"], "run.completed", "{asked:#?}");
    let workspace = workspace_of(&serve.workspaces(), "alice");
    let branch = branch_of(&workspace);
    let branch = branch.trim();
    let head = git(&workspace, &["rev-parse", "HEAD"]);
    let card = of_type(&asked, "action.requested");
    let card = &card.first().unwrap_or_else(|| panic!("a card: {asked:#?}"))["data"]["payload"];
    let title = card["title"].as_str().unwrap_or_default();
    assert!(
        title.contains(&format!(
            "asks to publish branch `{branch}` to {}",
            remote.display()
        )),
        "{card}"
    );
    let shown = card["description"].as_str().unwrap_or_default();
    assert!(
        shown.contains("1 commit on")
            && shown.contains("1 file changed, +1 −0")
            && shown.contains("Greet alpha"),
        "{shown}"
    );
    assert!(shown.contains(&head.trim()[..12]), "{shown}");
    // The harness was told how its commits reach the branch, and how to
    // publish.
    let told = std::fs::read_to_string(workspace.join(".langbot/LANGBOT_CONTEXT.md")).unwrap();
    assert!(
        told.contains(&format!("for branch\n`{branch}` (made from `main`)"))
            && told.contains("call the `publish` tool last"),
        "{told}"
    );
    let probes = std::fs::read_to_string(workspace.join(".langbot/probes")).unwrap();
    assert_eq!(
        probes.trim(),
        format!("HELD push {}", remote.display()),
        "the agent pushed itself"
    );
    assert_eq!(
        remote_branches(&remote),
        "",
        "pushed before anyone approved"
    );

    // Bob, in the same chat, cannot approve alice's request.
    let bobs = serve.results(turn_of("bob", "alice", "approve")).await;
    let told = terminal(&bobs)["data"]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        told.contains("only they (or an approver the operator named)"),
        "{bobs:#?}"
    );
    assert_eq!(remote_branches(&remote), "");

    // Alice can: the bridge pushes the commit the card showed.
    let approved = serve.results(turn_of("alice", "alice", "approve")).await;
    assert_eq!(
        terminal(&approved)["type"],
        "run.completed",
        "{approved:#?}"
    );
    assert!(
        said(&approved).contains(&format!(
            "Published branch `{branch}` (commit {})",
            &head.trim()[..12]
        )) && said(&approved).contains("Pull request: https://git.example.org/team/web/pull/7"),
        "{approved:#?}"
    );
    // The pull request was opened after the push, by the bridge, in the
    // operator's checkout, with the operator's token at hand.
    assert_eq!(
        std::fs::read_to_string(&opened).unwrap().trim(),
        format!(
            "--head {branch} --base main token:set in:{}",
            repo.display()
        )
    );
    assert_eq!(
        remote_branches(&remote).trim(),
        format!("{branch} {}", head.trim())
    );
    let prompt = std::fs::read_to_string(workspace.join(".langbot/prompt")).unwrap();
    assert!(prompt.contains("the bridge pushed branch"), "{prompt}");

    // The token reached neither the harness's environment nor any file it
    // could read, and the repository's configuration does not hold it.
    let env = std::fs::read_to_string(workspace.join(".langbot/env")).unwrap();
    assert!(
        !env.contains("WEB_PUSH_TOKEN") && !env.contains(PUSH_TOKEN),
        "{env}"
    );
    for root in [serve.workspaces(), repo.clone()] {
        for entry in walkdir::WalkDir::new(&root)
            .into_iter()
            .filter_map(Result::ok)
        {
            if entry.file_type().is_file() {
                let bytes = std::fs::read(entry.path()).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(PUSH_TOKEN),
                    "the token is in {}",
                    entry.path().display()
                );
            }
        }
    }
}

#[tokio::test]
async fn nothing_to_publish_is_refused_and_a_project_without_publish_offers_no_tool() {
    let remote_dir = common::tempdir();
    let remote = remote_dir.path().join("web.git");
    git(remote_dir.path(), &["init", "-q", "--bare", "web.git"]);
    let settings = format!("    publish:\n      remote: {}\n", remote.display());
    let Setup { serve, _dir, .. } = serve_with_project_and(&settings, "", &[]).await;
    let results = serve
        .results(turn_of("alice", "alice", "WRITE:alpha PUBLISH"))
        .await;
    assert_eq!(terminal(&results)["type"], "run.completed", "{results:#?}");
    assert!(
        of_type(&results, "action.requested").is_empty(),
        "{results:#?}"
    );
    let workspace = workspace_of(&serve.workspaces(), "alice");
    let out = std::fs::read_to_string(workspace.join(".langbot/publish.out")).unwrap();
    assert!(
        out.contains("nothing to publish; commit the changes first"),
        "{out}"
    );

    let Setup { serve, _dir, .. } = serve_with_project().await;
    let results = serve
        .results(turn_of("alice", "alice", "WRITE:alpha COMMIT PUBLISH"))
        .await;
    assert!(
        of_type(&results, "action.requested").is_empty(),
        "{results:#?}"
    );
    let workspace = workspace_of(&serve.workspaces(), "alice");
    let out = std::fs::read_to_string(workspace.join(".langbot/publish.out")).unwrap();
    assert!(out.contains("Unknown tool: publish"), "{out}");
    let told = std::fs::read_to_string(workspace.join(".langbot/LANGBOT_CONTEXT.md")).unwrap();
    assert!(
        told.contains("## Project `web`") && !told.contains("`publish` tool"),
        "{told}"
    );
}

#[tokio::test]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn claude_asks_to_publish_and_the_bridge_pushes_once_the_asker_approves() {
    use common::anthropic::{CALLS_DONE, fake_model_calling};
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let remote = dir.path().join("web.git");
    git(dir.path(), &["init", "-q", "--bare", "web.git"]);
    // Its own push, through the real Bash in its most permissive mode,
    // is the cage's to refuse.
    let edit = format!(
        "echo 'hello from claude' >> greeting.txt && git commit -qam 'Claude greets' \
         && env > .langbot/claude-env; git push -q {} HEAD:refs/heads/escaped; true",
        remote.display()
    );
    let (model_url, fake) = fake_model_calling(vec![
        (
            "Bash".into(),
            json!({"command": edit, "description": "edit"}),
        ),
        ("mcp__langbot__publish".into(), json!({})),
    ])
    .await;
    let extra = format!(
        "projects:\n  web:\n    repository: {}\n    publish:\n      remote: {}\n      \
         token_env: WEB_PUSH_TOKEN\n\
         default_config:\n  permission_mode: bypassPermissions\n  project: web\n",
        repo.display(),
        remote.display()
    );
    let (serve, _home) = common::server::serve_claude_with(
        model_url,
        &extra,
        &[("WEB_PUSH_TOKEN", PUSH_TOKEN.to_string())],
    )
    .await;
    let claude_turn =
        |actor: &str, text: &str| json!({"conversation": "erin", "actor": actor, "text": text});
    let asked = serve
        .results(claude_turn("erin", "Greet, commit, publish."))
        .await;
    assert_eq!(terminal(&asked)["type"], "run.completed", "{asked:#?}");
    let card = of_type(&asked, "action.requested");
    let card = &card.first().unwrap_or_else(|| panic!("a card: {asked:#?}"))["data"]["payload"];
    let branch = git(
        &repo,
        &[
            "branch",
            "--format=%(refname:short)",
            "--list",
            "chat/erin-*",
        ],
    );
    let branch = branch.trim();
    let head = git(&repo, &["rev-parse", branch]);
    assert!(
        card["title"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("publish branch `{branch}`")),
        "{card}"
    );
    assert!(
        card["description"]
            .as_str()
            .unwrap_or_default()
            .contains("Claude greets"),
        "{card}"
    );
    assert_eq!(
        remote_branches(&remote),
        "",
        "pushed before anyone approved"
    );

    // Someone else in the chat cannot approve; erin can.
    fake.set_script(Vec::new());
    let others = serve.results(claude_turn("mallory", "approve")).await;
    let told = terminal(&others)["data"]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(told.contains("waiting for erin"), "{others:#?}");
    assert_eq!(remote_branches(&remote), "", "{others:#?}");
    let approved = serve.results(claude_turn("erin", "approve")).await;
    assert_eq!(
        terminal(&approved)["type"],
        "run.completed",
        "{approved:#?}"
    );
    assert!(
        said(&approved).contains(&format!("Published branch `{branch}`")),
        "{approved:#?}"
    );
    assert!(said(&approved).contains(CALLS_DONE), "{approved:#?}");
    assert_eq!(
        remote_branches(&remote).trim(),
        format!("{branch} {}", head.trim())
    );

    let workspace = workspaces_with(&serve.workspaces(), "claude-env");
    let env = std::fs::read_to_string(workspace[0].join(".langbot/claude-env")).unwrap();
    assert!(env.contains("GIT_AUTHOR_NAME"), "the probe ran: {env}");
    assert!(
        !env.contains("WEB_PUSH_TOKEN") && !env.contains(PUSH_TOKEN),
        "{env}"
    );
}

/// A projects file for `run --projects`: project `web` on `repo`.
fn projects_file(dir: &Path, repo: &Path) -> PathBuf {
    let projects = dir.join("projects.yaml");
    std::fs::write(
        &projects,
        format!("web:\n  repository: {}\n", repo.display()),
    )
    .unwrap();
    projects
}

/// One `run` of the test's harness for conversation `ada`, as ndjson.
fn run_once(data: &Path, tools: &Path, text: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(data)
        .args(["run", "--harness", "editor", "--conversation", "ada"])
        .args(["--text", text, "--format", "ndjson"])
        .arg("--adapters")
        .arg(tools.join("adapters"))
        .args(extra)
        .env_clear()
        .env("PATH", path_with(tools))
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_one_off_run_works_on_a_project_from_its_file() {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let tools = write_tools(dir.path());
    let projects = projects_file(dir.path(), &repo);
    let data = common::tempdir();
    let run = |extra: &[&str]| run_once(data.path(), &tools, "WRITE:alpha COMMIT", extra);
    let projects_arg = projects.display().to_string();
    let out = run(&["--projects", &projects_arg, "--project", "web"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let summary = summary_of(&results);
    assert!(
        summary.contains("1 new commit") && summary.contains("Greet alpha"),
        "{summary}"
    );
    let log = git(&repo, &["log", "--format=%s", "--branches=chat/ada-*"]);
    assert!(log.starts_with("Greet alpha\n"), "{log}");

    // A project the file does not declare is refused before anything runs.
    let out = run(&["--projects", &projects_arg, "--project", "api"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("unknown project `api` (known: web)"),
        "{said}"
    );
}

/// A harness that reads its instructions from a file gets the bridge's in
/// its user-level file, in the conversation's home: the repository's own
/// `AGENTS.md` stays as the team wrote it, in no summary or commit, and is
/// read beside them.
#[tokio::test]
async fn a_repositorys_own_instructions_file_is_left_as_the_team_wrote_it() {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let team = "# Team rules\nRun the tests before you commit.\n";
    std::fs::write(repo.join("AGENTS.md"), team).unwrap();
    git(&repo, &["add", "AGENTS.md"]);
    common::repo::commit(&repo, "Rules");
    let tools = write_tools(dir.path());
    std::fs::write(
        tools.join("adapters/editor.yaml"),
        format!("{SPEC}instructions_file: ~/.editor/AGENTS.md\n"),
    )
    .unwrap();
    let projects = projects_file(dir.path(), &repo);
    let data = common::tempdir();
    let projects = projects.display().to_string();
    let run = |text: &str| -> Vec<Value> {
        let extra = ["--projects", projects.as_str(), "--project", "web"];
        let out = run_once(data.path(), &tools, text, &extra);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let first = run("WRITE:alpha");
    let said = summary_of(&first);
    assert!(said.contains("1 file changed"), "{said}");
    assert!(!said.contains("AGENTS.md"), "{said}");
    let workspaces = data.path().join("workspaces");
    let workspace = workspaces_with(&workspaces, "seen")
        .pop()
        .expect("the worktree");
    // A later turn, after the bridge wrote its instructions again: nothing
    // changed, nothing said.
    let second = run("just look");
    assert_eq!(terminal(&second)["type"], "run.completed", "{second:#?}");
    assert_eq!(summary(&second), None, "{second:#?}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("AGENTS.md")).unwrap(),
        team
    );
    let ours = std::fs::read_to_string(workspace.join(".langbot/home/.editor/AGENTS.md")).unwrap();
    assert!(
        ours.contains("You are a code agent answering messages in an IM conversation"),
        "{ours}"
    );
    let status = git(&workspace, &["status", "--porcelain"]);
    assert_eq!(status.trim(), "M greeting.txt", "{status}");
}

/// A branch that cannot be carried (the carried copy went elsewhere
/// meanwhile: another instance had the conversation) is never forced
/// over, and the person hears that this turn's commits stayed here.
#[tokio::test]
async fn commits_that_cannot_be_carried_are_said_in_the_chat() {
    let remotes = common::tempdir();
    let remote = remotes.path().join("web.git");
    git(
        remotes.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );
    let carry = format!("    carry:\n      remote: {}\n", remote.display());
    let Setup { serve, repo, _dir } = serve_with_project_as(&carry).await;
    let first = serve
        .results(turn("moving", "WRITE:alpha COMMIT", "web"))
        .await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    assert!(!summary_of(&first).contains("could not be carried"));
    let carried = git(
        &remote,
        &["for-each-ref", "--format=%(refname)", "refs/harness-bridge"],
    );
    let carried = carried.trim();
    assert!(
        carried.starts_with("refs/harness-bridge/chat/moving"),
        "{carried}"
    );
    // Elsewhere, other work was carried for the conversation since.
    git(&repo, &["checkout", "-q", "-b", "elsewhere", "main"]);
    std::fs::write(repo.join("elsewhere.txt"), "another instance's\n").unwrap();
    git(&repo, &["add", "elsewhere.txt"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=Another",
            "-c",
            "user.email=another@example.org",
            "commit",
            "-q",
            "-m",
            "Work carried by another instance",
        ],
    );
    let refspec = format!("+elsewhere:{carried}");
    git(&repo, &["push", "-q", remote.to_str().unwrap(), &refspec]);
    git(&repo, &["checkout", "-q", "main"]);
    let elsewhere = git(&repo, &["rev-parse", "elsewhere"]).trim().to_string();

    let second = serve
        .results(turn("moving", "WRITE:beta COMMIT", "web"))
        .await;
    assert_eq!(terminal(&second)["type"], "run.completed", "{second:#?}");
    let said = summary_of(&second);
    assert!(
        said.contains("This turn's commits could not be carried to")
            && said.contains("an instance taking the conversation over would not find them"),
        "{said}"
    );
    assert_eq!(
        git(&remote, &["rev-parse", carried]).trim(),
        elsewhere,
        "the carried copy is not forced over"
    );
}

/// A repository under `dir` and a bare clone of it, `web.git`: the
/// project's remote.
fn bare_remote(dir: &Path) -> PathBuf {
    let origin = repository(dir);
    git(
        dir,
        &["clone", "-q", "--bare", origin.to_str().unwrap(), "web.git"],
    );
    dir.join("web.git")
}

/// Instance `name`'s settings on the shared store at `db_url`, with
/// project `web` carried through `remote`: each instance has its own
/// clone of the project (under `dir`), made at its start.
fn instance_yaml(db_url: &str, name: &str, dir: &Path, remote: &Path) -> String {
    format!(
        "store: {db_url}\ninstance_id: {name}\nlease_seconds: 3\nshutdown_grace_seconds: 5\n\
         projects:\n  web:\n    repository: {}\n    carry:\n      remote: {}\n",
        dir.join(format!("clones/{name}/web")).display(),
        remote.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn a_conversation_taken_over_by_another_instance_finds_its_work_there() {
    let db = common::pg::database().await;
    let dir = common::tempdir();
    let remote = bare_remote(dir.path());
    let tools = write_tools(dir.path());
    // Each instance has its own clone of the project, made at its start.
    let start = |name: &'static str| {
        let config = format!(
            "{}adapters: {}\ndefault_harness: editor\nkill_grace_seconds: 1\n",
            instance_yaml(&db.url, name, dir.path(), &remote),
            tools.join("adapters").display(),
        );
        let path = path_with(&tools);
        async move {
            let data = Arc::new(common::tempdir());
            ServeProcess::spawn(data, &config, &[("PATH", path)]).await
        }
    };
    let mut a = start("a").await;
    let first = a.results(turn("moving", "WRITE:alpha COMMIT", "web")).await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    assert!(summary_of(&first).contains("1 new commit"), "{first:#?}");
    let carried = git(
        &remote,
        &["for-each-ref", "--format=%(refname)", "refs/harness-bridge"],
    );
    assert!(
        carried.starts_with("refs/harness-bridge/chat/moving-"),
        "{carried}"
    );

    // Instance a dies; b takes the conversation's next turn.
    let b = start("b").await;
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let second = b.results(turn("moving", "WRITE:beta", "web")).await;
    let done = terminal(&second);
    assert_eq!(done["type"], "run.completed", "{second:#?}");
    let workspace = workspace_of(&b.workspaces(), "moving");
    assert_eq!(
        std::fs::read_to_string(workspace.join(".langbot/seen")).unwrap(),
        "hello\nalpha\nbeta\n",
        "the work of the turn on the lost instance is in the new worktree"
    );
    let theirs = diff(&second);
    assert!(
        theirs.contains("+beta") && !theirs.contains("+alpha"),
        "{theirs}"
    );
    // This harness keeps no session files the bridge can carry: its
    // session stayed behind, and the person is told why.
    let notice = done["data"]["message"]["metadata"]["session"]["notice"]
        .as_str()
        .unwrap_or_default();
    assert!(
        notice.contains("another workspace") && notice.contains("could not follow it here"),
        "{done}"
    );
}

/// Issue's whole path with a real harness: two instances on PostgreSQL,
/// a project whose remote is a local bare repository, the real Codex
/// against a fake model. A turn on instance a edits and commits; a is
/// killed; the next turn, taken by b, finds the work in its worktree and
/// resumes the same Codex session (its files followed through the store:
/// the model is sent the first turn again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres+clis: needs PostgreSQL's server (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN) and the pinned codex (tests/clis); scripts/test runs it"]
async fn codex_resumes_its_session_on_the_instance_that_takes_the_conversation_over() {
    use common::openai::{self, RUN};
    let db = common::pg::database().await;
    let dir = common::tempdir();
    let remote = bare_remote(dir.path());
    let (model_url, fake) = openai::fake_model(false).await;
    let home = common::tempdir();
    openai::codex_home(home.path(), &model_url);
    let start = |name: &'static str| {
        let config = format!(
            "{}harness_binaries:\n  codex: {}\ndefault_harness: codex\n\
             default_config:\n  project: web\n",
            instance_yaml(&db.url, name, dir.path(), &remote),
            common::cli("codex").display(),
        );
        let env = [
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", home.path().display().to_string()),
            ("CODEX_HOME", home.path().display().to_string()),
            ("OPENAI_API_KEY", "test-key".to_string()),
        ];
        async move {
            let data = Arc::new(common::tempdir());
            ServeProcess::spawn(data, &config, &env).await
        }
    };
    let mut a = start("a").await;
    let command = "echo alpha >> greeting.txt && git commit -qam 'Codex adds alpha'";
    let first = a
        .results(json!({"conversation": "moving", "text": format!("{RUN}{command}")}))
        .await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    assert!(summary_of(&first).contains("1 new commit"), "{first:#?}");
    let first_session =
        terminal(&first)["data"]["message"]["metadata"]["session"]["session_id"].clone();
    assert!(first_session.is_string(), "{first:#?}");

    let b = start("b").await;
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let asked = fake.requests.lock().unwrap().len();
    let second = b
        .results(json!({"conversation": "moving", "text": format!("{RUN}cat greeting.txt")}))
        .await;
    let done = terminal(&second);
    assert_eq!(done["type"], "run.completed", "{second:#?}");
    // b runs this one conversation: its one workspace is the worktree.
    let workspace = workspaces_with(&b.workspaces(), "agent-context.json");
    assert_eq!(workspace.len(), 1, "{workspace:?}");
    assert_eq!(
        std::fs::read_to_string(workspace[0].join("greeting.txt")).unwrap(),
        "hello\nalpha\n",
        "the work of the turn on the lost instance is in the new worktree"
    );
    let session = &done["data"]["message"]["metadata"]["session"];
    assert_eq!(session["session_id"], first_session, "{session}");
    assert_eq!(session["resumed"], true, "{session}");
    assert!(session["notice"].is_null(), "{session}");
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests[asked]["input"]
            .to_string()
            .contains("Codex adds alpha"),
        "the resumed session did not hold the first turn: {}",
        requests[asked]["input"]
    );
}

/// The peak resident memory of process `pid`, in bytes (`VmHWM`).
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kb * 1024
}

/// A turn that writes a 96 MiB text file: the person gets the summary
/// and the diff cut at its bound, and the bridge reads no more of git's
/// answer than that (its peak memory grows by far less than the diff).
#[tokio::test]
async fn a_huge_diff_is_cut_where_the_bridge_stops_reading_it() {
    let Setup { serve, _dir, .. } = serve_with_project().await;
    let warm = serve.results(turn("hal", "WRITE:alpha", "web")).await;
    assert_eq!(terminal(&warm)["type"], "run.completed", "{warm:#?}");
    let pid = serve.child.id().expect("serve runs");
    let before = peak_memory(pid);
    let text = "SH:[yes 'a line of text the agent wrote, over and over, to make a diff that is large' \
                | head -c 100663296 > big.txt]";
    let huge = serve.results(turn("hal", text, "web")).await;
    assert_eq!(terminal(&huge)["type"], "run.completed", "{huge:#?}");
    let told = summary_of(&huge);
    assert!(told.contains("big.txt (+"), "{told}");
    let file = of_type(&huge, "artifact.created")
        .into_iter()
        .find(|r| {
            r["data"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(".diff"))
        })
        .unwrap_or_else(|| panic!("the diff is sent as a file: {huge:#?}"));
    let size = file["data"]["size_bytes"].as_u64().unwrap_or_default();
    assert!(
        (8 * 1024 * 1024..9 * 1024 * 1024).contains(&size),
        "the diff sent is {size} bytes"
    );
    let grew = peak_memory(pid).saturating_sub(before);
    assert!(
        grew < 80 * 1024 * 1024,
        "the bridge's peak memory grew by {} MiB for a 96 MiB diff",
        grew / (1024 * 1024)
    );
}

/// A harness plants a loose object named for a file it will write later
/// but holding other bytes, and commits something else: the next turn's
/// summary shows the file as it is, never what the planted object says.
#[tokio::test]
async fn an_object_the_harness_named_falsely_never_speaks_for_a_file() {
    let Setup { serve, _dir, .. } = serve_with_project().await;
    let plant = "SH:[real=$(printf 'the real plan' | git hash-object --stdin) && \
                 printf 'nothing to see' > decoy.txt && decoy=$(git hash-object -w decoy.txt) && \
                 rm decoy.txt && o=.langbot/git-objects && mkdir -p $o/$(echo $real | cut -c1-2) && \
                 cp $o/$(echo $decoy | cut -c1-2)/$(echo $decoy | cut -c3-) $o/$(echo $real | cut -c1-2)/$(echo $real | cut -c3-)] \
                 WRITE:alpha COMMIT";
    let planted = serve.results(turn("fay", plant, "web")).await;
    assert!(summary_of(&planted).contains("Greet alpha"), "{planted:#?}");
    let write = serve
        .results(turn("fay", "SH:[printf 'the real plan' > plan.txt]", "web"))
        .await;
    let told = diff(&write);
    assert!(told.contains("+the real plan"), "{told}");
    assert!(!told.contains("nothing to see"), "{told}");
}

/// A token in a remote's URL or an `http.extraHeader` of the project's
/// repository is every agent's to read: `serve` says so as it starts, and
/// `doctor --config` too, each naming the keys and the way out.
#[tokio::test]
async fn credentials_in_a_projects_git_configuration_are_said_at_start() {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    git(
        &repo,
        &[
            "remote",
            "add",
            "origin",
            "https://bot:tok3n@example.org/web.git",
        ],
    );
    git(
        &repo,
        &["config", "http.extraHeader", "Authorization: Bearer tok3n"],
    );
    let tools = write_tools(dir.path());
    let config = format!(
        "adapters: {}\ndefault_harness: editor\nprojects:\n  web:\n    repository: {}\n",
        tools.join("adapters").display(),
        repo.display()
    );
    let env = [("PATH", path_with(&tools))];
    let serve = ServeProcess::spawn(Arc::new(common::tempdir()), &config, &env).await;
    serve
        .wait_for_log("remote.origin.url, http.extraheader")
        .await;
    let warned = serve.log.lock().unwrap().join("\n");
    assert!(warned.contains("token_env"), "{warned}");
    assert!(
        !warned.contains("tok3n"),
        "the credential itself is never said: {warned}"
    );

    let file = serve.data.path().join("bridge.yaml");
    let doctor = std::process::Command::new(common::bridge_bin())
        .args(["doctor", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.contains("project web: the repository's git configuration holds credentials")
            && !said.contains("tok3n"),
        "{said}"
    );
}

/// The folder's disk use, counted by what it holds (`du`).
fn held(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .sum()
}

/// Turn after turn a harness writes 30 MiB nobody commits, then removes
/// it: the operator's repository holds none of it, and the bridge's own
/// snapshots of it are pruned once they grow.
#[tokio::test]
async fn what_nobody_committed_never_grows_the_repository_and_old_snapshots_go() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    let objects = repo.join(".git/objects");
    let first = serve.results(turn("una", "WRITE:alpha", "web")).await;
    assert_eq!(terminal(&first)["type"], "run.completed", "{first:#?}");
    let before = held(&objects);
    for n in 0..3 {
        let text = format!("SH:[head -c 31457280 /dev/urandom > big{n}.bin && rm -f big*.bin.old]");
        let wrote = serve.results(turn("una", &text, "web")).await;
        assert!(
            summary_of(&wrote).contains(&format!("big{n}.bin")),
            "{wrote:#?}"
        );
        let mv = format!("SH:[mv big{n}.bin big{n}.bin.old]");
        serve.results(turn("una", &mv, "web")).await;
    }
    let gone = serve.results(turn("una", "SH:[rm -f big*]", "web")).await;
    assert_eq!(terminal(&gone)["type"], "run.completed", "{gone:#?}");
    serve.results(turn("una", "WRITE:beta", "web")).await;
    let grew = held(&objects).saturating_sub(before);
    assert!(
        grew < 1 << 20,
        "the repository's objects grew by {grew} bytes"
    );
    let own = repo.join(".git/harness-bridge");
    let kept = held(&own);
    assert!(
        kept < 64 << 20,
        "the bridge keeps {} MiB of snapshots for 180 MiB written and removed",
        kept >> 20
    );
}

/// A conversation whose files pass its disk limit: the turn that passed
/// it fails `resource_limit` saying so, its work kept; the next turn runs
/// and, once it has removed them, ends as usual.
#[tokio::test]
async fn a_turn_past_its_conversations_disk_limit_fails_and_the_next_can_clean_up() {
    let Setup { serve, _dir, .. } =
        serve_with_project_and("", "cage:\n  limits:\n    disk_mb: 16\n", &[]).await;
    let big = "SH:[head -c 25165824 /dev/urandom > big.bin]";
    let over = serve.results(turn("val", big, "web")).await;
    let end = terminal(&over);
    assert_eq!(end["type"], "run.failed", "{over:#?}");
    assert_eq!(end["data"]["code"], "resource_limit", "{end}");
    let said = end["data"]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("over its limit of 16 MiB") && said.contains("next turn can remove"),
        "{said}"
    );
    let cleaned = serve.results(turn("val", "SH:[rm big.bin]", "web")).await;
    assert_eq!(terminal(&cleaned)["type"], "run.completed", "{cleaned:#?}");
}

/// `/status` names the branch the conversation's worktree is on — the
/// conversation's id made a safe name with its digest, as git has it —
/// for a plain id and for one that would climb out of `chat/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_branch_the_worktree_is_on() {
    let Setup { serve, repo, _dir } = serve_with_project().await;
    for conversation in ["c1", "../../etc"] {
        let first = serve
            .results(turn(conversation, "WRITE:alpha", "web"))
            .await;
        assert_eq!(terminal(&first)["type"], "run.completed", "{first:?}");
        let status = serve.results(turn(conversation, "/status", "web")).await;
        let said = terminal(&status)["data"]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let named = said
            .split("branch ")
            .nth(1)
            .and_then(|rest| rest.strip_suffix('.'))
            .unwrap_or_else(|| panic!("{said}"));
        let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
        assert!(
            branches.lines().any(|b| b == named),
            "{conversation}: /status says {named}, git has {branches}"
        );
        assert!(
            named.starts_with("chat/") && !named.contains(".."),
            "{named}"
        );
    }
}
