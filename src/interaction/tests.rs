use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::protocol::{InteractionKind, InteractionSubmission};

const NOW: i64 = 1_800_000_000;
const BOTH: Asking = Asking {
    questions: true,
    approvals: true,
    publish: false,
};
/// Whoever asked in these tests: no actor.
const ASKER: Answerer<'static> = Answerer {
    id: None,
    approvers: &[],
};

fn submission(id: &str, action: Option<&str>, values: Value) -> InteractionSubmission {
    InteractionSubmission {
        interaction_id: id.into(),
        action_id: action.map(str::to_string),
        values: values.as_object().cloned().unwrap_or_default(),
        submitted_at: None,
    }
}

#[test]
fn a_numbered_reply_picks_the_choice_and_words_stand_as_written() {
    let q = Pending::question(
        "r1",
        "Which colour?".into(),
        vec!["red".into(), "blue".into()],
        NOW,
    );
    let Reply::Answer { prompt, approved } = reply(Some(&q), None, " 2 ", ASKER, NOW + 5) else {
        panic!("an answer")
    };
    assert!(prompt.contains("Their answer: blue"), "{prompt}");
    assert_eq!(approved, None);
    let Reply::Answer { prompt, .. } = reply(Some(&q), None, "green, please", ASKER, NOW) else {
        panic!("an answer")
    };
    assert!(prompt.contains("Their answer: green, please"), "{prompt}");
    let Reply::Answer { prompt, .. } = reply(Some(&q), None, "7", ASKER, NOW) else {
        panic!("an answer")
    };
    assert!(prompt.contains("Their answer: 7"), "{prompt}");
}

#[test]
fn an_approval_allows_that_one_action_once_and_nothing_else() {
    let input = json!({"command": "rm -rf build", "description": "clean"});
    let asked = Interactions::default();
    asked.open("r1", None, BOTH);
    let first = asked.decide("r1", "Bash", &input, NOW);
    assert!(matches!(
        first,
        Decision::Deny {
            interrupt: false,
            ..
        }
    ));
    let second = asked.decide("r1", "Write", &json!({"file_path": "x"}), NOW);
    assert!(matches!(
        second,
        Decision::Deny {
            interrupt: true,
            ..
        }
    ));
    let pending = asked.close("r1").expect("a request");
    assert!(
        pending
            .request("Claude Code")
            .title
            .contains("run `rm -rf build`")
    );

    let Reply::Answer { approved, .. } = reply(Some(&pending), None, "Approve!", ASKER, NOW + 60)
    else {
        panic!("an answer")
    };
    let answering = Interactions::default();
    answering.open("r2", approved, BOTH);
    // Same action, keys in another order: the same action.
    let same = json!({"description": "clean", "command": "rm -rf build"});
    let other = json!({"command": "rm -rf /", "description": "clean"});
    assert!(matches!(
        answering.decide("r2", "Bash", &other, NOW),
        Decision::Deny { .. }
    ));
    assert_eq!(
        answering.close("r2").map(|p| p.ask),
        Some(Pending::approval("r2", "Bash", &other, NOW, None).ask)
    );
    answering.open("r3", Some(fingerprint("Bash", &input)), BOTH);
    assert_eq!(
        answering.decide("r3", "Bash", &same, NOW),
        Decision::Allow(same.clone())
    );
    // Once only.
    assert!(matches!(
        answering.decide("r3", "Bash", &same, NOW),
        Decision::Deny { .. }
    ));
}

#[test]
fn anything_but_an_approval_denies_and_passes_the_words_on() {
    let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
    for (text, denied, said) in [
        ("deny", true, false),
        ("No.", true, false),
        ("use dir instead", true, true),
    ] {
        let Reply::Answer { prompt, approved } = reply(Some(&pending), None, text, ASKER, NOW)
        else {
            panic!("an answer")
        };
        assert_eq!(approved, None, "{text}");
        assert_eq!(prompt.contains("Do not do it"), denied, "{prompt}");
        assert_eq!(prompt.contains(text), said, "{prompt}");
    }
}

#[test]
fn a_card_answers_only_its_own_open_request() {
    let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
    let card = submission(&pending.id, Some("approve"), json!({}));
    assert!(matches!(
        reply(Some(&pending), Some(&card), "approve", ASKER, NOW),
        Reply::Answer {
            approved: Some(_),
            ..
        }
    ));
    let other = submission("approve-r0", Some("approve"), json!({}));
    assert!(matches!(
        reply(Some(&pending), Some(&other), "approve", ASKER, NOW),
        Reply::Stale(_)
    ));
    let late = reply(
        Some(&pending),
        Some(&card),
        "approve",
        ASKER,
        pending.expires_at,
    );
    assert!(matches!(late, Reply::Stale(_)));
    assert!(!late.clears());
    assert!(matches!(
        reply(None, Some(&card), "approve", ASKER, NOW),
        Reply::Stale(_)
    ));
    let q = Pending::question("r1", "Which?".into(), vec!["a".into(), "b".into()], NOW);
    let picked = submission(&q.id, Some("submit"), json!({"answer": "2"}));
    let Reply::Answer { prompt, .. } = reply(Some(&q), Some(&picked), "submit", ASKER, NOW) else {
        panic!("an answer")
    };
    assert!(prompt.contains("Their answer: b"), "{prompt}");
}

