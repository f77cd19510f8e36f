//! The HTTP service as an OAuth resource server: its metadata and 401 answers lead a client to
//! the issuer; the issuer's tokens for this server are accepted, every forged, foreign or stale
//! one refused; the issuer's keys are fetched with bounds; a session is its opener's.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use llm_worker::mcp::{
    AccessPolicy, BearerToken, HttpOptions, IssuerOptions, McpOptions, OAuthOptions, ToolCatalog,
};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::counters;

const ISSUER_RSA: &[u8] = include_bytes!("keys/issuer-rsa.pem");
const ISSUER_RSA_PUBLIC: &[u8] = include_bytes!("keys/issuer-rsa.pub.pem");
const ISSUER_EC: &[u8] = include_bytes!("keys/issuer-ec.pem");
const ATTACKER_RSA: &[u8] = include_bytes!("keys/attacker-rsa.pem");

/// What the test issuer does with a request.
#[derive(Clone, Copy, PartialEq)]
enum Issuing {
    /// Serves its metadata and keys.
    Answers,
    /// Accepts connections and never answers.
    Hangs,
}

/// An authorization server on loopback: its metadata (RFC 8414) and its key set, counting
/// the fetches of the key set.
struct Issuer {
    url: String,
    jwks_fetches: Arc<AtomicUsize>,
    /// The audience its introspection endpoint gives `opaque-good`.
    audience: Arc<std::sync::Mutex<String>>,
    introspections: Arc<AtomicUsize>,
    /// Set, its key set is answered with 503 (an issuer down, or a fetch an attacker blocks).
    keys_down: Arc<std::sync::atomic::AtomicBool>,
    /// How long it takes to answer for its key set, in milliseconds.
    keys_delay: Arc<std::sync::atomic::AtomicU64>,
}

impl Issuer {
    async fn start(behaviour: Issuing) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let jwks_fetches = Arc::new(AtomicUsize::new(0));
        let keys_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let keys_delay = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let metadata = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
        })
        .to_string();
        let mut rsa = jsonwebtoken::jwk::Jwk::from_encoding_key(
            &EncodingKey::from_rsa_pem(ISSUER_RSA).expect("RSA key"),
            Algorithm::RS256,
        )
        .expect("RSA JWK");
        rsa.common.key_id = Some("rsa-1".into());
        let mut ec = jsonwebtoken::jwk::Jwk::from_encoding_key(
            &EncodingKey::from_ec_pem(ISSUER_EC).expect("EC key"),
            Algorithm::ES256,
        )
        .expect("EC JWK");
        ec.common.key_id = Some("ec-1".into());
        let jwks = json!({ "keys": [rsa, ec] }).to_string();
        let fetches = Arc::clone(&jwks_fetches);
        let audience = Arc::new(std::sync::Mutex::new(String::new()));
        let introspections = Arc::new(AtomicUsize::new(0));
        let (served_audience, counted) = (Arc::clone(&audience), Arc::clone(&introspections));
        let issuer = url.clone();
        let down = Arc::clone(&keys_down);
        let delay = Arc::clone(&keys_delay);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                if behaviour == Issuing::Hangs {
                    // Held open, never answered, until the test ends.
                    tokio::spawn(async move {
                        let _stream = stream;
                        std::future::pending::<()>().await;
                    });
                    continue;
                }
                let (metadata, jwks, fetches) =
                    (metadata.clone(), jwks.clone(), Arc::clone(&fetches));
                let (audience, counted, issuer, down, delay) = (
                    Arc::clone(&served_audience),
                    Arc::clone(&counted),
                    issuer.clone(),
                    Arc::clone(&down),
                    Arc::clone(&delay),
                );
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let (metadata, jwks, fetches) =
                            (metadata.clone(), jwks.clone(), Arc::clone(&fetches));
                        let (audience, counted, issuer) =
                            (Arc::clone(&audience), Arc::clone(&counted), issuer.clone());
                        let down = down.load(Ordering::SeqCst);
                        let delay = Duration::from_millis(delay.load(Ordering::SeqCst));
                        async move {
                            let path = request.uri().path().to_owned();
                            if path == "/jwks" {
                                tokio::time::sleep(delay).await;
                            }
                            let body = match path.as_str() {
                                "/.well-known/oauth-authorization-server" => Some(metadata),
                                "/jwks" if down => None,
                                "/jwks" => {
                                    fetches.fetch_add(1, Ordering::SeqCst);
                                    Some(jwks)
                                }
                                "/introspect" => {
                                    counted.fetch_add(1, Ordering::SeqCst);
                                    Some(introspect(request, &audience, &issuer).await)
                                }
                                _ => None,
                            };
                            let mut response = http::Response::new(Full::new(Bytes::from(
                                body.clone().unwrap_or_default(),
                            )));
                            if body.is_none() {
                                *response.status_mut() = http::StatusCode::NOT_FOUND;
                            }
                            Ok::<_, Infallible>(response)
                        }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Self {
            url,
            jwks_fetches,
            audience,
            introspections,
            keys_down,
            keys_delay,
        }
    }

    /// Claims of a token this issuer gives `subject` for `audience`, valid for an hour.
    fn claims(&self, subject: &str, audience: &str) -> Value {
        let now = jsonwebtoken::get_current_timestamp();
        json!({
            "iss": self.url,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "exp": now + 3600,
            "scope": "mcp:tools openid",
        })
    }
}

