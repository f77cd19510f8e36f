//! cosign's encrypted private key format, read and written: the PEM block `ENCRYPTED SIGSTORE
//! PRIVATE KEY` (cosign 2 and later; `ENCRYPTED COSIGN PRIVATE KEY` before) holding JSON: a
//! scrypt key derivation (`kdf`: `N`, `r`, `p`, a salt) and a NaCl secretbox (`cipher`:
//! XSalsa20-Poly1305, a nonce) sealing the PKCS#8 DER of the key (`ciphertext`). This is what
//! `cosign generate-key-pair` writes and `cosign sign --key` reads, with the password from
//! `COSIGN_PASSWORD` or a prompt.
//!
//! Key derivation parameters weaker than cosign's (`N` = 32768, `r` = 8, `p` = 1), or costlier
//! than a signing tool should spend (`N` above 2^17, i.e. 128 MiB, `r` other than 8, `p` above
//! 2), and any other KDF or cipher are refused before any work is done.

use crypto_secretbox::aead::{Aead, KeyInit};
use serde::{Deserialize, Serialize};

/// The PEM label cosign 2 and later write.
pub const ENCRYPTED_KEY_LABEL: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
/// The PEM label cosign 1 wrote (still read).
pub const LEGACY_ENCRYPTED_KEY_LABEL: &str = "ENCRYPTED COSIGN PRIVATE KEY";
/// The environment variable cosign reads the key's password from.
pub const PASSWORD_VARIABLE: &str = "COSIGN_PASSWORD";

/// scrypt's cost as cosign writes it (log2 N = 15).
const SCRYPT_N: u64 = 1 << 15;
/// The most costly N read (log2 N = 17: 128 MiB with r = 8).
const MAX_SCRYPT_N: u64 = 1 << 17;
const SCRYPT_R: u32 = 8;
const MAX_SCRYPT_P: u32 = 2;
const SALT_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cipher {
    name: String,
    nonce: String,
}

fn b64_decode(text: &str, what: &str) -> Result<Vec<u8>, String> {
    <base64ct::Base64 as base64ct::Encoding>::decode_vec(text)
        .map_err(|_| format!("its {what} is not base64"))
}

fn b64(bytes: &[u8]) -> String {
    <base64ct::Base64 as base64ct::Encoding>::encode_string(bytes)
}

fn derive(password: &[u8], salt: &[u8], params: &KdfParams) -> Result<[u8; 32], String> {
    let log_n = params.n.trailing_zeros() as u8;
    let scrypt = scrypt::Params::new(log_n, params.r, params.p)
        .map_err(|error| format!("its scrypt parameters are unusable ({error})"))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(password, salt, &scrypt, &mut key)
        .map_err(|error| format!("scrypt failed ({error})"))?;
    Ok(key)
}

/// The label of cosign's encrypted key in `pem`, if it holds one.
fn encrypted_label(pem: &str) -> Option<&'static str> {
    [ENCRYPTED_KEY_LABEL, LEGACY_ENCRYPTED_KEY_LABEL]
        .into_iter()
        .find(|label| pem.contains(&format!("-----BEGIN {label}-----")))
}

/// Whether `pem` holds one of cosign's encrypted keys.
pub fn is_encrypted_cosign_key(pem: &str) -> bool {
    encrypted_label(pem).is_some()
}

/// The PKCS#8 DER sealed in cosign's encrypted key `pem` under `password`.
pub(crate) fn open(pem: &str, password: &[u8]) -> Result<Vec<u8>, String> {
    let label = encrypted_label(pem)
        .ok_or_else(|| format!("no `-----BEGIN {ENCRYPTED_KEY_LABEL}-----` block"))?;
    let body = crate::trust::pem_body(pem, label)?;
    let sealed: Sealed = serde_json::from_slice(&body)
        .map_err(|error| format!("its sealed key is not cosign's JSON ({error})"))?;
    if sealed.kdf.name != "scrypt" {
        return Err(format!(
            "its key derivation is '{}'; cosign's keys use scrypt",
            sealed.kdf.name
        ));
    }
    if sealed.cipher.name != "nacl/secretbox" {
        return Err(format!(
            "its cipher is '{}'; cosign's keys use nacl/secretbox",
            sealed.cipher.name
        ));
    }
    let KdfParams { n, r, p } = sealed.kdf.params;
    if !n.is_power_of_two()
        || !(SCRYPT_N..=MAX_SCRYPT_N).contains(&n)
        || r != SCRYPT_R
        || p == 0
        || p > MAX_SCRYPT_P
    {
        return Err(format!(
            "its scrypt parameters (N={n}, r={r}, p={p}) are refused: N is a power of two from \
             {SCRYPT_N} to {MAX_SCRYPT_N}, r is {SCRYPT_R}, p from 1 to {MAX_SCRYPT_P} (cosign \
             writes N={SCRYPT_N}, r=8, p=1)"
        ));
    }
    let salt = b64_decode(&sealed.kdf.salt, "salt")?;
    if salt.len() < 16 {
        return Err(format!(
            "its salt is {} bytes; at least 16 are needed",
            salt.len()
        ));
    }
    let nonce = b64_decode(&sealed.cipher.nonce, "nonce")?;
    if nonce.len() != NONCE_BYTES {
        return Err(format!(
            "its nonce is {} bytes, not {NONCE_BYTES}",
            nonce.len()
        ));
    }
    let ciphertext = b64_decode(&sealed.ciphertext, "ciphertext")?;
    let key = derive(password, &salt, &KdfParams { n, r, p })?;
    let cipher = crypto_secretbox::XSalsa20Poly1305::new(&key.into());
    let nonce: [u8; NONCE_BYTES] = nonce
        .try_into()
        .map_err(|_| "its nonce is unusable".to_owned())?;
    cipher
        .decrypt(&nonce.into(), ciphertext.as_slice())
        .map_err(|_| "the password is wrong (or the key was altered)".to_owned())
}