#[test]
fn a_lapsed_request_is_cleared_and_the_message_goes_through() {
    let q = Pending::question("r1", "Which?".into(), Vec::new(), NOW);
    let late = reply(Some(&q), None, "hello", ASKER, q.expires_at + 1);
    assert_eq!(late, Reply::Unrelated { expired: true });
    assert!(late.clears());
    assert_eq!(
        reply(None, None, "hello", ASKER, NOW),
        Reply::Unrelated { expired: false }
    );
}

#[test]
fn claude_codes_own_question_tool_becomes_a_question() {
    let asked = Interactions::default();
    asked.open("r1", None, BOTH);
    let input = json!({"questions": [{"question": "Tabs or spaces?", "header": "Style",
        "options": [{"label": "Tabs", "description": ""}, {"label": "Spaces", "description": ""}],
        "multiSelect": false}]});
    asked.decide("r1", CLAUDE_QUESTION_TOOL, &input, NOW);
    let pending = asked.close("r1").expect("asked");
    assert_eq!(
        pending.ask,
        Ask::Question {
            question: "Tabs or spaces?".into(),
            choices: vec!["Tabs".into(), "Spaces".into()]
        }
    );
    let text = pending.fallback_text("Claude Code");
    assert!(text.contains("1. Tabs\n2. Spaces"), "{text}");
}

#[test]
fn one_question_per_turn_and_bad_questions_are_refused() {
    let asked = Interactions::default();
    assert!(asked.ask("gone", "Q?", &[], NOW).is_err());
    asked.open("r1", None, BOTH);
    assert!(asked.ask("r1", "  ", &[], NOW).is_err());
    assert!(asked.ask("r1", "Q?", &["".into()], NOW).is_err());
    assert!(
        asked
            .ask("r1", "Q?", &vec!["c".to_string(); MAX_CHOICES + 1], NOW)
            .is_err()
    );
    assert!(asked.ask("r1", "Q?", &["a".into()], NOW).is_ok());
    assert!(asked.ask("r1", "Again?", &[], NOW).is_err());
    let pending = asked.close("r1").expect("asked");
    let stored = serde_json::to_value(&pending).unwrap();
    assert_eq!(Pending::from_state(Some(&stored)), Some(pending));
    assert_eq!(Pending::from_state(Some(&Value::Null)), None);
}

fn publish_request() -> PublishRequest {
    PublishRequest {
        project: "web".into(),
        branch: "chat/ada".into(),
        remote: "https://example.org/web.git".into(),
        head: "0123456789abcdef0123456789abcdef01234567".into(),
        commits: vec!["0123456 Fix the header".into()],
        more_commits: 2,
        files: 2,
        added: 14,
        removed: 3,
    }
}

#[test]
fn a_publish_card_shows_what_goes_and_only_an_approval_carries_its_commit() {
    let pending = Pending::publish("r1", publish_request(), NOW);
    let card = pending.request("Claude Code");
    assert_eq!(card.kind, InteractionKind::Confirmation);
    assert_eq!(
        card.title,
        "Claude Code asks to publish branch `chat/ada` to https://example.org/web.git"
    );
    let shown = card.description.unwrap_or_default();
    assert!(
        shown.starts_with("3 commits on `chat/ada`, 2 files changed, +14 −3:")
            && shown.contains("- 0123456 Fix the header\n- … and 2 more")
            && shown.contains("pushes commit 0123456789ab and nothing after it"),
        "{shown}"
    );
    assert!(
        card.fallback_text
            .contains("Reply \"approve\" to publish it")
    );
    // Kept in the state and read back as it was.
    let kept = serde_json::to_value(&pending).unwrap();
    assert_eq!(Pending::from_state(Some(&kept)), Some(pending.clone()));

    let yes = submission(&pending.id, Some("approve"), json!({}));
    let Reply::Answer { approved, .. } = reply(Some(&pending), Some(&yes), "", ASKER, NOW) else {
        panic!("an answer")
    };
    assert_eq!(
        approved.as_deref(),
        Some("publish:0123456789abcdef0123456789abcdef01234567")
    );
    for no in ["deny", "push it to main instead"] {
        let Reply::Answer { approved, prompt } = reply(Some(&pending), None, no, ASKER, NOW) else {
            panic!("an answer")
        };
        assert_eq!(approved, None, "{no}");
        assert!(prompt.contains("it was not published"), "{prompt}");
    }
}

