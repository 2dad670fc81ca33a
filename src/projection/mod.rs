//! Filesystem context projection: one `AgentRunContext` plus its binding
//! becomes the files a harness reads, in the harness's own formats, inside
//! one stable per-conversation workspace.
//!
//! Everything downstream renders from one *projected* object: the context
//! parts in scope, with secrets redacted. A part out of scope is therefore
//! absent from every file and prompt at once. All writes go through a
//! [`ConfinedDir`], so nothing is written or followed outside the workspace.

mod binding;
mod carried;
mod confined;
mod error;
mod home;
mod inputs;
pub mod mcp_config;
mod names;
mod render;
mod scopes;
mod skills;
mod workspace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub use binding::{
    Approvals, Binding, BindingConfig, EgressChoice, NetworkChoice, Questions, SkillSpec,
    check_keys, unknown_key,
};
pub use confined::{ConfinedDir, Entry, HardLinked, HeadRead, WriteOutcome, read_beneath};
pub use error::ProjectionError;
pub use home::{
    Carry, Home, ProjectedHome, check_source as check_home_source, is_var_name, sign_ins,
};
pub use inputs::{DEFAULT_MAX_INPUT_BYTES, InputFile, input_file_id};
pub use mcp_config::{
    BRIDGE_SERVER, ExtraServer, McpCatalog, McpFile, McpFormat, McpServer, RenderedMcp, TOKEN_ENV,
    Transport, URL_ENV, check_catalog as check_mcp_catalog, fill_env as fill_mcp_env,
    render as render_mcp,
};
pub use names::{check_skill_name, relative_components, safe_component};
pub use render::{DataMessage, ProjectNote, Templates};
pub use scopes::{REDACTED, Scope, is_secret_key, is_secret_value, redact, redact_text};
pub use workspace::{components as workspace_components, paths, shared as shared_workspace};

use crate::host::GrantedHost;
use crate::protocol::{AgentRunContext, JsonMap};

/// Schema id of `agent-context.json`.
pub const CONTEXT_SCHEMA: &str = "langbot.agent_runner.external_harness_context.v1";
/// Default number of earlier runs kept under `.langbot/runs/`.
pub const DEFAULT_KEEP_RUNS: usize = 5;

/// Where a harness wants things (from its adapter spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Harness name, e.g. `claude-code`.
    pub harness: String,
    /// Skills folder relative to the workspace, e.g. `[".claude", "skills"]`.
    pub skills_dir: Vec<String>,
    /// MCP config format.
    pub mcp_format: McpFormat,
    /// How the harness names an MCP tool: `{server}` and `{tool}` are
    /// replaced, e.g. `mcp__{server}__{tool}`.
    pub tool_name: String,
    /// A file the stable instructions are also written to, for a harness
    /// that reads them from a file (e.g. `[".langbot", "home", ".qwen",
    /// "QWEN.md"]`, its user-level file in the conversation's home).
    pub instructions_file: Option<Vec<String>>,
    /// A home folder of the conversation's own (see [`Home`]): its
    /// sessions, config and caches stay in the workspace.
    pub home: Option<Home>,
}

/// What to project, and for whom.
pub struct ProjectRequest<'a> {
    /// The run's context.
    pub ctx: &'a AgentRunContext,
    /// Its binding, as the caller parsed it (once, for the whole turn).
    pub binding: &'a Binding<'a>,
    /// The harness's layout.
    pub target: &'a Target,
    /// Runner name, part of the workspace path.
    pub runner: &'a str,
    /// The path below `root` of a workspace every conversation of a shared
    /// project works in, instead of the conversation's own.
    pub shared: Option<&'a [String]>,
    /// Folder under which workspaces live.
    pub root: &'a Path,
    /// Tools the run's grant allows on the bridge's MCP server.
    pub tools: &'a [&'a str],
    /// The project the workspace is a worktree of, for the harness's
    /// instructions.
    pub project: Option<&'a ProjectNote>,
    /// URL of the bridge's MCP server for this run.
    pub mcp_url: &'a str,
    /// The extra MCP servers the operator configured; the binding picks
    /// among them by name.
    pub mcp_servers: &'a McpCatalog,
    /// The host through the run's grant, to copy input artifacts; `None`
    /// leaves artifact-backed inputs listed only.
    pub host: Option<&'a GrantedHost>,
    /// The environment the harness would have without a home of its own
    /// (the operator's `HOME`, `CODEX_HOME`…): where the operator's files
    /// carried into the home are found.
    pub env: &'a BTreeMap<String, String>,
    /// Who the workspace is given to: a root bridge's caged harness, as
    /// it is outside its namespace ([`crate::owner`]); `None`: the bridge's.
    pub owner: Option<&'static crate::owner::Owner>,
}

