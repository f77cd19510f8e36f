//! The issuers' keys: discovered through each issuer's metadata, fetched with bounds, kept
//! for a while, fetched again for an unknown key id at most once per interval.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::OAuthOptions;

/// Largest metadata document read.
const MAX_METADATA_BYTES: usize = 256 << 10;
/// Largest key set read.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// Most keys taken from one key set.
const MAX_KEYS: usize = 100;

/// Whether `url` may be fetched for an issuer: `https`, or `http` to a loopback address
/// (a test's or a sidecar's issuer); no user name or password in it.
pub(super) fn check_fetch_url(url: &str) -> Result<url::Url, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("a URL with credentials in it is not accepted".into());
    }
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http"
            if parsed
                .host_str()
                .and_then(crate::loopback::loopback)
                .is_some_and(crate::loopback::Loopback::certain) =>
        {
            Ok(parsed)
        }
        scheme => Err(format!(
            "{scheme}:// is not accepted: use https (plain http only to a loopback address)"
        )),
    }
}

/// The configured issuers and their keys.
pub(crate) struct Issuers {
    by_id: HashMap<String, Arc<IssuerKeys>>,
    clients: Clients,
}

/// The HTTP clients of the fetches for issuers (bounded, following no redirects): one through
/// the environment's proxies (`HTTPS_PROXY`, `ALL_PROXY`…) for a remote issuer, and one without
/// for a loopback address, which a proxy would reach on its own side (serving its own keys,
/// which would then sign any token) and plain HTTP would cross to it in clear (an
/// introspection's client secret, the token).
///
/// A third, through the proxies too, fetches a key set that a remote issuer's metadata named on
/// another host: such a host's name resolves to other machines only (see [`OtherMachines`]).
#[derive(Clone)]
pub(super) struct Clients {
    proxied: reqwest::Client,
    direct: reqwest::Client,
    named_by_metadata: reqwest::Client,
    /// The hosts [`Clients::named_by_metadata`]'s resolver keeps off this machine.
    guarded: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// Most hosts kept in [`Clients::guarded`]: past it, the set starts again (a host is added
/// before each fetch of its key set, so the one being fetched is always in it).
const MAX_GUARDED_HOSTS: usize = 64;

impl Clients {
    fn new(options: &OAuthOptions) -> Result<Self, String> {
        let builder = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(options.fetch_timeout)
                .timeout(options.fetch_timeout)
                .user_agent(concat!("llm-worker/", env!("CARGO_PKG_VERSION")))
        };
        let built = |builder: reqwest::ClientBuilder| {
            builder
                .build()
                .map_err(|e| format!("cannot make an HTTP client: {e}"))
        };
        let guarded = Arc::default();
        let resolver = OtherMachines {
            guarded: Arc::clone(&guarded),
        };
        Ok(Self {
            proxied: built(builder())?,
            direct: built(builder().no_proxy())?,
            named_by_metadata: built(builder().dns_resolver(Arc::new(resolver)))?,
            guarded,
        })
    }

    /// The body of the key set at `jwks_uri`, which the metadata of `issuer` named
    /// (`discovered`) or the operator configured, at most `limit` bytes.
    async fn key_set(
        &self,
        issuer: &url::Url,
        jwks_uri: &url::Url,
        discovered: bool,
        limit: usize,
    ) -> Result<Vec<u8>, String> {
        let Some(host) = guarded_host(issuer, jwks_uri, discovered) else {
            return get(self.for_url(jwks_uri.as_str()), jwks_uri.as_str(), limit).await;
        };
        {
            let mut guarded = self.guarded.lock().unwrap_or_else(|p| p.into_inner());
            if guarded.len() >= MAX_GUARDED_HOSTS {
                guarded.clear();
            }
            guarded.insert(host.clone());
        }
        // Through a proxy, the proxy resolves the name, not the resolver: ask the system's
        // resolver first. If it cannot answer (a network reached through a proxy only), the
        // proxy's answer is not checked (SECURITY.md).
        if let Ok(found) = tokio::net::lookup_host((host.as_str(), 443)).await {
            other_machines(&host, found)?;
        }
        get(&self.named_by_metadata, jwks_uri.as_str(), limit).await
    }

