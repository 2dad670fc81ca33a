//! The HTTP API of `serve`: runs in, result streams out (NDJSON, or SSE
//! when the client asks for `text/event-stream`), run status and cancel,
//! the runner manifest, conversation history, health, metrics, and the
//! debug chat page. Every route but `/` and `/healthz` needs a bearer token
//! when tokens are configured. Every response carries a
//! Content-Security-Policy (the page's admits only its own inline script
//! and style, by digest), `X-Frame-Options: DENY`, `nosniff` and
//! `Referrer-Policy: no-referrer`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::{Refused, RunEntry, Service, error, refuse, tokens};
use crate::protocol::{AgentRunResult, FailureCode};
use crate::protocol::{ErrorCode, InteractionSubmission, JsonMap, checked_context};
use crate::run::{QuickTurn, quick_context};

async fn auth(State(service): State<Arc<Service>>, request: Request, next: Next) -> Response {
    // The page holds no data (it asks for a token and calls the API with
    // it), health checks come from probes without one, and a one-time
    // link is what a tab has instead of one.
    if service.config.api_tokens.is_empty()
        || matches!(
            request.uri().path(),
            "/" | "/healthz" | super::sessions::OPEN_ROUTE
        )
    {
        return next.run(request).await;
    }
    let headers = request.headers();
    let session = tokens::bearer(headers).is_some_and(|token| service.sessions.holds(token));
    if session || tokens::holds_api_token(&service.config.api_tokens, headers) {
        return next.run(request).await;
    }
    refuse(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token (Authorization: Bearer <one of api_tokens>, or a \
         console session from a one-time link: harness-bridge console-link)",
    )
}

/// Whether a `Host` (or `Origin` authority) names this machine's loopback.
fn is_loopback_host(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Browsers may send requests here from any page a user opens: a form or a
/// `fetch` from another site, or a site whose name is made to resolve to
/// this machine (DNS rebinding). Only requests from the service's own page
/// or from programs get through:
/// - an `Origin` (every browser sends one on a cross-site request, and on
///   every POST) must be this service's own;
/// - a POST must say `Content-Type: application/json`, which no page can
///   send to another site without a preflight this service never approves;
/// - without tokens (`no_auth`), the request must be addressed to a
///   loopback name, so a rebound name cannot reach it.
async fn same_origin(
    State(service): State<Arc<Service>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if service.config.no_auth && !is_loopback_host(host) {
        return refuse(
            StatusCode::FORBIDDEN,
            "without api_tokens (no_auth) this service answers only requests addressed to \
             127.0.0.1, [::1] or localhost",
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if authority != Some(host) || host.is_empty() {
            return refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "a request from another site (Origin {}) is refused; call the API from a \
                     program, or from this service's own page",
                    origin.escape_debug().take(100).collect::<String>()
                ),
            );
        }
    }
    if request.method() == http::Method::POST {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a POST needs Content-Type: application/json (also one with no body)",
            );
        }
    }
    next.run(request).await
}

/// The router, with the origin checks and auth in front.
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/v1/runs", post(create_run).get(super::listing::list_runs))
        .route("/v1/conversations", get(super::listing::list_conversations))
        .route("/v1/runs/{run_id}", get(get_run))
        .route("/v1/runs/{run_id}/cancel", post(cancel_run))
        .route("/v1/runners", get(runners))
        .route("/v1/conversations/{id}", get(super::console::conversation))
        .route("/v1/conversations/{id}/history", get(history))
        .route("/v1/usage", get(super::console::usage))
        .route("/v1/live", get(super::console::live))
        .route(super::sessions::OPEN_ROUTE, post(super::sessions::open))
        .route(super::sessions::LINK_ROUTE, post(super::sessions::new_link))
        .route("/metrics", get(metrics))
        .route("/", get(chat_page))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .layer(middleware::from_fn_with_state(service.clone(), auth))
        .layer(middleware::from_fn_with_state(service.clone(), same_origin))
        .layer(middleware::from_fn(security_headers))
        .with_state(service)
}

