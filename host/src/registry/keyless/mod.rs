//! Keyless signatures, verified in process and offline: a Sigstore bundle (v0.1–v0.3) attached
//! to a Wasm artifact, or cosign's legacy `.sig` layer carrying a Fulcio certificate, checked
//! against the trusted root file the operator supplies (Sigstore's `trusted_root.json`: Fulcio
//! CAs, Rekor and CT log keys, timestamp authorities).
//!
//! What is checked, by `sigstore-verify` (sigstore-rust) with [`provider::Ring`]: the
//! certificate's chain to a CA of the root, valid at the signing time the log attests; its
//! embedded SCT from a CT log of the root; the Rekor entry (its signed entry timestamp, or its
//! inclusion proof with a signed checkpoint) and that the entry is for this signature; the
//! signature over the artifact. Then here: what was signed is this manifest (the in-toto
//! statement's subject, with cosign's signing predicate; or a simple-signing payload naming
//! the manifest digest and the repository), and the signer's identity, issuer and claims are
//! handed to the trust policy's identity rules. No revocation is checked and nothing is
//! fetched: the root file is the whole of what is trusted.

pub(crate) mod provider;

use std::sync::Arc;

use serde_json::{Value, json};
use sigstore_verify::types::Bundle;

/// The media type of a Sigstore bundle v0.3 (an OCI referrer's `artifactType` and layer).
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The in-toto predicate `cosign sign` writes: a signature of the subject, nothing more.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The annotation of a legacy signature layer holding the Fulcio certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// The annotation holding the certificate's chain (PEM).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
/// The annotation holding the Rekor bundle (signed entry timestamp and entry).
pub const REKOR_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// Largest bundle read.
pub const MAX_BUNDLE_BYTES: u64 = 256 << 10;

/// A trusted root, parsed and ready to verify with.
#[derive(Clone)]
pub struct TrustedRoot {
    verifier: Arc<sigstore_verify::Verifier>,
}

impl std::fmt::Debug for TrustedRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedRoot").finish_non_exhaustive()
    }
}

impl TrustedRoot {
    /// Parses a `trusted_root.json` and prepares its keys and certificates (a malformed or
    /// unsupported key, or a certificate outside its validity window, is an error here).
    pub fn from_json(text: &str) -> Result<Self, String> {
        provider::install();
        let root = sigstore_verify::trust_root::TrustedRoot::from_json(text)
            .map_err(|error| format!("it is not a Sigstore trusted root ({error})"))?;
        let verifier = sigstore_verify::Verifier::new(&root)
            .map_err(|error| format!("its keys or certificates are unusable ({error})"))?;
        Ok(Self {
            verifier: Arc::new(verifier),
        })
    }
}

impl TrustedRoot {
    /// Verifies a Sigstore bundle (`bundle`, JSON; v0.1–v0.3) of `artifact` (its bytes), as
    /// `cosign verify-blob --bundle` does offline: the certificate chain, SCT, log entry and
    /// signature; an in-toto statement must name `artifact`'s SHA-256 among its subjects. Who
    /// signed is returned for the caller to judge (no identity is required here).
    pub fn verify_blob(&self, bundle: &[u8], artifact: &[u8]) -> Result<KeylessSigner, String> {
        let text = std::str::from_utf8(bundle).map_err(|_| "the bundle is not UTF-8".to_owned())?;
        let bundle =
            Bundle::from_json(text).map_err(|error| format!("not a Sigstore bundle ({error})"))?;
        verify(self, &bundle, artifact)
    }
}

/// Who made a keyless signature, as its verified certificate and log entry say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KeylessSigner {
    /// The certificate's subject: the OIDC identity (an e-mail address, or a URI such as a
    /// GitHub Actions workflow `https://github.com/ORG/REPO/.github/workflows/F.yml@REF`).
    pub identity: String,
    /// The OIDC issuer that vouched for it (`https://token.actions.githubusercontent.com`).
    pub issuer: String,
    /// The entry's index in the transparency log.
    pub log_index: Option<u64>,
    /// The source repository claim (Fulcio `1.3.6.1.4.1.57264.1.12`), if any.
    pub source_repository: Option<String>,
    /// The source ref claim (`.1.14`, e.g. `refs/tags/v1.2.0`), if any.
    pub source_ref: Option<String>,
    /// The build trigger claim (`.1.20`, e.g. `push`), if any.
    pub trigger: Option<String>,
    /// The source repository's immutable identifier (`.1.15`, GitHub's numeric id), if any.
    pub source_repository_id: Option<String>,
    /// The source repository owner's immutable identifier (`.1.17`), if any.
    pub owner_id: Option<String>,
}

