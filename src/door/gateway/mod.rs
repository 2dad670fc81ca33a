//! The model gateway: a harness's model calls, through its door, to the
//! operator's endpoint with the operator's key.
//!
//! Before the launch, [`Gateway::prepare`] rewrites the harness's
//! environment by its spec's `models`: each base-URL variable points at
//! the door (`/model/<provider>`), and each key variable the operator set
//! holds a stand-in made of the run's token and the variable's name. The
//! keys themselves stay here. A call that comes to the door is taken only
//! while the run the token names is open (a live process between turns,
//! or a token kept after its turn, calls nothing), every stand-in in its
//! headers and query is replaced by its key, and it goes to the upstream
//! the operator configured; the answer streams back as it comes.

mod bound;
mod codex_toml;
mod opencode_json;
mod tally;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde_json::json;

use crate::harness::{AdapterSpec, ModelConfig};
use crate::host::{GrantedHost, Grants, RunGrant};
use tally::Tally;

/// The largest call body taken (a long conversation with images).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What one harness's model calls go through.
pub struct Gateway {
    /// The run's token: the stand-ins are made of it, and a call is taken
    /// only while the run it names is open.
    token: String,
    grants: Arc<Grants>,
    /// Provider → the base URL its calls go to (no trailing `/`).
    upstreams: BTreeMap<String, String>,
    /// Stand-in → the key it stands for.
    keys: Vec<(String, String)>,
}

impl Gateway {
    /// Point the model endpoints of a harness (its spec's `models`, and
    /// the providers in its `model_config` the operator's `files` hold) at
    /// the door in `env` (its whole environment), keeping their keys and
    /// upstreams here. `token` is the run's token (the harness holds it
    /// already). Returns the gateway and the config overrides (`-c` items)
    /// the harness's command line needs besides.
    pub fn prepare(
        spec: &AdapterSpec,
        files: &[PathBuf],
        env: &mut BTreeMap<String, String>,
        token: &str,
        grants: Arc<Grants>,
    ) -> (Gateway, Vec<String>) {
        let mut routes = Routes::new(token);
        for model in &spec.models {
            let set = env
                .get(&model.base_url)
                .filter(|url| !url.trim().is_empty())
                .cloned();
            let Some(upstream) = set.or_else(|| model.upstream.clone()) else {
                continue;
            };
            let url = routes.route(&model.provider, &upstream);
            env.insert(model.base_url.clone(), url);
            for var in &model.keys {
                routes.hide_key(var, env);
            }
        }
        match &spec.model_config {
            Some(ModelConfig::CodexToml { json_env }) => {
                codex_toml::point(&mut routes, files, json_env.as_deref(), env);
            }
            Some(ModelConfig::OpencodeJson { content }) => {
                opencode_json::point(&mut routes, files, content, env);
            }
            None => {}
        }
        let Routes {
            upstreams,
            keys,
            overrides,
            ..
        } = routes;
        let gateway = Gateway {
            token: token.to_string(),
            grants,
            upstreams,
            keys,
        };
        (gateway, overrides)
    }

    /// Add where calls go and with which keys (the keys themselves, to a
    /// digest kept in memory) to `hash`: the stand-ins are the run's.
    pub fn identify(&self, hash: &mut sha2::Sha256) {
        use sha2::Digest as _;
        for (provider, upstream) in &self.upstreams {
            hash.update(provider.as_bytes());
            hash.update([0]);
            hash.update(upstream.as_bytes());
            hash.update([0]);
        }
        for (stand_in, key) in &self.keys {
            let label = stand_in.strip_prefix(&format!("hb-{}-", self.token));
            hash.update(label.unwrap_or(stand_in).as_bytes());
            hash.update([0]);
            hash.update(key.as_bytes());
            hash.update([0]);
        }
    }

    /// The routes below `/model`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/{provider}/{*rest}", axum::routing::any(forward))
            .with_state(Arc::new(self))
    }

    /// `text` with every stand-in replaced by its key.
    fn fill(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (stand_in, key) in &self.keys {
            if text.contains(stand_in.as_str()) {
                text = text.replace(stand_in.as_str(), key);
            }
        }
        text
    }
}

/// The gateway being made: its providers, the stand-ins and what the
/// command line needs.
struct Routes<'t> {
    token: &'t str,
    upstreams: BTreeMap<String, String>,
    keys: Vec<(String, String)>,
    overrides: Vec<String>,
}

