//! What a harness's door costs, side by side in one run against the same
//! thing done directly, the two alternating so drift hits both alike:
//!
//! - **a model call**: 64 clients at once, each making its calls one after
//!   another on a connection it keeps (as a CLI does), a streamed answer of
//!   a dozen server-sent events, through the gateway (the stand-in swapped
//!   for the key, the run's grant checked each call, the answer read for
//!   its usage) and straight to the model: p50 and p99 of each, and what
//!   the gateway adds. Twice: with the model's events spread over
//!   `PACE_MS` (50 by default: a model streams, and 64 streams of one are
//!   64 mostly waiting connections), and with no pause at all, which keeps
//!   every core busy with HTTP alone (the worst case: the gateway's own
//!   work then queues behind everyone's);
//! - **a large download** through the egress proxy (a `CONNECT` tunnel,
//!   and plain HTTP forwarded) and straight from the server: MB/s, and the
//!   proxy's share of the direct rate.
//!
//! The server stands at 203.0.113.77 (a documentation address, added to
//! this machine's loopback: the proxy reaches only public addresses), so
//! the bench runs as root, as the network tests do.
//!
//! Reproduce: `cargo bench --bench door` (`CALLS=40` calls per client, 20
//! by default; `STREAMS`, 64; `PACE_MS`, 50; `DOWNLOAD_MB`, 512; `ROUNDS`,
//! 3). Without `--bench` (as
//! `cargo test --bench door` runs it) a few of each, as a check that every
//! path still works.

// The tests' helpers share the PostgreSQL helper with `support`: loaded
// twice, used from neither.
#![allow(clippy::duplicate_mod)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use harness_bridge::door::{Gateway, Keeper, Proxy};
use harness_bridge::harness::cage::Egress;
use harness_bridge::harness::{Adapters, DoorKeeper as _};
use harness_bridge::host::Grants;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

mod support;

/// The address the server stands at.
const PUBLIC: &str = "203.0.113.77";
/// Clients calling the model at once (`STREAMS`, 64 by default).
fn streams() -> usize {
    std::env::var("STREAMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// 203.0.113.77 on the loopback while the bench runs.
struct PublicAddress;

impl PublicAddress {
    fn add() -> PublicAddress {
        let ip = |verb: &str| {
            std::process::Command::new("ip")
                .args(["addr", verb, &format!("{PUBLIC}/32"), "dev", "lo"])
                .output()
                .expect("ip (iproute2) runs")
        };
        let _ = ip("del");
        let out = ip("add");
        assert!(
            out.status.success(),
            "the bench runs as root to add {PUBLIC} to the loopback: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PublicAddress
    }
}

impl Drop for PublicAddress {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["addr", "del", &format!("{PUBLIC}/32"), "dev", "lo"])
            .output();
    }
}

/// A streamed model answer: a dozen events, as a short reply comes.
fn answer() -> String {
    let mut body = String::new();
    body.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n");
    for i in 0..10 {
        body.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word {i} \"}}}}\n\n"
        ));
    }
    body.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    body
}

