//! The fixture server the official MCP conformance suite calls: every tool,
//! resource, resource template and prompt its 2025-11-25 server scenarios
//! name (`docs/design/conformance-baseline.md`, "The fixtures the scenarios
//! call"), as one rmcp [`ServerHandler`].
//!
//! It holds no transport: whoever serves it (rmcp's `StreamableHttpService`
//! or mcp-resume's own) builds one [`Conformance`] per session by cloning a
//! prototype, so the suite measures the transport and not the fixture.

// Logging, sampling and resources/subscribe are deprecated in rmcp 3.11 by
// SEP-2577 (protocol 2026-07-28), but 2025-11-25 requires them and the
// suite calls them.
#![allow(deprecated)]

mod elicitation;
mod media;
mod prompts;
mod resources;

use std::{
    collections::BTreeSet,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use rmcp::{
    handler::server::{router::prompt::PromptRouter, tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock,
        CreateMessageRequestParams, ElicitRequestParams, ElicitationSchema, Implementation,
        JsonObject, ListResourceTemplatesResult, ListResourcesResult, LoggingLevel,
        LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
        ReadResourceRequestParams, ReadResourceResponse, Reference, ResourceContents,
        SamplingMessage, SamplingMessageContentBlock, ServerCapabilities, ServerConfig,
        SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
    },
    prompt_handler, schemars,
    service::{ElicitationMode, RequestContext},
    tool, tool_handler, tool_router, ErrorData, Peer, RoleServer, ServerHandler,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// The `serverInfo.name` the fixture reports in `initialize`.
pub const SERVER_NAME: &str = "mcp-resume-conformance";

/// The conformance fixture: tools, resources, prompts, completion and
/// logging for the suite's 2025-11-25 server scenarios.
///
/// Its log level and resource subscriptions belong to one session. Cloning
/// shares the (immutable) routers but starts a fresh session state, so a
/// transport's factory `move || Ok(proto.clone())` gives every session its
/// own level: one client's `logging/setLevel` never silences another's.
pub struct Conformance {
    tool_router: ToolRouter<Self>,
    prompt_router: PromptRouter<Self>,
    /// The lowest level `notifications/message` goes out at (`logging/setLevel`).
    level: Mutex<LoggingLevel>,
    /// URIs this session subscribed to (`resources/subscribe`).
    subscriptions: Mutex<BTreeSet<String>>,
}

impl Clone for Conformance {
    /// A new session on the same fixtures: the routers are shared, the log
    /// level and the subscriptions start afresh.
    fn clone(&self) -> Self {
        Self {
            tool_router: self.tool_router.clone(),
            prompt_router: self.prompt_router.clone(),
            ..Self::new()
        }
    }
}

impl Default for Conformance {
    fn default() -> Self {
        Self::new()
    }
}

impl Conformance {
    /// A fixture with every tool and prompt, at log level `info` and with
    /// no subscription; serve one per session (see the type's docs).
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
            prompt_router: Self::prompt_router(),
            level: Mutex::new(LoggingLevel::Info),
            subscriptions: Mutex::new(BTreeSet::new()),
        }
    }

    /// Whether a message at `level` passes this session's `logging/setLevel`.
    fn logs(&self, level: LoggingLevel) -> bool {
        let min = *self.level.lock().unwrap_or_else(PoisonError::into_inner);
        severity(level) >= severity(min)
    }
}

/// RFC 5424 order of the MCP log levels (`LoggingLevel` has no `Ord`).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// `test_sampling`'s arguments.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SamplingArgs {
    /// The prompt to send to the client's LLM.
    pub prompt: String,
}

/// `test_elicitation`'s arguments.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ElicitationArgs {
    /// The message to show the user.
    pub message: String,
}

/// An `isError` result: the tool ran and failed, which the caller should
/// read (a JSON-RPC error would hide the message).
fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn text_result(text: impl Into<String>) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// Sends `elicitation/create` (form mode) to the client and reports its answer.
async fn elicit(
    peer: &Peer<RoleServer>,
    message: String,
    requested_schema: ElicitationSchema,
) -> Result<CallToolResult, ErrorData> {
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Ok(tool_error("the client did not declare form elicitation"));
    }
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    };
    match peer.create_elicitation(params).await {
        Ok(answer) => {
            let action = serde_json::to_value(&answer.action).unwrap_or(Value::Null);
            let action = action.as_str().unwrap_or("unknown");
            let content = answer.content.unwrap_or(Value::Null);
            text_result(format!(
                "Elicitation completed: action={action}, content={content}"
            ))
        }
        Err(e) => Ok(tool_error(format!("elicitation failed: {e}"))),
    }
}

#[tool_router]
impl Conformance {
    #[tool(description = "Returns one text content item.")]
    async fn test_simple_text(&self) -> Result<CallToolResult, ErrorData> {
        text_result("This is a simple text response for testing.")
    }

