//! `*_storage_get/set/delete/keys`: blobs in the plugin's or the
//! workspace's storage area. Each area is its own API (granted apart), so
//! each has its own four declarations, made by one macro.

use async_trait::async_trait;
use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::HostCall;
use super::text::as_text;
use crate::host::{Api, HostApi, HostResult, RunGrant};
use crate::protocol::{AgentAPIError, StorageKind};

/// A stored value as a model reads it: text, or base64 for binary.
fn storage_value(bytes: Option<Vec<u8>>) -> Value {
    match bytes {
        None => json!({"found": false}),
        Some(bytes) => match as_text(&bytes) {
            Some(text) => json!({"found": true, "text": text}),
            None => {
                json!({"found": true, "base64": base64::engine::general_purpose::STANDARD.encode(&bytes)})
            }
        },
    }
}

/// The bytes a `*_storage_set` stores.
fn value_bytes(value: &str, is_base64: bool) -> HostResult<Vec<u8>> {
    if is_base64 {
        base64::engine::general_purpose::STANDARD
            .decode(value)
            .map_err(|e| AgentAPIError::invalid_argument(format!("value is not base64: {e}")))
    } else {
        Ok(value.as_bytes().to_vec())
    }
}

/// A relay's answer to `storage_get`: base64, or null when unset.
fn relayed_value(data: Value) -> HostResult<Option<Vec<u8>>> {
    match data.as_str() {
        None => Ok(None),
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Some)
            .map_err(|e| AgentAPIError::runtime(format!("storage value is not base64: {e}"))),
    }
}

fn area_name(area: StorageKind) -> &'static str {
    match area {
        StorageKind::Plugin => "plugin",
        StorageKind::Workspace => "workspace",
    }
}

macro_rules! storage_area {
    ($area:expr, $api:expr, $prefix:literal, $what:literal,
     $get:ident, $set:ident, $delete:ident, $keys:ident) => {
        /// Arguments of a storage read.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $get {
            /// The key.
            pub key: String,
        }

        #[async_trait]
        impl HostCall for $get {
            const TOOL: &'static str = concat!($prefix, "_storage_get");
            const ACTION: &'static str = "storage_get";
            const API: Api = $api;
            const DESCRIPTION: &'static str =
                concat!("Read a blob from ", $what, " (text, or base64 for binary).");
            type Output = Option<Vec<u8>>;

            fn resource(&self, _grant: &RunGrant) -> String {
                format!("storage:{}/{}", area_name($area), self.key)
            }

            fn check(&self, grant: &RunGrant) -> HostResult<()> {
                grant.check_key(&self.key)
            }

            async fn ask(
                &self,
                host: &dyn HostApi,
                grant: &RunGrant,
            ) -> HostResult<Option<Vec<u8>>> {
                host.storage_get(&grant.scope, $area, &self.key).await
            }

            fn relay_args(&self) -> Value {
                json!({"area": $area, "key": self.key})
            }

            fn from_relay(data: Value) -> HostResult<Option<Vec<u8>>> {
                relayed_value(data)
            }

            fn reply(&self, value: Option<Vec<u8>>) -> HostResult<Value> {
                Ok(storage_value(value))
            }
        }

        /// Arguments of a storage write.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $set {
            /// The key.
            pub key: String,
            /// The value: text, or base64 when `base64` is true.
            pub value: String,
            /// Whether `value` is base64-encoded bytes.
            #[serde(default)]
            pub base64: bool,
        }

        #[async_trait]
        impl HostCall for $set {
            const TOOL: &'static str = concat!($prefix, "_storage_set");
            const ACTION: &'static str = "storage_set";
            const API: Api = $api;
            const DESCRIPTION: &'static str = concat!("Store a blob in ", $what, ".");
            type Output = ();

            fn resource(&self, _grant: &RunGrant) -> String {
                format!("storage:{}/{}", area_name($area), self.key)
            }

            fn check(&self, grant: &RunGrant) -> HostResult<()> {
                grant.check_key(&self.key)?;
                let size = value_bytes(&self.value, self.base64)?.len();
                let max = grant.caps.max_storage_value_bytes;
                if size > max {
                    return Err(AgentAPIError::too_large(format!(
                        "storage value is {size} bytes; the limit is {max}"
                    )));
                }
                Ok(())
            }

            async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<()> {
                let bytes = value_bytes(&self.value, self.base64)?;
                host.storage_set(&grant.scope, $area, &self.key, &bytes)
                    .await
            }

            fn relay_args(&self) -> Value {
                let bytes = value_bytes(&self.value, self.base64).unwrap_or_default();
                let value = base64::engine::general_purpose::STANDARD.encode(bytes);
                json!({"area": $area, "key": self.key, "value_base64": value})
            }

            fn from_relay(_data: Value) -> HostResult<()> {
                Ok(())
            }

            fn reply(&self, (): ()) -> HostResult<Value> {
                Ok(json!({"key": self.key, "stored": true}))
            }
        }

        /// Arguments of a storage removal.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $delete {
            /// The key.
            pub key: String,
        }

        #[async_trait]
        impl HostCall for $delete {
            const TOOL: &'static str = concat!($prefix, "_storage_delete");
            const ACTION: &'static str = "storage_delete";
            const API: Api = $api;
            const DESCRIPTION: &'static str = concat!("Delete a blob from ", $what, ".");
            type Output = bool;

            fn resource(&self, _grant: &RunGrant) -> String {
                format!("storage:{}/{}", area_name($area), self.key)
            }

            fn check(&self, grant: &RunGrant) -> HostResult<()> {
                grant.check_key(&self.key)
            }

            async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<bool> {
                host.storage_delete(&grant.scope, $area, &self.key).await
            }

            fn relay_args(&self) -> Value {
                json!({"area": $area, "key": self.key})
            }

            /// A host that cannot tell whether the key existed says nothing: true.
            fn from_relay(data: Value) -> HostResult<bool> {
                Ok(data.as_bool().unwrap_or(true))
            }

            fn reply(&self, existed: bool) -> HostResult<Value> {
                Ok(json!({"key": self.key, "deleted": existed}))
            }
        }

        /// Arguments of a storage listing (none).
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $keys {}

        #[async_trait]
        impl HostCall for $keys {
            const TOOL: &'static str = concat!($prefix, "_storage_keys");
            const ACTION: &'static str = "storage_keys";
            const API: Api = $api;
            const DESCRIPTION: &'static str = concat!("List the keys of ", $what, ".");
            type Output = Vec<String>;

            fn resource(&self, _grant: &RunGrant) -> String {
                format!("storage:{}/*", area_name($area))
            }

            async fn ask(&self, host: &dyn HostApi, grant: &RunGrant) -> HostResult<Vec<String>> {
                host.storage_keys(&grant.scope, $area).await
            }

            fn relay_args(&self) -> Value {
                json!({"area": $area})
            }

            fn reply(&self, keys: Vec<String>) -> HostResult<Value> {
                Ok(json!({"keys": keys}))
            }
        }
    };
}

storage_area!(
    StorageKind::Plugin,
    Api::PluginStorage,
    "plugin",
    "this plugin's storage",
    PluginStorageGet,
    PluginStorageSet,
    PluginStorageDelete,
    PluginStorageKeys
);

storage_area!(
    StorageKind::Workspace,
    Api::WorkspaceStorage,
    "workspace",
    "the workspace's shared storage",
    WorkspaceStorageGet,
    WorkspaceStorageSet,
    WorkspaceStorageDelete,
    WorkspaceStorageKeys
);