/// The test issuer's introspection answer: `opaque-good` is active for the audience set, for
/// the client `rs` with the secret `rs-secret` only (`opaque-brief` too, until the current
/// second ends); `opaque-other` is active for another audience; `opaque-refresh` is a refresh
/// token, `opaque-float` and `opaque-text` carry an expiry as a float and as text; anything else
/// is not active.
async fn introspect(
    request: http::Request<hyper::body::Incoming>,
    audience: &std::sync::Mutex<String>,
    issuer: &str,
) -> String {
    use base64::Engine;
    use http_body_util::BodyExt;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("rs:rs-secret")
    );
    let authorized = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .is_some_and(|value| value.as_bytes() == expected.as_bytes());
    let body = request
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    let form = String::from_utf8_lossy(&body);
    let token = form
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .unwrap_or_default();
    let now = jsonwebtoken::get_current_timestamp();
    let answer = match (authorized, token) {
        (true, "opaque-good") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": now + 600,
        }),
        // Active, but for this very second only: its answer cannot be kept.
        (true, "opaque-brief") => json!({
            "active": true, "sub": "frank", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": now,
        }),
        (true, "opaque-other") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": "https://other.example/mcp", "exp": now + 600,
        }),
        // A refresh token the issuer says is active: not an access token.
        (true, "opaque-refresh") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": now + 600,
            "token_type": "refresh_token",
        }),
        // Bound to its sender (DPoP): good only with a proof this server does not check.
        (true, "opaque-dpop") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": now + 600,
            "token_type": "DPoP", "cnf": {"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"},
        }),
        (true, "opaque-mtls") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": now + 600,
            "token_type": "Bearer", "cnf": {"x5t#S256": "bwcK0esc3ACC3DB2Y5_lESsXE8o9ltc05O89jdN-dg2"},
        }),
        // Expired an hour ago, written as a float (or not a number at all).
        (true, "opaque-float") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": (now - 3600) as f64 + 0.5,
        }),
        (true, "opaque-text") => json!({
            "active": true, "sub": "erin", "iss": issuer, "scope": "mcp:tools",
            "aud": audience.lock().expect("lock").clone(), "exp": "tomorrow",
        }),
        _ => json!({"active": false}),
    };
    answer.to_string()
}

/// A JWT of `claims`, signed by the PEM `key` with `alg`, naming the key `kid`.
fn sign(claims: &Value, alg: Algorithm, key: &[u8], kid: &str) -> String {
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(key).expect("an EC key"),
        Algorithm::HS256 => EncodingKey::from_secret(key).expect("a secret"),
        _ => EncodingKey::from_rsa_pem(key).expect("an RSA key"),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    header.typ = Some("at+jwt".into());
    jsonwebtoken::encode(&header, claims, &key).expect("signed")
}

/// The unsigned token (`alg: none`) of `claims`.
fn unsigned(claims: &Value) -> String {
    use base64::Engine;
    let encode =
        |value: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string());
    format!(
        "{}.{}.",
        encode(&json!({"alg": "none", "typ": "JWT", "kid": "rsa-1"})),
        encode(claims)
    )
}

/// The server, accepting the tokens of `issuer` for its own URL (with `tweak` applied to the
/// options) and the static tokens `tokens`: its URL, which is the resource.
async fn serve(
    issuer: &Issuer,
    tokens: Vec<BearerToken>,
    tweak: impl FnOnce(OAuthOptions) -> OAuthOptions,
) -> String {
    serve_catalog(
        issuer,
        tokens,
        tweak,
        ToolCatalog::new([counters("all", 1, &["count"])]),
    )
    .await
}

/// [`serve`] with the tools of `catalog`.
async fn serve_catalog(
    issuer: &Issuer,
    tokens: Vec<BearerToken>,
    tweak: impl FnOnce(OAuthOptions) -> OAuthOptions,
    catalog: ToolCatalog,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let oauth = tweak(
        OAuthOptions::new(
            url.parse().expect("a URL"),
            [IssuerOptions::new(issuer.url.clone())],
        )
        .required_scopes(["mcp:tools"]),
    );
    tokio::spawn(llm_worker::mcp::serve_http(
        listener,
        catalog,
        McpOptions::new("oauth", "1"),
        HttpOptions::default().named_tokens(tokens).oauth(oauth),
    ));
    url
}

/// Opens a session at `url` with `token`: its id.
async fn open_session(url: &str, token: &str) -> String {
    let opened = initialize(url, Some(token), None).await;
    assert_eq!(opened.status(), 200);
    opened
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned()
}

/// A POST of `message` to `url` in the session `session`, with `token`.
fn in_session(url: &str, session: &str, token: &str, message: Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(message.to_string())
}

/// POSTs an `initialize` to `url` with `token`, in the session `session` if given.
async fn initialize(url: &str, token: Option<&str>, session: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}},
            })
            .to_string(),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.send().await.expect("an answer")
}

