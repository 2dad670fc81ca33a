//! The host proxy APIs as a run-scoped MCP server (server name `langbot`).
//!
//! One tool per proxy API, listed only when the run's grant allows it and
//! checked again at call time by the grant itself: this module exposes
//! tools, it never decides authorization. Every call goes through a
//! [`crate::host::GrantedHost`], so it is checked and audited exactly like
//! any other host call.

/// The answers of a server that declares tools only, for the methods of
/// the capabilities it does not declare: rmcp's default is an empty list,
/// the spec's is -32601 (method not found). One declaration for the
/// run's server and the stdio relay alike, inside their `ServerHandler`
/// (defined before the modules that use it, which see it by that order).
macro_rules! tools_only {
    () => {
        async fn list_resources(
            &self,
            _request: Option<rmcp::model::PaginatedRequestParams>,
            _context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
            Err(rmcp::ErrorData::method_not_found::<
                rmcp::model::ListResourcesRequestMethod,
            >())
        }

        async fn list_resource_templates(
            &self,
            _request: Option<rmcp::model::PaginatedRequestParams>,
            _context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<rmcp::model::ListResourceTemplatesResult, rmcp::ErrorData> {
            Err(rmcp::ErrorData::method_not_found::<
                rmcp::model::ListResourceTemplatesRequestMethod,
            >())
        }

        async fn list_prompts(
            &self,
            _request: Option<rmcp::model::PaginatedRequestParams>,
            _context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<rmcp::model::ListPromptsResult, rmcp::ErrorData> {
            Err(rmcp::ErrorData::method_not_found::<
                rmcp::model::ListPromptsRequestMethod,
            >())
        }

        async fn complete(
            &self,
            _request: rmcp::model::CompleteRequestParams,
            _context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<rmcp::model::CompleteResult, rmcp::ErrorData> {
            Err(rmcp::ErrorData::method_not_found::<
                rmcp::model::CompleteRequestMethod,
            >())
        }
    };
}

mod http;
mod stdio;
mod tools;

pub use http::{McpHttpServer, TOKEN_HEADER_HINT};
pub use stdio::{ShimError, run_stdio_shim};
pub use tools::{InputRef, RunFacts, RunTools, SERVER_NAME, check_arguments, tool_names};
