//! Where a plugin's HTTP request connects, and the connection itself.
//!
//! The request's host is resolved once; every address it resolves to is checked, and the
//! connection goes to an address that was checked (no second lookup a resolver could answer
//! differently: DNS rebinding). Addresses that are not public — loopback, unspecified,
//! private, shared, link-local (cloud metadata), multicast, reserved, and the IPv6 forms that
//! embed such an IPv4 address — are refused unless the grant names the address literally or
//! opts in (`[http] allow_private`). Then TCP, TLS for `https` (rustls, the webpki roots, the
//! request's host as the server name) and an HTTP/1.1 handshake (hyper), as
//! wasmtime-wasi-http's default sender does, with the request's timeouts.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use crate::policy::literal_address;

/// A failed exchange as the plugin sees it: a response head over the bounds below as that
/// (`http-response-header-section-size`), not as a protocol error.
fn response_error(error: hyper::Error) -> Error {
    if error.is_parse_too_large() {
        Error::HttpResponseHeaderSectionSize(None)
    } else {
        Error::from(error)
    }
}

/// Most bytes hyper buffers from a server: a response's whole head must fit.
const RESPONSE_BUFFER_BYTES: usize = 32 << 10;

/// Most header lines of a response.
const MAX_RESPONSE_HEADERS: usize = 64;

/// A kind of address that is not public: a request by name reaches none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    /// 127.0.0.0/8, ::1, and the names `localhost` and `*.localhost`.
    Loopback,
    /// 0.0.0.0/8 and `::` (a connection to them reaches this machine).
    Unspecified,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7, fec0::/10 and 64:ff9b:1::/48.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT.
    Shared,
    /// 169.254.0.0/16 (where clouds serve instance metadata) and fe80::/10.
    LinkLocal,
    /// 224.0.0.0/4 and ff00::/8.
    Multicast,
    /// Not routed on the internet: 240.0.0.0/4 and the broadcast address, 192.0.0.0/24,
    /// the documentation and benchmarking ranges, and IPv6 outside 2000::/3.
    Reserved,
    /// A public address a cloud platform answers only from inside its machines: Azure's
    /// 168.63.129.16 (its host agent, DNS and health probes).
    Platform,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loopback => "a loopback address",
            Self::Unspecified => "an unspecified address (this machine)",
            Self::Private => "a private address",
            Self::Shared => "a shared (carrier-grade NAT) address",
            Self::LinkLocal => "a link-local address (where clouds serve instance metadata)",
            Self::Multicast => "a multicast address",
            Self::Reserved => "a reserved address",
            Self::Platform => "a cloud platform's address for its own machines",
        })
    }
}

