//! The fixture server the official MCP conformance suite calls: every tool,
//! resource, resource template and prompt its 2025-11-25 and 2026-07-28
//! server scenarios name (`docs/design/conformance-baseline.md`, "The
//! fixtures the scenarios call"; `docs/plans/mcp-2026-07-28.md` section 4),
//! as one rmcp [`ServerHandler`].
//!
//! It holds no transport: whoever serves it (rmcp's `StreamableHttpService`
//! or mcp-resume's own) builds one [`Conformance`] per session, or at
//! 2026-07-28 per request, by cloning a prototype, so the suite measures the
//! transport and not the fixture.
//!
//! - `tools`: the 2025-11-25 tools;
//! - `modern`: the 2026-07-28 diagnostic tools and `subscriptions/listen`;
//! - `mrtr`: the `input_required` (SEP-2322) tools and prompt, built with
//!   `inputs`;
//! - `prompts`, `resources`: the prompts, resources and templates.

// Logging, sampling and resources/subscribe are deprecated in rmcp 3.11 by
// SEP-2577 (protocol 2026-07-28), but 2025-11-25 requires them and the
// suite calls them.
#![allow(deprecated)]

mod elicitation;
mod inputs;
mod media;
mod modern;
mod mrtr;
mod prompts;
mod resources;
mod tasks;
mod tools;

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, OnceLock, PoisonError},
};

