//! What an operator watches (feature `metrics`): requests, their outcomes and durations by
//! plugin and target, refusals at the HTTP gate, reloads, live sessions, instances and their
//! memory, in the Prometheus (OpenMetrics) text format, served on an address of their own.
//!
//! Labels name plugins, tools, resources and prompts (bounded by the catalog), never
//! identities, sessions or inputs.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::McpError;
use super::admission::SessionCounter;

type Labels = Vec<(&'static str, String)>;

/// The content type of [`Metrics::render`]'s text.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics of one MCP server: give it to [`McpOptions::metrics`] (and
/// [`DirWatcher::metrics`]), serve it with [`serve_metrics`]. Clones share the counts.
///
/// [`McpOptions::metrics`]: super::McpOptions::metrics
/// [`DirWatcher::metrics`]: super::DirWatcher::metrics
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    cpu: Family<Labels, Counter<f64, std::sync::atomic::AtomicU64>>,
    refusals: Family<Labels, Counter>,
    reloads: Family<Labels, Counter>,
    sessions: Gauge,
    instances: Gauge,
    memory: Gauge,
    host: Mutex<Option<crate::PluginHost>>,
    session_counters: Mutex<Vec<Weak<SessionCounter>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Durations from 1 ms to about 65 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    /// Empty metrics, every series `llm_worker_…`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("llm_worker");
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "requests",
            "Requests that ran plugin code (tools/call, resources/read, prompts/get, \
             completion/complete), by plugin, target and outcome",
            requests.clone(),
        );
        let durations = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        registry.register(
            "request_duration_seconds",
            "How long those requests took, by event, plugin and target",
            durations.clone(),
        );
        let cpu = Family::<Labels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "request_cpu_seconds",
            "CPU time of those requests' plugin code, by event, plugin and target",
            cpu.clone(),
        );
        let refusals = Family::<Labels, Counter>::default();
        registry.register(
            "http_refusals",
            "HTTP requests refused before MCP saw them, by reason",
            refusals.clone(),
        );
        let reloads = Family::<Labels, Counter>::default();
        registry.register(
            "reloads",
            "Rescans of the plugin directory that found changes, by outcome",
            reloads.clone(),
        );
        let sessions = Gauge::default();
        registry.register("sessions", "Live MCP sessions", sessions.clone());
        let instances = Gauge::default();
        registry.register("instances", "Live plugin instances", instances.clone());
        let memory = Gauge::default();
        registry.register(
            "instance_memory_bytes",
            "Bytes of the live instances' linear memories and tables",
            memory.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                requests,
                durations,
                cpu,
                refusals,
                reloads,
                sessions,
                instances,
                memory,
                host: Mutex::new(None),
                session_counters: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Reports the live instances of `host` and their memory.
    #[must_use]
    pub fn host(self, host: &crate::PluginHost) -> Self {
        *self.inner.host.lock().unwrap_or_else(|p| p.into_inner()) = Some(host.clone());
        self
    }

    /// The metrics now, in the OpenMetrics text format ([`METRICS_CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let inner = &self.inner;
        if let Some(host) = &*inner.host.lock().unwrap_or_else(|p| p.into_inner()) {
            let usage = host.usage();
            inner
                .instances
                .set(i64::try_from(usage.instances).unwrap_or(i64::MAX));
            inner
                .memory
                .set(i64::try_from(usage.memory_bytes).unwrap_or(i64::MAX));
        }
        let live: usize = {
            let mut counters = inner
                .session_counters
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            counters.retain(|counter| counter.strong_count() > 0);
            counters
                .iter()
                .filter_map(Weak::upgrade)
                .map(|counter| counter.live())
                .sum()
        };
        inner.sessions.set(i64::try_from(live).unwrap_or(i64::MAX));
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &inner.registry) {
            tracing::error!("cannot render the metrics: {error}");
        }
        text
    }

    /// Counts a request that ran plugin code.
    pub(crate) fn request(
        &self,
        event: &'static str,
        plugin: Option<&str>,
        target: &str,
        outcome: &'static str,
        took: Duration,
        cpu: Duration,
    ) {
        let plugin = plugin.unwrap_or("").to_owned();
        let labels: Labels = vec![
            ("event", event.to_owned()),
            ("plugin", plugin),
            ("target", target.to_owned()),
        ];
        self.inner
            .durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.inner
            .cpu
            .get_or_create(&labels)
            .inc_by(cpu.as_secs_f64());
        let mut labels = labels;
        labels.push(("outcome", outcome.to_owned()));
        self.inner.requests.get_or_create(&labels).inc();
    }

    /// Counts an HTTP request refused for `reason`.
    pub(crate) fn refused(&self, reason: &'static str) {
        self.inner
            .refusals
            .get_or_create(&vec![("reason", reason.to_owned())])
            .inc();
    }

    /// Counts a reload of the plugin directory that ended so.
    pub(crate) fn reloaded(&self, outcome: &'static str) {
        self.inner
            .reloads
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    /// Reports the sessions `counter` counts.
    pub(crate) fn sessions(&self, counter: &Arc<SessionCounter>) {
        self.inner
            .session_counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(counter));
    }
}

