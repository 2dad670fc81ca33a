//! Live drivers: the long-lived protocol a harness speaks over stdio when
//! one process serves many turns of a conversation (Claude Code's
//! stream-json input, Codex's app-server). A driver is sans-IO: it turns
//! the harness's stdout lines into results and says what to write back;
//! the session that owns the process (`run::live`) does the reading,
//! writing, deadlines and killing. So a driver is tested with recorded
//! lines, and one I/O loop serves every harness family.

pub(crate) mod rpc;

use std::path::PathBuf;

use serde_json::Value;

use crate::interaction::Decision;
use crate::protocol::ResultPayload;

/// The harness asks, in its protocol, whether it may use a tool; the turn
/// waits for [`LiveDriver::permit`] (the person's answer, maybe a turn
/// later: the process stays paused meanwhile).
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    /// The harness's id for the request, answered by [`LiveDriver::permit`].
    pub id: String,
    /// The tool it wants to use.
    pub tool: String,
    /// With these arguments.
    pub input: Value,
}

/// What one stdout line means for the turn in progress.
#[derive(Debug, Default)]
pub struct Step {
    /// Results of the current turn, in order.
    pub results: Vec<ResultPayload>,
    /// Lines to write to the harness's stdin now (answers to its own
    /// requests, a turn that was waiting for the handshake).
    pub write: Vec<String>,
    /// The turn is over; its terminal result (`run.completed` or
    /// `run.failed`). The process stays for the next turn.
    pub ended: Option<ResultPayload>,
    /// The session the driver was told to resume does not exist: the
    /// session starts a fresh process instead.
    pub session_not_found: bool,
    /// The harness asks whether it may use a tool, and waits.
    pub permission: Option<PermissionRequest>,
    /// The harness answered the oldest follow-up handed to it by
    /// [`LiveDriver::steer`]: `true` it is in the running turn, `false` it
    /// refused it (its turn had just ended), so it must be the next turn.
    pub steered: Option<bool>,
}

/// What a driver that opens its session in the protocol needs to say:
/// where the session works and which MCP servers it gets (an agent of the
/// Agent Client Protocol takes both in `session/new`).
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The conversation's workspace.
    pub cwd: PathBuf,
    /// The MCP servers in the protocol's form, secrets filled in (they go
    /// to the harness's stdin, never its argv).
    pub mcp_servers: Value,
    /// The bridge's own tools as the harness names them: their calls are
    /// authorized by the run's grant, so a permission request for one is
    /// allowed without asking anyone.
    pub own_tools: Vec<String>,
}

/// A turn's prompt: its text, and the files the person sent with it (the
/// workspace's copies), for a protocol that takes files as content of
/// their own. The text names the files too, so a driver may leave them out.
#[derive(Debug, Clone, Copy)]
pub struct Prompt<'a> {
    /// The turn prompt.
    pub text: &'a str,
    /// The files sent with it.
    pub files: &'a [PromptFile],
}

/// One file sent with a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptFile {
    /// `file://` URI of the workspace copy.
    pub uri: String,
    /// The name it was sent under.
    pub name: String,
    /// Its MIME type, when known.
    pub mime_type: Option<String>,
    /// The bytes, base64, of an image small enough to go inline (for an
    /// agent that takes images).
    pub image: Option<String>,
}

/// One harness family's live protocol.
pub trait LiveDriver: Send {
    /// Lines that open the session once the process runs (a handshake;
    /// `resume` is the stored session to continue, for drivers that resume
    /// in the protocol rather than on the command line).
    fn open(&mut self, resume: Option<&str>, setup: &Setup) -> Vec<String>;
    /// Lines that start a turn with `prompt` (a driver still waiting for
    /// its handshake keeps the turn and sends it in a later [`Step`]).
    fn turn(&mut self, prompt: &str) -> Vec<String>;
    /// [`LiveDriver::turn`] with the turn's files, for a protocol that
    /// takes them as content (the prompt's text names them anyway).
    fn turn_with(&mut self, prompt: &Prompt<'_>) -> Vec<String> {
        self.turn(prompt.text)
    }
    /// One complete stdout line (without its newline).
    fn line(&mut self, line: &str) -> Step;
    /// Lines that interrupt the running turn the harness's own way; the
    /// turn then ends with a later [`Step::ended`].
    fn interrupt(&mut self) -> Vec<String>;
    /// The harness's session id, once it has named one.
    fn session_id(&self) -> Option<&str>;
    /// The last turn's token usage, where the protocol reports it.
    fn usage(&self) -> Option<crate::protocol::TokenUsage> {
        None
    }
    /// Lines that answer the [`PermissionRequest`] `id`; the paused turn
    /// goes on. A driver whose harness never asks answers nothing.
    fn permit(&mut self, _id: &str, _decision: &Decision) -> Vec<String> {
        Vec::new()
    }
    /// Lines that hand `text` to the running turn (a follow-up the person
    /// sent while the harness works); `None` when the harness takes no
    /// input mid-turn, or no turn runs: the text is then the next turn.
    /// Whether the harness took it comes later, as [`Step::steered`] (in
    /// the order the follow-ups were handed over): until then it is not
    /// the turn's, and one never answered is the next turn.
    fn steer(&mut self, _text: &str) -> Option<Vec<String>> {
        None
    }
    /// Ask the person before the harness acts (`approvals: chat`); called
    /// before [`LiveDriver::open`]. A harness told so on its command line
    /// needs nothing here.
    fn ask_permissions(&mut self) {}
}
