//! Workspace projection: byte-stable output, scopes, secrets, hostile input,
//! symlinks, skills, inputs, MCP config, and the JSON Schema.

use harness_bridge_testkit as common;

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use base64::Engine as _;
use common::{RUNNER, fixture};
use harness_bridge::harness;
use harness_bridge::host::prelude::*;
use harness_bridge::host::{GrantPolicy, NewArtifact};
use harness_bridge::mcp::tool_names;
use harness_bridge::projection::{
    Binding, ProjectRequest, Projection, ProjectionError, Target, Templates, WriteOutcome, project,
};
use harness_bridge::protocol::AgentRunContext;
use serde_json::{Value, json};

fn ctx(run_id: &str, text: &str, config: Value) -> AgentRunContext {
    let mut ctx = common::context(run_id, "group-1");
    ctx.input.text = Some(text.into());
    ctx.event.event_time = Some(1_767_000_000);
    ctx.config = serde_json::from_value(config).unwrap();
    ctx
}

fn target(name: &str) -> Target {
    harness::find(name).unwrap().target()
}

async fn run(
    root: &Path,
    ctx: &AgentRunContext,
    target: &Target,
) -> Result<Projection, ProjectionError> {
    let templates = Templates::load(None).unwrap();
    let tools = ["get_current_event", "history_page"];
    let binding = Binding::from_config(&ctx.config)?;
    let request = ProjectRequest {
        ctx,
        binding: &binding,
        target,
        runner: &target.harness,
        shared: None,
        root,
        tools: &tools,
        project: None,
        mcp_url: "http://127.0.0.1:9/mcp",
        mcp_servers: &operator_servers(),
        host: None,
        env: &Default::default(),
        owner: None,
    };
    project(&request, &templates).await
}

/// The extra MCP servers the operator of these tests configured.
fn operator_servers() -> harness_bridge::projection::McpCatalog {
    serde_json::from_value(json!({
        "search": {"url": "https://search.invalid/mcp", "headers": {"X-Api-Key": "SECRET-HEADER-VALUE"}},
        "langbot": {"url": "http://x"},
    }))
    .unwrap()
}

/// Every file under `dir`: relative path → (bytes, mtime).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let meta = e.metadata().unwrap();
            (
                e.path().strip_prefix(dir).unwrap().to_path_buf(),
                (std::fs::read(e.path()).unwrap(), meta.modified().unwrap()),
            )
        })
        .collect()
}

