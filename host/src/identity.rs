//! Who sent a request, as the MCP HTTP service authenticated it: the name of the static token
//! it bore, or the subject of its OAuth access token. Hooks see it; the access policy grants
//! tools by it.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Who sent a request, as the MCP HTTP service authenticated it (hooks see it in
/// [`ToolCallContext::identity`](crate::ToolCallContext::identity)).
///
/// Sessions are bound to it (a session opened by one identity is not found by another), and
/// the notices of stateless requests reach only the same identity's listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Identity {
    /// Its name: the static token's name, or the access token's subject (`sub`, else
    /// `client_id`).
    pub name: String,
    /// The access token's issuer (`iss`); `None` for a static token.
    pub issuer: Option<String>,
    /// The access token's scopes (`scope`, or `scp`); empty for a static token.
    pub scopes: Vec<String>,
    /// Every claim of the access token, checked (its signature and times); empty for a static
    /// token.
    pub claims: Map<String, Value>,
}

impl Identity {
    /// The identity of a static token called `name`.
    pub fn token(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            issuer: None,
            scopes: Vec::new(),
            claims: Map::new(),
        }
    }

    /// The identity of a checked access token of `issuer`: its subject; or, where
    /// `client_identities` allows it, the client it was issued to when it names no subject.
    #[cfg_attr(not(feature = "oauth"), allow(dead_code))]
    pub(crate) fn from_claims(
        issuer: &str,
        claims: Map<String, Value>,
        client_identities: bool,
    ) -> Result<Self, String> {
        // A token bound to its sender (RFC 9449's DPoP key, RFC 8705's client certificate) is
        // good only with the sender's proof, which this server does not check: taken as a
        // bearer token, one copied from a log or a proxy would work for whoever holds it.
        if claims.contains_key("cnf") {
            return Err(
                "it is bound to its sender's key or certificate (`cnf`: DPoP or mutual \
                 TLS), which this server does not check, so it is not accepted as a bearer \
                 token; have the issuer issue bearer tokens for this resource"
                    .into(),
            );
        }
        // Without a subject, the token is the client's (a client credentials grant), or the
        // issuer left its users' subjects out: then every user of one client app would be one
        // identity (one owner of sessions and tasks, one quota, one name in the audit log).
        // RFC 9068 requires `sub` of a JWT access token, a client's too.
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty());
        let client = claims
            .get("client_id")
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty() && client_identities);
        let name = match (subject, client) {
            (Some(name), _) | (None, Some(name)) => name.to_owned(),
            (None, None) if client_identities => {
                return Err("it names no subject (`sub`) and no client (`client_id`)".into());
            }
            (None, None) => {
                return Err(
                    "it names no subject (`sub`); if the issuer leaves it out of the \
                            tokens of clients acting for themselves, accept those as their \
                            client (`client_id`) with --oauth-client-identities"
                        .into(),
                );
            }
        };
        let scopes = match claims.get("scope").or_else(|| claims.get("scp")) {
            Some(Value::String(scopes)) => scopes.split_whitespace().map(str::to_owned).collect(),
            Some(Value::Array(scopes)) => scopes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Self {
            name,
            issuer: Some(issuer.to_owned()),
            scopes,
            claims,
        })
    }

    /// Which claim of its access token names this identity: `sub`, else `client_id` (the
    /// client a token without a subject was issued to).
    pub(crate) fn named_by(&self) -> &'static str {
        let subject = self.claims.get("sub").and_then(Value::as_str);
        if subject.is_some_and(|subject| !subject.is_empty()) || self.claims.is_empty() {
            "sub"
        } else {
            "client_id"
        }
    }

    /// A digest naming this identity among all others: a token's name and an issuer's subject
    /// never coincide, nor do two issuers' subjects, nor an issuer's subject and a client of
    /// the same name (a `client_id` equal to a user's `sub` is not that user).
    #[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
    pub(crate) fn key(&self) -> [u8; 16] {
        let mut hash = Sha256::new();
        match &self.issuer {
            None => hash.update(b"token\0"),
            Some(issuer) => {
                hash.update(b"issuer\0");
                hash.update(issuer.as_bytes());
                hash.update(b"\0");
                hash.update(self.named_by().as_bytes());
                hash.update(b"\0");
            }
        }
        hash.update(self.name.as_bytes());
        let digest = hash.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::Identity;
    use serde_json::json;

    fn of(claims: serde_json::Value) -> Identity {
        let serde_json::Value::Object(claims) = claims else {
            unreachable!("claims are an object")
        };
        Identity::from_claims("https://issuer.example", claims, true).expect("an identity")
    }

    /// Without a subject, a token is its client's only where clients are accepted: else it is
    /// refused, saying how to accept them (whatever checked it, a JWT's signature or the
    /// issuer's introspection answer).
    #[test]
    fn a_token_without_a_subject_is_its_clients_only_where_clients_are_accepted() {
        let serde_json::Value::Object(claims) = json!({"client_id": "mcp-app", "scope": "a"})
        else {
            unreachable!("claims are an object")
        };
        let refused = Identity::from_claims("https://issuer.example", claims.clone(), false)
            .expect_err("no subject");
        assert!(refused.contains("--oauth-client-identities"), "{refused}");
        let client =
            Identity::from_claims("https://issuer.example", claims, true).expect("a client");
        assert_eq!(
            (client.name.as_str(), client.named_by()),
            ("mcp-app", "client_id")
        );
        let serde_json::Value::Object(empty) = json!({"sub": ""}) else {
            unreachable!("claims are an object")
        };
        assert!(Identity::from_claims("https://issuer.example", empty, true).is_err());
    }

    /// A client whose `client_id` is a user's `sub` at the same issuer is not that user: its
    /// sessions, tasks and quota are its own.
    #[test]
    fn a_client_named_like_a_subject_is_not_that_subject() {
        let user = of(json!({"sub": "alice"}));
        let client = of(json!({"client_id": "alice"}));
        assert_eq!(
            (user.name.as_str(), client.name.as_str()),
            ("alice", "alice")
        );
        assert_ne!(user.key(), client.key());
        // The same subject is the same identity, whatever client its token was issued to.
        assert_eq!(
            user.key(),
            of(json!({"sub": "alice", "client_id": "app"})).key()
        );
        assert_ne!(user.key(), Identity::token("alice").key());
    }
}