fn challenge(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_and_the_401_lead_a_client_to_the_issuer() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| o).await;
    let origin = url.trim_end_matches("/mcp");
    let expected_metadata = format!("{origin}/.well-known/oauth-protected-resource/mcp");

    let refused = initialize(&url, None, None).await;
    assert_eq!(refused.status(), 401);
    let header = challenge(&refused);
    assert!(
        header.contains(&format!("resource_metadata=\"{expected_metadata}\"")),
        "{header}"
    );
    assert!(header.contains("scope=\"mcp:tools\""), "{header}");

    // RFC 9728's path-suffixed form, and the bare one of earlier MCP revisions.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let metadata = reqwest::get(format!("{origin}{path}"))
            .await
            .expect("metadata")
            .text()
            .await
            .expect("a body");
        let metadata: Value = serde_json::from_str(&metadata).expect("JSON");
        assert_eq!(metadata["resource"], url.as_str(), "{path}");
        assert_eq!(metadata["authorization_servers"], json!([issuer.url]));
        assert_eq!(metadata["scopes_supported"], json!(["mcp:tools"]));
        // The server signs none of its responses (RFC 9728's field is not the tokens').
        assert!(
            metadata
                .get("resource_signing_alg_values_supported")
                .is_none(),
            "{metadata}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_token_of_the_issuer_for_this_server_calls_a_tool() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| o).await;
    for (alg, key, kid) in [
        (Algorithm::RS256, ISSUER_RSA, "rsa-1"),
        (Algorithm::ES256, ISSUER_EC, "ec-1"),
    ] {
        let token = sign(&issuer.claims("alice", &url), alg, key, kid);
        let client = ()
            .serve(StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(token),
            ))
            .await
            .unwrap_or_else(|e| panic!("initialize with an {alg:?} token: {e}"));
        let tools = client.list_all_tools().await.expect("tools/list");
        assert_eq!(tools.len(), 1);
        let result = client
            .call_tool(rmcp::model::CallToolRequestParams::new("count"))
            .await
            .expect("tools/call");
        assert_eq!(crate::greeting(&result), "0");
        client.cancel().await.expect("close");
    }
    assert_eq!(
        issuer.jwks_fetches.load(Ordering::SeqCst),
        1,
        "the keys are fetched once and kept"
    );
}

