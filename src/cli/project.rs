//! `harness-bridge project`: write a run's workspace without launching
//! anything, and show what the harness would get.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::error::{CliError, Outcome};
use super::exit;
use super::input::read_context;
use crate::harness;
use crate::host::{GrantPolicy, Grants};
use crate::mcp::tool_names;
use crate::projection::{Binding, ProjectRequest, Projection, WriteOutcome, project};

/// Placeholder endpoint for a preview; a real run passes its own server's.
const PREVIEW_MCP_URL: &str = "http://127.0.0.1:8765/mcp";

#[derive(Debug, Args)]
pub struct ProjectArgs {
    /// AgentRunContext JSON file, or `-` for standard input.
    #[arg(long, value_name = "FILE")]
    context: PathBuf,
    /// Harness to project for (see `adapters list`).
    #[arg(long, value_name = "NAME")]
    harness: String,
    /// Folder of adapter specs that add to or replace the built-in ones.
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    adapters: Option<PathBuf>,
    /// Folder under which conversation workspaces live [default: DATA_DIR/workspaces].
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Folder of template overrides (LANGBOT_CONTEXT.md, instructions.md, turn-prompt.md).
    #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
    templates: Option<PathBuf>,
    /// The bridge's MCP endpoint to write into the harness's config.
    #[arg(long, value_name = "URL", default_value = PREVIEW_MCP_URL)]
    mcp_url: String,
    /// Extra MCP servers the operator allows (YAML: name → {command, args,
    /// env} or {url, headers}); the context's `config.mcp_servers` picks
    /// among them by name.
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    mcp_servers: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

fn outcome_word(outcome: WriteOutcome) -> &'static str {
    match outcome {
        WriteOutcome::Written => "written",
        WriteOutcome::Unchanged => "unchanged",
    }
}

fn print(projection: &Projection, json: bool) {
    let report = &projection.report;
    if json {
        let doc = serde_json::json!({
            "workspace": projection.workspace,
            "files": report.files.iter().map(|(p, o)| serde_json::json!({"path": p, "outcome": outcome_word(*o)})).collect::<Vec<_>>(),
            "removed": report.removed,
            "warnings": report.warnings,
            "mcp_overrides": projection.mcp.overrides,
            "mcp_env": projection.mcp.child_env.keys().collect::<Vec<_>>(),
            "input_files": projection.input_files,
            "turn_prompt": projection.turn_prompt,
        });
        out!("{doc}");
        return;
    }
    out!("workspace: {}", projection.workspace.display());
    for (path, outcome) in &report.files {
        out!("  {:<10} {path}", outcome_word(*outcome));
    }
    for path in &report.removed {
        out!("  {:<10} {path}", "removed");
    }
    for warning in &report.warnings {
        out!("warning: {warning}");
    }
    if !projection.mcp.overrides.is_empty() {
        out!("config overrides (passed as -c):");
        for o in &projection.mcp.overrides {
            out!("  {o}");
        }
    }
    if !projection.mcp.child_env.is_empty() {
        let names: Vec<&String> = projection.mcp.child_env.keys().collect();
        out!("child environment (values not shown): {names:?}");
    }
}

pub fn run(args: ProjectArgs, data_dir: &Path) -> Outcome {
    let adapters = super::load_adapters(args.adapters.as_deref())?;
    let info = adapters.require(&args.harness).map_err(CliError::usage)?;
    let ctx = read_context(&args.context)?;
    let templates = super::load_templates(args.templates.as_deref())?;
    let servers = super::load_mcp_servers(args.mcp_servers.as_deref())?;
    let (runtime, host) = super::open_store(data_dir)?;
    let root = args.root.unwrap_or_else(|| data_dir.join("workspaces"));
    let grants = Grants::new(Arc::new(host));
    let runner_id = harness::runner_id(&info.name);
    let open = grants
        .open_run(
            &ctx,
            &runner_id,
            &harness::requested_permissions(),
            &GrantPolicy::default(),
        )
        .map_err(CliError::invalid)?;
    let granted = grants.granted(open.grant.clone());
    let binding = Binding::from_config(&ctx.config).map_err(CliError::invalid)?;
    let asking = binding.asking(ctx.conversation_id().is_some());
    let tools = tool_names(&open.grant.apis, asking);
    let target = info.target();
    // The operator's files the home carries are found where the harness
    // would look: its whitelisted environment, as a run builds it.
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let env = harness::child_env(
        &info.env,
        &[],
        &Default::default(),
        &Default::default(),
        &vars,
    );
    let request = ProjectRequest {
        ctx: &ctx,
        binding: &binding,
        target: &target,
        runner: &info.name,
        shared: None,
        root: &root,
        tools: &tools,
        project: None,
        mcp_url: &args.mcp_url,
        mcp_servers: &servers,
        host: Some(&granted),
        env: &env,
        // Written for a person to look at: the bridge's own; a caged
        // turn in it later gives it to its harness.
        owner: None,
    };
    let result = runtime.block_on(project(&request, &templates));
    grants.close_run(&ctx.run_id);
    print(&result.map_err(CliError::failure)?, args.json);
    Ok(exit::OK)
}
