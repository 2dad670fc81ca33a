//! The CLI's one error edge: a command that cannot do its work returns a
//! [`CliError`], and `main` prints it once (`error: …`) and exits with its
//! code. A command that did its work returns its exit code, even when what
//! it reports is a failure (a turn that failed, a context with problems):
//! that is output, printed by the command.

use super::exit;

/// Why a command could not do its work, and the exit code that says so.
#[derive(Debug)]
pub struct CliError {
    code: u8,
    message: String,
}

/// What every command returns: its exit code, or why it could not run.
pub type Outcome = Result<u8, CliError>;

impl CliError {
    /// The command could not do its work (exit 3): an unreadable file, a
    /// store that does not open.
    pub fn failure(message: impl std::fmt::Display) -> CliError {
        CliError {
            code: exit::FAILURE,
            message: message.to_string(),
        }
    }

    /// What the person gave is not valid (exit 1): a bad spec, template or
    /// file.
    pub fn invalid(message: impl std::fmt::Display) -> CliError {
        CliError {
            code: exit::INVALID,
            message: message.to_string(),
        }
    }

    /// Wrong usage (exit 2): a name that is not there.
    pub fn usage(message: impl std::fmt::Display) -> CliError {
        CliError {
            code: exit::USAGE,
            message: message.to_string(),
        }
    }

    /// Say it, once, and give the exit code.
    pub fn report(self) -> u8 {
        eprintln!("error: {}", self.message);
        self.code
    }
}
