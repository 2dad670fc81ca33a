//! Escape tests for a project's repository: the real Claude Code in its
//! most permissive mode (`bypassPermissions`), driven by a scripted fake
//! model through `serve`, plants in what it may write (its worktree, its
//! worktree's record in the repository, its own object folder) what
//! would make the bridge's own git — which runs outside the cage, as the
//! bridge's user — run a program of its choice or take in objects it
//! could not read. Every git path of the bridge's then runs over it
//! (the snapshot after a turn, the publish card, the approved push, the
//! pull request command, the carry to another instance, the put-away of
//! an idle worktree and its bring-back) and nothing it planted runs or
//! crosses.

use harness_bridge_testkit as common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::anthropic::{CALLS_DONE, fake_model_calling};
use common::repo::{git, repository};
use common::server::{ServeProcess, serve_claude_with};
use serde_json::{Value, json};

/// The push token the operator gives the bridge.
const PUSH_TOKEN: &str = "push-token-for-the-test";

/// The agent's program: records every run in `$MARK` (outside the cage:
/// only a run outside it can write there) and in `.evil/inside` (its
/// own workspace: a run of its own git, inside the cage, shows that what
/// it planted is live), then fails.
fn evil_program(mark: &Path) -> String {
    format!(
        "#!/bin/sh\necho \"$1 uid=$(id -u)\" >> '{}' 2>/dev/null\n\
         echo \"$1\" >> \"$(dirname \"$0\")/inside\" 2>/dev/null\nexit 1\n",
        mark.display()
    )
}

/// Every configuration key that makes git run a program, each naming
/// `$EVIL/run`, as git reads them from an included file.
const PROGRAM_KEYS: &str = r#"[filter "x"]
	clean = EVIL/run filter-clean
	smudge = EVIL/run filter-smudge
	process = EVIL/run filter-process
[diff "x"]
	textconv = EVIL/run textconv
	command = EVIL/run diff-command
[merge "x"]
	driver = EVIL/run merge-driver
[gpg]
	program = EVIL/run gpg
[gpg "ssh"]
	program = EVIL/run gpg-ssh
[gpg "x509"]
	program = EVIL/run gpg-x509
[log]
	showSignature = true
[core]
	sshCommand = EVIL/run ssh-command
	fsmonitor = EVIL/run fsmonitor
	hooksPath = EVIL/hooks
	pager = EVIL/run pager
	askPass = EVIL/run askpass
	editor = EVIL/run editor
	alternateRefsCommand = EVIL/run alternate-refs
[credential]
	helper = !EVIL/run credential
[uploadpack]
	packObjectsHook = EVIL/run pack-objects-hook
[protocol]
	allow = always
[protocol "ext"]
	allow = always
[url "ext::EVIL/run ext "]
	insteadOf = /
	pushInsteadOf = /
[diff]
	external = EVIL/run diff-external
[sequence]
	editor = EVIL/run sequence-editor
"#;

/// What the agent runs in its worktree: its program and every hook, the
/// keys above in its record's `config.worktree` (directly, and through
/// `include` and `includeIf`), every file of the worktree through them
/// (`.gitattributes`), committed with a signature-looking header; and a
/// repository nested in the worktree whose own configuration names the
/// program (its files changed since its commit), and a folder whose
/// `.git` file points at the worktree's record.
fn plant(mark: &Path) -> String {
    let keys = PROGRAM_KEYS.replace("EVIL", "$EVIL");
    format!(
        r#"set -u
WS=$(pwd)
EVIL="$WS/.evil"
ADMIN=$(git rev-parse --absolute-git-dir)
mkdir -p "$EVIL/hooks"
cat > "$EVIL/run" <<'PROGRAM'
{program}PROGRAM
chmod +x "$EVIL/run"
for hook in pre-commit post-commit post-checkout post-merge pre-push reference-transaction post-index-change post-rewrite pre-auto-gc push-to-checkout fsmonitor-watchman; do
  printf '#!/bin/sh\nexec "%s" hook-%s\n' "$EVIL/run" "$hook" > "$EVIL/hooks/$hook"; chmod +x "$EVIL/hooks/$hook"
done
cat > "$EVIL/inc" <<KEYS
{keys}KEYS
printf '* filter=x diff=x merge=x\n' > .gitattributes
echo planted >> greeting.txt
git add -A && git commit -q -m 'Planted'
tree=$(git rev-parse 'HEAD^{{tree}}')
parent=$(git rev-parse HEAD)
signed=$(printf 'tree %s\nparent %s\nauthor A <a@example.org> 1700000000 +0000\ncommitter A <a@example.org> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEEsignature\n -----END PGP SIGNATURE-----\n\nSigned greeting\n' "$tree" "$parent" | git hash-object -t commit -w --stdin)
git update-ref --no-deref HEAD "$signed"
{{ printf '[include]\n\tpath = %s\n[includeIf "gitdir:/"]\n\tpath = %s\n' "$EVIL/inc" "$EVIL/inc"; cat "$EVIL/inc"; }} > "$ADMIN/config.worktree"
echo "uncommitted" > notes.txt
git add notes.txt 2>/dev/null; git reset -q notes.txt 2>/dev/null
mkdir -p nested linked
ngit() {{ env -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES git -C nested "$@"; }}
ngit init -q && ngit config filter.x.clean "$EVIL/run nested-filter" && ngit config core.fsmonitor "$EVIL/run nested-fsmonitor"
printf '* filter=x\n' > nested/.gitattributes && echo inside > nested/file
ngit add -A 2>/dev/null; ngit -c user.name=A -c user.email=a@example.org commit -q -m nested 2>/dev/null
echo changed >> nested/file
printf 'gitdir: %s\n' "$ADMIN" > linked/.git
git log -1 --format=%s
"#,
        program = evil_program(mark),
    )
}

