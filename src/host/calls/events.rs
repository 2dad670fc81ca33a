//! `event_get` and `event_page`: the conversation's event log.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::HostCall;
use crate::host::{Api, Direction, HostApi, HostResult, RunGrant};
use crate::protocol::{AgentAPIError, AgentEventRecord, EventPage};

fn fifty() -> u32 {
    50
}

/// Arguments of `event_get` (§8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventGetCall {
    /// The event's id.
    pub event_id: String,
}

#[async_trait]
impl HostCall for EventGetCall {
    const TOOL: &'static str = "event_get";
    const ACTION: &'static str = "event_get";
    const API: Api = Api::EventGet;
    const DESCRIPTION: &'static str = "One event of this conversation by id: type, sender, subject, time and a short input summary.";
    type Output = AgentEventRecord;

    fn resource(&self, _grant: &RunGrant) -> String {
        format!("event:{}", self.event_id)
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<AgentEventRecord> {
        let record = host.event_get(&grant.scope, &self.event_id).await?;
        // Another conversation's event reads as missing: no existence oracle.
        if !grant.sees(
            record.conversation_id.as_deref(),
            record.thread_id.as_deref(),
        ) {
            return Err(AgentAPIError::not_found(format!(
                "no event `{}` in this run's scope",
                self.event_id
            )));
        }
        Ok(record)
    }
}

/// Arguments of `event_page` (§8, with the released SDK's filters).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    /// Another conversation's id; leave out for this conversation.
    pub conversation_id: Option<String>,
    /// Only these event types (e.g. `message.received`).
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Events older than this cursor.
    pub before_cursor: Option<String>,
    /// Events newer than this cursor.
    pub after_cursor: Option<String>,
    /// How many events, 1-100.
    #[serde(default = "fifty")]
    pub limit: u32,
    /// `backward` (newest first, the default) or `forward`.
    #[serde(default)]
    pub direction: Direction,
}

#[async_trait]
impl HostCall for EventQuery {
    const TOOL: &'static str = "event_page";
    const ACTION: &'static str = "event_page";
    const API: Api = Api::EventPage;
    const DESCRIPTION: &'static str = "Events of this conversation page by page (joins, leaves, messages, system events), optionally of given types.";
    type Output = EventPage;

    fn resource(&self, grant: &RunGrant) -> String {
        grant.conversation_resource(self.conversation_id.as_deref())
    }

    fn check(&self, grant: &RunGrant) -> HostResult<()> {
        grant.check_limit(self.limit, grant.caps.max_page_limit, "limit")?;
        let max = grant.caps.max_event_types;
        if self.event_types.len() > max {
            return Err(AgentAPIError::invalid_argument(format!(
                "{} event types; filter on at most {max}",
                self.event_types.len()
            )));
        }
        grant.target_conversation(self.conversation_id.as_deref())
    }

    async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<EventPage> {
        host.event_page(&grant.scope, self).await
    }
}
