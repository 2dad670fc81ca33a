//! `harness-bridge run`: one turn through a harness on the embedded host,
//! its results streamed to stdout as NDJSON (or rendered for a person).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::error::{CliError, Outcome};
use super::exit;
use super::input::read_text;
use crate::harness::decode::ResultStream;
use crate::protocol::FailureCode;
use crate::protocol::{
    AgentRunContext, AgentRunResult, JsonMap, ResultPayload, ResultType, RunFailed, checked_context,
};
use crate::run::{Bridge, QuickTurn, RunOptions, Settings, quick_context};

/// Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells expect).
const CANCELLED: u8 = 130;

/// What `run --help` adds after the options: examples and exit codes.
pub const AFTER_HELP: &str = "\
Examples:
  harness-bridge run --conversation demo --text 'What did we decide?'
  harness-bridge run --harness codex --conversation demo --text 'Go on' --format pretty
  harness-bridge run --context turn.json --harness claude-code > results.ndjson

Each turn resumes the conversation's previous session of the same harness
(its pointer is kept in the embedded host's conversation state). The harness
gets only whitelisted environment variables: see `adapters show NAME`, and
add more with --pass-env.

Exit codes: 0 run.completed, 1 invalid context or arguments, 3 run.failed,
130 cancelled with Ctrl-C.";

/// How results are written to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One AgentRunResult JSON object per line, as they happen.
    Ndjson,
    /// Streamed text, tool calls and the final status, for a person.
    Pretty,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// AgentRunContext JSON file, or `-` for standard input.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["conversation", "text", "actor"], required_unless_present = "conversation")]
    context: Option<PathBuf>,
    /// Conversation id: builds the context from --conversation, --text and --actor.
    #[arg(long, value_name = "ID", requires = "text")]
    conversation: Option<String>,
    /// The user's message (with --conversation).
    #[arg(long, value_name = "TEXT")]
    text: Option<String>,
    /// Who is speaking (with --conversation).
    #[arg(long, value_name = "ID", default_value = "local-user")]
    actor: Option<String>,
    /// Harness to run (see `adapters list`).
    #[arg(long, value_name = "NAME", default_value = "claude-code")]
    harness: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Ndjson)]
    format: Format,
    /// Harness program to run instead of looking the spec's binary up on PATH.
    #[arg(long, value_parser = super::absolute_path, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// Also pass this variable (or prefix ending in `*`) to the harness. Repeatable.
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Model for the harness (sets the binding's `model`).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Turn timeout in seconds (sets the binding's `timeout_seconds`).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL when the harness is stopped.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    kill_grace: u64,
    /// Folder under which conversation workspaces live [default: DATA_DIR/workspaces].
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Folder of template overrides.
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    templates: Option<PathBuf>,
    /// Folder of adapter specs that add to or replace the built-in ones.
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    adapters: Option<PathBuf>,
    /// Extra MCP servers the operator allows (YAML: name → {command, args,
    /// env} or {url, headers}). A turn from --conversation uses them all; a
    /// --context picks among them by name in `config.mcp_servers`.
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    mcp_servers: Option<PathBuf>,
    /// The operator's code repositories (YAML: name → {repository, base,
    /// branch, author, mode, publish}, as bridge.yaml's `projects`). A
    /// --context picks one by name in `config.project`.
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    projects: Option<PathBuf>,
    /// The project a --conversation turn works on: its worktree, on the
    /// conversation's own branch (one declared in --projects).
    #[arg(
        long,
        value_name = "NAME",
        requires = "projects",
        conflicts_with = "context"
    )]
    project: Option<String>,
    #[command(flatten)]
    cage: super::cage::CageArgs,
}

