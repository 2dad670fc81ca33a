//! The relay hop: one host call (`history_page`, 50 items) through
//! `RelayHost` to a plugin process and back, against the same call on the
//! embedded host (1M-item store). The peer is a small Python process that
//! answers every `host_call` with a recorded 50-item page, as the plugin
//! does before the host's own work: so the difference is the hop itself
//! (frame out, a Python read/parse/answer, frame back), not LangBot's store.
//!
//! Reproduce: `cargo bench --bench relay`

mod support;

use std::process::Stdio;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use harness_bridge::host::prelude::*;
use harness_bridge::host::{Api, HistoryQuery, RunScope};
use harness_bridge::relay::{Inbound, Outbound, RelayHost};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The plugin side: answers each host_call line with the page it was given.
const PEER: &str = r#"
import json, sys
page = json.loads(sys.argv[1])
for line in sys.stdin:
    frame = json.loads(line)
    sys.stdout.write(json.dumps({"type": "host_reply", "id": frame["id"], "data": page}) + "\n")
    sys.stdout.flush()
"#;

fn bench(c: &mut Criterion) {
    let rt = support::runtime();
    let store = support::store_1m(&rt);
    let scope = RunScope {
        run_id: "bench".into(),
        conversation_id: Some("conv-7".into()),
        ..RunScope::default()
    };
    let query = HistoryQuery {
        limit: 50,
        ..HistoryQuery::default()
    };
    let page = rt
        .block_on(store.history_page(&scope, &query))
        .expect("a page");
    assert_eq!(page.items.len(), 50);

    let relay = rt.block_on(async {
        let mut peer = tokio::process::Command::new("python3")
            .arg("-c")
            .arg(PEER)
            .arg(serde_json::to_string(&page).expect("page json"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let mut stdin = peer.stdin.take().expect("stdin");
        let stdout = peer.stdout.take().expect("stdout");
        let (tx, mut rx) = mpsc::channel::<Outbound>(64);
        let host = Arc::new(RelayHost::new(tx, Api::ALL.into_iter().collect()));
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                let mut line = serde_json::to_vec(&frame).expect("frame");
                line.push(b'\n');
                stdin.write_all(&line).await.expect("write");
                stdin.flush().await.expect("flush");
            }
        });
        let answers = host.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(Inbound::HostReply { id, data, error }) = serde_json::from_str(&line) {
                    let reply = match error {
                        Some(e) => Err(e),
                        None => Ok(data.unwrap_or_default()),
                    };
                    answers.answer(id, reply);
                }
            }
        });
        (host, peer)
    });

    let mut group = c.benchmark_group("host_call");
    group.bench_function("history_page_50/embedded", |b| {
        b.to_async(&rt)
            .iter(|| async { store.history_page(&scope, &query).await.expect("page") });
    });
    group.bench_function("history_page_50/relay_hop", |b| {
        b.to_async(&rt)
            .iter(|| async { relay.0.history_page(&scope, &query).await.expect("page") });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