/// The short form of a run request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShortRun {
    conversation: String,
    /// What the person said; may be left out when `interaction` answers a
    /// card.
    #[serde(default)]
    text: Option<String>,
    /// A card's answer: the open request's id, the button pressed, the
    /// fields filled in.
    #[serde(default)]
    interaction: Option<ShortAnswer>,
    /// The client's own id for the run, so it can cancel or look the run
    /// up before its first result (a generated one otherwise).
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    harness: Option<String>,
    #[serde(default)]
    config: JsonMap,
    /// What to do while the conversation's turn runs: `queue` (the next
    /// turn) or `steer` (into the running turn, where the harness takes
    /// input mid-turn; else queued).
    #[serde(default)]
    policy: Policy,
}

/// A short-form request's `policy`.
#[derive(Deserialize, Default, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Policy {
    #[default]
    Queue,
    Steer,
}

/// An answer to an `interaction.requested` card, as the short form takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShortAnswer {
    interaction_id: String,
    #[serde(default)]
    action_id: Option<String>,
    #[serde(default)]
    values: JsonMap,
}

#[derive(Deserialize, Default)]
struct RunQuery {
    harness: Option<String>,
}

/// A run request, read.
struct RunRequest {
    ctx: crate::protocol::AgentRunContext,
    harness: String,
    policy: Policy,
}

/// The two bodies `POST /v1/runs` takes, for error messages.
const RUN_FORMS: &str = "an AgentRunContext (with run_id) or the short form \
     {\"conversation\": \"...\", \"text\": \"...\", actor?, harness?, config?, run_id?, \
     interaction?: {interaction_id, action_id?, values?}, policy?: queue|steer}";

/// A run request's context, and the harness it runs on: the short form's
/// own, else the query's, else the operator's default. The short form
/// gets the operator's defaults for that harness under its own config.
fn run_request(
    doc: Value,
    operator: &super::ServeConfig,
    query_harness: Option<String>,
) -> Result<RunRequest, String> {
    // The short form names its conversation with a string; a context
    // carries a `conversation` object (or none).
    if !doc.get("conversation").is_some_and(Value::is_string) {
        if doc.get("run_id").is_none() {
            return Err(format!("expected {RUN_FORMS}"));
        }
        return checked_context(&doc)
            .map(|ctx| RunRequest {
                ctx,
                harness: query_harness.unwrap_or_else(|| operator.default_harness.clone()),
                policy: Policy::Queue,
            })
            .map_err(|e| e.to_string());
    }
    let short: ShortRun =
        serde_json::from_value(doc).map_err(|e| format!("expected {RUN_FORMS}: {e}"))?;
    if short.text.is_none() && short.interaction.is_none() {
        return Err(format!(
            "give the turn's text, or an interaction that answers an open request: {RUN_FORMS}"
        ));
    }
    let harness =
        (short.harness.or(query_harness)).unwrap_or_else(|| operator.default_harness.clone());
    let mut config = operator.defaults_for(&harness);
    config.extend(short.config);
    let answer = short.interaction.map(|a| InteractionSubmission {
        interaction_id: a.interaction_id,
        action_id: a.action_id,
        values: a.values,
        submitted_at: Some(crate::host::now_ms() / 1000),
    });
    let mut ctx = quick_context(&QuickTurn {
        conversation: &short.conversation,
        actor: short.actor.as_deref().unwrap_or("api-user"),
        text: short.text.as_deref().unwrap_or_default(),
        config,
        answer,
    })
    .map_err(|e| e.to_string())?;
    if let Some(run_id) = short.run_id {
        if let Some(why) = crate::protocol::run_id_problem(&run_id) {
            return Err(format!("run_id: {why}"));
        }
        ctx.run_id = run_id;
    }
    Ok(RunRequest {
        ctx,
        harness,
        policy: short.policy,
    })
}

