//! Escape tests for the network (`cage.network: isolated`): the real
//! Claude Code in its most permissive mode (`bypassPermissions`), driven
//! by a scripted fake model through `serve`, reads what it can of its own
//! environment and tries to send it out — over TCP to the host's
//! loopback, over UDP, to a pathname unix socket outside its workspace, to
//! an abstract one — while its turn, its model calls (through the
//! bridge's gateway) and its MCP calls (through its door) work. Nothing
//! arrives, and the operator's model key is nowhere it can read.

use harness_bridge_testkit as common;

use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{HostProxy as _, RunScope};
use harness_bridge::protocol::StateScope;

use common::anthropic::{CALLS_DONE, fake_model};
use common::escape::{
    OPERATOR_KEY, PublicAddress, Targets, WAYS_OUT, assert_held, assert_key_stays_out,
    assert_stand_ins, serve_files,
};

/// The address these tests' destinations stand at (a documentation
/// network, added to the loopback).
const PUBLIC: &str = "203.0.113.77";
use common::probe_lines;
use common::server::{ServeProcess, serve_claude_with};
use serde_json::{Value, json};

/// In `serve`, the harness in a network of its own: every way out but
/// its door is shut, and its key is a stand-in the gateway alone turns
/// into the operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn nothing_leaves_an_isolated_cage_but_through_its_door() {
    let targets = Targets::new(true);

    let (model_url, fake) = fake_model(false).await;
    let (server, _home): (ServeProcess, _) = serve_claude_with(
        model_url,
        &format!(
            "default_config:\n  permission_mode: bypassPermissions\ncage:\n  network: isolated\n  read_only: [{}]\n",
            targets.sockets.path().display()
        ),
        &[("ANTHROPIC_API_KEY", OPERATOR_KEY.to_string())],
    )
    .await;

    let script = targets.script();
    fake.set_script(vec![
        ("Bash", json!({"command": script, "description": "probe"})),
        (
            "mcp__langbot__state_set",
            json!({"scope": "conversation", "key": "door-probe", "value": "through the door"}),
        ),
    ]);
    let results = server
        .results(json!({"conversation": "door-a", "text": "Look around", "run_id": "a-1"}))
        .await;
    let end = results.last().expect("results");
    assert_eq!(end["type"], "run.completed", "{results:?}");
    assert!(
        results.iter().any(|r| r.to_string().contains(CALLS_DONE)),
        "{results:?}"
    );

    let requests: Vec<Value> = fake.requests.lock().unwrap().clone();
    let lines = probe_lines(&requests);
    assert_held(&lines, WAYS_OUT);
    targets.assert_untouched();
    assert_stand_ins(&lines, &requests, &fake.keys.lock().unwrap());
    // The gateway counted the calls it passed on.
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics
            .contains("harness_bridge_model_calls_total{provider=\"anthropic\",outcome=\"2xx\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("harness_bridge_model_call_seconds_count{provider=\"anthropic\"}"),
        "{metrics}"
    );
    // The MCP call went through the door and was the turn's.
    let store = SqliteHost::open(server.data.path()).unwrap();
    let scope = RunScope {
        run_id: "test".into(),
        runner_id: harness_bridge::harness::runner_id("claude-code"),
        conversation_id: Some("door-a".into()),
        ..RunScope::default()
    };
    let kept = store
        .state_get(&scope, StateScope::Conversation, "door-probe")
        .await
        .unwrap();
    assert_eq!(kept, Some(json!("through the door")), "{requests:?}");
}

