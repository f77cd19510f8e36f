//! The HTTP service as an OAuth 2.1 resource server, as the MCP authorization specification
//! makes it (feature `oauth`): access tokens are JWTs of the issuers the operator names,
//! checked in process against the keys each issuer publishes; the service publishes its
//! Protected Resource Metadata (RFC 9728) so that clients find those issuers.
//!
//! What a token must be to be accepted:
//!
//! - typed as an access token (`typ: at+jwt`, RFC 9068), unless
//!   [`OAuthOptions::untyped_tokens`] says otherwise;
//! - signed with an asymmetric algorithm of the allow-list ([`ALGORITHMS`]: RSA, RSA-PSS,
//!   ECDSA P-256/P-384, Ed25519), never `none` and never HMAC (whose "secret" would be the
//!   issuer's public key), by a key of the issuer's JWKS whose type and declared algorithm fit
//!   the token's;
//! - issued by one of the configured issuers (`iss`, compared exactly), for this server
//!   (`aud` holds [`OAuthOptions::resource`], RFC 8707), current (`exp` required, `nbf` if
//!   present, both with a bounded skew), naming who it is for (`sub`, or `client_id`);
//! - holding every scope of [`OAuthOptions::required_scopes`] (`scope` or `scp`), else the
//!   request is refused with 403 `insufficient_scope` naming the scopes needed.
//!
//! An opaque (non-JWT) token is checked at the introspection endpoint of an issuer that has one
//! ([`IssuerOptions::introspection`], RFC 7662): active, for this server, current.
//!
//! An issuer's metadata (RFC 8414, or OpenID discovery) and keys are fetched with a time limit
//! and a size limit, over HTTPS (plain HTTP to a loopback address only), without following
//! redirects; keys are kept for [`OAuthOptions::keys_max_age`] and fetched again when a
//! token names a key not among them, at most once per [`OAuthOptions::min_refresh`] (a flood
//! of made-up key ids costs one fetch). Keys past their age are never used, so a key the issuer
//! withdraws is refused within that age. An issuer that cannot be reached fails closed: once its
//! keys are past their age, its tokens are refused until they can be fetched; a token is never
//! accepted unverified.

mod introspect;
mod keys;

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use crate::Identity;

pub use introspect::IntrospectionOptions;
pub(crate) use keys::Issuers;

/// The signature algorithms accepted, all asymmetric.
pub const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The default clock skew allowed on `exp` and `nbf`.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// The default time limit of one fetch of an issuer's metadata or keys.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The default shortest time between two fetches of an issuer's keys.
pub const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(30);
/// The default time an issuer's keys are used before they are fetched again.
pub const DEFAULT_KEYS_MAX_AGE: Duration = Duration::from_secs(600);