async fn create_run(
    State(service): State<Arc<Service>>,
    Query(query): Query<RunQuery>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Ok(doc) = serde_json::from_str::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let RunRequest {
        mut ctx,
        harness,
        policy,
    } = match run_request(doc, &service.config, query.harness) {
        Ok(request) => request,
        Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
    };
    // A key no binding reads is a setting the client believes in and the
    // bridge would leave off: refused, unless the operator says otherwise.
    if !service.config.ignore_unknown_config_keys
        && let Err(e) = crate::projection::check_keys(&ctx.config)
    {
        return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
    }
    // A permission mode the client named that the harness lacks would be
    // left off; one it does not know would fail the turn: either is the
    // client's to fix now. (One the operator's defaults give is theirs.)
    let operators = service.config.defaults_for(&harness);
    if let Some(mode) = ctx.config.get("permission_mode").and_then(Value::as_str)
        && operators.get("permission_mode").and_then(Value::as_str) != Some(mode)
        && let Some(spec) = service.bridge.adapters().find(&harness)
        && let Err(why) = spec.check_permission_mode(mode)
    {
        return error(StatusCode::UNPROCESSABLE_ENTITY, why.to_string());
    }
    let fixed = &service.config.fixed_config.0;
    ctx.config.extend(fixed.clone());
    // What the operator fixed no person switches (`/model`, `/mode`).
    for (key, list) in [("model", "models"), ("permission_mode", "permission_modes")] {
        if fixed.contains_key(key) && !fixed.contains_key(list) {
            ctx.config.remove(list);
        }
    }
    // A binding that could never run (a wrong key, a server it tries to
    // define) is the client's to fix now, not a queued turn's to fail.
    match crate::projection::Binding::from_config(&ctx.config) {
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Ok(binding) => {
            if let Some(Err(e)) = binding
                .project
                .as_deref()
                .map(|p| service.bridge.project(p))
            {
                return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
            }
        }
    }
    // A command is the bridge's to answer, now, whatever runs.
    if let Some(answer) = service.command(&ctx, &harness).await {
        let results = crate::run::answer_results(&ctx.run_id, &answer);
        return answered(&results, &headers);
    }
    if policy == Policy::Steer {
        let conversation = ctx.conversation_id().unwrap_or("_").to_string();
        let text = ctx.input.to_text();
        if let Some(into) = service.steer(&conversation, &harness, &text).await {
            // The turn has it; so does the history, or a later turn (and
            // the person reading it back) would miss what was answered.
            if let Err(e) = service.bridge.record_follow_up(&ctx).await {
                tracing::warn!(run_id = %into, "cannot record the follow-up: {e}");
            }
            return (
                StatusCode::ACCEPTED,
                axum::Json(json!({"steered_into": into, "status": "running"})),
            )
                .into_response();
        }
    }
    let run_id = ctx.run_id.clone();
    match service.submit(ctx, harness).await {
        Ok(run) if policy == Policy::Steer => {
            // Nothing ran that takes it mid-turn: it is the next turn.
            let mut response = stream(run, &headers);
            response
                .headers_mut()
                .insert("x-steer", http::HeaderValue::from_static("queued"));
            response
        }
        Ok(run) => stream(run, &headers),
        Err(Refused::Busy(full)) => error(StatusCode::TOO_MANY_REQUESTS, full.to_string()),
        Err(Refused::Unavailable(why)) => error(StatusCode::SERVICE_UNAVAILABLE, why),
        Err(Refused::UnknownHarness(why)) => {
            error(StatusCode::UNPROCESSABLE_ENTITY, why.to_string())
        }
        Err(Refused::Duplicate) => error(
            StatusCode::CONFLICT,
            format!("run {run_id} exists; a run id is used once"),
        ),
    }
}