/// The range `ip` is in if it is not a public unicast address; `None` if it is public.
/// IPv6 forms that carry an IPv4 address (mapped `::ffff:a.b.c.d`, translated, compatible,
/// NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`) are judged by that address.
pub(crate) fn non_public(ip: IpAddr) -> Option<Range> {
    match ip {
        IpAddr::V4(ip) => non_public_v4(ip),
        IpAddr::V6(ip) => non_public_v6(ip),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<Range> {
    let [a, b, c, d] = ip.octets();
    if [a, b, c, d] == [168, 63, 129, 16] {
        return Some(Range::Platform);
    }
    Some(match (a, b, c) {
        (0, _, _) => Range::Unspecified,
        (127, _, _) => Range::Loopback,
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Range::Private,
        (100, 64..=127, _) => Range::Shared,
        (169, 254, _) => Range::LinkLocal,
        (224..=239, _, _) => Range::Multicast,
        // Future use, and the broadcast address.
        (240..=255, _, _) => Range::Reserved,
        // IETF protocol assignments, but for the two global anycast services in it.
        (192, 0, 0) if !matches!(d, 9 | 10) => Range::Reserved,
        // Documentation and benchmarking.
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (198, 18..=19, _) => Range::Reserved,
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<Range> {
    if ip.is_unspecified() {
        return Some(Range::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Range::Loopback);
    }
    let embedded = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match ip.segments() {
        // Mapped ::ffff:a.b.c.d, translated ::ffff:0:a.b.c.d, compatible ::a.b.c.d (which
        // also holds :: and ::1, answered above) and NAT64 64:ff9b::a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, high, low]
        | [0, 0, 0, 0, 0xffff, 0, high, low]
        | [0, 0, 0, 0, 0, 0, high, low]
        | [0x64, 0xff9b, 0, 0, 0, 0, high, low] => non_public_v4(embedded(high, low)),
        // 6to4: 2002:aabb:ccdd::/48 carries a.b.c.d.
        [0x2002, high, low, ..] => non_public_v4(embedded(high, low)),
        // Local-use NAT64 translates to networks of its own.
        [0x64, 0xff9b, 1, ..] => Some(Range::Private),
        [0xfc00..=0xfdff, ..] | [0xfec0..=0xfeff, ..] => Some(Range::Private),
        [0xfe80..=0xfebf, ..] => Some(Range::LinkLocal),
        [0xff00..=0xffff, ..] => Some(Range::Multicast),
        // Documentation: 2001:db8::/32 and 3fff::/20; IETF protocol assignments, 2001::/23
        // (Teredo's 2001::/32 among them, which reaches IPv4 hosts through a relay).
        [0x2001, 0x0db8, ..] | [0x3fff, 0..=0x0fff, ..] | [0x2001, 0..=0x01ff, ..] => {
            Some(Range::Reserved)
        }
        // Global unicast is 2000::/3; the rest is reserved or one of the ranges above.
        [first, ..] if !(0x2000..=0x3fff).contains(&first) => Some(Range::Reserved),
        _ => None,
    }
}

/// Where a granted request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// The host as the request names it (a name, an IPv4 address or a bracketed IPv6 one).
    pub host: String,
    pub port: u16,
    /// `https`: TLS, with `host` as the server name.
    pub tls: bool,
    /// Whether the grant names the address literally or opts in to non-public addresses.
    pub any_address: bool,
}

/// Why a destination was not connected to.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The host resolved to an address that is not public (and the grant allows only public
    /// ones).
    Address { address: IpAddr, range: Range },
    /// Resolving or connecting failed.
    Failed(Error),
}

impl From<Error> for Refused {
    fn from(error: Error) -> Self {
        Self::Failed(error)
    }
}

/// Name lookups running at once, host-wide. A lookup holds a blocking thread until the
/// resolver answers, and a call that ends cannot stop it (`getaddrinfo` cannot be cancelled):
/// without a bound, a plugin whose name's nameserver stops answering could, call after call,
/// fill tokio's pool of blocking threads, which every plugin's file I/O shares.
const MAX_LOOKUPS: usize = 32;

static LOOKUPS: LazyLock<Arc<tokio::sync::Semaphore>> =
    LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS)));

/// Name lookups one instance may have running at once, its ended requests' included: a
/// plugin whose names' nameserver hangs (or that drops requests as soon as they are sent, and
/// sends more) holds at most these of the host's [`MAX_LOOKUPS`], and its further lookups wait
/// for its own to return, within their calls' time limits.
pub(crate) const MAX_LOOKUPS_PER_INSTANCE: usize = 2;

