//! Keyed digests: what idem stores instead of anything a client sent in clear. Idempotency keys,
//! subjects and body fingerprints are all HMAC-SHA-256 under the server's `key_secret`, each with
//! its own domain label, so none can be brute-forced from the data directory without the secret.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// Computes the keyed digests of one server.
#[derive(Clone)]
pub struct Digester {
    /// HMAC-SHA-256 already keyed with `key_secret`: each digest starts from a copy.
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for Digester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digester(..)")
    }
}

impl Digester {
    /// A digester keyed with `key_secret`.
    pub fn new(key_secret: &[u8]) -> Self {
        let keyed = match Hmac::<Sha256>::new_from_slice(key_secret) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        Digester { keyed }
    }

    fn digest(&self, label: &[u8], tenant: &str, data: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        // Lengths make the concatenation unambiguous.
        mac.update(label);
        mac.update(&(tenant.len() as u64).to_be_bytes());
        mac.update(tenant.as_bytes());
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// The digest a claim is known by.
    pub fn key(&self, tenant: &str, key: &str) -> [u8; 32] {
        self.digest(b"idem/key/v1", tenant, key.as_bytes())
    }

    /// The `subject_hash` of a subject (hex).
    pub fn subject(&self, tenant: &str, subject: &str) -> String {
        hex::encode(self.digest(b"idem/subject/v1", tenant, subject.as_bytes()))
    }

    /// The fingerprint of a request body: of its canonical JSON, so a retry that re-serialises
    /// with another key order or whitespace is the same payload.
    pub fn fingerprint(&self, tenant: &str, body: &Value) -> [u8; 32] {
        self.digest(b"idem/body/v1", tenant, canonical_json(body).as_bytes())
    }
}

/// JSON with object keys sorted and no insignificant whitespace. (serde_json's map is ordered
/// by key, so serialising the parsed value is canonical.)
pub fn canonical_json(v: &Value) -> String {
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_ignores_order_and_whitespace() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).expect("json");
        let b: Value = serde_json::from_str("{ \"a\" : {\"x\":\"s\", \"y\":[1, 2]},\n \"b\":1 }")
            .expect("json");
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        let d = Digester::new(b"secret");
        assert_eq!(d.fingerprint("acme", &a), d.fingerprint("acme", &b));
        let c: Value = serde_json::from_str(r#"{"b":2,"a":{"y":[1,2],"x":"s"}}"#).expect("json");
        assert_ne!(d.fingerprint("acme", &a), d.fingerprint("acme", &c));
    }

    #[test]
    fn canonical_form_is_a_fixed_point_for_floats() {
        // Found by the signal_body fuzz target: without correctly rounded float parsing, a body
        // re-serialised from its canonical form had another fingerprint (a retry seen as reuse).
        let v: Value = serde_json::from_str(
            r#"{"m":{"big":93333333300000000000000000000003246680448946580146,"x":0.1}}"#,
        )
        .expect("json");
        let canonical = canonical_json(&v);
        let again: Value = serde_json::from_str(&canonical).expect("json");
        assert_eq!(canonical_json(&again), canonical);
        let d = Digester::new(b"secret");
        assert_eq!(d.fingerprint("t", &again), d.fingerprint("t", &v));
    }

    #[test]
    fn digests_depend_on_secret_tenant_and_label() {
        let d = Digester::new(b"secret");
        assert_ne!(
            d.key("acme", "k1"),
            Digester::new(b"other").key("acme", "k1")
        );
        assert_ne!(d.key("acme", "k1"), d.key("beta", "k1"));
        assert_ne!(hex::encode(d.key("acme", "k1")), d.subject("acme", "k1"));
        assert_eq!(d.key("acme", "k1"), d.key("acme", "k1"));
        // The definition the stored claims depend on: HMAC-SHA-256 under the secret of the
        // label, the tenant's length and name, and the data.
        let mut fresh = Hmac::<Sha256>::new_from_slice(b"secret").expect("hmac");
        fresh.update(b"idem/key/v1");
        fresh.update(&4u64.to_be_bytes());
        fresh.update(b"acme");
        fresh.update(b"k1");
        let expected: [u8; 32] = fresh.finalize().into_bytes().into();
        assert_eq!(d.key("acme", "k1"), expected);
    }
}
