//! Shared by the benches: the 1,000,000-item store (100 conversations ×
//! 10,000 items), built once under `target/bench-data/` and reused, and
//! the quick mode every bench has for CI.
#![allow(dead_code)]

use std::path::PathBuf;

/// A throwaway PostgreSQL server (the tests' own helper): one per bench
/// binary, on 127.0.0.1, a database per store.
pub use harness_bridge_testkit::pg;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use axum::routing::{any, post};
use harness_bridge::host::prelude::*;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantCaps, GrantPolicy, NewTranscriptItem};
use harness_bridge::protocol::AgentRunContext;
use serde_json::{Value, json};

const CONVERSATIONS: usize = 100;
const PER_CONVERSATION: usize = 10_000;
/// Items per conversation in quick mode: two 50-item pages and some.
const PER_CONVERSATION_QUICK: usize = 120;
const WORDS: [&str; 16] = [
    "deploy", "build", "error", "timeout", "database", "review", "merge", "branch", "test",
    "release", "config", "cache", "latency", "memory", "部署", "日志",
];

/// Whether this is a quick run: `cargo bench` passes `--bench`, `cargo
/// test --bench NAME` does not. Then each bench runs once on a small
/// workload (criterion does the same for its own loops), so CI proves
/// every bench still works without measuring anything.
pub fn quick() -> bool {
    !std::env::args().any(|arg| arg == "--bench")
}

/// How many turns a CLI bench measures: `TURNS`, else `default`; `quick`
/// when not measuring.
pub fn turns(quick: usize, default: usize) -> usize {
    if self::quick() {
        return quick;
    }
    std::env::var("TURNS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(default)
}

/// The pinned Claude Code CLI (`tests/clis`); exits saying how to install
/// it when it is missing.
pub fn claude() -> PathBuf {
    let claude =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clis/node_modules/.bin/claude");
    if !claude.exists() {
        eprintln!(
            "claude is not installed at {}: run `npm ci --prefix tests/clis` (scripts/test does)",
            claude.display()
        );
        std::process::exit(1);
    }
    claude
}

fn text(i: usize) -> String {
    let pick = |k: usize| WORDS[(i.wrapping_mul(2654435761) >> k) % WORDS.len()];
    format!(
        "message {i}: the {} step hit a {} while checking the {} on {}",
        pick(3),
        pick(7),
        pick(11),
        pick(15)
    )
}

/// The 1M-item store, built on first use; in quick mode a store of the
/// same conversations with 120 items each.
pub fn store_1m(rt: &tokio::runtime::Runtime) -> SqliteHost {
    let (name, per_conversation) = if quick() {
        ("store-quick", PER_CONVERSATION_QUICK)
    } else {
        ("store-1m", PER_CONVERSATION)
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-data")
        .join(name);
    let ready = dir.join("READY");
    let store = SqliteHost::open(&dir).expect("bench store opens");
    if !ready.exists() {
        let items = CONVERSATIONS * per_conversation;
        eprintln!(
            "building the {items}-item bench store in {} ...",
            dir.display()
        );
        rt.block_on(async {
            for i in 0..items {
                store
                    .append_transcript(NewTranscriptItem {
                        event_id: format!("ev-{i}"),
                        conversation_id: format!("conv-{}", i % CONVERSATIONS),
                        role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
                        content: Some(text(i)),
                        ..NewTranscriptItem::default()
                    })
                    .await
                    .expect("append");
            }
        });
        std::fs::write(&ready, items.to_string()).expect("mark ready");
    }
    store
}

/// The same store on PostgreSQL (a server this bench starts, a fresh
/// database): the same items in the same conversations, loaded in bulk
/// (5,000 rows a statement, search words made by the store's own
/// `hb_search` configuration from the same indexed text) rather than one
/// append at a time, which would take most of an hour.
pub fn pg_store_1m(rt: &tokio::runtime::Runtime) -> harness_bridge::host::postgres::PgHost {
    use harness_bridge::host::postgres::PgHost;
    let per_conversation = if quick() {
        PER_CONVERSATION_QUICK
    } else {
        PER_CONVERSATION
    };
    rt.block_on(async {
        let db = pg::database().await;
        let store = PgHost::connect(&db.url).await.expect("the store connects");
        let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .expect("connects");
        tokio::spawn(connection);
        let items = CONVERSATIONS * per_conversation;
        eprintln!("loading the {items}-item bench store into PostgreSQL ...");
        let started = std::time::Instant::now();
        let mut streams = Vec::new();
        for c in 0..CONVERSATIONS {
            let id: i64 = client
                .query_one(
                    "INSERT INTO streams (conversation_id, thread_id, transcript_seq)
                     VALUES ($1, '', $2) RETURNING id",
                    &[&format!("conv-{c}"), &(per_conversation as i64)],
                )
                .await
                .and_then(|r| r.try_get(0))
                .expect("a stream");
            streams.push(id);
        }
        let now = harness_bridge::host::now_ms();
        for from in (0..items).step_by(5_000) {
            let to = (from + 5_000).min(items);
            let rows = from..to;
            let stream: Vec<i64> = rows.clone().map(|i| streams[i % CONVERSATIONS]).collect();
            let seq: Vec<i64> = rows
                .clone()
                .map(|i| (i / CONVERSATIONS) as i64 + 1)
                .collect();
            let ids: Vec<String> = rows.clone().map(|i| format!("tr-{i}")).collect();
            let events: Vec<String> = rows.clone().map(|i| format!("ev-{i}")).collect();
            let roles: Vec<&str> = rows
                .clone()
                .map(|i| if i % 2 == 0 { "user" } else { "assistant" })
                .collect();
            let contents: Vec<String> = rows.clone().map(text).collect();
            let words: Vec<String> = contents
                .iter()
                .map(|c| harness_bridge::host::words::index_text(c))
                .collect();
            let created: Vec<i64> = rows.map(|i| now - (items - i) as i64).collect();
            client
                .execute(
                    "INSERT INTO transcript (stream_id, seq, transcript_id, event_id, role,
                         item_type, content, created_at, words)
                     SELECT s, q, t, e, r, 'message', c, at, to_tsvector('hb_search', w)
                     FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                                 $6::text[], $7::bigint[], $8::text[])
                         AS u(s, q, t, e, r, c, at, w)",
                    &[
                        &stream, &seq, &ids, &events, &roles, &contents, &created, &words,
                    ],
                )
                .await
                .expect("a batch of items");
        }
        client.batch_execute("ANALYZE").await.expect("analyze");
        eprintln!("loaded in {:.0} s", started.elapsed().as_secs_f64());
        store
    })
}

