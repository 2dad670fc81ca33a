//! A person approved publishing the conversation's branch: the bridge
//! pushes the one commit the card showed, before the harness runs, tells
//! the person where it went (or why it did not), and tells the harness
//! the same in its prompt.

use crate::host::GrantedHost;
use crate::interaction::{PublishRequest, short};
use crate::protocol::{ErrorCode, MessageCompleted, ResultPayload};
use crate::repo::Project;
use crate::run::Emitter;
use crate::run::io::emit::project_message;

/// The audit action of a push.
const ACTION: &str = "project_publish";

/// Push `request` as approved; the prompt the harness gets.
pub(in crate::run) async fn approved(
    request: &PublishRequest,
    project: Option<&Project>,
    host: &GrantedHost,
    emit: &mut Emitter,
) -> String {
    let branch = &request.branch;
    let pushed = match project.filter(|p| p.name == request.project) {
        Some(project) => project.push(request).await.map_err(|e| {
            tracing::warn!(project = %project.name, error = %e, "the approved push failed");
            e.to_string()
        }),
        None => Err(format!(
            "this chat no longer works on project `{}`",
            request.project
        )),
    };
    let pull_request = match (&pushed, project) {
        (Ok(()), Some(project)) => project.open_pull_request(request).await,
        _ => None,
    };
    let opened = match &pull_request {
        Some(Ok(address)) => format!(" Pull request: {address}"),
        Some(Err(e)) => format!(" The pull request was not opened: {e}."),
        None => String::new(),
    };
    let (told, prompt) = match &pushed {
        Ok(()) => (
            format!(
                "Published branch `{branch}` (commit {}) to {}.{opened}",
                short(&request.head),
                request.remote
            ),
            format!(
                "The user approved publishing, and the bridge pushed branch `{branch}` at commit \
                 {} to {}.{opened} Tell them in a sentence, then go on.",
                request.head, request.remote
            ),
        ),
        Err(why) => (
            format!("Branch `{branch}` was not published: {why}."),
            format!(
                "The user approved publishing branch `{branch}`, but the push failed: {why}. \
                 Tell them; do not push yourself."
            ),
        ),
    };
    let refusal = pushed.as_ref().err().map(|_| ErrorCode::RuntimeError);
    let detail = match &pushed {
        Ok(()) => format!("pushed {} to {}{opened}", request.head, request.remote),
        Err(why) => format!("not pushed: {why}"),
    };
    host.note(ACTION, branch, refusal, &detail).await;
    emit.send(vec![ResultPayload::MessageCompleted(MessageCompleted {
        message: project_message(told, branch),
        file_ids: Vec::new(),
    })])
    .await;
    prompt
}