/// The attack: an issuer that leaves `sub` out of its access tokens (RFC 7662 makes it
/// optional in an introspection answer; untyped JWTs are not held to RFC 9068). The identity
/// fell back to the client the token was issued to, so every user of one client app was one
/// identity: one owner of sessions and stateless tasks, one quota, one audit name. Such a token
/// is refused, saying how to accept clients acting for themselves; with that option, it is the
/// client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_a_subject_is_refused_unless_clients_are_accepted() {
    let issuer = Issuer::start(Issuing::Answers).await;
    for accepted in [false, true] {
        let url = serve(&issuer, Vec::new(), |o| o.client_identities(accepted)).await;
        let mut claims = issuer.claims("alice", &url);
        let claims_map = claims.as_object_mut().expect("an object");
        claims_map.remove("sub");
        claims_map.insert("client_id".into(), json!("mcp-app"));
        let token = sign(&claims, Algorithm::RS256, ISSUER_RSA, "rsa-1");
        let answer = initialize(&url, Some(&token), None).await;
        if accepted {
            assert_eq!(answer.status(), 200);
        } else {
            assert_eq!(answer.status(), 401);
            let challenge = challenge(&answer);
            assert!(challenge.contains("invalid_token"), "{challenge}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_foreign_and_stale_tokens_are_refused() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| o).await;
    let good = issuer.claims("mallory", &url);
    let now = jsonwebtoken::get_current_timestamp();
    let with = |changes: Value| {
        let mut claims = good.clone();
        for (name, value) in changes.as_object().expect("an object") {
            claims[name] = value.clone();
        }
        claims
    };
    let rsa = |claims: &Value| sign(claims, Algorithm::RS256, ISSUER_RSA, "rsa-1");
    let cases = [
        (
            "a token for another server",
            rsa(&with(json!({"aud": "https://other.example/mcp"}))),
            "audience",
        ),
        (
            "an expired token",
            rsa(&with(json!({"exp": now - 600}))),
            "expired",
        ),
        (
            "a token not valid yet",
            rsa(&with(json!({"nbf": now + 600}))),
            "not valid yet",
        ),
        (
            "a token bound to its sender's DPoP key, sent without a proof",
            rsa(&with(
                json!({"cnf": {"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"}}),
            )),
            "bound to its sender",
        ),
        (
            "a token signed by another key under the issuer's key id",
            sign(&good, Algorithm::RS256, ATTACKER_RSA, "rsa-1"),
            "signature",
        ),
        ("an unsigned token (alg: none)", unsigned(&good), "JWT"),
        (
            "an HMAC token keyed with the issuer's public key",
            sign(&good, Algorithm::HS256, ISSUER_RSA_PUBLIC, "rsa-1"),
            "HS256",
        ),
        (
            "a token of an issuer this server does not trust",
            rsa(&with(json!({"iss": "https://evil.example"}))),
            "not one this server trusts",
        ),
        (
            "an RSA key used for ECDSA",
            sign(&good, Algorithm::ES256, ISSUER_EC, "rsa-1"),
            "not among",
        ),
        (
            "a token without an expiry",
            rsa(&{
                let mut claims = good.clone();
                claims.as_object_mut().expect("object").remove("exp");
                claims
            }),
            "exp",
        ),
    ];
    for (what, token, reason) in cases {
        let refused = initialize(&url, Some(&token), None).await;
        assert_eq!(refused.status(), 401, "{what}");
        let header = challenge(&refused);
        assert!(
            header.contains("error=\"invalid_token\""),
            "{what}: {header}"
        );
        let body = refused.text().await.expect("a body");
        assert!(body.contains(reason), "{what}: {body}");
    }

    // A good token without the scope the server needs: 403, naming the scope.
    let refused = initialize(&url, Some(&rsa(&with(json!({"scope": "openid"})))), None).await;
    assert_eq!(refused.status(), 403);
    let header = challenge(&refused);
    assert!(
        header.contains("error=\"insufficient_scope\"") && header.contains("scope=\"mcp:tools\""),
        "{header}"
    );
    // And the good one passes.
    assert_eq!(
        initialize(&url, Some(&rsa(&good)), None).await.status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_key_ids_fetches_the_keys_at_most_once_more() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| o).await;
    let claims = issuer.claims("mallory", &url);
    assert_eq!(
        initialize(
            &url,
            Some(&sign(&claims, Algorithm::RS256, ISSUER_RSA, "rsa-1")),
            None
        )
        .await
        .status(),
        200
    );
    for flood in 0..40 {
        let token = sign(
            &claims,
            Algorithm::RS256,
            ATTACKER_RSA,
            &format!("made-up-{flood}"),
        );
        let refused = initialize(&url, Some(&token), None).await;
        assert_eq!(refused.status(), 401);
    }
    let fetches = issuer.jwks_fetches.load(Ordering::SeqCst);
    assert!(
        fetches <= 2,
        "40 unknown key ids made {fetches} fetches of the issuer's keys"
    );
}

/// A token the issuer's RSA key `rsa-1` signs for `subject`, for the server at `url`.
fn issuers_token(issuer: &Issuer, subject: &str, url: &str) -> String {
    sign(
        &issuer.claims(subject, url),
        Algorithm::RS256,
        ISSUER_RSA,
        "rsa-1",
    )
}

/// A server taking the tokens of a new issuer, its keys used for a second (`tweak` applied to
/// the options besides), and a token of the issuer, accepted once (the keys fetched): the
/// issuer, the server's URL and the token, once the keys are past their age.
async fn keys_past_their_age(
    tweak: impl FnOnce(OAuthOptions) -> OAuthOptions,
) -> (Issuer, String, String) {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| {
        tweak(o.keys_max_age(Duration::from_secs(1)))
    })
    .await;
    let token = issuers_token(&issuer, "alice", &url);
    assert_eq!(initialize(&url, Some(&token), None).await.status(), 200);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    (issuer, url, token)
}

/// The attack: an issuer's signing key leaks; the issuer withdraws it from its key set, and the
/// attacker keeps the server from fetching the new set (or the issuer is down). Keys past their
/// age are never used: the leaked key's tokens are refused once the keys the server holds are
/// past their age, until a fetch succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_past_their_age_are_not_used_when_they_cannot_be_fetched_again() {
    let (issuer, url, token) = keys_past_their_age(|o| o.min_refresh(Duration::ZERO)).await;
    // Past their age, the keys held are not used while the fetch fails.
    issuer.keys_down.store(true, Ordering::SeqCst);
    let refused = initialize(&url, Some(&token), None).await;
    assert_eq!(refused.status(), 401);
    let body = refused.text().await.expect("a body");
    assert!(body.contains("cannot be fetched"), "{body}");
    // The issuer is back: the keys are fetched again and the token accepted.
    issuer.keys_down.store(false, Ordering::SeqCst);
    assert_eq!(initialize(&url, Some(&token), None).await.status(), 200);
}