/// A context for `conversation` with the read APIs opened.
pub fn context(run_id: &str, conversation: &str) -> AgentRunContext {
    serde_json::from_value(json!({
        "run_id": run_id, "trigger": {"type": "message.received"},
        "event": {"event_id": "e", "event_type": "message.received", "source": "api"},
        "conversation": {"conversation_id": conversation},
        "input": {"text": "x"}, "delivery": {"surface": "api"}, "resources": {}, "runtime": {},
        "context": {"available_apis": {"history_page": true, "history_search": true}}
    }))
    .expect("bench context")
}

/// A policy that never rate-limits: benches measure speed, not the limiter.
pub fn unlimited() -> GrantPolicy {
    GrantPolicy {
        caps: GrantCaps {
            rate_per_second: 1e9,
            burst: u32::MAX,
            max_calls_per_run: u32::MAX,
            ..GrantCaps::default()
        },
        ..GrantPolicy::default()
    }
}

/// The runtime every bench drives its async code on: two workers, like the
/// machines the figures are measured on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// What the fake model answers, word by word.
pub const ANSWER: &str = "Hello! How can I help you today?";

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

async fn messages(body: String) -> Response<Body> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let text = ANSWER;
    if request["stream"] != true {
        let message = json!({"id": "msg_b", "type": "message", "role": "assistant", "model": "fake", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}});
        return Response::new(Body::from(message.to_string()));
    }
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_b", "type": "message", "role": "assistant", "model": "fake", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for word in text.split_inclusive(' ') {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}));
    }
    events.extend([
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ]);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(sse(&events)))
        .unwrap_or_default()
}

/// A fake Anthropic Messages API on 127.0.0.1 that streams [`ANSWER`] in
/// word deltas to every request; its base URL.
pub async fn fake_messages_api() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .fallback(any(|| async { StatusCode::OK }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Run `command` (a `harness-bridge run`) to its exit and say how long it
/// took; a turn that did not end `run.completed` fails the bench.
pub fn timed_bridge_run(command: &mut std::process::Command) -> std::time::Duration {
    let start = std::time::Instant::now();
    let output = command.output().expect("the bridge runs");
    let elapsed = start.elapsed();
    let last = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    assert!(
        output.status.success() && last.contains("run.completed"),
        "bridged turn failed: {last}"
    );
    elapsed
}