/// How the HTTP service accepts OAuth access tokens: for
/// [`HttpOptions::oauth`](crate::mcp::HttpOptions::oauth).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OAuthOptions {
    /// This server's canonical URI, as clients name it in their authorization requests (RFC
    /// 8707's `resource`) and the issuers put it in `aud`: `https://mcp.example.com/mcp`.
    pub resource: url::Url,
    /// The issuers whose tokens are accepted (their `iss` values, e.g.
    /// `https://auth.example.com`); listed as `authorization_servers` in the metadata.
    pub issuers: Vec<IssuerOptions>,
    /// Scopes every token must hold; listed as `scopes_supported`.
    pub required_scopes: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf` (at most 5 minutes). Default 60 s.
    pub leeway: Duration,
    /// Time limit of one fetch of an issuer's metadata or keys. Default 10 s.
    pub fetch_timeout: Duration,
    /// Shortest time between two fetches of one issuer's keys. Default 30 s.
    pub min_refresh: Duration,
    /// How long fetched keys are used before they are fetched again (never past it: a key the
    /// issuer withdrew is refused from then on). Default 10 minutes.
    pub keys_max_age: Duration,
    /// Accept JWTs whose `typ` is not `at+jwt` (RFC 9068), for issuers that do not type their
    /// access tokens. Off by default: an ID token, or any other JWT the issuer signs for the
    /// same audience, is then not mistaken for an access token.
    pub untyped_tokens: bool,
    /// Accept tokens that name no subject (`sub`) as the client they were issued to
    /// (`client_id`), for issuers that leave the subject out of a client credentials grant's
    /// tokens. Off by default: an issuer that left it out of its users' tokens too would make
    /// every user of one client app one identity (one owner of sessions and tasks, one quota,
    /// one name in the audit log). RFC 9068 requires `sub` of a JWT access token.
    pub client_identities: bool,
}

/// One issuer whose tokens are accepted.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct IssuerOptions {
    /// Its identifier, the tokens' `iss` (an `https` URL; `http` on a loopback address).
    pub issuer: String,
    /// Where its keys are (skipping discovery); by default the `jwks_uri` of its metadata,
    /// found at `/.well-known/oauth-authorization-server` (RFC 8414), else at
    /// `/.well-known/openid-configuration`.
    pub jwks_uri: Option<String>,
    /// Where its opaque (non-JWT) access tokens are checked (RFC 7662); `None`: only JWTs.
    /// One issuer at most may have one: an opaque token does not say whose it is.
    pub introspection: Option<IntrospectionOptions>,
}

impl IssuerOptions {
    /// The issuer `issuer`, its keys found through its metadata.
    pub fn new(issuer: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            jwks_uri: None,
            introspection: None,
        }
    }

    /// Checks its opaque tokens at `endpoint`, authenticating as `client_id` with
    /// `client_secret`.
    #[must_use]
    pub fn introspection(
        mut self,
        endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        self.introspection = Some(IntrospectionOptions {
            endpoint: endpoint.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
        });
        self
    }

    /// Its keys at `uri`, without discovery.
    #[must_use]
    pub fn jwks_uri(mut self, uri: impl Into<String>) -> Self {
        self.jwks_uri = Some(uri.into());
        self
    }
}

impl OAuthOptions {
    /// Tokens for `resource` (this server's URI) from `issuers`.
    pub fn new(resource: url::Url, issuers: impl IntoIterator<Item = IssuerOptions>) -> Self {
        Self {
            resource,
            issuers: issuers.into_iter().collect(),
            required_scopes: Vec::new(),
            leeway: DEFAULT_LEEWAY,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            min_refresh: DEFAULT_MIN_REFRESH,
            keys_max_age: DEFAULT_KEYS_MAX_AGE,
            untyped_tokens: false,
            client_identities: false,
        }
    }

    /// Accepts tokens without a subject as their client (see
    /// [`OAuthOptions::client_identities`]).
    #[must_use]
    pub fn client_identities(mut self, accept: bool) -> Self {
        self.client_identities = accept;
        self
    }

    /// Accepts JWTs not typed `at+jwt` too (see [`OAuthOptions::untyped_tokens`]).
    #[must_use]
    pub fn untyped_tokens(mut self, accept: bool) -> Self {
        self.untyped_tokens = accept;
        self
    }

    /// Requires these scopes of every token.
    #[must_use]
    pub fn required_scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.required_scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the clock skew allowed.
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// Sets the time limit of a fetch.
    #[must_use]
    pub fn fetch_timeout(mut self, timeout: Duration) -> Self {
        self.fetch_timeout = timeout;
        self
    }

    /// Sets the shortest time between two fetches of an issuer's keys.
    #[must_use]
    pub fn min_refresh(mut self, interval: Duration) -> Self {
        self.min_refresh = interval;
        self
    }

    /// Sets how long fetched keys are used (at least a second; a server given less refuses to
    /// start); past it, a token is checked only once they have been fetched again (it waits
    /// for the fetch, and is refused if the fetch fails).
    #[must_use]
    pub fn keys_max_age(mut self, age: Duration) -> Self {
        self.keys_max_age = age;
        self
    }

    /// The URL of this resource's metadata (RFC 9728 §3.1: the well-known path, then the
    /// resource's own path), as the 401 answers' `resource_metadata` gives it.
    pub fn metadata_url(&self) -> String {
        let mut url = self.resource.clone();
        let path = self.resource.path().trim_end_matches('/');
        url.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
        url.set_query(None);
        url.set_fragment(None);
        url.to_string()
    }

    /// The Protected Resource Metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> Value {
        let mut document = serde_json::json!({
            "resource": self.resource.as_str(),
            "authorization_servers": self.issuers.iter().map(|i| i.issuer.as_str()).collect::<Vec<_>>(),
            "bearer_methods_supported": ["header"],
        });
        // No `resource_signing_alg_values_supported`: it names the algorithms the resource
        // signs its own responses with (RFC 9728 §2), and this server signs none.
        if !self.required_scopes.is_empty() {
            document["scopes_supported"] = self.required_scopes.clone().into();
        }
        document
    }

    /// Whether `path` is one this resource's metadata is served at: the well-known path with
    /// the resource's path after it (RFC 9728), or bare (what clients of earlier revisions of
    /// the MCP specification ask for).
    pub(crate) fn is_metadata_path(&self, path: &str) -> bool {
        const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
        let own = self.resource.path().trim_end_matches('/');
        path.strip_prefix(WELL_KNOWN)
            .is_some_and(|rest| rest.is_empty() || rest == "/" || rest == own)
    }

    /// Checks the options: an error saying what to fix.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !matches!(self.resource.scheme(), "https" | "http") || self.resource.host().is_none() {
            return Err(format!(
                "the resource URI {} is not an http(s) URL",
                self.resource
            ));
        }
        if self.resource.fragment().is_some() {
            return Err(format!(
                "the resource URI {} has a fragment, which RFC 8707 forbids",
                self.resource
            ));
        }
        // RFC 6749 §3.3's scope-token: printable ASCII but space, `"` and `\`.
        if let Some(scope) = self.required_scopes.iter().find(|scope| {
            scope.is_empty()
                || !scope
                    .bytes()
                    .all(|b| b > b' ' && b < 0x7f && b != b'"' && b != b'\\')
        }) {
            return Err(format!("{scope:?} is not a scope (RFC 6749 §3.3)"));
        }
        if self.issuers.is_empty() {
            return Err("no issuer is configured: name at least one".into());
        }
        if self.keys_max_age < Duration::from_secs(1) {
            return Err(format!(
                "keys_max_age is {:?}: give the issuers' keys at least a second (younger, they \
                 would be fetched again for every token)",
                self.keys_max_age
            ));
        }
        let introspecting: Vec<&str> = self
            .issuers
            .iter()
            .filter(|issuer| issuer.introspection.is_some())
            .map(|issuer| issuer.issuer.as_str())
            .collect();
        if introspecting.len() > 1 {
            return Err(format!(
                "{} issuers have an introspection endpoint ({}): an opaque token does not say \
                 whose it is, and asking each in turn would show one issuer's tokens to the \
                 others; give one issuer an introspection endpoint, and the others JWTs",
                introspecting.len(),
                introspecting.join(", ")
            ));
        }
        for issuer in &self.issuers {
            keys::check_fetch_url(&issuer.issuer)
                .map_err(|reason| format!("the issuer {:?}: {reason}", issuer.issuer))?;
            if let Some(uri) = &issuer.jwks_uri {
                keys::check_fetch_url(uri)
                    .map_err(|reason| format!("the JWKS URI {uri:?}: {reason}"))?;
            }
            if let Some(introspection) = &issuer.introspection {
                let uri = &introspection.endpoint;
                keys::check_fetch_url(uri)
                    .map_err(|reason| format!("the introspection endpoint {uri:?}: {reason}"))?;
            }
        }
        if self.leeway > Duration::from_secs(300) {
            return Err(format!(
                "a clock skew of {:?} is too lenient: at most 5 minutes",
                self.leeway
            ));
        }
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err("this build has no cryptography for JWTs (jsonwebtoken's features)".into());
        }
        Ok(())
    }
}

