//! Outbound HTTP for plugins through `wasi:http`: a request is sent only if the plugin's
//! policy grants its destination, only while a call runs, within that call's remaining time,
//! and with a few in flight at most; when the call ends, whatever it left running is cancelled.
//! A plugin without HTTP grants is not even linked to `wasi:http`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Semaphore, watch};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::policy::{HttpGrant, HttpSecret, SandboxPolicy};

/// Most outgoing requests one instance may have in flight (sent, or streaming a response).
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 8;

/// The policy check in front of `wasi:http/outgoing-handler`.
pub(crate) struct HttpGate {
    plugin: Arc<str>,
    /// The plugin's grants.
    grants: Arc<[HttpGrant]>,
    /// Narrower grants for the calls of some tools.
    tool_grants: Arc<std::collections::BTreeMap<String, Arc<[HttpGrant]>>>,
    /// The grants of the call running now.
    active: Arc<[HttpGrant]>,
    secrets: Arc<[HttpSecret]>,
    in_flight: Arc<Semaphore>,
    /// The current call: its deadline, and a sender whose drop ends its requests.
    call: Option<(Instant, watch::Sender<()>)>,
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl HttpGate {
    pub(crate) fn new(plugin: &str, policy: &SandboxPolicy) -> Self {
        let grants: Arc<[HttpGrant]> = Arc::from(policy.http.as_slice());
        Self {
            plugin: Arc::from(plugin),
            active: Arc::clone(&grants),
            grants,
            tool_grants: Arc::new(
                policy
                    .tool_http
                    .iter()
                    .map(|(tool, grants)| (tool.clone(), Arc::from(grants.as_slice())))
                    .collect(),
            ),
            secrets: Arc::from(policy.http_secrets.as_slice()),
            in_flight: Arc::new(Semaphore::new(MAX_REQUESTS_IN_FLIGHT)),
            call: None,
        }
    }

    /// A call of `tool` (or the start of an instance, `None`) begins: requests may be sent
    /// until `deadline`, to the destinations granted to that tool. An instance's start code
    /// may send none: it may run inside a call of a tool whose grants are narrower than the
    /// plugin's, and it serves no tool of its own.
    pub(crate) fn begin_call(&mut self, deadline: Instant, tool: Option<&str>) {
        self.active = match tool {
            Some(tool) => self
                .tool_grants
                .get(tool)
                .map_or_else(|| Arc::clone(&self.grants), Arc::clone),
            None => Arc::from([]),
        };
        self.call = Some((deadline, watch::Sender::new(())));
    }

    /// The call ended: every request it sent that is still running is cancelled.
    pub(crate) fn end_call(&mut self) {
        self.call = None;
    }

    fn allows(&self, uri: &http::Uri) -> bool {
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return false;
        };
        self.active
            .iter()
            .any(|grant| grant.allows(scheme, host, uri.port_u16()))
    }

    /// Sets the secret headers of the request's destination, replacing the plugin's values.
    /// A destination that is no secret's gets none (nor does a redirect: the plugin must send
    /// a new request, which is checked again).
    fn add_secrets(&self, request: &mut http::Request<WasiBody>) {
        let uri = request.uri().clone();
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return;
        };
        for secret in self
            .secrets
            .iter()
            .filter(|secret| secret.grant.allows(scheme, host, uri.port_u16()))
        {
            let name = http::HeaderName::from_bytes(secret.header.as_bytes());
            let value = http::HeaderValue::from_str(secret.value());
            if let (Ok(name), Ok(mut value)) = (name, value) {
                value.set_sensitive(true);
                request.headers_mut().insert(name, value);
            }
        }
    }
}

/// Runs `work` until it finishes, `deadline` passes or the call ends (`ended` closes).
async fn bounded<T>(
    work: impl Future<Output = Result<T, Error>>,
    deadline: Instant,
    mut ended: watch::Receiver<()>,
) -> Result<T, Error> {
    tokio::select! {
        result = tokio::time::timeout_at(deadline.into(), work) => {
            result.unwrap_or(Err(Error::ConnectionTimeout))
        }
        _ = ended.changed() => {
            Err(Error::InternalError(Some("the tool call that sent this request ended".into())))
        }
    }
}

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> ResponseFuture {
        drop(fut);
        let mut request = request;
        if !self.allows(request.uri()) {
            tracing::warn!(
                plugin = %self.plugin,
                uri = %request.uri(),
                "denied an HTTP request: its destination is not in the plugin's [http] allow list"
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let Some((deadline, call)) = &self.call else {
            return Box::new(async { Err(Error::HttpRequestDenied) });
        };
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            tracing::warn!(
                plugin = %self.plugin,
                uri = %request.uri(),
                "denied an HTTP request: {MAX_REQUESTS_IN_FLIGHT} requests are in flight already"
            );
            return Box::new(async { Err(Error::ConnectionLimitReached) });
        };
        let (deadline, ended) = (*deadline, call.subscribe());
        self.add_secrets(&mut request);
        tracing::debug!(plugin = %self.plugin, uri = %request.uri(), "HTTP request");
        Box::new(async move {
            use http_body_util::BodyExt;
            let sent = wasmtime_wasi_http::default_send_request(request, options);
            let (response, io) = bounded(sent, deadline, ended.clone()).await?;
            // The connection keeps running while the plugin reads the body: bounded the same
            // way, and holding its place among the requests in flight until it ends.
            let io = async move {
                let _permit = permit;
                bounded(io, deadline, ended).await
            };
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}
