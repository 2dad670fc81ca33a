//! `list_knowledge_bases` and `retrieve_knowledge`: the knowledge bases
//! the run was given (LangBot's, or the embedded host's folders).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::HostCall;
use crate::host::{Api, HostApi, HostResult, RunGrant, allows};
use crate::protocol::AgentAPIError;

fn five() -> u32 {
    5
}

/// Arguments of `list_knowledge_bases` (none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListKnowledgeCall {}

#[async_trait]
impl HostCall for ListKnowledgeCall {
    const TOOL: &'static str = "list_knowledge_bases";
    const ACTION: &'static str = "list_knowledge_bases";
    const API: Api = Api::KnowledgeList;
    const DESCRIPTION: &'static str =
        "The knowledge bases you may search with retrieve_knowledge: id, name and type.";
    type Output = Vec<Value>;

    fn resource(&self, _grant: &RunGrant) -> String {
        "knowledge:*".into()
    }

    /// The grant's own list, frozen when the run opened: no host call.
    async fn ask(&self, _host: &dyn HostApi, grant: &RunGrant) -> HostResult<Vec<Value>> {
        Ok(grant
            .knowledge_bases
            .iter()
            .filter(|kb| allows(&kb.operations, "list"))
            .map(|kb| json!({"kb_id": kb.kb_id, "name": kb.kb_name, "type": kb.kb_type}))
            .collect())
    }

    fn reply(&self, bases: Vec<Value>) -> HostResult<Value> {
        Ok(json!({ "knowledge_bases": bases }))
    }
}

/// Arguments of `retrieve_knowledge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrieveKnowledgeCall {
    /// The knowledge base's id, as `list_knowledge_bases` gives it.
    pub kb_id: String,
    /// What to look for, in words.
    pub query: String,
    /// How many passages, 1-50.
    #[serde(default = "five")]
    pub top_k: u32,
}

#[async_trait]
impl HostCall for RetrieveKnowledgeCall {
    const TOOL: &'static str = "retrieve_knowledge";
    const ACTION: &'static str = "retrieve_knowledge";
    const API: Api = Api::KnowledgeRetrieve;
    const DESCRIPTION: &'static str = "Search a knowledge base (see list_knowledge_bases): the passages that best match the query, best first, each with its source.";
    type Output = Vec<Value>;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!("knowledge:{}", self.kb_id)
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        let granted = grant
            .knowledge_bases
            .iter()
            .any(|kb| kb.kb_id == self.kb_id && allows(&kb.operations, "retrieve"));
        if !granted {
            return Err(AgentAPIError::unauthorized(format!(
                "knowledge base `{}` is not granted to this run for `retrieve`",
                self.kb_id
            )));
        }
        grant.check_limit(self.top_k, grant.caps.max_search_results, "top_k")?;
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

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Vec<Value>> {
        host.retrieve_knowledge(&grant.scope, &self.kb_id, &self.query, self.top_k)
            .await
    }

    fn reply(&self, results: Vec<Value>) -> HostResult<Value> {
        Ok(json!({ "kb_id": self.kb_id, "results": results }))
    }
}