/// Why a token was refused.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Not a token this server accepts (RFC 6750 `invalid_token`): the reason, for the client.
    Invalid(String),
    /// A good token without these scopes (`insufficient_scope`).
    Scope(Vec<String>),
}

/// For a token shaped as a JWT (its first part the base64url of a JSON object naming `alg` or
/// `enc`: a JWS, or an encrypted JWE), the `iss` its second part claims, unverified, where it
/// can be read (`Some(None)` where not: an encrypted payload, or no string `iss`); `None` for
/// any other token (an opaque one).
fn jose_issuer(token: &str) -> Option<Option<String>> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let engine = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let json = |part: &str| {
        engine
            .decode(part)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
    };
    let mut parts = token.split('.');
    let header = json(parts.next()?)?;
    if !header.contains_key("alg") && !header.contains_key("enc") {
        return None;
    }
    Some(
        parts
            .next()
            .and_then(json)
            .and_then(|claims| claims.get("iss")?.as_str().map(str::to_owned)),
    )
}

/// Checks access tokens against [`OAuthOptions`].
pub(crate) struct Verifier {
    options: OAuthOptions,
    issuers: Issuers,
    introspector: Option<introspect::Introspector>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    pub(crate) fn new(options: OAuthOptions) -> Result<Self, String> {
        options.check()?;
        let issuers = Issuers::new(&options)?;
        let introspector = introspect::Introspector::new(&options, issuers.clients());
        Ok(Self {
            options,
            issuers,
            introspector,
        })
    }

    pub(crate) fn options(&self) -> &OAuthOptions {
        &self.options
    }