/// The run's results as they come, from the first: NDJSON, or SSE when
/// asked. The run does not depend on this stream: a client that goes away
/// only stops reading.
fn stream(run: Arc<RunEntry>, headers: &HeaderMap) -> Response {
    let sse = wants_sse(headers);
    let mut changes = run.count.subscribe();
    let body = async_stream(move |send| async move {
        let mut sent = 0;
        loop {
            for result in run.results_from(sent) {
                sent += 1;
                if send.send(Ok(chunk(&result, sse))).await.is_err() {
                    return;
                }
            }
            if run.ended() && run.results_from(sent).is_empty() {
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    results_response(body, sse)
}

/// A response carrying results as NDJSON, or as server-sent events.
fn results_response(body: Body, sse: bool) -> Response {
    let content_type = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "cannot build the stream"))
}

/// One result as a stream sends it: a line of NDJSON, or an SSE event
/// whose `id` is the sequence (what a client sends back as Last-Event-ID).
fn chunk(result: &AgentRunResult, sse: bool) -> String {
    let json = serde_json::to_string(result).unwrap_or_default();
    if sse {
        let id = result
            .sequence
            .map(|n| format!("id: {n}\n"))
            .unwrap_or_default();
        format!("{id}event: {}\ndata: {json}\n\n", result.kind)
    } else {
        format!("{json}\n")
    }
}

/// Whether the client asked for server-sent events.
fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

/// A command's answer, as a run's stream ends: its results, at once.
fn answered(results: &[AgentRunResult], headers: &HeaderMap) -> Response {
    let sse = wants_sse(headers);
    let body: String = results.iter().map(|r| chunk(r, sse)).collect();
    results_response(Body::from(body), sse)
}

/// A body fed by a task through a channel.
fn async_stream<F, Fut>(produce: F) -> Body
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<String, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(produce(tx));
    Body::from_stream(tokio_stream_from(rx))
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<String, Infallible>>,
) -> impl futures_util::Stream<Item = Result<String, Infallible>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A run by id: its status and results so far as JSON; or, asked with
/// `Accept: application/x-ndjson` or `text/event-stream`, its results as
/// a stream from the first until its end (on a shared store, from any
/// instance, whichever runs it).
async fn get_run(
    State(service): State<Arc<Service>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream") || v.contains("application/x-ndjson"));
    if streaming {
        if let Some(run) = service.watch(&run_id).await {
            return stream(run, &headers);
        }
    } else if let Some(run) = service.run(&run_id) {
        let mut body = json!({
            "run_id": run_id,
            "conversation_id": run.conversation_id,
            "harness": run.harness,
            "status": run.status(),
            "results": run.results_from(0),
        });
        super::console::run_facts(&service, &run_id, &mut body).await;
        return axum::Json(body).into_response();
    }
    match service.past_run(&run_id).await {
        Some(past) if streaming => {
            let body: String = past
                .results
                .iter()
                .filter_map(|r| serde_json::to_string(r).ok())
                .map(|line| line + "\n")
                .collect();
            Response::builder()
                .header(header::CONTENT_TYPE, "application/x-ndjson")
                .body(Body::from(body))
                .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "cannot answer"))
        }
        Some(past) => {
            let mut body = json!({
                "run_id": run_id,
                "conversation_id": past.conversation_id,
                "harness": past.harness,
                "status": past.status,
                "results": past.results,
            });
            if past.code == Some(FailureCode::Interrupted) {
                body["code"] = json!(FailureCode::Interrupted);
                body["error"] =
                    json!("the bridge stopped while this run was in flight; it did not finish");
            }
            super::console::run_facts(&service, &run_id, &mut body).await;
            axum::Json(body).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("no run {run_id}")),
    }
}

/// The debug chat page: one static file, no build step.
const CHAT_PAGE: &str = include_str!("chat.html");

/// `'sha256-…'` of the text of each `<tag>…</tag>` in `html`: what a
/// Content-Security-Policy names to let exactly those inline blocks run.
fn inline_hashes(html: &str, tag: &str) -> Vec<String> {
    use base64::Engine as _;
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut hashes = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find(&open) {
        let body = &rest[start + open.len()..];
        let Some(end) = body.find(&close) else {
            break;
        };
        let digest = Sha256::digest(&body.as_bytes()[..end]);
        hashes.push(format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest)
        ));
        rest = &body[end + close.len()..];
    }
    hashes
}