/// In one-shot `run`, the bridge an ordinary user (its harness then makes
/// its network in a user namespace of that user's own): the same probes
/// are held, and the turn's model calls still carry the operator's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn nothing_leaves_an_isolated_cage_in_run_as_a_plain_user() {
    const UID: u32 = 20002;
    let claude = common::cli("claude");
    let data = common::tempdir();
    let home = common::tempdir();
    let as_root = nix::unistd::geteuid().is_root();
    let targets = Targets::new(false);
    let (model_url, fake) = common::anthropic::fake_model_running(&targets.script()).await;
    let mut config = serde_json::Map::new();
    config.insert("permission_mode".into(), json!("bypassPermissions"));
    let ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
        conversation: "door-run",
        actor: "someone",
        text: "Look around",
        config,
        answer: None,
    })
    .unwrap();
    let file = home.path().join("turn.json");
    std::fs::write(&file, serde_json::to_vec(&ctx).unwrap()).unwrap();
    if as_root {
        for dir in [data.path(), home.path()] {
            for entry in walkdir::WalkDir::new(dir)
                .into_iter()
                .filter_map(Result::ok)
            {
                std::os::unix::fs::lchown(entry.path(), Some(UID), Some(UID)).unwrap();
            }
        }
    }
    let mut command = tokio::process::Command::new(common::bridge_bin());
    command
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "run",
            "--harness",
            "claude-code",
            "--network",
            "isolated",
            "--bin",
        ])
        .arg(&claude)
        .arg("--read-only")
        .arg(targets.sockets.path())
        .arg("--context")
        .arg(&file)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", model_url)
        .env("ANTHROPIC_API_KEY", OPERATOR_KEY)
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .stdin(std::process::Stdio::null());
    if as_root {
        command.uid(UID).gid(UID);
    }
    let out = command.output().await.expect("the bridge runs");
    let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        results.last().map(|r| r["type"].clone()),
        Some(json!("run.completed")),
        "{results:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = fake.requests.lock().unwrap().clone();
    let lines = probe_lines(&requests);
    assert_held(&lines, WAYS_OUT);
    targets.assert_untouched();
    assert_stand_ins(&lines, &requests, &fake.keys.lock().unwrap());
}

/// What the agent does through its door's proxy: fetch from the allowed
/// host (plain HTTP and through a CONNECT tunnel), clone a repository
/// there with git, and try what it may not.
const THROUGH_THE_PROXY: &str = r#"
p() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ESCAPED:$n"; else echo "HELD:$n"; fi; }
p unlisted_port curl -sf --max-time 5 "http://$HOST:$OTHER/note.txt"
p name_of_a_private_address curl -sf --max-time 5 --noproxy '' -x "$HTTP_PROXY" "http://localhost:$LOCAL/"
p name_of_a_private_address_tunnel curl -sf --max-time 5 --noproxy '' -p -x "$HTTP_PROXY" "http://localhost:$LOCAL/"
p around_the_proxy curl -sf --max-time 5 --noproxy '*' "http://$HOST:$PORT/note.txt"
p cloud_metadata curl -sf --max-time 5 "http://169.254.169.254/latest/meta-data/"
p cloud_metadata_tunnel curl -sf --max-time 5 -p "http://169.254.169.254/latest/meta-data/"
echo "CONTROL:why=$(curl -s --max-time 5 --noproxy '' -x "$HTTP_PROXY" "http://localhost:$LOCAL/" | tr ' ' '_')"
echo "CONTROL:fetched=$(curl -sf --max-time 5 "http://$HOST:$PORT/note.txt")"
echo "CONTROL:tunnel=$(curl -sf --max-time 5 -p "http://$HOST:$PORT/note.txt")"
git clone -q "http://$HOST:$PORT/repo.git" cloned 2>&1 | tail -2
echo "CONTROL:cloned=$(cat cloned/README)"
"#;