fn all_text(dir: &Path) -> String {
    snapshot(dir)
        .values()
        .map(|(bytes, _)| String::from_utf8_lossy(bytes).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn skills_config() -> Value {
    json!({
        "prompt": "Answer in one paragraph.",
        "skills": [
            {"name": "pdf-tools", "description": "Read PDFs: use for any .pdf file", "content": "Use pdftotext.", "files": {"ref/usage.md": "# usage"}},
            {"name": "release-notes", "content": "---\nname: release-notes\ndescription: custom\n---\nWrite notes."}
        ]
    })
}

#[tokio::test]
async fn identical_input_gives_identical_bytes_and_untouched_mtimes() {
    let root = common::tempdir();
    let c = ctx("run-1", "hello", skills_config());
    let first = run(root.path(), &c, &target("claude-code")).await.unwrap();
    assert!(
        first
            .report
            .files
            .iter()
            .any(|(_, o)| *o == WriteOutcome::Written)
    );
    let before = snapshot(&first.workspace);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = run(root.path(), &c, &target("claude-code")).await.unwrap();
    assert_eq!(second.workspace, first.workspace);
    assert!(
        second
            .report
            .files
            .iter()
            .all(|(_, o)| *o == WriteOutcome::Unchanged),
        "{:?}",
        second.report.files
    );
    assert_eq!(
        snapshot(&second.workspace),
        before,
        "same bytes and same mtimes"
    );
    assert_eq!(second.turn_prompt, first.turn_prompt);

    let skill =
        std::fs::read_to_string(first.workspace.join(".claude/skills/pdf-tools/SKILL.md")).unwrap();
    assert_eq!(
        skill,
        "---\nname: pdf-tools\ndescription: \"Read PDFs: use for any .pdf file\"\n---\n\nUse pdftotext.\n"
    );
    // The front matter is real YAML (a JSON string is a YAML scalar).
    let front: serde_yaml::Value =
        serde_yaml::from_str(skill.split("---").nth(1).unwrap()).unwrap();
    assert_eq!(
        front["description"],
        serde_yaml::Value::from("Read PDFs: use for any .pdf file")
    );
    assert!(
        first
            .workspace
            .join(".claude/skills/pdf-tools/ref/usage.md")
            .is_file()
    );
    let custom = std::fs::read_to_string(
        first
            .workspace
            .join(".claude/skills/release-notes/SKILL.md"),
    )
    .unwrap();
    assert!(custom.starts_with("---\nname: release-notes\ndescription: custom"));
}

#[tokio::test]
async fn instructions_are_stable_across_turns_and_earlier_runs_are_kept() {
    let root = common::tempdir();
    let t = target("claude-code");
    let mut config = skills_config();
    config["keep_runs"] = json!(2);
    let one = run(
        root.path(),
        &ctx("run-1", "first question", config.clone()),
        &t,
    )
    .await
    .unwrap();
    let mut second = ctx("run-2", "second question", config.clone());
    second.event.event_id = "ev-other".into();
    second.event.event_time = Some(1_767_000_900);
    second.actor.as_mut().unwrap().actor_name = Some("Grace".into());
    let two = run(root.path(), &second, &t).await.unwrap();
    assert_eq!(
        one.instructions, two.instructions,
        "stable instructions are byte-identical"
    );
    assert!(
        two.report
            .files
            .contains(&(".langbot/instructions.md".into(), WriteOutcome::Unchanged))
    );
    assert_ne!(one.turn_prompt, two.turn_prompt);
    assert!(two.turn_prompt.ends_with("second question"));
    assert!(one.instructions.starts_with("Answer in one paragraph.\n"));
    assert!(one.instructions.contains("mcp__langbot__history_page"));
    assert!(!one.instructions.contains("run-1") && !one.instructions.contains("first question"));

    // The first run's files moved to runs/, and only `keep_runs` are kept.
    let archived = two.workspace.join(".langbot/runs");
    let names: Vec<String> = std::fs::read_dir(&archived)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1);
    let old = std::fs::read_to_string(archived.join(&names[0]).join("turn-prompt.md")).unwrap();
    assert_eq!(old.lines().last(), Some("first question"));
    assert!(
        !archived.join(&names[0]).join("mcp.json").exists(),
        "config with secrets is never archived"
    );
    for n in 3..=5 {
        run(
            root.path(),
            &ctx(&format!("run-{n}"), "more", config.clone()),
            &t,
        )
        .await
        .unwrap();
    }
    assert_eq!(std::fs::read_dir(&archived).unwrap().count(), 2);

    // Past `keep_runs`, the oldest folder is taken over by the newest
    // archive and its files written over in place: the same inodes, the
    // previous run's bytes, nothing made or removed. Anything else a
    // harness left in it goes.
    let inode = |file: &std::path::Path| {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(file).unwrap())
    };
    let kept =
        |dir: &std::path::Path| -> std::collections::BTreeMap<String, (std::path::PathBuf, u64)> {
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .map(|folder| {
                    let file = folder.join("agent-context.json");
                    let doc: Value =
                        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
                    (
                        doc["run_id"].as_str().unwrap().to_string(),
                        (folder, inode(&file)),
                    )
                })
                .collect()
        };
    let before = kept(&archived);
    assert_eq!(before.keys().collect::<Vec<_>>(), ["run-3", "run-4"]);
    std::fs::create_dir(before["run-3"].0.join("turn-prompt.md.d")).unwrap();
    std::fs::remove_file(before["run-3"].0.join("instructions.md")).unwrap();
    std::fs::create_dir(before["run-3"].0.join("instructions.md")).unwrap();
    // (Which made run-3's folder the newer: run-4's is touched after.)
    let touch = before["run-4"].0.join("touched");
    std::fs::write(&touch, "").unwrap();
    std::fs::remove_file(&touch).unwrap();
    run(root.path(), &ctx("run-6", "more", config.clone()), &t)
        .await
        .unwrap();
    let after = kept(&archived);
    assert_eq!(after.keys().collect::<Vec<_>>(), ["run-4", "run-5"]);
    assert_eq!(
        after["run-5"].1, before["run-3"].1,
        "the oldest's file, written over"
    );
    let five = &after["run-5"].0;
    let mut names: Vec<String> = std::fs::read_dir(five)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "LANGBOT_CONTEXT.md",
            "agent-context.json",
            "instructions.md",
            "turn-prompt.md"
        ]
    );
    assert!(five.join("instructions.md").is_file());
    assert!(!before["run-3"].0.exists());
    assert_eq!(after["run-4"], before["run-4"]);
}

/// A run's end archives its files ahead of the next turn (what settle
/// does once the person has the answer): the next projection finds the
/// archive whole and leaves it as it is, and the workspace's own files
/// keep their inodes from turn to turn. Nothing is made on the way from a
/// message to its harness.
#[tokio::test]
async fn a_turn_archived_ahead_is_kept_as_it_is_by_the_next() {
    let root = common::tempdir();
    let t = target("claude-code");
    let config = json!({"keep_runs": 3});
    let one = run(root.path(), &ctx("run-1", "first", config.clone()), &t)
        .await
        .unwrap();
    harness_bridge::projection::archive_ahead(&one.dir, one.keep_runs).unwrap();
    let folder = one.workspace.join(".langbot/runs");
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let archived = names(&folder);
    assert_eq!(archived.len(), 1, "{archived:?}");
    let file = folder.join(&archived[0]).join("turn-prompt.md");
    let made = snapshot(&folder.join(&archived[0]));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap().lines().last(),
        Some("first")
    );
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let prompt = one.workspace.join(".langbot/turn-prompt.md");
    let prompt_inode = inode(&prompt);

    std::thread::sleep(std::time::Duration::from_millis(20));
    run(root.path(), &ctx("run-2", "second", config.clone()), &t)
        .await
        .unwrap();
    assert_eq!(names(&folder), archived, "no second archive of run-1");
    assert_eq!(
        snapshot(&folder.join(&archived[0])),
        made,
        "run-1's archive left as it was"
    );
    assert_eq!(inode(&prompt), prompt_inode, "the prompt written in place");
    assert!(
        std::fs::read_to_string(&prompt)
            .unwrap()
            .ends_with("second\n")
    );
    // The files a run ended without archiving are archived by the next.
    run(root.path(), &ctx("run-3", "third", config), &t)
        .await
        .unwrap();
    assert_eq!(
        names(&folder).len(),
        2,
        "run-2's archive made at run-3's start"
    );
}

