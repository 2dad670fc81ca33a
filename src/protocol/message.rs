//! Chat message shapes carried inside results (`message.delta`,
//! `message.completed`, `run.completed`) and inputs (`ContentElement`).
//! They mirror the SDK's provider message models so a LangBot host can
//! deliver what the bridge emits without translation.

use serde::{Deserialize, Serialize};

use super::JsonMap;

/// One element of multimodal content (text, image, file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentElement {
    /// `text`, `image_url`, `image_base64`, `file_url`, `file_base64`, ...
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<ImageUrl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Fields a newer host added; kept so nothing is lost in transit.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl ContentElement {
    /// A plain text element.
    pub fn text(text: impl Into<String>) -> Self {
        ContentElement {
            kind: "text".into(),
            text: Some(text.into()),
            image_url: None,
            image_base64: None,
            file_url: None,
            file_base64: None,
            file_name: None,
            extra: JsonMap::new(),
        }
    }
}

/// The `{url}` object of an `image_url` content element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Message content: either a plain string or a list of elements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentElement>),
}

impl MessageContent {
    /// The text of the content, joining text parts; what a person would read.
    pub fn to_text(&self) -> String {
        match self {
            MessageContent::Text(text) => text.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|part| part.text.as_deref())
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// A tool call requested by a model, as the SDK models it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_specific_fields: Option<JsonMap>,
}

/// The function half of a [`ToolCall`]; `arguments` is a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A complete message (`message.completed`, `run.completed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `user`, `assistant`, `system`, `tool`, ...
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp_message_id: Option<String>,
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl MessageChunk {
    /// A piece of the assistant's text, as a stream's token delta carries it.
    pub fn assistant_text(text: &str) -> Self {
        MessageChunk {
            role: "assistant".into(),
            name: None,
            content: Some(MessageContent::Text(text.into())),
            all_content: None,
            tool_calls: None,
            tool_call_id: None,
            resp_message_id: None,
            is_final: false,
            extra: JsonMap::new(),
        }
    }
}

impl Message {
    /// An assistant message with plain text content.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message {
            role: "assistant".into(),
            name: None,
            content: Some(MessageContent::Text(text.into())),
            tool_calls: None,
            tool_call_id: None,
            resp_message_id: None,
            extra: JsonMap::new(),
        }
    }
}

/// A streamed fragment of a message (`message.delta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageChunk {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// The whole text so far, for surfaces that replace rather than append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp_message_id: Option<String>,
    #[serde(default)]
    pub is_final: bool,
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Token usage a harness reported (SDK `LLMTokenUsage`); provider-specific
/// counters (cache reads, reasoning tokens, cost) ride in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    #[serde(flatten)]
    pub extra: JsonMap,
}