/// Verifies a Sigstore bundle (`bundle`, JSON) attached to the manifest `manifest` (its bytes)
/// of `repository` (`registry/path`) against `root`. It must be what cosign attaches to an
/// image: a DSSE envelope holding an in-toto statement with cosign's signing predicate, one of
/// whose subjects has the manifest's SHA-256 and names `repository` (so that a bundle made for
/// the same bytes in another repository is not taken here).
pub(crate) fn verify_bundle(
    root: &TrustedRoot,
    bundle: &[u8],
    manifest: &[u8],
    repository: &str,
) -> Result<KeylessSigner, String> {
    let text = std::str::from_utf8(bundle).map_err(|_| "the bundle is not UTF-8".to_owned())?;
    let bundle =
        Bundle::from_json(text).map_err(|error| format!("not a Sigstore bundle ({error})"))?;
    let sigstore_verify::types::SignatureContent::DsseEnvelope(envelope) = &bundle.content else {
        return Err(
            "it holds a message signature; a bundle attached to an artifact must hold a DSSE \
             in-toto statement naming it, as cosign writes"
                .into(),
        );
    };
    let statement: Value = serde_json::from_slice(envelope.payload.as_bytes())
        .map_err(|_| "its DSSE payload is not an in-toto statement".to_owned())?;
    let predicate = statement
        .get("predicateType")
        .and_then(Value::as_str)
        .unwrap_or("none");
    if predicate != COSIGN_SIGN_PREDICATE {
        return Err(format!(
            "it is an attestation of type {}, not a signature ({COSIGN_SIGN_PREDICATE})",
            crate::registry::quoted(predicate)
        ));
    }
    let digest = crate::digest::sha256_hex(manifest);
    let named = statement
        .get("subject")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|subject| {
            subject.pointer("/digest/sha256").and_then(Value::as_str) == Some(&digest)
        })
        .filter_map(|subject| subject.get("name").and_then(Value::as_str))
        .collect::<Vec<_>>();
    let here = |name: &str| {
        crate::registry_name::canonical_repository(name).is_ok_and(|name| name == repository)
    };
    let signer = verify(root, &bundle, manifest)?;
    if !named.iter().any(|name| here(name)) {
        return Err(format!(
            "it was made for the repository {}, not {repository} (a signature copied from \
             another repository)",
            crate::registry::quoted(named.first().copied().unwrap_or("none"))
        ));
    }
    Ok(signer)
}