#[test]
fn publishing_is_asked_once_and_only_where_offered() {
    let asked = Interactions::default();
    asked.open("r1", None, BOTH);
    assert_eq!(
        asked.ask_publish("r1", publish_request(), NOW),
        Err(AskRefused::NotAllowed)
    );
    let publishing = Asking {
        publish: true,
        ..Asking::default()
    };
    asked.open("r2", None, publishing);
    assert!(asked.ask_publish("r2", publish_request(), NOW).is_ok());
    assert_eq!(
        asked.ask_publish("r2", publish_request(), NOW),
        Err(AskRefused::AlreadyAsked)
    );
    assert!(matches!(
        asked.close("r2").map(|p| p.ask),
        Some(Ask::Publish(_))
    ));
    assert_eq!(
        asked.ask_publish("r3", publish_request(), NOW),
        Err(AskRefused::Over)
    );
}

fn asked_by(id: &str) -> Pending {
    let mut pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
    pending.asked_by = Some(Asker {
        id: id.into(),
        name: Some("Ada".into()),
    });
    pending
}

#[test]
fn only_the_asker_or_an_approver_answers_and_others_run_nothing() {
    let pending = asked_by("u1");
    let card = submission(&pending.id, Some("approve"), json!({}));
    let approvers = ["boss".to_string()];
    let from = |id: Option<&'static str>| Answerer {
        id,
        approvers: &approvers,
    };
    for (submitted, text) in [(None, "yes"), (Some(&card), "approve"), (None, "hello")] {
        for other in [Some("u2"), None] {
            let got = reply(Some(&pending), submitted, text, from(other), NOW);
            let Reply::NotYours(sentence) = &got else {
                panic!("{other:?} answered: {got:?}")
            };
            assert!(sentence.contains("Ada"), "{sentence}");
            assert!(!got.clears());
        }
    }
    for who in [Some("u1"), Some("boss")] {
        assert!(matches!(
            reply(Some(&pending), Some(&card), "approve", from(who), NOW),
            Reply::Answer {
                approved: Some(_),
                ..
            }
        ));
    }
    // A lapsed request holds no one back.
    assert_eq!(
        reply(
            Some(&pending),
            None,
            "hello",
            from(Some("u2")),
            pending.expires_at
        ),
        Reply::Unrelated { expired: true }
    );
}

#[test]
fn only_a_few_plain_words_approve() {
    let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
    for word in ["ok", "y", "1", "allow", "sure", "OK!"] {
        let got = reply(Some(&pending), None, word, ASKER, NOW);
        assert!(
            matches!(got, Reply::Answer { approved: None, .. }),
            "{word}: {got:?}"
        );
    }
    for word in ["approve", "Yes.", "APPROVED"] {
        let got = reply(Some(&pending), None, word, ASKER, NOW);
        assert!(
            matches!(
                got,
                Reply::Answer {
                    approved: Some(_),
                    ..
                }
            ),
            "{word}: {got:?}"
        );
    }
}

#[test]
fn a_mention_of_the_bot_before_the_answer_is_not_part_of_it() {
    let pending = Pending::approval("r1", "Bash", &json!({"command": "ls"}), NOW, None);
    for said in ["@20001 approve", " @bot  @20001 yes", "@Claude\tYes."] {
        let got = reply(Some(&pending), None, said, ASKER, NOW);
        assert!(
            matches!(
                got,
                Reply::Answer {
                    approved: Some(_),
                    ..
                }
            ),
            "{said}: {got:?}"
        );
    }
    let Reply::Answer { prompt, approved } =
        reply(Some(&pending), None, "@20001 use dir instead", ASKER, NOW)
    else {
        panic!("not an answer")
    };
    assert_eq!(approved, None);
    assert!(prompt.ends_with("wrote:\n\nuse dir instead"), "{prompt}");
    // A mention later in the words, or words that are only a mention,
    // stay as written.
    let got = reply(Some(&pending), None, "yes @20001", ASKER, NOW);
    assert!(
        matches!(got, Reply::Answer { approved: None, .. }),
        "{got:?}"
    );

    let question = Pending::question(
        "r2",
        "Which colour?".into(),
        vec!["red".into(), "blue".into()],
        NOW,
    );
    for (said, answer) in [
        ("@20001 2", "blue"),
        ("@20001 green", "green"),
        ("@types/node", "@types/node"),
    ] {
        let Reply::Answer { prompt, .. } = reply(Some(&question), None, said, ASKER, NOW) else {
            panic!("not an answer")
        };
        assert!(
            prompt.contains(&format!("Their answer: {answer}\n")),
            "{said}: {prompt}"
        );
    }
}