/// The attack: once the keys are past their age, a request with a token of the issuer (any
/// token: it need not be valid) starts the fetch of its keys, and its client leaves at once.
/// The fetch went with the request, and counted as an attempt: every token of the issuer was
/// refused until the next fetch was allowed (30 s), again and again. The fetch now runs on its
/// own and the next request waits for it. An age shorter than the interval between fetches
/// leaves no gap either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_does_not_take_the_key_fetch_with_it() {
    let (issuer, url, token) = keys_past_their_age(|o| o).await;
    issuer.keys_delay.store(1_500, Ordering::SeqCst);
    let left = tokio::time::timeout(
        Duration::from_millis(200),
        initialize(&url, Some(&token), None),
    )
    .await;
    assert!(left.is_err(), "the first request waited for the fetch");
    issuer.keys_delay.store(0, Ordering::SeqCst);
    assert_eq!(initialize(&url, Some(&token), None).await.status(), 200);
    assert_eq!(issuer.jwks_fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_that_hangs_fails_closed_in_time_and_static_tokens_still_work() {
    let issuer = Issuer::start(Issuing::Hangs).await;
    let url = serve(
        &issuer,
        vec![BearerToken::new("ops", "ops-token-0123456789abcdef")],
        |o| o.fetch_timeout(Duration::from_millis(500)),
    )
    .await;
    let token = issuers_token(&issuer, "alice", &url);
    let started = std::time::Instant::now();
    let refused = initialize(&url, Some(&token), None).await;
    assert_eq!(refused.status(), 401);
    let body = refused.text().await.expect("a body");
    assert!(body.contains("cannot be fetched"), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the refusal took {:?}",
        started.elapsed()
    );
    assert_eq!(
        initialize(&url, Some("ops-token-0123456789abcdef"), None)
            .await
            .status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_its_openers_alone() {
    const ALICE: &str = "alice-token-0123456789abcdef";
    const BOB: &str = "bob-token-0123456789abcdef01";
    let url = crate::serve_with(
        ToolCatalog::new([counters("all", 1, &["count"])]),
        McpOptions::new("owners", "1"),
        HttpOptions::default().named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
        ]),
    )
    .await;
    let session = open_session(&url, ALICE).await;
    // Bob, holding a good token and Alice's session id, finds no session there.
    let list = |token: &'static str| {
        in_session(
            &url,
            &session,
            token,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .send()
    };
    assert_eq!(list(BOB).await.expect("an answer").status(), 404);
    let deleted = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &session)
        .bearer_auth(BOB)
        .send()
        .await
        .expect("an answer");
    assert_eq!(
        deleted.status(),
        404,
        "Bob cannot end Alice's session either"
    );
    // Alice still can use it.
    assert_eq!(list(ALICE).await.expect("an answer").status(), 200);
    // A session id this server never gave is no session's, whoever sends it (a stateless
    // request cannot pass for a session's request to skip the caps).
    let made_up = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", "made-up-session")
        .bearer_auth(ALICE)
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string())
        .send()
        .await
        .expect("an answer");
    assert_eq!(made_up.status(), 404);
}

/// The URL of a server of `catalog` under the access policy `grants` (TOML, `ISSUER` standing
/// for the test issuer's URL), taking the issuer's tokens with the scope `mcp:tools`.
async fn serve_scoped(issuer: &Issuer, grants: &str, catalog: ToolCatalog) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let policy = AccessPolicy::parse(&grants.replace("ISSUER", &issuer.url)).expect("a policy");
    let oauth = OAuthOptions::new(
        url.parse().expect("a URL"),
        [IssuerOptions::new(issuer.url.clone())],
    )
    .required_scopes(["mcp:tools"]);
    tokio::spawn(llm_worker::mcp::serve_http(
        listener,
        catalog,
        McpOptions::new("oauth", "1").access(policy),
        HttpOptions::default().oauth(oauth),
    ));
    url
}

/// A token of the test issuer for erin, for the server at `url`, with `scope`.
fn erins_token(issuer: &Issuer, url: &str, scope: &str) -> String {
    let mut claims = issuer.claims("erin", url);
    claims["scope"] = json!(scope);
    sign(&claims, Algorithm::RS256, ISSUER_RSA, "rsa-1")
}

/// The attack: a session's grants were decided by its first request alone, so a token of the
/// same subject with narrower scopes (or issued after its holder left a group) went on using,
/// in that session, what the first token was granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_narrower_grants_cannot_use_a_wider_session() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve_scoped(
        &issuer,
        "[quota]\nsessions = 2\n\n\
         [[grant]]\nwho = [\"scope:admin\"]\nissuer = \"ISSUER\"\ntools = [\"*\"]\n",
        ToolCatalog::new([counters("all", 1, &["count"])]),
    )
    .await;
    let token = |scope: &str| erins_token(&issuer, &url, scope);
    let (wide, narrow) = (token("mcp:tools admin"), token("mcp:tools"));
    let session = open_session(&url, &wide).await;
    let count = |token: String| {
        let request = in_session(
            &url,
            &session,
            &token,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "count", "arguments": {}}}),
        );
        async move {
            request
                .send()
                .await
                .expect("an answer")
                .text()
                .await
                .expect("a body")
        }
    };
    let granted = count(wide).await;
    assert!(granted.contains("\"isError\":false"), "{granted}");
    // The narrower token is another caller: the wider one's session is not its own (and it is
    // told why).
    let refused = count(narrow.clone()).await;
    assert!(
        refused.contains("opened with other grants") && !refused.contains("\"isError\""),
        "{refused}"
    );
    // Yet the identity has one quota of sessions (two), whatever its tokens' grants: a
    // session of the narrower token is its second, and a third (of either) is refused.
    open_session(&url, &narrow).await;
    let third = initialize(&url, Some(&narrow), None).await;
    assert_eq!(third.status(), 429, "{:?}", third.text().await);
}