/// Verifies cosign's legacy keyless signature: `signature` (base64) of `payload` by the key of
/// `certificate` (PEM), with its `chain` (PEM, may be empty) and the Rekor bundle annotation
/// `rekor_bundle`. The caller checks what the payload names.
pub(crate) fn verify_legacy(
    root: &TrustedRoot,
    payload: &[u8],
    signature: &str,
    certificate: &str,
    chain: &str,
    rekor_bundle: &str,
) -> Result<KeylessSigner, String> {
    let b64 = |bytes: &[u8]| <base64ct::Base64 as base64ct::Encoding>::encode_string(bytes);
    let mut blocks = Vec::new();
    pem_blocks(certificate, "certificate", &mut blocks)?;
    pem_blocks(chain, "chain", &mut blocks)?;
    let certificates: Vec<Value> = blocks
        .iter()
        .map(|der| json!({ "rawBytes": b64(der) }))
        .collect();
    if certificates.is_empty() {
        return Err("its certificate annotation holds no PEM certificate".into());
    }
    let rekor: Value = serde_json::from_str(rekor_bundle)
        .map_err(|_| "its Rekor bundle annotation is not JSON".to_owned())?;
    let text = |value: &Value, key: &str| value.get(key).cloned().unwrap_or(Value::Null);
    let entry = text(&rekor, "Payload");
    let body_b64 = entry
        .get("body")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let body = <base64ct::Base64 as base64ct::Encoding>::decode_vec(body_b64)
        .map_err(|_| "its Rekor entry body is not base64".to_owned())?;
    let body: Value =
        serde_json::from_slice(&body).map_err(|_| "its Rekor entry is not JSON".to_owned())?;
    let log_id = entry
        .get("logID")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let log_id = base16ct::mixed::decode_vec(log_id)
        .map_err(|_| "its Rekor log ID is not hex".to_owned())?;
    let number = |key: &str| {
        entry
            .get(key)
            .and_then(Value::as_i64)
            .map(|n| n.to_string())
            .ok_or_else(|| format!("its Rekor bundle has no {key}"))
    };
    let bundle = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.1",
        "verificationMaterial": {
            "x509CertificateChain": { "certificates": certificates },
            "tlogEntries": [{
                "logIndex": number("logIndex")?,
                "logId": { "keyId": b64(&log_id) },
                "kindVersion": { "kind": text(&body, "kind"), "version": text(&body, "apiVersion") },
                "integratedTime": number("integratedTime")?,
                "inclusionPromise": { "signedEntryTimestamp": text(&rekor, "SignedEntryTimestamp") },
                "canonicalizedBody": body_b64,
            }],
        },
        "messageSignature": {
            "messageDigest": {
                "algorithm": "SHA2_256",
                "digest": b64(&crate::digest::sha256(payload)),
            },
            "signature": signature.trim(),
        },
    });
    let bundle = Bundle::from_json(&bundle.to_string())
        .map_err(|error| format!("its annotations do not make a Sigstore bundle ({error})"))?;
    verify(root, &bundle, payload)
}

/// A certificate's identity as text, which says its kind as rules read it: a URI (a
/// workload's, such as a workflow's) has `://`, an e-mail address has none. One that would
/// read as the other kind (an e-mail address `https://…`) is refused, so that comparing the
/// text compares the kind too.
fn identity_text(identity: &sigstore_verify::SubjectAltName) -> Result<String, String> {
    let text = identity.as_str();
    let reads_as_uri = text.contains("://");
    match identity {
        sigstore_verify::SubjectAltName::Email(_) if !reads_as_uri => Ok(text.to_owned()),
        sigstore_verify::SubjectAltName::Uri(_) if reads_as_uri => Ok(text.to_owned()),
        _ => Err(format!(
            "its certificate's identity {} is of one kind and reads as the other (an e-mail \
             address with `://`, or a URI without)",
            crate::registry::quoted(text)
        )),
    }
}

fn verify(root: &TrustedRoot, bundle: &Bundle, artifact: &[u8]) -> Result<KeylessSigner, String> {
    let policy = sigstore_verify::VerificationPolicy::any_identity();
    let result = root
        .verifier
        .verify(artifact, bundle, &policy)
        .map_err(|error| crate::registry::quoted(&error.to_string()))?;
    if !(result.certificate_verified() && result.sct_verified() && result.tlog_verified()) {
        return Err(format!(
            "it was not fully verified (certificate {}, SCT {}, transparency log {})",
            result.certificate_verified(),
            result.sct_verified(),
            result.tlog_verified()
        ));
    }
    let identity = result
        .identity()
        .ok_or_else(|| "its certificate names no identity".to_owned())
        .and_then(identity_text)?;
    let issuer = result
        .issuer()
        .map(str::to_owned)
        .ok_or_else(|| "its certificate names no OIDC issuer".to_owned())?;
    let claims = result
        .certificate()
        .map(|certificate| &certificate.ci_claims);
    Ok(KeylessSigner {
        identity,
        issuer,
        log_index: bundle
            .verification_material
            .tlog_entries
            .first()
            .map(|entry| entry.log_index.get()),
        source_repository: claims.and_then(|claims| claims.source_repository_uri.clone()),
        source_ref: claims.and_then(|claims| claims.source_repository_ref.clone()),
        trigger: claims.and_then(|claims| claims.build_trigger.clone()),
        source_repository_id: claims.and_then(|claims| claims.source_repository_identifier.clone()),
        owner_id: claims.and_then(|claims| claims.source_repository_owner_identifier.clone()),
    })
}