#[test]
fn the_card_shows_the_whole_action_or_says_where_all_of_it_is() {
    let tail = "; cat ~/.ssh/id_rsa >> notes.txt";
    let command = format!("echo {}{tail}", "a".repeat(400));
    let pending = Pending::approval("r1", "Bash", &json!({"command": command}), NOW, None);
    let card = pending.request("Claude Code");
    let shown = card.description.clone().expect("the action");
    assert!(shown.contains(tail), "{shown}");
    assert!(card.fallback_text.contains(tail), "{}", card.fallback_text);
    assert_eq!(pending.attachment(), None);

    let write = json!({"file_path": "a.txt", "content": "line one\ncommand: ls\nline three"});
    let pending = Pending::approval("r2", "Write", &write, NOW, None);
    let shown = pending.shown_action().expect("the action");
    assert!(
        shown.contains("content:\n    line one\n    command: ls\n    line three"),
        "{shown}"
    );

    let long = format!("{}{tail}", "b".repeat(CARD_ACTION_CHARS));
    let pending = Pending::approval("r3", "Bash", &json!({"command": long}), NOW, None);
    let shown = pending.shown_action().expect("the action");
    assert!(!shown.contains(tail), "{shown}");
    let (name, whole) = pending.attachment().expect("attached");
    assert_eq!(name, "approve-r3.txt");
    assert!(whole.ends_with(tail), "{whole}");
    assert!(shown.contains(&name), "{shown}");
    assert!(shown.contains(&hex_digest(whole.as_bytes())), "{shown}");
    assert!(
        shown.contains(&whole.chars().count().to_string()),
        "{shown}"
    );
}

#[test]
fn an_action_too_large_to_show_is_denied_without_asking() {
    let asked = Interactions::default();
    asked.open("r1", None, BOTH);
    let huge = json!({"command": "x".repeat(MAX_ACTION_BYTES + 1)});
    let Decision::Deny { message, .. } = asked.decide("r1", "Bash", &huge, NOW) else {
        panic!("allowed")
    };
    assert!(message.contains("too large"), "{message}");
    assert!(matches!(
        asked.decide_live("r1", "Bash", &huge, NOW),
        Some(Decision::Deny { .. })
    ));
    assert_eq!(asked.close("r1"), None);
}

#[test]
fn a_run_asks_only_what_it_was_opened_for() {
    let asked = Interactions::default();
    asked.open("r1", None, Asking::default());
    assert!(asked.ask("r1", "Q?", &[], NOW).is_err());
    assert!(matches!(
        asked.decide("r1", "Bash", &json!({"command": "ls"}), NOW),
        Decision::Deny {
            interrupt: true,
            ..
        }
    ));
    assert_eq!(asked.close("r1"), None);
}
#[test]
fn a_card_shows_paths_in_the_workspace_relative_to_it_and_others_whole() {
    let root = Path::new("/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_");
    let input = json!({
        "file_path": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/NOTES.md",
        "content": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/x stays in text",
        "path": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/../other/secret",
        "notebook_path": "/etc/passwd",
        "cwd": "/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_",
    });
    let asked = Interactions::default();
    asked.open(
        "r1",
        None,
        Asking {
            approvals: true,
            ..Asking::default()
        },
    );
    asked.works_in("r1", root);
    let _ = asked.decide("r1", "Write", &input, NOW);
    let pending = asked.close("r1").unwrap();
    let Ask::Approval {
        input: shown,
        summary,
        fingerprint: bound,
        ..
    } = &pending.ask
    else {
        panic!("{pending:?}");
    };
    assert_eq!(summary, "use Write on NOTES.md");
    assert_eq!(shown["file_path"], "NOTES.md");
    assert_eq!(shown["cwd"], ".");
    // Text that is not a path, and paths that leave the folder or lie
    // outside it, as they are.
    assert_eq!(shown["content"], input["content"]);
    assert_eq!(shown["path"], input["path"]);
    assert_eq!(shown["notebook_path"], "/etc/passwd");
    let card = pending.request("Claude Code");
    let text = format!(
        "{}\n{}\n{}",
        card.title,
        card.description.unwrap_or_default(),
        card.fallback_text
    );
    assert!(
        !text.contains("/srv/hb/workspaces/local-25bf/web-1-c4719afa76fa/_/NOTES.md"),
        "{text}"
    );
    // The approval is for the action as the harness asked it.
    assert_eq!(*bound, fingerprint("Write", &input));
}
