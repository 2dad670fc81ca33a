//! An open request as the host's state holds it (any JSON: a host or a
//! harness with the state API may write the key) and a turn's input
//! against it: nothing panics, a request that loads round-trips and makes
//! a card within the host's bounds that shows the whole action (or says
//! where all of it is), nothing but an open approval's own answer ever
//! approves an action — the one it asked about — and only the actor who
//! asked, or a listed approver, answers anything.
#![no_main]

use harness_bridge::interaction::{
    Answerer, Ask, Asking, Interactions, Pending, Reply, action_text, fingerprint, reply,
};
use harness_bridge::protocol::InteractionSubmission;
use harness_bridge_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const NOW: i64 = 1_800_000_000;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let late = i64::from(input.byte()) * 60;
    let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(input.rest()) else {
        return;
    };
    let pending = Pending::from_state(doc.get("pending"));
    if let Some(pending) = &pending {
        let stored = serde_json::to_value(pending).expect("a request serializes");
        assert_eq!(Pending::from_state(Some(&stored)).as_ref(), Some(pending));
        let card = pending.request("Claude Code");
        assert!(card.title.chars().count() <= 1000, "{card:?}");
        assert!(!card.fallback_text.is_empty());
        assert_eq!(card.interaction_id, pending.id);
        if let Ask::Approval { tool, input, .. } = &pending.ask {
            let whole = action_text(tool, input);
            let shown = card.description.clone().unwrap_or_default();
            match pending.attachment() {
                None => assert!(shown == whole && card.fallback_text.contains(&whole)),
                Some((name, attached)) => {
                    assert_eq!(attached, whole);
                    assert!(shown.contains(&name), "{shown}");
                }
            }
        }
    }
    let submission = doc
        .get("submission")
        .and_then(|s| serde_json::from_value::<InteractionSubmission>(s.clone()).ok());
    let text = doc.get("text").and_then(Value::as_str).unwrap_or("");
    let actor = doc.get("actor").and_then(Value::as_str);
    let approvers: Vec<String> = doc
        .get("approvers")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    let from = Answerer {
        id: actor,
        approvers: &approvers,
    };
    let answer = reply(
        pending.as_ref(),
        submission.as_ref(),
        text,
        from,
        NOW + late,
    );
    let may_answer = |pending: &Pending| {
        pending.asked_by.as_ref().map(|a| a.id.as_str()) == actor
            || actor.is_some_and(|a| approvers.iter().any(|x| x == a))
    };
    match &answer {
        Reply::Answer {
            approved: Some(approved),
            ..
        } => {
            let pending = pending.as_ref().expect("an approval needs a request");
            assert!(pending.is_open(NOW + late) && may_answer(pending));
            match &pending.ask {
                Ask::Approval { fingerprint, .. } => assert_eq!(fingerprint, approved),
                other => panic!("a question approved something: {other:?}"),
            }
        }
        Reply::Answer { .. } => assert!(pending.as_ref().is_some_and(may_answer)),
        Reply::Stale(_) => assert!(submission.is_some()),
        Reply::NotYours(_) => {
            let pending = pending.as_ref().expect("someone else's request");
            assert!(pending.is_open(NOW + late) && !may_answer(pending));
        }
        Reply::Unrelated { .. } => {}
    }

    // The permission prompt allows exactly the approved action, once.
    let tool = doc.get("tool").and_then(Value::as_str).unwrap_or("Bash");
    let action = doc.get("input").cloned().unwrap_or(Value::Null);
    let approved = match &answer {
        Reply::Answer { approved, .. } => approved.clone(),
        _ => None,
    };
    let runs = Interactions::default();
    let all = Asking {
        questions: true,
        approvals: true,
        publish: true,
    };
    runs.open("r", approved.clone(), all);
    let first = runs.decide("r", tool, &action, NOW).to_json();
    let allowed = first["behavior"] == "allow";
    assert_eq!(
        allowed,
        approved.as_deref() == Some(fingerprint(tool, &action).as_str()),
        "{first}"
    );
    if allowed {
        let again = runs.decide("r", tool, &action, NOW).to_json();
        assert_eq!(again["behavior"], "deny", "allowed twice");
    }
});
