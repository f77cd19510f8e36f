//! Key-based signatures as cosign makes them, checked in process: a "simple signing" payload
//! naming the repository and the manifest digest, signed with ECDSA P-256 over SHA-256, stored
//! as a layer of the manifest tagged `sha256-<hex>.sig` in the same repository, the signature
//! (DER, base64) in the layer's `dev.cosignproject.cosign/signature` annotation.
//!
//! Keys: public keys are PEM `PUBLIC KEY` (SubjectPublicKeyInfo) of the curve P-256, as
//! `cosign generate-key-pair` (`cosign.pub`) and `openssl pkey -pubout` write them. Signing keys
//! are cosign's encrypted `cosign.key` ([`SigningKey::from_cosign_pem`], the password from
//! `COSIGN_PASSWORD` or a prompt, as cosign asks), or unencrypted PEM: PKCS#8 (`PRIVATE KEY`,
//! e.g. `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`) or SEC1 (`EC
//! PRIVATE KEY`). [`SigningKey::generate`] makes a key pair that cosign reads.

use p256::ecdsa::signature::{Signer, Verifier};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};

/// The annotation of a signature layer that holds the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of a signature layer (the payload).
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The `critical.type` of a cosign payload.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Largest payload read.
pub(crate) const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// The tag cosign stores the signatures of `manifest_digest` under: `sha256-<hex>.sig`.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

/// The simple-signing payload for the manifest `manifest_digest` of `repository`
/// (`registry/path`).
pub fn payload(repository: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// A key that signs artifacts (ECDSA P-256).
pub struct SigningKey(p256::ecdsa::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SigningKey")
            .field(&self.fingerprint())
            .finish()
    }
}

impl SigningKey {
    /// Reads an unencrypted PEM signing key: PKCS#8 (`PRIVATE KEY`) or SEC1
    /// (`EC PRIVATE KEY`), of the curve P-256.
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        if Self::is_encrypted(pem) {
            return Err("the key is cosign's encrypted key: it needs its password \
                 (`from_cosign_pem`; the command asks for it or reads COSIGN_PASSWORD)"
                .into());
        }
        if pem.contains("ENCRYPTED") {
            return Err(
                "the key is encrypted in a format other than cosign's (`ENCRYPTED SIGSTORE \
                 PRIVATE KEY`), which is not read: give cosign's key, or an unencrypted PKCS#8 \
                 or SEC1 key"
                    .into(),
            );
        }
        if pem.contains("-----BEGIN EC PRIVATE KEY-----") {
            let der = crate::trust::pem_body(pem, "EC PRIVATE KEY")?;
            return p256::SecretKey::from_sec1_der(&der)
                .map(|secret| Self(secret.into()))
                .map_err(|_| "not a SEC1 private key of the curve P-256".to_owned());
        }
        p256::ecdsa::SigningKey::from_pkcs8_pem(pem)
            .map(Self)
            .map_err(|_| {
                "not a PEM private key of the curve P-256 (PKCS#8 `PRIVATE KEY` or SEC1 `EC \
                 PRIVATE KEY`, unencrypted)"
                    .to_owned()
            })
    }

    /// Reads cosign's encrypted key (`ENCRYPTED SIGSTORE PRIVATE KEY`, or cosign 1's
    /// `ENCRYPTED COSIGN PRIVATE KEY`), sealed under `password`; its key derivation is checked
    /// first (weak or unknown parameters are refused).
    pub fn from_cosign_pem(pem: &str, password: &[u8]) -> Result<Self, String> {
        let der = zeroize::Zeroizing::new(super::cosign_key::open(pem, password)?);
        p256::ecdsa::SigningKey::from_pkcs8_der(&der)
            .map(Self)
            .map_err(|_| "the sealed key is not a PKCS#8 key of the curve P-256".to_owned())
    }

    /// The PEM text of the key file at `path`, for [`from_pem`](Self::from_pem) or
    /// [`from_cosign_pem`](Self::from_cosign_pem): a regular file of at most 64 KiB that is
    /// the user's (or root's, readable by its group at most, as a mounted secret) and that no
    /// one else may read or write; checked on the file opened, which may not be a FIFO.
    ///
    /// # Errors
    /// The file is missing, is not such a file (saying what to fix), or is not text.
    pub fn read_pem_file(path: &std::path::Path) -> Result<String, String> {
        const MAX_KEY_FILE_BYTES: u64 = 64 << 10;
        let bytes = crate::file::read_private_file(
            path,
            MAX_KEY_FILE_BYTES,
            crate::file::Private::Operators,
        )?
        .ok_or_else(|| "there is no such file".to_owned())?;
        String::from_utf8(bytes).map_err(|_| "it is not a PEM text file".to_owned())
    }

    /// Whether `pem` is one of cosign's encrypted keys (which need a password).
    pub fn is_encrypted(pem: &str) -> bool {
        super::cosign_key::is_encrypted_cosign_key(pem)
    }

    /// A new random key.
    pub fn generate() -> Result<Self, String> {
        loop {
            let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
            getrandom::fill(bytes.as_mut()).map_err(|error| format!("no randomness ({error})"))?;
            if let Ok(secret) = p256::SecretKey::from_slice(bytes.as_ref()) {
                return Ok(Self(secret.into()));
            }
        }
    }

    /// The key sealed under `password` as `cosign generate-key-pair` writes it
    /// (`ENCRYPTED SIGSTORE PRIVATE KEY`: scrypt N=32768 r=8 p=1, NaCl secretbox).
    pub fn to_cosign_pem(&self, password: &[u8]) -> Result<String, String> {
        let der = self
            .0
            .to_pkcs8_der()
            .map_err(|_| "the key cannot be written as PKCS#8".to_owned())?;
        super::cosign_key::seal(der.as_bytes(), password)
    }

    /// The public key in PEM (`PUBLIC KEY`), as `cosign.pub` holds it.
    pub fn public_key_pem(&self) -> String {
        super::cosign_key::pem_encode("PUBLIC KEY", &self.public_key_der())
    }

    /// The signature of `payload`: DER, in base64, as cosign stores it.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: p256::ecdsa::Signature = self.0.sign(payload);
        <base64ct::Base64 as base64ct::Encoding>::encode_string(signature.to_der().as_bytes())
    }

    /// The public key in DER (SubjectPublicKeyInfo).
    pub fn public_key_der(&self) -> Vec<u8> {
        self.0
            .verifying_key()
            .to_public_key_der()
            .map(|document| document.as_bytes().to_vec())
            .unwrap_or_default()
    }

    /// `sha256:` and the SHA-256 of the public key's DER: how the lock names the signer.
    pub fn fingerprint(&self) -> String {
        format!(
            "sha256:{}",
            crate::digest::sha256_hex(&self.public_key_der())
        )
    }
}

