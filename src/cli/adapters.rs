//! `harness-bridge adapters ...`: the harness specs in force.

use std::path::PathBuf;

use clap::Subcommand;

use super::error::{CliError, Outcome};
use super::exit;
use crate::harness::{AdapterSpec, Adapters};

#[derive(Debug, Subcommand)]
pub enum AdaptersCommand {
    /// List the harnesses this bridge can run: name, label, family (what
    /// it shares with CLIs of its kind) and where each spec comes from.
    List {
        /// Folder of operator specs (*.yaml) that replace or add harnesses.
        #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
        adapters: Option<PathBuf>,
    },
    /// Show one harness's spec as loaded (YAML).
    Show {
        /// Harness name (claude-code, codex, ...).
        name: String,
        /// Folder of operator specs (*.yaml) that replace or add harnesses.
        #[arg(long, value_parser = super::absolute_path, value_name = "DIR")]
        adapters: Option<PathBuf>,
    },
}

fn load(dir: Option<&PathBuf>) -> Result<Adapters, CliError> {
    match dir {
        None => Ok(Adapters::builtin().clone()),
        Some(dir) => Adapters::load(dir).map_err(CliError::invalid),
    }
}

fn show(spec: &AdapterSpec, source: &str) -> String {
    let argv = |items: &[crate::harness::ArgItem]| -> String {
        items
            .iter()
            .map(|i| match i {
                crate::harness::ArgItem::One(a) => a.clone(),
                crate::harness::ArgItem::Group(g) => format!("[{}]", g.join(" ")),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let env = format!(
        "env passed: {}\nenv set: {}",
        spec.env.pass.join(", "),
        spec.env
            .set
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let head = format!(
        "name: {}\nlabel: {}\nsource: {source}\nbinary: {}\nfamily: {} ({})",
        spec.name, spec.label, spec.binary, spec.family.name, spec.family.about
    );
    let instructions = spec
        .instructions_file
        .as_deref()
        .map(|f| format!("\ninstructions file: {f}"))
        .unwrap_or_default();
    if spec.live_only() {
        let acp = spec.acp.clone().unwrap_or_default();
        let command = spec
            .live
            .as_ref()
            .and_then(|l| l.argv.as_deref())
            .map(&argv)
            .unwrap_or_default();
        return format!(
            "{head}\nprotocol: Agent Client Protocol over stdio, one process per conversation \
             (`run`: one per turn)\ncommand: {} {command}\npermissions: {:?} (the bridge's own \
             tools always allowed; `approvals: chat` asks the person)\nmode: {}\nresume: {:?}\n{env}\nskills: \
             {}{instructions}\nmcp: {}\ninstall: {}",
            spec.binary,
            acp.permissions,
            acp.mode.as_deref().unwrap_or("the agent's own"),
            acp.resume,
            spec.skills_dir,
            match spec.target().mcp_format {
                format if format == crate::harness::families::acp::MCP =>
                    "in session/new".to_string(),
                own => format!("{own} (a file of its own)"),
            },
            spec.install_hint,
        );
    }
    format!(
        "{head}\nnew turn: {} {}\nresumed turn: {} {}\nstdin: {:?}\n{env}\nskills: {}{instructions}\nmcp: {:?}\ndecoder: {}\nsession not found: {:?}\nsession store: {:?}\ninstall: {}",
        spec.binary,
        argv(&spec.argv.new),
        spec.binary,
        argv(&spec.argv.resume),
        spec.stdin,
        spec.skills_dir,
        spec.target().mcp_format,
        spec.decoder.map_or("none", |d| d.name()),
        spec.session_not_found,
        spec.session_store,
        spec.install_hint,
    ) + &live(spec, &argv)
}

/// The live mode's line, when the spec has one.
fn live(
    spec: &crate::harness::AdapterSpec,
    argv: &dyn Fn(&[crate::harness::ArgItem]) -> String,
) -> String {
    let Some(live) = &spec.live else {
        return "\nlive: no (one process per turn)".into();
    };
    let how = match &live.argv {
        Some(own) => format!("{} {}", spec.binary, argv(own)),
        None => format!("{} before the turn's argv", argv(&live.args)),
    };
    format!(
        "\nlive: driver {}, {how}{}",
        live.driver,
        live.permission_prompt_tool
            .as_deref()
            .map(|t| format!(", permission prompts: {t}"))
            .unwrap_or_default()
    )
}

pub fn run(cmd: AdaptersCommand) -> Outcome {
    match cmd {
        AdaptersCommand::List { adapters } => {
            let loaded = load(adapters.as_ref())?;
            for spec in loaded.all() {
                let source = loaded
                    .sources
                    .get(&spec.name)
                    .map_or("built-in", String::as_str);
                out!(
                    "{:<14} {:<14} {:<9} {source}",
                    spec.name,
                    spec.label,
                    spec.family.name
                );
            }
            Ok(exit::OK)
        }
        AdaptersCommand::Show { name, adapters } => {
            let loaded = load(adapters.as_ref())?;
            let spec = loaded.require(&name).map_err(CliError::usage)?;
            let source = loaded
                .sources
                .get(&spec.name)
                .map_or("built-in", String::as_str);
            out!("{}", show(spec, source));
            Ok(exit::OK)
        }
    }
}
