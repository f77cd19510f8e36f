//! The HTTP side of the OCI distribution API: manifests and blobs read with size caps, blobs
//! and manifests written, the registry's token or basic authentication.
//!
//! TLS is rustls with ring, checked against the system's root certificates; plain HTTP only for a
//! loopback registry and only when asked for. Redirects are followed at most five times, only
//! to https (or to plain HTTP on loopback when plain HTTP is allowed, never from https), and
//! reqwest drops the `Authorization` header on any redirect to another host or port. Proxies come from
//! the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`).

mod auth;
mod requests;
mod response;
#[cfg(test)]
mod tests;

use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::HeaderValue;

use super::{Credentials, Reference, RegistryError};

/// Largest image manifest read. A Wasm component's or a bundle's is a few KiB, a legacy
/// signature manifest some 7 KiB per signature it holds; what a hostile registry sends is
/// parsed within this, into the fields the host reads (a manifest of tiny objects takes many
/// times its text once parsed).
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Largest index read: the referrers of an artifact, which many signatures and attestations
/// may share (what registries themselves accept for a manifest).
pub const MAX_INDEX_BYTES: u64 = 4 << 20;

/// How the client reaches a registry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// Speak plain HTTP (allowed for a loopback registry only).
    pub plain_http: bool,
    /// Time to connect.
    pub connect_timeout: Duration,
    /// Time a response may stay silent.
    pub read_timeout: Duration,
    /// Time for a whole request, body included; a pull ([`super::pull_into`]) gives all its
    /// requests together this long.
    pub request_timeout: Duration,
    /// Credentials; `None` looks them up ([`Credentials::find`]) for the registry.
    pub credentials: Option<Credentials>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            plain_http: false,
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(600),
            credentials: None,
        }
    }
}

impl ClientOptions {
    /// Sets whether plain HTTP is spoken (loopback registries only).
    pub fn plain_http(mut self, plain_http: bool) -> Self {
        self.plain_http = plain_http;
        self
    }

    /// Sets the credentials instead of looking them up.
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Sets the time limit of one whole request.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// A client for one repository of one registry.
pub struct RegistryClient {
    http: reqwest::Client,
    base: String,
    repository: String,
    credentials: Option<Credentials>,
    /// The `Authorization` value that worked last (a bearer token or basic credentials).
    authorization: Mutex<Option<HeaderValue>>,
}

/// What a registry answered to a GET of a manifest.
pub(crate) struct Fetched {
    pub(crate) bytes: Vec<u8>,
    pub(crate) content_type: Option<String>,
}

impl RegistryClient {
    /// A client for `reference`'s repository.
    pub fn new(reference: &Reference, options: &ClientOptions) -> Result<Self, RegistryError> {
        if options.plain_http && !reference.is_loopback() {
            return Err(RegistryError::Usage(format!(
                "plain HTTP is only for a registry on this machine (localhost, 127.0.0.1, \
                 [::1]), not {}: anyone on the path could change what is pulled; drop \
                 --plain-http",
                reference.registry
            )));
        }
        let credentials = match &options.credentials {
            Some(credentials) => Some(credentials.clone()),
            None => Credentials::find(&reference.registry).map_err(RegistryError::Usage)?,
        };
        let plain_http = options.plain_http;
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            let url = attempt.url();
            let loopback = url
                .host_str()
                .is_some_and(super::reference::is_loopback_host);
            // reqwest keeps `Authorization` on a redirect to the same host and port: a step
            // down from https to plain HTTP (possible on an explicit port) is not taken.
            let downgrade = url.scheme() == "http"
                && attempt
                    .previous()
                    .last()
                    .is_some_and(|previous| previous.scheme() == "https");
            if downgrade {
                let message = format!(
                    "a redirect from https to plain HTTP ({}) is not followed",
                    crate::registry::shown_url(url)
                );
                return attempt.error(message);
            }
            match url.scheme() {
                "https" => attempt.follow(),
                "http" if plain_http && loopback => attempt.follow(),
                _ => {
                    let message = format!(
                        "a redirect to {}: only https is followed (plain HTTP only to a \
                         loopback registry with --plain-http)",
                        crate::registry::shown_url(url)
                    );
                    attempt.error(message)
                }
            }
        });
        let mut builder = reqwest::Client::builder()
            .redirect(redirects)
            .referer(false)
            .connect_timeout(options.connect_timeout)
            .read_timeout(options.read_timeout)
            .timeout(options.request_timeout)
            .user_agent(concat!("llm-worker/", env!("CARGO_PKG_VERSION")));
        if plain_http {
            // Plain HTTP is for a registry on this machine only: a proxy from the environment
            // (`HTTP_PROXY`, `ALL_PROXY`, which make no exception for loopback) would carry
            // its requests and credentials, in clear, to wherever it runs, and resolve
            // `localhost` there.
            builder = builder.no_proxy();
        } else {
            builder = builder.https_only(true);
        }
        let http = builder.build().map_err(|error| {
            RegistryError::Usage(format!("cannot set up the HTTP client: {error}"))
        })?;
        let scheme = if plain_http { "http" } else { "https" };
        Ok(Self {
            http,
            base: format!(
                "{scheme}://{}/v2/{}",
                reference.api_host(),
                reference.repository
            ),
            repository: reference.repository.clone(),
            credentials,
            authorization: Mutex::new(None),
        })
    }
}
