//! The static tokens of the HTTP service, each naming its holder.

use std::sync::Arc;

use crate::Identity;

/// A static bearer token and the name of whoever holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    /// Who holds it (an [`Identity`]'s name).
    pub name: String,
    /// The token.
    pub secret: String,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("name", &self.name)
            .field("secret", &"[redacted]")
            .finish()
    }
}

impl BearerToken {
    /// The token `secret`, held by `name`.
    pub fn new(name: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            secret: secret.into(),
        }
    }
}

/// The identity attached to a request by the HTTP service.
pub(crate) type SharedIdentity = Arc<Identity>;
