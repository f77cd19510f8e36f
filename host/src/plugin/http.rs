//! Outbound HTTP for plugins through `wasi:http`: a request is sent only if the plugin's
//! policy grants its destination, only while a call runs, within that call's remaining time,
//! and with a few in flight at most; when the call ends, whatever it left running is cancelled.
//! The host connects it itself ([`super::net`]): to an address that was checked, never to a
//! non-public one the grant neither names nor opts in to. `TRACE` is refused. A plugin without
//! HTTP grants is not even linked to `wasi:http`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use tokio::sync::{Semaphore, watch};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::instance::{HttpScope, Waited, within_moving};
use super::net::{self, Destination, Refused};
use crate::policy::{HttpGrant, HttpSecret, SandboxPolicy, literal_address, may_carry_secrets};

/// Most outgoing requests one instance may have in flight (sent, or streaming a response).
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 8;

/// The most denied requests of one call that are logged.
const MAX_DENIALS_LOGGED: u32 = 8;

/// The most characters of a plugin's URL (or method) a log line quotes.
const MAX_URI_LOGGED: usize = 200;

/// A plugin's URL or method in a log line: at most [`MAX_URI_LOGGED`] characters of it.
struct Cut<'a, T>(&'a T);

impl<T: std::fmt::Display> std::fmt::Display for Cut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.to_string();
        match text.char_indices().nth(MAX_URI_LOGGED) {
            Some((end, _)) => write!(f, "{}…", &text[..end]),
            None => f.write_str(&text),
        }
    }
}

/// The policy check in front of `wasi:http/outgoing-handler`.
pub(crate) struct HttpGate {
    plugin: Arc<str>,
    /// The plugin's grants.
    grants: Arc<[HttpGrant]>,
    /// Narrower grants for the calls of some tools.
    tool_grants: Arc<std::collections::BTreeMap<String, Arc<[HttpGrant]>>>,
    /// The grants of requests other than tool calls (none unless the policy gives some).
    request_grants: [Arc<[HttpGrant]>; 3],
    /// The grants of the call running now.
    active: Arc<[HttpGrant]>,
    secrets: Arc<[HttpSecret]>,
    in_flight: Arc<Semaphore>,
    /// The instance's places for name lookups ([`net::MAX_LOOKUPS_PER_INSTANCE`]), and the
    /// plugin's (all its instances', in every session).
    lookups: Arc<Semaphore>,
    plugin_lookups: Arc<Semaphore>,
    /// The host's budget of open files, which each connection takes one of (if counted).
    descriptors: Option<Arc<super::descriptors::HostDescriptors>>,
    /// The current call: its deadline, and a sender whose drop ends its requests (made at
    /// the call's first request: a watch channel costs an allocation to make and eight
    /// notifications to drop, on every call of a plugin that sends nothing).
    call: Option<CallBound>,
    /// Requests denied while no call ran (code a 1.0.0 call left running, an instance's
    /// start), over the instance's life: only the first few are logged.
    denied_outside_calls: Arc<AtomicU32>,
}

