//! SHA-256 digests and the one hex form every file and message of the host writes them in
//! (the lock file, compiled-cache entries, generated tokens, catalog revisions).

use sha2::Digest;

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// `bytes` in lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// The first eight bytes of the SHA-256 of `bytes`, as a number (a revision, not a secret).
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn sha256_u64(bytes: &[u8]) -> u64 {
    let digest = sha256(bytes);
    u64::from_le_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ])
}

/// The SHA-256 of `bytes`, in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256(bytes))
}

#[cfg(test)]
mod tests {
    #[test]
    fn digests_are_lower_case_hex() {
        assert_eq!(super::hex(&[0x00, 0xab, 0x7f]), "00ab7f");
        assert_eq!(
            super::sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