/// Write one line; a closed stdout (piped into `head`) is not an error.
fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// An invalid context still gets a result stream: one `run.failed`.
fn invalid(run_id: &str, error: String, format: Format) -> u8 {
    let results = ResultStream::new(run_id).stamp(vec![ResultPayload::RunFailed(RunFailed {
        code: FailureCode::InvalidArgument,
        error,
        retryable: false,
    })]);
    for result in &results {
        match format {
            Format::Ndjson => line(&serde_json::to_string(result).unwrap_or_default()),
            Format::Pretty => Pretty::default().show(result),
        }
    }
    exit::INVALID
}

/// The turn's context: the file's, or one built from `--conversation` and
/// `--text`. The inner `Err` is a context that is not valid (its run id,
/// and why), which still gets its result stream.
fn turn_context(args: &RunArgs) -> Result<Result<AgentRunContext, (String, String)>, CliError> {
    let Some(file) = &args.context else {
        let (Some(conversation), Some(text)) = (&args.conversation, &args.text) else {
            return Err(CliError::usage(
                "pass --context FILE, or --conversation ID --text TEXT",
            ));
        };
        return Ok(quick_context(&QuickTurn {
            conversation,
            actor: args.actor.as_deref().unwrap_or("local-user"),
            text,
            config: JsonMap::new(),
            answer: None,
        })
        .map_err(|e| ("invalid".into(), format!("cannot build the context: {e}"))));
    };
    let text = read_text(file)
        .map_err(|e| CliError::failure(format!("cannot read {}: {e}", file.display())))?;
    let doc = match serde_json::from_str::<Value>(&text) {
        Ok(doc) => doc,
        Err(e) => return Ok(Err(("invalid".into(), format!("not JSON: {e}")))),
    };
    Ok(checked_context(&doc).map_err(|why| {
        let run_id = doc["run_id"].as_str().unwrap_or("invalid");
        (run_id.to_string(), why.to_string())
    }))
}

/// Run one turn; the exit code says how it ended.
pub fn run(args: RunArgs, data_dir: &Path) -> Outcome {
    let mut ctx = match turn_context(&args)? {
        Ok(ctx) => ctx,
        Err((run_id, why)) => return Ok(invalid(&run_id, why, args.format)),
    };
    let servers = super::load_mcp_servers(args.mcp_servers.as_deref())?;
    ctx.config.extend(flag_config(&args, &servers));
    let projects = load_projects(args.projects.as_deref())?;

    let adapters = super::load_adapters(args.adapters.as_deref())?;
    let templates = super::load_templates(args.templates.as_deref())?;
    if let Some(serve) = crate::serve::served_by(data_dir) {
        return Err(CliError::invalid(format!(
            "a harness-bridge serve{serve} is running on {}: a turn run beside it would \
             resume the same conversations' sessions in a second process. Send the turn to \
             it (POST /v1/runs), stop it, or give run another --data-dir",
            data_dir.display()
        )));
    }
    let (runtime, store) = super::open_store(data_dir)?;
    store
        .keep_audit_for(crate::host::sqlite::DEFAULT_AUDIT_RETENTION)
        .map_err(CliError::failure)?;
    let root = args.root.unwrap_or_else(|| data_dir.join("workspaces"));
    super::private_folder(&root).map_err(CliError::failure)?;
    let mut settings = Settings::new(root);
    settings.pass_env = args.pass_env;
    settings.kill_grace = Duration::from_secs(args.kill_grace);
    settings.mcp_servers = servers;
    settings.cage = args.cage.policy();
    super::cage::settle_network(&mut settings.cage, args.cage.network_chosen());
    super::cage::announce(&settings.cage);
    super::cage::open_to_harnesses(&settings.cage, data_dir, &settings.workspace_root)?;
    if let Some(bin) = args.bin {
        settings.binaries.insert(args.harness.clone(), bin);
    }
    let format = args.format;
    let harness = args.harness;
    runtime.block_on(async move {
        settings.projects = crate::repo::open_all(&projects, settings.cage.owner())
            .await
            .map_err(|e| CliError::invalid(e.to_string()))?;
        let bridge = Bridge::start(Arc::new(store), adapters, templates, settings)
            .await
            .map_err(|e| CliError::failure(format!("cannot start the MCP server: {e}")))?;
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("cancelling the run…");
                on_signal.cancel();
            }
        });
        let (tx, rx) = mpsc::channel::<AgentRunResult>(256);
        let printer = tokio::spawn(print_results(rx, format));
        let asking = crate::run::Asking {
            ctx: &ctx,
            harness: &harness,
            turns: &crate::run::NoTurns,
            fixed: &[],
        };
        // A command (`/new`, `/usage`, …) is answered, not run.
        if let Some(answer) = bridge.answer_command(&asking).await {
            for result in crate::run::answer_results(&ctx.run_id, &answer) {
                let _ = tx.send(result).await;
            }
            drop(tx);
            let _ = printer.await;
            bridge.shutdown().await;
            return Ok(if answer.refused {
                exit::FAILURE
            } else {
                exit::OK
            });
        }
        let summary = bridge
            .run(&ctx, &harness, &RunOptions::default(), tx, cancel.clone())
            .await;
        let _ = printer.await;
        bridge.shutdown().await;
        Ok(match (&summary.outcome, &summary.failure_code) {
            (ResultType::RunCompleted, _) => exit::OK,
            (_, Some(FailureCode::Cancelled)) => CANCELLED,
            (_, Some(FailureCode::InvalidArgument)) => exit::INVALID,
            _ => exit::FAILURE,
        })
    })
}