/// How long the requests of a call may run.
struct CallBound {
    /// The call's deadline, before the time it waited for answers from the client, which
    /// moves it (`waited`, if the call may ask).
    deadline: Instant,
    waited: Option<Arc<Waited>>,
    /// Dropped when the call ends, ending its requests.
    ended: Option<watch::Sender<()>>,
    /// Requests of the call denied (only the first few are logged), made at its first
    /// denial or first request sent (which may be refused once its name is resolved).
    denied: Option<Arc<AtomicU32>>,
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
            request_grants: [
                Arc::from(policy.request_http.resources.as_slice()),
                Arc::from(policy.request_http.prompts.as_slice()),
                Arc::from(policy.request_http.completion.as_slice()),
            ],
            secrets: Arc::from(policy.http_secrets.as_slice()),
            in_flight: Arc::new(Semaphore::new(MAX_REQUESTS_IN_FLIGHT)),
            lookups: Arc::new(Semaphore::new(net::MAX_LOOKUPS_PER_INSTANCE)),
            plugin_lookups: Arc::new(Semaphore::new(net::MAX_LOOKUPS_PER_INSTANCE)),
            descriptors: None,
            call: None,
            denied_outside_calls: Arc::default(),
        }
    }

    /// Counts each connection against the host's budget of open files (`descriptors`), as
    /// the instances' files are: a connection is a socket the host holds for the plugin.
    pub(crate) fn counting(
        mut self,
        descriptors: &Arc<super::descriptors::HostDescriptors>,
    ) -> Self {
        self.descriptors = Some(Arc::clone(descriptors));
        self
    }

    /// Its lookups also hold places of `lookups`, the plugin's (shared by all its instances).
    pub(crate) fn looking_up(mut self, lookups: &Arc<Semaphore>) -> Self {
        self.plugin_lookups = Arc::clone(lookups);
        self
    }

    /// A call begins: requests may be sent until `deadline`, to the destinations granted to
    /// what runs. An instance's start code may send none: it may run inside a call of a tool
    /// whose grants are narrower than the plugin's, and it serves no tool of its own. A request
    /// other than a tool call gets only what the policy grants its kind (nothing by default):
    /// a client sends those with no tool call or model involved.
    pub(crate) fn begin_call(
        &mut self,
        deadline: Instant,
        waited: Option<Arc<Waited>>,
        scope: HttpScope<'_>,
    ) {
        self.active = match scope {
            HttpScope::Tool(_) if self.tool_grants.is_empty() => Arc::clone(&self.grants),
            HttpScope::Tool(tool) => self
                .tool_grants
                .get(tool)
                .map_or_else(|| Arc::clone(&self.grants), Arc::clone),
            HttpScope::Resources => Arc::clone(&self.request_grants[0]),
            HttpScope::Prompts => Arc::clone(&self.request_grants[1]),
            HttpScope::Completion => Arc::clone(&self.request_grants[2]),
            HttpScope::Start => Arc::from([]),
        };
        self.call = Some(CallBound {
            deadline,
            waited,
            ended: None,
            denied: None,
        });
    }

    /// The gate of one call of a contract 1.0.0 instance, whose calls run at once: this
    /// gate's grants and its count of requests in flight, with the call's own scope and
    /// deadline (moved by the time it `waited` for answers). Dropping it ends the requests the
    /// call sent.
    pub(crate) fn for_call(
        &self,
        deadline: Instant,
        waited: Arc<Waited>,
        scope: HttpScope<'_>,
    ) -> Self {
        let mut gate = Self {
            plugin: Arc::clone(&self.plugin),
            grants: Arc::clone(&self.grants),
            tool_grants: Arc::clone(&self.tool_grants),
            request_grants: self.request_grants.clone(),
            // Set by `begin_call` below.
            active: Arc::clone(&self.grants),
            secrets: Arc::clone(&self.secrets),
            in_flight: Arc::clone(&self.in_flight),
            lookups: Arc::clone(&self.lookups),
            plugin_lookups: Arc::clone(&self.plugin_lookups),
            descriptors: self.descriptors.clone(),
            call: None,
            denied_outside_calls: Arc::clone(&self.denied_outside_calls),
        };
        gate.begin_call(deadline, Some(waited), scope);
        gate
    }

    /// Logs a request denied before it left, as [`count_denial`] says.
    fn denied(&mut self, uri: &http::Uri, why: std::fmt::Arguments<'_>) {
        match count_denial(&self.denials()) {
            Some(true) => tracing::warn!(
                plugin = %self.plugin,
                uri = %Cut(uri),
                "denied an HTTP request: {why}"
            ),
            Some(false) => tracing::warn!(plugin = %self.plugin, "{MORE_DENIED}"),
            None => {}
        }
    }

    /// Where the requests denied now are counted: the call's, else the instance's outside
    /// calls.
    fn denials(&mut self) -> Arc<AtomicU32> {
        match &mut self.call {
            Some(call) => Arc::clone(call.denied.get_or_insert_with(Arc::default)),
            None => Arc::clone(&self.denied_outside_calls),
        }
    }

    /// The call ended: every request it sent that is still running is cancelled.
    pub(crate) fn end_call(&mut self) {
        self.call = None;
    }

    /// Where a request to `uri` goes, if the grants of the call running now allow it: whether
    /// it may reach any address is decided here, from the grants that allow it.
    fn destination(&self, uri: &http::Uri) -> Option<Destination> {
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return None;
        };
        let port = uri.port_u16();
        let allowing: Vec<&HttpGrant> = self
            .active
            .iter()
            .filter(|grant| grant.allows(scheme, host, port))
            .collect();
        if allowing.is_empty() {
            return None;
        }
        // Named literally by a rule of the plugin's: a rule whose host is this very address
        // (not a wildcard that happens to match its digits). A tool's or a request's list
        // only narrows the destinations: its literal `http://169.254.169.254`, within the
        // plugin's `*.254` (public addresses only), reaches no address the plugin's may not.
        let literal = literal_address(host).is_some_and(|address| {
            self.grants
                .iter()
                .any(|grant| grant.address() == Some(address) && grant.allows(scheme, host, port))
        });
        // The opt-in is the plugin's rule's, likewise.
        let private = self
            .grants
            .iter()
            .any(|grant| grant.allows_private_addresses() && grant.allows(scheme, host, port));
        let tls = scheme == "https";
        Some(Destination {
            host: host.to_owned(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
            tls,
            any_address: literal || private,
        })
    }

    /// Sets the secret headers of the request's destination, replacing the plugin's values.
    /// A destination that is no secret's gets none (nor does a redirect: the plugin must send
    /// a new request, which is checked again), and neither does plain http, but to a loopback
    /// address named literally (policy files cannot say otherwise; this holds for policies
    /// built in code too).
    /// The secrets a request to `uri` carries: those of the grants that allow it, where
    /// secrets may go at all (https, or a loopback address named literally).
    fn secrets_for<'a>(&'a self, uri: &'a http::Uri) -> impl Iterator<Item = &'a HttpSecret> {
        let target = match (uri.scheme_str(), uri.host()) {
            (Some(scheme), Some(host)) if may_carry_secrets(Some(scheme), host) => {
                Some((scheme, host))
            }
            _ => None,
        };
        self.secrets.iter().filter(move |secret| {
            target.is_some_and(|(scheme, host)| secret.grant.allows(scheme, host, uri.port_u16()))
        })
    }

    /// Sets the secrets of the request's destination in place of the plugin's values; `false`
    /// (the request must not leave) if one cannot be a header: the plugin's own value would
    /// go in its place.
    fn add_secrets(&self, request: &mut http::Request<WasiBody>) -> bool {
        let uri = request.uri().clone();
        for secret in self.secrets_for(&uri) {
            let name = http::HeaderName::from_bytes(secret.header.as_bytes());
            let value = http::HeaderValue::from_str(secret.value());
            let (Ok(name), Ok(mut value)) = (name, value) else {
                return false;
            };
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
        true
    }
}

