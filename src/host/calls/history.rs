//! `history_page` and `history_search`: the conversation's transcript.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::HostCall;
use crate::host::{Api, Direction, HostApi, HostResult, RunGrant};
use crate::protocol::{AgentAPIError, HistoryPage, HistorySearchResult};

fn fifty() -> u32 {
    50
}

fn ten() -> u32 {
    10
}

/// Arguments of `history_page` (§8).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Another conversation's id; leave out for this conversation.
    pub conversation_id: Option<String>,
    /// Items older than this cursor (from an item's or page's cursor).
    pub before_cursor: Option<String>,
    /// Items newer than this cursor.
    pub after_cursor: Option<String>,
    /// How many items, 1-100.
    #[serde(default = "fifty")]
    pub limit: u32,
    /// `backward` (newest first, the default) or `forward` (oldest first).
    #[serde(default)]
    pub direction: Direction,
    /// Include artifact references of each item.
    #[serde(default)]
    pub include_artifacts: bool,
}

#[async_trait]
impl HostCall for HistoryQuery {
    const TOOL: &'static str = "history_page";
    const ACTION: &'static str = "history_page";
    const API: Api = Api::HistoryPage;
    const DESCRIPTION: &'static str = "Earlier messages of this conversation, page by page: newest first by default; pass a returned cursor as before_cursor to go further back. Items come oldest first within a page.";
    type Output = HistoryPage;

    fn resource(&self, grant: &RunGrant) -> String {
        grant.conversation_resource(self.conversation_id.as_deref())
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_limit(self.limit, grant.caps.max_page_limit, "limit")?;
        grant.target_conversation(self.conversation_id.as_deref())
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<HistoryPage> {
        host.history_page(&grant.scope, self).await
    }
}

/// Arguments of `history_search` (§8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistorySearchCall {
    /// Words to find; items with every word come first, newest first.
    pub query: String,
    /// Another conversation's id; leave out for this conversation.
    pub conversation_id: Option<String>,
    /// How many items, 1-50.
    #[serde(default = "ten")]
    pub top_k: u32,
}

#[async_trait]
impl HostCall for HistorySearchCall {
    const TOOL: &'static str = "history_search";
    const ACTION: &'static str = "history_search";
    const API: Api = Api::HistorySearch;
    const DESCRIPTION: &'static str = "Find earlier messages of this conversation by words (any language). Items containing every word come first, then items with some; newest first.";
    type Output = HistorySearchResult;

    fn resource(&self, grant: &RunGrant) -> String {
        grant.conversation_resource(self.conversation_id.as_deref())
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_limit(self.top_k, grant.caps.max_search_results, "top_k")?;
        grant.target_conversation(self.conversation_id.as_deref())?;
        if self.query.trim().is_empty() {
            return Err(AgentAPIError::invalid_argument("query must not be empty"));
        }
        let max = grant.caps.max_query_bytes;
        if self.query.len() > max {
            return Err(AgentAPIError::invalid_argument(format!(
                "query is {} bytes; search with at most {max}",
                self.query.len()
            )));
        }
        Ok(())
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<HistorySearchResult> {
        host.history_search(
            &grant.scope,
            self.conversation_id.as_deref(),
            &self.query,
            self.top_k,
        )
        .await
    }
}
