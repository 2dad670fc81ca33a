//! Knowledge bases of the embedded host: operator folders indexed into the
//! store's full-text index (incrementally, by digest) and searched through
//! a run's grant, so `retrieve_knowledge` works without LangBot.

use harness_bridge_testkit as common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{RUNNER, all_permissions, context, fixture};
use harness_bridge::host::calls::{ListKnowledgeCall, RetrieveKnowledgeCall};
use harness_bridge::host::sqlite::KnowledgeReport;
use harness_bridge::host::{Api, GrantPolicy};
use harness_bridge::protocol::ErrorCode;
use serde_json::{Value, json};

fn report(indexed: usize, unchanged: usize, removed: usize, skipped: usize) -> KnowledgeReport {
    KnowledgeReport {
        indexed,
        unchanged,
        removed,
        skipped,
    }
}

fn retrieve(kb_id: &str, query: &str) -> RetrieveKnowledgeCall {
    RetrieveKnowledgeCall {
        kb_id: kb_id.into(),
        query: query.into(),
        top_k: 5,
    }
}

fn texts(results: &[Value]) -> Vec<String> {
    results
        .iter()
        .map(|r| r["content"][0]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn folders_are_indexed_by_digest_and_searched_through_the_grant() {
    let f = fixture();
    let docs = common::tempdir();
    let outside = common::tempdir();
    std::fs::write(
        docs.path().join("deploy.md"),
        "# Deploys\n\nDeployments freeze on the last Friday of each month.\n\nRollbacks need two approvals.",
    )
    .unwrap();
    std::fs::create_dir(docs.path().join("zh")).unwrap();
    std::fs::write(docs.path().join("zh/发布.md"), "发布流程：每周三上线。").unwrap();
    std::fs::write(docs.path().join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
    std::fs::create_dir(docs.path().join(".git")).unwrap();
    std::fs::write(docs.path().join(".git/config"), "Friday secret config").unwrap();
    std::fs::write(
        outside.path().join("secret.md"),
        "Friday outside the folder",
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.md"),
        docs.path().join("link.md"),
    )
    .unwrap();
    nix::unistd::mkfifo(
        &docs.path().join("pipe.md"),
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let bases = BTreeMap::from([("docs".to_string(), docs.path().to_path_buf())]);

    // Skipped: the link, the binary file and the FIFO (never waited on).
    let first = f.store.index_knowledge(bases.clone()).await.unwrap();
    assert_eq!(first, [("docs".to_string(), report(2, 0, 0, 3))]);
    let again = f.store.index_knowledge(bases.clone()).await.unwrap();
    assert_eq!(
        again,
        [("docs".to_string(), report(0, 2, 0, 3))],
        "nothing changed"
    );

    let run = f.open("run-kb", "c1", &GrantPolicy::default());
    assert!(run.grant.apis.contains(&Api::KnowledgeRetrieve));
    let host = f.grants.granted(run.grant.clone());
    let listed = host.call(&ListKnowledgeCall {}).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["kb_id"], "docs");

    let found = host.call(&retrieve("docs", "freeze friday")).await.unwrap();
    assert_eq!(
        texts(&found),
        [
            "# Deploys\n\nDeployments freeze on the last Friday of each month.\n\nRollbacks need two approvals."
        ]
    );
    assert_eq!(found[0]["metadata"]["file"], "deploy.md");
    // Nothing from the link, the hidden folder or the binary file.
    let all: String = texts(&host.call(&retrieve("docs", "friday")).await.unwrap()).concat();
    assert!(!all.contains("outside") && !all.contains("secret"), "{all}");
    let zh = host.call(&retrieve("docs", "上线")).await.unwrap();
    assert_eq!(texts(&zh), ["发布流程：每周三上线。"]);

    // A changed file is indexed again, a removed one leaves the index.
    std::fs::write(
        docs.path().join("deploy.md"),
        "Deployments now freeze on Thursdays.",
    )
    .unwrap();
    std::fs::remove_file(docs.path().join("zh/发布.md")).unwrap();
    let third = f.store.index_knowledge(bases.clone()).await.unwrap();
    assert_eq!(third, [("docs".to_string(), report(1, 0, 1, 3))]);
    let found = host.call(&retrieve("docs", "freeze")).await.unwrap();
    assert_eq!(texts(&found), ["Deployments now freeze on Thursdays."]);
    assert!(
        host.call(&retrieve("docs", "上线"))
            .await
            .unwrap()
            .is_empty()
    );

    // A base the host does not have is refused before any search, and audited.
    let err = host
        .call(&retrieve("handbook", "freeze"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized, "{err}");
    let row = f.store.audit_tail(Some("run-kb".into()), 1).await.unwrap();
    assert_eq!(
        (
            row[0].entry.action.as_str(),
            row[0].entry.outcome.as_str(),
            row[0].entry.resource.as_str()
        ),
        ("retrieve_knowledge", "unauthorized", "knowledge:handbook")
    );
}

/// A hard link in a knowledge folder (a regular file, which no
/// `O_NOFOLLOW` refuses) to a file outside it is skipped like a symlink:
/// counted, and its words found by no search. A file once indexed that
/// becomes a link leaves the index.
#[tokio::test]
async fn a_hard_link_in_a_knowledge_folder_is_not_indexed() {
    let f = fixture();
    let docs = common::tempdir();
    let outside = common::tempdir();
    std::fs::write(docs.path().join("own.md"), "Our own runbook words.").unwrap();
    std::fs::write(docs.path().join("later.md"), "Quarterly figures draft.").unwrap();
    std::fs::write(outside.path().join("key.md"), "Zanzibar private passphrase").unwrap();
    std::fs::hard_link(outside.path().join("key.md"), docs.path().join("key.md")).unwrap();
    let bases = BTreeMap::from([("docs".to_string(), docs.path().to_path_buf())]);
    let first = f.store.index_knowledge(bases.clone()).await.unwrap();
    assert_eq!(first, [("docs".to_string(), report(2, 0, 0, 1))]);
    // An indexed file that gains a second name is dropped.
    std::fs::hard_link(docs.path().join("later.md"), outside.path().join("copy.md")).unwrap();
    let again = f.store.index_knowledge(bases).await.unwrap();
    assert_eq!(again, [("docs".to_string(), report(0, 1, 1, 2))]);

    let run = f.open("run-kb-link", "c1", &GrantPolicy::default());
    let host = f.grants.granted(run.grant.clone());
    for words in ["zanzibar passphrase", "quarterly figures"] {
        let found = host.call(&retrieve("docs", words)).await.unwrap();
        assert!(found.is_empty(), "{words}: {found:?}");
    }
    let own = host.call(&retrieve("docs", "runbook")).await.unwrap();
    assert_eq!(texts(&own), ["Our own runbook words."]);
}

/// A context may narrow a run to some of the host's bases, never add one.
#[tokio::test]
async fn a_context_narrows_the_hosts_bases_and_adds_none() {
    let f = fixture();
    let (a, b) = (common::tempdir(), common::tempdir());
    std::fs::write(a.path().join("a.md"), "alpha notes").unwrap();
    std::fs::write(b.path().join("b.md"), "beta notes").unwrap();
    let bases = BTreeMap::from([
        ("a".to_string(), a.path().to_path_buf()),
        ("b".to_string(), b.path().to_path_buf()),
    ]);
    f.store.index_knowledge(bases).await.unwrap();
    let mut ctx = context("run-narrow", "c1");
    ctx.resources.knowledge_bases =
        serde_json::from_value(json!([{"kb_id": "b"}, {"kb_id": "not-the-hosts"}])).unwrap();
    let run = f
        .grants
        .open_run(&ctx, RUNNER, &all_permissions(), &GrantPolicy::default())
        .unwrap();
    let ids: Vec<&str> = run
        .grant
        .knowledge_bases
        .iter()
        .map(|k| k.kb_id.as_str())
        .collect();
    assert_eq!(ids, ["b"]);
    let host = f.grants.granted(run.grant.clone());
    assert_eq!(
        host.call(&retrieve("a", "notes")).await.unwrap_err().code,
        ErrorCode::Unauthorized
    );
    assert_eq!(
        texts(&host.call(&retrieve("b", "notes")).await.unwrap()),
        ["beta notes"]
    );
}

/// A folder that cannot be read stops the indexing with its base named.
#[tokio::test]
async fn a_missing_folder_is_an_error_naming_its_base() {
    let f = fixture();
    let bases = BTreeMap::from([("gone".to_string(), PathBuf::from("/nonexistent/kb-folder"))]);
    let err = f.store.index_knowledge(bases).await.unwrap_err();
    assert!(err.message.contains("knowledge base `gone`"), "{err}");
}