/// Runs `work` until it finishes, `deadline` (moved by the time `waited`, if given) passes or
/// the call ends (`ended` closes).
async fn bounded<T>(
    work: impl Future<Output = Result<T, Error>>,
    deadline: Instant,
    waited: Option<&Waited>,
    mut ended: watch::Receiver<()>,
) -> Result<T, Error> {
    let timed = async {
        match waited {
            Some(waited) => within_moving(deadline, waited, work).await.ok(),
            None => tokio::time::timeout_at(deadline.into(), work).await.ok(),
        }
    };
    tokio::select! {
        result = timed => result.unwrap_or(Err(Error::ConnectionTimeout)),
        _ = ended.changed() => {
            Err(Error::InternalError(Some("the tool call that sent this request ended".into())))
        }
    }
}

/// Longest authority (`host:port`, with any user information) a plugin may set on a request.
/// `http`'s own types bound neither it nor a method or scheme, and a plugin may hold up to
/// `MAX_HOST_RESOURCES` requests, each in host memory the memory limit does not see.
pub(crate) const MAX_AUTHORITY_BYTES: usize = 1024;

/// Longest extension method or scheme a plugin may set on a request.
pub(crate) const MAX_TOKEN_BYTES: usize = 64;

/// Longest path with query a plugin may set on a request (`http` allows 64 KiB; servers
/// commonly refuse request lines past 8 KiB).
pub(crate) const MAX_PATH_BYTES: usize = 8 << 10;

/// Most bytes of a request body one write may hand the host (wasmtime's default is 1 MiB). A
/// body buffers two such writes before the plugin must wait for it to be sent.
pub(crate) const BODY_CHUNK_BYTES: usize = 64 << 10;

/// Most requests (and responses) with a body one instance may hold unsent. What a plugin
/// writes to a body stays in host memory until the request is sent or dropped, even after the
/// body itself is dropped: without a bound, a thousand requests would hold 128 MiB beyond the
/// memory limit. Requests in flight are bounded apart ([`MAX_REQUESTS_IN_FLIGHT`]).
pub(crate) const MAX_UNSENT_BODIES: usize = 8;

/// The requests and responses of one instance that hold a body and were not sent, by their
/// handles (checked again when the count is full: a handle sent or dropped is gone from the
/// table, or holds something else).
#[derive(Default)]
pub(crate) struct UnsentBodies {
    held: Vec<u32>,
    /// Whether a refusal was logged (once per instance).
    warned: bool,
}

impl UnsentBodies {
    /// Whether one more body may be made, after forgetting those no longer held.
    fn room(&mut self, table: &wasmtime::component::ResourceTable) -> bool {
        use wasmtime::component::Resource;
        use wasmtime_wasi_http::p2::types::{HostOutgoingRequest, HostOutgoingResponse};
        if self.held.len() >= MAX_UNSENT_BODIES {
            self.held.retain(|&rep| {
                let request = table.get(&Resource::<HostOutgoingRequest>::new_borrow(rep));
                let response = table.get(&Resource::<HostOutgoingResponse>::new_borrow(rep));
                request.is_ok_and(|request| request.body.is_some())
                    || response.is_ok_and(|response| response.body.is_some())
            });
        }
        self.held.len() < MAX_UNSENT_BODIES
    }