/// `resolve(host, port)` on a blocking thread, holding a place of each of `own` (the
/// instance's, the plugin's) and one of the host's (`all`) until it returns, even if the caller
/// stops waiting.
async fn lookup(
    own: &[Arc<tokio::sync::Semaphore>],
    all: &Arc<tokio::sync::Semaphore>,
    host: String,
    port: u16,
    resolve: fn(String, u16) -> std::io::Result<Vec<SocketAddr>>,
) -> std::io::Result<Vec<SocketAddr>> {
    let mut places = Vec::with_capacity(own.len() + 1);
    for places_of in own.iter().chain([all]) {
        places.push(
            Arc::clone(places_of)
                .acquire_owned()
                .await
                .map_err(std::io::Error::other)?,
        );
    }
    tokio::task::spawn_blocking(move || {
        let _places = places;
        resolve(host, port)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// The addresses of `destination`, each checked, resolved once. A name any of whose
/// addresses is not public is refused whole, unless `destination.any_address`. A lookup holds
/// a place of each of `lookups` (the instance's, the plugin's) while it runs.
pub(crate) async fn resolve(
    destination: &Destination,
    lookups: &[Arc<tokio::sync::Semaphore>],
) -> Result<Vec<SocketAddr>, Refused> {
    let Destination {
        host,
        port,
        any_address,
        ..
    } = destination;
    let addresses: Vec<IpAddr> = if let Some(address) = literal_address(host) {
        vec![address]
    } else if crate::loopback::loopback(host).is_some() {
        // `localhost` and the names under it are loopback by definition (RFC 6761),
        // whatever a resolver says.
        crate::loopback::LOOPBACK_ADDRESSES.to_vec()
    } else {
        let found = lookup(lookups, &LOOKUPS, host.clone(), *port, |host, port| {
            std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port)).map(Iterator::collect)
        })
        .await
        .map_err(|error| Error::DnsError {
            rcode: Some(error.to_string()),
            info_code: None,
        })?;
        found.into_iter().map(|address| address.ip()).collect()
    };
    if addresses.is_empty() {
        return Err(Error::DnsError {
            rcode: Some("the name has no addresses".into()),
            info_code: None,
        }
        .into());
    }
    if !any_address {
        for &address in &addresses {
            if let Some(range) = non_public(address) {
                return Err(Refused::Address { address, range });
            }
        }
    }
    // A mapped address is connected to as the IPv4 address it is.
    Ok(addresses
        .into_iter()
        .map(|address| SocketAddr::new(address.to_canonical(), *port))
        .collect())
}

/// The TLS settings of every connection: the webpki roots, ring's algorithms (whatever
/// process-wide provider another crate installs), TLS 1.2 and 1.3. (`None` only if ring
/// supported neither: then every https request fails with a TLS error.)
static TLS: LazyLock<Option<Arc<rustls::ClientConfig>>> = LazyLock::new(|| {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .ok()?;
    Some(Arc::new(
        builder.with_root_certificates(roots).with_no_client_auth(),
    ))
});

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// The response, and the connection's I/O to drive while its body is read.
pub(crate) type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// Sends `request` to `destination` over a new connection to one of `addresses` (tried in
/// order), with the request's timeouts (600 s each by default, as wasmtime-wasi-http's).
pub(crate) async fn send(
    mut request: http::Request<WasiBody>,
    destination: &Destination,
    addresses: &[SocketAddr],
    options: Option<RequestOptions>,
) -> Result<Sent, Error> {
    let timeout = |pick: fn(&RequestOptions) -> Option<Duration>| {
        options
            .as_ref()
            .and_then(pick)
            .unwrap_or(Duration::from_secs(600))
    };
    let connect_timeout = timeout(|o| o.connect_timeout);
    let first_byte_timeout = timeout(|o| o.first_byte_timeout);
    let between_bytes_timeout = timeout(|o| o.between_bytes_timeout);

    let connect = async {
        let tcp = connect_any(addresses).await?;
        let stream: Box<dyn Stream> = if destination.tls {
            let name = match literal_address(&destination.host) {
                Some(address) => rustls::pki_types::ServerName::IpAddress(address.into()),
                None => rustls::pki_types::ServerName::try_from(destination.host.clone()).map_err(
                    |_| Error::DnsError {
                        rcode: Some("the host is not a valid DNS name for TLS".into()),
                        info_code: None,
                    },
                )?,
            };
            let config = TLS.as_ref().ok_or(Error::TlsProtocolError)?;
            let tls = tokio_rustls::TlsConnector::from(Arc::clone(config))
                .connect(name, tcp)
                .await
                .map_err(tls_error)?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        hyper::client::conn::http1::Builder::new()
            // A response's head within 32 KiB and 64 headers (hyper allows some 400 KiB and
            // 100): a plugin may keep a response's headers, in host memory the memory limit
            // does not see, for each of its thousand resources.
            .max_buf_size(RESPONSE_BUFFER_BYTES)
            .max_headers(MAX_RESPONSE_HEADERS)
            .handshake::<_, WasiBody>(TokioIo::new(stream))
            .await
            .map_err(Error::from)
    };
    let (mut sender, connection) = tokio::time::timeout(connect_timeout, connect)
        .await
        .map_err(|_| Error::ConnectionTimeout)??;

    // The request line carries the path only (the authority is in the Host header).
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;

    let response = async {
        tokio::time::timeout(first_byte_timeout, sender.send_request(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?
            .map_err(response_error)
    };
    // Wait for the response head while driving the connection.
    let mut connection = Box::pin(connection);
    tokio::pin!(response);
    let (response, connection) = tokio::select! {
        biased;
        response = &mut response => (response?, Some(connection)),
        ended = &mut connection => {
            ended.map_err(response_error)?;
            (response.await?, None)
        }
    };
    let io = async move {
        let Some(connection) = connection else {
            return Ok(());
        };
        connection.await.map_err(|error| {
            if error.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(error)
            }
        })
    };
    let body = |incoming| {
        // A zero period would make tokio panic: 1 ns is as good as zero.
        let mut idle = tokio::time::interval(between_bytes_timeout.max(Duration::from_nanos(1)));
        idle.reset();
        ResponseBody { incoming, idle }.boxed_unsync()
    };
    Ok((
        response.map(body),
        Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
    ))
}

/// A TCP connection to the first of `addresses` that accepts one.
async fn connect_any(addresses: &[SocketAddr]) -> Result<TcpStream, Error> {
    let mut last = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(Error::Connect(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to")
    })))
}

/// A TLS failure, as precise as `wasi:http` can say it.
fn tls_error(error: std::io::Error) -> Error {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => Error::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => Error::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => Error::Tls(error),
    }
}