#[tokio::test]
async fn scopes_remove_parts_from_every_file_and_prompt() {
    let root = common::tempdir();
    let mut c = ctx("run-1", "only the input", json!({"scopes": ["input"]}));
    c.actor.as_mut().unwrap().actor_name = Some("ZEBRA-ACTOR".into());
    c.event.data.insert("marker".into(), json!("ZEBRA-EVENT"));
    c.state
        .conversation
        .insert("external.session_id".into(), json!("ZEBRA-STATE"));
    c.runtime
        .metadata
        .insert("marker".into(), json!("ZEBRA-RUNTIME"));
    let p = run(root.path(), &c, &target("codex")).await.unwrap();
    let doc: Value = serde_json::from_slice(
        &std::fs::read(p.workspace.join(".langbot/agent-context.json")).unwrap(),
    )
    .unwrap();
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["schema", "run_id", "working_directory", "input"]);
    let text = all_text(&p.workspace) + &p.turn_prompt + &p.instructions;
    for marker in [
        "ZEBRA-ACTOR",
        "ZEBRA-EVENT",
        "ZEBRA-STATE",
        "ZEBRA-RUNTIME",
        "Current time",
    ] {
        assert!(!text.contains(marker), "{marker} leaked");
    }
    assert!(p.turn_prompt.contains("only the input"));

    // Comma-separated form, and an unknown scope is a clear error.
    let c = ctx("run-2", "x", json!({"scopes": "input, actor"}));
    let p = run(root.path(), &c, &target("codex")).await.unwrap();
    let doc: Value = serde_json::from_slice(
        &std::fs::read(p.workspace.join(".langbot/agent-context.json")).unwrap(),
    )
    .unwrap();
    assert!(doc.get("actor").is_some() && doc.get("event").is_none());
    let err = run(
        root.path(),
        &ctx("run-3", "x", json!({"scopes": ["input", "everything"]})),
        &target("codex"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown scope `everything`"),
        "{err}"
    );
}

#[tokio::test]
async fn secrets_are_never_projected() {
    let root = common::tempdir();
    let mut c = ctx(
        "run-1",
        "hi",
        json!({"api_key": "SECRET-CONFIG", "secret_keys": ["house_code"], "scopes": ["event", "actor", "state", "metadata", "runtime", "input"]}),
    );
    c.event
        .data
        .insert("bot_token".into(), json!("SECRET-EVENT"));
    c.event
        .data
        .insert("house_code".into(), json!("SECRET-CUSTOM"));
    c.actor
        .as_mut()
        .unwrap()
        .metadata
        .insert("note".into(), json!("sk-SECRETVALUEabcdefghijklmn"));
    c.state
        .actor
        .insert("password".into(), json!("SECRET-STATE"));
    c.metadata
        .insert("Authorization".into(), json!("Bearer SECRET-HEADER"));
    c.runtime.metadata.insert("max_tokens".into(), json!(4096));
    let p = run(root.path(), &c, &target("claude-code")).await.unwrap();
    let text = all_text(&p.workspace) + &p.turn_prompt + &p.instructions;
    for secret in [
        "SECRET-CONFIG",
        "SECRET-EVENT",
        "SECRET-CUSTOM",
        "SECRETVALUE",
        "SECRET-STATE",
        "SECRET-HEADER",
    ] {
        assert!(!text.contains(secret), "{secret} leaked");
    }
    assert!(text.contains("[redacted]"));
    assert!(text.contains("4096"), "non-secret numbers stay");
}

#[tokio::test]
async fn hostile_ids_never_leave_the_root() {
    let outer = common::tempdir();
    let root = outer.path().join("root");
    let long = "z".repeat(4096);
    let ids = [
        "../../etc",
        "/abs/path",
        "a\0b",
        "..",
        ".",
        "CON",
        "🚀 emoji",
        "用户",
        &long,
        "a/b",
        "a?b",
        "",
    ];
    let mut seen = std::collections::HashSet::new();
    for (i, id) in ids.iter().enumerate() {
        let mut c = ctx(&format!("run-{i}"), "x", json!({}));
        let conversation = c.conversation.as_mut().unwrap();
        conversation.conversation_id = Some(id.to_string());
        conversation.thread_id = Some(id.to_string());
        conversation.bot_id = Some(id.to_string());
        conversation.workspace_id = Some(id.to_string());
        c.context.conversation_id = None;
        let p = run(&root, &c, &target("claude-code")).await.unwrap();
        assert!(
            p.workspace.starts_with(&root),
            "{id:?} -> {}",
            p.workspace.display()
        );
        assert!(
            seen.insert(p.workspace.clone()),
            "{id:?} shares a workspace"
        );
    }
    let outside: Vec<_> = std::fs::read_dir(outer.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, ["root"], "nothing written next to the root");
    for entry in walkdir::WalkDir::new(&root) {
        let entry = entry.unwrap();
        assert!(!entry.path_is_symlink());
        assert!(
            entry
                .path()
                .canonicalize()
                .unwrap()
                .starts_with(root.canonicalize().unwrap())
        );
    }
}

