//! The tools: typed arguments (unknown ones rejected), one dispatch, and
//! results as structured content plus a text rendering. A failure is a
//! tool error whose text starts with its §9 code, so a model can act on it.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};

use base64::Engine as _;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::host::calls::text::text_head;
use crate::host::calls::{ArtifactReadCall, VisitCalls, bad_arguments, each_call};
use crate::host::{Api, GrantedHost, HostCall};
use crate::interaction::{Asking, Interactions};
use crate::projection::{HeadRead, read_beneath};
use crate::protocol::AgentAPIError;
use crate::repo::Publishable;

/// The server name harnesses see: tools are `mcp__langbot__<tool>`.
pub const SERVER_NAME: &str = "langbot";
/// The tool a harness's permission prompts go to (`approvals: chat`).
pub const APPROVE_TOOL: &str = "approve";

/// What the bridge knows about a run besides its grant: the current event
/// (for `get_current_event`) and its input files (for `read_files`).
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// The current event as projected for the harness (scoped, redacted).
    pub current_event: Value,
    /// Input file id → (artifact id, inline copy path, display name).
    pub input_files: HashMap<String, InputRef>,
    /// The run's workspace: inline copies are read beneath it only.
    pub workspace: std::path::PathBuf,
    /// The conversation's worktree, when its project publishes (for
    /// `publish`).
    pub publish: Option<Publishable>,
}

/// Where an input file's bytes are.
#[derive(Debug, Clone, Default)]
pub struct InputRef {
    /// The file name as the user sent it.
    pub name: String,
    /// Artifact id in the host store, when there is one.
    pub artifact_id: Option<String>,
    /// Workspace copy (relative to the workspace), when the artifact is
    /// not in the store.
    pub copy: Option<std::path::PathBuf>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFilesArgs {
    /// File ids from `# Input Files` (e.g. `f_3a9c0e12b4d7`), at most 16.
    ids: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AskUserArgs {
    /// The question, as the person should read it.
    question: String,
    /// Answers to pick from (at most 10); leave out for a free answer.
    #[serde(default)]
    choices: Vec<String>,
}

/// Claude Code's permission prompt call (`--permission-prompt-tool`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ApproveArgs {
    /// The tool the harness wants to use.
    tool_name: String,
    /// Its arguments.
    #[serde(default)]
    input: Value,
    /// The harness's id for the call.
    #[allow(dead_code)]
    tool_use_id: Option<String>,
}

fn unix_now() -> i64 {
    crate::host::now_ms() / 1000
}

type Answer<'a> = Pin<Box<dyn Future<Output = Result<Value, AgentAPIError>> + Send + 'a>>;

/// One tool: its name, what gates it, how a model should use it, its
/// arguments' schema and check, and how a call is answered. Host tools are
/// made from their API's declaration ([`HostCall`]); the two tools that
/// read only the run's own facts are declared here.
struct ToolSpec {
    name: &'static str,
    /// What a run must have been given to be offered it.
    gate: Gate,
    description: &'static str,
    schema: fn() -> Arc<rmcp::model::JsonObject>,
    check: fn(Value) -> Result<(), AgentAPIError>,
    answer: for<'a> fn(&'a RunAccess, Value) -> Answer<'a>,
}

/// What a run must have been given to be offered a tool.
#[derive(Debug, Clone, Copy)]
enum Gate {
    /// Every run: it reads only the run's own event or inputs.
    Always,
    /// The host API the grant must allow (the grant checks each call too).
    Api(Api),
    /// A run that may ask the person a question (`ask_user`).
    Questions,
    /// A run whose permission prompts go to the person (`approve`).
    Approvals,
    /// A run on a project that publishes, in a conversation (`publish`).
    Publish,
}

impl Gate {
    /// Whether a run with these APIs that may ask `asking` is offered it.
    fn opens(self, allows: impl Fn(Api) -> bool, asking: Asking) -> bool {
        match self {
            Gate::Always => true,
            Gate::Api(api) => allows(api),
            Gate::Questions => asking.questions,
            Gate::Approvals => asking.approvals,
            Gate::Publish => asking.publish,
        }
    }
}

fn parse<T: DeserializeOwned>(args: Value) -> Result<T, AgentAPIError> {
    serde_json::from_value(args).map_err(bad_arguments)
}

fn host_answer<C: HostCall>(access: &RunAccess, args: Value) -> Answer<'_> {
    Box::pin(access.host.answer::<C>(args))
}