/// Files written, kept and removed, and warnings, as the projection goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Workspace-relative paths and what happened to each.
    pub files: Vec<(String, WriteOutcome)>,
    /// Workspace-relative paths removed (skills no longer authorized).
    pub removed: Vec<String>,
    /// Things skipped, with the reason (a bad skill, an unreadable input).
    pub warnings: Vec<String>,
}

impl Report {
    fn file(&mut self, path: String, outcome: WriteOutcome) {
        self.files.push((path, outcome));
    }
    fn removed(&mut self, path: String) {
        self.removed.push(path);
    }
    fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
        self.warnings.push(message);
    }
}

/// A finished projection: where, what, and what to hand the harness.
#[derive(Debug, Clone)]
pub struct Projection {
    /// The workspace folder (the harness's working directory).
    pub workspace: PathBuf,
    /// The same folder, held open: what the run does in it later (the
    /// outbox) is done beneath this handle, not by path.
    pub dir: ConfinedDir,
    /// How many earlier runs' files the workspace keeps.
    pub keep_runs: usize,
    /// What happened on disk.
    pub report: Report,
    /// Stable instructions for the harness's system-prompt channel.
    pub instructions: String,
    /// This turn's prompt.
    pub turn_prompt: String,
    /// MCP configuration in the harness's format.
    pub mcp: RenderedMcp,
    /// The conversation's own harness home: the variables that point the
    /// harness there and the operator's files linked in.
    pub home: Option<ProjectedHome>,
    /// The input files as described to the harness.
    pub input_files: Vec<InputFile>,
    /// The turn's event as the harness may see it (scoped, redacted): what
    /// the `get_current_event` tool answers.
    pub current_event: Value,
}

/// Archive the files of the run that last wrote the workspace `dir` now,
/// once its person has the answer: the next turn's projection then finds
/// the archive made and only checks it, so the files an archive makes
/// (the costliest step of a projection where free inodes are slow to
/// find) are made off the path between a message and its harness. A run
/// that ends before this is archived by the next projection, as before.
pub fn archive_ahead(dir: &ConfinedDir, keep_runs: usize) -> Result<(), ProjectionError> {
    archive_previous_run(dir, None, keep_runs, &mut Report::default())
}