#[tokio::test]
async fn hostile_skills_are_skipped_with_clear_warnings() {
    let root = common::tempdir();
    let long = "d".repeat(300);
    let config = json!({"skills": [
        {"name": "../escape", "content": "x"},
        {"name": "/abs", "content": "x"},
        {"name": "Upper", "content": "x"},
        {"name": "nul\u{0}byte", "content": "x"},
        {"name": "traversal", "content": "x", "files": {"../../outside.md": "x"}},
        {"name": "absolute", "content": "x", "files": {"/etc/passwd": "x"}},
        {"name": "sneaky", "content": "x", "files": {"a/../../b": "x"}},
        {"name": "reserved", "content": "x", "files": {"nul.txt": "x"}},
        {"name": "too-long", "content": "x", "files": {long.clone(): "x"}},
        {"name": "twice", "content": "x", "files": {"SKILL.md": "x"}},
        {"name": "fine", "content": "ok", "files": {"docs/a.md": "a"}}
    ]});
    let p = run(root.path(), &ctx("run-1", "x", config), &target("codex"))
        .await
        .unwrap();
    assert_eq!(p.report.warnings.len(), 10, "{:#?}", p.report.warnings);
    for (needle, reason) in [
        ("../escape", "skill name"),
        ("/abs", "skill name"),
        ("Upper", "skill name"),
        ("nul\\0byte", "skill name"),
        ("traversal", "`.` and `..` are not allowed"),
        ("absolute", "absolute paths"),
        ("sneaky", "`.` and `..`"),
        ("reserved", "reserved device name"),
        ("too-long", "longer than"),
        ("twice", "SKILL.md"),
    ] {
        assert!(
            p.report
                .warnings
                .iter()
                .any(|w| w.contains(needle) && w.contains(reason)),
            "no warning for {needle}: {:#?}",
            p.report.warnings
        );
    }
    let skills: Vec<String> = std::fs::read_dir(p.workspace.join(".agents/skills"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(skills, ["fine"]);
    let outside: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside.len(), 1, "only the workspace tree under the root");
}

#[tokio::test]
async fn skills_cannot_carry_a_harness_configuration() {
    let config = json!({"skills": [
        {"name": "codex-config", "content": "x", "files": {"config.toml": "model = 'other'"}},
        {"name": "claude-settings", "content": "x", "files": {"sub/Settings.JSON": "{}"}},
        {"name": "local-settings", "content": "x", "files": {"settings.local.json": "{}"}},
        {"name": "project-mcp", "content": "x", "files": {".mcp.json": "{}"}},
        {"name": "plain-mcp", "content": "x", "files": {"MCP.json": "{}"}},
        {"name": "codex-auth", "content": "x", "files": {"auth.json": "{}"}},
        {"name": "claude-auth", "content": "x", "files": {".credentials.json": "{}"}},
        {"name": "dotenv", "content": "x", "files": {"docs/.ENV": "KEY=1"}},
        {"name": "hook-folder", "content": "x", "files": {"Hooks/pre.sh": "rm -rf ~"}},
        {"name": "hooks", "content": "x"},
        {"name": "fine", "content": "ok", "files": {"docs/settings.md": "a", "config.toml.txt": "b"}}
    ]});
    for harness in ["claude-code", "codex"] {
        let root = common::tempdir();
        let t = target(harness);
        let p = run(root.path(), &ctx("run-1", "x", config.clone()), &t)
            .await
            .unwrap();
        assert_eq!(p.report.warnings.len(), 10, "{:#?}", p.report.warnings);
        for (skill, file) in [
            ("codex-config", "config.toml"),
            ("claude-settings", "Settings.JSON"),
            ("local-settings", "settings.local.json"),
            ("project-mcp", ".mcp.json"),
            ("plain-mcp", "MCP.json"),
            ("codex-auth", "auth.json"),
            ("claude-auth", ".credentials.json"),
            ("dotenv", ".ENV"),
            ("hook-folder", "Hooks"),
            ("hooks", "hooks"),
        ] {
            assert!(
                p.report
                    .warnings
                    .iter()
                    .any(|w| w.contains(&format!("skill `{skill}`"))
                        && w.contains(file)
                        && w.contains("own configuration")),
                "{harness}: no warning for {skill}: {:#?}",
                p.report.warnings
            );
        }
        let skills_dir = p.workspace.join(t.skills_dir.join("/"));
        let written: Vec<PathBuf> = snapshot(&skills_dir).into_keys().collect();
        assert_eq!(
            written,
            [
                "fine/SKILL.md",
                "fine/config.toml.txt",
                "fine/docs/settings.md"
            ]
            .map(PathBuf::from),
            "{harness}"
        );
    }
}

#[tokio::test]
async fn workspace_files_and_folders_are_the_owners_only() {
    use nix::sys::stat::{Mode, umask};
    // A permissive umask, as a service may well run with: the modes must
    // not come from it.
    let previous = umask(Mode::from_bits_truncate(0o022));
    let root = common::tempdir();
    let t = target("claude-code");
    let mut c = ctx("run-1", "x", skills_config());
    c.input.attachments = serde_json::from_value(json!([
        {"name": "notes.txt", "content": base64::engine::general_purpose::STANDARD.encode(b"inline")}
    ]))
    .unwrap();
    let first = run(root.path(), &c, &t).await;
    let second = run(root.path(), &ctx("run-2", "y", skills_config()), &t).await;
    umask(previous);
    let ws = second.unwrap().workspace;
    first.unwrap();
    for must in [
        ".langbot/inputs",
        ".langbot/runs",
        ".langbot/mcp.json",
        ".claude/skills/pdf-tools/ref/usage.md",
    ] {
        assert!(ws.join(must).exists(), "{must} was not projected");
    }
    let mut wrong = Vec::new();
    for entry in walkdir::WalkDir::new(root.path()).min_depth(1) {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        let want = if entry.file_type().is_dir() {
            0o700
        } else {
            0o600
        };
        if mode != want {
            wrong.push(format!("{} is {mode:o}", entry.path().display()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every harness gets a home of the conversation's own, with the
/// operator's files linked in (never copied) from where the CLI would
/// find them; each conversation its own; a file the operator no longer
/// has is unlinked; a link the harness planted on the way is refused.
#[tokio::test]
async fn each_conversation_has_its_own_home_with_the_operators_files_linked_in() {
    const SECRET: &str = "sk-operator-secret-in-auth-json";
    let root = common::tempdir();
    let operator = common::tempdir();
    let codex_home = operator.path().join("codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(codex_home.join("config.toml"), "model = \"m\"\n").unwrap();
    std::fs::write(
        codex_home.join("auth.json"),
        format!("{{\"key\": \"{SECRET}\"}}"),
    )
    .unwrap();
    let env: BTreeMap<String, String> = [
        ("HOME", operator.path().to_path_buf()),
        ("CODEX_HOME", codex_home.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.display().to_string()))
    .collect();
    let templates = Templates::load(None).unwrap();
    let t = target("codex");
    let project_for = |conversation: &'static str, run_id: &'static str| {
        let mut c = ctx(run_id, "x", json!({}));
        if let Some(conv) = c.conversation.as_mut() {
            conv.conversation_id = Some(conversation.into());
        }
        c.context.conversation_id = Some(conversation.into());
        let (root, env, t, templates) = (root.path(), &env, &t, &templates);
        async move {
            let binding = Binding::from_config(&c.config).unwrap();
            let request = ProjectRequest {
                ctx: &c,
                binding: &binding,
                target: t,
                runner: "codex",
                shared: None,
                root,
                tools: &[],
                project: None,
                mcp_url: "http://127.0.0.1:9/mcp",
                mcp_servers: &Default::default(),
                host: None,
                env,
                owner: None,
            };
            project(&request, templates).await
        }
    };
    let one = project_for("conv-a", "run-1").await.unwrap();
    let two = project_for("conv-b", "run-2").await.unwrap();
    let (home_one, home_two) = (one.home.clone().unwrap(), two.home.clone().unwrap());
    assert_ne!(home_one.path, home_two.path);
    for (p, home) in [(&one, &home_one), (&two, &home_two)] {
        assert_eq!(home.path, p.workspace.join(".langbot/home"));
        assert_eq!(
            home.vars,
            [
                ("HOME".to_string(), home.path.clone()),
                ("CODEX_HOME".to_string(), home.path.join(".codex")),
            ]
        );
        assert!(home.path.join(".codex").is_dir());
        assert_eq!(
            home.carried,
            [codex_home.join("config.toml"), codex_home.join("auth.json")]
        );
        for file in ["config.toml", "auth.json"] {
            let link = home.path.join(".codex").join(file);
            assert_eq!(std::fs::read_link(&link).unwrap(), codex_home.join(file));
        }
        // The secret is behind a link, in no file the bridge wrote.
        for entry in walkdir::WalkDir::new(&p.workspace) {
            let entry = entry.unwrap();
            if entry.file_type().is_file() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                assert!(!text.contains(SECRET), "{}", entry.path().display());
            }
        }
    }

    // The operator signs out: the next turn's home has no link to it.
    std::fs::remove_file(codex_home.join("auth.json")).unwrap();
    let again = project_for("conv-a", "run-3").await.unwrap();
    let home = again.home.unwrap();
    assert_eq!(home.carried, [codex_home.join("config.toml")]);
    assert!(std::fs::symlink_metadata(home.path.join(".codex/auth.json")).is_err());
    assert!(
        again
            .report
            .removed
            .contains(&".langbot/home/.codex/auth.json".to_string()),
        "{:?}",
        again.report
    );

    // A harness that made its home's folder a link gets the projection
    // refused, not its link followed.
    std::fs::remove_dir_all(home.path.join(".codex")).unwrap();
    symlink(operator.path(), home.path.join(".codex")).unwrap();
    let err = project_for("conv-a", "run-4").await.unwrap_err();
    assert!(matches!(err, ProjectionError::Symlink { .. }), "{err}");
    assert!(!operator.path().join("config.toml").exists());
}

#[tokio::test]
async fn planted_symlinks_are_refused() {
    let root = common::tempdir();
    let outside = common::tempdir();
    let c = ctx("run-1", "x", skills_config());
    let t = target("claude-code");
    let ws = run(root.path(), &c, &t).await.unwrap().workspace;

    for planted in [
        ".langbot",
        ".claude",
        ".claude/skills/pdf-tools",
        ".langbot/agent-context.json",
    ] {
        let path = ws.join(planted);
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        symlink(outside.path(), &path).unwrap();
        let err = run(root.path(), &ctx("run-2", "x", skills_config()), &t)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProjectionError::Symlink { .. }),
            "{planted}: {err}"
        );
        assert!(
            err.to_string()
                .contains("refusing to write through symlink"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "{planted}: wrote outside"
        );
        std::fs::remove_file(&path).unwrap();
        run(root.path(), &c, &t).await.unwrap();
    }
}

/// Every file and folder under `dir` (not following links): relative path
/// → the file's bytes, or `None` for a folder or link.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let bytes = e
                .file_type()
                .is_file()
                .then(|| std::fs::read(e.path()).unwrap());
            (e.path().strip_prefix(dir).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

#[tokio::test]
async fn a_process_swapping_folders_for_links_during_projections_never_gets_the_bridge_outside() {
    use nix::fcntl::{OFlag, RenameFlags, open, renameat2};
    use nix::sys::stat::Mode;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::time::Duration;

    let root = common::tempdir();
    let outside = common::tempdir();
    let t = target("claude-code");
    // Two skills, then one without its extra file: every other turn removes
    // a skill folder and a file, and every turn archives the previous run
    // and prunes the archive (keep_runs 1).
    let mut both = skills_config();
    both["keep_runs"] = json!(1);
    let only_pdf =
        json!({"keep_runs": 1, "skills": [{"name": "pdf-tools", "content": "Use pdftotext."}]});
    let ws = run(root.path(), &ctx("run-0", "x", both.clone()), &t)
        .await
        .unwrap()
        .workspace;

    // What the bridge would write, overwrite or remove if it followed one
    // of the links: sentinels with those names.
    for (path, bytes) in [
        ("agent-context.json", "sentinel"),
        ("skills.json", "sentinel"),
        ("mcp.json", "sentinel"),
        ("runs/old-1/turn-prompt.md", "sentinel"),
        ("runs/old-2/turn-prompt.md", "sentinel"),
        ("release-notes/SKILL.md", "sentinel"),
        ("pdf-tools/SKILL.md", "sentinel"),
        ("ref/usage.md", "sentinel"),
        ("SKILL.md", "sentinel"),
    ] {
        let path = outside.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let before = tree(outside.path());

    // Each folder has a link to the outside folder beside it; the flipper
    // exchanges the two names through handles to the real parent folders,
    // so it never touches the outside folder itself.
    let dir = |path: PathBuf| {
        open(
            &path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    };
    let targets = [
        (ws.clone(), ".langbot"),
        (ws.join(".claude"), "skills"),
        (ws.join(".claude/skills"), "pdf-tools"),
    ]
    .map(|(parent, name)| {
        symlink(outside.path(), parent.join(format!("{name}.flip"))).unwrap();
        (dir(parent), name)
    });
    // Which folder the flipper swaps during the next projection (0-2), or
    // none (3), so that some projections get through and later ones have
    // skills to remove; `STOP` ends it.
    const QUIET: usize = 3;
    const STOP: usize = 4;
    let phase = Arc::new(AtomicUsize::new(QUIET));
    let flips = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (phase, flips) = (phase.clone(), flips.clone());
        std::thread::spawn(move || {
            loop {
                match phase.load(Ordering::Relaxed) {
                    STOP => break,
                    QUIET => std::thread::sleep(Duration::from_micros(100)),
                    target => {
                        let (parent, name) = &targets[target];
                        let link = format!("{name}.flip");
                        // Twice: each round ends with the real folder back.
                        for _ in 0..2 {
                            renameat2(
                                parent,
                                *name,
                                parent,
                                link.as_str(),
                                RenameFlags::RENAME_EXCHANGE,
                            )
                            .unwrap();
                        }
                        flips.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };

    // Blocks of ten turns, alternately with both skills and with one (so
    // a block removes a skill folder and a file); the last turn of each
    // block runs without the flipper.
    let (mut ok, mut failed) = (0, 0);
    for i in 0..1200 {
        let config = if i / 10 % 2 == 0 { &both } else { &only_pdf };
        phase.store(if i % 10 == 9 { QUIET } else { i % 3 }, Ordering::Relaxed);
        match run(
            root.path(),
            &ctx(&format!("run-{}", i + 1), "x", config.clone()),
            &t,
        )
        .await
        {
            Ok(_) => ok += 1,
            Err(_) => failed += 1,
        }
    }
    phase.store(STOP, Ordering::Relaxed);
    flipper.join().unwrap();

    let after = tree(outside.path());
    let changed: std::collections::BTreeSet<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    assert!(
        changed.is_empty(),
        "written, changed or removed outside the workspace: {changed:?} ({ok} projections went through, {failed} failed)"
    );
    assert!(flips.load(Ordering::Relaxed) > 0);
    assert!(ok > 0 && failed > 0, "{ok} went through, {failed} failed");
}

#[tokio::test]
async fn skills_no_longer_authorized_are_removed_and_nothing_else() {
    let root = common::tempdir();
    let t = target("claude-code");
    let p = run(root.path(), &ctx("run-1", "x", skills_config()), &t)
        .await
        .unwrap();
    let ws = p.workspace;
    std::fs::write(ws.join("notes.txt"), "mine").unwrap();
    std::fs::create_dir_all(ws.join(".claude/skills/users-own")).unwrap();
    std::fs::write(ws.join(".claude/skills/users-own/SKILL.md"), "mine").unwrap();

    let only_pdf = json!({"skills": [{"name": "pdf-tools", "description": "Read PDFs: use for any .pdf file", "content": "Use pdftotext."}]});
    let p = run(root.path(), &ctx("run-2", "x", only_pdf), &t)
        .await
        .unwrap();
    assert!(!ws.join(".claude/skills/release-notes").exists());
    assert!(
        !ws.join(".claude/skills/pdf-tools/ref/usage.md").exists(),
        "a file the skill dropped is removed"
    );
    assert!(ws.join(".claude/skills/pdf-tools/SKILL.md").is_file());
    assert!(ws.join(".claude/skills/users-own/SKILL.md").is_file());
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(
        p.report
            .removed
            .contains(&".claude/skills/release-notes".to_string()),
        "{:?}",
        p.report.removed
    );
}

/// A skill folder the bridge did not write (a project's own, tracked in
/// its repository) is neither overwritten by an authorized skill of the
/// same name nor removed when the binding drops it; the skill is skipped
/// with a warning and the others are written.
#[tokio::test]
async fn a_skill_folder_the_bridge_did_not_write_is_left_as_it_is() {
    let root = common::tempdir();
    let t = target("claude-code");
    let p = run(root.path(), &ctx("run-1", "x", json!({})), &t)
        .await
        .unwrap();
    let ws = p.workspace;
    let own = ws.join(".claude/skills/pdf-tools/SKILL.md");
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, "the project's own").unwrap();

    let p = run(root.path(), &ctx("run-2", "x", skills_config()), &t)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "the project's own");
    assert!(!ws.join(".claude/skills/pdf-tools/ref").exists());
    assert!(ws.join(".claude/skills/release-notes/SKILL.md").is_file());
    assert!(
        p.report
            .warnings
            .iter()
            .any(|w| w.contains("skill `pdf-tools` skipped")
                && w.contains(".claude/skills/pdf-tools is already in the workspace")),
        "{:#?}",
        p.report.warnings
    );

    let p = run(root.path(), &ctx("run-3", "x", json!({})), &t)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "the project's own");
    assert!(!ws.join(".claude/skills/release-notes").exists());
    assert_eq!(p.report.removed, [".claude/skills/release-notes"]);
}

#[tokio::test]
async fn output_validates_against_the_schema() {
    let schema: Value =
        serde_json::from_str(include_str!("../projections/agent-context.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let root = common::tempdir();
    let everything = json!({"scopes": ["trigger", "event", "conversation", "actor", "subject", "input", "delivery", "resources", "context", "state", "runtime", "adapter", "metadata"]});
    for config in [json!({}), json!({"scopes": ["input"]}), everything] {
        let mut c = ctx("run-1", "x", config);
        c.input.attachments.push(
            serde_json::from_value(json!({"name": "a.txt", "url": "https://example.invalid/a"}))
                .unwrap(),
        );
        let p = run(root.path(), &c, &target("codex")).await.unwrap();
        let doc: Value = serde_json::from_slice(
            &std::fs::read(p.workspace.join(".langbot/agent-context.json")).unwrap(),
        )
        .unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
    // The schema is not a rubber stamp.
    assert!(
        !validator.is_valid(&json!({"schema": "other", "run_id": "r", "working_directory": "/w"}))
    );
    assert!(!validator.is_valid(&json!({"schema": "langbot.agent_runner.external_harness_context.v1", "run_id": "r", "working_directory": "/w", "config": {}})));
}

#[tokio::test]
async fn input_files_are_copied_through_the_grant_with_stable_ids() {
    let f = fixture();
    let root = common::tempdir();
    let art = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                name: Some("report.csv".into()),
                mime_type: Some("text/csv".into()),
                source: "platform".into(),
                conversation_id: Some("group-1".into()),
                ..NewArtifact::default()
            },
            b"a,b\n1,2\n".to_vec(),
        )
        .await
        .unwrap();
    let big = f
        .store
        .put_artifact(
            NewArtifact {
                artifact_type: "file".into(),
                source: "platform".into(),
                conversation_id: Some("group-1".into()),
                ..NewArtifact::default()
            },
            vec![7u8; 2048],
        )
        .await
        .unwrap();
    let inline = base64::engine::general_purpose::STANDARD.encode(b"inline bytes");
    let mut c = ctx("run-1", "see files", json!({"max_input_bytes": 1024}));
    c.input.attachments = serde_json::from_value(json!([
        {"artifact_id": art.artifact_id, "name": "report.csv", "type": "file", "mime_type": "text/csv"},
        {"artifact_id": big.artifact_id, "name": "big.bin"},
        {"name": "../../evil <name>.png", "type": "image", "content": format!("data:image/png;base64,{inline}")},
        {"name": "remote.pdf", "url": "https://example.invalid/remote.pdf"}
    ]))
    .unwrap();
    let open = f
        .grants
        .open_run(
            &c,
            RUNNER,
            &common::all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let host = f.grants.granted(open.grant.clone());
    let templates = Templates::load(None).unwrap();
    let t = target("claude-code");
    let tools = tool_names(&open.grant.apis, common::ALL_ASKING);
    let binding = Binding::from_config(&c.config).unwrap();
    let request = ProjectRequest {
        ctx: &c,
        binding: &binding,
        target: &t,
        runner: "claude-code",
        shared: None,
        root: root.path(),
        tools: &tools,
        project: None,
        mcp_url: "http://127.0.0.1:9/mcp",
        mcp_servers: &Default::default(),
        host: Some(&host),
        env: &Default::default(),
        owner: None,
    };
    let p = project(&request, &templates).await.unwrap();

    let files = &p.input_files;
    assert_eq!(files.len(), 4);
    assert_eq!(
        std::fs::read(p.workspace.join(files[0].path.as_ref().unwrap())).unwrap(),
        b"a,b\n1,2\n"
    );
    assert!(
        files[1].path.is_none() && files[1].note.as_deref().unwrap().contains("copy limit"),
        "{:?}",
        files[1]
    );
    let evil = files[2].path.as_ref().unwrap();
    assert!(
        evil.starts_with(".langbot/inputs/f_") && !evil.contains(".."),
        "{evil}"
    );
    assert_eq!(
        std::fs::read(p.workspace.join(evil)).unwrap(),
        b"inline bytes"
    );
    assert_eq!(files[2].kind, "image");
    assert!(
        files[3]
            .note
            .as_deref()
            .unwrap()
            .contains("does not download")
    );
    assert!(p.turn_prompt.starts_with("# Input Files\n<file>\n<id>f_"));
    assert!(
        p.turn_prompt
            .contains("<name>../../evil &lt;name&gt;.png</name>"),
        "{}",
        p.turn_prompt
    );
    let audited = f.store.audit_tail(Some("run-1".into()), 20).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|r| r.entry.action == "artifact_read" && r.entry.outcome == "ok")
    );

    // Next turn, same attachment: same id, no new host call for it.
    f.grants.close_run("run-1");
    let mut c2 = ctx("run-2", "again", json!({"max_input_bytes": 1024}));
    c2.input.attachments = c.input.attachments[..1].to_vec();
    let open = f
        .grants
        .open_run(
            &c2,
            RUNNER,
            &common::all_permissions(),
            &GrantPolicy::default(),
        )
        .unwrap();
    let host = f.grants.granted(open.grant.clone());
    let request = ProjectRequest {
        ctx: &c2,
        host: Some(&host),
        env: &Default::default(),
        owner: None,
        ..request
    };
    let again = project(&request, &templates).await.unwrap();
    assert_eq!(again.input_files[0].id, files[0].id);
    assert_eq!(open.grant.calls(), 0, "already copied: no host call");
}

/// A binding is written by whoever sends the run: it may name one of the
/// operator's servers, never define one (a server is a program that runs
/// with the harness's secrets).
#[tokio::test]
async fn a_binding_cannot_define_an_mcp_server() {
    let root = common::tempdir();
    for harness in ["claude-code", "codex"] {
        let hostile = json!({"mcp_servers": {"x": {"command": "/bin/sh", "args": ["-c", "id"], "env": {"CODEX_HOME": "/tmp/planted"}}}});
        let err = run(root.path(), &ctx("run-1", "x", hostile), &target(harness))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot define one (command, url, env)"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(root.path()).unwrap().count(),
            0,
            "nothing is written for a refused binding"
        );
    }
}

#[tokio::test]
async fn mcp_config_matches_each_harness() {
    let root = common::tempdir();
    let config = json!({"mcp_servers": ["search"]});
    let claude = run(
        root.path(),
        &ctx("run-1", "x", config.clone()),
        &target("claude-code"),
    )
    .await
    .unwrap();
    let path = claude.workspace.join(".langbot/mcp.json");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        doc["mcpServers"]["langbot"]["url"],
        "http://127.0.0.1:9/mcp"
    );
    assert_eq!(
        doc["mcpServers"]["langbot"]["headers"]["Authorization"],
        "Bearer ${LANGBOT_MCP_TOKEN}"
    );
    assert_eq!(
        doc["mcpServers"]["search"]["headers"]["X-Api-Key"],
        "SECRET-HEADER-VALUE"
    );

    let codex = run(root.path(), &ctx("run-1", "x", config), &target("codex"))
        .await
        .unwrap();
    assert!(!codex.workspace.join(".langbot/mcp.json").exists());
    assert!(
        codex.mcp.overrides.contains(
            &"mcp_servers.langbot.bearer_token_env_var=\"LANGBOT_MCP_TOKEN\"".to_string()
        )
    );
    assert!(
        codex
            .mcp
            .overrides
            .iter()
            .all(|o| !o.contains("SECRET-HEADER-VALUE")),
        "{:?}",
        codex.mcp.overrides
    );
    assert_eq!(
        codex.mcp.child_env["LANGBOT_MCP_SEARCH_X_API_KEY"],
        "SECRET-HEADER-VALUE"
    );

    let err = run(
        root.path(),
        &ctx("run-1", "x", json!({"mcp_servers": "langbot"})),
        &target("codex"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("the bridge's own server"), "{err}");
    let err = run(
        root.path(),
        &ctx("run-1", "x", json!({"mcp_servers": ["shell"]})),
        &target("codex"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains(
            "`shell` is not an MCP server the operator configured (configured: langbot, search)"
        ),
        "{err}"
    );
    let err = run(
        root.path(),
        &ctx("run-1", "x", json!({"skills": "not a list"})),
        &target("codex"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("binding config: at `skills`"),
        "{err}"
    );
}

#[tokio::test]
async fn operator_templates_override_the_built_ins() {
    let dir = common::tempdir();
    std::fs::write(
        dir.path().join("turn-prompt.md"),
        "Q: {{ input_text }} ({{ harness }})",
    )
    .unwrap();
    let templates = Templates::load(Some(dir.path())).unwrap();
    let root = common::tempdir();
    let c = ctx("run-1", "why?", json!({}));
    let t = target("codex");
    let binding = Binding::from_config(&c.config).unwrap();
    let request = ProjectRequest {
        ctx: &c,
        binding: &binding,
        target: &t,
        runner: "codex",
        shared: None,
        root: root.path(),
        tools: &[],
        project: None,
        mcp_url: "http://127.0.0.1:9/mcp",
        mcp_servers: &Default::default(),
        host: None,
        env: &Default::default(),
        owner: None,
    };
    let p = project(&request, &templates).await.unwrap();
    assert_eq!(p.turn_prompt, "Q: why? (codex)");
    std::fs::write(dir.path().join("instructions.md"), "{% if %}").unwrap();
    let err = Templates::load(Some(dir.path())).err().unwrap();
    assert!(
        err.to_string().starts_with("template `instructions.md`"),
        "{err}"
    );
}

#[test]
fn cli_project_prints_the_workspace_and_files() {
    let data = common::tempdir();
    let bin = env!("CARGO_BIN_EXE_harness-bridge");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/context.json");
    let out = std::process::Command::new(bin)
        .args([
            "--data-dir",
            data.path().to_str().unwrap(),
            "project",
            "--context",
            example,
            "--harness",
            "codex",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with(&format!("workspace: {}/workspaces/", data.path().display())),
        "{text}"
    );
    assert!(
        text.contains("written    .langbot/agent-context.json"),
        "{text}"
    );
    assert!(
        text.contains("mcp_servers.langbot.url=\"http://127.0.0.1:8765/mcp\""),
        "{text}"
    );
    let out = std::process::Command::new(bin)
        .args([
            "--data-dir",
            data.path().to_str().unwrap(),
            "project",
            "--context",
            example,
            "--harness",
            "vim",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let known: Vec<String> = common::built_in_harnesses()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let unknown = format!("unknown harness `vim` (known: {})", known.join(", "));
    assert!(err.contains(&unknown), "{err}");

    // The specs in force: an operator's folder adds an agent to project
    // for, in its family's way (instructions in its file, MCP servers in
    // the protocol, so no config file).
    let adapters = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/adapters");
    let out = std::process::Command::new(bin)
        .args([
            "--data-dir",
            data.path().to_str().unwrap(),
            "project",
            "--context",
            example,
            "--harness",
            "claude-acp",
            "--adapters",
            adapters,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("written    CLAUDE.md"), "{text}");
    assert!(!text.contains("mcp.json"), "{text}");
}
