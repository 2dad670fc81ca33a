//! Reading an `AgentRunContext` from a file or stdin, for any command.

use std::io::Read;
use std::path::Path;

use super::exit;
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

/// Read a valid context, or print why not and return the exit code.
pub fn read_context(file: &Path) -> Result<AgentRunContext, u8> {
    let name = file.display();
    let text = read_text(file).map_err(|e| {
        eprintln!("error: cannot read {name}: {e}");
        exit::FAILURE
    })?;
    let (ctx, problems) = check(&text);
    for problem in problems
        .iter()
        .filter(|p| ctx.is_none() || p.severity == Severity::Error)
    {
        eprintln!("{name}: {problem}");
    }
    ctx.ok_or(exit::INVALID)
}