impl<'t> Routes<'t> {
    fn new(token: &'t str) -> Routes<'t> {
        Routes {
            token,
            upstreams: BTreeMap::new(),
            keys: Vec::new(),
            overrides: Vec::new(),
        }
    }

    /// A provider at the door for `upstream`, named `name` or, where that
    /// name goes elsewhere already, a name of its own; its URL there.
    fn route(&mut self, name: &str, upstream: &str) -> String {
        let upstream = upstream.trim().trim_end_matches('/').to_string();
        let base = provider_name(name);
        let mut name = base.clone();
        let mut n = 1;
        while let Some(there) = self.upstreams.get(&name) {
            if *there == upstream {
                return super::model_url(&name);
            }
            n += 1;
            name = format!("{base}-{n}");
        }
        self.upstreams.insert(name.clone(), upstream);
        super::model_url(&name)
    }

    /// `var`'s key (when set) kept here and a stand-in put in its place.
    fn hide_key(&mut self, var: &str, env: &mut BTreeMap<String, String>) {
        let Some(key) = env.get(var).filter(|k| !k.is_empty()).cloned() else {
            return;
        };
        if key.contains(self.token) {
            return;
        }
        let stand_in = stand_in_for(self.token, var);
        env.insert(var.to_string(), stand_in.clone());
        self.keys.push((stand_in, key));
    }

    /// A key written in a configuration (not a variable): kept here, the
    /// stand-in (named by `label`) returned to be written in its place.
    fn hide_literal(&mut self, label: &str, key: &str) -> String {
        let stand_in = stand_in_for(self.token, label);
        self.keys.push((stand_in.clone(), key.to_string()));
        stand_in
    }
}

/// A provider's name as the door's paths take it: lowercase letters,
/// digits and `-`.
fn provider_name(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "model".into()
    } else {
        name
    }
}

/// What a key variable holds inside the cage: the run's token and the
/// variable's name, which the gateway alone can turn back into the key.
pub fn stand_in_for(token: &str, var: &str) -> String {
    format!("hb-{token}-{}", var.to_ascii_lowercase().replace('_', "-"))
}

/// An error as the model APIs shape theirs, so the CLI shows the words.
fn refusal(status: StatusCode, kind: &str, message: String) -> Response {
    let body = json!({
        "type": "error",
        "error": {"type": kind, "message": message, "code": kind},
    });
    (status, axum::Json(body)).into_response()
}

/// Headers that belong to one connection, not to the call.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// The one client every gateway sends through (its connections kept).
fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(30))
                .pool_idle_timeout(Duration::from_secs(60))
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The run a call comes in and where it goes, or why it is refused: the
/// token's run must be open, under its budget, and the provider known.
async fn admit<'g>(
    gateway: &'g Gateway,
    provider: &str,
) -> Result<(GrantedHost, &'g str), Response> {
    let granted = match gateway.grants.authorize(&gateway.token).await {
        Ok(granted) => granted,
        Err(e) => {
            return Err(refusal(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                format!(
                    "the bridge's model gateway takes calls only during a turn: {}",
                    e.message
                ),
            ));
        }
    };
    // Past a budget (`mid_turn: stop`): no more calls this turn.
    if let Some(why) = granted.grant().meter.refusal() {
        crate::metrics::global().model_call(provider, "refused", None);
        return Err(refusal(StatusCode::FORBIDDEN, "permission_error", why));
    }
    let Some(upstream) = gateway.upstreams.get(provider) else {
        let known: Vec<&str> = gateway.upstreams.keys().map(String::as_str).collect();
        return Err(refusal(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!(
                "the bridge's model gateway has no provider `{provider}` for this harness (it has: {})",
                known.join(", ")
            ),
        ));
    };
    Ok((granted, upstream))
}