/// A response body that fails when no data comes for the request's between-bytes timeout.
struct ResponseBody {
    incoming: Incoming,
    idle: tokio::time::Interval,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(if error.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(error)
            }))),
            Poll::Ready(Some(Ok(frame))) => {
                self.idle.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.idle.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    /// Lookups that hang, each left behind by a call that ended: no more of them run at once
    /// than their places, however many calls leave them; and one instance's hold no more than
    /// its own places of the host's, however many of its calls leave them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lookups_left_by_ended_calls_hold_their_places_until_they_return() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static RUNNING: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        static RELEASED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        fn hanging(_host: String, _port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
            let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
            MOST.fetch_max(now, Ordering::SeqCst);
            while !RELEASED.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            Ok(Vec::new())
        }
        let places = std::sync::Arc::new(tokio::sync::Semaphore::new(4));
        let semaphore = |n| std::sync::Arc::new(tokio::sync::Semaphore::new(n));
        let give_up_forty = |own: &dyn Fn() -> Vec<Arc<tokio::sync::Semaphore>>| {
            let places = Arc::clone(&places);
            let calls: Vec<_> = (0..40).map(|_| own()).collect();
            async move {
                for own in calls {
                    let lookup = super::lookup(&own, &places, "hangs.example".into(), 443, hanging);
                    let gave_up =
                        tokio::time::timeout(std::time::Duration::from_millis(10), lookup).await;
                    assert!(gave_up.is_err(), "the lookup hangs");
                }
            }
        };
        // One instance's forty calls, each giving up on its lookup: they hold its own two
        // places, and two of the host's four.
        let one = semaphore(MAX_LOOKUPS_PER_INSTANCE);
        give_up_forty(&|| vec![Arc::clone(&one)]).await;
        assert_eq!(one.available_permits(), 0);
        assert_eq!(
            places.available_permits(),
            4 - MAX_LOOKUPS_PER_INSTANCE,
            "one instance holds only its own share of the host's places"
        );
        // Forty instances of one plugin (a fresh one for each call, as stateless requests
        // get) whose plugin has one place left: one more of the host's.
        let plugin = semaphore(1);
        give_up_forty(&|| vec![semaphore(MAX_LOOKUPS_PER_INSTANCE), Arc::clone(&plugin)]).await;
        assert_eq!(
            places.available_permits(),
            4 - MAX_LOOKUPS_PER_INSTANCE - 1,
            "one plugin's instances hold only the plugin's share"
        );
        // Many plugins' instances: no more at once than the host's places.
        give_up_forty(&|| vec![semaphore(MAX_LOOKUPS_PER_INSTANCE), semaphore(8)]).await;
        assert!(
            MOST.load(Ordering::SeqCst) <= 4,
            "{} at once",
            MOST.load(Ordering::SeqCst)
        );
        assert_eq!(
            places.available_permits(),
            0,
            "the hanging lookups hold every place"
        );
        RELEASED.store(true, Ordering::SeqCst);
        // Once they return, their places are free again.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while places.available_permits() < 4 {
            assert!(std::time::Instant::now() < deadline, "the places came back");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    use super::*;

    fn range(ip: &str) -> Option<Range> {
        non_public(ip.parse().unwrap_or_else(|e| panic!("{ip}: {e}")))
    }

    #[test]
    fn every_non_public_range_is_refused_in_both_families_and_mapped_forms() {
        let cases: &[(&str, Option<Range>)] = &[
            // Loopback.
            ("127.0.0.1", Some(Range::Loopback)),
            ("127.255.255.254", Some(Range::Loopback)),
            ("::1", Some(Range::Loopback)),
            // Unspecified.
            ("0.0.0.0", Some(Range::Unspecified)),
            ("0.1.2.3", Some(Range::Unspecified)),
            ("::", Some(Range::Unspecified)),
            // Private.
            ("10.0.0.1", Some(Range::Private)),
            ("10.255.255.255", Some(Range::Private)),
            ("172.16.0.1", Some(Range::Private)),
            ("172.31.255.255", Some(Range::Private)),
            ("192.168.1.1", Some(Range::Private)),
            ("fc00::1", Some(Range::Private)),
            ("fdff:ffff::1", Some(Range::Private)),
            ("fec0::1", Some(Range::Private)),
            ("64:ff9b:1::1", Some(Range::Private)),
            // Shared.
            ("100.64.0.1", Some(Range::Shared)),
            ("100.127.255.255", Some(Range::Shared)),
            // Link-local and metadata.
            ("169.254.169.254", Some(Range::LinkLocal)),
            ("168.63.129.16", Some(Range::Platform)),
            ("::ffff:168.63.129.16", Some(Range::Platform)),
            ("168.63.129.17", None),
            ("169.254.0.1", Some(Range::LinkLocal)),
            ("fe80::1", Some(Range::LinkLocal)),
            ("febf::1", Some(Range::LinkLocal)),
            // Multicast, reserved, broadcast, documentation.
            ("224.0.0.1", Some(Range::Multicast)),
            ("239.255.255.250", Some(Range::Multicast)),
            ("ff02::1", Some(Range::Multicast)),
            ("240.0.0.1", Some(Range::Reserved)),
            ("255.255.255.255", Some(Range::Reserved)),
            ("192.0.0.1", Some(Range::Reserved)),
            ("192.0.2.1", Some(Range::Reserved)),
            ("198.18.0.1", Some(Range::Reserved)),
            ("2001:db8::1", Some(Range::Reserved)),
            ("2001::1", Some(Range::Reserved)),
            ("2001:1ff::1", Some(Range::Reserved)),
            ("2001:200::1", None),
            ("100::1", Some(Range::Reserved)),
            ("4000::1", Some(Range::Reserved)),
            // IPv4 inside IPv6: mapped, translated, compatible, NAT64, 6to4.
            ("::ffff:127.0.0.1", Some(Range::Loopback)),
            ("::ffff:7f00:1", Some(Range::Loopback)),
            ("::ffff:0.0.0.0", Some(Range::Unspecified)),
            ("::ffff:10.1.2.3", Some(Range::Private)),
            ("::ffff:172.16.0.1", Some(Range::Private)),
            ("::ffff:192.168.0.1", Some(Range::Private)),
            ("::ffff:100.64.0.1", Some(Range::Shared)),
            ("::ffff:169.254.169.254", Some(Range::LinkLocal)),
            ("::ffff:0:127.0.0.1", Some(Range::Loopback)),
            ("::127.0.0.1", Some(Range::Loopback)),
            ("::10.0.0.1", Some(Range::Private)),
            ("64:ff9b::169.254.169.254", Some(Range::LinkLocal)),
            ("64:ff9b::127.0.0.1", Some(Range::Loopback)),
            ("2002:7f00:1::", Some(Range::Loopback)),
            ("2002:a9fe:a9fe::1", Some(Range::LinkLocal)),
            // Public.
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("9.255.255.255", None),
            ("11.0.0.1", None),
            ("100.63.255.255", None),
            ("100.128.0.1", None),
            ("126.255.255.255", None),
            ("128.0.0.1", None),
            ("169.253.255.255", None),
            ("169.255.0.1", None),
            ("172.15.255.255", None),
            ("172.32.0.1", None),
            ("192.0.0.9", None),
            ("192.167.255.255", None),
            ("192.169.0.1", None),
            ("223.255.255.255", None),
            ("2606:4700:4700::1111", None),
            ("2001:4860:4860::8888", None),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::808:808", None),
            ("2002:808:808::1", None),
        ];
        for (ip, expected) in cases {
            assert_eq!(range(ip), *expected, "{ip}");
        }
    }

    #[test]
    fn literal_hosts_are_addresses_and_names_are_not() {
        assert_eq!(literal_address("127.0.0.1"), Some([127, 0, 0, 1].into()));
        assert_eq!(literal_address("[::1]"), Some(Ipv6Addr::LOCALHOST.into()));
        for name in [
            "localhost",
            "127.1",
            "2130706433",
            "0x7f000001",
            "::1",
            "[x]",
        ] {
            assert_eq!(literal_address(name), None, "{name}");
        }
    }

    /// An instance's places for lookups.
    fn lookups() -> [Arc<tokio::sync::Semaphore>; 1] {
        [Arc::new(tokio::sync::Semaphore::new(
            MAX_LOOKUPS_PER_INSTANCE,
        ))]
    }

    fn destination(host: &str, any_address: bool) -> Destination {
        Destination {
            host: host.into(),
            port: 8080,
            tls: false,
            any_address,
        }
    }

    #[tokio::test]
    async fn names_resolving_to_non_public_addresses_are_refused_unless_allowed() {
        // `localhost` without asking a resolver; numeric forms the resolver reads as
        // 127.0.0.1; mapped literals.
        for (host, range) in [
            ("localhost", Range::Loopback),
            ("api.localhost", Range::Loopback),
            ("127.1", Range::Loopback),
            ("2130706433", Range::Loopback),
            ("[::ffff:127.0.0.1]", Range::Loopback),
            ("[::ffff:169.254.169.254]", Range::LinkLocal),
            ("10.0.0.1", Range::Private),
        ] {
            match resolve(&destination(host, false), &lookups()).await {
                Err(Refused::Address { range: found, .. }) => assert_eq!(found, range, "{host}"),
                other => panic!("{host}: {other:?}"),
            }
        }
        // Allowed: connected to as checked, mapped forms as IPv4.
        let found = resolve(&destination("127.1", true), &lookups()).await;
        assert_eq!(
            found.ok(),
            Some(vec!["127.0.0.1:8080".parse().expect("addr")])
        );
        let found = resolve(&destination("[::ffff:127.0.0.1]", true), &lookups()).await;
        assert_eq!(
            found.ok(),
            Some(vec!["127.0.0.1:8080".parse().expect("addr")])
        );
        let found = resolve(&destination("localhost", true), &lookups()).await;
        assert_eq!(
            found.ok(),
            Some(vec![
                "127.0.0.1:8080".parse().expect("addr"),
                "[::1]:8080".parse().expect("addr")
            ])
        );
        // A literal public address needs no lookup.
        let found = resolve(&destination("1.1.1.1", false), &lookups()).await;
        assert_eq!(
            found.ok(),
            Some(vec!["1.1.1.1:8080".parse().expect("addr")])
        );
    }
}
