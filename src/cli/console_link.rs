//! `harness-bridge console-link`: a one-time link to a running `serve`'s
//! console, for an operator whose `serve` logs to a journal (where no
//! link is printed: it is a secret for a few minutes). The command asks
//! the service for it with the API token it keeps, so only whoever can
//! read that token gets a link.

use std::path::{Path, PathBuf};

use clap::Args;

use super::error::{CliError, Outcome};
use super::exit;
use crate::host::store::StoreAt;
use crate::serve::ServeConfig;

#[derive(Debug, Args)]
pub struct ConsoleLinkArgs {
    /// The service's settings, as `serve` was given them: where it
    /// listens and the token it takes (its `api_tokens`, else the one it
    /// keeps beside its store).
    #[arg(long, value_parser = super::absolute_path, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The service's address, when it is reached otherwise than at its
    /// `listen` (e.g. http://10.0.0.5:8787): the link names it.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

/// Ask the running service for a link and print it.
pub fn run(args: ConsoleLinkArgs, data_dir: &Path) -> Outcome {
    let config = ServeConfig::load(args.config.as_deref()).map_err(CliError::invalid)?;
    let url = match args.url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => {
            let mut at = config.listen;
            if at.ip().is_unspecified() {
                at.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{at}")
        }
    };
    let token = token(&config, data_dir)?;
    let runtime = super::runtime()?;
    let answer = runtime.block_on(ask(&url, &token))?;
    let link = answer["url"]
        .as_str()
        .ok_or_else(|| CliError::failure(format!("{url} answered without a link: {answer}")))?;
    let minutes = answer["lasts_seconds"].as_u64().unwrap_or(0) / 60;
    out!("{link}");
    eprintln!("Open it within {minutes} minutes, once: the tab that opens it keeps a session.");
    Ok(exit::OK)
}

/// The token the service takes: the first of its `api_tokens`, else the
/// one it keeps beside its store.
fn token(config: &ServeConfig, data_dir: &Path) -> Result<String, CliError> {
    if let Some(token) = config.api_tokens.first() {
        return Ok(token.clone());
    }
    if config.no_auth {
        return Err(CliError::usage(
            "this service takes no token (no_auth): open its console as it is",
        ));
    }
    let file = match config.store_at(data_dir) {
        StoreAt::Folder(dir) => dir.join("api-token"),
        StoreAt::Postgres(_) => data_dir.join("api-token"),
    };
    std::fs::read_to_string(&file)
        .map(|t| t.trim().to_string())
        .map_err(|e| {
            CliError::failure(format!(
                "cannot read the service's token in {}: {e}; run this as the user `serve` runs \
                 as, with the same --data-dir and --config",
                file.display()
            ))
        })
}

/// `POST /v1/console/links` with the token; the answer, or why not.
async fn ask(url: &str, token: &str) -> Result<serde_json::Value, CliError> {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/console/links"))
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body("{}")
        .send()
        .await
        .map_err(|e| {
            CliError::failure(format!(
                "no service answers at {url} ({e}); start it (`harness-bridge serve`), or give \
                 its address with --url"
            ))
        })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(CliError::failure(format!(
            "{url} refused a console link ({status}): {}",
            body.chars().take(300).collect::<String>()
        )));
    }
    serde_json::from_str(&body)
        .map_err(|e| CliError::failure(format!("{url} answered what is not JSON ({e})")))
}