    /// The request or response `rep` was given a body: it holds it until sent or dropped. An
    /// older entry of the same handle is stale (a request has one body at most; the table
    /// gives a freed handle to the next resource).
    fn hold(&mut self, rep: u32) {
        self.held.retain(|&held| held != rep);
        self.held.push(rep);
    }
}

/// The version of `wasi:http` wasmtime-wasi-http links (imports of any 0.2.x match it).
const HTTP_TYPES: &str = "wasi:http/types@0.2.12";

/// The version of `wasi:http` 0.3 wasmtime-wasi-http links.
const HTTP_TYPES_3: &str = "wasi:http/types@0.3.0";

/// Replaces the setters of an outgoing request's authority, method, path and scheme with ones
/// that refuse (as the setters refuse what does not parse) text longer than the bounds above;
/// call after `wasmtime_wasi_http::p2::add_only_http_to_linker_async` and `p3::add_to_linker`;
/// the same for `wasi:http@0.3`'s request where the linker has it (`concurrent`). And `body` of a 0.2 request or response with one
/// that counts the bodies held unsent ([`MAX_UNSENT_BODIES`]).
pub(crate) fn bound_request_setters(
    linker: &mut wasmtime::component::Linker<super::instance::PluginState>,
    concurrent: bool,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi_http::p2::bindings::http::types::{
        HostOutgoingRequest as Host2, HostOutgoingResponse as HostResponse2, Method as Method2,
        Scheme as Scheme2,
    };
    use wasmtime_wasi_http::p2::types::{
        HostOutgoingRequest as Request2, HostOutgoingResponse as Response2,
    };
    use wasmtime_wasi_http::p3::Request as Request3;
    use wasmtime_wasi_http::p3::bindings::http::types::{
        HostRequest as Host3, Method as Method3, Scheme as Scheme3,
    };
    fn over(text: Option<&String>, max: usize) -> bool {
        text.is_some_and(|text| text.len() > max)
    }
    linker.allow_shadowing(true);
    let shadowed = (|| {
        let mut types = linker.instance(HTTP_TYPES)?;
        types.func_wrap(
            "[method]outgoing-request.body",
            |mut store, (request,): (Resource<Request2>,)| {
                let rep = request.rep();
                body(store.data_mut(), rep, |http| Host2::body(http, request))
            },
        )?;
        types.func_wrap(
            "[method]outgoing-response.body",
            |mut store, (response,): (Resource<Response2>,)| {
                let rep = response.rep();
                body(store.data_mut(), rep, |http| {
                    HostResponse2::body(http, response)
                })
            },
        )?;
        setter::<Request2, Option<String>>(
            &mut types,
            "[method]outgoing-request.set-authority",
            |value| over(value.as_ref(), MAX_AUTHORITY_BYTES),
            |http, request, value| Host2::set_authority(http, request, value),
        )?;
        setter::<Request2, Method2>(
            &mut types,
            "[method]outgoing-request.set-method",
            |value| matches!(value, Method2::Other(text) if text.len() > MAX_TOKEN_BYTES),
            |http, request, value| Host2::set_method(http, request, value),
        )?;
        setter::<Request2, Option<String>>(
            &mut types,
            "[method]outgoing-request.set-path-with-query",
            |value| over(value.as_ref(), MAX_PATH_BYTES),
            |http, request, value| Host2::set_path_with_query(http, request, value),
        )?;
        setter::<Request2, Option<Scheme2>>(
            &mut types,
            "[method]outgoing-request.set-scheme",
            |value| matches!(value, Some(Scheme2::Other(text)) if text.len() > MAX_TOKEN_BYTES),
            |http, request, value| Host2::set_scheme(http, request, value),
        )?;
        if !concurrent {
            // `wasi:http@0.3.0` is linked only where the engine can run it.
            return Ok(());
        }
        let mut types = linker.instance(HTTP_TYPES_3)?;
        setter::<Request3, Option<String>>(
            &mut types,
            "[method]request.set-authority",
            |value| over(value.as_ref(), MAX_AUTHORITY_BYTES),
            |http, request, value| Host3::set_authority(http, request, value),
        )?;
        setter::<Request3, Method3>(
            &mut types,
            "[method]request.set-method",
            |value| matches!(value, Method3::Other(text) if text.len() > MAX_TOKEN_BYTES),
            |http, request, value| Host3::set_method(http, request, value),
        )?;
        setter::<Request3, Option<String>>(
            &mut types,
            "[method]request.set-path-with-query",
            |value| over(value.as_ref(), MAX_PATH_BYTES),
            |http, request, value| Host3::set_path_with_query(http, request, value),
        )?;
        setter::<Request3, Option<Scheme3>>(
            &mut types,
            "[method]request.set-scheme",
            |value| matches!(value, Some(Scheme3::Other(text)) if text.len() > MAX_TOKEN_BYTES),
            |http, request, value| Host3::set_scheme(http, request, value),
        )
    })();
    linker.allow_shadowing(false);
    shadowed
}