struct Attacked {
    serve: ServeProcess,
    repo: PathBuf,
    remote: PathBuf,
    carried: PathBuf,
    mark: PathBuf,
    dir: tempfile::TempDir,
    _home: tempfile::TempDir,
    fake: common::anthropic::Fake,
    model: String,
}

/// `serve` with the real Claude Code on project `web`, whose repository
/// has per-worktree configuration on (as `git sparse-checkout` or `git
/// config --worktree` leave it), publishes to a bare repository through
/// a pull request command of the operator's, and carries its branches to
/// another; the first turn of `erin` plants everything and asks to
/// publish.
async fn attacked() -> Attacked {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    git(&repo, &["config", "core.repositoryformatversion", "1"]);
    git(&repo, &["config", "extensions.worktreeConfig", "true"]);
    let remote = dir.path().join("web.git");
    git(dir.path(), &["init", "-q", "--bare", "web.git"]);
    let carried = dir.path().join("carried.git");
    git(dir.path(), &["init", "-q", "--bare", "carried.git"]);
    let mark = dir.path().join("ran-outside");
    let pull_request = dir.path().join("open-pull-request");
    std::fs::write(
        &pull_request,
        "#!/bin/sh\necho https://example.org/pull/1\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &pull_request,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (model_url, fake) = fake_model_calling(vec![
        (
            "Bash".into(),
            json!({"command": plant(&mark), "description": "plant"}),
        ),
        ("mcp__langbot__publish".into(), json!({})),
    ])
    .await;
    let extra = format!(
        "projects:\n  web:\n    repository: {repo}\n    worktree_retention_hours: 1\n    \
         publish:\n      remote: {remote}\n      token_env: WEB_PUSH_TOKEN\n      \
         pull_request: [{pull_request}, \"{{branch}}\"]\n    \
         carry:\n      remote: {carried}\n\
         default_config:\n  permission_mode: bypassPermissions\n  project: web\n",
        repo = repo.display(),
        remote = remote.display(),
        pull_request = pull_request.display(),
        carried = carried.display(),
    );
    let (serve, home) = serve_claude_with(
        model_url.clone(),
        &extra,
        &[("WEB_PUSH_TOKEN", PUSH_TOKEN.to_string())],
    )
    .await;
    Attacked {
        serve,
        repo,
        remote,
        carried,
        mark,
        dir,
        _home: home,
        fake,
        model: model_url,
    }
}

/// `serve` with the real Claude Code (every permission) on project
/// `web` at `repo`, publishing to `remote` when given, its model making
/// `calls` first.
async fn serve_on_web(
    repo: &Path,
    remote: Option<&Path>,
    calls: Vec<(String, Value)>,
) -> (ServeProcess, tempfile::TempDir, common::anthropic::Fake) {
    let (model_url, fake) = fake_model_calling(calls).await;
    let publish = remote.map_or(String::new(), |remote| {
        format!(
            "    publish:\n      remote: {}\n      token_env: WEB_PUSH_TOKEN\n",
            remote.display()
        )
    });
    let extra = format!(
        "projects:\n  web:\n    repository: {}\n{publish}\
         default_config:\n  permission_mode: bypassPermissions\n  project: web\n",
        repo.display()
    );
    let env = [("WEB_PUSH_TOKEN", PUSH_TOKEN.to_string())];
    let (serve, home) = serve_claude_with(model_url, &extra, &env).await;
    (serve, home, fake)
}

