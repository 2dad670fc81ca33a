//! `serve` as several instances on one PostgreSQL database (a throwaway
//! server this binary starts on 127.0.0.1, a database per test): turns
//! posted round-robin across instances run exactly once, in arrival order
//! per conversation, never two at once; an instance killed and another
//! paused mid-load lose only their running turns (`interrupted`), their
//! queued turns move to the instance left, and the paused one's late
//! writes are refused, and its harness, still running when it resumes,
//! is killed by its self-fence at once, and every client, of the paused
//! instance or another, is told what the shared record says; instances
//! started at the same instant on an empty database all start; a cancel
//! posted to one instance stops a turn running on another; any instance
//! streams and answers for any run; a run id is taken once whichever
//! instances see it, even at once; the queue bounds count every
//! instance's turns (429); a burst of turns that takes every pooled
//! connection does not fence the instance.
//!
//! The harness is a script (the operator's spec adds it), as a harness it
//! runs in its workspace; it notes in a log every turn it starts (`S`,
//! with its working folder: which instance ran it) and ends (`E`).

use harness_bridge_testkit as common;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::server::ServeProcess;
use serde_json::{Value, json};

const SPEC: &str = r#"
name: scripted
label: Scripted
description: A harness script that notes each turn it runs.
binary: cluster-harness
family: claude
argv:
  new: ["-p"]
  resume: ["-p", "--resume", "{session_id}"]
stdin: prompt
env:
  pass: [PATH, "CLUSTER_*"]
session_store: unknown
session_id_format: token
install_hint: "the test writes it"
"#;

/// Notes the turn (its tag from the prompt, its folder, its pid),
/// answers after `CLUSTER_THINK` seconds (a turn saying SLOW: 30; one
/// saying LONG says three lines, half a second apart, then is silent for
/// five minutes), notes the end; a turn saying SPEND reports 1,100 tokens.
const SCRIPT: &str = r#"#!/bin/sh
prompt=$(cat)
tag=$(printf '%s' "$prompt" | grep -o 'TURN:[A-Za-z0-9_.-]*' | head -n 1)
echo "S $tag $PWD $$" >> "$CLUSTER_LOG"
echo '{"type":"system","subtype":"init","session_id":"cluster-1","mcp_servers":[]}'
case "$prompt" in
  *SLOW*) sleep 30 ;;
  *LONG*)
    i=0
    while [ "$i" -lt 3 ]; do
      i=$((i + 1))
      sleep 0.5
      echo "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"tick $i $tag\"}]},\"session_id\":\"cluster-1\"}"
    done
    sleep 300 ;;
  *) sleep "$CLUSTER_THINK" ;;
esac
echo "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"done $tag\"}]},\"session_id\":\"cluster-1\"}"
echo "E $tag $$" >> "$CLUSTER_LOG"
usage=''
case "$prompt" in
  *SPEND*) usage=',"usage":{"input_tokens":600,"output_tokens":500}' ;;
esac
echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done $tag\",\"session_id\":\"cluster-1\"$usage}"
"#;

/// Instances on one database, the harness they share and its log.
struct Cluster {
    url: String,
    tools: tempfile::TempDir,
    log: PathBuf,
    think: &'static str,
    lease: u64,
}

impl Cluster {
    async fn new(think: &'static str, lease: u64) -> Cluster {
        let db = common::pg::database().await;
        let tools = common::tempdir_for_harnesses();
        std::fs::create_dir(tools.path().join("adapters")).unwrap();
        std::fs::write(tools.path().join("adapters/scripted.yaml"), SPEC).unwrap();
        let script = tools.path().join("cluster-harness");
        std::fs::write(&script, SCRIPT).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = tools.path().join("turns.log");
        std::fs::write(&log, "").unwrap();
        // Every harness writes it, whichever user it is.
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
        Cluster {
            url: db.url,
            tools,
            log,
            think,
            lease,
        }
    }

    /// Start instance `name` on its own data folder.
    async fn instance(&self, name: &str) -> ServeProcess {
        self.instance_with(
            name,
            "max_concurrent_runs: 4\nmax_queue_per_conversation: 8\n",
        )
        .await
    }

    /// Start instance `name` with `limits` (bridge.yaml lines).
    async fn instance_with(&self, name: &str, limits: &str) -> ServeProcess {
        self.try_instance(name, limits)
            .await
            .unwrap_or_else(|said| panic!("instance {name} did not start: {said:?}"))
    }

    /// Start instance `name` with `limits`, or what it said when it did not.
    async fn try_instance(&self, name: &str, limits: &str) -> Result<ServeProcess, Vec<String>> {
        let data = Arc::new(common::tempdir());
        let config = format!(
            "store: {url}\ninstance_id: {name}\nlease_seconds: {lease}\nadapters: {adapters}\n\
             harness_binaries:\n  scripted: {script}\ndefault_harness: scripted\n\
             {limits}shutdown_grace_seconds: 5\n\
             kill_grace_seconds: 1\nset_env:\n  CLUSTER_LOG: {log}\n  CLUSTER_THINK: \"{think}\"\n\
             cage:\n  read_write: [{tools}]\n",
            tools = self.tools.path().display(),
            url = self.url,
            lease = self.lease,
            adapters = self.tools.path().join("adapters").display(),
            script = self.tools.path().join("cluster-harness").display(),
            log = self.log.display(),
            think = self.think,
        );
        let env = [("PATH", std::env::var("PATH").unwrap_or_default())];
        ServeProcess::try_spawn(data, &config, &env).await
    }

    /// The harness's notes: (`S` or `E`, tag, folder for `S`), in order.
    fn notes(&self) -> Vec<(String, String, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|line| {
                let mut parts = line.split(' ');
                let kind = parts.next().unwrap_or("").to_string();
                let tag = parts.next().unwrap_or("").to_string();
                let folder = if kind == "S" {
                    parts.next().unwrap_or("").to_string()
                } else {
                    String::new()
                };
                (kind, tag, folder)
            })
            .collect()
    }
}

fn tag(conversation: usize, turn: usize) -> String {
    format!("TURN:c{conversation}.{turn}")
}

fn run_id(conversation: usize, turn: usize) -> String {
    format!("run-c{conversation}-{turn}")
}

fn conversation(n: usize) -> String {
    format!("chat-{n}")
}

/// Post a turn (`text` in `conversation`) and wait until it is accepted:
/// the answer's headers mean its place in its conversation is taken.
async fn accepted(
    server: &ServeProcess,
    conversation: &str,
    text: &str,
    run_id: &str,
) -> reqwest::Response {
    let response = send(server, conversation, text, run_id).await;
    assert_eq!(response.status(), 200, "{run_id}");
    response
}