/// A host call's argument schema as a tool shows it: the fields' own
/// descriptions, without the type's doc comment (written for this code's
/// readers, not for a model).
fn host_schema<C: HostCall>() -> Arc<rmcp::model::JsonObject> {
    let mut schema = (*schema_for_type::<C>()).clone();
    schema.remove("description");
    Arc::new(schema)
}

/// The tools made from every host API's declaration.
struct HostTools(Vec<ToolSpec>);

impl VisitCalls for HostTools {
    fn visit<C: HostCall>(&mut self) {
        self.0.push(ToolSpec {
            name: C::TOOL,
            gate: Gate::Api(C::API),
            description: C::DESCRIPTION,
            schema: host_schema::<C>,
            check: |args| parse::<C>(args).map(drop),
            answer: host_answer::<C>,
        });
    }
}

/// The tool table: the run's own facts, then every host API.
static TOOLS: LazyLock<Vec<ToolSpec>> = LazyLock::new(|| {
    let mut tools = HostTools(vec![
        ToolSpec {
            name: "get_current_event",
            gate: Gate::Always,
            description: "The event this turn answers: its type, sender, subject and input, as the host delivered it. Call first when unsure what the user asked.",
            schema: schema_for_type::<NoArgs>,
            check: |args| parse::<NoArgs>(args).map(drop),
            answer: |access, args| {
                Box::pin(async move {
                    local_args::<NoArgs>(access, "get_current_event", args).await?;
                    Ok(access.facts.current_event.clone())
                })
            },
        },
        ToolSpec {
            name: "ask_user",
            gate: Gate::Questions,
            description: "Ask the person in the chat a question you cannot answer yourself (a choice, a missing detail). The question goes to them and this turn ends: call it last, then stop. Their answer comes as the next message, in this same session.",
            schema: schema_for_type::<AskUserArgs>,
            check: |args| parse::<AskUserArgs>(args).map(drop),
            answer: |access, args| {
                Box::pin(async move {
                    let args = local_args::<AskUserArgs>(access, "ask_user", args).await?;
                    let run_id = access.host.grant().run_id();
                    match access
                        .interactions
                        .ask(run_id, &args.question, &args.choices, unix_now())
                    {
                        Ok(next) => Ok(json!({"asked": true, "next": next})),
                        Err(why) => {
                            let err = AgentAPIError::invalid_argument(why.to_string());
                            Err(access.refuse("ask_user", "tool:ask_user", err).await)
                        }
                    }
                })
            },
        },
        ToolSpec {
            name: APPROVE_TOOL,
            gate: Gate::Approvals,
            description: "The harness's permission prompt (not for the model): asks the person in the chat to approve one action, or allows the one they approved.",
            schema: schema_for_type::<ApproveArgs>,
            check: |args| parse::<ApproveArgs>(args).map(drop),
            answer: |access, args| {
                Box::pin(async move {
                    let args = local_args::<ApproveArgs>(access, APPROVE_TOOL, args).await?;
                    let run_id = access.host.grant().run_id();
                    Ok(access
                        .interactions
                        .decide(run_id, &args.tool_name, &args.input, unix_now())
                        .to_json())
                })
            },
        },
        ToolSpec {
            name: "publish",
            gate: Gate::Publish,
            description: "Ask the person in the chat to publish this conversation's branch to the project's remote: they see the branch, its commits beyond the base and what they change, and only if they approve does the bridge push it (you cannot push yourself). Only commits are published: commit your work first. The request ends this turn: call it last, then stop; the next message says what happened.",
            schema: schema_for_type::<NoArgs>,
            check: |args| parse::<NoArgs>(args).map(drop),
            answer: |access, args| {
                Box::pin(async move {
                    local_args::<NoArgs>(access, "publish", args).await?;
                    publish(access).await
                })
            },
        },
        ToolSpec {
            name: "read_files",
            gate: Gate::Always,
            description: "Text of this conversation's input files by id (ids from `# Input Files`), up to 1 MiB of each and 4 MiB per call; a longer file says `truncated`. Binary files come back base64-encoded.",
            schema: schema_for_type::<ReadFilesArgs>,
            check: |args| parse::<ReadFilesArgs>(args).map(drop),
            answer: |access, args| {
                Box::pin(async move {
                    let args = local_args::<ReadFilesArgs>(access, "read_files", args).await?;
                    read_files(access, &args.ids).await
                })
            },
        },
    ]);
    each_call(&mut tools);
    tools.0
});

