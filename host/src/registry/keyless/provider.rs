//! The cryptography of Sigstore verification, done by `ring`: the library the host's TLS and
//! registry client already use, so that keyless verification adds no second crypto library
//! (`sigstore-crypto`'s default, `aws-lc-rs`, is left out). Verification only: the host never
//! makes a keyless signature.

use sigstore_verify::crypto::{CryptoProvider, Error, HashContext, SigningScheme};
use sigstore_verify::types::HashAlgorithm;

/// The provider, installed once per process before the first verification.
#[derive(Debug)]
pub(crate) struct Ring;

static RING: Ring = Ring;

/// Installs [`Ring`] as `sigstore-crypto`'s provider (once; a provider an embedding
/// application installed first is kept).
pub(crate) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = sigstore_verify::crypto::install_default_provider(&RING);
    });
}

struct Digest(ring::digest::Context);

impl HashContext for Digest {
    fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    fn finalize(self: Box<Self>) -> Vec<u8> {
        self.0.finish().as_ref().to_vec()
    }
}

fn algorithm(scheme: SigningScheme) -> Option<&'static dyn ring::signature::VerificationAlgorithm> {
    use ring::signature as s;
    Some(match scheme {
        SigningScheme::EcdsaP256Sha256 => &s::ECDSA_P256_SHA256_ASN1,
        SigningScheme::EcdsaP256Sha384 => &s::ECDSA_P256_SHA384_ASN1,
        SigningScheme::EcdsaP384Sha256 => &s::ECDSA_P384_SHA256_ASN1,
        SigningScheme::EcdsaP384Sha384 => &s::ECDSA_P384_SHA384_ASN1,
        SigningScheme::Ed25519 => &s::ED25519,
        SigningScheme::RsaPssSha256 => &s::RSA_PSS_2048_8192_SHA256,
        SigningScheme::RsaPssSha384 => &s::RSA_PSS_2048_8192_SHA384,
        SigningScheme::RsaPssSha512 => &s::RSA_PSS_2048_8192_SHA512,
        SigningScheme::RsaPkcs1Sha256 => &s::RSA_PKCS1_2048_8192_SHA256,
        SigningScheme::RsaPkcs1Sha384 => &s::RSA_PKCS1_2048_8192_SHA384,
        SigningScheme::RsaPkcs1Sha512 => &s::RSA_PKCS1_2048_8192_SHA512,
        _ => return None,
    })
}

impl CryptoProvider for Ring {
    fn hash(
        &self,
        algorithm: HashAlgorithm,
    ) -> sigstore_verify::crypto::Result<Box<dyn HashContext>> {
        let algorithm = match algorithm {
            HashAlgorithm::Sha2256 => &ring::digest::SHA256,
            HashAlgorithm::Sha2384 => &ring::digest::SHA384,
            HashAlgorithm::Sha2512 => &ring::digest::SHA512,
            other => {
                return Err(Error::UnsupportedAlgorithm(format!("hash {other:?}")));
            }
        };
        Ok(Box::new(Digest(ring::digest::Context::new(algorithm))))
    }

    fn verify_raw(
        &self,
        scheme: SigningScheme,
        spki_pubkey_bytes: &[u8],
        data: &[u8],
        signature: &[u8],
    ) -> sigstore_verify::crypto::Result<()> {
        let algorithm =
            algorithm(scheme).ok_or_else(|| Error::UnsupportedAlgorithm(format!("{scheme:?}")))?;
        ring::signature::UnparsedPublicKey::new(algorithm, spki_pubkey_bytes)
            .verify(data, signature)
            .map_err(|_| Error::Verification(format!("{} signature invalid", scheme.name())))
    }

    fn verify_prehashed(
        &self,
        scheme: SigningScheme,
        spki_pubkey_bytes: &[u8],
        digest: &[u8],
        signature: &[u8],
    ) -> sigstore_verify::crypto::Result<()> {
        // A message signature (cosign's legacy layout, `messageSignature` bundles) is checked
        // against its digest; ring verifies only whole messages, so P-256 (what cosign's
        // ephemeral keys are) goes through p256, which the host's own signatures use.
        use p256::ecdsa::signature::hazmat::PrehashVerifier;
        if scheme != SigningScheme::EcdsaP256Sha256 {
            return Err(Error::UnsupportedAlgorithm(format!(
                "{} over a precomputed digest (only ECDSA P-256 with SHA-256 is)",
                scheme.name()
            )));
        }
        let invalid = || Error::Verification(format!("{} signature invalid", scheme.name()));
        let key =
            p256::ecdsa::VerifyingKey::from_sec1_bytes(spki_pubkey_bytes).map_err(|_| invalid())?;
        let signature = p256::ecdsa::Signature::from_der(signature).map_err(|_| invalid())?;
        key.verify_prehash(digest, &signature)
            .map_err(|_| invalid())
    }
}
