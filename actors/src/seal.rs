//! Sealing what idem must keep but not in clear (a Security Event Token, which names its
//! subject; a push stream's `authorization_header`): AES-256-GCM under a key of its own owner
//! (the delivery, the stream), derived from a key that is derived from `key_secret`, with a
//! random nonce, and bound to that owner by its associated data too, so a sealed value moved to
//! another record does not open. A key per owner seals a handful of values, far from the number
//! of random nonces one AES-GCM key may take. What must become unreadable later (a SET, once its
//! delivery ends) is sealed under a fresh random key instead, itself kept sealed for the owner:
//! erasing that one small record erases the value wherever its bytes are (crypto-shredding).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// A sealed value that does not open: another key, another record, or altered.
#[derive(Debug, thiserror::Error)]
#[error("a sealed value does not open under this key_secret")]
pub struct Unsealable;

/// Seals and opens under the keys one key derives.
pub struct Sealer {
    keyed: hmac::Key,
    rng: SystemRandom,
}

impl Sealer {
    /// A sealer under `key`.
    pub fn new(key: [u8; 32]) -> Sealer {
        Sealer {
            keyed: hmac::Key::new(hmac::HMAC_SHA256, &key),
            rng: SystemRandom::new(),
        }
    }

    /// `owner`'s own key.
    fn key(&self, owner: &[u8]) -> LessSafeKey {
        let mut key = [0; 32];
        key.copy_from_slice(hmac::sign(&self.keyed, owner).as_ref());
        aead_key(&key)
    }

    /// `plain` sealed for `owner`: nonce ‖ ciphertext ‖ tag.
    pub fn seal(&self, owner: &[u8], plain: &[u8]) -> Result<Vec<u8>, Unsealable> {
        self.seal_with(&self.key(owner), owner, plain)
    }

    /// What [`Sealer::seal`] sealed for `owner`.
    pub fn open(&self, owner: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Unsealable> {
        open_with(&self.key(owner), owner, sealed)
    }

    /// A new random key, for a value that must become unreadable once that key is erased (see
    /// [`Sealer::seal_under`]); it is kept sealed for the same owner by [`Sealer::seal`].
    pub fn fresh_key(&self) -> Result<[u8; 32], Unsealable> {
        let mut key = [0u8; 32];
        self.rng.fill(&mut key).map_err(|_| Unsealable)?;
        Ok(key)
    }

    /// `plain` sealed for `owner` under `key` rather than the owner's derived key.
    pub fn seal_under(
        &self,
        key: &[u8; 32],
        owner: &[u8],
        plain: &[u8],
    ) -> Result<Vec<u8>, Unsealable> {
        self.seal_with(&aead_key(key), owner, plain)
    }

    /// What [`Sealer::seal_under`] sealed for `owner` under `key`.
    pub fn open_under(
        &self,
        key: &[u8; 32],
        owner: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, Unsealable> {
        open_with(&aead_key(key), owner, sealed)
    }

    fn seal_with(
        &self,
        key: &LessSafeKey,
        owner: &[u8],
        plain: &[u8],
    ) -> Result<Vec<u8>, Unsealable> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| Unsealable)?;
        let mut out = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(owner),
            &mut out,
        )
        .map_err(|_| Unsealable)?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        Ok(sealed)
    }
}

fn aead_key(key: &[u8; 32]) -> LessSafeKey {
    match UnboundKey::new(&AES_256_GCM, key) {
        Ok(key) => LessSafeKey::new(key),
        Err(_) => unreachable!("AES-256-GCM takes a 32-byte key"),
    }
}

fn open_with(key: &LessSafeKey, owner: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Unsealable> {
    let (nonce, rest) = sealed.split_at_checked(NONCE_LEN).ok_or(Unsealable)?;
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unsealable)?;
    let mut buffer = rest.to_vec();
    let plain = key
        .open_in_place(nonce, Aad::from(owner), &mut buffer)
        .map_err(|_| Unsealable)?;
    Ok(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_for_its_owner_only() {
        let sealer = Sealer::new([7; 32]);
        let sealed = sealer.seal(b"acme/st_1", b"Bearer abc").expect("seal");
        assert!(!sealed.windows(10).any(|w| w == b"Bearer abc"));
        assert_eq!(
            sealer.open(b"acme/st_1", &sealed).expect("open"),
            b"Bearer abc"
        );
        assert!(sealer.open(b"acme/st_2", &sealed).is_err());
        assert!(Sealer::new([8; 32]).open(b"acme/st_1", &sealed).is_err());
        let mut altered = sealed.clone();
        altered[NONCE_LEN] ^= 1;
        assert!(sealer.open(b"acme/st_1", &altered).is_err());
        // Two seals of one value differ (a nonce each).
        assert_ne!(sealer.seal(b"o", b"v").ok(), sealer.seal(b"o", b"v").ok());
    }

    #[test]
    fn a_value_under_a_fresh_key_opens_with_that_key_only() {
        let sealer = Sealer::new([7; 32]);
        let key = sealer.fresh_key().expect("key");
        assert_ne!(Some(key), sealer.fresh_key().ok());
        let sealed = sealer.seal_under(&key, b"msg_1", b"a SET").expect("seal");
        assert_eq!(
            sealer.open_under(&key, b"msg_1", &sealed).expect("open"),
            b"a SET"
        );
        assert!(
            sealer.open(b"msg_1", &sealed).is_err(),
            "not the derived key"
        );
        assert!(sealer.open_under(&key, b"msg_2", &sealed).is_err());
        let other = sealer.fresh_key().expect("key");
        assert!(sealer.open_under(&other, b"msg_1", &sealed).is_err());
    }
}
