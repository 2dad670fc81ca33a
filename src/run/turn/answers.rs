//! What a person's answer to an open request leaves besides the turn: an
//! audit row naming who answered (or who was refused), and, for an
//! approval too long for its card, the whole action as a file beside it.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::host::GrantedHost;
use crate::interaction::{Ask, Pending, Reply};
use crate::protocol::{ArtifactCreated, ErrorCode, JsonMap};

/// The audit action of a person's answer.
const ACTION: &str = "interaction_answer";

/// One audit row for this turn's input against the open request: who
/// answered and what (approved, denied, answered), or that someone who may
/// not answer it was refused. Input that answers nothing writes none.
pub async fn audit(host: &GrantedHost, pending: &Pending, answer: &Reply, actor: Option<&str>) {
    let who = actor.unwrap_or("(no actor)");
    let asked_by = pending.asked_by.as_ref().map_or("(no actor)", |a| &a.id);
    let (refusal, said) = match answer {
        Reply::NotYours(_) => (
            Some(ErrorCode::Unauthorized),
            "refused: not theirs to answer",
        ),
        Reply::Answer { approved, .. } => match (&pending.ask, approved) {
            (Ask::Approval { .. }, Some(_)) => (None, "approved"),
            (Ask::Approval { .. }, None) => (None, "denied"),
            (Ask::Question { .. }, _) => (None, "answered"),
            (Ask::Publish(_), Some(_)) => (None, "publishing approved"),
            (Ask::Publish(_), None) => (None, "publishing denied"),
        },
        Reply::Stale(_) | Reply::Unrelated { .. } => return,
    };
    let detail = format!("{said} by {who} (asked by {asked_by})");
    host.note(ACTION, &pending.id, refusal, &detail).await;
}

/// The whole action an approval card shows only the start of, as an
/// inline file (its name is on the card): `None` when the card holds it.
pub fn attachment(pending: &Pending) -> Option<ArtifactCreated> {
    let (name, text) = pending.attachment()?;
    let bytes = text.into_bytes();
    let mut metadata = JsonMap::new();
    metadata.insert("interaction_id".into(), pending.id.clone().into());
    Some(ArtifactCreated {
        artifact_type: "file".into(),
        artifact_id: None,
        mime_type: Some("text/plain; charset=utf-8".into()),
        name: Some(name),
        size_bytes: Some(bytes.len() as u64),
        sha256: Some(hex::encode(Sha256::digest(&bytes))),
        metadata: Some(metadata),
        content_base64: Some(base64::engine::general_purpose::STANDARD.encode(&bytes)),
    })
}
