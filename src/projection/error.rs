//! Why a projection failed, in words an operator can act on.

use std::path::{Path, PathBuf};

/// A projection failure. Nothing outside the workspace was touched.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// A path from outside (skill file, id) is not a safe relative path.
    #[error("unsafe path `{path}`: {reason}")]
    UnsafePath {
        /// The path as given (control characters escaped).
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Something in the workspace is a symlink where the bridge writes.
    #[error(
        "refusing to write through symlink {path}: the workspace must not link outside itself; remove the link"
    )]
    Symlink {
        /// The link found.
        path: PathBuf,
    },
    /// A folder the bridge needs is a file (or the other way round).
    #[error("{path} is in the way: expected a {expected}")]
    InTheWay {
        /// The path in the way.
        path: PathBuf,
        /// `folder` or `file`.
        expected: &'static str,
    },
    /// The binding config (`ctx.config`) does not have the expected shape.
    #[error("binding config: {0}")]
    Binding(String),
    /// An operator's setting the projection reads (a spec's home, the
    /// MCP catalog) cannot hold; the sentence names it.
    #[error("{0}")]
    Setting(String),
    /// A template failed to render (an operator override is broken).
    #[error("template `{name}`: {message}")]
    Template {
        /// Template name, e.g. `LANGBOT_CONTEXT.md`.
        name: String,
        /// The renderer's message, with line number.
        message: String,
    },
    /// The filesystem refused.
    #[error("{action} {path}: {source}")]
    Io {
        /// What the bridge was doing.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl ProjectionError {
    /// The same error with its path relative to `root` (the workspace
    /// root), for whoever sent the turn: it names the file in terms they
    /// know, and no folder of the bridge's machine. The log keeps the
    /// error as it was.
    pub fn within(self, root: &Path) -> Self {
        let relative = |path: PathBuf| match path.strip_prefix(root) {
            Ok(inside) if inside.as_os_str().is_empty() => PathBuf::from("the workspace root"),
            Ok(inside) => inside.to_path_buf(),
            Err(_) => path
                .file_name()
                .map_or_else(|| PathBuf::from("a folder"), PathBuf::from),
        };
        match self {
            ProjectionError::Symlink { path } => ProjectionError::Symlink {
                path: relative(path),
            },
            ProjectionError::InTheWay { path, expected } => ProjectionError::InTheWay {
                path: relative(path),
                expected,
            },
            ProjectionError::Io {
                action,
                path,
                source,
            } => ProjectionError::Io {
                action,
                path: relative(path),
                source,
            },
            other => other,
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ProjectionError::Io {
            action,
            path,
            source,
        }
    }
}