/// The `publish` tool: what would be pushed, kept as the turn's request
/// to the person; refused (audited) when there is nothing to publish.
async fn publish(access: &RunAccess) -> Result<Value, AgentAPIError> {
    let refuse = |why: String| async move {
        let err = AgentAPIError::invalid_argument(why);
        access.refuse("publish", "tool:publish", err).await
    };
    let Some(publishable) = &access.facts.publish else {
        return Err(refuse("this conversation's project does not publish".into()).await);
    };
    let request = match publishable.request().await {
        Ok(request) => request,
        Err(e) => return Err(refuse(e.to_string()).await),
    };
    let run_id = access.host.grant().run_id();
    match access.interactions.ask_publish(run_id, request, unix_now()) {
        Ok(next) => Ok(json!({"asked": true, "next": next})),
        Err(why) => Err(refuse(why.to_string()).await),
    }
}

/// A local tool's arguments; a refusal is audited as the tool's.
async fn local_args<T: DeserializeOwned>(
    access: &RunAccess,
    name: &str,
    args: Value,
) -> Result<T, AgentAPIError> {
    match parse(args) {
        Ok(args) => Ok(args),
        Err(err) => Err(access.refuse(name, &format!("tool:{name}"), err).await),
    }
}

/// Every tool a run with `apis` may call, in the order `tools/list` gives
/// them: the one table of tool names, shared by the server and by the
/// projection that tells the harness about them.
pub fn tool_names(apis: &BTreeSet<Api>, asking: Asking) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| t.gate.opens(|api| apis.contains(&api), asking))
        .map(|t| t.name)
        .collect()
}

/// Where a call finds its run: the grant, and the run's facts.
pub(crate) struct RunAccess {
    pub host: GrantedHost,
    pub facts: Arc<RunFacts>,
    pub interactions: Arc<Interactions>,
}

impl RunAccess {
    /// A refusal this layer makes itself (the grant audits its own): audited
    /// as one row against the run, then returned.
    async fn refuse(&self, action: &str, resource: &str, err: AgentAPIError) -> AgentAPIError {
        self.host.refused(action, resource, &err).await;
        err
    }
}

/// The MCP handler. Over HTTP each request carries the run it belongs to
/// (resolved from its bearer token before it reaches here).
#[derive(Clone, Default)]
pub struct RunTools {
    facts: Arc<Mutex<HashMap<String, Arc<RunFacts>>>>,
    interactions: Arc<Interactions>,
}

impl RunTools {
    /// What live runs asked the person in the chat, and what was approved
    /// for them.
    pub fn interactions(&self) -> &Interactions {
        &self.interactions
    }

    /// Register what a run's `get_current_event` and `read_files` return.
    pub fn set_facts(&self, run_id: &str, facts: RunFacts) {
        // What the harness asks about its own folder is shown relative.
        self.interactions().works_in(run_id, &facts.workspace);
        self.facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.to_string(), Arc::new(facts));
    }

    /// Forget a run's facts (its run has ended).
    pub fn forget(&self, run_id: &str) {
        self.facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
    }

    pub(crate) fn facts_of(&self, run_id: &str) -> Arc<RunFacts> {
        self.facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned()
            .unwrap_or_default()
    }

    fn access(&self, context: &RequestContext<RoleServer>) -> Result<RunAccess, McpError> {
        let host = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<GrantedHost>())
            .cloned()
            .ok_or_else(|| McpError::invalid_request("no run is attached to this request", None))?;
        let facts = self.facts_of(host.grant().run_id());
        Ok(RunAccess {
            host,
            facts,
            interactions: self.interactions.clone(),
        })
    }

    /// Every tool a run may be shown, granted everything: what the README
    /// documents and a test keeps as a snapshot.
    pub fn catalog() -> Vec<Tool> {
        TOOLS
            .iter()
            .map(|t| Tool::new(t.name, t.description, (t.schema)()))
            .collect()
    }

    /// The tools a run may see.
    pub fn list_for(host: &GrantedHost, asking: Asking) -> Vec<Tool> {
        TOOLS
            .iter()
            .filter(|t| t.gate.opens(|api| host.allows(api), asking))
            .map(|t| Tool::new(t.name, t.description, (t.schema)()))
            .collect()
    }

    /// Run one call of a tool that exists for a run: the whole tool
    /// surface in one place. A host tool's every outcome is audited by the
    /// grant, a local tool's refusals by the tool.
    async fn call(
        access: &RunAccess,
        spec: &ToolSpec,
        args: Option<rmcp::model::JsonObject>,
    ) -> CallToolResult {
        let args = Value::Object(args.unwrap_or_default());
        let tool = spec.name;
        let scope = &access.host.grant().scope;
        let span = tracing::info_span!(
            "mcp",
            run_id = %scope.run_id,
            conversation = scope.conversation_id.as_deref().unwrap_or(""),
            tool
        );
        match (spec.answer)(access, args).instrument(span).await {
            Ok(value) if tool == APPROVE_TOOL => {
                // The permission prompt contract: one text block holding
                // the decision's JSON, and nothing else (a client reads
                // structured content first when there is some).
                crate::metrics::global().mcp_call(tool, "ok");
                CallToolResult::success(vec![ContentBlock::text(value.to_string())])
            }
            Ok(value) => {
                crate::metrics::global().mcp_call(tool, "ok");
                success(value)
            }
            Err(err) => {
                crate::metrics::global().mcp_call(tool, &err.code.to_string());
                failure(&err)
            }
        }
    }
}