/// At most this many certificates in a legacy signature's two annotations together (a leaf
/// and its chain: Fulcio's chains are two or three long).
const MAX_CERTIFICATES: usize = 10;

/// Adds to `blocks` the DER of every `CERTIFICATE` block of `text`, the annotation `what`:
/// the text is read once, line by line; a malformed block, or more than [`MAX_CERTIFICATES`]
/// in all, is refused.
fn pem_blocks(text: &str, what: &str, blocks: &mut Vec<Vec<u8>>) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    for block in CertificateDer::pem_slice_iter(text.as_bytes()) {
        let block = block.map_err(|error| format!("its {what} annotation is not PEM: {error}"))?;
        if blocks.len() == MAX_CERTIFICATES {
            return Err(format!(
                "its certificate annotations hold more than {MAX_CERTIFICATES} certificates"
            ));
        }
        blocks.push(block.to_vec());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attack: a legacy signature's certificate annotation of thousands of `END` lines
    /// before one large block. Read from after the first `END` each time, the one block was
    /// decoded once per `END` line, in quadratic time: gigabytes from a 1 MiB manifest, before
    /// any signature was checked. Read once, it is one certificate; past ten, refused.
    #[test]
    fn certificate_annotations_are_read_once_and_bounded() {
        let block = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            "A".repeat(64 * 1024)
        );
        let ends = "-----END CERTIFICATE-----\n".repeat(20_000);
        let mut blocks = Vec::new();
        pem_blocks(&format!("{ends}{block}"), "certificate", &mut blocks).expect("one block");
        assert_eq!(blocks.len(), 1, "{} copies of one block", blocks.len());

        let mut blocks = Vec::new();
        pem_blocks(&block.repeat(4), "certificate", &mut blocks).expect("four blocks");
        assert_eq!(blocks.len(), 4);
        assert_eq!(blocks[0].len(), 48 * 1024);
        let refused = pem_blocks(&block.repeat(7), "chain", &mut blocks);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("more than 10 certificates")),
            "{refused:?}"
        );
        let mut blocks = Vec::new();
        let malformed = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let refused = pem_blocks(malformed, "certificate", &mut blocks);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("certificate annotation is not PEM")),
            "{refused:?}"
        );
    }

    #[test]
    fn a_bundle_cosign_made_on_the_public_good_instance_verifies_offline() {
        let root = TrustedRoot::from_json(include_str!("testdata/public-good-trusted-root.json"))
            .expect("the public-good root");
        let bundle = include_bytes!("testdata/cosign-v3-blob.sigstore.json");
        let blob = include_bytes!("testdata/cosign-v3-blob.txt");
        let signer = root.verify_blob(bundle, blob).expect("verifies");
        assert!(signer.identity.contains('@'), "{signer:?}");
        assert!(signer.issuer.starts_with("https://"), "{signer:?}");
        assert!(signer.log_index.is_some());
        // Another blob, or an altered bundle, does not.
        assert!(root.verify_blob(bundle, b"other content").is_err());
        let mut altered = bundle.to_vec();
        let at = altered.len() / 2;
        altered[at] ^= 0x01;
        assert!(root.verify_blob(&altered, blob).is_err());
    }

    /// Rules compare a signer's identity as text: an e-mail identity reading as a workflow's
    /// URI (or a URI reading as an e-mail address) would pass for the other kind.
    #[test]
    fn an_identity_reading_as_the_other_kind_is_refused() {
        use sigstore_verify::SubjectAltName::{Email, Uri};
        let workflow = "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v1";
        assert_eq!(
            identity_text(&Uri(workflow.into())),
            Ok(workflow.to_owned())
        );
        assert_eq!(
            identity_text(&Email("dev@acme.example".into())),
            Ok("dev@acme.example".to_owned())
        );
        for forged in [Email(workflow.into()), Uri("dev@acme.example".into())] {
            let refused = identity_text(&forged).expect_err("the other kind");
            assert!(refused.contains("reads as the other"), "{refused}");
        }
    }
}