/// Post a turn; the answer as it comes.
async fn send(
    server: &ServeProcess,
    conversation: &str,
    text: &str,
    run_id: &str,
) -> reqwest::Response {
    server
        .client
        .post(format!("{}/v1/runs", server.url))
        .body(json!({"conversation": conversation, "text": text, "run_id": run_id}).to_string())
        .send()
        .await
        .expect("answered")
}

/// A run's stream to its end, as results.
async fn read_stream(response: reqwest::Response) -> Vec<Value> {
    response
        .text()
        .await
        .expect("the stream")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a result per line"))
        .collect()
}

/// A 429 answer's sentence, after checking it is one.
async fn refused(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.expect("a JSON body");
    body["error"]
        .as_str()
        .expect("an error sentence")
        .to_string()
}

/// Post turn `turn` of conversation `conversation`, wait until it is
/// accepted, and read its stream in a task.
async fn post(
    server: &ServeProcess,
    conversation: usize,
    turn: usize,
) -> tokio::task::JoinHandle<Vec<Value>> {
    let text = format!("{} please", tag(conversation, turn));
    let response = accepted(
        server,
        &self::conversation(conversation),
        &text,
        &run_id(conversation, turn),
    )
    .await;
    tokio::spawn(async move {
        let text = response.text().await.unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    })
}

/// Every result once, numbered 1, 2, 3…, exactly one terminal, last.
fn assert_well_formed(results: &[Value]) {
    let sequences: Vec<u64> = results
        .iter()
        .map(|r| r["sequence"].as_u64().expect("numbered"))
        .collect();
    let expected: Vec<u64> = (1..=results.len() as u64).collect();
    assert_eq!(sequences, expected, "{results:?}");
    let terminals = results
        .iter()
        .filter(|r| r["type"] == "run.completed" || r["type"] == "run.failed")
        .count();
    assert_eq!(terminals, 1, "{results:?}");
    let last = results.last().expect("results");
    assert!(
        last["type"] == "run.completed" || last["type"] == "run.failed",
        "{results:?}"
    );
}

/// Which instance a note's folder belongs to.
fn instance_of(folder: &str, roots: &[(String, PathBuf)]) -> String {
    roots
        .iter()
        .find(|(_, root)| Path::new(folder).starts_with(root))
        .map(|(name, _)| name.clone())
        .unwrap_or_else(|| panic!("{folder} is under no instance's workspaces"))
}

fn roots(servers: &[(&str, &ServeProcess)]) -> Vec<(String, PathBuf)> {
    servers
        .iter()
        .map(|(name, s)| {
            let root = s.workspaces();
            (
                name.to_string(),
                root.canonicalize().unwrap_or(root.to_path_buf()),
            )
        })
        .collect()
}

/// Per conversation, the turns the log shows, in the order they started,
/// with where each ran; and no turn started twice.
fn turns_by_conversation(
    notes: &[(String, String, String)],
    roots: &[(String, PathBuf)],
) -> BTreeMap<String, Vec<(usize, String)>> {
    let mut started: HashMap<&str, usize> = HashMap::new();
    let mut by: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for (kind, tag, folder) in notes {
        // An empty tag: a harness whose group was killed (its instance
        // died) while it read its prompt, `cat` before the shell; it never
        // ran a turn.
        if kind != "S" || tag.is_empty() {
            continue;
        }
        *started.entry(tag).or_default() += 1;
        assert_eq!(started[tag.as_str()], 1, "{tag} ran twice");
        let (conv, turn) = tag
            .trim_start_matches("TURN:c")
            .split_once('.')
            .expect("a tag");
        by.entry(conv.to_string()).or_default().push((
            turn.parse().expect("a turn number"),
            instance_of(folder, roots),
        ));
    }
    by
}

