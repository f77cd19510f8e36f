//! Opaque access tokens, through the issuer's introspection endpoint (RFC 7662): asked with
//! the server's own client credentials, answers kept for at most a minute, the endpoint asked
//! at most [`MAX_PER_SECOND`] times a second for tokens it has never said are active (a flood
//! of made-up tokens is not passed on) and as often again for those it has (so that such a
//! flood, which anyone can send before any authentication, does not lock out the clients whose
//! tokens are known). One issuer only: an opaque token does not say whose it is, and asking
//! each issuer in turn would show one issuer's tokens to the others.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::{OAuthOptions, Refused};
use crate::Identity;

/// Most introspection requests a second for tokens never seen active, and as many again for
/// tokens seen active before (whose kept answer has expired).
const MAX_PER_SECOND: u32 = 50;
/// Longest an answer is kept.
const MAX_KEPT: Duration = Duration::from_secs(60);
/// Most answers kept.
const MAX_ENTRIES: usize = 10_000;
/// Largest answer read.
const MAX_ANSWER_BYTES: usize = 64 << 10;

/// How an issuer's opaque tokens are checked.
#[derive(Clone)]
pub struct IntrospectionOptions {
    /// The issuer's introspection endpoint (`https`; `http` to loopback only).
    pub endpoint: String,
    /// The client id this server authenticates with (HTTP basic).
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
}

impl std::fmt::Debug for IntrospectionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionOptions")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"[redacted]")
            .finish()
    }
}

/// Asks the issuer that has an introspection endpoint.
pub(crate) struct Introspector {
    client: reqwest::Client,
    issuer: String,
    introspection: IntrospectionOptions,
    /// Answers that a token is active, with when they expire; an expired one marks a token
    /// seen active before.
    kept: Mutex<HashMap<[u8; 32], (Identity, Instant)>>,
    /// For tokens never seen active, then for the others: the current second, and how many
    /// requests were made in it.
    rates: [Mutex<(Instant, u32)>; 2],
}

impl Introspector {
    /// The issuer whose endpoint this asks.
    pub(super) fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The introspector of the one issuer with an endpoint, if any ([`OAuthOptions::check`]
    /// refuses more than one).
    pub(super) fn new(options: &OAuthOptions, clients: &super::keys::Clients) -> Option<Self> {
        let (issuer, introspection) = options
            .issuers
            .iter()
            .find_map(|issuer| Some((issuer.issuer.clone(), issuer.introspection.clone()?)))?;
        Some(Self {
            client: clients.for_url(&introspection.endpoint).clone(),
            issuer,
            introspection,
            kept: Mutex::default(),
            rates: [
                Mutex::new((Instant::now(), 0)),
                Mutex::new((Instant::now(), 0)),
            ],
        })
    }

    /// The identity of the opaque `token`, if the issuer says it is active and for this server.
    pub(super) async fn identity(
        &self,
        token: &str,
        options: &OAuthOptions,
    ) -> Result<Identity, Refused> {
        let key = crate::digest::sha256(token.as_bytes());
        let seen_active = match self.lock_kept().get(&key) {
            Some((identity, until)) if Instant::now() < *until => return Ok(identity.clone()),
            Some(_) => true,
            None => false,
        };
        self.take_turn(seen_active)?;
        let answer = self.ask(token, options).await;
        let mut kept = self.lock_kept();
        let (identity, lifetime) = match answer {
            Ok(answer) => answer,
            Err(reason) => {
                // No longer active (or not for this server): no longer a known token, whose
                // replays would spend the known tokens' budget.
                kept.remove(&key);
                return Err(Refused::Invalid(reason));
            }
        };
        if kept.len() >= MAX_ENTRIES {
            // Expired answers go first; if none has, the soonest to expire.
            let now = Instant::now();
            kept.retain(|_, (_, until)| *until > now);
            if kept.len() >= MAX_ENTRIES
                && let Some(soonest) = kept
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(key, _)| *key)
            {
                kept.remove(&soonest);
            }
        }
        kept.insert(key, (identity.clone(), Instant::now() + lifetime));
        Ok(identity)
    }

