//! The service's API token when the operator set none: made once and kept
//! in a file (0600), never in a log, so it never lands where logs are
//! collected; on a shared store, made by the first instance and kept in
//! the store so every instance accepts the same one.

use std::path::{Path, PathBuf};

use crate::host::postgres::PgHost;

/// The API token the instances on one shared store accept when the
/// operator set none: made by the first, kept in the store, and written
/// to `DATA/api-token` (0600) on each instance's machine for its operator;
/// with that file.
pub async fn shared_api_token(
    store: &PgHost,
    data_dir: &Path,
) -> Result<(String, PathBuf), String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for the API token: {e}"))?;
    let token = store
        .shared_secret("api_token", hex::encode(bytes).as_bytes())
        .await
        .map_err(|e| e.message)?;
    let token = String::from_utf8(token).map_err(|_| "the store's API token is not text")?;
    let file = data_dir.join("api-token");
    let current = std::fs::read_to_string(&file).unwrap_or_default();
    if current.trim() != token {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        out.write_all(token.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }
    Ok((token, file))
}

/// The service's own token, in `dir/api-token`: read when it is there,
/// generated (32 random bytes, hex, file mode 0600) when not. It lives in a
/// file, not in the log, so it never lands where logs are collected.
pub fn api_token(dir: &Path) -> Result<(String, PathBuf), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let file = dir.join("api-token");
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 {
                return Err(format!(
                    "{} holds a token of under 16 characters; delete it to get a new one",
                    file.display()
                ));
            }
            return Ok((token, file));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for the API token: {e}"))?;
    let token = hex::encode(bytes);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
    {
        Ok(mut f) => f
            .write_all(token.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?,
        // Another serve on this store made it first: use that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return api_token(dir),
        Err(e) => return Err(format!("cannot write {}: {e}", file.display())),
    }
    Ok((token, file))
}