/// The call's body, whole, when it asks for a model the turn may call;
/// the refusal (audited) when it does not.
async fn checked_body(
    granted: &GrantedHost,
    provider: &str,
    rest: &str,
    body: Body,
) -> Result<Bytes, Response> {
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                format!(
                    "the bridge's model gateway takes calls of at most {} MiB: {e}",
                    MAX_BODY_BYTES >> 20
                ),
            )
        })?;
    let Some(listed) = granted.grant().models() else {
        return Ok(body);
    };
    let why = match bound::requested(rest, &body) {
        Ok(Some(asked)) if bound::allows(listed, &asked) => return Ok(body),
        Ok(None) => return Ok(body),
        Ok(Some(asked)) => format!(
            "this conversation's harness may call only the models its binding lists ({}), not `{asked}`; the operator adds a model to the binding's `models`",
            listed.join(", ")
        ),
        Err(why) => format!(
            "this conversation's harness may call only the models its binding lists, and this call cannot be checked: {why}"
        ),
    };
    crate::metrics::global().model_call(provider, "refused", None);
    let denied = crate::protocol::AgentAPIError::unauthorized(why.clone());
    granted.refused("model_call", provider, &denied).await;
    // A bad request, not a refused key: a CLI shows the words rather
    // than asking its user to sign in again.
    Err(refusal(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        why,
    ))
}

