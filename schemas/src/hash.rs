//! SHA-256, and HMAC over SHA-256 (and SHA-1, for Twilio's scheme), on ring: the one crypto
//! library idem uses. What signs or digests on every request keeps its key's schedule instead
//! (`signature::Secret`, the engine's digests and sealer).

use ring::{digest, hmac};

/// The SHA-256 digest of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// HMAC-SHA-256 under `key` of the concatenation of `parts`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(mac(hmac::HMAC_SHA256, key, parts).as_ref());
    out
}

/// HMAC-SHA-1 under `key` of the concatenation of `parts` (Twilio signs with it).
pub fn hmac_sha1(key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
    let mut out = [0; 20];
    out.copy_from_slice(mac(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key, parts).as_ref());
    out
}

fn mac(algorithm: hmac::Algorithm, key: &[u8], parts: &[&[u8]]) -> hmac::Tag {
    let mut context = hmac::Context::with_key(&hmac::Key::new(algorithm, key));
    for part in parts {
        context.update(part);
    }
    context.sign()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231's test case 2 and FIPS 180-2's "abc".
    #[test]
    fn match_the_published_vectors() {
        assert_eq!(
            crate::lower_hex(&hmac_sha256(
                b"Jefe",
                &[b"what do ya want ", b"for nothing?"]
            )),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            crate::lower_hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // RFC 2202's test case 2.
        assert_eq!(
            crate::lower_hex(&hmac_sha1(b"Jefe", &[b"what do ya want for nothing?"])),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
    }
}
