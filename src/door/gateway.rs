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

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde_json::json;

use crate::harness::ModelEndpoint;
use crate::host::Grants;

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
    /// Point the model endpoints `models` of a harness at the door in
    /// `env` (its whole environment), keeping their keys here. `token` is
    /// the run's token (the harness holds it already).
    pub fn prepare(
        models: &[ModelEndpoint],
        env: &mut BTreeMap<String, String>,
        token: &str,
        grants: Arc<Grants>,
    ) -> Gateway {
        let mut upstreams = BTreeMap::new();
        let mut keys = Vec::new();
        for model in models {
            let upstream = env
                .get(&model.base_url)
                .filter(|url| !url.trim().is_empty())
                .cloned()
                .unwrap_or_else(|| model.upstream.clone());
            upstreams
                .entry(model.provider.clone())
                .or_insert_with(|| upstream.trim_end_matches('/').to_string());
            env.insert(model.base_url.clone(), super::model_url(&model.provider));
            for var in &model.keys {
                let Some(key) = env.get(var).filter(|k| !k.is_empty()).cloned() else {
                    continue;
                };
                let stand_in = stand_in_for(token, var);
                env.insert(var.clone(), stand_in.clone());
                keys.push((stand_in, key));
            }
        }
        Gateway {
            token: token.to_string(),
            grants,
            upstreams,
            keys,
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

async fn forward(
    State(gateway): State<Arc<Gateway>>,
    Path((provider, rest)): Path<(String, String)>,
    request: Request,
) -> Response {
    if let Err(e) = gateway.grants.authorize(&gateway.token).await {
        return refusal(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            format!(
                "the bridge's model gateway takes calls only during a turn: {}",
                e.message
            ),
        );
    }
    let Some(upstream) = gateway.upstreams.get(&provider) else {
        let known: Vec<&str> = gateway.upstreams.keys().map(String::as_str).collect();
        return refusal(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!(
                "the bridge's model gateway has no provider `{provider}` for this harness (it has: {})",
                known.join(", ")
            ),
        );
    };
    let (parts, body) = request.into_parts();
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
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(e) => {
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                format!(
                    "the bridge's model gateway takes calls of at most {} MiB: {e}",
                    MAX_BODY_BYTES >> 20
                ),
            );
        }
    };
    let client = match client() {
        Ok(client) => client,
        Err(why) => {
            return refusal(
                StatusCode::BAD_GATEWAY,
                "api_error",
                format!("the bridge's model gateway has no HTTP client: {why}"),
            );
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
            metrics.model_call(&provider, &class, Some(started.elapsed().as_secs_f64()));
            answer
        }
        Err(e) => {
            metrics.model_call(&provider, "unreachable", None);
            // The upstream's address, never the key (not in the URL: keys
            // ride headers, or a query the words below leave out).
            let said = format!(
                "the bridge's model gateway cannot reach {upstream}: {}",
                without_url(e)
            );
            tracing::warn!(%provider, "{said}");
            return refusal(StatusCode::BAD_GATEWAY, "api_error", said);
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
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|e| {
            refusal(
                StatusCode::BAD_GATEWAY,
                "api_error",
                format!("the bridge's model gateway cannot pass the answer on: {e}"),
            )
        })
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
        let models = vec![ModelEndpoint {
            provider: "anthropic".into(),
            base_url: "ANTHROPIC_BASE_URL".into(),
            upstream: "https://api.anthropic.com".into(),
            keys: vec!["ANTHROPIC_API_KEY".into(), "ANTHROPIC_AUTH_TOKEN".into()],
        }];
        let mut env = BTreeMap::from([
            ("ANTHROPIC_API_KEY".to_string(), "sk-real".to_string()),
            ("PATH".to_string(), "/usr/bin".to_string()),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let store = crate::host::sqlite::SqliteHost::open(dir.path()).unwrap();
        let grants = Arc::new(Grants::new(Arc::new(store)));
        let gateway = Gateway::prepare(&models, &mut env, "tok", grants);
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
}