    #[tool(description = "Returns one image content item (a 1x1 PNG).")]
    async fn test_image_content(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::image(
            media::PNG_BASE64,
            "image/png",
        )]))
    }

    #[tool(description = "Returns one audio content item (a short WAV).")]
    async fn test_audio_content(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::audio(
            media::WAV_BASE64,
            "audio/wav",
        )]))
    }

    #[tool(description = "Returns one embedded text resource.")]
    async fn test_embedded_resource(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::resource(
            ResourceContents::text(
                "This is an embedded resource content.",
                "test://embedded-resource",
            ),
        )]))
    }

    #[tool(description = "Returns text, image and embedded resource content together.")]
    async fn test_multiple_content_types(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(media::PNG_BASE64, "image/png"),
            ContentBlock::resource(
                ResourceContents::text(
                    r#"{"test":"data","value":123}"#,
                    "test://mixed-content-resource",
                )
                .with_mime_type("application/json"),
            ),
        ]))
    }

    #[tool(
        description = "Sends three notifications/message at info (as logging/setLevel allows), then returns."
    )]
    async fn test_tool_with_logging(
        &self,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let steps = [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ];
        for (i, step) in steps.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if self.logs(LoggingLevel::Info) {
                let params = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(step))
                    .with_logger("test_tool_with_logging");
                if let Err(e) = peer.notify_logging_message(params).await {
                    return Ok(tool_error(format!("sending a log message failed: {e}")));
                }
            }
        }
        text_result("Tool with logging completed")
    }

    #[tool(description = "Returns a result with isError true (not a JSON-RPC error).")]
    async fn test_error_handling(&self) -> Result<CallToolResult, ErrorData> {
        Ok(tool_error(
            "This tool intentionally returns an error for testing",
        ))
    }

    #[tool(
        description = "Sends progress 0, 50 and 100 of 100 for the request's progressToken, then returns."
    )]
    async fn test_tool_with_progress(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Some(token) = context.meta.get_progress_token() {
            for (i, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let params =
                    ProgressNotificationParam::new(token.clone(), progress).with_total(100.0);
                if let Err(e) = context.peer.notify_progress(params).await {
                    return Ok(tool_error(format!("sending progress failed: {e}")));
                }
            }
        }
        text_result("Tool with progress completed")
    }

    #[tool(description = "Asks the client's LLM (sampling/createMessage) and returns its answer.")]
    async fn test_sampling(
        &self,
        Parameters(SamplingArgs { prompt }): Parameters<SamplingArgs>,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let declared = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some());
        if !declared {
            return Ok(tool_error("the client did not declare sampling"));
        }
        let request =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 100);
        match peer.create_message(request).await {
            Ok(answer) => {
                let text = answer
                    .message
                    .content
                    .into_vec()
                    .into_iter()
                    .find_map(|block| match block {
                        SamplingMessageContentBlock::Text(t) => Some(t.text),
                        _ => None,
                    })
                    .unwrap_or_default();
                text_result(format!("LLM response: {text}"))
            }
            Err(e) => Ok(tool_error(format!("sampling failed: {e}"))),
        }
    }

    #[tool(description = "Asks the user (elicitation/create) for a username and an email.")]
    async fn test_elicitation(
        &self,
        Parameters(ElicitationArgs { message }): Parameters<ElicitationArgs>,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        elicit(&peer, message, elicitation::user_schema()?).await
    }

    #[tool(description = "Elicits a form whose every primitive field has a default (SEP-1034).")]
    async fn test_elicitation_sep1034_defaults(
        &self,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let message = "Please review and update the form fields with defaults".to_owned();
        elicit(&peer, message, elicitation::defaults_schema()?).await
    }

    #[tool(description = "Elicits a form with the five enum shapes of SEP-1330.")]
    async fn test_elicitation_sep1330_enums(
        &self,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let message = "Please select options from the enum fields".to_owned();
        elicit(&peer, message, elicitation::enums_schema()?).await
    }

    #[tool(
        description = "Tool with JSON Schema 2020-12 features",
        input_schema = json_schema_2020_12()
    )]
    async fn json_schema_2020_12_tool(
        &self,
        _args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        text_result("ok")
    }

    #[tool(
        description = "Answers after 1.5 s, long enough for a transport to close the request's SSE stream and have the client resume it (SEP-1699)."
    )]
    async fn test_reconnection(&self) -> Result<CallToolResult, ErrorData> {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        text_result("Reconnection test completed")
    }
}

/// The `inputSchema` the suite's `json-schema-2020-12` scenario expects to
/// find unchanged in `tools/list`: `$schema`, `$defs` with an `$anchor`,
/// `$ref`, `allOf`/`anyOf`, `if`/`then`/`else`, `additionalProperties`.
fn json_schema_2020_12() -> JsonObject {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    });
    match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

#[tool_handler(router = self.tool_router)]
#[prompt_handler(router = self.prompt_router)]
impl ServerHandler for Conformance {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Test fixtures for the MCP conformance suite: the test_* tools, \
                 test:// resources and test_* prompts its server scenarios call.",
            )
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.level.lock().unwrap_or_else(PoisonError::into_inner) = request.level;
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let candidates: &[&str] = match (&request.r#ref, request.argument.name.as_str()) {
            (Reference::Prompt(p), "arg1") if p.name == "test_prompt_with_arguments" => {
                &["test", "testValue1", "example"]
            }
            (Reference::Prompt(p), "arg2") if p.name == "test_prompt_with_arguments" => {
                &["testValue2", "sample"]
            }
            (Reference::Resource(r), "id") if r.uri == resources::TEMPLATE => &["123", "456"],
            _ => &[],
        };
        let prefix = request.argument.value.as_str();
        let values = candidates
            .iter()
            .filter(|c| c.starts_with(prefix))
            .map(|c| (*c).to_owned())
            .collect();
        let completion = CompletionInfo::with_all_values(values)
            .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(resources::list()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(&request.uri).map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::read(&request.uri)?;
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&request.uri);
        Ok(())
    }
}
