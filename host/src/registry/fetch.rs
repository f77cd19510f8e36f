//! Fetching a Wasm artifact: resolving its manifest, verifying its cosign-compatible signature
//! against the trust policy before anything large is fetched, then its layer, by digest.

use super::{
    Manifest, OCI_MANIFEST_MEDIA_TYPE, Reference, RegistryClient, RegistryError,
    SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, artifact, signature, signature_tag,
};
use crate::lock::Unsigned;
use crate::trust::{Requirement, TRUST_FILE, TrustPolicy};

/// Most signature layers looked at for one artifact.
const MAX_SIGNATURES: usize = 16;

/// What verified a pulled artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// A signature by this key of the trust policy.
    Signed {
        /// The key's name in the trust policy.
        signer: String,
        /// `sha256:` and the hex SHA-256 of the key's DER.
        key: String,
    },
    /// Taken unsigned, and how that was allowed.
    Unsigned(Unsigned),
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verification::Signed { signer, key } => write!(f, "signed by {signer} ({key})"),
            Verification::Unsigned(how) => write!(f, "unsigned, allowed by {how}"),
        }
    }
}

/// A Wasm artifact fetched and verified.
#[derive(Debug, Clone)]
pub struct PulledArtifact {
    /// The digest of its manifest.
    pub manifest_digest: String,
    /// The digest of its layer (the component).
    pub layer_digest: String,
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// What verified it.
    pub verified: Verification,
}