/// The arguments of a call to tool `name`, checked exactly as a call
/// checks them (types, names, no unknown fields) without reaching a host:
/// `not_found` for a tool that does not exist, `invalid_argument` saying
/// what is wrong otherwise. For a client or a test that wants to know
/// whether a call is well-formed before making it.
pub fn check_arguments(name: &str, args: &rmcp::model::JsonObject) -> Result<(), AgentAPIError> {
    (tool_spec(name)?.check)(Value::Object(args.clone()))
}

/// `spec`, if the run was offered it: a tool kept back for lack of a
/// question or an approval to ask is one the run does not have.
fn offered(spec: &'static ToolSpec, asking: Asking) -> Result<&'static ToolSpec, AgentAPIError> {
    match spec.gate {
        Gate::Questions | Gate::Approvals | Gate::Publish
            if !spec.gate.opens(|_| false, asking) =>
        {
            Err(AgentAPIError::not_found(format!(
                "no tool `{}` in this run",
                spec.name
            )))
        }
        _ => Ok(spec),
    }
}

fn tool_spec(name: &str) -> Result<&'static ToolSpec, AgentAPIError> {
    TOOLS
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| AgentAPIError::not_found(format!("no tool `{name}`")))
}

/// Most ids one `read_files` call takes.
const READ_FILES_MAX_IDS: usize = 16;
/// Most bytes of one file a `read_files` call returns.
const READ_FILES_PER_FILE: u64 = 1024 * 1024;
/// Most bytes all files of one `read_files` call return together.
const READ_FILES_PER_CALL: u64 = 4 * 1024 * 1024;

/// `read_files`: the run's own input files by id, through the grant when
/// they are artifacts (so each read is checked and audited). Bounded per
/// file and per call; inline copies are read beneath the workspace only,
/// following no link, since the harness can replace them. A file refused
/// here (unknown id, over the call's budget, a copy that cannot be read)
/// is one audit row of its own, as a refused artifact read is.
async fn read_files(access: &RunAccess, ids: &[String]) -> Result<Value, AgentAPIError> {
    // Repeats count once; the list is refused as soon as it is too long,
    // before any work that grows with it.
    let mut seen = std::collections::HashSet::new();
    let mut unique: Vec<&String> = Vec::new();
    for id in ids {
        if seen.insert(id.as_str()) {
            if unique.len() == READ_FILES_MAX_IDS {
                let err = AgentAPIError::invalid_argument(format!(
                    "more than {READ_FILES_MAX_IDS} different ids in one call; ask in several calls"
                ));
                return Err(access.refuse("read_files", "tool:read_files", err).await);
            }
            unique.push(id);
        }
    }
    let mut budget = READ_FILES_PER_CALL;
    let mut files = Vec::with_capacity(unique.len());
    for id in unique {
        let resource = format!("input:{id}");
        let Some(input) = access.facts.input_files.get(id) else {
            let err = AgentAPIError::not_found("no input file with this id in this conversation");
            let err = access.refuse("read_files", &resource, err).await;
            files.push(json!({"id": id, "error": err.to_string()}));
            continue;
        };
        let max = READ_FILES_PER_FILE.min(budget);
        let read = if max == 0 {
            let err = AgentAPIError::too_large(format!(
                "this call already returned {READ_FILES_PER_CALL} bytes; ask for this file in another call"
            ));
            Err(access.refuse("read_files", &resource, err).await)
        } else {
            read_input(access, &resource, input, max).await
        };
        files.push(match read {
            Ok(read) => {
                budget = budget.saturating_sub(read.bytes.len() as u64);
                let truncated = (read.bytes.len() as u64) < read.size;
                let mut file = json!({"id": id, "name": input.name, "size_bytes": read.size});
                if truncated {
                    file["truncated"] = Value::Bool(true);
                }
                match text_head(&read.bytes, truncated) {
                    Some(text) => file["text"] = Value::String(text.to_string()),
                    None => {
                        file["content_base64"] = Value::String(
                            base64::engine::general_purpose::STANDARD.encode(&read.bytes),
                        )
                    }
                }
                file
            }
            Err(e) => json!({"id": id, "name": input.name, "error": e.to_string()}),
        });
    }
    Ok(json!({"files": files}))
}