/// A test issuer, and the URL of a server that checks opaque tokens at its introspection
/// endpoint (requiring the scope `mcp:tools`).
async fn serve_introspected() -> (Issuer, String) {
    let issuer = Issuer::start(Issuing::Answers).await;
    let endpoint = format!("{}/introspect", issuer.url);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    *issuer.audience.lock().expect("lock") = url.clone();
    let oauth = OAuthOptions::new(
        url.parse().expect("a URL"),
        [IssuerOptions::new(issuer.url.clone()).introspection(endpoint, "rs", "rs-secret")],
    )
    .required_scopes(["mcp:tools"]);
    tokio::spawn(llm_worker::mcp::serve_http(
        listener,
        ToolCatalog::new([counters("all", 1, &["count"])]),
        McpOptions::new("introspected", "1"),
        HttpOptions::default().oauth(oauth),
    ));
    (issuer, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_token_is_checked_at_the_issuers_introspection_endpoint() {
    let (issuer, url) = serve_introspected().await;
    assert_eq!(
        initialize(&url, Some("opaque-good"), None).await.status(),
        200
    );
    // Kept for a while: the endpoint is not asked again at once.
    assert_eq!(
        initialize(&url, Some("opaque-good"), None).await.status(),
        200
    );
    assert_eq!(issuer.introspections.load(Ordering::SeqCst), 1);
    for (token, reason) in [
        ("opaque-other", "audience"),
        ("opaque-unknown", "not an active token"),
        ("opaque-refresh", "refresh token"),
        ("opaque-dpop", "DPoP"),
        ("opaque-mtls", "bound to its sender"),
        ("opaque-float", "expired"),
        ("opaque-text", "`exp` is not a time"),
    ] {
        let refused = initialize(&url, Some(token), None).await;
        assert_eq!(refused.status(), 401, "{token}");
        let body = refused.text().await.expect("a body");
        assert!(body.contains(reason), "{token}: {body}");
    }
    // A JWT this server cannot read (`alg: none` here) that another issuer made is not sent
    // to this issuer's endpoint: a token goes to its own issuer only.
    // Nor an encrypted one (a JWE: five parts), whose issuer cannot be read.
    let asked = issuer.introspections.load(Ordering::SeqCst);
    let mut foreign = issuer.claims("alice", &url);
    foreign["iss"] = json!("https://other.example.com");
    let encrypted = {
        use base64::Engine;
        let header = json!({"alg": "RSA-OAEP", "enc": "A256GCM"}).to_string();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(header);
        format!("{header}.a2V5.aXY.Y2lwaGVy.dGFn")
    };
    for token in [unsigned(&foreign), encrypted] {
        let refused = initialize(&url, Some(&token), None).await;
        assert_eq!(refused.status(), 401);
        let body = refused.text().await.expect("a body");
        assert!(body.contains("it is not sent there"), "{token}: {body}");
    }
    assert_eq!(issuer.introspections.load(Ordering::SeqCst), asked);
    // JWTs are still checked against the keys.
    let token = issuers_token(&issuer, "alice", &url);
    assert_eq!(initialize(&url, Some(&token), None).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_opaque_tokens_does_not_lock_out_known_ones() {
    let (_issuer, url) = serve_introspected().await;
    // Frank's token is active; its answer cannot be kept (it expires this second), so each of
    // his requests asks the issuer again.
    assert_eq!(
        initialize(&url, Some("opaque-brief"), None).await.status(),
        200
    );
    // The attack: anyone, before any authentication, sends made-up tokens, more than the
    // issuer is asked about in a second. Frank's token, known active, is still checked; a new
    // token waits for the flood to pass. (Tried again should the second end mid-flood.)
    let mut held = false;
    for round in 0..5 {
        if !flood(&url, round).await {
            continue;
        }
        let frank = initialize(&url, Some("opaque-brief"), None).await.status();
        if flood(&url, round + 100).await {
            assert_eq!(frank, 200, "a known token was locked out by the flood");
            held = true;
            break;
        }
    }
    assert!(held, "the flood never filled a second's requests");
}

/// Sends 120 made-up tokens at once, then a new one: whether the new one found this second's
/// budget for tokens never seen active spent.
async fn flood(url: &str, round: usize) -> bool {
    let flood = (0..120)
        .map(|n| async move { initialize(url, Some(&format!("made-up-{round}-{n}")), None).await });
    futures::future::join_all(flood).await;
    let new = initialize(url, Some(&format!("made-up-after-{round}")), None).await;
    new.text()
        .await
        .expect("a body")
        .contains("too many tokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_refused_on_rechecking_is_no_longer_known() {
    let (issuer, url) = serve_introspected().await;
    assert_eq!(
        initialize(&url, Some("opaque-brief"), None).await.status(),
        200
    );
    // The issuer no longer gives Frank's token to this server: refused on its next check.
    *issuer.audience.lock().expect("lock") = "https://elsewhere.example/mcp".to_owned();
    let refused = initialize(&url, Some("opaque-brief"), None).await;
    assert_eq!(refused.status(), 401);
    // Replayed, it no longer spends the known tokens' budget: during a flood it waits with the
    // new ones (it used to be asked about again and again, as a known token, and so was never
    // told to wait). A round whose second ended between the flood and the replay (the replay
    // then found a fresh budget and was asked about) proves nothing either way: tried again.
    let mut held = false;
    for round in 0..10 {
        if !flood(&url, round).await {
            continue;
        }
        let replayed = initialize(&url, Some("opaque-brief"), None).await;
        let body = replayed.text().await.expect("a body");
        if body.contains("too many tokens") {
            held = true;
            break;
        }
    }
    assert!(
        held,
        "in no round did the replayed token wait with the new ones during a flood"
    );
}

#[tokio::test]
async fn opaque_tokens_are_sent_to_one_issuer_only() {
    let oauth = OAuthOptions::new(
        "https://mcp.example.com/mcp".parse().expect("a URL"),
        [
            IssuerOptions::new("https://a.example.com").introspection(
                "https://a.example.com/introspect",
                "rs",
                "secret",
            ),
            IssuerOptions::new("https://b.example.com").introspection(
                "https://b.example.com/introspect",
                "rs",
                "secret",
            ),
        ],
    );
    let error = llm_worker::mcp::McpHttpService::new(
        ToolCatalog::new([counters("all", 1, &["count"])]),
        McpOptions::new("two", "1"),
        HttpOptions::default().oauth(oauth),
    )
    .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("2 issuers have an introspection endpoint")
            && message.contains("https://a.example.com, https://b.example.com"),
        "{message}"
    );
}

/// The attack: two tokens of one user with other scopes were one caller, so a stateless
/// listener holding the narrower token heard of what the wider token's stateless calls made a
/// plugin say (here, changes of `notes://all`, which only the wider token's scope grants).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrower_token_hears_nothing_of_a_wider_tokens_stateless_calls() {
    use crate::notices::{add_note, listen_to_notes, stateless};
    use rmcp::model::ServerNotification;
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve_scoped(
        &issuer,
        "[[grant]]\nwho = [\"scope:notes\"]\nissuer = \"ISSUER\"\ntools = [\"notes/*\"]\n\n\
         [[grant]]\nwho = [\"*\"]\nissuer = \"ISSUER\"\ntools = [\"notes/list_notes\"]\n",
        ToolCatalog::from_plugins([&llm_worker_tests::plugin("notes")]),
    )
    .await;
    let token = |scope: &str| erins_token(&issuer, &url, scope);
    let narrow = stateless(&url, &token("mcp:tools")).await;
    let mut heard = listen_to_notes(&narrow).await;
    let wide = stateless(&url, &token("mcp:tools notes")).await;
    let added = wide.call_tool(add_note("erin's")).await.expect("a call");
    assert_ne!(added.is_error, Some(true), "{added:?}");
    // The notice leaves before the call's answer: had it been routed to the narrower token's
    // stream, it would be there within moments.
    let heard_any = tokio::time::timeout(Duration::from_secs(2), heard.next()).await;
    assert!(
        !matches!(
            &heard_any,
            Ok(Ok(Some(ServerNotification::ResourceUpdatedNotification(_))))
        ),
        "the narrower token heard of the wider one's call: {heard_any:?}"
    );
    drop(heard);
    wide.cancel().await.expect("close");
    narrow.cancel().await.expect("close");
}

/// Alice's token from `issuer` for the server at `url`, expiring `seconds` from the start of
/// this second (`seconds - 1` at least).
fn brief_token(issuer: &Issuer, url: &str, seconds: u64) -> (String, u64) {
    let mut claims = issuer.claims("alice", url);
    let exp = jsonwebtoken::get_current_timestamp() + seconds;
    claims["exp"] = json!(exp);
    (sign(&claims, Algorithm::RS256, ISSUER_RSA, "rsa-1"), exp)
}

/// A session at `url` opened with `token`, and told it is initialized.
async fn initialized_session(url: &str, token: &str) -> String {
    let session = open_session(url, token).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = in_session(url, &session, token, initialized)
        .send()
        .await
        .expect("initialized");
    assert!(sent.status().is_success(), "{}", sent.status());
    session
}

/// A session's standing stream (its GET, which carries the session's notices and its tasks'
/// logs) was checked once, when it was opened, and went on delivering after its token expired,
/// until the session ended. It ends when the token expires; the client opens it again with a
/// current token, checked as any request is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_stream_ends_when_its_token_expires() {
    let issuer = Issuer::start(Issuing::Answers).await;
    // No clock skew allowed: the token is refused, and its stream ends, at its `exp`.
    let url = serve(&issuer, Vec::new(), |o| o.leeway(Duration::ZERO)).await;
    let (brief, _) = brief_token(&issuer, &url, 3);
    let session = initialized_session(&url, &brief).await;
    let stream = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .bearer_auth(&brief)
        .send()
        .await
        .expect("the stream");
    assert_eq!(stream.status(), 200);
    let opened = std::time::Instant::now();
    // Read to its end, a clean one; a liveness bound far above the token's seconds.
    let ended = tokio::time::timeout(Duration::from_secs(30), stream.bytes()).await;
    ended
        .expect("the stream outlived its token")
        .expect("the stream ended cleanly");
    // Not at once: it served while the token was good (a second at least of its two or more).
    assert!(
        opened.elapsed() >= Duration::from_secs(1),
        "{:?}",
        opened.elapsed()
    );
}

/// The same for a stateless `subscriptions/listen` (a POST, whose answer is a stream for as
/// long as the client stays): it outlived its token, held its place among the identity's
/// `sessions` for ever, and went on hearing of the identity's later requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_listen_stream_ends_when_its_token_expires() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| o.leeway(Duration::ZERO)).await;
    let (brief, _) = brief_token(&issuer, &url, 3);
    let stream = crate::stateless_listen(&reqwest::Client::new(), &url, &brief)
        .send()
        .await
        .expect("the listen request");
    if stream.status() != 200 {
        panic!(
            "{}: {}",
            stream.status(),
            stream.text().await.unwrap_or_default()
        );
    }
    assert!(
        stream
            .headers()
            .get("content-type")
            .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream")),
        "{:?}",
        stream.headers()
    );
    let opened = std::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(30), stream.text()).await;
    let body = ended
        .expect("the listen stream outlived its token")
        .expect("the stream ended cleanly");
    // Not at once, nor with an error: it served while the token was good (a second at least
    // of its two or more).
    assert!(
        opened.elapsed() >= Duration::from_secs(1),
        "{:?}: {body}",
        opened.elapsed()
    );
    assert!(!body.contains("\"error\""), "{body}");
}