fn erin(text: &str) -> Value {
    json!({"conversation": "erin", "actor": "erin", "text": text})
}

fn terminal(results: &[Value]) -> &Value {
    results.last().expect("results")
}

/// Everything the turn told the person.
fn said(results: &[Value]) -> String {
    results
        .iter()
        .flat_map(|r| {
            [
                &r["data"]["message"]["content"],
                &r["data"]["payload"]["title"],
                &r["data"]["payload"]["description"],
            ]
            .into_iter()
            .filter_map(Value::as_str)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What ran outside the cage, by the planted program's own record.
fn ran_outside(mark: &Path) -> String {
    std::fs::read_to_string(mark).unwrap_or_default()
}

/// The conversation's worktree: the workspace holding the planted folder.
fn worktree(serve: &ServeProcess) -> PathBuf {
    walkdir::WalkDir::new(serve.workspaces())
        .into_iter()
        .flatten()
        .find(|e| e.file_name() == ".evil")
        .and_then(|e| e.path().parent().map(Path::to_path_buf))
        .expect("the planted folder")
}

/// serve's environment as [`serve_claude_with`] gives it.
fn claude_env(home: &Path, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.display().to_string()),
        (
            "CLAUDE_CONFIG_DIR",
            home.join(".claude").display().to_string(),
        ),
        ("ANTHROPIC_BASE_URL", model.to_string()),
        ("ANTHROPIC_API_KEY", "test-key".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
        ("WEB_PUSH_TOKEN", PUSH_TOKEN.to_string()),
    ]
}

/// Item by item, every program-running git key the agent can plant in
/// its worktree's record runs nothing through any git path of the
/// bridge's, while its own git (in the cage) runs it: the snapshot and
/// the log after its turn, the publish card, the approved push and the
/// pull request, the carry, the put-away and the bring-back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn nothing_an_agent_plants_in_its_worktree_runs_in_the_bridges_git() {
    let Attacked {
        serve,
        repo,
        remote,
        carried,
        mark,
        dir,
        _home: home,
        fake,
        model,
    } = attacked().await;

    // The first turn plants and asks to publish: snapshot, log, card.
    let asked = serve.results(erin("Plant, then publish.")).await;
    assert_eq!(terminal(&asked)["type"], "run.completed", "{asked:#?}");
    let worktree = worktree(&serve);
    let inside = std::fs::read_to_string(worktree.join(".evil/inside")).unwrap_or_default();
    assert!(
        inside.contains("filter-"),
        "the agent's own git runs what it planted, in the cage: {inside:?}"
    );
    assert_eq!(ran_outside(&mark), "", "snapshot or card: {asked:#?}");
    let told = said(&asked);
    assert!(told.contains("publish branch"), "a card: {told}");

    // The approved push and the pull request; the carry on every move.
    fake.set_script(Vec::new());
    let approved = serve.results(erin("approve")).await;
    assert_eq!(
        terminal(&approved)["type"],
        "run.completed",
        "{approved:#?}"
    );
    assert!(
        said(&approved).contains("Published branch"),
        "{approved:#?}"
    );
    assert!(said(&approved).contains(CALLS_DONE), "{approved:#?}");
    let pushed = git(&remote, &["for-each-ref", "--format=%(refname)"]);
    assert!(pushed.contains("refs/heads/chat/erin-"), "{pushed}");
    let kept = git(&carried, &["for-each-ref", "--format=%(refname)"]);
    assert!(kept.contains("refs/harness-bridge/chat/erin-"), "{kept}");
    assert_eq!(ran_outside(&mark), "", "push or pull request");

    // Put away while idle, then brought back by the next turn.
    let env = claude_env(home.path(), &model);
    let serve = serve
        .restart_after_idle(&repo, Duration::from_secs(2 * 3600), &env)
        .await;
    assert!(!worktree.join("greeting.txt").exists(), "put away");
    assert_eq!(ran_outside(&mark), "", "put away");
    let back = serve.results(erin("Go on.")).await;
    assert_eq!(terminal(&back)["type"], "run.completed", "{back:#?}");
    assert!(said(&back).contains("had been put away"), "{back:#?}");
    assert_eq!(ran_outside(&mark), "", "brought back");
    let _ = dir;
}

/// The agent points its object folder's fan-out folders and `pack` at
/// another repository's (one it cannot read) and names one of that
/// repository's commits as its worktree's HEAD: nothing of it is taken
/// into the project's repository, the conversation's branch stays, the
/// person is told why, and the agent can read none of it next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn objects_an_agent_links_in_from_another_repository_are_never_taken_in() {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q", "-b", "main"]);
    std::fs::write(other.join("secret.txt"), "another project's secret\n").unwrap();
    git(&other, &["add", "secret.txt"]);
    common::repo::commit(&other, "Another project's secret plan");
    let stolen = git(&other, &["rev-parse", "HEAD"]).trim().to_string();
    let link_in = format!(
        r#"OWN=.langbot/git-objects
ADMIN=$(git rev-parse --absolute-git-dir)
mv "$OWN" .langbot/objects-before && mkdir "$OWN"
for n in $(printf '%02x ' $(seq 0 255)); do ln -s '{objects}'/$n "$OWN/$n"; done
ln -s '{objects}/pack' "$OWN/pack"
echo {stolen} > "$ADMIN/HEAD"
ls -la "$OWN" | head -3"#,
        objects = other.join(".git/objects").display(),
    );
    let link = json!({"command": link_in, "description": "link"});
    let (serve, _home, fake) = serve_on_web(&repo, None, vec![("Bash".into(), link)]).await;
    let branch_at = || {
        let branches = git(
            &repo,
            &["branch", "--format=%(refname:short) %(objectname)"],
        );
        branches
            .lines()
            .find(|b| b.starts_with("chat/erin-"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{branches}"))
    };
    let linked = serve.results(erin("Link.")).await;
    assert_eq!(terminal(&linked)["type"], "run.completed", "{linked:#?}");
    let told = said(&linked);
    assert!(!told.contains("secret plan"), "{told}");
    assert!(
        told.contains("not taken in") && told.contains("link"),
        "the person hears why: {told}"
    );
    let missing = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["cat-file", "-e", &stolen])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .unwrap();
    assert!(!missing.success(), "the other project's commit came in");
    assert!(!branch_at().contains(&stolen), "{}", branch_at());

    // Next turn, the agent asks git for it: nothing to read.
    let show = format!("git show {stolen}:secret.txt; git log --all --format=%s | head");
    fake.set_script(vec![(
        "Bash",
        json!({"command": show, "description": "read"}),
    )]);
    let seen = fake.requests.lock().unwrap().len();
    let next = serve.results(erin("Read.")).await;
    assert_eq!(terminal(&next)["type"], "run.completed", "{next:#?}");
    let sent: String = fake.requests.lock().unwrap()[seen..]
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(
        !sent.contains("another project's secret") && !sent.contains("secret plan"),
        "the agent read the other project: {sent}"
    );
    let _ = dir;
}

/// The agent breaks its worktree's record (its HEAD a link, its way to
/// the repository a link) and makes its workspace a repository of its
/// own: the turn says what it found and puts HEAD back; the next turn
/// finds the worktree mended from what the bridge kept (its own
/// repository moved aside), commits on its branch and publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_worktree_record_the_agent_broke_is_mended_from_what_the_bridge_kept() {
    let dir = common::tempdir();
    let repo = repository(dir.path());
    let remote = dir.path().join("web.git");
    git(dir.path(), &["init", "-q", "--bare", "web.git"]);
    let break_it = r#"ADMIN=$(git rev-parse --absolute-git-dir)
ln -sfn /etc/hostname "$ADMIN/HEAD"
ln -sfn /nonexistent "$ADMIN/commondir"
rm -f .git && git init -q . && echo "own repository" > own.txt"#;
    let calls = vec![(
        "Bash".into(),
        json!({"command": break_it, "description": "break"}),
    )];
    let (serve, _home, fake) = serve_on_web(&repo, Some(&remote), calls).await;
    let broken = serve.results(erin("Break it.")).await;
    assert_eq!(terminal(&broken)["type"], "run.completed", "{broken:#?}");
    let told = said(&broken);
    assert!(
        told.contains("worktree record had been changed outside git")
            && told.contains("replaced by a link"),
        "{told}"
    );

    let commit =
        "echo mended >> greeting.txt && git commit -qam 'After the mend' && git log -1 --format=%s";
    fake.set_script(vec![
        ("Bash", json!({"command": commit, "description": "commit"})),
        ("mcp__langbot__publish", json!({})),
    ]);
    let mended = serve.results(erin("Commit and publish.")).await;
    assert_eq!(terminal(&mended)["type"], "run.completed", "{mended:#?}");
    let told = said(&mended);
    assert!(
        told.contains("a repository of its own") && told.contains(".langbot/replaced-git-"),
        "{told}"
    );
    assert!(
        told.contains("After the mend") && told.contains("publish branch"),
        "{told}"
    );
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    let branch = branches
        .lines()
        .find(|b| b.starts_with("chat/erin-"))
        .unwrap_or_else(|| panic!("{branches}"));
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", branch]).trim(),
        "After the mend"
    );
    let _ = dir;
}