/// The page's policy: its own inline script and style only, by their
/// digests (computed from the page served, so they cannot drift from
/// it), so a script that ever got into the page would not run; the API
/// of its own origin only; no framing (clickjacking the approval
/// buttons), no `<base>`, no form posted elsewhere.
fn chat_page_policy() -> &'static str {
    static POLICY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        format!(
            "default-src 'self'; script-src {}; style-src {}; img-src 'self' data:; \
             object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
            inline_hashes(CHAT_PAGE, "script").join(" "),
            inline_hashes(CHAT_PAGE, "style").join(" "),
        )
    })
}

async fn chat_page() -> Response {
    (
        [(header::CONTENT_SECURITY_POLICY, chat_page_policy())],
        axum::response::Html(CHAT_PAGE),
    )
        .into_response()
}

/// What every response carries, refusals included: the page's own policy
/// or, for everything else (JSON, streams, metrics: nothing a browser
/// should render), one that allows nothing; no framing; no content-type
/// sniffing (a JSON answer that echoes a request is never read as HTML);
/// no `Referer` leaving the page.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            header::HeaderValue::from_static(
                "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
        );
    }
    headers.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn metrics(State(service): State<Arc<Service>>) -> Response {
    let metrics = crate::metrics::global();
    metrics.set_queued(service.queued());
    if let Some(live) = service.bridge.live_sessions() {
        live.refresh_metrics();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
        .into_response()
}

async fn cancel_run(State(service): State<Arc<Service>>, Path(run_id): Path<String>) -> Response {
    match service.cancel(&run_id).await {
        Ok(super::Cancelled::Asked(status)) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"run_id": run_id, "status": status})),
        )
            .into_response(),
        Ok(super::Cancelled::Ended(status)) => error(
            StatusCode::CONFLICT,
            format!(
                "run {run_id} has already ended ({}); there is nothing to cancel",
                status.as_str()
            ),
        ),
        Ok(super::Cancelled::Unknown) => error(StatusCode::NOT_FOUND, format!("no run {run_id}")),
        Err(why) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot cancel run {run_id} now: {why}"),
        ),
    }
}

/// The runner manifest, each runner with `installed`: whether its
/// program is there for a turn to start (a client offers only those).
async fn runners(State(service): State<Arc<Service>>) -> Response {
    let adapters = service.bridge.adapters();
    let mut answer = serde_json::to_value(crate::harness::discovery(adapters)).unwrap_or_default();
    if let Some(runners) = answer["runners"].as_array_mut() {
        for runner in runners {
            let installed = runner["runner_name"]
                .as_str()
                .and_then(|name| adapters.find(name))
                .is_some_and(|spec| service.bridge.installed(spec));
            runner["installed"] = json!(installed);
        }
    }
    axum::Json(answer).into_response()
}

#[derive(Deserialize)]
struct HistoryQuery {
    #[serde(default = "default_limit")]
    limit: u32,
}

fn default_limit() -> u32 {
    50
}

async fn history(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Response {
    let scope = crate::host::RunScope {
        conversation_id: Some(id.clone()),
        ..Default::default()
    };
    let page = service
        .bridge
        .host()
        .history_page(
            &scope,
            &crate::host::HistoryQuery {
                conversation_id: Some(id),
                limit: query.limit.clamp(1, 100),
                ..Default::default()
            },
        )
        .await;
    match page {
        Ok(page) => axum::Json(page).into_response(),
        // A conversation nothing is stored of has no messages yet: an
        // empty page (the console opens a new id this way).
        Err(e) if e.code == ErrorCode::NotFound => {
            axum::Json(crate::protocol::HistoryPage::default()).into_response()
        }
        Err(e) => {
            // The caller's mistake is a 4xx, in its own words; the store's
            // failure is a 500 whose details (files, SQLite) stay in the log.
            let status = match e.code {
                ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
                ErrorCode::NotFound => StatusCode::NOT_FOUND,
                ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                _ => {
                    tracing::error!(error = %e, "history read failed");
                    return error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the store could not read this history; the bridge's log says why",
                    );
                }
            };
            error(status, e.to_string())
        }
    }
}