/// A run's record as another instance answers for it.
async fn record(server: &ServeProcess, run_id: &str) -> Value {
    server.get_json(&format!("/v1/runs/{run_id}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn three_instances_run_every_turn_once_in_order_per_conversation() {
    const CONVERSATIONS: usize = 200;
    const TURNS: usize = 3;
    let cluster = Cluster::new("0.05", 10).await;
    let servers = [
        cluster.instance("a").await,
        cluster.instance("b").await,
        cluster.instance("c").await,
    ];
    let servers = Arc::new(servers);
    // Each conversation posts its turns one after another (each accepted
    // before the next is sent), round-robin across the instances.
    let mut posting = Vec::new();
    for c in 0..CONVERSATIONS {
        let servers = servers.clone();
        posting.push(tokio::spawn(async move {
            let mut streams = Vec::new();
            for turn in 1..=TURNS {
                let server = &servers[(c * TURNS + turn) % 3];
                streams.push((turn, post(server, c, turn).await));
            }
            let mut all = Vec::new();
            for (turn, stream) in streams {
                all.push((turn, stream.await.expect("the stream's task")));
            }
            (c, all)
        }));
    }
    let mut streamed = Vec::new();
    for task in posting {
        streamed.push(
            tokio::time::timeout(Duration::from_secs(240), task)
                .await
                .expect("every turn ends in time")
                .expect("the posting task"),
        );
    }
    for (c, turns) in &streamed {
        for (turn, results) in turns {
            assert_well_formed(results);
            let last = results.last().unwrap();
            assert_eq!(last["type"], "run.completed", "{c}.{turn}: {results:?}");
            assert!(
                last.to_string()
                    .contains(&format!("done {}", tag(*c, *turn))),
                "{results:?}"
            );
        }
    }

    let named: Vec<(&str, &ServeProcess)> =
        vec![("a", &servers[0]), ("b", &servers[1]), ("c", &servers[2])];
    let roots = roots(&named);
    let notes = cluster.notes();
    let by = turns_by_conversation(&notes, &roots);
    assert_eq!(by.len(), CONVERSATIONS);
    let mut per_instance: HashMap<String, usize> = HashMap::new();
    for (conv, turns) in &by {
        let order: Vec<usize> = turns.iter().map(|(t, _)| *t).collect();
        assert_eq!(order, (1..=TURNS).collect::<Vec<_>>(), "chat {conv}");
        // Its workspace stayed where it first ran.
        assert!(
            turns.iter().all(|(_, at)| *at == turns[0].1),
            "chat {conv} moved: {turns:?}"
        );
        *per_instance.entry(turns[0].1.clone()).or_default() += 1;
    }
    assert_eq!(
        per_instance.len(),
        3,
        "every instance ran some: {per_instance:?}"
    );
    // Never two turns of one conversation at once: each turn's end comes
    // before the next one's start.
    let mut open: HashMap<String, String> = HashMap::new();
    for (kind, tag, _) in &notes {
        let conv = tag.split_once('.').map(|(c, _)| c.to_string()).unwrap();
        if kind == "S" {
            assert!(
                open.insert(conv.clone(), tag.clone()).is_none(),
                "{tag} started while {conv} ran another turn"
            );
        } else {
            assert_eq!(open.remove(&conv).as_deref(), Some(tag.as_str()));
        }
    }
    assert!(open.is_empty());

    // Any instance answers for any run, and streams it, whichever ran it.
    for c in [0, 77, 199] {
        let id = run_id(c, 2);
        for server in servers.iter() {
            let got = record(server, &id).await;
            assert_eq!(got["status"], "completed", "{got}");
            assert_eq!(got["conversation_id"], conversation(c));
            let lines = server.stream_of(&id).await;
            assert_well_formed(&lines);
            assert_eq!(lines.len(), got["results"].as_array().unwrap().len());
        }
    }
    // A run id is used once, whichever instance sees it again: turn 1
    // of chat 5 was posted to instance (5 * 3 + 1) % 3; the others refuse
    // it, and its record stays the one run it was.
    let accepted_by = (5 * TURNS + 1) % 3;
    for other in (0..3).filter(|i| *i != accepted_by) {
        let server = &servers[other];
        let again = server
            .client
            .post(format!("{}/v1/runs", server.url))
            .body(
                json!({"conversation": conversation(5), "text": "again", "run_id": run_id(5, 1)})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409, "instance {other}");
        let body: Value = again.json().await.unwrap();
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("run-c5-1 exists")),
            "{body}"
        );
    }
    let got = record(&servers[0], &run_id(5, 1)).await;
    assert_eq!(got["status"], "completed", "{got}");
    assert!(!got.to_string().contains("again"), "{got}");
    // A new run id reaching every instance at once: exactly one takes it,
    // the others answer 409, and it runs once.
    let body = json!({"conversation": "twice", "text": "TURN:twice.1 go", "run_id": "twice-1"});
    let answers = futures::future::join_all(servers.iter().map(|server| {
        server
            .client
            .post(format!("{}/v1/runs", server.url))
            .body(body.to_string())
            .send()
    }))
    .await;
    let mut statuses: Vec<u16> = Vec::new();
    let mut taken = Vec::new();
    for answer in answers {
        let answer = answer.expect("answered");
        statuses.push(answer.status().as_u16());
        if answer.status() == 200 {
            taken.push(answer);
        }
    }
    statuses.sort();
    assert_eq!(statuses, [200, 409, 409]);
    let results = read_stream(taken.pop().expect("one took it")).await;
    assert_well_formed(&results);
    assert_eq!(
        results.last().unwrap()["type"],
        "run.completed",
        "{results:?}"
    );
    let started = cluster
        .notes()
        .iter()
        .filter(|(kind, tag, _)| kind == "S" && tag == "TURN:twice.1")
        .count();
    assert_eq!(started, 1, "the run ran once");

    let servers = Arc::into_inner(servers).expect("no task holds the instances");
    for mut server in servers {
        assert!(server.stop().await.success());
        common::assert_none_left_under(&server.workspaces()).await;
    }
}