/// `pkcs8` sealed under `password` as cosign seals keys, in PEM.
pub(crate) fn seal(pkcs8: &[u8], password: &[u8]) -> Result<String, String> {
    let mut salt = [0u8; SALT_BYTES];
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut salt).map_err(|error| format!("no randomness ({error})"))?;
    getrandom::fill(&mut nonce).map_err(|error| format!("no randomness ({error})"))?;
    let params = KdfParams {
        n: SCRYPT_N,
        r: SCRYPT_R,
        p: 1,
    };
    let key = derive(password, &salt, &params)?;
    let cipher = crypto_secretbox::XSalsa20Poly1305::new(&key.into());
    let ciphertext = cipher
        .encrypt(&nonce.into(), pkcs8)
        .map_err(|_| "sealing failed".to_owned())?;
    let sealed = Sealed {
        kdf: Kdf {
            name: "scrypt".into(),
            params,
            salt: b64(&salt),
        },
        cipher: Cipher {
            name: "nacl/secretbox".into(),
            nonce: b64(&nonce),
        },
        ciphertext: b64(&ciphertext),
    };
    let json = serde_json::to_vec(&sealed).map_err(|error| error.to_string())?;
    Ok(pem_encode(ENCRYPTED_KEY_LABEL, &json))
}

/// `der` as a PEM block labelled `label`.
pub(crate) fn pem_encode(label: &str, der: &[u8]) -> String {
    p256::pkcs8::der::pem::encode_string(label, p256::pkcs8::LineEnding::LF, der)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_key_opens_with_its_password_only() {
        let secret = b"a PKCS#8 document, in a test";
        let pem = seal(secret, b"correct horse").expect("sealed");
        assert!(is_encrypted_cosign_key(&pem));
        assert_eq!(open(&pem, b"correct horse").expect("opened"), secret);
        let wrong = open(&pem, b"wrong").expect_err("wrong password");
        assert!(wrong.contains("password is wrong"), "{wrong}");
    }

    #[test]
    fn weak_costly_or_unknown_derivations_are_refused_before_any_work() {
        let pem = seal(b"k", b"pw").expect("sealed");
        let body = crate::trust::pem_body(&pem, ENCRYPTED_KEY_LABEL).expect("body");
        let sealed: serde_json::Value = serde_json::from_slice(&body).expect("json");
        for (path, value, why) in [
            ("/kdf/params/N", serde_json::json!(1024), "refused"),
            ("/kdf/params/N", serde_json::json!(1u64 << 30), "refused"),
            ("/kdf/params/N", serde_json::json!(40000), "refused"),
            ("/kdf/params/r", serde_json::json!(1), "refused"),
            ("/kdf/params/p", serde_json::json!(64), "refused"),
            ("/kdf/params/N", serde_json::json!(1u64 << 18), "refused"),
            ("/kdf/name", serde_json::json!("pbkdf2"), "scrypt"),
            ("/cipher/name", serde_json::json!("aes-gcm"), "secretbox"),
        ] {
            let mut changed = sealed.clone();
            *changed.pointer_mut(path).expect(path) = value;
            let text = pem_encode(
                LEGACY_ENCRYPTED_KEY_LABEL,
                &serde_json::to_vec(&changed).expect("json"),
            );
            let error = open(&text, b"pw").expect_err(path);
            assert!(error.contains(why), "{path}: {error}");
        }
    }
}