/// A tool that answers once the test lets it.
struct Held(Arc<tokio::sync::Semaphore>);

#[async_trait::async_trait]
impl llm_worker::Tool for Held {
    async fn execute(&self, _input_json: &str) -> Result<String, llm_worker::ToolError> {
        let _ = self.0.acquire().await;
        Ok("answered".into())
    }
}

/// A call's streamed answer is not a standing stream: cut at the token's expiry, a call that
/// ran past it (waiting on the network, or on a question to the person) lost its answer, its
/// effects done. It ends with the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_answer_is_not_cut_when_its_token_expires() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Arc::clone(&gate);
    let group = llm_worker::mcp::ToolGroup::new("held", 1, move || {
        let held = Arc::clone(&held);
        vec![Arc::new(move || {
            let meta = llm_worker::ToolMeta::new("wait")
                .description("Waits")
                .input_schema(json!({"type": "object"}));
            (
                meta,
                Arc::new(Held(Arc::clone(&held))) as Arc<dyn llm_worker::Tool>,
            )
        }) as llm_worker::ToolDefinition]
    });
    let url = serve_catalog(
        &issuer,
        Vec::new(),
        |o| o.leeway(Duration::ZERO),
        ToolCatalog::new([group]),
    )
    .await;
    let (brief, exp) = brief_token(&issuer, &url, 2);
    let session = initialized_session(&url, &brief).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "wait", "arguments": {}}});
    let answer = tokio::spawn(async move {
        let response = in_session(&url, &session, &brief, call)
            .send()
            .await
            .expect("the call");
        response.text().await.expect("the answer's stream")
    });
    // Past the token's expiry (its second, and the next), the call still waits.
    while jsonwebtoken::get_current_timestamp() <= exp + 1 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!answer.is_finished(), "the answer ended before the call");
    gate.add_permits(1);
    let text = tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .expect("an answer")
        .expect("the task");
    assert!(
        text.contains("answered") && text.contains("\"id\":7"),
        "{text}"
    );
}