    /// The client for a fetch of `url`.
    pub(super) fn for_url(&self, url: &str) -> &reqwest::Client {
        let loopback = url::Url::parse(url).is_ok_and(|parsed| {
            parsed
                .host_str()
                .and_then(crate::loopback::loopback)
                .is_some()
        });
        if loopback {
            &self.direct
        } else {
            &self.proxied
        }
    }
}

/// One issuer's keys.
struct IssuerKeys {
    issuer: String,
    /// Where its keys are, if configured (else found through its metadata).
    jwks_uri: Option<String>,
    cached: RwLock<Cached>,
    /// Whether a fetch of the keys runs (one at a time, in a task of its own).
    fetching: std::sync::Mutex<bool>,
    /// A new value each time a fetch ends, for the requests waiting on it.
    fetched: tokio::sync::watch::Sender<u64>,
    clients: Clients,
    min_refresh: Duration,
    max_age: Duration,
    /// The most one fetch may take, discovery included.
    fetch_limit: Duration,
}

#[derive(Default)]
struct Cached {
    keys: Vec<Key>,
    /// When the keys were fetched.
    fetched: Option<Instant>,
    /// When a fetch was last begun, successful or not.
    attempted: Option<Instant>,
    /// The key set's address, once discovered.
    jwks_uri: Option<String>,
    /// Whether the last attempt to fetch the keys failed.
    failed: bool,
}

/// A key of an issuer's key set.
#[derive(Clone)]
struct Key {
    kid: Option<String>,
    /// The algorithm its JWK declares, if it does.
    alg: Option<Algorithm>,
    key: Arc<DecodingKey>,
}

impl Key {
    fn fits(&self, kid: Option<&str>, alg: Algorithm) -> bool {
        (kid.is_none() || self.kid.as_deref() == kid)
            && self.alg.is_none_or(|declared| declared == alg)
            && self.key.family() == alg.family()
    }
}

impl Issuers {
    pub(super) fn new(options: &OAuthOptions) -> Result<Self, String> {
        let clients = Clients::new(options)?;
        let by_id = options
            .issuers
            .iter()
            .map(|issuer| {
                let keys = IssuerKeys {
                    issuer: issuer.issuer.clone(),
                    jwks_uri: issuer.jwks_uri.clone(),
                    cached: RwLock::default(),
                    fetching: std::sync::Mutex::new(false),
                    fetched: tokio::sync::watch::Sender::new(0),
                    clients: clients.clone(),
                    min_refresh: options.min_refresh,
                    max_age: options.keys_max_age,
                    // The metadata, then the key set, each within the fetch's time limit (and
                    // a name lookup).
                    fetch_limit: options.fetch_timeout.saturating_mul(3),
                };
                (issuer.issuer.clone(), Arc::new(keys))
            })
            .collect();
        Ok(Self { by_id, clients })
    }

    /// The HTTP clients the fetches use.
    pub(super) fn clients(&self) -> &Clients {
        &self.clients
    }