/// Instances started at the same instant on an empty database all start
/// and serve, whatever the timing: the first migrates, and the secrets
/// they must share (the cursor secret, the generated API token) are the
/// first one's for all of them. Twenty fresh databases, three instances
/// each; every failed start is counted, then reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn instances_started_together_on_an_empty_database_all_serve() {
    const ROUNDS: usize = 20;
    const LIMITS: &str = "max_concurrent_runs: 1\n";
    let began = Instant::now();
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let cluster = Cluster::new("0", 10).await;
        let starts = futures::future::join3(
            cluster.try_instance("a", LIMITS),
            cluster.try_instance("b", LIMITS),
            cluster.try_instance("c", LIMITS),
        )
        .await;
        let mut servers = Vec::new();
        for (name, started) in [("a", starts.0), ("b", starts.1), ("c", starts.2)] {
            match started {
                Ok(server) => servers.push(server),
                Err(said) => failed.push(format!(
                    "round {round}, instance {name}: {}",
                    said.iter()
                        .rev()
                        .find(|l| l.contains("error") || l.contains("cannot"))
                        .cloned()
                        .unwrap_or_default()
                )),
            }
        }
        if servers.len() < 3 {
            continue;
        }
        // One token for all, and each answers with it.
        assert!(servers[0].token.is_some(), "a generated token");
        for server in &servers {
            assert_eq!(server.token, servers[0].token, "round {round}");
            let runners = server
                .client
                .get(format!("{}/v1/runners", server.url))
                .send()
                .await
                .expect("answered");
            assert_eq!(runners.status(), 200, "round {round}");
        }
        // And the cluster runs a turn: accepted by one, streamed by another.
        let id = format!("together-{round}");
        let posted = &servers[round % 3];
        let streamed = &servers[(round + 1) % 3];
        let response = accepted(posted, "together", "TURN:together.1", &id).await;
        let seen = streamed.stream_of(&id).await;
        let results = read_stream(response).await;
        assert_eq!(
            results.last().unwrap()["type"],
            "run.completed",
            "{results:?}"
        );
        assert_eq!(seen.last(), results.last(), "round {round}");
    }
    eprintln!(
        "{} of {} instance starts failed, in {:?}",
        failed.len(),
        ROUNDS * 3,
        began.elapsed()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The bounds count every instance's turns: a conversation's waiting
/// turns, posted through two instances, fill its bound and the next is
/// 429 at either; turns of other conversations fill the global bound the
/// same way; and new turns racing for the last places, through both
/// instances at once, get exactly the room left, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn the_bounds_count_every_instance_s_turns() {
    let cluster = Cluster::new("0.05", 10).await;
    let limits = "max_concurrent_runs: 1\nmax_queue_per_conversation: 2\nmax_queued_total: 6\n";
    let mut a = cluster.instance_with("a", limits).await;
    let mut b = cluster.instance_with("b", limits).await;
    let servers = [&a, &b];
    // A slow turn on each instance's one slot: what comes next waits.
    let mut streams = vec![
        accepted(&a, "full", "TURN:full.1 SLOW", "full-1").await,
        accepted(&b, "busy", "TURN:busy.1 SLOW", "busy-1").await,
    ];
    let started = Instant::now();
    while cluster.notes().iter().filter(|(k, _, _)| k == "S").count() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "both slots run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The conversation's bound: two waiting, through both instances.
    streams.push(accepted(&b, "full", "TURN:full.2", "full-2").await);
    streams.push(accepted(&a, "full", "TURN:full.3", "full-3").await);
    for (i, server) in servers.iter().enumerate() {
        let said = refused(send(server, "full", "TURN:full.4", &format!("full-4-{i}")).await).await;
        assert_eq!(
            said,
            "this conversation already has 2 turns waiting; try again when one has run"
        );
    }

    // The global bound (6): two wait; ten new conversations race for the
    // four places left, five through each instance at once.
    let racing = futures::future::join_all((0..10).map(|i| {
        let server = servers[i % 2];
        async move {
            let id = format!("race-{i}");
            let answer = send(server, &format!("race-{i}"), &format!("TURN:race.{i}"), &id).await;
            (id, answer)
        }
    }))
    .await;
    let mut taken = Vec::new();
    for (id, answer) in racing {
        if answer.status() == 200 {
            taken.push(id);
            streams.push(answer);
        } else {
            let said = refused(answer).await;
            assert_eq!(
                said,
                "the bridge already has 6 turns waiting (max_queued_total); try again shortly",
                "{id}"
            );
        }
    }
    assert_eq!(taken.len(), 4, "exactly the room left: {taken:?}");
    // Every instance agrees: the six wait, no more, and the next is refused.
    for server in servers {
        for id in &taken {
            assert_eq!(record(server, id).await["status"], "queued", "{id}");
        }
        let said = refused(send(server, "late", "TURN:late.1", "late-1").await).await;
        assert!(
            said.contains("6 turns waiting (max_queued_total)"),
            "{said}"
        );
        let missing = server
            .client
            .get(format!("{}/v1/runs/late-1", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404, "a refused turn is not kept");
    }
    drop(streams);
    assert!(a.stop().await.success());
    assert!(b.stop().await.success());
    for root in [a.workspaces(), b.workspaces()] {
        common::assert_none_left_under(&root).await;
    }
}

/// The instance whose folder the first turn to start ran in.
async fn first_start_on(cluster: &Cluster, roots: &[(String, PathBuf)]) -> String {
    let started = Instant::now();
    loop {
        if let Some((_, _, folder)) = cluster.notes().iter().find(|(k, _, _)| k == "S") {
            return instance_of(folder, roots);
        }
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signal(server: &ServeProcess, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(server.child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// Wait until run `id` has ended, as `server` answers for it.
async fn ended(server: &ServeProcess, id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let got = record(server, id).await;
        if got["status"] == "completed" || got["status"] == "failed" {
            return got;
        }
        assert!(Instant::now() < deadline, "{id} did not end: {got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn an_instance_killed_and_another_paused_lose_only_their_running_turns() {
    const CONVERSATIONS: usize = 45;
    const TURNS: usize = 3;
    let cluster = Cluster::new("0.6", 3).await;
    let lease = Duration::from_secs(cluster.lease);
    // A turn on the instance about to be paused that runs longer than its
    // pause, saying three lines and then nothing: only its instance's
    // fence can stop it. b is alone when it is posted, so b runs it.
    let b = cluster.instance("b").await;
    let long = accepted(&b, "long", "TURN:long.1 LONG", "long-1").await;
    let long_pid = harness_pid(&cluster, "TURN:long.1").await;
    let mut a = cluster.instance("a").await;
    let c = cluster.instance("c").await;
    let servers = [&a, &b, &c];
    // Accept every turn (each conversation's in order) before anything
    // happens to the instances; most wait behind the first ones.
    let mut posted = Vec::new();
    for conv in 0..CONVERSATIONS {
        for turn in 1..=TURNS {
            let at = (conv * TURNS + turn) % 3;
            let stream = post(servers[at], conv, turn).await;
            posted.push((at, conv, turn, stream));
        }
    }
    // Mid-load: turns are running on every instance, and on the one
    // about to be killed a conversation's first turn, so its later turns
    // are still waiting (posting is slow on a loaded machine: by its end
    // the first conversations may be at their last turn).
    let named = [("a", &a), ("b", &b), ("c", &c)];
    let roots = roots(&named);
    let started = Instant::now();
    loop {
        let notes = cluster.notes();
        let running_on = |name: &str, first_turn: bool| {
            notes.iter().any(|(k, tag, folder)| {
                k == "S"
                    && tag != "TURN:long.1"
                    && (!first_turn || tag.ends_with(".1"))
                    && !notes.iter().any(|(e, ended, _)| e == "E" && ended == tag)
                    && instance_of(folder, &roots) == name
            })
        };
        if running_on("a", true) && running_on("b", false) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{notes:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What the long turn said before the pause was kept.
    let before_pause = loop {
        let got = record(&c, "long-1").await;
        if got.to_string().contains("tick 3 ") {
            break got;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(before_pause["status"], "running", "{before_pause}");
    // The long turn's client streams it from b, which runs it, and
    // another client from c, by id.
    let long = tokio::spawn(read_stream(long));
    let long_from_c = tokio::spawn(common::server::stream_of(
        c.client.clone(),
        c.url.clone(),
        "long-1".into(),
    ));
    signal(&a, nix::sys::signal::Signal::SIGKILL);
    signal(&b, nix::sys::signal::Signal::SIGSTOP);
    let _ = a.child.wait().await;
    let stopped_at = Instant::now();
    // Streams from the killed instance die with it; those from b (paused,
    // then resumed) and c are read to their end below.
    let mut streams = vec![("long-1".to_string(), "b", long)];
    streams.push(("long-1".to_string(), "c", long_from_c));
    for (at, conv, turn, stream) in posted {
        if at == 0 {
            stream.abort();
        } else {
            streams.push((run_id(conv, turn), ["a", "b", "c"][at], stream));
        }
    }

    // Every turn ends, as the instance left tells.
    let mut records = BTreeMap::new();
    for conv in 0..CONVERSATIONS {
        for turn in 1..=TURNS {
            let id = run_id(conv, turn);
            let got = ended(&c, &id, Duration::from_secs(120)).await;
            records.insert((conv, turn), got);
        }
    }
    // The long turn was ended for its paused instance, its harness still
    // running (a stopped bridge cannot stop it).
    let long_end = ended(&c, "long-1", Duration::from_secs(30)).await;
    assert_eq!(long_end["status"], "failed", "{long_end}");
    assert_eq!(
        long_end["results"].as_array().unwrap().last().unwrap()["data"]["code"],
        "interrupted",
        "{long_end}"
    );
    assert!(common::alive(long_pid), "the long turn's harness runs on");
    // The paused one wakes up: it finds its lease gone and its harnesses
    // stopped; nothing it still had to say is kept.
    let results_before: BTreeMap<(usize, usize), usize> = records
        .iter()
        .map(|(k, r)| (*k, r["results"].as_array().unwrap().len()))
        .collect();
    assert!(stopped_at.elapsed() > lease, "the lease had lapsed");
    signal(&b, nix::sys::signal::Signal::SIGCONT);
    let resumed = Instant::now();
    // It fences itself at once, on its own clock: the long turn's harness
    // is killed within about a lease (the harness's interrupt, then the
    // kill after `kill_grace_seconds`), not left to run its five minutes.
    while common::alive(long_pid) {
        assert!(
            resumed.elapsed() < lease + Duration::from_secs(2),
            "the paused instance's harness still runs {:?} after it resumed",
            resumed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed_after = resumed.elapsed();
    common::assert_none_left_under(&b.workspaces()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // What it said after the others ended it is nowhere: the record is
    // as it was at its end, and the transcript has none of its lines.
    let long_now = record(&c, "long-1").await;
    assert_eq!(long_now["status"], long_end["status"]);
    assert_eq!(
        long_now["results"], long_end["results"],
        "the long turn changed after its end"
    );
    let history = c.get_json("/v1/conversations/long/history?limit=50").await;
    assert!(!history.to_string().contains("tick"), "{history}");
    // What every client was told is what the shared record says, to the
    // terminal result: the ones streaming from b, which lost its turns
    // (its own made-up ends, `completed` or `cancelled`, were refused),
    // and the ones streaming from c, by id or as the instance accepting.
    let mut told_otherwise = Vec::new();
    let total = streams.len();
    for (id, from, stream) in streams {
        let seen = tokio::time::timeout(Duration::from_secs(30), stream)
            .await
            .unwrap_or_else(|_| panic!("the stream of {id} from {from} ends"))
            .expect("the stream's task");
        let recorded = record(&c, &id).await;
        let results = recorded["results"].as_array().expect("results");
        if seen.last() != results.last() || seen.len() != results.len() {
            told_otherwise.push(format!(
                "{id} from {from}: told {:?}, recorded {} {:?}",
                seen.last().map(|r| (&r["type"], &r["data"]["code"])),
                recorded["status"],
                results.last().map(|r| (&r["type"], &r["data"]["code"])),
            ));
        } else {
            assert_eq!(&seen, results, "{id} from {from}");
        }
    }
    assert!(
        told_otherwise.is_empty(),
        "{} of {total} clients were told other than the record:\n{}",
        told_otherwise.len(),
        told_otherwise.join("\n")
    );

    let notes = cluster.notes();
    let by = turns_by_conversation(&notes, &roots);
    let mut interrupted = 0;
    let mut moved = 0;
    for ((conv, turn), got) in &records {
        let ran_on = by
            .get(&conv.to_string())
            .and_then(|turns| turns.iter().find(|(t, _)| t == turn))
            .map(|(_, at)| at.clone());
        let results = got["results"].as_array().unwrap();
        assert_well_formed(results);
        match got["status"].as_str() {
            Some("completed") => {
                assert!(ran_on.is_some(), "{conv}.{turn} completed unseen");
            }
            Some("failed") => {
                // Only a turn that an instance that went had taken: its
                // harness had started there, or not yet.
                let last = results.last().unwrap();
                assert_eq!(last["data"]["code"], "interrupted", "{got}");
                if let Some(at) = &ran_on {
                    assert!(at == "a" || at == "b", "{conv}.{turn} failed on {at}");
                }
                interrupted += 1;
            }
            other => panic!("{conv}.{turn}: {other:?}"),
        }
        // The record did not change after it ended: the paused instance's
        // late results were refused.
        let now = record(&c, &run_id(*conv, *turn)).await;
        assert_eq!(
            now["results"].as_array().unwrap().len(),
            results_before[&(*conv, *turn)],
            "{conv}.{turn} changed after its end: {now}"
        );
        let conv_turns = &by[&conv.to_string()];
        if ran_on.as_deref() == Some("c") && conv_turns.iter().any(|(t, at)| t < turn && at != "c")
        {
            moved += 1;
        }
    }
    assert!(
        interrupted >= 2,
        "turns were running on both: {interrupted}"
    );
    assert!(
        moved >= 1,
        "queued turns of the lost instances moved to c: {by:?}\n{records:?}"
    );
    // Per conversation: in order, the interrupted turn first.
    for (conv, turns) in &by {
        let order: Vec<usize> = turns.iter().map(|(t, _)| *t).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "chat {conv} out of order");
    }
    // Nothing an interrupted turn said after its instance lost the lease
    // reached the transcript: a reply of one is there only if it was
    // written before the turn was ended (its instance stopped between the
    // reply and its end), never after (the paused one woke seconds later).
    for ((conv, turn), got) in &records {
        if got["status"] != "failed" {
            continue;
        }
        let ended_at = got["results"].as_array().unwrap().last().unwrap()["timestamp"]
            .as_i64()
            .expect("the end's time");
        let history = c
            .get_json(&format!(
                "/v1/conversations/{}/history?limit=50",
                conversation(*conv)
            ))
            .await;
        let reply = format!("done {}", tag(*conv, *turn));
        for item in history["items"].as_array().unwrap() {
            if item["content"].as_str().is_some_and(|c| c.contains(&reply)) {
                let written = item["created_at"].as_i64().unwrap();
                assert!(
                    written < (ended_at + 1) * 1000,
                    "{reply} was written at {written}, after its turn ended at {ended_at}"
                );
            }
        }
    }
    let b_log = b.log.lock().unwrap().join("\n");
    eprintln!(
        "{} turns: {interrupted} interrupted, {moved} moved to c; the long turn's harness was \
         killed {killed_after:?} after the paused instance resumed, which said:\n{}",
        records.len(),
        b_log
            .lines()
            .filter(|l| l.contains("lease") || l.contains("fence"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        b_log.contains("no heartbeat for two thirds of the lease"),
        "the paused instance fenced itself: {b_log}"
    );
    assert!(
        b_log.contains("run long-1 no longer holds its conversation")
            || b_log.contains("run long-1 lost its fence"),
        "the long turn's late writes were refused: {b_log}"
    );

    // No harness process is left, of any instance.
    let mut b = b;
    let mut c = c;
    assert!(b.stop().await.success());
    assert!(c.stop().await.success());
    for (_, root) in &roots {
        common::assert_none_left_under(root).await;
    }
}

/// The pid of the harness that ran the turn tagged `tag`, once it started.
async fn harness_pid(cluster: &Cluster, tag: &str) -> i32 {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(&cluster.log).unwrap();
        if let Some(pid) = log
            .lines()
            .find(|l| l.starts_with(&format!("S {tag} ")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        {
            return pid;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Someone else's session on the cluster's database, holding what
/// `lock` (a statement) takes until the test says `ROLLBACK`.
async fn hold_in_database(cluster: &Cluster, lock: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("BEGIN; {lock}"))
        .await
        .unwrap();
    client
}

/// An instance whose heartbeat hangs in the database (its row locked by
/// someone else, so the renewal waits without end, and no one can reap
/// it either) still fences itself on its own clock: its harness is
/// stopped within about two thirds of the lease, and once the database
/// answers again the instance goes on taking turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn a_heartbeat_stuck_in_the_database_still_fences() {
    let cluster = Cluster::new("0.05", 3).await;
    let lease = Duration::from_secs(cluster.lease);
    let mut b = cluster.instance("b").await;
    let long = accepted(&b, "long", "TURN:long.1 LONG", "long-1").await;
    let pid = harness_pid(&cluster, "TURN:long.1").await;
    let hold = hold_in_database(
        &cluster,
        "SELECT 1 FROM instances WHERE id = 'b' FOR UPDATE",
    )
    .await;
    let held = Instant::now();
    while common::alive(pid) {
        assert!(
            held.elapsed() < lease,
            "the harness still runs {:?} into the heartbeat's silence",
            held.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped_after = held.elapsed();
    assert!(
        stopped_after > lease / 3,
        "stopped by the fence, not before: {stopped_after:?}"
    );
    let said = b.log.lock().unwrap().join("\n");
    assert!(
        said.contains("no heartbeat for two thirds of the lease"),
        "{said}"
    );
    hold.batch_execute("ROLLBACK").await.unwrap();
    // The run ended (its end written once the database answered), and
    // the instance, its heartbeat back, takes the next turn.
    let results = read_stream(long).await;
    assert_well_formed(&results);
    assert_eq!(results.last().unwrap()["type"], "run.failed", "{results:?}");
    let next = b
        .results(json!({"conversation": "after", "text": "TURN:after.1", "run_id": "after-1"}))
        .await;
    assert_eq!(next.last().unwrap()["type"], "run.completed", "{next:?}");
    eprintln!("the harness was stopped {stopped_after:?} into the heartbeat's silence");
    assert!(b.stop().await.success());
    common::assert_none_left_under(&b.workspaces()).await;
}

/// A burst of turns that holds every pooled connection (each accept
/// waits on the queue's table, locked by someone else) is not the
/// instance's silence: its heartbeat has a connection of its own, so the
/// instance does not fence itself and the turn it runs goes on; once the
/// table is free, every turn of the burst is taken and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn a_burst_that_holds_every_pooled_connection_does_not_fence() {
    const BURST: usize = 24;
    let cluster = Cluster::new("0.05", 3).await;
    let lease = Duration::from_secs(cluster.lease);
    let mut b = cluster.instance("b").await;
    let long = accepted(&b, "long", "TURN:long.1 LONG", "long-1").await;
    let pid = harness_pid(&cluster, "TURN:long.1").await;
    let hold = hold_in_database(&cluster, "LOCK TABLE conv_queue IN ACCESS EXCLUSIVE MODE").await;
    let held = Instant::now();
    // More turns than the pool has connections (16), each accept holding
    // one while it waits on the lock.
    let burst: Vec<_> = (0..BURST)
        .map(|i| {
            b.spawn_results(json!({"conversation": format!("burst-{i}"),
                "text": format!("TURN:burst.{i}"), "run_id": format!("burst-{i}")}))
        })
        .collect();
    // Two leases: a heartbeat that waited for a pooled connection would
    // have fenced the instance, and stopped its harness, by then.
    while held.elapsed() < lease * 2 {
        assert!(
            common::alive(pid),
            "the harness was stopped {:?} into the burst",
            held.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said = b.log.lock().unwrap().join("\n");
    assert!(
        !said.contains("no heartbeat for two thirds of the lease"),
        "{said}"
    );
    hold.batch_execute("ROLLBACK").await.unwrap();
    for (i, turn) in burst.into_iter().enumerate() {
        let results = turn.await.expect("the burst's task");
        assert_well_formed(&results);
        let last = results.last().unwrap();
        assert_eq!(last["type"], "run.completed", "burst-{i}: {results:?}");
    }
    assert!(common::alive(pid), "the long turn runs on");
    let long = b
        .cancel_and_wait("long-1", tokio::spawn(read_stream(long)))
        .await;
    assert_well_formed(&long);
    assert_eq!(
        long.last().unwrap()["data"]["code"],
        "cancelled",
        "{long:?}"
    );
    assert!(b.stop().await.success());
    common::assert_none_left_under(&b.workspaces()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn a_cancel_posted_to_another_instance_stops_the_turn() {
    let cluster = Cluster::new("0.05", 10).await;
    let mut a = cluster.instance("a").await;
    let mut b = cluster.instance("b").await;
    let slow = accepted(&a, "slow-chat", "TURN:c0.1 SLOW", "slow-1").await;
    // A turn queued behind it, on the other instance.
    let queued = accepted(&b, "slow-chat", "TURN:c0.2", "slow-2").await;
    let named = [("a", &a), ("b", &b)];
    let roots = roots(&named);
    let runs_on = first_start_on(&cluster, &roots).await;
    let (runner, other) = if runs_on == "a" { (&a, &b) } else { (&b, &a) };
    // The other instance streams it too, as it runs.
    let watching = tokio::spawn(common::server::stream_of(
        other.client.clone(),
        other.url.clone(),
        "slow-1".into(),
    ));
    // The queued turn is dropped from the instance that does not hold it.
    let dropped = runner
        .client
        .post(format!("{}/v1/runs/slow-2/cancel", runner.url))
        .send()
        .await
        .unwrap();
    assert_eq!(dropped.status(), 202);
    let cancel_at = Instant::now();
    let cancelled = other
        .client
        .post(format!("{}/v1/runs/slow-1/cancel", other.url))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 202);

    let results = read_stream(slow).await;
    assert!(
        cancel_at.elapsed() < Duration::from_secs(10),
        "stopped at once"
    );
    assert_well_formed(&results);
    let end = results.last().unwrap();
    assert_eq!(end["type"], "run.failed", "{results:?}");
    assert_eq!(end["data"]["code"], "cancelled", "{results:?}");
    let seen = watching.await.unwrap();
    assert_eq!(
        seen.last(),
        Some(end),
        "the other instance streamed the same end"
    );
    let second = read_stream(queued).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0]["data"]["code"], "cancelled");
    assert!(
        !cluster.notes().iter().any(|(_, t, _)| t == "TURN:c0.2"),
        "the dropped turn never ran"
    );
    // Cancel again: it has ended, wherever asked.
    for server in [&a, &b] {
        let again = server
            .client
            .post(format!("{}/v1/runs/slow-1/cancel", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409);
    }
    let missing = a
        .client
        .post(format!("{}/v1/runs/nope/cancel", a.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(a.stop().await.success());
    assert!(b.stop().await.success());
    for (_, root) in &roots {
        common::assert_none_left_under(root).await;
    }
}

/// A chat command sent to another instance than the one running the
/// conversation's turn: `/status` there names the turn (read from the
/// shared store), and `/stop` there stops it through the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn a_stop_sent_to_another_instance_stops_the_turn() {
    let cluster = Cluster::new("0.05", 10).await;
    let mut a = cluster.instance("a").await;
    let mut b = cluster.instance("b").await;
    let slow = accepted(&a, "stop-chat", "TURN:s.1 SLOW", "stop-1").await;
    let named = [("a", &a), ("b", &b)];
    let roots = roots(&named);
    let runs_on = first_start_on(&cluster, &roots).await;
    let other = if runs_on == "a" { &b } else { &a };
    let ask = |text: &str| {
        json!({"conversation": "stop-chat", "text": text,
               "config": {"commands": {"allow": {"stop": "everyone"}}}})
    };
    let status = other.results(ask("/status")).await;
    let said = status.last().unwrap()["data"]["message"]["content"].to_string();
    assert!(
        said.contains("Running: a turn of scripted") && said.contains("stop-1"),
        "{said}"
    );
    let asked = Instant::now();
    let stop = other.results(ask("/stop")).await;
    let said = stop.last().unwrap()["data"]["message"]["content"].to_string();
    assert!(said.contains("Stopped the running turn"), "{said}");
    let results = read_stream(slow).await;
    assert!(asked.elapsed() < Duration::from_secs(10), "stopped at once");
    let end = results.last().unwrap();
    assert_eq!(end["data"]["code"], "cancelled", "{results:?}");
    let again = other.results(ask("/stop")).await;
    let said = again.last().unwrap()["data"]["message"]["content"].to_string();
    assert!(said.contains("Nothing is running here"), "{said}");
    assert!(a.stop().await.success());
    assert!(b.stop().await.success());
}

/// The real Claude Code on two instances: a conversation's instance is
/// killed; the next turn, posted to the other, waits out the lease, takes
/// the conversation over and resumes the same Claude Code session there
/// (its files followed through the store: the model is sent the first
/// turn again), and the model's call of the bridge's history tool reads
/// the first turn from the shared store. With the copy turned off, the
/// next move starts fresh and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres+clis: needs PostgreSQL's server (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN) and the pinned claude (tests/clis); scripts/test runs it"]
async fn a_conversation_is_taken_over_when_its_instance_dies() {
    use common::anthropic::{ANSWER, ASK, fake_model};
    let (model_url, fake) = fake_model(false).await;
    let db = common::pg::database().await;
    let claude = common::cli("claude");
    let start = |name: &'static str, copy_mib: u32| {
        let (url, model_url, claude) = (db.url.clone(), model_url.clone(), claude.clone());
        async move {
            let data = Arc::new(common::tempdir());
            let home = data.path().join("home");
            std::fs::create_dir(&home).unwrap();
            let config = format!(
                "store: {url}\ninstance_id: {name}\nlease_seconds: 3\n\
                 harness_binaries:\n  claude-code: {}\nshutdown_grace_seconds: 5\n\
                 session_copy_max_mib: {copy_mib}\n",
                claude.display()
            );
            let env = [
                ("PATH", std::env::var("PATH").unwrap_or_default()),
                ("HOME", home.display().to_string()),
                (
                    "CLAUDE_CONFIG_DIR",
                    home.join(".claude").display().to_string(),
                ),
                ("ANTHROPIC_BASE_URL", model_url),
                ("ANTHROPIC_API_KEY", "test-key".to_string()),
                ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
            ];
            ServeProcess::spawn(data, &config, &env).await
        }
    };
    let mut a = start("a", 16).await;
    let first = a
        .results(json!({"conversation": "moving", "text": common::DECISION, "run_id": "move-1"}))
        .await;
    let done = first.last().unwrap();
    assert_eq!(done["type"], "run.completed", "{first:?}");
    let first_session = done["data"]["message"]["metadata"]["session"]["session_id"].clone();
    let mut b = start("b", 16).await;
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;

    let asked = fake.requests.lock().unwrap().len();
    let second = b
        .results(json!({"conversation": "moving", "text": ASK, "run_id": "move-2"}))
        .await;
    let done = second.last().unwrap();
    assert_eq!(done["type"], "run.completed", "{second:?}");
    let session = &done["data"]["message"]["metadata"]["session"];
    assert_eq!(session["session_id"], first_session, "{session}");
    assert_eq!(session["resumed"], true, "{session}");
    assert!(session["notice"].is_null(), "{session}");
    assert!(done.to_string().contains(ANSWER), "{second:?}");
    // The session came along: the model's first request of the turn holds
    // the first turn's message, before any tool was called.
    let requests = fake.requests.lock().unwrap().clone();
    assert!(
        requests[asked]["messages"]
            .to_string()
            .contains(common::DECISION),
        "the resumed session did not hold the first turn: {}",
        requests[asked]["messages"]
    );
    // The history tool answered from the shared store: the first turn,
    // written by the lost instance, reached the model.
    assert!(
        requests[asked..].iter().any(|r| {
            r["messages"].to_string().contains("tool_result")
                && r.to_string().contains(common::DECISION)
        }),
        "the history tool did not read the first turn"
    );
    let history = b
        .get_json("/v1/conversations/moving/history?limit=10")
        .await;
    assert!(history.to_string().contains(common::DECISION), "{history}");

    // Instance c keeps no copies: b dies, c's turn starts fresh, saying why.
    let mut c = start("c", 0).await;
    b.child.start_kill().unwrap();
    let _ = b.child.wait().await;
    let third = c
        .results(json!({"conversation": "moving", "text": ASK, "run_id": "move-3"}))
        .await;
    let done = third.last().unwrap();
    assert_eq!(done["type"], "run.completed", "{third:?}");
    let session = &done["data"]["message"]["metadata"]["session"];
    assert_ne!(session["session_id"], first_session, "{session}");
    let notice = session["notice"].as_str().unwrap_or_default();
    assert!(notice.contains("another workspace"), "{session}");

    let root = c.workspaces();
    assert!(c.stop().await.success());
    common::assert_none_left_under(&root).await;
    common::assert_none_left_under(&a.workspaces()).await;
    common::assert_none_left_under(&b.workspaces()).await;
}

/// `harness-bridge` with its arguments, on data folder `data`; its exit
/// code, stdout and stderr.
fn command(data: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::bridge_bin())
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("the command runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `migrate` prepares a PostgreSQL store once (and says what it applied),
/// `host` reads the shared store as `serve` wrote it; a URL with a
/// password is refused on the command line (bridge.yaml holds it), and
/// `migrate` refuses an embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn migrate_and_host_work_on_the_shared_store() {
    let cluster = Cluster::new("0.05", 10).await;
    let data = common::tempdir();
    let (code, out, err) = command(data.path(), &["migrate", "--store", &cluster.url]);
    assert_eq!(code, 0, "{err}");
    // Every step of the host store's schema, in order.
    let steps = harness_bridge::host::postgres::MIGRATIONS;
    for step in steps {
        let applied = format!(
            "host store migration {} applied ({})",
            step.version, step.name
        );
        assert!(out.contains(&applied), "{out}");
    }
    assert!(
        out.contains("host store migration 2 applied (run usage)"),
        "{out}"
    );
    assert!(
        out.contains("run queue migration 1 applied (run queue)"),
        "{out}"
    );
    assert!(
        !out.contains("postgres@"),
        "the user stays out of what is printed: {out}"
    );
    let (code, out, err) = command(data.path(), &["migrate", "--store", &cluster.url]);
    assert_eq!(code, 0, "{err}");
    let latest = steps.last().map_or(0, |m| m.version);
    assert!(
        out.contains(&format!("host store schema up to date (version {latest})")),
        "{out}"
    );
    assert!(
        out.contains("run queue schema up to date (version 1)"),
        "{out}"
    );

    let mut a = cluster.instance("a").await;
    let done = a
        .results(json!({"conversation": "shown", "text": "TURN:c1.1 hello", "run_id": "shown-1"}))
        .await;
    assert_eq!(done.last().unwrap()["type"], "run.completed", "{done:?}");
    assert!(a.stop().await.success());

    let (code, out, err) = command(
        data.path(),
        &["host", "--store", &cluster.url, "history", "shown"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("TURN:c1.1 hello") && out.contains("done TURN:c1.1"),
        "{out}"
    );
    let (code, out, err) = command(
        data.path(),
        &[
            "host",
            "--store",
            &cluster.url,
            "state",
            "conversation",
            "shown",
            "--runner",
            "scripted",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("external.session_id = \"cluster-1\""), "{out}");
    // The same through a bridge.yaml, as serve reads it.
    let config = data.path().join("bridge.yaml");
    std::fs::write(&config, format!("store: {}\n", cluster.url)).unwrap();
    let (code, out, err) = command(
        data.path(),
        &[
            "host",
            "--config",
            config.to_str().unwrap(),
            "history",
            "shown",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("done TURN:c1.1"), "{out}");
    let (code, out, err) = command(
        data.path(),
        &[
            "host",
            "--config",
            config.to_str().unwrap(),
            "audit",
            "--run",
            "shown-1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // The scripted harness made no host call: the shared store says so.
    assert_eq!(out.trim(), "no audit rows for run `shown-1`");

    let secret = cluster.url.replace("postgres@", "postgres:hunter2@");
    let (code, _, err) = command(
        data.path(),
        &["host", "--store", &secret, "history", "shown"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--config"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    let (code, _, err) = command(data.path(), &["migrate", "--store", "./folder"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("embedded store"), "{err}");
}

/// The operator's budgets held across two instances on the shared store:
/// a person whose runs on one instance spent their day's tokens is
/// refused on the other; of six turns one person starts at once through
/// both instances under a rate of three a minute, exactly three run;
/// each refusal is one audit row in the shared store, no refused turn
/// reaches the harness, and another person goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier postgres: needs PostgreSQL's initdb and postgres (apt-get install postgresql, or HARNESS_BRIDGE_PG_BIN); scripts/test runs it"]
async fn budgets_hold_exactly_across_instances() {
    let cluster = Cluster::new("0.3", 10).await;
    let limits = "max_concurrent_runs: 4\nmax_queue_per_conversation: 8\n\
                  budgets:\n  actor: {turns_per_minute: 3, tokens_per_day: 1000}\n";
    let mut a = cluster.instance_with("a", limits).await;
    let mut b = cluster.instance_with("b", limits).await;
    let turn = |server: &ServeProcess, actor: &str, conversation: &str, text: &str| {
        let body = json!({"conversation": conversation, "actor": actor, "text": text});
        let request = server
            .client
            .post(format!("{}/v1/runs", server.url))
            .body(body.to_string())
            .send();
        async move { read_stream(request.await.expect("answered")).await }
    };
    let spent = turn(&a, "ann", "ann-1", "TURN:ann.1 SPEND").await;
    assert_eq!(spent.last().unwrap()["type"], "run.completed", "{spent:?}");
    let refused = turn(&b, "ann", "ann-2", "TURN:ann.2").await;
    let failed = refused.last().unwrap();
    assert_eq!(failed["data"]["code"], "limit_reached", "{refused:?}");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap()
            .starts_with("You have used 1,100 tokens today, the most allowed for each person (1,000 tokens a day)"),
        "{failed}"
    );

    let servers = [&a, &b];
    let bobs = futures::future::join_all((0..6).map(|i| {
        turn(
            servers[i % 2],
            "bob",
            &format!("bob-{i}"),
            &format!("TURN:bob.{i}"),
        )
    }))
    .await;
    let ends: Vec<&Value> = bobs.iter().map(|r| r.last().unwrap()).collect();
    let ran = ends.iter().filter(|e| e["type"] == "run.completed").count();
    let over = ends
        .iter()
        .filter(|e| e["data"]["code"] == "limit_reached")
        .count();
    assert_eq!((ran, over), (3, 3), "{ends:#?}");

    let carol = turn(&b, "carol", "carol-1", "TURN:carol.1").await;
    assert_eq!(carol.last().unwrap()["type"], "run.completed", "{carol:?}");
    let started: Vec<String> = cluster
        .notes()
        .into_iter()
        .filter(|(kind, _, _)| kind == "S")
        .map(|(_, tag, _)| tag)
        .collect();
    assert_eq!(started.len(), 5, "refused turns never started: {started:?}");
    assert!(!started.contains(&"TURN:ann.2".to_string()));

    let data = common::tempdir();
    let (code, audit, err) = command(
        data.path(),
        &["host", "audit", "--store", &cluster.url, "--limit", "500"],
    );
    assert_eq!(code, 0, "{err}");
    let refusals: Vec<&str> = audit.lines().filter(|l| l.contains(" budget ")).collect();
    assert_eq!(refusals.len(), 4, "{audit}");
    assert!(a.stop().await.success());
    assert!(b.stop().await.success());
}
