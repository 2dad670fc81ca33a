//! `harness-bridge context ...`

use std::path::PathBuf;

use clap::Subcommand;

use super::error::{CliError, Outcome};
use super::exit;
use super::input::{check, read_text};
use crate::protocol::Severity;

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Parse an AgentRunContext and list its problems with their JSON paths.
    ///
    /// Exits 0 when the context is usable (warnings may be printed), 1 when it
    /// has errors. `-` reads standard input.
    Validate {
        /// Context JSON file, or `-` for standard input.
        file: PathBuf,
        /// Print the findings as JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: ContextCommand) -> Outcome {
    let ContextCommand::Validate { file, json } = cmd;
    let name = file.display().to_string();
    let text =
        read_text(&file).map_err(|e| CliError::failure(format!("cannot read {name}: {e}")))?;
    let (ctx, problems) = check(&text);
    let valid = ctx.is_some();
    if json {
        let report = serde_json::json!({ "valid": valid, "problems": problems });
        out!("{report}");
    } else {
        for problem in &problems {
            out!("{name}: {problem}");
        }
        if let Some(ctx) = ctx {
            let warnings = problems
                .iter()
                .filter(|p| p.severity == Severity::Warning)
                .count();
            out!(
                "{name}: valid AgentRunContext (run {}, {} warning(s))",
                ctx.run_id,
                warnings
            );
        }
    }
    Ok(if valid { exit::OK } else { exit::INVALID })
}