/// What [`pull`] asks of an artifact.
#[derive(Debug, Clone, Copy)]
pub enum Demand<'a> {
    /// What this trust policy asks of the repository (`None`: there is none, so a signature
    /// cannot be verified and the artifact is refused).
    Policy(Option<&'a TrustPolicy>),
    /// Take it unsigned (`pull --allow-unsigned`) unless this trust policy has a rule for the
    /// repository: the flag is for what no rule covers, and never overrides a rule that wants
    /// the repository signed.
    AllowUnsigned(Option<&'a TrustPolicy>),
}

/// Fetches the manifest `reference` names: its digest (computed, and checked against the
/// reference's digest if it has one) and the manifest.
pub async fn resolve(
    client: &RegistryClient,
    reference: &Reference,
) -> Result<(String, Manifest), RegistryError> {
    let name = reference.to_string();
    let fetched = client
        .manifest(reference.manifest_reference(), artifact::ACCEPT_MANIFESTS)
        .await?
        .ok_or_else(|| {
            RegistryError::Usage(format!(
                "{name}: the registry has no such manifest (no such repository, tag or digest)"
            ))
        })?;
    let digest = format!("sha256:{}", crate::digest::sha256_hex(&fetched.bytes));
    if let Some(expected) = &reference.digest
        && expected != &digest
    {
        return Err(RegistryError::DigestMismatch {
            what: format!("the manifest {name}"),
            expected: expected.clone(),
            actual: digest,
        });
    }
    let manifest =
        Manifest::parse(&fetched.bytes, fetched.content_type.as_deref()).map_err(|reason| {
            RegistryError::NotWasm {
                reference: name.clone(),
                reason,
            }
        })?;
    Ok((digest, manifest))
}

/// Pulls the Wasm artifact `reference` names: its manifest (at most [`MAX_MANIFEST_BYTES`]),
/// refused unless it is a Wasm component artifact; its signature, verified as `demand` asks
/// before anything large is fetched; then its layer, at most `max_bytes` (the host's
/// `max_plugin_bytes`), checked against its digest.
///
/// [`MAX_MANIFEST_BYTES`]: super::MAX_MANIFEST_BYTES
pub async fn pull(
    client: &RegistryClient,
    reference: &Reference,
    demand: Demand<'_>,
    max_bytes: u64,
) -> Result<PulledArtifact, RegistryError> {
    let name = reference.to_string();
    let (manifest_digest, manifest) = resolve(client, reference).await?;
    let layer = manifest
        .wasm_layer()
        .map_err(|reason| RegistryError::NotWasm {
            reference: name.clone(),
            reason,
        })?
        .clone();
    let verified = verify(client, reference, &manifest_digest, demand).await?;
    let cap_hint = " (the host's plugin size cap, max_plugin_bytes); nothing was fetched";
    if layer.size > max_bytes {
        return Err(RegistryError::TooLarge {
            what: format!("the component of {name}"),
            size: layer.size,
            limit: max_bytes,
            hint: cap_hint.to_owned(),
        });
    }
    let bytes = client
        .blob(
            &layer.digest,
            layer.size,
            &format!("the component of {name} ({})", layer.digest),
            " (the size its manifest declares)",
        )
        .await?;
    Ok(PulledArtifact {
        manifest_digest,
        layer_digest: layer.digest,
        bytes,
        verified,
    })
}

/// Verifies the signatures of `manifest_digest` as `demand` asks.
async fn verify(
    client: &RegistryClient,
    reference: &Reference,
    manifest_digest: &str,
    demand: Demand<'_>,
) -> Result<Verification, RegistryError> {
    let repository = reference.name();
    let refuse = |reason: String| RegistryError::NotVerified {
        reference: reference.to_string(),
        reason,
    };
    let policy = match demand {
        Demand::AllowUnsigned(Some(policy))
            if !matches!(policy.requirement(&repository), Requirement::NoRule) =>
        {
            policy
        }
        Demand::AllowUnsigned(_) => return Ok(Verification::Unsigned(Unsigned::ByFlag)),
        Demand::Policy(None) => {
            return Err(refuse(format!(
                "the directory has no trust policy ({TRUST_FILE}) saying which keys sign \
                 {repository}; write one (see the README), or take this artifact unsigned with \
                 --allow-unsigned"
            )));
        }
        Demand::Policy(Some(policy)) => policy,
    };
    let keys = match policy.requirement(&repository) {
        Requirement::NoRule => {
            return Err(refuse(format!(
                "no rule of the trust policy {} covers {repository}; add one naming its \
                 signers, or take this artifact unsigned with --allow-unsigned",
                policy.path.display()
            )));
        }
        Requirement::Unsigned => return Ok(Verification::Unsigned(Unsigned::ByTrustPolicy)),
        Requirement::Signed(keys) => keys,
    };
    let names: Vec<&str> = keys.iter().map(|key| key.name.as_str()).collect();
    let tag = signature_tag(manifest_digest);
    let Some(fetched) = client.manifest(&tag, OCI_MANIFEST_MEDIA_TYPE).await? else {
        return Err(refuse(format!(
            "no signature: {repository} has no {tag} (where cosign and `llm-worker push --sign` \
             put the signatures of {manifest_digest}); the trust policy wants it signed by {}",
            names.join(", ")
        )));
    };
    let signatures = Manifest::parse(&fetched.bytes, fetched.content_type.as_deref())
        .map_err(|why| refuse(format!("its signature manifest {tag} is unreadable: {why}")))?;
    let mut reasons = Vec::new();
    // Only layers that carry a signature count towards the cap, so that anyone who can push
    // to the repository cannot hide a valid signature behind unsigned junk layers.
    let layers = signatures
        .layers
        .iter()
        .filter(|layer| layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
        .filter(|layer| {
            layer
                .annotations
                .as_ref()
                .is_some_and(|annotations| annotations.contains_key(SIGNATURE_ANNOTATION))
        })
        .take(MAX_SIGNATURES);
    for (index, layer) in layers.enumerate() {
        let number = index + 1;
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        if artifact::check_digest(&layer.digest).is_err() {
            reasons.push(format!("signature {number} names no sha256 payload"));
            continue;
        }
        // A payload that cannot be fetched is that signature's failure, not the pull's: another
        // signature of the list may still verify.
        let payload = match client
            .blob(
                &layer.digest,
                signature::MAX_PAYLOAD_BYTES,
                &format!("the payload of signature {number} of {repository}"),
                "",
            )
            .await
        {
            Ok(payload) => payload,
            Err(error) => {
                reasons.push(format!("signature {number}: {error}"));
                continue;
            }
        };
        let Some(key) = keys
            .iter()
            .find(|key| signature::verify(&key.der, &payload, signature).is_ok())
        else {
            reasons.push(format!(
                "signature {number} does not verify with {} (signed by another key, or altered)",
                names.join(" or ")
            ));
            continue;
        };
        match signature::check_payload(&payload, &repository, manifest_digest) {
            Ok(()) => {
                return Ok(Verification::Signed {
                    signer: key.name.clone(),
                    key: key.fingerprint.clone(),
                });
            }
            Err(why) => reasons.push(format!("signature {number} is by {}, but {why}", key.name)),
        }
    }
    if reasons.is_empty() {
        reasons.push(format!("{tag} holds no cosign signature layer"));
    }
    Err(refuse(format!(
        "no valid signature by a key the trust policy accepts for {repository} ({}): {}",
        names.join(", "),
        reasons.join("; ")
    )))
}