/// The egress proxy at the door (the operator's destinations, and the
/// binding's added to them): the operator's destination is reached —
/// by curl, plain and tunnelled, and by `git clone` — while another port
/// of it, a name that resolves to this machine, the cloud's metadata
/// address (listed, even) and a connection around the proxy are refused, the refusal saying why (`egress.ask: off`: at
/// once, asking no one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn the_door_reaches_the_operators_destinations_and_nothing_else() {
    let public = PublicAddress::add(PUBLIC);
    // The allowed host: a repository served over plain HTTP, and a file.
    let site = common::tempdir();
    let served = site.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::write(served.join("note.txt"), "through-the-door").unwrap();
    let bare = served.join("repo.git");
    dumb_repo(site.path(), &bare, "cloned-through-the-door");
    let (mut server, port) = serve_files(&public, &served).await;
    let local = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    local.set_nonblocking(true).unwrap();

    let script = format!(
        "HOST={}\nPORT={port}\nOTHER={}\nLOCAL={}\n{THROUGH_THE_PROXY}",
        public.0,
        port + 1,
        local.local_addr().unwrap().port()
    );
    let (model_url, fake) = fake_model(false).await;
    let (server_process, _home): (ServeProcess, _) = serve_claude_with(
        model_url,
        &format!(
            "default_config:\n  permission_mode: bypassPermissions\n  egress:\n    allow: [\"localhost:{}\", \"169.254.169.254\"]\ncage:\n  network: isolated\n  egress:\n    allow: [\"{}:{port}\"]\n    ask: off\n",
            local.local_addr().unwrap().port(),
            public.0
        ),
        &[("ANTHROPIC_API_KEY", OPERATOR_KEY.to_string())],
    )
    .await;
    bash_turn(&server_process, &fake, &script, "door-out", json!({})).await;
    let requests = fake.requests.lock().unwrap().clone();
    let lines = probe_lines(&requests);
    assert_held(
        &lines,
        &[
            "unlisted_port",
            "name_of_a_private_address",
            "name_of_a_private_address_tunnel",
            "around_the_proxy",
            "cloud_metadata",
            "cloud_metadata_tunnel",
        ],
    );
    for want in [
        "CONTROL:fetched=through-the-door",
        "CONTROL:tunnel=through-the-door",
        "CONTROL:cloned=cloned-through-the-door",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want}: {lines:?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("CONTROL:why=harness-bridge:_localhost_resolves_to_127.0.0.1")),
        "{lines:?}"
    );
    assert!(
        local.accept().is_err(),
        "the private destination was reached"
    );
    let _ = server.kill().await;
}

/// A bare repository at `bare` whose README says `readme`, ready to be
/// served as plain files (git's dumb HTTP), made in `site`.
fn dumb_repo(site: &std::path::Path, bare: &std::path::Path, readme: &str) {
    let work = site.join("work");
    std::fs::create_dir_all(&work).unwrap();
    common::repo::git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README"), readme).unwrap();
    common::repo::git(&work, &["add", "README"]);
    let commit = [
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "one",
    ];
    common::repo::git(&work, &commit);
    let (from, to) = (work.display().to_string(), bare.display().to_string());
    common::repo::git(site, &["clone", "-q", "--bare", &from, &to]);
    common::repo::git(bare, &["update-server-info"]);
}