/// The binding keys the flags set: the extra MCP servers (for a turn
/// given as text), `--model`, `--timeout`, `--project`.
fn flag_config(args: &RunArgs, servers: &crate::projection::McpCatalog) -> JsonMap {
    let mut config = JsonMap::new();
    if args.context.is_none() && !servers.is_empty() {
        config.insert(
            "mcp_servers".into(),
            Value::from(servers.keys().cloned().collect::<Vec<_>>()),
        );
    }
    if let Some(model) = &args.model {
        config.insert("model".into(), Value::String(model.clone()));
    }
    if let Some(timeout) = args.timeout {
        config.insert("timeout_seconds".into(), Value::from(timeout));
    }
    if let Some(project) = &args.project {
        config.insert("project".into(), Value::String(project.clone()));
    }
    config
}

/// The operator's projects from a YAML file, as bridge.yaml's `projects`;
/// none without a file. A bad file is reported (file, line, reason).
fn load_projects(file: Option<&Path>) -> Result<crate::repo::Projects, CliError> {
    let Some(file) = file else {
        return Ok(Default::default());
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::failure(format!("cannot read {}: {e}", file.display())))?;
    serde_yaml::from_str(&text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(":{}", l.line()))
            .unwrap_or_default();
        CliError::invalid(format!("{}{at}: {e}", file.display()))
    })
}

/// Print each result as it comes, in the chosen format.
async fn print_results(mut rx: mpsc::Receiver<AgentRunResult>, format: Format) {
    let mut pretty = Pretty::default();
    while let Some(result) = rx.recv().await {
        match format {
            Format::Ndjson => match serde_json::to_string(&result) {
                Ok(json) => line(&json),
                Err(e) => tracing::warn!("cannot render a result: {e}"),
            },
            Format::Pretty => pretty.show(&result),
        }
    }
}

/// ` · session 1a2b3c4d resumed` (or `new`), from a terminal's session
/// facts; empty without a session.
fn session_line(session: &Value) -> String {
    let Some(id) = session["session_id"].as_str() else {
        return String::new();
    };
    let short: String = id.chars().take(8).collect();
    let how = if session["resumed"] == true {
        "resumed"
    } else {
        "new"
    };
    format!(" · session {short} {how}")
}

/// ` · 1200 in / 300 out tokens · $0.0123`, from what the harness
/// reported; empty when it reported nothing.
fn usage_line(usage: Option<&crate::protocol::TokenUsage>) -> String {
    let Some(usage) = usage else {
        return String::new();
    };
    let mut line = format!(
        " · {} in / {} out tokens",
        usage.prompt_tokens.unwrap_or(0),
        usage.completion_tokens.unwrap_or(0)
    );
    if let Some(cost) = usage.extra.get("total_cost_usd").and_then(Value::as_f64) {
        line.push_str(&format!(" · ${cost:.4}"));
    }
    line
}

