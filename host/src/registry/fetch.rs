//! Fetching a Wasm artifact: resolving its manifest, verifying its cosign-compatible signature
//! against the trust policy before anything large is fetched, then its layer, by digest.

use super::keyless::{self, KeylessSigner, TrustedRoot};
use super::{
    Manifest, OCI_INDEX_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE, Reference, RegistryClient,
    RegistryError, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, artifact, signature,
    signature_tag,
};
use crate::lock::Unsigned;
use crate::trust::{Requirement, TRUST_FILE, TrustPolicy, TrustedIdentity, TrustedKey};

/// Most signature layers, or bundles, looked at for one artifact.
const MAX_SIGNATURES: usize = 16;

/// What verified a pulled artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verification {
    /// A signature by this key of the trust policy.
    Signed {
        /// The key's name in the trust policy.
        signer: String,
        /// `sha256:` and the hex SHA-256 of the key's DER.
        key: String,
    },
    /// A keyless signature by a signer this identity rule of the trust policy accepts.
    Keyless {
        /// The identity rule's name in the trust policy.
        signer: String,
        /// Who signed, as the verified certificate and log entry say.
        identity: KeylessSigner,
    },
    /// Taken unsigned, and how that was allowed.
    Unsigned(Unsigned),
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verification::Signed { signer, key } => write!(f, "signed by {signer} ({key})"),
            Verification::Keyless { signer, identity } => {
                write!(
                    f,
                    "signed keylessly by {signer} ({}, issuer {}",
                    identity.identity, identity.issuer
                )?;
                if let Some(index) = identity.log_index {
                    write!(f, ", log index {index}")?;
                }
                f.write_str(")")
            }
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
    resolve_with_bytes(client, reference)
        .await
        .map(|(digest, manifest, _)| (digest, manifest))
}

/// [`resolve`], with the manifest's bytes (what its digest is of, and what a signature binds).
async fn resolve_with_bytes(
    client: &RegistryClient,
    reference: &Reference,
) -> Result<(String, Manifest, Vec<u8>), RegistryError> {
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
    Ok((digest, manifest, fetched.bytes))
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
    let (manifest_digest, manifest, manifest_bytes) = resolve_with_bytes(client, reference).await?;
    let layer = manifest
        .wasm_layer()
        .map_err(|reason| RegistryError::NotWasm {
            reference: name.clone(),
            reason,
        })?
        .clone();
    let verified = verify(client, reference, &manifest_digest, &manifest_bytes, demand).await?;
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
    manifest_bytes: &[u8],
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
    let (keys, identities) = match policy.requirement(&repository) {
        Requirement::NoRule => {
            return Err(refuse(format!(
                "no rule of the trust policy {} covers {repository}; add one naming its \
                 signers, or take this artifact unsigned with --allow-unsigned",
                policy.path.display()
            )));
        }
        Requirement::Unsigned => return Ok(Verification::Unsigned(Unsigned::ByTrustPolicy)),
        Requirement::Signed { keys, identities } => (keys, identities),
    };
    let names: Vec<&str> = keys
        .iter()
        .map(|key| key.name.as_str())
        .chain(identities.iter().map(|identity| identity.name.as_str()))
        .collect();
    let root =
        if identities.is_empty() {
            None
        } else {
            let Some(root) = &policy.sigstore_root else {
                return Err(refuse(format!(
                    "the trust policy {} names keyless signers ({}) but no trusted root was read \
                 for them ([sigstore] trusted_root)",
                    policy.path.display(),
                    names.join(", ")
                )));
            };
            Some(TrustedRoot::from_json(&root.json).map_err(|why| {
                refuse(format!("the trusted root {}: {why}", root.path.display()))
            })?)
        };
    let signers = Signers {
        keys: &keys,
        identities: &identities,
        root: root.as_ref(),
    };
    let mut reasons = Vec::new();
    if let Some(root) = &root {
        let manifest = ManifestBytes {
            digest: manifest_digest,
            bytes: manifest_bytes,
        };
        if let Some(verified) = bundles(
            client,
            reference,
            &manifest,
            root,
            &identities,
            &mut reasons,
        )
        .await
        {
            return Ok(verified);
        }
    }
    let tag = signature_tag(manifest_digest);
    if let Some(fetched) = client.manifest(&tag, OCI_MANIFEST_MEDIA_TYPE).await? {
        let signatures = Manifest::parse(&fetched.bytes, fetched.content_type.as_deref())
            .map_err(|why| refuse(format!("its signature manifest {tag} is unreadable: {why}")))?;
        if let Some(verified) = legacy_signatures(
            client,
            &repository,
            manifest_digest,
            &signatures,
            &signers,
            &mut reasons,
        )
        .await
        {
            return Ok(verified);
        }
        if reasons.is_empty() {
            reasons.push(format!("{tag} holds no cosign signature layer"));
        }
    } else {
        reasons.push(format!(
            "no signature: {repository} has no {tag} (where cosign's key-based and legacy \
             signatures and `llm-worker push --sign` put the signatures of {manifest_digest}){}; \
             the trust policy wants it signed by {}",
            if identities.is_empty() {
                ""
            } else {
                ", and no Sigstore bundle refers to it"
            },
            names.join(", ")
        ));
    }
    Err(refuse(format!(
        "no valid signature by a signer the trust policy accepts for {repository} ({}): {}",
        names.join(", "),
        crate::registry::quoted_up_to(&reasons.join("; "), 4_000)
    )))
}