/// The attack: a second `initialize` in an open session, asking for revision 2026-07-28 (no
/// `MCP-Protocol-Version` header), made the session's recorded version the one asked, not one
/// negotiated; the session then took `subscriptions/listen`, sent without the `Mcp-Method`
/// header the token cut-off looked for, and the stream outlived the token. A session is
/// initialized once, and a POST's method is read from its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_initialized_once() {
    let issuer = Issuer::start(Issuing::Answers).await;
    let url = serve(&issuer, Vec::new(), |o| o.leeway(Duration::ZERO)).await;
    let (brief, _) = brief_token(&issuer, &url, 3);
    let session = initialized_session(&url, &brief).await;
    let again = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &session)
        .bearer_auth(&brief)
        .body(
            json!({
                "jsonrpc": "2.0", "id": 2, "method": "initialize",
                "params": {"protocolVersion": "2026-07-28", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}},
            })
            .to_string(),
        )
        .send()
        .await
        .expect("a second initialize");
    let answer = again.text().await.expect("its answer");
    assert!(
        answer.contains("initialized already") && !answer.contains("\"result\""),
        "{answer}"
    );
    // The session's version is still the one negotiated: a listen in it, with no header
    // saying what it is, is no stream that could outlive the token.
    let listen = json!({
        "jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}},
    });
    let listened = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &session)
        .bearer_auth(&brief)
        .body(listen.to_string())
        .send()
        .await
        .expect("the listen request");
    let ended = tokio::time::timeout(Duration::from_secs(30), listened.text()).await;
    let body = ended
        .expect("the listen outlived its token")
        .expect("the answer ended cleanly");
    assert!(body.contains("\"error\""), "{body}");
}