/// The model and the download server, at `PUBLIC`. The model sends its
/// answer's events spread over `?pace=MS` (none: all at once).
async fn server(download: usize) -> SocketAddr {
    let answer = answer();
    let app = Router::new()
        .route(
            "/v1/messages",
            post(move |uri: http::Uri| {
                let answer = answer.clone();
                let pace = uri
                    .query()
                    .and_then(|q| q.strip_prefix("pace="))
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .unwrap_or(0);
                async move {
                    let events: Vec<String> =
                        answer.split_inclusive("\n\n").map(str::to_string).collect();
                    let gap = Duration::from_millis(pace) / events.len() as u32;
                    let stream = futures_util::stream::iter(events).then(move |event| async move {
                        if !gap.is_zero() {
                            tokio::time::sleep(gap).await;
                        }
                        Ok::<_, std::io::Error>(event)
                    });
                    let body = if pace == 0 {
                        Body::from(answer)
                    } else {
                        Body::from_stream(stream)
                    };
                    http::Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(body)
                        .expect("response")
                }
            }),
        )
        .route(
            "/big",
            get(move || async move {
                let chunk = axum::body::Bytes::from(vec![7u8; 64 * 1024]);
                let chunks = download.div_ceil(chunk.len());
                let stream = futures_util::stream::iter(
                    (0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
                );
                http::Response::builder()
                    .header("content-length", (chunks * 64 * 1024).to_string())
                    .body(Body::from_stream(stream))
                    .expect("response")
            }),
        );
    let listener = TcpListener::bind((PUBLIC, 0)).await.expect("bind");
    let at = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    at
}

/// `STREAMS` clients making `calls` calls each to `url` with `key`: every
/// call's time to its whole answer.
async fn calls(url: &str, key: &str, calls: usize) -> Vec<Duration> {
    let mut tasks = Vec::new();
    for _ in 0..streams() {
        let (url, key) = (url.to_string(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut times = Vec::with_capacity(calls);
            for _ in 0..calls {
                let start = Instant::now();
                let answer = client
                    .post(&url)
                    .header("x-api-key", &key)
                    .header("content-type", "application/json")
                    .body(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#)
                    .send()
                    .await
                    .expect("the call");
                assert_eq!(answer.status(), 200, "{url}");
                let body = answer.bytes().await.expect("the answer");
                assert!(body.ends_with(b"message_stop\"}\n\n"));
                times.push(start.elapsed());
            }
            times
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a client"));
    }
    all
}

/// The calls of `STREAMS` clients straight to the model and through the
/// gateway, alternating, `rounds` times; their times said in a line.
async fn model_calls(
    direct_url: &str,
    door_url: &str,
    stand_in: &str,
    per_client: usize,
    rounds: usize,
    pace: u64,
) {
    // Warm both ways (connections, the allocator) before measuring.
    calls(direct_url, "sk-bench", 1).await;
    calls(door_url, stand_in, 1).await;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            direct.extend(calls(direct_url, "sk-bench", per_client).await);
            through.extend(calls(door_url, stand_in, per_client).await);
        } else {
            through.extend(calls(door_url, stand_in, per_client).await);
            direct.extend(calls(direct_url, "sk-bench", per_client).await);
        }
    }
    let (d50, d99) = (percentile(&mut direct, 0.5), percentile(&mut direct, 0.99));
    let (g50, g99) = (
        percentile(&mut through, 0.5),
        percentile(&mut through, 0.99),
    );
    println!(
        "model call, {} streams, answers over {pace} ms, {} calls each way: direct p50 {:.3} ms \
         p99 {:.3} ms; through the gateway p50 {:.3} ms p99 {:.3} ms; added p50 {:+.3} ms p99 {:+.3} ms",
        streams(),
        direct.len(),
        ms(d50),
        ms(d99),
        ms(g50),
        ms(g99),
        ms(g50) - ms(d50),
        ms(g99) - ms(d99)
    );
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let at = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[at]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// How a download reaches the server.
#[derive(Clone, Copy)]
enum Way {
    Direct,
    Tunnel,
    Forwarded,
}

/// One download of `/big` `way`: its rate in MB/s.
async fn download(server: SocketAddr, door: SocketAddr, way: Way) -> f64 {
    let start = Instant::now();
    let mut stream = match way {
        Way::Direct => TcpStream::connect(server).await.expect("connect"),
        Way::Tunnel | Way::Forwarded => TcpStream::connect(door).await.expect("connect"),
    };
    stream.set_nodelay(true).expect("nodelay");
    let path = match way {
        Way::Direct | Way::Tunnel => "/big".to_string(),
        Way::Forwarded => format!("http://{server}/big"),
    };
    if let Way::Tunnel = way {
        let connect = format!("CONNECT {server} HTTP/1.1\r\nHost: {server}\r\n\r\n");
        stream.write_all(connect.as_bytes()).await.expect("CONNECT");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.expect("the answer");
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
    let get = format!("GET {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\n\r\n");
    stream.write_all(get.as_bytes()).await.expect("GET");
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0usize;
    loop {
        let n = stream.read(&mut buffer).await.expect("read");
        if n == 0 {
            break;
        }
        total += n;
    }
    total as f64 / 1e6 / start.elapsed().as_secs_f64()
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let quick = support::quick();
    let per_client: usize = std::env::var("CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 2 } else { 20 });
    let download_mb: usize = std::env::var("DOWNLOAD_MB")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 8 } else { 512 });
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 });
    let _address = PublicAddress::add();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = server(download_mb * 1024 * 1024).await;
        let dir = tempfile::tempdir().expect("dir");
        let store = harness_bridge::host::sqlite::SqliteHost::open(dir.path()).expect("store");
        let grants = Arc::new(Grants::new(Arc::new(store)));
        let run = grants
            .open_run(
                &support::context("door-bench", "c1"),
                "plugin:langbot/harness-bridge/claude-code",
                &harness_bridge::harness::requested_permissions(),
                &support::unlimited(),
            )
            .expect("the run");
        let token = run.token.expose().to_string();
        let mut env = BTreeMap::from([
            ("ANTHROPIC_API_KEY".to_string(), "sk-bench".to_string()),
            ("ANTHROPIC_BASE_URL".to_string(), format!("http://{server}")),
        ]);
        let spec = Adapters::builtin()
            .find("claude-code")
            .expect("claude-code");
        let (gateway, _) = Gateway::prepare(spec, &[], &mut env, &token, grants.clone());
        let stand_in = env["ANTHROPIC_API_KEY"].clone();
        let egress = Egress {
            allow: vec![format!("{PUBLIC}:{}", server.port())],
            deny: Vec::new(),
            ..Default::default()
        };
        let proxy = Proxy::new(egress, &token, grants.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("the door");
        let door = listener.local_addr().expect("addr");
        let _open = Keeper::new(Router::new(), gateway, proxy).open(listener);

        let pace: u64 = std::env::var("PACE_MS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(50);
        for pace in [pace, 0] {
            let direct_url = format!("http://{server}/v1/messages?pace={pace}");
            let door_url = format!("http://{door}/model/anthropic/v1/messages?pace={pace}");
            model_calls(&direct_url, &door_url, &stand_in, per_client, rounds, pace).await;
        }

        let (mut straight, mut tunnel, mut forwarded) = (Vec::new(), Vec::new(), Vec::new());
        download(server, door, Way::Direct).await;
        for _ in 0..rounds {
            straight.push(download(server, door, Way::Direct).await);
            tunnel.push(download(server, door, Way::Tunnel).await);
            forwarded.push(download(server, door, Way::Forwarded).await);
        }
        let (s, t, f) = (
            median(&mut straight),
            median(&mut tunnel),
            median(&mut forwarded),
        );
        println!(
            "download of {download_mb} MiB, {rounds} each way: direct {s:.0} MB/s; \
             CONNECT tunnel {t:.0} MB/s ({:.0} %); plain HTTP forwarded {f:.0} MB/s ({:.0} %)",
            100.0 * t / s,
            100.0 * f / s
        );
    });
}
