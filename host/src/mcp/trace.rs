//! A span per MCP request that runs plugin code (feature `otel`): `tools/call`,
//! `resources/read`, `prompts/get`, `completion/complete`, named and attributed as
//! OpenTelemetry's semantic conventions for MCP say (`mcp.method.name`, `mcp.session.id`,
//! `gen_ai.tool.name` …), with the plugin and the outcome, and continuing the trace context the
//! client sent: `_meta.traceparent` / `tracestate` (as MCP carries it), else the HTTP
//! `traceparent` header.
//!
//! Spans go to OpenTelemetry's global tracer provider, which the embedder sets (the command
//! does with `--otlp-endpoint`); a server whose options do not ask for traces
//! ([`McpOptions::traces`](super::McpOptions::traces)) makes none.

use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span, SpanKind, Status, Tracer};
use rmcp::RoleServer;
use rmcp::service::RequestContext;

/// The trace context a request carries.
struct Carrier<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        ["traceparent", "tracestate"].to_vec()
    }
}

/// The trace context of a request: its `_meta`'s, else (over HTTP) its headers'.
fn carrier(context: &RequestContext<RoleServer>) -> Carrier<'_> {
    #[cfg(feature = "mcp-http")]
    if context.meta.get_traceparent().is_none()
        && let Some(parts) = context.extensions.get::<http::request::Parts>()
    {
        let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
        return Carrier {
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
        };
    }
    Carrier {
        traceparent: context.meta.get_traceparent(),
        tracestate: context.meta.get_tracestate(),
    }
}

/// The span of a request.
pub(crate) struct RequestSpan(opentelemetry::global::BoxedSpan);

/// Starts the span of a request of `event` for `target` (a tool, resource URI or template, or
/// prompt the session offers; `None` for one the client made up, which is not recorded).
pub(crate) fn begin(
    event: &'static str,
    target: Option<&str>,
    session: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> RequestSpan {
    let carrier = carrier(context);
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    let target_key = match event {
        "tools/call" => "gen_ai.tool.name",
        "resources/read" => "mcp.resource.uri",
        "prompts/get" => "gen_ai.prompt.name",
        _ => "llm_worker.target",
    };
    let mut attributes = vec![KeyValue::new("mcp.method.name", event)];
    if let Some(target) = target {
        attributes.push(KeyValue::new(target_key, target.to_owned()));
    }
    if let Some(session) = session {
        attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
    }
    let tracer = opentelemetry::global::tracer("llm-worker");
    let span = tracer
        .span_builder(match target {
            Some(target) => format!("{event} {target}"),
            None => event.to_owned(),
        })
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(&tracer, &parent);
    RequestSpan(span)
}

impl RequestSpan {
    /// Ends the span: served by `plugin`, ended so.
    pub(crate) fn end(mut self, plugin: Option<&str>, outcome: &'static str) {
        if let Some(plugin) = plugin {
            self.0
                .set_attribute(KeyValue::new("llm_worker.plugin", plugin.to_owned()));
        }
        self.0
            .set_attribute(KeyValue::new("llm_worker.outcome", outcome));
        if !matches!(outcome, "ok" | "input_required") {
            self.0.set_status(Status::error(outcome));
        }
        self.0.end();
    }
}
