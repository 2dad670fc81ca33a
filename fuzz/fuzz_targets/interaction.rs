//! An open request as the host's state holds it (any JSON: a host or a
//! harness with the state API may write the key) and a turn's input
//! against it: nothing panics, a request that loads round-trips and makes
//! a card within the host's bounds, and nothing but an open approval's own
//! answer ever approves an action — the one it asked about.
#![no_main]

use harness_bridge::interaction::{Ask, Interactions, Pending, Reply, fingerprint, reply};
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
    }
    let submission = doc
        .get("submission")
        .and_then(|s| serde_json::from_value::<InteractionSubmission>(s.clone()).ok());
    let text = doc.get("text").and_then(Value::as_str).unwrap_or("");
    let answer = reply(pending.as_ref(), submission.as_ref(), text, NOW + late);
    match &answer {
        Reply::Answer {
            approved: Some(approved),
            ..
        } => {
            let pending = pending.as_ref().expect("an approval needs a request");
            assert!(pending.is_open(NOW + late));
            match &pending.ask {
                Ask::Approval { fingerprint, .. } => assert_eq!(fingerprint, approved),
                other => panic!("a question approved something: {other:?}"),
            }
        }
        Reply::Answer { .. } => assert!(pending.is_some()),
        Reply::Stale(_) => assert!(submission.is_some()),
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
    runs.open("r", approved.clone());
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