/// Counts a request denied before it left in `denials` (a call's, or the instance's outside
/// calls), and says whether to log it: `Some(true)` for the first [`MAX_DENIALS_LOGGED`] (each
/// naming at most [`MAX_URI_LOGGED`] characters of its URI), `Some(false)` once after them
/// ([`MORE_DENIED`]), `None` then (a plugin denied in a loop would otherwise write the host's
/// log as fast as it can, each line up to 9 KiB of its own text).
fn count_denial(denials: &AtomicU32) -> Option<bool> {
    let count = denials.fetch_add(1, Ordering::Relaxed).saturating_add(1);
    match count {
        count if count <= MAX_DENIALS_LOGGED => Some(true),
        count if count == MAX_DENIALS_LOGGED + 1 => Some(false),
        _ => None,
    }
}

/// What is logged once the denials logged reach [`MAX_DENIALS_LOGGED`].
const MORE_DENIED: &str =
    "denied more HTTP requests in this call (or outside calls); they are not logged";

/// wasmtime-wasi-http's `body` of the request or response `rep` (`make`), if the instance may
/// hold one more unsent body ([`MAX_UNSENT_BODIES`]); `Err(())` if not, as for a second body.
fn body(
    state: &mut super::instance::PluginState,
    rep: u32,
    make: impl FnOnce(
        &mut wasmtime_wasi_http::WasiHttpCtxView<'_>,
    ) -> wasmtime::Result<
        Result<wasmtime::component::Resource<wasmtime_wasi_http::p2::body::HostOutgoingBody>, ()>,
    >,
) -> wasmtime::Result<(
    Result<wasmtime::component::Resource<wasmtime_wasi_http::p2::body::HostOutgoingBody>, ()>,
)> {
    use wasmtime_wasi_http::WasiHttpView;
    if !state.unsent_bodies.room(&state.table) {
        if !std::mem::replace(&mut state.unsent_bodies.warned, true) {
            tracing::warn!(
                plugin = %state.plugin,
                "refused a request body: the plugin holds {MAX_UNSENT_BODIES} requests with \
                 bodies it has not sent, the most one instance may hold; it sees `body` fail \
                 (logged once per instance); the plugin should send or drop a request first"
            );
        }
        return Ok((Err(()),));
    }
    let made = make(&mut state.http())?;
    if made.is_ok() {
        state.unsent_bodies.hold(rep);
    }
    Ok((made,))
}

/// One of wasmtime-wasi-http's setters of a request (of type `R`): of a value `V`.
type Setter<R, V> = for<'a> fn(
    &mut wasmtime_wasi_http::WasiHttpCtxView<'a>,
    wasmtime::component::Resource<R>,
    V,
) -> wasmtime::Result<Result<(), ()>>;

/// Links `name` as wasmtime-wasi-http's setter `set`, answering `Err(())` without calling it
/// when `refused` says the value is too long.
fn setter<R, V>(
    types: &mut wasmtime::component::LinkerInstance<'_, super::instance::PluginState>,
    name: &str,
    refused: fn(&V) -> bool,
    set: Setter<R, V>,
) -> wasmtime::Result<()>
where
    R: 'static,
    V: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
{
    use wasmtime_wasi_http::WasiHttpView;
    types.func_wrap(
        name,
        move |mut store, (request, value): (wasmtime::component::Resource<R>, V)| {
            if refused(&value) {
                return Ok((Err(()),));
            }
            let mut http = store.data_mut().http();
            Ok((set(&mut http, request, value)?,))
        },
    )
}

