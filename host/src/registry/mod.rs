//! Plugins from an OCI registry (cargo feature `registry`): pull a component stored as a CNCF
//! Wasm OCI artifact, verify its cosign-compatible signature in process against the
//! directory's trust policy ([`crate::trust::TrustPolicy`]), write it into a plugin directory and
//! record in the lock what was verified ([`pull_into`]); and push a plugin, signed, in the
//! same format ([`push`]).
//!
//! ```rust,no_run
//! # async fn run() -> Result<(), llm_worker::registry::RegistryError> {
//! use llm_worker::PluginHost;
//! use llm_worker::registry::{PullOptions, Reference, pull_into};
//!
//! let host = PluginHost::new()?;
//! let reference: Reference = "ghcr.io/acme/greet:1.0".parse()?;
//! let pulled = pull_into(&host, "plugins".as_ref(), &reference, &PullOptions::default()).await?;
//! println!("{} is {}", pulled.path.display(), pulled.verified);
//! # Ok(())
//! # }
//! ```

mod artifact;
mod client;
mod cosign_key;
mod credentials;
mod fetch;
mod install;
mod keyless;
mod publish;
mod reference;
mod signature;

use std::path::PathBuf;

pub use artifact::{
    Descriptor, Manifest, OCI_INDEX_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE, wasm_config,
};
pub use client::{ClientOptions, MAX_INDEX_BYTES, MAX_MANIFEST_BYTES, RegistryClient};
pub use cosign_key::{ENCRYPTED_KEY_LABEL, PASSWORD_VARIABLE as COSIGN_PASSWORD_VARIABLE};
pub use credentials::{Credentials, PASSWORD_VARIABLE, REGISTRY_VARIABLE, USERNAME_VARIABLE};
pub use fetch::{Demand, PulledArtifact, Verification, pull, resolve};
pub use install::{PullOptions, PullOutcome, pull_into};
pub use keyless::{
    BUNDLE_MEDIA_TYPE, COSIGN_SIGN_PREDICATE, KeylessSigner, MAX_BUNDLE_BYTES, TrustedRoot,
};
pub use publish::{Pushed, push};
pub use reference::{Malformed, Reference, ReferenceError};
pub use signature::{
    SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, SigningKey, payload, signature_tag,
};

use crate::PluginError;

/// Text a registry chose (an error's message, a media type, a digest), as a message quotes it:
/// on one line ([`OneLine`](llm_worker_rules::tool::OneLine)), cut after 200 characters, so
/// that it can neither forge lines of the command's output nor bury the cause under megabytes.
pub(crate) fn quoted(text: &str) -> String {
    quoted_up_to(text, 200)
}

/// [`quoted`], cut after `shown` characters.
pub(crate) fn quoted_up_to(text: &str, shown: usize) -> String {
    use llm_worker_rules::tool::OneLine;
    match text.char_indices().nth(shown) {
        None => OneLine(text).to_string(),
        Some((end, _)) => format!("{}… ({} bytes)", OneLine(&text[..end]), text.len()),
    }
}

/// A URL a registry gave (a redirect's, a blob's storage), as a message shows it: without its
/// query, fragment and user information (a storage URL's query is often its signature, which
/// lets anyone read the blob for a while), [`quoted`].
pub(crate) fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    quoted(shown.as_str())
}

/// A URL given as text (one a registry gave, or one made of it), as [`shown_url`] shows it.
pub(crate) fn shown_url_text(url: &str) -> String {
    reqwest::Url::parse(url).map_or_else(|_| quoted(url), |url| shown_url(&url))
}

/// Why pulling or pushing failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The request cannot be made as asked (a bad reference or name, plain HTTP to a remote
    /// registry, a directory not ready for it).
    #[error("{0}")]
    Usage(String),
    /// A reference that is not one.
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// The registry could not be reached, or the connection failed.
    #[error("cannot reach {url}: {message}")]
    Transport {
        /// What was asked for.
        url: String,
        /// What happened.
        message: String,
    },
    /// The registry answered with an error.
    #[error("{url}: the registry answered {status}{detail}")]
    Status {
        /// What was asked for.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The registry's own message, if any.
        detail: String,
    },
    /// Something was larger than its cap.
    #[error("{what} is {size} bytes, over the cap of {limit} bytes{hint}")]
    TooLarge {
        /// What it was.
        what: String,
        /// Its size (declared or read so far).
        size: u64,
        /// The cap.
        limit: u64,
        /// What sets the cap.
        hint: String,
    },
    /// The registry sent other bytes than the digest names (tampered with, or broken).
    #[error(
        "{what}: the registry sent bytes whose digest is {actual}, not {expected}; they were \
         tampered with or damaged, and nothing was written"
    )]
    DigestMismatch {
        /// What it was.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// The artifact is not a Wasm component.
    #[error("{reference} is not a Wasm component artifact: {reason}")]
    NotWasm {
        /// The reference.
        reference: String,
        /// What it is instead (with its media type).
        reason: String,
    },
    /// The artifact's signature was not verified against the trust policy.
    #[error("{reference} is not verified: {reason}; nothing was written")]
    NotVerified {
        /// The reference.
        reference: String,
        /// What failed.
        reason: String,
    },
    /// The tag points to another manifest than the one the lock approved.
    #[error(
        "{reference} now points to the manifest {now}, and the lock approved {locked} for {file}; \
         nothing changed: review the new version, then move the lock to it with `llm-worker \
         pull --update`"
    )]
    TagMoved {
        /// The reference.
        reference: String,
        /// The plugin file.
        file: String,
        /// The manifest the lock records.
        locked: String,
        /// The manifest the tag names now.
        now: String,
    },
    /// The trust policy cannot be used.
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    /// The lock file cannot be used.
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    /// The pulled component is not a plugin this host loads (or a file cannot be loaded).
    #[error(transparent)]
    Plugin(Box<PluginError>),
    /// Writing into the plugin directory failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl From<PluginError> for RegistryError {
    fn from(error: PluginError) -> Self {
        RegistryError::Plugin(Box::new(error))
    }
}