/// Serves `metrics` at `/metrics` on `listener` (anything else is 404) until the listener
/// fails. The metrics carry no secrets, identities or inputs, but do name the plugins and
/// tools served: listen on a private address.
///
/// What a web page could use to read them is refused (403): a request a browser sends for a
/// page (one with an `Origin` header, or `Sec-Fetch-Site` other than `none`, which is a URL
/// the user typed; Prometheus sends neither) and, on a loopback
/// address, a `Host` other than `localhost`, `127.0.0.1` or `::1` (a page whose name was
/// rebound to this machine). At most [`MAX_METRICS_CONNECTIONS`] connections are served at
/// once; more wait to be accepted. A connection serves one request (it is closed after its
/// answer) and lasts at most 30 seconds.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
) -> Result<(), McpError> {
    let loopback = listener
        .local_addr()
        .is_ok_and(|address| address.ip().is_loopback());
    let gate = Arc::new(super::http::gate::Gate::hosts(if loopback {
        super::http::gate::LOOPBACK_HOSTS.map(String::from).to_vec()
    } else {
        Vec::new()
    }));
    let places = Arc::new(tokio::sync::Semaphore::new(MAX_METRICS_CONNECTIONS));
    loop {
        let Ok(place) = Arc::clone(&places).acquire_owned().await else {
            return Ok(());
        };
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!("cannot accept a metrics connection: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        let gate = Arc::clone(&gate);
        let service = hyper::service::service_fn(move |request: http::Request<_>| {
            let answer = metrics_answer(&gate, &metrics, &request);
            async move { Ok::<_, Infallible>(answer) }
        });
        tokio::spawn(async move {
            // One request a connection (a scraper connects again for the next), within a
            // bounded time: pipelined requests whose answers are never read would otherwise
            // hold the connection's place for as long as its client likes.
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(METRICS_CONNECTION_TIME, connection).await {
                Ok(Err(error)) => tracing::debug!("metrics connection ended: {error}"),
                Err(_) => tracing::debug!(
                    "metrics connection closed after {METRICS_CONNECTION_TIME:?} (its client \
                     did not read the answer)"
                ),
                Ok(Ok(())) => {}
            }
            drop(place);
        });
    }
}

/// The most connections [`serve_metrics`] serves at once.
pub const MAX_METRICS_CONNECTIONS: usize = 16;

/// The longest a metrics connection is kept, its request read and its answer sent.
const METRICS_CONNECTION_TIME: Duration = Duration::from_secs(30);

/// What [`serve_metrics`] answers `request`.
fn metrics_answer<B>(
    gate: &super::http::gate::Gate,
    metrics: &Metrics,
    request: &http::Request<B>,
) -> http::Response<Full<Bytes>> {
    let text = |status: http::StatusCode, body: String| {
        let mut response = http::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
    };
    // `Sec-Fetch-Site: none` is a browser's request the user made (a URL typed in): allowed.
    let headers = request.headers();
    let browser = headers.contains_key(http::header::ORIGIN)
        || headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes() != b"none");
    if browser {
        return text(
            http::StatusCode::FORBIDDEN,
            "metrics are not served to web pages\n".into(),
        );
    }
    if gate.refused(request).is_some() {
        return text(
            http::StatusCode::FORBIDDEN,
            "on a loopback address, metrics are served to the Host localhost, 127.0.0.1 or ::1 \
             only (a web page's name rebound to this machine is not)\n"
                .into(),
        );
    }
    if request.method() != http::Method::GET || request.uri().path() != "/metrics" {
        return text(
            http::StatusCode::NOT_FOUND,
            "not found: GET /metrics\n".into(),
        );
    }
    let mut response = text(http::StatusCode::OK, metrics.render());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(METRICS_CONTENT_TYPE),
    );
    response
}
