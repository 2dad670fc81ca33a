//! Reading an `AgentRunContext` from a file or stdin, for any command.

use std::io::Read;
use std::path::Path;

use super::error::CliError;
use crate::protocol::{AgentRunContext, Problem, Severity, validate_context};

/// Read a file, or standard input for `-`.
pub fn read_text(file: &Path) -> std::io::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(file)
    }
}

/// Parse and validate text as a context: every problem, with its path.
pub fn check(text: &str) -> (Option<AgentRunContext>, Vec<Problem>) {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(doc) => validate_context(&doc),
        Err(e) => (
            None,
            vec![Problem {
                severity: Severity::Error,
                path: "$".into(),
                message: format!("not JSON: {e}"),
            }],
        ),
    }
}

/// Read a valid context, or say why not (every error, one a line).
pub fn read_context(file: &Path) -> Result<AgentRunContext, CliError> {
    let name = file.display();
    let text =
        read_text(file).map_err(|e| CliError::failure(format!("cannot read {name}: {e}")))?;
    let (ctx, problems) = check(&text);
    let errors: Vec<String> = problems
        .iter()
        .filter(|p| ctx.is_none() || p.severity == Severity::Error)
        .map(|problem| format!("{name}: {problem}"))
        .collect();
    match ctx {
        Some(ctx) => {
            // A valid context's errors are the recoverable kind: said, and
            // the run goes on.
            for line in &errors {
                eprintln!("{line}");
            }
            Ok(ctx)
        }
        None => Err(CliError::invalid(errors.join("\n"))),
    }
}