/// Renders a result stream for a person: text as it streams, one line per
/// tool call, artifact or state change, and the final status.
#[derive(Default)]
struct Pretty {
    /// Text streamed by deltas since the last completed message.
    streamed: String,
}

impl Pretty {
    fn show(&mut self, result: &AgentRunResult) {
        let data = &result.data;
        let text = |v: &Value| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        };
        let mut out = std::io::stdout().lock();
        let _ = match result.kind {
            ResultType::MessageDelta => {
                let chunk = text(&data["chunk"]["content"]);
                self.streamed.push_str(&chunk);
                write!(out, "{chunk}")
            }
            ResultType::MessageCompleted => {
                let content = serde_json::from_value::<crate::protocol::MessageContent>(
                    data["message"]["content"].clone(),
                )
                .map(|c| c.to_text())
                .unwrap_or_default();
                let streamed = std::mem::take(&mut self.streamed);
                if streamed.is_empty() {
                    writeln!(out, "{content}")
                } else if content.starts_with(&streamed) {
                    writeln!(out, "{}", &content[streamed.len()..])
                } else {
                    writeln!(out)
                }
            }
            ResultType::ToolCallStarted => {
                let params = data
                    .get("parameters")
                    .map(Value::to_string)
                    .unwrap_or_default();
                let params: String = params.chars().take(120).collect();
                writeln!(out, "→ {}({params})", text(&data["tool_name"]))
            }
            ResultType::ToolCallCompleted => match data.get("error").filter(|e| !e.is_null()) {
                Some(e) => writeln!(out, "  ✗ {}", text(e)),
                None => writeln!(out, "  ✓ {}", text(&data["tool_name"])),
            },
            ResultType::ArtifactCreated => writeln!(
                out,
                "📎 {} ({} bytes)",
                text(&data["name"]),
                data["size_bytes"].as_u64().unwrap_or(0)
            ),
            ResultType::StateUpdated => {
                writeln!(out, "· {} = {}", text(&data["key"]), data["value"])
            }
            // A question or an approval for the person: what a surface
            // without cards shows, answer syntax included. The answer is
            // the next turn's text.
            ResultType::ActionRequested
                if data["action"] == crate::protocol::INTERACTION_REQUESTED =>
            {
                writeln!(out, "\n❓ {}\n", text(&data["payload"]["fallback_text"]))
            }
            ResultType::RunCompleted => {
                let session = &data["message"]["metadata"]["session"];
                if let Some(n) = session["notice"].as_str() {
                    let _ = writeln!(out, "ℹ {n}");
                }
                writeln!(
                    out,
                    "✓ completed ({}){}{}",
                    text(&data["finish_reason"]),
                    session_line(session),
                    usage_line(result.usage.as_ref())
                )
            }
            ResultType::RunFailed => {
                writeln!(
                    out,
                    "✗ failed [{}]: {}",
                    text(&data["code"]),
                    text(&data["error"])
                )
            }
            _ => Ok(()),
        };
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_says_the_session_and_what_the_turn_used() {
        let session = serde_json::json!({"session_id": "0b5d0c6e-8c1a", "resumed": true});
        assert_eq!(session_line(&session), " · session 0b5d0c6e resumed");
        assert_eq!(session_line(&serde_json::json!({})), "");
        let usage: crate::protocol::TokenUsage = serde_json::from_value(
            serde_json::json!({"prompt_tokens": 1200, "completion_tokens": 300, "total_cost_usd": 0.0123}),
        )
        .unwrap();
        assert_eq!(
            usage_line(Some(&usage)),
            " · 1200 in / 300 out tokens · $0.0123"
        );
        assert_eq!(usage_line(None), "");
    }
}