/// The signers a rule accepts, and the trusted root for its keyless ones.
struct Signers<'a> {
    keys: &'a [&'a TrustedKey],
    identities: &'a [&'a TrustedIdentity],
    root: Option<&'a TrustedRoot>,
}

/// The identity rule of `identities` that accepts `signer`; the reasons of the others.
fn accepted(identities: &[&TrustedIdentity], signer: &KeylessSigner) -> Result<String, String> {
    let claims = crate::trust::SignerClaims {
        identity: &signer.identity,
        issuer: &signer.issuer,
        source_repository: signer.source_repository.as_deref(),
        source_ref: signer.source_ref.as_deref(),
        trigger: signer.trigger.as_deref(),
        source_repository_id: signer.source_repository_id.as_deref(),
        owner_id: signer.owner_id.as_deref(),
    };
    let mut reasons = Vec::new();
    for identity in identities {
        match identity.accepts(&claims) {
            Ok(()) => return Ok(identity.name.clone()),
            Err(why) => reasons.push(format!("not {}: {why}", identity.name)),
        }
    }
    Err(reasons.join(", "))
}

/// The manifest pulled: its digest and the very bytes that digest is of.
struct ManifestBytes<'a> {
    digest: &'a str,
    bytes: &'a [u8],
}

/// Sigstore bundles that refer to the manifest: through the referrers API, or the referrers
/// tag (`sha256-<hex>`) where the registry has no such API. `None` when none verifies (the
/// reasons are added to `reasons`); a referrer that cannot be read is that referrer's failure,
/// and a referrers index that cannot be read leaves the `.sig` signatures to be tried.
async fn bundles(
    client: &RegistryClient,
    reference: &Reference,
    manifest: &ManifestBytes<'_>,
    root: &TrustedRoot,
    identities: &[&TrustedIdentity],
    reasons: &mut Vec<String>,
) -> Option<Verification> {
    let repository = reference.name();
    let index = match client.referrers(manifest.digest).await {
        Ok(Some(index)) => Some(index),
        // No referrers API (or it failed): the referrers tag.
        Ok(None) | Err(_) => {
            match client
                .manifest(&manifest.digest.replacen(':', "-", 1), OCI_INDEX_MEDIA_TYPE)
                .await
            {
                Ok(index) => index,
                Err(error) => {
                    reasons.push(format!("its referrers cannot be read ({error})"));
                    None
                }
            }
        }
    }?;
    let Ok(index) = serde_json::from_slice::<Index>(&index.bytes) else {
        reasons.push("its referrers index is not an OCI image index".into());
        return None;
    };
    // What says it is a bundle is read first; cosign has written referrers indexes with the
    // empty artifact type, so those are read after, judged by their own manifest. Junk (a
    // malformed digest, another artifact type) does not count towards the cap. Whoever can push
    // to the repository can still crowd it with bundles of their own: that denies the pull,
    // which moving the tag could do anyway, and never lets theirs through.
    let is_bundle = |kind: &str| kind.starts_with("application/vnd.dev.sigstore.bundle");
    let typed = index
        .manifests
        .iter()
        .filter(|entry| entry.artifact_type.as_deref().is_some_and(is_bundle));
    let untyped = index.manifests.iter().filter(|entry| {
        matches!(
            entry.artifact_type.as_deref(),
            None | Some(EMPTY_MEDIA_TYPE) | Some("")
        )
    });
    let candidates = typed
        .chain(untyped)
        .filter(|entry| artifact::check_digest(&entry.digest).is_ok())
        .take(MAX_SIGNATURES);
    for (number, entry) in candidates.enumerate().map(|(i, e)| (i + 1, e)) {
        let fetched = match client
            .manifest(&entry.digest, OCI_MANIFEST_MEDIA_TYPE)
            .await
        {
            Ok(Some(fetched)) => fetched,
            Ok(None) => {
                reasons.push(format!(
                    "bundle {number}: its manifest {} is gone",
                    entry.digest
                ));
                continue;
            }
            Err(error) => {
                reasons.push(format!("bundle {number}: {error}"));
                continue;
            }
        };
        let Ok(referrer) = Manifest::parse(&fetched.bytes, fetched.content_type.as_deref()) else {
            reasons.push(format!("bundle {number}: its manifest is unreadable"));
            continue;
        };
        if !referrer.artifact_type.as_deref().is_some_and(is_bundle) {
            continue;
        }
        if referrer
            .subject
            .as_ref()
            .map(|subject| subject.digest.as_str())
            != Some(manifest.digest)
        {
            reasons.push(format!("bundle {number} refers to another manifest"));
            continue;
        }
        let Some(layer) = referrer
            .layers
            .iter()
            .find(|layer| is_bundle(&layer.media_type))
        else {
            reasons.push(format!("bundle {number} has no bundle layer"));
            continue;
        };
        if layer.size > keyless::MAX_BUNDLE_BYTES {
            reasons.push(format!(
                "bundle {number} is {} bytes, over the cap of {} bytes",
                layer.size,
                keyless::MAX_BUNDLE_BYTES
            ));
            continue;
        }
        let bytes = match client
            .blob(
                &layer.digest,
                keyless::MAX_BUNDLE_BYTES,
                &format!("bundle {number} of {repository}"),
                "",
            )
            .await
        {
            Ok(bytes) => bytes,
            Err(error) => {
                reasons.push(format!("bundle {number}: {error}"));
                continue;
            }
        };
        let signer = match keyless::verify_bundle(root, &bytes, manifest.bytes, &repository) {
            Ok(signer) => signer,
            Err(why) => {
                reasons.push(format!("bundle {number} does not verify: {why}"));
                continue;
            }
        };
        match accepted(identities, &signer) {
            Ok(name) => {
                return Some(Verification::Keyless {
                    signer: name,
                    identity: signer,
                });
            }
            Err(why) => reasons.push(format!(
                "bundle {number} is by {} (issuer {}), whom no identity of the rule accepts \
                 ({why})",
                crate::registry::quoted(&signer.identity),
                crate::registry::quoted(&signer.issuer)
            )),
        }
    }
    None
}

