//! `serve --otlp-endpoint URL`: the server's spans exported over OTLP/HTTP (protobuf) to a
//! collector, batched on the server's runtime.

use anyhow::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Sets OpenTelemetry's global tracer provider to one exporting to `endpoint`
/// (`http://HOST:4318`; spans go to `/v1/traces` there). Batching follows the `OTEL_BSP_*`
/// variables. Call [`SdkTracerProvider::shutdown`] on the result before exiting, to send
/// what is left.
pub(crate) fn export_to(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let url = url::Url::parse(endpoint)
        .with_context(|| format!("--otlp-endpoint {endpoint:?} is not a URL"))?;
    if url.scheme() != "http" {
        anyhow::bail!(
            "--otlp-endpoint {endpoint}: only http:// is supported (a collector beside the \
             server; put TLS in front of a remote one)"
        );
    }
    let traces = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces)
        .build()
        .context("cannot make the OTLP exporter")?;
    let processor =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("llm-worker")
                .build(),
        )
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok(provider)
}