impl WasiHttpHooks for HttpGate {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK_BYTES
    }

    fn p3_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK_BYTES
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> ResponseFuture {
        drop(fut);
        let mut request = request;
        // Methods are case-sensitive, but a server may not be: `trace` is refused too.
        if request.method().as_str().eq_ignore_ascii_case("TRACE") {
            self.denied(
                request.uri(),
                format_args!(
                    "the method TRACE is refused (it echoes the request, headers the host \
                     added included)"
                ),
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        // User information (`https://evil.example@api.example.com/`) would reach the server
        // in the `Host` header wasmtime writes from the authority, with the host's secrets: a
        // front end that routes by a lenient reading of `Host` could hand them to another
        // origin.
        if request
            .uri()
            .authority()
            .is_some_and(|authority| authority.as_str().contains('@'))
        {
            self.denied(
                request.uri(),
                format_args!("user information in the URL is refused"),
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        // A request that carries a secret uses one of the usual methods: another may be one a
        // server echoes (as TRACE does, and IIS's TRACK), handing the secret to the plugin.
        const USUAL: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
        if !USUAL.contains(&request.method().as_str())
            && self.secrets_for(request.uri()).next().is_some()
        {
            let method = request.method().clone();
            self.denied(
                request.uri(),
                format_args!(
                    "a request that carries a secret must use GET, HEAD, POST, PUT, PATCH, \
                     DELETE or OPTIONS, not {}",
                    Cut(&method)
                ),
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        // Nor may it ask the server to take it for another method (frameworks and gateways
        // that honour these headers would run an echoing method for it).
        const OVERRIDES: [&str; 3] = [
            "x-http-method-override",
            "x-method-override",
            "x-http-method",
        ];
        if OVERRIDES
            .iter()
            .any(|name| request.headers().contains_key(*name))
            && self.secrets_for(request.uri()).next().is_some()
        {
            self.denied(
                request.uri(),
                format_args!(
                    "a request that carries a secret may not ask for another method \
                     (X-HTTP-Method-Override and the like)"
                ),
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let Some(destination) = self.destination(request.uri()) else {
            self.denied(
                request.uri(),
                format_args!("its destination is not in the plugin's [http] allow list"),
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        };
        let Some(call) = &mut self.call else {
            return Box::new(async { Err(Error::HttpRequestDenied) });
        };
        let (deadline, waited) = (call.deadline, call.waited.clone());
        let ended = call
            .ended
            .get_or_insert_with(|| watch::Sender::new(()))
            .subscribe();
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            self.denied(
                request.uri(),
                format_args!("{MAX_REQUESTS_IN_FLIGHT} requests are in flight already"),
            );
            return Box::new(async { Err(Error::ConnectionLimitReached) });
        };
        // Its socket counts against the host's budget of open files, which the host's own
        // listener needs too.
        let held = match &self.descriptors {
            Some(descriptors) => match descriptors.hold() {
                Some(held) => Some(held),
                None => {
                    self.denied(
                        request.uri(),
                        format_args!(
                            "the host's budget of open files (max_open_files) is used up by \
                             all instances together"
                        ),
                    );
                    return Box::new(async { Err(Error::ConnectionLimitReached) });
                }
            },
            None => None,
        };
        if !self.add_secrets(&mut request) {
            self.denied(
                request.uri(),
                format_args!(
                    "a secret for its destination is not a valid HTTP header (name, or value \
                     with a control character or a letter beyond ASCII); fix the host's policy"
                ),
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        tracing::debug!(plugin = %self.plugin, uri = %request.uri(), "HTTP request");
        let plugin = Arc::clone(&self.plugin);
        let denials = self.denials();
        let lookups = [Arc::clone(&self.lookups), Arc::clone(&self.plugin_lookups)];
        Box::new(async move {
            let sent = async {
                let addresses = match net::resolve(&destination, &lookups).await {
                    Ok(addresses) => addresses,
                    Err(Refused::Failed(error)) => return Err(error),
                    Err(Refused::Address { address, range }) => {
                        // Logged from here, not through `denied`: this runs where the
                        // response is awaited, which may be another task.
                        match count_denial(&denials) {
                            Some(true) => tracing::warn!(
                                plugin = %plugin,
                                uri = %Cut(request.uri()),
                                %address,
                                "denied an HTTP request: {} resolves to {range}; name the \
                                 address in the rule ([http] allow) or put the rule in [http] \
                                 allow_private to reach it",
                                destination.host
                            ),
                            Some(false) => tracing::warn!(plugin = %plugin, "{MORE_DENIED}"),
                            None => {}
                        }
                        return Err(Error::DestinationIpProhibited);
                    }
                };
                net::send(request, &destination, &addresses, options).await
            };
            let (response, io) = bounded(sent, deadline, waited.as_deref(), ended.clone()).await?;
            // The connection keeps running while the plugin reads the body: bounded the same
            // way, and holding its place among the requests in flight until it ends.
            let io = async move {
                let (_permit, _held) = (permit, held);
                bounded(Box::into_pin(io), deadline, waited.as_deref(), ended).await
            };
            Ok((
                response,
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::Path;

    #[test]
    fn a_log_line_quotes_a_few_hundred_characters_of_a_url() {
        let long: http::Uri = format!("http://x.example/{}", "y".repeat(9000))
            .parse()
            .expect("a URI");
        let quoted = Cut(&long).to_string();
        assert_eq!(quoted.chars().count(), MAX_URI_LOGGED + 1, "{quoted}");
        assert!(quoted.starts_with("http://x.example/yyy") && quoted.ends_with('…'));
        let short: http::Uri = "http://x.example/a".parse().expect("a URI");
        assert_eq!(Cut(&short).to_string(), "http://x.example/a");
    }

    /// A request's deadline is its call's, which moves on while the call waits for an answer
    /// from the client: a request outlives the first deadline while a question is open, and
    /// ends at it otherwise.
    #[tokio::test]
    async fn a_requests_deadline_moves_with_its_calls_questions() {
        use std::time::Duration;
        let (_call, ended) = watch::channel(());
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, Error>("answered")
        };
        let asking = Waited::default();
        asking.begin();
        let deadline = Instant::now() + Duration::from_millis(50);
        let answered = bounded(slow(), deadline, Some(&asking), ended.clone()).await;
        assert_eq!(answered.ok(), Some("answered"));
        let deadline = Instant::now() + Duration::from_millis(50);
        let cut = bounded(slow(), deadline, Some(&Waited::default()), ended).await;
        assert!(matches!(cut, Err(Error::ConnectionTimeout)), "{cut:?}");
    }

    /// A request that carries a host-held secret may not ask the server, through the headers
    /// frameworks and gateways honour, to take it for another method (one that echoes it).
    #[tokio::test]
    async fn a_request_with_a_secret_may_not_ask_for_another_method() {
        let mut gate = gate(
            "[http]\nallow = [\"https://api.example.com\"]\n[[http.secrets]]\n\
             host = \"https://api.example.com\"\nheader = \"Authorization\"\n\
             value = \"Bearer ${PATH}\"\n",
            Some("t"),
        );
        for header in [
            "X-HTTP-Method-Override",
            "x-method-override",
            "X-HTTP-Method",
        ] {
            let request = empty_request("POST", "https://api.example.com/x", Some(header));
            let sent =
                Box::into_pin(gate.send_request(request, None, Box::new(async { Ok(()) }))).await;
            assert!(
                matches!(sent, Err(Error::HttpRequestDenied)),
                "{header}: {:?}",
                sent.err()
            );
        }
    }

    /// Requests refused once their granted name resolved to a private address (a plugin's
    /// author can point their own name at one) count with the call's other denials: a few are
    /// logged, then one line says more were not. Each was logged, however many; so were those
    /// sent outside any call.
    #[tokio::test]
    async fn requests_to_a_name_resolving_privately_are_logged_a_few_times_a_call() {
        // `localhost` granted by name, not as the loopback address: it resolves to one.
        let mut gate = gate("[http]\nallow = [\"http://localhost:9\"]\n", Some("t"));
        let (_, said) = llm_worker_tests::logs::logged(async {
            for _ in 0..20 {
                let request = empty_request("GET", "http://localhost:9/", None);
                let sent = gate.send_request(request, None, Box::new(async { Ok(()) }));
                let sent = Box::into_pin(sent).await;
                assert!(
                    matches!(sent, Err(Error::DestinationIpProhibited)),
                    "{:?}",
                    sent.err()
                );
            }
        })
        .await;
        let denied: Vec<_> = said
            .iter()
            .filter(|line| line.contains("denied an HTTP request"))
            .collect();
        assert_eq!(denied.len(), MAX_DENIALS_LOGGED as usize, "{said:?}");
        assert!(denied[0].contains("resolves to"), "{said:?}");
        assert_eq!(
            said.iter()
                .filter(|line| line.contains("denied more HTTP requests"))
                .count(),
            1,
            "{said:?}"
        );
        // Outside any call (code a 1.0.0 call left running), each denial counted as the first.
        let policy = SandboxPolicy::parse(
            "[http]\nallow = [\"https://api.example.com\"]\n",
            Path::new("/p/w.policy.toml"),
            &crate::Limits::default(),
        )
        .expect("policy");
        let mut outside = HttpGate::new("w", &policy);
        let (_, said) = llm_worker_tests::logs::logged(async {
            for _ in 0..20 {
                let request = empty_request("GET", "https://elsewhere.example/", None);
                let sent = outside.send_request(request, None, Box::new(async { Ok(()) }));
                assert!(Box::into_pin(sent).await.is_err());
            }
        })
        .await;
        assert_eq!(
            said.iter()
                .filter(|line| line.contains("denied an HTTP request"))
                .count(),
            MAX_DENIALS_LOGGED as usize,
            "{said:?}"
        );
    }

    /// A request of `method` for `uri` with an empty body, and a header `override_header:
    /// TRACE` if given.
    fn empty_request(
        method: &str,
        uri: &str,
        override_header: Option<&str>,
    ) -> http::Request<WasiBody> {
        use http_body_util::BodyExt;
        let mut request = http::Request::builder().method(method).uri(uri);
        if let Some(name) = override_header {
            request = request.header(name, "TRACE");
        }
        request
            .body(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .expect("a request")
    }

    fn gate(policy: &str, tool: Option<&str>) -> HttpGate {
        gate_for(policy, tool.map_or(HttpScope::Start, HttpScope::Tool))
    }

    fn gate_for(policy: &str, scope: HttpScope<'_>) -> HttpGate {
        let policy = SandboxPolicy::parse(
            policy,
            Path::new("/p/w.policy.toml"),
            &crate::Limits::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut gate = HttpGate::new("w", &policy);
        gate.begin_call(Instant::now(), None, scope);
        gate
    }

    fn destination(gate: &HttpGate, uri: &str) -> Option<(String, u16, bool, bool)> {
        let uri: http::Uri = uri.parse().unwrap_or_else(|e| panic!("{uri}: {e}"));
        gate.destination(&uri)
            .map(|d| (d.host, d.port, d.tls, d.any_address))
    }

    #[test]
    fn only_addresses_named_literally_or_opted_in_may_be_non_public() {
        let gate = gate(
            "[http]\nallow = [\"http://127.0.0.1:8080\", \"http://[::1]:8080\", \
             \"*.0.0.1\", \"https://api.example.com\", \"localhost\"]\n\
             allow_private = [\"http://wiki.intranet\"]\n\
             [tools.narrow.http]\nallow = [\"http://wiki.intranet\"]\n",
            Some("wide"),
        );
        let some = |host: &str, port, tls, any| Some((host.to_owned(), port, tls, any));
        assert_eq!(
            destination(&gate, "http://127.0.0.1:8080/x"),
            some("127.0.0.1", 8080, false, true)
        );
        assert_eq!(
            destination(&gate, "http://[::1]:8080/"),
            some("[::1]", 8080, false, true)
        );
        // Matched by a wildcard, not named: public addresses only.
        assert_eq!(
            destination(&gate, "http://10.0.0.1/"),
            some("10.0.0.1", 80, false, false)
        );
        assert_eq!(
            destination(&gate, "https://api.example.com/"),
            some("api.example.com", 443, true, false)
        );
        assert_eq!(
            destination(&gate, "http://localhost/"),
            some("localhost", 80, false, false)
        );
        assert_eq!(
            destination(&gate, "http://wiki.intranet/"),
            some("wiki.intranet", 80, false, true)
        );
        assert_eq!(destination(&gate, "http://127.0.0.1:8081/"), None);
        assert_eq!(destination(&gate, "http://api.example.com/"), None);
        // A tool's narrower list keeps the opt-in of the plugin's rule.
        let narrow = super::tests::gate(
            "[http]\nallow_private = [\"http://wiki.intranet\"]\nallow = [\"https://a.example\"]\n\
             [tools.narrow.http]\nallow = [\"http://wiki.intranet\"]\n",
            Some("narrow"),
        );
        assert_eq!(
            destination(&narrow, "http://wiki.intranet/"),
            some("wiki.intranet", 80, false, true)
        );
        assert_eq!(destination(&narrow, "https://a.example/"), None);
        // The attack: a tool's list naming the cloud's metadata address literally, within the
        // plugin's `*.254`, which matches its digits as text (public addresses only). Named
        // literally, the tool's rule let any address through: the metadata endpoint. A
        // narrower list keeps the plugin's rule's reach.
        let digits = super::tests::gate(
            "[http]\nallow = [\"*.254\"]\n\
             [tools.fetch.http]\nallow = [\"http://169.254.169.254\"]\n",
            Some("fetch"),
        );
        assert_eq!(
            destination(&digits, "http://169.254.169.254/latest/meta-data/"),
            some("169.254.169.254", 80, false, false)
        );
        let plugin_wide = super::tests::gate("[http]\nallow = [\"*.254\"]\n", Some("other"));
        assert_eq!(
            destination(&plugin_wide, "http://169.254.169.254/"),
            some("169.254.169.254", 80, false, false)
        );
        // Named literally by the plugin's own rule, and narrowed to it: any address.
        let named = super::tests::gate(
            "[http]\nallow = [\"http://169.254.169.254\", \"https://a.example\"]\n\
             [tools.fetch.http]\nallow = [\"http://169.254.169.254\"]\n",
            Some("fetch"),
        );
        assert_eq!(
            destination(&named, "http://169.254.169.254/"),
            some("169.254.169.254", 80, false, true)
        );
    }

    #[test]
    fn start_code_reaches_no_destination() {
        // An instance may start inside a call of a narrowed tool: its start code gets nothing,
        // neither the plugin's grants nor the tool's.
        let starting = gate(
            "[http]\nallow = [\"https://api.example.com\", \"http://127.0.0.1:8080\"]\n",
            None,
        );
        assert_eq!(destination(&starting, "https://api.example.com/"), None);
        assert_eq!(destination(&starting, "http://127.0.0.1:8080/"), None);
        let calling = gate(
            "[http]\nallow = [\"https://api.example.com\"]\n",
            Some("any"),
        );
        assert!(destination(&calling, "https://api.example.com/").is_some());
    }
}