/// The signatures of cosign's `.sig` layout: key-based (checked against `keys`) and legacy
/// keyless (a certificate, its chain and a Rekor bundle in annotations, checked against the
/// trusted root and `identities`).
async fn legacy_signatures(
    client: &RegistryClient,
    repository: &str,
    manifest_digest: &str,
    signatures: &Manifest,
    signers: &Signers<'_>,
    reasons: &mut Vec<String>,
) -> Option<Verification> {
    let key_names: Vec<&str> = signers.keys.iter().map(|key| key.name.as_str()).collect();
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
        let annotations = layer.annotations.as_ref()?;
        let signature = annotations.get(SIGNATURE_ANNOTATION)?;
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
        let (signer, name) =
            if let Some(certificate) = annotations.get(keyless::CERTIFICATE_ANNOTATION) {
                let Some(root) = signers.root else {
                    reasons.push(format!(
                        "signature {number} is keyless, and the rule names no keyless signer"
                    ));
                    continue;
                };
                let chain = annotations
                    .get(keyless::CHAIN_ANNOTATION)
                    .map(String::as_str)
                    .unwrap_or_default();
                let Some(rekor) = annotations.get(keyless::REKOR_BUNDLE_ANNOTATION) else {
                    reasons.push(format!(
                        "signature {number} is keyless and has no Rekor bundle (it was never \
                     logged, or its log entry was left out)"
                    ));
                    continue;
                };
                let signer = match keyless::verify_legacy(
                    root,
                    &payload,
                    signature,
                    certificate,
                    chain,
                    rekor,
                ) {
                    Ok(signer) => signer,
                    Err(why) => {
                        reasons.push(format!("signature {number} does not verify: {why}"));
                        continue;
                    }
                };
                match accepted(signers.identities, &signer) {
                    Ok(name) => (
                        Verification::Keyless {
                            signer: name.clone(),
                            identity: signer,
                        },
                        name,
                    ),
                    Err(why) => {
                        reasons.push(format!(
                            "signature {number} is by {} (issuer {}), whom no identity of the rule \
                         accepts ({why})",
                            crate::registry::quoted(&signer.identity),
                            crate::registry::quoted(&signer.issuer)
                        ));
                        continue;
                    }
                }
            } else {
                let Some(key) = signers
                    .keys
                    .iter()
                    .find(|key| signature::verify(&key.der, &payload, signature).is_ok())
                else {
                    reasons.push(if key_names.is_empty() {
                        format!("signature {number} is key-based, and the rule names no key")
                    } else {
                        format!(
                            "signature {number} does not verify with {} (signed by another key, or \
                         altered)",
                            key_names.join(" or ")
                        )
                    });
                    continue;
                };
                (
                    Verification::Signed {
                        signer: key.name.clone(),
                        key: key.fingerprint.clone(),
                    },
                    key.name.clone(),
                )
            };
        match signature::check_payload(&payload, repository, manifest_digest) {
            Ok(()) => return Some(signer),
            Err(why) => reasons.push(format!("signature {number} is by {name}, but {why}")),
        }
    }
    None
}

/// The media type of the empty descriptor (a referrer's config).
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// An OCI image index, as the referrers API and the referrers tag hold it.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    #[serde(default)]
    manifests: Vec<IndexEntry>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexEntry {
    digest: String,
    #[serde(default)]
    artifact_type: Option<String>,
}
