//! The console without typing the API token: a one-time link (printed by
//! `serve` at start on a terminal, or asked for with `harness-bridge
//! console-link`) is exchanged by the page for a session of its own tab,
//! which the API accepts as it accepts the token until it lapses.
//!
//! The link's code rides in the address's fragment, which a browser never
//! sends or keeps in a referrer; the page posts it once, gets the session
//! and drops the fragment from its address. The session is kept in the
//! tab's `sessionStorage` (gone with the tab), never in `localStorage`.
//! Only digests of codes and sessions are held, in memory: a restart
//! ends every session, and a code works once, for a few minutes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use serde_json::json;

use super::tokens::{TokenError, fresh_token, holds_api_token};
use super::{Service, error, refuse};

/// Where a tab exchanges a link's code for its session (no bearer).
pub const OPEN_ROUTE: &str = "/v1/console/session";
/// Where a holder of an API token asks for a one-time link.
pub const LINK_ROUTE: &str = "/v1/console/links";

/// How long a link may wait to be opened.
pub const LINK_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How long a tab's session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Most links or sessions held at once: past it the oldest goes.
const MOST_HELD: usize = 256;

/// A secret's digest, as held.
type Digest = [u8; 32];

fn digest(secret: &str) -> Digest {
    Sha256::digest(secret.trim().as_bytes()).into()
}

/// Links not yet opened and the sessions they became, each with when it
/// lapses.
#[derive(Debug, Default)]
pub struct ConsoleSessions {
    links: Mutex<HashMap<Digest, Instant>>,
    sessions: Mutex<HashMap<Digest, Instant>>,
}

/// A session a link was exchanged for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The bearer token the tab sends.
    pub token: String,
    /// Seconds it lasts.
    pub lasts: u64,
}

impl ConsoleSessions {
    /// A new one-time link's code.
    pub fn link(&self) -> Result<String, TokenError> {
        let code = fresh_token()?;
        hold(&self.links, digest(&code), LINK_LIFETIME);
        Ok(code)
    }

    /// The session `code` opens, once; `None` when it was used, lapsed or
    /// never made.
    pub fn exchange(&self, code: &str) -> Result<Option<Session>, TokenError> {
        let now = Instant::now();
        let opened = lock(&self.links)
            .remove(&digest(code))
            .is_some_and(|lapses| lapses > now);
        if !opened {
            return Ok(None);
        }
        let token = fresh_token()?;
        hold(&self.sessions, digest(&token), SESSION_LIFETIME);
        Ok(Some(Session {
            token,
            lasts: SESSION_LIFETIME.as_secs(),
        }))
    }

    /// Whether `token` is a session that has not lapsed.
    pub fn holds(&self, token: &str) -> bool {
        let now = Instant::now();
        lock(&self.sessions)
            .get(&digest(token))
            .is_some_and(|lapses| *lapses > now)
    }
}

/// A tab's request for its session.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Open {
    /// The code from the link's fragment.
    link: String,
}

/// `POST /v1/console/session {"link": CODE}`: the tab's session, or 401
/// saying how to get another link.
pub(super) async fn open(State(service): State<Arc<Service>>, Json(open): Json<Open>) -> Response {
    match service.sessions.exchange(&open.link) {
        Ok(Some(session)) => {
            tracing::info!("a console link was opened: a tab has a session");
            Json(json!({"token": session.token, "lasts_seconds": session.lasts})).into_response()
        }
        Ok(None) => refuse(
            StatusCode::UNAUTHORIZED,
            format!(
                "this console link was used already or is over {} minutes old; \
                 `harness-bridge console-link` prints another, or type the API token",
                LINK_LIFETIME.as_secs() / 60
            ),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `POST /v1/console/links`: a one-time link to the console for the
/// address the request was sent to. Only an API token makes one (a
/// session cannot make itself another).
pub(super) async fn new_link(State(service): State<Arc<Service>>, headers: HeaderMap) -> Response {
    if !holds_api_token(&service.config.api_tokens, &headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "a console link is made with an API token, not with a console session",
        );
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    match service.console_link() {
        Some(Ok(code)) => Json(json!({
            "url": link_url(host, &code),
            "lasts_seconds": LINK_LIFETIME.as_secs(),
        }))
        .into_response(),
        Some(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        None => error(
            StatusCode::NOT_FOUND,
            "this service takes no token (no_auth): open the console as it is",
        ),
    }
}

/// The console's address with a link's code.
pub fn link_url(host: &str, code: &str) -> String {
    format!("http://{host}/#link={code}")
}

fn lock(
    map: &Mutex<HashMap<Digest, Instant>>,
) -> std::sync::MutexGuard<'_, HashMap<Digest, Instant>> {
    map.lock().unwrap_or_else(|p| p.into_inner())
}

/// Hold `key` for `lifetime`: the lapsed go first, and past
/// [`MOST_HELD`] the one that lapses soonest.
fn hold(map: &Mutex<HashMap<Digest, Instant>>, key: Digest, lifetime: Duration) {
    let now = Instant::now();
    let mut held = lock(map);
    held.retain(|_, lapses| *lapses > now);
    if held.len() >= MOST_HELD
        && let Some(soonest) = held.iter().min_by_key(|(_, l)| **l).map(|(k, _)| *k)
    {
        held.remove(&soonest);
    }
    held.insert(key, now + lifetime);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_one_session_once() {
        let sessions = ConsoleSessions::default();
        let code = sessions.link().unwrap();
        assert!(!sessions.holds(&code), "a link is no session");
        let session = sessions.exchange(&code).unwrap().expect("a session");
        assert!(sessions.holds(&session.token));
        assert_eq!(session.lasts, SESSION_LIFETIME.as_secs());
        assert_eq!(sessions.exchange(&code).unwrap(), None, "used once");
        assert_eq!(sessions.exchange("made-up").unwrap(), None);
        assert!(!sessions.holds("made-up"));
        assert!(!sessions.holds(&code));
    }

    #[test]
    fn a_lapsed_link_opens_nothing_and_the_held_are_bounded() {
        let sessions = ConsoleSessions::default();
        let code = sessions.link().unwrap();
        lock(&sessions.links).insert(digest(&code), Instant::now());
        assert_eq!(sessions.exchange(&code).unwrap(), None);
        for _ in 0..MOST_HELD + 10 {
            sessions.link().unwrap();
        }
        assert_eq!(lock(&sessions.links).len(), MOST_HELD);
    }
}