fn json_bytes(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Copy the files of the run that last wrote this workspace into
/// `.langbot/runs/<run>/`, before a different run replaces them, and keep
/// only the newest `keep` such folders. The archive is whole before any
/// file of the workspace changes, so a projection that fails midway is
/// archived again, rightly, by the next one.
///
/// Once `keep` folders are kept, the oldest becomes the new one and its
/// files are written over in place: a turn's archive then makes and
/// removes no file. (A saturated bridge on ext4 spent half its time
/// finding free inodes among the many a copy-and-prune archive freed
/// every turn.)
///
/// `run_id` is the run about to write the workspace (a projection of the
/// same run again archives nothing); `None` archives whatever run wrote
/// it last, as a run's end does ahead of the next ([`archive_ahead`]).
fn archive_previous_run(
    ws: &ConfinedDir,
    run_id: Option<&str>,
    keep: usize,
    report: &mut Report,
) -> Result<(), ProjectionError> {
    let Some(previous) = ws.read(&paths::AGENT_CONTEXT)? else {
        return Ok(());
    };
    let previous_run = serde_json::from_slice::<Value>(&previous)
        .ok()
        .and_then(|doc| {
            doc.get("run_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    let Some(previous_run) = previous_run.filter(|r| Some(r.as_str()) != run_id) else {
        return Ok(());
    };
    if keep > 0 {
        let folder = safe_component(&previous_run);
        let runs = ws.ensure_dir(&paths::RUNS)?;
        let mut kept = ws.list(&paths::RUNS)?;
        if kept.len() >= keep && !kept.iter().any(|run| run.name == folder) {
            kept.sort_by(|a, b| (a.modified, &a.name).cmp(&(b.modified, &b.name)));
            take_over(&runs, &kept[0].name, &folder)?;
            report.removed(format!("{}/{}", paths::RUNS.join("/"), kept[0].name));
        }
        let archive = runs.ensure_dir(&[folder.as_str()])?;
        // Copied, not linked: a harness may write a live file in place,
        // which would change a linked archive too.
        for file in paths::ARCHIVED {
            match ws.read(&file)? {
                Some(bytes) => drop(archive.overwrite(file[1], &bytes)?),
                None => archive.remove(&[file[1]])?,
            }
        }
        archive.touch()?;
    }
    // Oldest first by modification time; remove beyond `keep`.
    let mut runs = ws.list(&paths::RUNS)?;
    runs.sort_by(|a, b| (a.modified, &a.name).cmp(&(b.modified, &b.name)));
    let excess = runs.len().saturating_sub(keep);
    for run in runs.into_iter().take(excess) {
        ws.remove(&[paths::RUNS[0], paths::RUNS[1], run.name.as_str()])?;
        report.removed(format!("{}/{}", paths::RUNS.join("/"), run.name));
    }
    Ok(())
}

/// Make the archive folder `oldest` in `runs` the folder `folder`: only a
/// real folder is taken over, holding only an archive's plain files
/// (anything else there is removed first); anything else is removed.
fn take_over(runs: &ConfinedDir, oldest: &str, folder: &str) -> Result<(), ProjectionError> {
    let Ok(old) = runs.ensure_dir(&[oldest]) else {
        return runs.remove(&[oldest]);
    };
    for entry in old.list(&[])? {
        let name = entry.name.as_str();
        if !paths::ARCHIVED.iter().any(|file| file[1] == name) || !old.holds_file(name)? {
            old.remove(&[name])?;
        }
    }
    runs.rename_entry(oldest, folder)
}

/// The harness's home in the workspace, where its family keeps one: the
/// operator's files it carries (a root bridge's caged harness reads
/// copies of those only its owner may).
fn project_home(
    ws: &ConfinedDir,
    request: &ProjectRequest<'_>,
    report: &mut Report,
) -> Result<Option<home::ProjectedHome>, ProjectionError> {
    let Some(home) = &request.target.home else {
        return Ok(None);
    };
    let copies = request
        .owner
        .map(|owner| (request.root.join(carried::COPIES), owner));
    let copies = copies.as_ref().map(|(dir, owner)| (dir.as_path(), *owner));
    home::project_home(ws, home, request.env, copies, report).map(Some)
}

/// What `get_current_event` answers: the projected trigger, event, actor,
/// subject and input, and the input files as copied.
fn current_event(parts: &JsonMap, input_files: &[InputFile]) -> Value {
    let mut event: JsonMap = ["trigger", "event", "actor", "subject", "input"]
        .into_iter()
        .filter_map(|part| Some((part.to_string(), parts.get(part)?.clone())))
        .collect();
    if !input_files.is_empty() {
        event.insert("input_files".into(), json!(input_files));
    }
    Value::Object(event)
}

/// Project a run's context into its conversation's workspace.
pub async fn project(
    request: &ProjectRequest<'_>,
    templates: &Templates,
) -> Result<Projection, ProjectionError> {
    let ctx = request.ctx;
    let target = request.target;
    let binding = request.binding;
    let scopes = binding.scopes();
    let parts = scopes::project_parts(ctx, &scopes, &binding.secret_keys);
    let has = |scope: Scope| scopes.contains(&scope);

    let components = match request.shared {
        Some(shared) => shared.to_vec(),
        None => workspace::components(ctx, request.runner),
    };
    let component_refs: Vec<&str> = components.iter().map(String::as_str).collect();
    let ws = ConfinedDir::create(request.root, &component_refs, request.owner)?;
    let working_directory = ws.path().to_string_lossy().into_owned();
    ws.ensure_dir(&[paths::DIR])?;
    let mut report = Report::default();
    let keep_runs = binding.keep_runs.unwrap_or(DEFAULT_KEEP_RUNS);
    archive_previous_run(&ws, Some(&ctx.run_id), keep_runs, &mut report)?;

    let input_files = if has(Scope::Input) {
        let max = binding.max_input_bytes.unwrap_or(DEFAULT_MAX_INPUT_BYTES);
        inputs::project(
            &ws,
            &ctx.input.attachments,
            &ctx.run_id,
            request.host,
            max,
            &mut report,
        )
        .await?
    } else {
        Vec::new()
    };

    let skills_dir: Vec<&str> = target.skills_dir.iter().map(String::as_str).collect();
    let skills = skills::project(
        &ws,
        &skills_dir,
        &binding.skills,
        &ctx.resources.skills,
        &mut report,
    )?;

    let mut servers = vec![McpServer::bridge(request.mcp_url)];
    servers.extend(mcp_config::pick(request.mcp_servers, &binding.mcp_servers)?);
    let mcp = render_mcp(&servers, target.mcp_format);
    if let Some(file) = &mcp.file {
        ws.ensure_dir(&file.path[..file.path.len().saturating_sub(1)])?;
        let outcome = ws.write(file.path, &file.bytes)?;
        report.file(file.path.join("/"), outcome);
    }
    let home = project_home(&ws, request, &mut report)?;

    let [context_md, instructions, turn_prompt] = render_texts(
        request,
        binding,
        &parts,
        &working_directory,
        &skills,
        &input_files,
        templates,
    )?;
    write_texts(
        &ws,
        request,
        &parts,
        &working_directory,
        [&context_md, &instructions, &turn_prompt],
        &mut report,
    )?;

    Ok(Projection {
        current_event: current_event(&parts, &input_files),
        workspace: ws.path().to_path_buf(),
        dir: ws,
        keep_runs,
        report,
        instructions,
        turn_prompt,
        mcp,
        home,
        input_files,
    })
}

/// The three texts a harness reads, from the templates: the context
/// document, the stable instructions, and the turn's prompt (trimmed).
fn render_texts(
    request: &ProjectRequest<'_>,
    binding: &Binding<'_>,
    parts: &JsonMap,
    working_directory: &str,
    skills: &[String],
    input_files: &[InputFile],
    templates: &Templates,
) -> Result<[String; 3], ProjectionError> {
    let ctx = request.ctx;
    let target = request.target;
    let scopes = binding.scopes();
    let has = |scope: Scope| scopes.contains(&scope);
    let tools: Vec<String> = request
        .tools
        .iter()
        .map(|tool| {
            target
                .tool_name
                .replace("{server}", BRIDGE_SERVER)
                .replace("{tool}", tool)
        })
        .collect();
    let data = render::data_messages(parts.get("state"), &binding.state_schemas);
    let event_time = ctx.event.event_time.or(ctx.trigger.timestamp);
    let mut json_blocks = BTreeMap::new();
    if let Some(resources) = parts.get("resources") {
        json_blocks.insert(
            "resources",
            serde_json::to_string_pretty(resources).unwrap_or_default(),
        );
    }
    let vars = render::RenderVars {
        run_id: &ctx.run_id,
        harness: &target.harness,
        working_directory,
        prompt: binding.prompt.as_deref().filter(|p| !p.trim().is_empty()),
        tools: &tools,
        project: request.project,
        skills,
        input_text: has(Scope::Input).then(|| ctx.input.to_text()),
        input_files,
        current_time: has(Scope::Event)
            .then_some(event_time)
            .flatten()
            .map(render::format_time),
        data: &data,
        json: json_blocks,
        parts,
    };
    let [context_md, instructions, turn_prompt] = templates.render_all(
        [
            render::CONTEXT_MD,
            render::INSTRUCTIONS,
            render::TURN_PROMPT,
        ],
        &vars,
    )?;
    Ok([context_md, instructions, turn_prompt.trim_end().to_string()])
}

/// Write `agent-context.json`, the three texts, and the instructions where
/// the harness reads its own.
fn write_texts(
    ws: &ConfinedDir,
    request: &ProjectRequest<'_>,
    parts: &JsonMap,
    working_directory: &str,
    [context_md, instructions, turn_prompt]: [&str; 3],
    report: &mut Report,
) -> Result<(), ProjectionError> {
    let mut doc = json!({
        "schema": CONTEXT_SCHEMA,
        "run_id": request.ctx.run_id,
        "working_directory": working_directory,
    });
    if let Value::Object(map) = &mut doc {
        map.extend(parts.clone());
    }
    if let Some(file) = &request.target.instructions_file {
        let file: Vec<&str> = file.iter().map(String::as_str).collect();
        let outcome = ws.write(&file, instructions.as_bytes())?;
        report.file(file.join("/"), outcome);
    }
    for (path, bytes) in [
        (paths::AGENT_CONTEXT, json_bytes(&doc)),
        (paths::CONTEXT_MD, context_md.as_bytes().to_vec()),
        (paths::INSTRUCTIONS, instructions.as_bytes().to_vec()),
        (paths::TURN_PROMPT, format!("{turn_prompt}\n").into_bytes()),
    ] {
        // Written in place: a turn changes them all, and replacing them
        // would make and free four inodes a turn.
        let outcome = ws.rewrite(&path, &bytes)?;
        report.file(path.join("/"), outcome);
    }
    Ok(())
}