/// The card a running turn sent about a destination, once it has: its id
/// and title.
async fn card_of(server: &ServeProcess, run_id: &str) -> (String, String) {
    for _ in 0..600 {
        let run = server.get_json(&format!("/v1/runs/{run_id}")).await;
        let card = run["results"].as_array().into_iter().flatten().find(|r| {
            r["type"] == "action.requested"
                && r["data"]["payload"]["interaction_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("egress-"))
        });
        if let Some(card) = card {
            // Marked as one the running turn waits on: shown at once.
            assert_eq!(card["in_turn"], true, "{card}");
            let payload = &card["data"]["payload"];
            return (
                payload["interaction_id"].as_str().unwrap().to_string(),
                payload["title"].as_str().unwrap().to_string(),
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no card came for {run_id}");
}

/// What an answer's run says.
fn said(results: &[Value]) -> String {
    results.last().unwrap()["data"]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A destination no rule covers is asked of the person whose turn it is,
/// while the agent's connection waits at its door: another member's
/// "allow" changes nothing and the connection still waits; the asker's
/// "allow" lets it through; "deny" (typed) fails it at once with words;
/// "allow for this conversation" lets it through and, kept in the
/// conversation's state, the next turn reaches it without a card. Every
/// answer is audited. (The real Claude Code in `bypassPermissions`, its
/// shell's curl going through the door's proxy.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_new_destination_is_the_askers_to_allow_while_its_connection_waits() {
    let public = PublicAddress::add(PUBLIC);
    let site = common::tempdir();
    std::fs::write(site.path().join("note.txt"), "asked-and-allowed").unwrap();
    let (mut files, port) = serve_files(&public, site.path()).await;
    let (model_url, fake) = fake_model(false).await;
    let (server, _home): (ServeProcess, _) = serve_claude_with(
        model_url,
        "default_config:\n  permission_mode: bypassPermissions\n",
        &[("ANTHROPIC_API_KEY", OPERATOR_KEY.to_string())],
    )
    .await;
    let destination = format!("{}:{port}", public.0);
    // Each turn's fetch says its number: what a turn got is told apart
    // from the earlier turns the resumed session carries.
    let turn = |n: u32| {
        let fetch = json!({
            "command": format!("echo \"GOT-{n}=$(curl -s --max-time 100 http://{destination}/note.txt)\""),
            "description": "fetch",
        });
        fake.set_script(vec![("Bash", fetch)]);
        server.spawn_results(json!({
            "conversation": "ask-1", "actor": "ann", "text": format!("Fetch it ({n})"),
            "run_id": format!("ask-{n}"),
        }))
    };
    let answer = |actor: &str, body: Value| {
        let mut body = body;
        body["conversation"] = json!("ask-1");
        body["actor"] = json!(actor);
        server.results(body)
    };
    let reached = |n: u32| {
        let requests = fake.requests.lock().unwrap();
        requests.iter().any(|r| {
            r.to_string()
                .contains(&format!("GOT-{n}=asked-and-allowed"))
        })
    };

    // 1: Bob's "allow" is not heard; Ann's is, and the fetch goes through.
    let first = turn(1);
    let (id, title) = card_of(&server, "ask-1").await;
    assert_eq!(title, format!("Claude Code wants to reach {destination}"));
    let bob = answer(
        "bob",
        json!({"interaction": {"interaction_id": id, "action_id": "allow"}}),
    )
    .await;
    assert!(said(&bob).starts_with("Only "), "{bob:?}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let status = server.get_json("/v1/runs/ask-1").await;
    assert_eq!(status["status"], "running", "{status}");
    assert!(!reached(1), "reached before the asker answered");
    let ann = answer(
        "ann",
        json!({"interaction": {"interaction_id": id, "action_id": "allow"}}),
    )
    .await;
    assert_eq!(
        said(&ann),
        format!("Allowed {destination}, this once."),
        "{ann:?}"
    );
    let first = first.await.unwrap();
    assert_eq!(first.last().unwrap()["type"], "run.completed", "{first:?}");
    assert!(reached(1), "the allowed fetch did not reach the model");

    // 2: allowed once only: asked again; Ann's typed "/deny" fails it at
    // once, with words.
    let asked = fake.requests.lock().unwrap().len();
    let second = turn(2);
    card_of(&server, "ask-2").await;
    let denied_at = std::time::Instant::now();
    let deny = answer("ann", json!({"text": "/deny"})).await;
    assert_eq!(said(&deny), format!("Refused {destination}."), "{deny:?}");
    let second = second.await.unwrap();
    assert_eq!(
        second.last().unwrap()["type"],
        "run.completed",
        "{second:?}"
    );
    assert!(
        denied_at.elapsed().as_secs() < 60,
        "the refused connection waited"
    );
    assert!(!reached(2), "the refused fetch reached the model");
    let told = fake.requests.lock().unwrap()[asked..].iter().any(|r| {
        r.to_string().contains("GOT-2=")
            && r.to_string().contains("refused by the person in the chat")
    });
    assert!(told, "the agent was not told why");

    // 3: allowed for the conversation; 4: reached without a card.
    let third = turn(3);
    let (id, _) = card_of(&server, "ask-3").await;
    let always = answer(
        "ann",
        json!({"interaction": {"interaction_id": id, "action_id": "allow_always"}}),
    )
    .await;
    assert_eq!(
        said(&always),
        format!("Allowed {destination} for this conversation.")
    );
    assert_eq!(
        third.await.unwrap().last().unwrap()["type"],
        "run.completed"
    );
    let fourth = turn(4).await.unwrap();
    assert_eq!(
        fourth.last().unwrap()["type"],
        "run.completed",
        "{fourth:?}"
    );
    assert!(reached(4), "the conversation's destination was not reached");
    assert!(
        !fourth.iter().any(|r| r["type"] == "action.requested"),
        "asked again: {fourth:?}"
    );
    let status = said(&answer("ann", json!({"text": "/status"})).await);
    assert!(
        status.contains(&format!("allowed here: {destination}")),
        "{status}"
    );

    // Every answer, heard or not, is audited.
    let store = SqliteHost::open(server.data.path()).unwrap();
    let rows: Vec<String> = store
        .audit_tail(None, 500)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r.entry.resource, r.entry.outcome, r.entry.detail
            )
        })
        .collect();
    for command in ["command:allow", "command:deny"] {
        assert!(
            rows.iter().any(|r| r.starts_with(command)),
            "{command}: {rows:?}"
        );
    }
    assert!(
        rows.iter()
            .filter(|r| r.starts_with("command:allow"))
            .count()
            >= 3,
        "{rows:?}"
    );
    let _ = files.kill().await;
}

/// One turn in `conversation` (with this binding `config`) whose agent
/// runs `script` in its shell, completed.
async fn bash_turn(
    server: &ServeProcess,
    fake: &common::anthropic::Fake,
    script: &str,
    conversation: &str,
    config: Value,
) {
    fake.set_script(vec![(
        "Bash",
        json!({"command": script, "description": "run"}),
    )]);
    let results = server
        .results(json!({"conversation": conversation, "text": "Run it", "run_id": format!("{conversation}-1"), "config": config}))
        .await;
    assert_eq!(
        results.last().unwrap()["type"],
        "run.completed",
        "{results:?}"
    );
}

/// `/etc/hosts` names for the public address while a test runs: the
/// proxy resolves a name the way any program here does.
struct HostNames(Vec<&'static str>);

impl HostNames {
    fn add(names: &[&'static str]) -> HostNames {
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
        let mut kept: String = hosts
            .lines()
            .filter(|l| !l.ends_with("# harness-bridge test"))
            .map(|l| format!("{l}\n"))
            .collect();
        for name in names {
            kept.push_str(&format!("203.0.113.77 {name} # harness-bridge test\n"));
        }
        std::fs::write("/etc/hosts", kept).expect("the tests run as root to name an address");
        HostNames(names.to_vec())
    }
}

impl Drop for HostNames {
    fn drop(&mut self) {
        if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
            let kept: String = hosts
                .lines()
                .filter(|l| !l.ends_with("# harness-bridge test"))
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write("/etc/hosts", kept);
        }
        let _ = &self.0;
    }
}

/// Builds a package of each kind in `dir`: an npm tarball with its
/// registry document, a wheel with its simple index, a bare repository
/// served the dumb way (what `python3` prints: nothing).
const BUILD_PACKAGES: &str = r#"
import base64, hashlib, io, json, os, sys, tarfile, zipfile
dir, base = sys.argv[1], sys.argv[2]
os.makedirs(f"{dir}/npm", exist_ok=True)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, text in [("package/package.json", json.dumps({"name": "hb-probe", "version": "1.0.0", "main": "index.js"})), ("package/index.js", "module.exports = 'npm-through-the-door';\n")]:
        data = text.encode(); info = tarfile.TarInfo(name); info.size = len(data); info.mode = 0o644
        tar.addfile(info, io.BytesIO(data))
tgz = buf.getvalue()
open(f"{dir}/npm/hb-probe-1.0.0.tgz", "wb").write(tgz)
doc = {"name": "hb-probe", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": {"name": "hb-probe", "version": "1.0.0", "main": "index.js", "dist": {"tarball": f"{base}/hb-probe/-/hb-probe-1.0.0.tgz", "shasum": hashlib.sha1(tgz).hexdigest(), "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
open(f"{dir}/npm/hb-probe.json", "w").write(json.dumps(doc))
os.makedirs(f"{dir}/simple/hb-probe", exist_ok=True)
wheel = "hb_probe-1.0.0-py3-none-any.whl"
files = {"hb_probe/__init__.py": "WORDS = 'pip-through-the-door'\n", "hb_probe-1.0.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hb-probe\nVersion: 1.0.0\n", "hb_probe-1.0.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},{len(t.encode())}\n" for n, t in files.items()) + "hb_probe-1.0.0.dist-info/RECORD,,\n"
files["hb_probe-1.0.0.dist-info/RECORD"] = record
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    for n, t in files.items(): z.writestr(n, t)
whl = buf.getvalue()
open(f"{dir}/simple/{wheel}", "wb").write(whl)
open(f"{dir}/simple/hb-probe/index.html", "w").write(f'<html><body><a href="/simple/{wheel}#sha256={hashlib.sha256(whl).hexdigest()}">{wheel}</a></body></html>')
"#;

/// What the agent installs through its door's proxy, from the allowed
/// registry (npm, pip) and repository (git), and from one no rule names.
const INSTALLS: &str = r#"
p() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ESCAPED:$n"; else echo "HELD:$n"; fi; }
export npm_config_cache="$PWD/.npm-cache" npm_config_update_notifier=false
npm install --no-audit --no-fund --registry "http://registry.test:$PORT/" --prefix ./npm hb-probe >/dev/null 2>&1
echo "CONTROL:npm=$(node -e "console.log(require('./npm/node_modules/hb-probe'))")"
/usr/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check --trusted-host registry.test --index-url "http://registry.test:$PORT/simple" --target ./py hb-probe >/dev/null 2>&1
echo "CONTROL:pip=$(cd py && /usr/bin/python3 -c 'import hb_probe; print(hb_probe.WORDS)')"
git clone -q "http://registry.test:$PORT/repo.git" cloned >/dev/null 2>&1
echo "CONTROL:git=$(cat cloned/README)"
p npm_unlisted npm install --no-audit --no-fund --registry "http://unlisted.test:$PORT/" --prefix ./npm2 hb-probe
p pip_unlisted /usr/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check --retries 0 --trusted-host unlisted.test --index-url "http://unlisted.test:$PORT/simple" --target ./py2 hb-probe
p git_unlisted git clone -q "http://unlisted.test:$PORT/repo.git" cloned2
echo "CONTROL:why=$(curl -s "http://unlisted.test:$PORT/hb-probe" | tr ' ' '_')"
"#;

/// npm, pip and git install from a registry and a repository the operator
/// allows by name (served by the test at a public address that name
/// resolves to), through the door's proxy; from a name no rule covers,
/// each is refused, and the refusal says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis), npm and python3; scripts/test runs it"]
async fn npm_pip_and_git_install_from_an_allowed_name_and_nothing_else() {
    let public = PublicAddress::add(PUBLIC);
    let _names = HostNames::add(&["registry.test", "unlisted.test"]);
    let site = common::tempdir();
    let port = {
        let probe = std::net::TcpListener::bind((public.0, 0)).unwrap();
        probe.local_addr().unwrap().port()
    };
    let built = std::process::Command::new("python3")
        .args(["-c", BUILD_PACKAGES])
        .arg(site.path())
        .arg(format!("http://registry.test:{port}"))
        .output()
        .expect("python3 builds the packages");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // The repository, served the dumb way.
    let bare = site.path().join("repo.git");
    dumb_repo(site.path(), &bare, "git-through-the-door");
    let root = site.path().to_path_buf();
    let files = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let root = root.clone();
        async move {
            let path = uri.path().trim_start_matches('/');
            let file = match path {
                "hb-probe" => root.join("npm/hb-probe.json"),
                "hb-probe/-/hb-probe-1.0.0.tgz" => root.join("npm/hb-probe-1.0.0.tgz"),
                "simple/hb-probe/" | "simple/hb-probe" => root.join("simple/hb-probe/index.html"),
                other if other.starts_with("simple/") || other.starts_with("repo.git/") => {
                    root.join(other)
                }
                _ => {
                    return (
                        axum::http::StatusCode::NOT_FOUND,
                        [("content-type", "text/plain")],
                        Vec::new(),
                    );
                }
            };
            // pip reads an index only when it says it is HTML.
            let kind = if file.extension().is_some_and(|e| e == "html") {
                "text/html"
            } else {
                "application/octet-stream"
            };
            match std::fs::read(&file) {
                Ok(bytes) => (axum::http::StatusCode::OK, [("content-type", kind)], bytes),
                Err(_) => (
                    axum::http::StatusCode::NOT_FOUND,
                    [("content-type", kind)],
                    Vec::new(),
                ),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind((public.0, port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, files).await });

    let (model_url, fake) = fake_model(false).await;
    let (server, _home): (ServeProcess, _) = serve_claude_with(
        model_url,
        &format!(
            "default_config:\n  permission_mode: bypassPermissions\ncage:\n  egress:\n    allow: [\"registry.test:{port}\"]\n    ask: off\n"
        ),
        &[("ANTHROPIC_API_KEY", OPERATOR_KEY.to_string())],
    )
    .await;
    fake.set_script(vec![(
        "Bash",
        json!({"command": format!("PORT={port}\n{INSTALLS}"), "description": "install", "timeout": 300000}),
    )]);
    let results = server
        .results(json!({"conversation": "installs", "text": "Install it", "run_id": "inst-1"}))
        .await;
    assert_eq!(
        results.last().unwrap()["type"],
        "run.completed",
        "{results:?}"
    );
    let requests = fake.requests.lock().unwrap().clone();
    let lines = probe_lines(&requests);
    for want in [
        "CONTROL:npm=npm-through-the-door",
        "CONTROL:pip=pip-through-the-door",
        "CONTROL:git=git-through-the-door",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want}: {lines:?}");
    }
    assert_held(&lines, &["npm_unlisted", "pip_unlisted", "git_unlisted"]);
    assert!(
        lines.iter().any(
            |l| l.starts_with("CONTROL:why=harness-bridge:_unlisted.test:")
                && l.contains("not_among_the_destinations")
        ),
        "{lines:?}"
    );
}

/// Codex in `serve` (its live app-server, commands run unasked, its own
/// sandbox left to the cage), its shell aimed at the same ways out: all
/// held and nothing arrived; its key a stand-in, the operator's nowhere
/// it read, while every model call reached the model with the
/// operator's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned codex (npm ci --prefix tests/clis); scripts/test runs it"]
async fn nothing_leaves_a_codex_cage_but_through_its_door() {
    use common::openai::{self, RUN};
    // Port 443 is the Claude test's, which may run beside this one.
    let targets = Targets::new(false);
    let (model_url, fake) = openai::fake_model(false).await;
    let home = common::tempdir();
    openai::codex_home(home.path(), &model_url);
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        ("CODEX_HOME", home.path().display().to_string()),
        ("OPENAI_API_KEY", OPERATOR_KEY.to_string()),
    ];
    let config = format!(
        "harness_binaries:\n  codex: {}\ndefault_harness: codex\nshutdown_grace_seconds: 5\ncage:\n  read_only: [{}]\n",
        common::cli("codex").display(),
        targets.sockets.path().display()
    );
    let server = ServeProcess::spawn(std::sync::Arc::new(common::tempdir()), &config, &env).await;
    // The probes read the key the way they read Claude's.
    let script = format!(
        "ANTHROPIC_API_KEY=\"$OPENAI_API_KEY\"\n{}",
        targets.script()
    );
    let results = server
        .results(json!({"conversation": "codex-door", "text": format!("{RUN}{script}"), "run_id": "cx-1"}))
        .await;
    assert_eq!(
        results.last().unwrap()["type"],
        "run.completed",
        "{results:?}"
    );
    let requests = fake.requests.lock().unwrap().clone();
    // Only what came back from the shell (the prompt holds the script).
    let outputs: Vec<Value> = requests
        .iter()
        .flat_map(|r| r["input"].as_array().cloned().unwrap_or_default())
        .filter(|item| item["type"] == "function_call_output")
        .collect();
    let lines = probe_lines(&outputs);
    assert_held(&lines, WAYS_OUT);
    targets.assert_untouched();
    let keys = fake.keys.lock().unwrap().clone();
    assert_key_stays_out(&lines, &outputs, &keys, &format!("Bearer {OPERATOR_KEY}"));
}

/// The binding's `models` bound what its harness calls through its door:
/// the agent calling its gateway by hand, with the stand-in it holds, for
/// a model the binding does not list is refused (with words, audited) and
/// the model never hears it; the listed model, dated, is let through; the
/// turn's own calls, on the picked model, pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_model_the_binding_does_not_list_is_refused_at_the_door() {
    const CALL: &str = r#"
for m in claude-opus-4-1 claude-sonnet-4-5-20250929; do
  code=$(curl -s -o answer.json -w '%{http_code}' -H "x-api-key: $ANTHROPIC_API_KEY" \
    -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
    -d "{\"model\":\"$m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"FORGED-$m\"}]}" \
    "$ANTHROPIC_BASE_URL/v1/messages")
  echo "CONTROL:$m=$code"
  grep -q 'may call only the models its binding lists (claude-sonnet-4-5' answer.json && echo "CONTROL:$m=said-why"
done
"#;
    let (model_url, fake) = fake_model(false).await;
    let (server, _home): (ServeProcess, _) = serve_claude_with(
        model_url,
        "default_config:\n  permission_mode: bypassPermissions\n  model: claude-sonnet-4-5\n  models: [claude-sonnet-4-5]\n",
        &[("ANTHROPIC_API_KEY", OPERATOR_KEY.to_string())],
    )
    .await;
    bash_turn(&server, &fake, CALL, "models-a", json!({})).await;

    let requests: Vec<Value> = fake.requests.lock().unwrap().clone();
    let lines = probe_lines(&requests);
    for line in [
        "CONTROL:claude-opus-4-1=400",
        "CONTROL:claude-opus-4-1=said-why",
        "CONTROL:claude-sonnet-4-5-20250929=200",
    ] {
        assert!(lines.iter().any(|l| l == line), "{line}: {lines:?}");
    }
    let asked: Vec<&str> = requests
        .iter()
        .filter_map(|r| r["model"].as_str())
        .collect();
    assert!(!asked.contains(&"claude-opus-4-1"), "{asked:?}");
    assert!(asked.contains(&"claude-sonnet-4-5-20250929"), "{asked:?}");
    assert!(
        asked.contains(&"claude-sonnet-4-5"),
        "the turn's own: {asked:?}"
    );
    assert!(
        asked
            .iter()
            .all(|m| m.starts_with("claude-sonnet-4-5") || m.starts_with("claude-haiku-4-5")),
        "{asked:?}"
    );

    let store = SqliteHost::open(server.data.path()).unwrap();
    let rows = store.audit_tail(None, 200).await.unwrap();
    assert!(
        rows.iter().any(|r| r.entry.action == "model_call"
            && r.entry
                .detail
                .contains("(claude-sonnet-4-5), not `claude-opus-4-1`")),
        "{rows:?}"
    );
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics.contains(
            "harness_bridge_model_calls_total{provider=\"anthropic\",outcome=\"refused\"}"
        ),
        "{metrics}"
    );
}

/// A binding's `network` word chooses what its door's proxy reaches, the
/// harness in a network of its own whichever it is: `none` not even the
/// operator's destination; `allowlist` (the default) that and nothing
/// else; `open` any public address and port, still never this machine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier clis: needs the pinned claude (npm ci --prefix tests/clis); scripts/test runs it"]
async fn a_bindings_network_word_chooses_what_its_door_reaches() {
    let public = PublicAddress::add(PUBLIC);
    let site = common::tempdir();
    std::fs::write(site.path().join("note.txt"), "reached").unwrap();
    let (mut listed, port) = serve_files(&public, site.path()).await;
    let (mut other, other_port) = serve_files(&public, site.path()).await;
    let local = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    local.set_nonblocking(true).unwrap();
    let script = format!(
        r#"
echo "CONTROL:listed=$(curl -sf --max-time 5 http://{host}:{port}/note.txt || echo no)"
echo "CONTROL:other=$(curl -sf --max-time 5 http://{host}:{other_port}/note.txt || echo no)"
echo "CONTROL:local=$(curl -sf --max-time 5 http://127.0.0.1:{local}/ || echo no)"
echo "CONTROL:key=$ANTHROPIC_API_KEY"
"#,
        host = public.0,
        local = local.local_addr().unwrap().port()
    );
    let (model_url, fake) = fake_model(false).await;
    let (server, _home): (ServeProcess, _) = serve_claude_with(
        model_url,
        &format!(
            "default_config:\n  permission_mode: bypassPermissions\ncage:\n  egress:\n    allow: [\"{}:{port}\"]\n    ask: off\n",
            public.0
        ),
        &[("ANTHROPIC_API_KEY", OPERATOR_KEY.to_string())],
    )
    .await;
    let mut reached = Vec::new();
    for word in ["none", "allowlist", "open"] {
        let before = fake.requests.lock().unwrap().len();
        bash_turn(
            &server,
            &fake,
            &script,
            &format!("net-{word}"),
            json!({"network": word}),
        )
        .await;
        let requests = fake.requests.lock().unwrap()[before..].to_vec();
        let lines = probe_lines(&requests);
        assert!(
            lines.iter().any(|l| l.starts_with("CONTROL:key=hb-")),
            "{word}: the key is a stand-in: {lines:?}"
        );
        let got = |what: &str| {
            lines
                .iter()
                .any(|l| l == &format!("CONTROL:{what}=reached"))
        };
        reached.push((word, got("listed"), got("other"), got("local")));
    }
    assert_eq!(
        reached,
        [
            ("none", false, false, false),
            ("allowlist", true, false, false),
            ("open", true, true, false),
        ]
    );
    assert!(local.accept().is_err(), "this machine's port was reached");
    assert!(
        fake.keys.lock().unwrap().iter().all(|k| k == OPERATOR_KEY),
        "every model call carried the operator's key"
    );
    let _ = listed.kill().await;
    let _ = other.kill().await;
}