    /// The identity `token` stands for, if it is a token this server accepts.
    pub(crate) async fn verify(&self, token: &str) -> Result<Identity, Refused> {
        let header = match jsonwebtoken::decode_header(token) {
            Ok(header) => header,
            // Not a JWT: an opaque token, for an issuer's introspection endpoint to judge.
            Err(error) => {
                let Some(introspector) = &self.introspector else {
                    return Err(Refused::Invalid(format!(
                        "not a JWT this server accepts ({error})"
                    )));
                };
                // A JWT of a kind this server cannot read (an algorithm jsonwebtoken has no
                // name for, `none`, an encrypted one) that does not say it is the introspecting
                // issuer's: a token goes to its own issuer only, never to the one that
                // introspects.
                if let Some(claimed) = jose_issuer(token)
                    && claimed.as_deref() != Some(introspector.issuer())
                {
                    let by = claimed.map_or_else(
                        || "whose issuer cannot be read".to_owned(),
                        |claimed| {
                            let shown: String = claimed.chars().take(200).collect();
                            format!("made by \"{}\"", shown.escape_debug())
                        },
                    );
                    return Err(Refused::Invalid(format!(
                        "a JWT this server cannot read ({error}), {by}, not by the issuer that \
                         judges opaque tokens: it is not sent there"
                    )));
                }
                let identity = introspector.identity(token, &self.options).await?;
                return self.scoped(identity);
            }
        };
        if !ALGORITHMS.contains(&header.alg) {
            return Err(Refused::Invalid(format!(
                "tokens signed with {:?} are not accepted (only asymmetric algorithms)",
                header.alg
            )));
        }
        let typed = header.typ.as_deref().is_some_and(|typ| {
            typ.eq_ignore_ascii_case("at+jwt") || typ.eq_ignore_ascii_case("application/at+jwt")
        });
        if !typed && !self.options.untyped_tokens {
            return Err(Refused::Invalid(format!(
                "it is not typed as an access token (`typ` is {}, not `at+jwt`: RFC 9068); an \
                 ID token or another JWT of the issuer is not one",
                header
                    .typ
                    .as_deref()
                    .map_or("missing".into(), |typ| format!("{typ:?}"))
            )));
        }
        // The claimed issuer picks the keys; the signature is checked with them, and `iss`
        // again with the signature.
        let unverified: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|e| Refused::Invalid(format!("its claims are not readable ({e})")))?;
        let issuer = unverified
            .get("iss")
            .and_then(Value::as_str)
            .ok_or_else(|| Refused::Invalid("it names no issuer (`iss`)".into()))?;
        let key = self
            .issuers
            .key(issuer, header.kid.as_deref(), header.alg)
            .await
            .map_err(Refused::Invalid)?;
        let mut validation = jsonwebtoken::Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_issuer(&[issuer]);
        // `https://mcp.example.com/` and `https://mcp.example.com` are one resource.
        let resource = self.options.resource.as_str();
        validation.set_audience(&[resource, resource.strip_suffix('/').unwrap_or(resource)]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.options.leeway.as_secs();
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| Refused::Invalid(reason(&e, &self.options)))?
            .claims;
        let identity = Identity::from_claims(issuer, claims, self.options.client_identities)
            .map_err(Refused::Invalid)?;
        self.scoped(identity)
    }

    /// `identity`, if it holds every scope the server requires.
    fn scoped(&self, identity: Identity) -> Result<Identity, Refused> {
        let missing: Vec<String> = self
            .options
            .required_scopes
            .iter()
            .filter(|scope| !identity.scopes.contains(scope))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(Refused::Scope(self.options.required_scopes.clone()));
        }
        Ok(identity)
    }
}

/// What a token's check said, for the client.
fn reason(error: &jsonwebtoken::errors::Error, options: &OAuthOptions) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "it has expired".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (`nbf`)".into(),
        ErrorKind::InvalidAudience => format!(
            "it was not issued for this server: its audience (`aud`) must be {}",
            options.resource
        ),
        ErrorKind::InvalidIssuer => "its issuer does not match".into(),
        ErrorKind::InvalidSignature => "its signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no `{claim}` claim"),
        ErrorKind::InvalidAlgorithm => "its algorithm does not fit the issuer's key".into(),
        _ => format!("it does not verify ({error})"),
    }
}

/// Shared, for the service's clones.
pub(crate) type SharedVerifier = Arc<Verifier>;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{IssuerOptions, OAuthOptions};

    /// Keys used less than a second would be fetched again for every token: refused, naming
    /// the option.
    #[test]
    fn keys_younger_than_a_second_are_refused() {
        let options = |age| {
            OAuthOptions::new(
                "https://mcp.example/mcp".parse().expect("a URL"),
                [IssuerOptions::new("https://issuer.example")],
            )
            .keys_max_age(age)
        };
        let refused = options(Duration::from_millis(300)).check();
        assert!(
            refused
                .as_ref()
                .is_err_and(|why| why.contains("keys_max_age")),
            "{refused:?}"
        );
        assert_eq!(options(Duration::from_secs(1)).check(), Ok(()));
    }
}
