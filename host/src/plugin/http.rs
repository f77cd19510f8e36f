//! Outbound HTTP for plugins through `wasi:http`: a request is sent only if the plugin's
//! policy grants its destination; everything else is denied (and logged).

use std::future::Future;
use std::sync::Arc;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::policy::HttpGrant;

/// The policy check in front of `wasi:http/outgoing-handler`.
pub(crate) struct HttpGate {
    pub(crate) plugin: Arc<str>,
    pub(crate) grants: Arc<[HttpGrant]>,
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
    fn allows(&self, uri: &http::Uri) -> bool {
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return false;
        };
        self.grants
            .iter()
            .any(|grant| grant.allows(scheme, host, uri.port_u16()))
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
        if !self.allows(request.uri()) {
            tracing::warn!(
                plugin = %self.plugin,
                uri = %request.uri(),
                "denied an HTTP request: its destination is not in the plugin's [http] allow list"
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        tracing::debug!(plugin = %self.plugin, uri = %request.uri(), "HTTP request");
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}
