//! A full turn through the bridge against the same turn without it, and
//! the decoder's throughput on the real stream that turn produced.
//!
//! Both sides run the pinned Claude Code CLI (`tests/clis`, installed by
//! `scripts/test`) against one fake Messages API on 127.0.0.1 that streams
//! a short answer, and give it the prompt as the built-in spec does: on
//! stdin. "Direct" is `claude -p --output-format stream-json --verbose
//! --include-partial-messages`; "bridge" is `harness-bridge run` (a new
//! process, store open, grant, workspace, MCP server the harness connects
//! to, decoding, recording). Runs alternate so that drift hits both sides
//! alike.
//!
//! Reproduce: `cargo bench --bench turn` (`TURNS=20` for more runs).
//! Without `--bench` (as `cargo test --bench turn` runs it) it is a quick
//! check that every path still works: one turn each way, and the recorded
//! stream decoded once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness_bridge::harness::decode::{Exit, LineBuffer, ResultStream};
use harness_bridge::protocol::AgentRunResult;

mod support;

use support::ANSWER;

const PROMPT: &str = "Say hello.";

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

struct Env {
    home: tempfile::TempDir,
    model_url: String,
}

impl Env {
    fn apply<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("CLAUDE_CONFIG_DIR", self.home.path().join(".claude"))
            .env("ANTHROPIC_BASE_URL", &self.model_url)
            .env("ANTHROPIC_API_KEY", "bench-key")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .stderr(Stdio::piped())
    }
}