    /// The key of `issuer` for a token signed with `alg` by the key `kid`: an error for the
    /// client if the issuer is not configured or has no such key.
    pub(super) async fn key(
        &self,
        issuer: &str,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<DecodingKey>, String> {
        let keys = self
            .by_id
            .get(issuer)
            .ok_or_else(|| format!("its issuer {issuer:?} is not one this server trusts"))?;
        keys.key(kid, alg).await
    }
}

impl IssuerKeys {
    async fn key(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<DecodingKey>, String> {
        if let Some(key) = self.cached_key(kid, alg) {
            return Ok(key);
        }
        // Keys past their age are never used, not even while they are fetched again: a key the
        // issuer has withdrawn (a leaked one) would sign tokens for as long as the fetch takes,
        // or fails. Requests needing keys wait for the one fetch in progress, within its time
        // limit; that fetch runs in a task of its own, so a request whose client goes away
        // does not take with it a fetch the others wait for (its attempt would count, and
        // every token of the issuer be refused until the next one is allowed).
        let mut ended = self.fetched.subscribe();
        let waits = {
            let mut fetching = self
                .fetching
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !*fetching && self.may_fetch() {
                *fetching = true;
                self.start_fetch();
            }
            *fetching
        };
        if waits {
            let _ = tokio::time::timeout(self.fetch_limit, ended.changed()).await;
        }
        if !self.fresh() {
            // What went wrong is the operator's to read (logged when it did), not the client's.
            return Err("the keys of its issuer cannot be fetched now; try again later".to_owned());
        }
        self.cached_key(kid, alg).ok_or_else(|| match kid {
            Some(kid) => format!("its key {kid:?} is not among its issuer's keys"),
            None => {
                "it names no key (`kid`) and its issuer has no single key for its algorithm".into()
            }
        })
    }

    /// Whether the keys may be fetched again for a token they have no key for: not within the
    /// shortest interval between fetches after an attempt that failed (an issuer that is down
    /// is not hammered; its tokens are refused meanwhile), nor while the keys are within their
    /// age (a flood of made-up key ids costs one fetch per interval). Keys past their age after
    /// an attempt that succeeded are fetched again whatever the interval, so an age shorter
    /// than the interval makes no gap.
    fn may_fetch(&self) -> bool {
        let cached = self.read();
        let recently = cached
            .attempted
            .is_some_and(|at| at.elapsed() < self.min_refresh);
        !(recently && (cached.failed || self.fresh_in(&cached)))
    }

    /// Fetches the keys in a task of its own, within the fetch's time limit; the requests
    /// waiting are told when it ends, however it ends.
    fn start_fetch(self: &Arc<Self>) {
        /// Says the fetch ended when dropped (a panic included).
        struct Ending(Arc<IssuerKeys>);
        impl Drop for Ending {
            fn drop(&mut self) {
                *self
                    .0
                    .fetching
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = false;
                self.0.fetched.send_modify(|count| *count += 1);
            }
        }
        self.write().attempted = Some(Instant::now());
        let ending = Ending(Arc::clone(self));
        tokio::spawn(async move {
            let this = &ending.0;
            let fetched = tokio::time::timeout(this.fetch_limit, this.fetch())
                .await
                .unwrap_or_else(|_| Err("it took longer than its time limit".to_owned()));
            match fetched {
                Ok((jwks_uri, keys)) => {
                    let mut cached = this.write();
                    cached.keys = keys;
                    cached.fetched = Some(Instant::now());
                    cached.jwks_uri = Some(jwks_uri);
                    cached.failed = false;
                }
                Err(error) => {
                    tracing::warn!(
                        "cannot fetch the keys of the issuer {}: {error}",
                        this.issuer
                    );
                    this.write().failed = true;
                }
            }
        });
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cached> {
        self.cached.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cached> {
        self.cached.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the keys were fetched within their age.
    fn fresh(&self) -> bool {
        self.fresh_in(&self.read())
    }

    /// Whether `cached` keys were fetched within their age.
    fn fresh_in(&self, cached: &Cached) -> bool {
        cached.fetched.is_some_and(|at| at.elapsed() < self.max_age)
    }

    /// The cached key for the token, if the keys are within their age. A token without a key
    /// id takes the one key that fits its algorithm, if only one does.
    fn cached_key(&self, kid: Option<&str>, alg: Algorithm) -> Option<Arc<DecodingKey>> {
        let cached = self.read();
        if !self.fresh_in(&cached) {
            return None;
        }
        let mut fitting = cached.keys.iter().filter(|key| key.fits(kid, alg));
        let key = fitting.next()?;
        if kid.is_none() && fitting.next().is_some() {
            return None;
        }
        Some(Arc::clone(&key.key))
    }

    /// Fetches the issuer's keys: the key set's address and its usable keys.
    async fn fetch(&self) -> Result<(String, Vec<Key>), String> {
        let known = self
            .jwks_uri
            .clone()
            .or_else(|| self.read().jwks_uri.clone());
        let jwks_uri = match known {
            Some(uri) => uri,
            None => self.discover().await?,
        };
        let parsed =
            check_fetch_url(&jwks_uri).map_err(|e| format!("its jwks_uri {jwks_uri:?}: {e}"))?;
        let issuer = check_fetch_url(&self.issuer)?;
        let body = self
            .clients
            .key_set(&issuer, &parsed, self.jwks_uri.is_none(), MAX_JWKS_BYTES)
            .await?;
        let set: JwkSet = serde_json::from_slice(&body)
            .map_err(|e| format!("its key set at {jwks_uri} is not a JWK set ({e})"))?;
        let keys: Vec<Key> = set
            .keys
            .iter()
            .filter(|jwk| {
                jwk.common
                    .public_key_use
                    .as_ref()
                    .is_none_or(|usage| *usage == PublicKeyUse::Signature)
            })
            .filter_map(usable)
            .take(MAX_KEYS)
            .collect();
        tracing::debug!(
            "fetched {} keys of the issuer {} from {jwks_uri}",
            keys.len(),
            self.issuer
        );
        Ok((jwks_uri, keys))
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414's well-known address, else OpenID
    /// discovery's; the document must name the issuer exactly (RFC 8414 §3.3).
    async fn discover(&self) -> Result<String, String> {
        let issuer = check_fetch_url(&self.issuer)?;
        let path = issuer.path().trim_end_matches('/');
        let mut oauth = issuer.clone();
        oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
        let mut openid = issuer.clone();
        openid.set_path(&format!("{path}/.well-known/openid-configuration"));
        let mut failures = Vec::new();
        for url in [oauth, openid] {
            let client = self.clients.for_url(url.as_str());
            let document = match get(client, url.as_str(), MAX_METADATA_BYTES).await {
                Ok(body) => body,
                Err(error) => {
                    failures.push(error);
                    continue;
                }
            };
            let document: Value = serde_json::from_slice(&document)
                .map_err(|e| format!("its metadata at {url} is not JSON ({e})"))?;
            if document.get("issuer").and_then(Value::as_str) != Some(self.issuer.as_str()) {
                return Err(format!(
                    "its metadata at {url} names another issuer ({}); refusing it",
                    document.get("issuer").unwrap_or(&Value::Null)
                ));
            }
            let jwks_uri = document
                .get("jwks_uri")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("its metadata at {url} has no jwks_uri"))?;
            keys_where_the_issuer_is(&issuer, jwks_uri)
                .map_err(|reason| format!("its metadata at {url} {reason}"))?;
            return Ok(jwks_uri.to_owned());
        }
        Err(failures.join("; "))
    }
}

/// Whether an issuer's metadata may name `jwks_uri` for its keys. The document names where
/// the server fetches: a remote issuer naming this machine would have it send requests to its
/// own services (a blind request, made again for each unknown key id). Only an issuer on this
/// machine keeps its keys here; an operator who means otherwise configures the issuer's
/// `jwks_uri`.
fn keys_where_the_issuer_is(issuer: &url::Url, jwks_uri: &str) -> Result<(), String> {
    match url::Url::parse(jwks_uri) {
        Ok(keys) if on_this_machine(&keys) && !on_this_machine(issuer) => Err(format!(
            "puts its keys on this machine ({}), and the issuer is not on it; refusing it \
             (configure the issuer's jwks_uri if that is meant)",
            keys.origin().ascii_serialization()
        )),
        _ => Ok(()),
    }
}

/// Whether `url` names this machine as written: a loopback name or address, or the unspecified
/// address (`0.0.0.0`, `[::]`), which a connection reaches this machine at.
fn on_this_machine(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(address)) => address_on_this_machine(address.into()),
        Some(url::Host::Ipv6(address)) => address_on_this_machine(address.into()),
        _ => url.host_str().and_then(crate::loopback::loopback).is_some(),
    }
}

/// Whether a connection to `address` reaches this machine: loopback or unspecified, also as an
/// IPv4-mapped IPv6 address (`[::ffff:0.0.0.0]` is connected to over IPv4, as `0.0.0.0`).
fn address_on_this_machine(address: std::net::IpAddr) -> bool {
    let address = address.to_canonical();
    address.is_loopback() || address.is_unspecified()
}

/// The host of a key set whose name must not lead to this machine, if it is one: a key set that
/// a remote issuer's metadata named (`discovered`) on another host. A name the operator gave
/// (the issuer's, or a configured key set's) resolves as the operator's resolver says; a host
/// the issuer's document chose does not get to reach this machine by a name either.
fn guarded_host(issuer: &url::Url, jwks_uri: &url::Url, discovered: bool) -> Option<String> {
    (discovered && !on_this_machine(issuer) && jwks_uri.host() != issuer.host())
        .then(|| jwks_uri.host_str())
        .flatten()
        .map(|host| host.trim_end_matches('.').to_ascii_lowercase())
}

/// The resolver of the key sets that a remote issuer's metadata names on another host: for
/// those hosts (`guarded`), the addresses of this machine are dropped from what the system's
/// resolver answers, and a name that resolves only to this machine is an error. The document's
/// URL was refused before the fetch if it names this machine as written; this stops the same
/// through a name (one the issuer's author points at `127.0.0.1`), so that a remote issuer
/// cannot have the server connect to its own services, again for each unknown key id; hyper
/// connects to the addresses it returns, so a name cannot change its answer in between. Any
/// other name asked of it (a proxy's) resolves as usual. Other addresses of this machine (its
/// own network interfaces') are not known here and not dropped (SECURITY.md).
struct OtherMachines {
    guarded: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl reqwest::dns::Resolve for OtherMachines {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let guarded = self
            .guarded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&name);
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let kept = if guarded {
                other_machines(&name, found)?
            } else {
                found.collect()
            };
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses `found` for `name` that are of other machines, or why there are none.
fn other_machines(
    name: &str,
    found: impl IntoIterator<Item = std::net::SocketAddr>,
) -> Result<Vec<std::net::SocketAddr>, String> {
    let mut dropped = false;
    let kept: Vec<_> = found
        .into_iter()
        .filter(|address| {
            let here = address_on_this_machine(address.ip());
            dropped |= here;
            !here
        })
        .collect();
    if kept.is_empty() && dropped {
        return Err(format!(
            "{name} resolves to this machine only, and a remote issuer's metadata named it; \
             refusing it (configure the issuer's jwks_uri if that is meant)"
        ));
    }
    Ok(kept)
}

#[cfg(test)]
#[test]
fn a_name_resolving_to_this_machine_is_not_reached_for_a_remote_issuer() {
    let address = |text: &str| text.parse::<std::net::SocketAddr>().expect("an address");
    let refused = other_machines(
        "keys.example",
        [
            address("127.0.0.1:0"),
            address("[::ffff:0.0.0.0]:0"),
            address("[::1]:0"),
        ],
    )
    .expect_err("only this machine");
    assert!(
        refused.contains("keys.example resolves to this machine only"),
        "{refused}"
    );
    assert_eq!(
        other_machines(
            "keys.example",
            [address("127.0.0.2:0"), address("192.0.2.7:0")]
        ),
        Ok(vec![address("192.0.2.7:0")])
    );
    // Which key sets are guarded: those the remote issuer's document put on another host.
    let url = |text: &str| url::Url::parse(text).expect("a URL");
    let guarded = |issuer: &str, keys: &str, discovered: bool| {
        guarded_host(&url(issuer), &url(keys), discovered)
    };
    assert_eq!(
        guarded("https://idp.example", "https://Keys.Example./jwks", true).as_deref(),
        Some("keys.example")
    );
    assert_eq!(
        guarded("https://idp.example", "https://keys.example/jwks", false),
        None,
        "configured"
    );
    assert_eq!(
        guarded("https://idp.example", "https://idp.example/jwks", true),
        None,
        "the issuer's own name"
    );
    assert_eq!(
        guarded("http://127.0.0.1:9000", "https://keys.example/jwks", true),
        None,
        "a local issuer"
    );
    // Through the client, where this machine's own name resolves to loopback only (as
    // Debian's /etc/hosts has it): a guarded name is not connected to, and the same name
    // unguarded (as a proxy's would be) is.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim().to_ascii_lowercase();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let resolved = runtime
        .block_on(tokio::net::lookup_host((host.as_str(), 0)))
        .map(|found| found.collect::<Vec<_>>())
        .unwrap_or_default();
    if host.is_empty()
        || crate::loopback::loopback(&host).is_some()
        || !resolved
            .iter()
            .all(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST)
        || resolved.is_empty()
    {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let keys = format!(
        "http://{host}:{}/jwks",
        listener.local_addr().expect("its address").port()
    );
    let options = OAuthOptions::new(
        url::Url::parse("https://mcp.example/mcp").expect("a URL"),
        [super::IssuerOptions::new("https://idp.example")],
    );
    let clients = Clients::new(&options).expect("clients");
    let _guard = runtime.enter();
    clients.guarded.lock().expect("lock").insert(host.clone());
    let refused = runtime
        .block_on(get(&clients.named_by_metadata, &keys, 1024))
        .expect_err("a guarded name resolving to this machine");
    assert!(
        refused.contains("resolves to this machine only"),
        "{refused}"
    );
    assert!(listener.accept().is_err(), "connected to this machine");
    clients.guarded.lock().expect("lock").clear();
    // Unguarded: the connection is made (the listener answers nothing, so the fetch waits
    // while the connection is accepted).
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener).expect("a Tokio listener");
        tokio::select! {
            accepted = listener.accept() => {
                accepted.expect("a name not guarded resolves as usual");
            }
            fetched = get(&clients.named_by_metadata, &keys, 1024) => {
                panic!("the fetch ended before any connection: {fetched:?}");
            }
        }
    });
}

#[cfg(test)]
#[test]
fn a_remote_issuer_cannot_send_the_server_to_this_machine_for_keys() {
    let remote = url::Url::parse("https://idp.example").expect("a URL");
    let local = url::Url::parse("http://127.0.0.1:8080").expect("a URL");
    for here in [
        "http://127.0.0.1:9464/metrics",
        "https://localhost/admin",
        "http://[::1]:80/",
        "http://127.0.0.2/keys",
        "https://0.0.0.0/keys",
        "https://[::]/keys",
        "http://[::ffff:0.0.0.0]:9464/metrics",
    ] {
        let refused = keys_where_the_issuer_is(&remote, here).expect_err(here);
        assert!(refused.contains("on this machine"), "{here}: {refused}");
        assert!(keys_where_the_issuer_is(&local, here).is_ok(), "{here}");
    }
    assert!(keys_where_the_issuer_is(&remote, "https://idp.example/jwks").is_ok());
    assert!(keys_where_the_issuer_is(&remote, "https://keys.example/jwks").is_ok());
}

/// A JWK as a key, if it is one of an accepted algorithm.
fn usable(jwk: &Jwk) -> Option<Key> {
    let alg = match jwk.common.key_algorithm {
        None => None,
        Some(declared) => match declared {
            KeyAlgorithm::RS256 => Some(Algorithm::RS256),
            KeyAlgorithm::RS384 => Some(Algorithm::RS384),
            KeyAlgorithm::RS512 => Some(Algorithm::RS512),
            KeyAlgorithm::PS256 => Some(Algorithm::PS256),
            KeyAlgorithm::PS384 => Some(Algorithm::PS384),
            KeyAlgorithm::PS512 => Some(Algorithm::PS512),
            KeyAlgorithm::ES256 => Some(Algorithm::ES256),
            KeyAlgorithm::ES384 => Some(Algorithm::ES384),
            KeyAlgorithm::EdDSA => Some(Algorithm::EdDSA),
            // HMAC keys, encryption keys and the unknown are not signing keys of ours.
            _ => return None,
        },
    };
    // A symmetric key in a public key set would let anyone who read it sign.
    if matches!(
        jwk.algorithm,
        jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
    ) {
        return None;
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        key: Arc::new(key),
    })
}

/// The body of a GET of `url`, at most `limit` bytes; no redirects (the client follows none).
async fn get(client: &reqwest::Client, url: &str, limit: usize) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("cannot fetch {url}: {}", describe(&e)))?;
    if !response.status().is_success() {
        return Err(format!("{url} answered {}", response.status()));
    }
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(format!("{url} is larger than {limit} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("cannot read {url}: {}", describe(&e)))?
    {
        if body.len() + chunk.len() > limit {
            return Err(format!("{url} is larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "it did not answer in time".into()
    } else if error.is_connect() {
        // The innermost cause says why (refused, unreachable, a name refused above); the
        // operator reads it, the client never does.
        let mut cause: &dyn std::error::Error = error;
        while let Some(source) = cause.source() {
            cause = source;
        }
        format!("cannot connect ({cause})")
    } else {
        error.to_string()
    }
}