/// Checks `signature` (base64 of DER, or of the 64-byte `r‖s` form) of `payload` with the
/// public key `key_der`.
pub(crate) fn verify(key_der: &[u8], payload: &[u8], signature: &str) -> Result<(), String> {
    let key = p256::ecdsa::VerifyingKey::from_public_key_der(key_der)
        .map_err(|_| "the key is not a P-256 public key".to_owned())?;
    let bytes = <base64ct::Base64 as base64ct::Encoding>::decode_vec(signature.trim())
        .map_err(|_| "the signature annotation is not base64".to_owned())?;
    let signature = p256::ecdsa::Signature::from_der(&bytes)
        .or_else(|_| p256::ecdsa::Signature::from_slice(&bytes))
        .map_err(|_| "the signature is not an ECDSA signature".to_owned())?;
    key.verify(payload, &signature)
        .map_err(|_| "the signature does not verify".to_owned())
}

/// Checks that a verified payload is a cosign signature of `manifest_digest` in `repository`.
pub(crate) fn check_payload(
    payload: &[u8],
    repository: &str,
    manifest_digest: &str,
) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(payload).map_err(|_| "its payload is not JSON".to_owned())?;
    let critical = value
        .get("critical")
        .ok_or_else(|| "its payload has no `critical` section".to_owned())?;
    let text = |path: &[&str]| {
        path.iter()
            .try_fold(critical, |value, key| value.get(key))
            .and_then(serde_json::Value::as_str)
    };
    if text(&["type"]) != Some(PAYLOAD_TYPE) {
        return Err(format!(
            "its payload is not a cosign image signature (type {})",
            super::quoted(text(&["type"]).unwrap_or("missing"))
        ));
    }
    let digest = text(&["image", "docker-manifest-digest"]).unwrap_or("none");
    if digest != manifest_digest {
        return Err(format!(
            "it signs the manifest {}, not {manifest_digest}",
            super::quoted(digest)
        ));
    }
    let named = text(&["identity", "docker-reference"]).unwrap_or("none");
    let same = super::Reference::parse(named).is_ok_and(|reference| reference.name() == repository);
    if !same {
        return Err(format!(
            "it was made for the repository {}, not {repository} (a signature copied from \
             another repository)",
            super::quoted(named)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgzQGqfcgro/uX8Fji
Aq3OnJnA2aQm6shetM737wxpQAGhRANCAAQXE6zR4o6mq11jlXXSO/4t3a5PO87m
f9wPlCaHANanCGbTUAcbC8Dde4QYyPUeTdYv0haZ+zCBRNRhAErHCfBz
-----END PRIVATE KEY-----
";
    const PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFxOs0eKOpqtdY5V10jv+Ld2uTzvO
5n/cD5QmhwDWpwhm01AHGwvA3XuEGMj1Hk3WL9IWmfswgUTUYQBKxwnwcw==
-----END PUBLIC KEY-----
";

    #[test]
    fn a_signature_verifies_with_its_key_and_names_what_it_signs() {
        let key = SigningKey::from_pem(KEY).expect("key");
        let der = crate::trust::public_key_der(PUBLIC).expect("public key");
        assert_eq!(key.public_key_der(), der);
        let digest = format!("sha256:{}", "ab".repeat(32));
        let payload = payload("r.example/acme/greet", &digest);
        let signature = key.sign(&payload);
        verify(&der, &payload, &signature).expect("verifies");
        check_payload(&payload, "r.example/acme/greet", &digest).expect("names it");
        let mut tampered = payload.clone();
        tampered[10] ^= 1;
        assert!(verify(&der, &tampered, &signature).is_err());
        let other = check_payload(&payload, "r.example/other/greet", &digest).expect_err("other");
        assert!(other.contains("r.example/acme/greet"), "{other}");
        let wrong = check_payload(&payload, "r.example/acme/greet", "sha256:00").expect_err("x");
        assert!(wrong.contains("sha256:00"), "{wrong}");
        assert_eq!(
            signature_tag(&digest),
            format!("sha256-{}.sig", "ab".repeat(32))
        );
        assert!(SigningKey::from_pem("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----").is_err());
    }
}