/// Run `command` with `prompt` on its stdin, as the bridge launches a
/// harness whose spec says `stdin: prompt`.
fn with_prompt(command: &mut Command, prompt: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("claude starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(prompt.as_bytes()).expect("prompt written");
    drop(stdin);
    child.wait_with_output().expect("claude runs")
}

fn check_exit(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

fn direct(claude: &Path, env: &Env, cwd: &Path) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let output = with_prompt(
        env.apply(Command::new(claude).current_dir(cwd).args([
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
        ])),
        PROMPT,
    );
    let elapsed = start.elapsed();
    check_exit(&output, "direct claude");
    (elapsed, output.stdout)
}

/// What the bridge gives Claude, set up once without the bridge's `run`:
/// a workspace, a live MCP server and a run token.
struct SameConfig {
    workspace: PathBuf,
    args: Vec<String>,
    /// What goes to stdin, per the spec (the turn prompt).
    stdin: Option<String>,
    token: String,
    _mcp: harness_bridge::mcp::McpHttpServer,
    _root: tempfile::TempDir,
}

async fn same_config() -> SameConfig {
    use harness_bridge::host::{GrantPolicy, Grants};
    use harness_bridge::projection::{ProjectRequest, Templates, project};
    let root = tempfile::tempdir().expect("root");
    let store =
        harness_bridge::host::sqlite::SqliteHost::open(&root.path().join("store")).expect("store");
    let grants = std::sync::Arc::new(Grants::new(std::sync::Arc::new(store)));
    let tools = harness_bridge::mcp::RunTools::default();
    let mcp = harness_bridge::mcp::McpHttpServer::start(
        grants.clone(),
        tools,
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("MCP server");
    let ctx = harness_bridge::run::quick_context(&harness_bridge::run::QuickTurn {
        conversation: "direct",
        actor: "bench",
        text: PROMPT,
        config: Default::default(),
        answer: None,
    })
    .expect("context");
    let spec = harness_bridge::harness::find("claude-code").expect("spec");
    let open = grants
        .open_run(
            &ctx,
            &harness_bridge::harness::runner_id(&spec.name),
            &harness_bridge::harness::requested_permissions(),
            &GrantPolicy::default(),
        )
        .expect("run");
    let names = harness_bridge::mcp::tool_names(
        &open.grant.apis,
        harness_bridge::interaction::Asking::default(),
    );
    let target = spec.target();
    let binding = harness_bridge::projection::Binding::from_config(&ctx.config).expect("binding");
    let projection = project(
        &ProjectRequest {
            ctx: &ctx,
            binding: &binding,
            target: &target,
            runner: &spec.name,
            shared: None,
            root: &root.path().join("workspaces"),
            tools: &names,
            project: None,
            mcp_url: mcp.url(),
            mcp_servers: &Default::default(),
            host: None,
            env: &Default::default(),
            owner: None,
        },
        &Templates::load(None).expect("templates"),
    )
    .await
    .expect("projection");
    let mcp_config = projection.workspace.join(".langbot/mcp.json");
    let args = spec
        .args(&harness_bridge::harness::TurnValues {
            prompt: &projection.turn_prompt,
            instructions: Some(&projection.instructions),
            mcp_config: Some(&mcp_config),
            ..Default::default()
        })
        .expect("the built-in spec renders");
    let stdin = match spec.stdin {
        harness_bridge::harness::Stdin::Prompt => Some(projection.turn_prompt.clone()),
        harness_bridge::harness::Stdin::Closed => None,
    };
    SameConfig {
        workspace: projection.workspace,
        args,
        stdin,
        token: open.token.expose().to_string(),
        _mcp: mcp,
        _root: root,
    }
}

fn direct_same(claude: &Path, env: &Env, same: &SameConfig) -> Duration {
    let start = Instant::now();
    let output = with_prompt(
        env.apply(
            Command::new(claude)
                .current_dir(&same.workspace)
                .args(&same.args)
                .env(harness_bridge::projection::TOKEN_ENV, &same.token),
        ),
        same.stdin.as_deref().unwrap_or(""),
    );
    let elapsed = start.elapsed();
    check_exit(&output, "claude with the bridge's argv and MCP config");
    elapsed
}

fn bridged(claude: &Path, env: &Env, data: &Path, turn: usize) -> Duration {
    let conversation = format!("bench-{turn}");
    support::timed_bridge_run(
        env.apply(Command::new(env!("CARGO_BIN_EXE_harness-bridge")).args([
            "--data-dir".as_ref(),
            data.as_os_str(),
            "run".as_ref(),
            "--bin".as_ref(),
            claude.as_os_str(),
            "--conversation".as_ref(),
            conversation.as_ref(),
            "--text".as_ref(),
            PROMPT.as_ref(),
        ])),
    )
}

/// Decode `stream` (a recorded stdout) in 64 KiB reads, as from a pipe,
/// handing each result to `each` (the throughput run only counts them:
/// keeping 70,000 results would measure the allocator).
fn decode_all(stream: &[u8], mut each: impl FnMut(AgentRunResult)) {
    let mut d = harness_bridge::harness::families::claude::STREAM_JSON.decoder();
    let mut lines = LineBuffer::default();
    let mut results = ResultStream::new("bench");
    for chunk in stream.chunks(64 * 1024) {
        for line in lines.push(chunk) {
            results.stamp(d.line(&line)).into_iter().for_each(&mut each);
        }
    }
    results
        .stamp(d.finish(Exit { code: Some(0) }))
        .into_iter()
        .for_each(each);
}

/// The recorded turn decodes to the answer the fake API streamed, ending
/// with `run.completed`: the decoder figure is about a real turn.
fn check_recorded(recorded: &[u8]) {
    let mut results = Vec::new();
    decode_all(recorded, |result| results.push(result));
    let last = results.last().expect("results");
    let data = serde_json::to_value(&last.data).expect("data");
    assert!(
        last.kind.as_str() == "run.completed" && data["message"]["content"] == ANSWER,
        "the recorded turn did not decode to its answer: {results:?}"
    );
    let deltas = results
        .iter()
        .filter(|r| r.kind.as_str() == "message.delta")
        .count();
    assert!(deltas > 0, "no token deltas in the recorded turn");
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --bench
    // turn`), one turn each way and one decode, as a check.
    let quick = support::quick();
    let turns = support::turns(0, 10);
    let claude = support::claude();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let model_url = runtime.block_on(support::fake_messages_api());
    let env = Env {
        home: tempfile::tempdir().expect("home"),
        model_url,
    };
    let data = tempfile::tempdir().expect("data");
    let cwd = tempfile::tempdir().expect("cwd");

    // One of each first: caches warm, the recording for the decoder taken,
    // and every path known to work.
    let (_, recorded) = direct(&claude, &env, cwd.path());
    check_recorded(&recorded);
    let same = runtime.block_on(same_config());
    bridged(&claude, &env, data.path(), 0);
    direct_same(&claude, &env, &same);
    if quick {
        println!("turn: one turn each way and the recorded stream decoded: ok");
        return;
    }
    if turns > 0 {
        let (mut plain, mut configured, mut through) = (Vec::new(), Vec::new(), Vec::new());
        for turn in 1..=turns {
            plain.push(direct(&claude, &env, cwd.path()).0);
            configured.push(direct_same(&claude, &env, &same));
            through.push(bridged(&claude, &env, data.path(), turn));
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (plain, configured, through) = (
            median(&mut plain),
            median(&mut configured),
            median(&mut through),
        );
        println!("turn, {turns} runs each (median):");
        println!(
            "  claude -p, bare                          {:>8.1} ms",
            ms(plain)
        );
        println!(
            "  claude -p, the bridge's argv and MCP     {:>8.1} ms",
            ms(configured)
        );
        println!(
            "  harness-bridge run                       {:>8.1} ms",
            ms(through)
        );
        println!(
            "  bridge vs the same claude invocation: ratio {:.3} (target <= 1.05), added {:.1} ms",
            through.as_secs_f64() / configured.as_secs_f64(),
            ms(through) - ms(configured)
        );
        println!(
            "  bridge vs bare claude: ratio {:.3}, added {:.1} ms",
            through.as_secs_f64() / plain.as_secs_f64(),
            ms(through) - ms(plain)
        );
    }

    // The recorded turn, repeated to 50 MB.
    let mut stream = Vec::with_capacity(51 * 1024 * 1024);
    while stream.len() < 50 * 1024 * 1024 {
        stream.extend_from_slice(&recorded);
        if !recorded.ends_with(b"\n") {
            stream.push(b'\n');
        }
    }
    let mut times = Vec::new();
    let mut results = 0;
    for _ in 0..5 {
        let start = Instant::now();
        results = 0;
        decode_all(&stream, |_| results += 1);
        times.push(start.elapsed());
    }
    let t = median(&mut times);
    println!(
        "decoder: {:.1} MB recorded claude stream-json ({} lines per turn) -> {results} results in {:.1} ms: {:.0} MB/s (target >= 200)",
        stream.len() as f64 / 1e6,
        recorded.iter().filter(|b| **b == b'\n').count(),
        t.as_secs_f64() * 1e3,
        stream.len() as f64 / 1e6 / t.as_secs_f64()
    );
}
