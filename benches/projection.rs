//! Projection cost for a context with 20 skills of 5 files each and 10
//! attachments (4 KiB artifacts in the embedded store, read through the
//! run's grant): a cold workspace, the next turn of the same conversation,
//! and a re-projection with no change. Run: `cargo bench --bench projection`.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use harness_bridge::host::prelude::*;
use harness_bridge::host::sqlite::SqliteHost;
use harness_bridge::host::{GrantedHost, Grants, NewArtifact};
use harness_bridge::mcp::tool_names;
use harness_bridge::projection::{Binding, ProjectRequest, Target, Templates, project};
use harness_bridge::protocol::AgentRunContext;
use serde_json::json;

mod support;

fn skills() -> serde_json::Value {
    let skills: Vec<_> = (0..20)
        .map(|i| {
            let files: serde_json::Map<String, serde_json::Value> =
                (0..4).map(|f| (format!("docs/part-{f}.md"), json!("lorem ipsum ".repeat(80)))).collect();
            json!({"name": format!("skill-{i}"), "description": format!("Skill number {i}"), "content": "Steps.\n".repeat(100), "files": files})
        })
        .collect();
    json!(skills)
}

fn context(run_id: &str, text: &str, artifacts: &[String]) -> AgentRunContext {
    let attachments: Vec<_> = artifacts
        .iter()
        .enumerate()
        .map(|(i, id)| json!({"artifact_id": id, "name": format!("file-{i}.txt"), "type": "file", "mime_type": "text/plain"}))
        .collect();
    serde_json::from_value(json!({
        "run_id": run_id,
        "trigger": {"type": "message.received", "source": "platform"},
        "event": {"event_id": format!("ev-{run_id}"), "event_type": "message.received", "source": "platform", "event_time": 1_767_000_000},
        "conversation": {"conversation_id": "group-1", "bot_id": "bot-1"},
        "actor": {"actor_type": "user", "actor_id": "u1", "actor_name": "Ada"},
        "input": {"text": text, "attachments": attachments},
        "delivery": {"surface": "platform"},
        "resources": {},
        "context": {"available_apis": {"history_page": true, "artifact_metadata": true, "artifact_read": true, "state": true}},
        "state": {"conversation": {"external.session_id": "s-1"}},
        "runtime": {},
        "config": {"prompt": "Be brief.", "skills": skills()}
    }))
    .expect("bench context")
}

/// No extra MCP servers: the bench projects the bridge's own server only.
static NO_SERVERS: harness_bridge::projection::McpCatalog = std::collections::BTreeMap::new();
/// The harness's environment: no operator files to carry into its home.
static NO_ENV: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

struct Fixed<'a> {
    target: &'a Target,
    /// The turns' binding (their configuration is the same), parsed once.
    binding: &'a Binding<'a>,
    tools: &'a [&'a str],
    host: &'a GrantedHost,
}

impl<'a> Fixed<'a> {
    fn request(&self, ctx: &'a AgentRunContext, root: &'a std::path::Path) -> ProjectRequest<'a> {
        ProjectRequest {
            ctx,
            binding: self.binding,
            target: self.target,
            runner: "claude-code",
            shared: None,
            root,
            tools: self.tools,
            project: None,
            mcp_url: "http://127.0.0.1:9/mcp",
            mcp_servers: &NO_SERVERS,
            host: Some(self.host),
            env: &NO_ENV,
            owner: None,
        }
    }
}

fn bench(c: &mut Criterion) {
    let rt = support::runtime();
    let data = tempfile::tempdir().expect("temp dir");
    let store = SqliteHost::open(data.path()).expect("store");
    let artifacts: Vec<String> = rt.block_on(async {
        let mut ids = Vec::new();
        for i in 0..10 {
            let meta = store
                .put_artifact(
                    NewArtifact {
                        artifact_type: "file".into(),
                        source: "platform".into(),
                        conversation_id: Some("group-1".into()),
                        ..NewArtifact::default()
                    },
                    vec![b'a' + i as u8; 4096],
                )
                .await
                .expect("artifact");
            ids.push(meta.artifact_id);
        }
        ids
    });
    let grants = Grants::new(Arc::new(store));
    let policy = support::unlimited();
    let permissions = harness_bridge::harness::requested_permissions();
    let templates = Templates::load(None).expect("templates");
    let target: Target = harness_bridge::harness::find("claude-code")
        .expect("harness")
        .target();
    let turn1 = context("run-1", "first", &artifacts);
    let turn2 = context("run-2", "second", &artifacts);
    let open = grants
        .open_run(
            &turn1,
            "plugin:langbot/harness-bridge/claude-code",
            &permissions,
            &policy,
        )
        .expect("open");
    let host: GrantedHost = grants.granted(open.grant.clone());
    let tools = tool_names(
        &open.grant.apis,
        harness_bridge::interaction::Asking::default(),
    );
    let binding = Binding::from_config(&turn1.config).expect("the bench's binding");
    let fixed = Fixed {
        target: &target,
        binding: &binding,
        tools: &tools,
        host: &host,
    };

    let mut group = c.benchmark_group("projection_20x5_skills_10_inputs");
    group.bench_function("cold_workspace", |b| {
        b.to_async(&rt).iter_batched(
            || tempfile::tempdir().expect("root"),
            |root| {
                let (fixed, templates, turn) = (&fixed, &templates, &turn1);
                async move {
                    let p = project(&fixed.request(turn, root.path()), templates)
                        .await
                        .expect("project");
                    assert_eq!(
                        p.input_files.iter().filter(|f| f.path.is_some()).count(),
                        10
                    );
                    root
                }
            },
            BatchSize::PerIteration,
        )
    });

    let root = tempfile::tempdir().expect("root");
    let mut flip = false;
    group.bench_function("next_turn", |b| {
        b.to_async(&rt).iter(|| {
            flip = !flip;
            let request = fixed.request(if flip { &turn2 } else { &turn1 }, root.path());
            let templates = &templates;
            async move { project(&request, templates).await.expect("project") }
        })
    });
    group.bench_function("no_change", |b| {
        b.to_async(&rt).iter(|| {
            let request = fixed.request(&turn1, root.path());
            let templates = &templates;
            async move { project(&request, templates).await.expect("project") }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