/// The first `max` bytes of one input file, from the store (the grant
/// audits the read) or its workspace copy (a refusal is audited here, as
/// `resource`).
async fn read_input(
    access: &RunAccess,
    resource: &str,
    input: &InputRef,
    max: u64,
) -> Result<HeadRead, AgentAPIError> {
    if let Some(artifact_id) = &input.artifact_id {
        let length = max.min(access.host.grant().caps.max_read_length);
        let read = ArtifactReadCall {
            artifact_id: artifact_id.clone(),
            offset: 0,
            length,
        };
        let read = access.host.call(&read).await?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(read.content_base64.unwrap_or_default())
            .map_err(|e| AgentAPIError::runtime(format!("host sent invalid base64: {e}")))?;
        let size = read.size_bytes.unwrap_or(bytes.len() as u64);
        return Ok(HeadRead { bytes, size });
    }
    let read = match &input.copy {
        Some(copy) => {
            let root = access.facts.workspace.clone();
            let copy = copy.clone();
            match tokio::task::spawn_blocking(move || read_beneath(&root, &copy, max)).await {
                Ok(Ok(read)) => Ok(read),
                Ok(Err(e)) => Err(AgentAPIError::not_found(format!(
                    "the workspace copy cannot be read: {e}"
                ))),
                Err(e) => Err(AgentAPIError::runtime(format!("read stopped: {e}"))),
            }
        }
        None => Err(AgentAPIError::not_found(
            "this file has no readable content",
        )),
    };
    match read {
        Ok(read) => Ok(read),
        Err(err) => Err(access.refuse("read_files", resource, err).await),
    }
}

fn success(value: Value) -> CallToolResult {
    // Compact: the text is for the model, and the same data rides in
    // structured content; pretty-printing would double what goes over the wire.
    let text = serde_json::to_string(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

fn failure(err: &AgentAPIError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        err.code, err.message
    ))]);
    result.structured_content = serde_json::to_value(err).ok();
    result
}

impl ServerHandler for RunTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions("LangBot host facts for this conversation: history, events, artifacts, state and storage, scoped to the current run.")
    }

    /// Every tool comes in one page, so there is no cursor to continue
    /// from: one sent is not this server's, and the spec asks for -32602.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let access = self.access(&context)?;
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            let why = format!("invalid cursor `{cursor}`: every tool is listed in one page");
            return Err(McpError::invalid_params(why, None));
        }
        let asking = self.interactions.asking(access.host.grant().run_id());
        Ok(ListToolsResult::with_all_items(Self::list_for(
            &access.host,
            asking,
        )))
    }

    /// A tool that does not exist is a protocol error (-32602, "Unknown
    /// tool", as the spec's example has it), not a tool's own failure; it is
    /// still audited as a refusal of the run, like every call.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let access = self.access(&context)?;
        let asking = self.interactions.asking(access.host.grant().run_id());
        let spec = match tool_spec(&request.name).and_then(|spec| offered(spec, asking)) {
            Ok(spec) => spec,
            Err(err) => {
                let resource = format!("tool:{}", request.name);
                let err = access.refuse("unknown", &resource, err).await;
                crate::metrics::global().mcp_call("unknown", &err.code.to_string());
                let why = format!("Unknown tool: {}", request.name);
                return Err(McpError::invalid_params(why, None));
            }
        };
        Ok(Self::call(&access, spec, request.arguments).await.into())
    }

    tools_only!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorCode;

    #[test]
    fn arguments_are_checked_as_a_call_checks_them() {
        let args = |value: Value| value.as_object().cloned().unwrap_or_default();
        assert!(check_arguments("history_page", &args(json!({"limit": 5}))).is_ok());
        assert!(check_arguments("plugin_storage_keys", &args(json!({}))).is_ok());
        let unknown = check_arguments("history_page", &args(json!({"limt": 5}))).unwrap_err();
        assert_eq!(unknown.code, ErrorCode::InvalidArgument);
        assert!(unknown.message.contains("limt"), "{unknown}");
        let wrong = check_arguments("state_get", &args(json!({"scope": "everyone", "key": "k"})))
            .unwrap_err();
        assert_eq!(wrong.code, ErrorCode::InvalidArgument);
        let missing = check_arguments("no_such_tool", &args(json!({}))).unwrap_err();
        assert_eq!(missing.code, ErrorCode::NotFound);
    }
}
