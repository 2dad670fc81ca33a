//! The service's API token when the operator set none: made once and kept
//! in a file (0600), never in a log, so it never lands where logs are
//! collected; on a shared store, made by the first instance and kept in
//! the store so every instance accepts the same one.

use std::path::{Path, PathBuf};

use axum::http::{HeaderMap, header};
use sha2::{Digest as _, Sha256};

use crate::host::postgres::PgHost;
use crate::protocol::AgentAPIError;

/// Why the service has no API token to accept: `serve` does not start
/// without one.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The system gave no random bytes to make one (`getrandom`'s error
    /// is no `std` error without its `std` feature: kept, not chained).
    #[error("no randomness for the API token: {0}")]
    Randomness(getrandom::Error),
    /// The shared store could not keep or give the shared one.
    #[error("{}", .0.message)]
    Store(#[source] AgentAPIError),
    /// The shared store holds a token that is not text.
    #[error("the store's API token is not text")]
    NotText(#[source] std::string::FromUtf8Error),
    /// The token file holds too short a token.
    #[error("{} holds a token of under 16 characters; delete it to get a new one", .0.display())]
    TooShort(PathBuf),
    /// The token file cannot be read.
    #[error("cannot read {}: {source}", file.display())]
    Read {
        /// The token file.
        file: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The token file cannot be written.
    #[error("cannot write {}: {source}", file.display())]
    Write {
        /// The token file.
        file: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// 32 random bytes, hex.
pub(super) fn fresh_token() -> Result<String, TokenError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(TokenError::Randomness)?;
    Ok(hex::encode(bytes))
}

/// The API token the instances on one shared store accept when the
/// operator set none: made by the first, kept in the store, and written
/// to `DATA/api-token` (0600) on each instance's machine for its operator;
/// with that file.
pub async fn shared_api_token(
    store: &PgHost,
    data_dir: &Path,
) -> Result<(String, PathBuf), TokenError> {
    let token = store
        .shared_secret("api_token", fresh_token()?.as_bytes())
        .await
        .map_err(TokenError::Store)?;
    let token = String::from_utf8(token).map_err(TokenError::NotText)?;
    let file = data_dir.join("api-token");
    let current = std::fs::read_to_string(&file).unwrap_or_default();
    if current.trim() != token {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .and_then(|mut out| out.write_all(token.as_bytes()));
        if let Err(source) = written {
            return Err(TokenError::Write { file, source });
        }
    }
    Ok((token, file))
}

/// The service's own token, in `dir/api-token`: read when it is there,
/// generated (32 random bytes, hex, file mode 0600) when not. It lives in a
/// file, not in the log, so it never lands where logs are collected.
pub fn api_token(dir: &Path) -> Result<(String, PathBuf), TokenError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let file = dir.join("api-token");
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 {
                return Err(TokenError::TooShort(file));
            }
            return Ok((token, file));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(TokenError::Read { file, source }),
    }
    let token = fresh_token()?;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
    {
        Ok(mut f) => {
            if let Err(source) = f.write_all(token.as_bytes()) {
                return Err(TokenError::Write { file, source });
            }
        }
        // Another serve on this store made it first: use that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return api_token(dir),
        Err(source) => return Err(TokenError::Write { file, source }),
    }
    Ok((token, file))
}
/// The bearer token a request carries (the scheme is case-insensitive,
/// RFC 7235).
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// Whether the request carries one of the API tokens. Digests are
/// compared, not the tokens, so the time a wrong guess takes says nothing
/// about them.
pub(super) fn holds_api_token(api_tokens: &[String], headers: &HeaderMap) -> bool {
    bearer(headers).is_some_and(|token| {
        let given = Sha256::digest(token.as_bytes());
        api_tokens
            .iter()
            .any(|t| Sha256::digest(t.as_bytes()) == given)
    })
}