use rmcp::{
    handler::server::{prompt::PromptContext, router::prompt::PromptRouter, tool::ToolRouter},
    model::{
        CacheScope, CallToolResult, CompleteRequestParams, CompleteResult, CompletionInfo,
        ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        Reference, ResultType, ServerCapabilities, ServerConfig, SetLevelRequestParams,
        SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{RequestContext, SubscriptionContext},
    tool_handler, ErrorData, RoleServer, ServerHandler,
};

/// The `serverInfo.name` the fixture reports in `initialize`.
pub const SERVER_NAME: &str = "mcp-resume-conformance";

/// The conformance fixture: tools, resources, prompts, completion, logging
/// and subscriptions for the suite's 2025-11-25 and 2026-07-28 server
/// scenarios.
///
/// Its log level and resource subscriptions belong to one 2025-11-25
/// session. Cloning shares the (immutable) routers and the process-wide
/// [`Shared`] state but starts a fresh session state, so a transport's
/// factory `move || Ok(proto.clone())` gives every session its own level:
/// one client's `logging/setLevel` never silences another's.
pub struct Conformance {
    /// Shared by every clone: a 2026-07-28 request gets a handler of its
    /// own, and cloning the routers themselves (every tool's schema) was a
    /// tenth of a stateless call's time.
    tool_router: Arc<ToolRouter<Self>>,
    prompt_router: Arc<PromptRouter<Self>>,
    /// What every clone shares: the listen streams and the state sealer.
    shared: Arc<Shared>,
    /// The lowest level `notifications/message` goes out at (`logging/setLevel`).
    level: Mutex<LoggingLevel>,
    /// URIs this session subscribed to (`resources/subscribe`).
    subscriptions: Mutex<BTreeSet<String>>,
}

/// The state all clones of one [`Conformance`] share.
#[derive(Default)]
pub struct Shared {
    /// The open `subscriptions/listen` streams the trigger tools notify.
    listeners: modern::Listeners,
    /// Seals and opens `requestState`.
    states: mrtr::States,
    /// Durable tasks, on mcp-resume's transport (`tasks`).
    tasks: Option<mcp_resume_rmcp::DurableTasks>,
}

impl Clone for Conformance {
    /// A new session (or 2026-07-28 request) on the same fixtures: the
    /// routers and [`Shared`] state are shared, the log level and the
    /// resource subscriptions start afresh.
    fn clone(&self) -> Self {
        Self {
            tool_router: self.tool_router.clone(),
            prompt_router: self.prompt_router.clone(),
            shared: self.shared.clone(),
            level: Mutex::new(LoggingLevel::Info),
            subscriptions: Mutex::new(BTreeSet::new()),
        }
    }
}

impl Default for Conformance {
    fn default() -> Self {
        Self::new()
    }
}

impl Conformance {
    /// A fixture with every tool and prompt, at log level `info`, with no
    /// subscription and a fresh [`Shared`] state; serve clones of one
    /// prototype (see the type's docs).
    pub fn new() -> Self {
        Self::build(None)
    }

    /// The same, whose task tools make durable tasks in `tasks` (the tasks
    /// extension is declared only then).
    pub fn with_tasks(tasks: mcp_resume_rmcp::DurableTasks) -> Self {
        Self::build(Some(tasks))
    }

    fn build(tasks: Option<mcp_resume_rmcp::DurableTasks>) -> Self {
        Self {
            tool_router: Arc::new(
                Self::legacy_tools()
                    + Self::modern_tools()
                    + Self::mrtr_tools()
                    + Self::task_tools(),
            ),
            prompt_router: Arc::new(Self::prompt_router()),
            shared: Arc::new(Shared {
                tasks,
                ..Shared::default()
            }),
            level: Mutex::new(LoggingLevel::Info),
            subscriptions: Mutex::new(BTreeSet::new()),
        }
    }

    /// Whether a message at `level` may go out for this request: at
    /// 2026-07-28 only if its `_meta` logLevel admits it, on a 2025-11-25
    /// session if the session's `logging/setLevel` does.
    fn logs(&self, context: &RequestContext<RoleServer>, level: LoggingLevel) -> bool {
        let min = if is_modern(context) {
            match context.meta.log_level() {
                Some(min) => min,
                None => return false,
            }
        } else {
            *self.level.lock().unwrap_or_else(PoisonError::into_inner)
        };
        severity(level) >= severity(min)
    }
}

/// Whether the request speaks 2026-07-28 or later (per-request `_meta`, no
/// session), rather than a 2025-11-25 session's protocol.
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// An `isError` result: the tool ran and failed, which the caller should
/// read (a JSON-RPC error would hide the message).
fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A successful result with one text content item.
fn text_result(text: impl Into<String>) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
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

#[tool_handler(router = self.tool_router)]
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
            .enable_tool_list_changed();
        let capabilities = if self.shared.tasks.is_some() {
            capabilities.enable_tasks().build()
        } else {
            capabilities.build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Test fixtures for the MCP conformance suite: the test_* tools, \
                 test:// resources and test_* prompts its server scenarios call.",
            )
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp narrows it to what get_info advertises.
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.shared.listeners.serve(context).await;
        Ok(())
    }

    /// Every tool by name, the tasks extension's last: a client (or a
    /// check, like the suite's SEP-2243 whitespace-header one) that calls
    /// the first listed tool with no arguments and no capabilities reaches
    /// one that can answer it, not a task-required one (-32021).
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        static TASK_TOOLS: OnceLock<BTreeSet<String>> = OnceLock::new();
        let task_tools = TASK_TOOLS.get_or_init(|| {
            Self::task_tools()
                .list_all()
                .into_iter()
                .map(|t| t.name.into_owned())
                .collect()
        });
        let mut tools = self.tool_router.list_all();
        // Stable: by name within each group.
        tools.sort_by_key(|t| task_tools.contains(t.name.as_ref()));
        let modern = is_modern(&context);
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            ttl_ms: modern.then_some(0),
            cache_scope: modern.then_some(CacheScope::Public),
        })
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut prompts = self.prompt_router.list_all();
        prompts.push(Self::mrtr_prompt());
        prompts.sort_by(|a, b| a.name.cmp(&b.name));
        let modern = is_modern(&context);
        Ok(ListPromptsResult {
            result_type: Some(ResultType::COMPLETE),
            prompts,
            meta: None,
            next_cursor: None,
            ttl_ms: modern.then_some(0),
            cache_scope: modern.then_some(CacheScope::Public),
        })
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name == mrtr::PROMPT {
            return self.get_mrtr_prompt(&request, &context);
        }
        let prompt = PromptContext::new(self, request.name, request.arguments, context);
        self.prompt_router.get_prompt(prompt).await
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