    fn lock_kept(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Identity, Instant)>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one of this second's requests for a token `seen_active` before or not, or
    /// refuses.
    fn take_turn(&self, seen_active: bool) -> Result<(), Refused> {
        let mut rate = self.rates[usize::from(seen_active)]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if rate.0.elapsed() >= Duration::from_secs(1) {
            *rate = (Instant::now(), 0);
        }
        if rate.1 >= MAX_PER_SECOND {
            return Err(Refused::Invalid(
                "too many tokens to check now; try again in a second".into(),
            ));
        }
        rate.1 += 1;
        Ok(())
    }

    /// What the issuer's endpoint says of `token`: the identity, and how long to keep it.
    async fn ask(
        &self,
        token: &str,
        options: &OAuthOptions,
    ) -> Result<(Identity, Duration), String> {
        let introspection = &self.introspection;
        let unreachable = |why: String| {
            tracing::warn!(
                "cannot introspect a token at {}: {why}",
                introspection.endpoint
            );
            "its issuer cannot be asked about it now; try again later".to_owned()
        };
        let mut response = self
            .client
            .post(&introspection.endpoint)
            .basic_auth(&introspection.client_id, Some(&introspection.client_secret))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        if !response.status().is_success() {
            return Err(unreachable(format!("it answered {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unreachable(e.to_string()))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(unreachable("its answer is too large".into()));
            }
            body.extend_from_slice(&chunk);
        }
        let answer: Map<String, Value> = serde_json::from_slice(&body)
            .map_err(|e| unreachable(format!("its answer is not a JSON object ({e})")))?;
        judge(answer, &self.issuer, options)
    }
}

/// The identity an introspection answer gives, if the token is active, current, of `issuer`
/// and for this server; and how long the answer may be kept.
fn judge(
    answer: Map<String, Value>,
    issuer: &str,
    options: &OAuthOptions,
) -> Result<(Identity, Duration), String> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err("it is not an active token".into());
    }
    if let Some(named) = answer.get("iss")
        && named.as_str() != Some(issuer)
    {
        return Err("its issuer does not match".into());
    }
    let resource = options.resource.as_str();
    let own = |aud: &Value| {
        aud.as_str()
            .is_some_and(|aud| aud == resource || Some(aud) == resource.strip_suffix('/'))
    };
    let for_us = match answer.get("aud") {
        Some(Value::Array(audiences)) => audiences.iter().any(own),
        Some(aud) => own(aud),
        None => false,
    };
    if !for_us {
        return Err(format!(
            "it was not issued for this server: its audience (`aud`) must be {resource}"
        ));
    }
    // `token_type` is the access token's type (`Bearer`); some issuers also answer for
    // refresh tokens, which are not for a resource server, and for DPoP-bound tokens, which
    // need their sender's proof (not checked here).
    let kind = answer
        .get("token_type")
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase);
    if kind.as_deref().is_some_and(|kind| kind.contains("refresh")) {
        return Err("it is a refresh token, not an access token".into());
    }
    if kind.as_deref() == Some("dpop") {
        return Err(
            "it is a DPoP token, bound to its sender's key, which this server does not \
             check; it is not accepted as a bearer token"
                .into(),
        );
    }
    // A time is a number of seconds (RFC 7662 says an integer; a float is taken as its
    // whole seconds); anything else is refused, not read as "no time".
    let time = |key: &str| -> Result<Option<u64>, String> {
        match answer.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_f64()
                .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                .map(|seconds| Some(seconds as u64))
                .ok_or_else(|| format!("its `{key}` is not a time")),
        }
    };
    let (expires, not_before) = (time("exp")?, time("nbf")?);
    let now = jsonwebtoken::get_current_timestamp();
    let leeway = options.leeway.as_secs();
    let lifetime = match expires {
        Some(exp) if exp.saturating_add(leeway) <= now => return Err("it has expired".into()),
        Some(exp) => Duration::from_secs(exp.saturating_sub(now)).min(MAX_KEPT),
        None => MAX_KEPT,
    };
    if not_before.is_some_and(|nbf| nbf > now.saturating_add(leeway)) {
        return Err("it is not valid yet (`nbf`)".into());
    }
    let identity = Identity::from_claims(issuer, answer, options.client_identities)?;
    Ok((identity, lifetime))
}