/// The call sent on to `upstream`, its stand-ins made keys: the answer
/// as it starts, or the refusal the harness gets.
async fn send(
    gateway: &Gateway,
    provider: &str,
    upstream: &str,
    rest: &str,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<reqwest::Response, Response> {
    let mut url = format!("{upstream}/{rest}");
    if let Some(query) = parts.uri.query() {
        url.push('?');
        url.push_str(&gateway.fill(query));
    }
    let mut headers = HeaderMap::new();
    for (name, value) in &parts.headers {
        if hop_by_hop(name) {
            continue;
        }
        let value = match value.to_str() {
            Ok(text) => match HeaderValue::from_str(&gateway.fill(text)) {
                Ok(filled) => filled,
                Err(_) => continue,
            },
            Err(_) => value.clone(),
        };
        headers.append(name.clone(), value);
    }
    let client = match client() {
        Ok(client) => client,
        Err(why) => {
            return Err(refusal(
                StatusCode::BAD_GATEWAY,
                "api_error",
                format!("the bridge's model gateway has no HTTP client: {why}"),
            ));
        }
    };
    let started = std::time::Instant::now();
    let sent = client
        .request(parts.method, &url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let metrics = crate::metrics::global();
    let answer = match sent {
        Ok(answer) => {
            let class = format!("{}xx", answer.status().as_u16() / 100);
            metrics.model_call(provider, &class, Some(started.elapsed().as_secs_f64()));
            answer
        }
        Err(e) => {
            metrics.model_call(provider, "unreachable", None);
            // The upstream's address, never the key (not in the URL: keys
            // ride headers, or a query the words below leave out).
            let said = format!(
                "the bridge's model gateway cannot reach {upstream}: {}",
                without_url(e)
            );
            tracing::warn!(%provider, "{said}");
            return Err(refusal(StatusCode::BAD_GATEWAY, "api_error", said));
        }
    };
    Ok(answer)
}

async fn forward(
    State(gateway): State<Arc<Gateway>>,
    Path((provider, rest)): Path<(String, String)>,
    request: Request,
) -> Response {
    let (granted, upstream) = match admit(&gateway, &provider).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let (parts, body) = request.into_parts();
    let body = match checked_body(&granted, &provider, &rest, body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let grant = granted.grant().clone();
    // Counted from here: a call that gets no answer ends here too.
    grant.meter.begin();
    let answer = match send(&gateway, &provider, upstream, &rest, parts, body).await {
        Ok(answer) => answer,
        Err(refused) => {
            grant
                .meter
                .record(&crate::host::meter::CallUsage::default());
            return refused;
        }
    };
    let mut response = Response::builder().status(answer.status());
    if let Some(headers) = response.headers_mut() {
        for (name, value) in answer.headers() {
            if !hop_by_hop(name) || name == header::CONTENT_LENGTH {
                headers.append(name.clone(), value.clone());
            }
        }
    }
    let tally = Tally::new(
        answer
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let tapped = Tapped {
        inner: Box::pin(answer.bytes_stream()),
        tally: Some(tally),
        grant,
    };
    response
        .body(Body::from_stream(tapped))
        .unwrap_or_else(|e| {
            refusal(
                StatusCode::BAD_GATEWAY,
                "api_error",
                format!("the bridge's model gateway cannot pass the answer on: {e}"),
            )
        })
}

/// An answer on its way back, read for its usage as it passes: what it
/// said is added to the run's meter when it ends, or when the harness
/// stops reading it.
struct Tapped {
    inner: std::pin::Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    tally: Option<Tally>,
    grant: Arc<RunGrant>,
}

impl Tapped {
    fn count(&mut self) {
        if let Some(tally) = self.tally.take() {
            self.grant.meter.record(&tally.finish());
        }
    }
}

impl Stream for Tapped {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        match &next {
            std::task::Poll::Ready(Some(Ok(bytes))) => {
                if let Some(tally) = self.tally.as_mut() {
                    tally.feed(bytes);
                }
            }
            std::task::Poll::Ready(_) => self.count(),
            std::task::Poll::Pending => {}
        }
        next
    }
}

/// How long an answer the harness stopped reading is still read for its
/// usage: as long as the turn's end waits for its calls.
const DRAIN: Duration = Duration::from_secs(2);

impl Drop for Tapped {
    /// The harness stopped reading before the answer ended (it exited as
    /// its turn ended): what the model still sends was asked for in the
    /// turn, so the rest is read for its usage a moment longer, the call
    /// counted as under way until then.
    fn drop(&mut self) {
        let Some(mut tally) = self.tally.take() else {
            return;
        };
        let grant = self.grant.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            grant.meter.record(&tally.finish());
            return;
        };
        let mut rest = std::mem::replace(&mut self.inner, Box::pin(futures_util::stream::empty()));
        runtime.spawn(async move {
            use futures_util::StreamExt as _;
            let read = async {
                while let Some(Ok(bytes)) = rest.next().await {
                    tally.feed(&bytes);
                }
            };
            let _ = tokio::time::timeout(DRAIN, read).await;
            grant.meter.record(&tally.finish());
        });
    }
}

/// An HTTP client's error in words, without the URL it names (whose
/// query may hold a key).
fn without_url(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut words = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        words.push_str(": ");
        words.push_str(&cause.to_string());
        source = cause.source();
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_harness_holds_stand_ins_and_the_door_in_place_of_keys_and_endpoints() {
        let spec = crate::harness::Adapters::builtin()
            .find("claude-code")
            .unwrap();
        let mut env = BTreeMap::from([
            ("ANTHROPIC_API_KEY".to_string(), "sk-real".to_string()),
            ("PATH".to_string(), "/usr/bin".to_string()),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let store = crate::host::sqlite::SqliteHost::open(dir.path()).unwrap();
        let grants = Arc::new(Grants::new(Arc::new(store)));
        let (gateway, overrides) = Gateway::prepare(spec, &[], &mut env, "tok", grants);
        assert!(overrides.is_empty());
        assert_eq!(
            env["ANTHROPIC_BASE_URL"],
            super::super::model_url("anthropic")
        );
        assert_eq!(env["ANTHROPIC_API_KEY"], "hb-tok-anthropic-api-key");
        assert!(
            !env.contains_key("ANTHROPIC_AUTH_TOKEN"),
            "not set: not made"
        );
        assert!(!env.values().any(|v| v.contains("sk-real")));
        assert_eq!(gateway.upstreams["anthropic"], "https://api.anthropic.com");
        assert_eq!(
            gateway.fill("Bearer hb-tok-anthropic-api-key"),
            "Bearer sk-real"
        );
        assert_eq!(gateway.fill("key=other"), "key=other");
    }

    #[test]
    fn a_gateway_is_known_by_where_it_leads_and_with_which_key_not_by_its_token() {
        use sha2::Digest as _;
        let spec = crate::harness::Adapters::builtin()
            .find("claude-code")
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = crate::host::sqlite::SqliteHost::open(dir.path()).unwrap();
        let grants = Arc::new(Grants::new(Arc::new(store)));
        let identity = |token: &str, url: &str, key: &str| {
            let mut env = BTreeMap::from([
                ("ANTHROPIC_API_KEY".to_string(), key.to_string()),
                ("ANTHROPIC_BASE_URL".to_string(), url.to_string()),
            ]);
            let (gateway, _) = Gateway::prepare(spec, &[], &mut env, token, grants.clone());
            let mut hash = sha2::Sha256::new();
            gateway.identify(&mut hash);
            <[u8; 32]>::from(hash.finalize())
        };
        let first = identity("t1", "http://a", "k1");
        assert_eq!(first, identity("t2", "http://a", "k1"), "another turn");
        assert_ne!(first, identity("t1", "http://b", "k1"), "another endpoint");
        assert_ne!(first, identity("t1", "http://a", "k2"), "another key");
    }
}
