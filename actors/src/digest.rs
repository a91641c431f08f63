//! Keyed digests: what idem stores instead of anything a client sent in clear. Idempotency keys,
//! subjects and body fingerprints are all HMAC-SHA-256 under the server's `key_secret`, each with
//! its own domain label, so none can be brute-forced from the data directory without the secret.

use ring::hmac;
use serde_json::Value;

use idem_schemas::canonical::canonical;

/// Computes the keyed digests of one server.
#[derive(Clone)]
pub struct Digester {
    /// HMAC-SHA-256 already keyed with `key_secret`: each digest starts from a copy.
    keyed: hmac::Key,
}

impl std::fmt::Debug for Digester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digester(..)")
    }
}

impl Digester {
    /// A digester keyed with `key_secret`.
    pub fn new(key_secret: &[u8]) -> Self {
        Digester {
            keyed: hmac::Key::new(hmac::HMAC_SHA256, key_secret),
        }
    }

    fn digest(&self, label: &[u8], tenant: &str, data: &[u8]) -> [u8; 32] {
        let mut mac = hmac::Context::with_key(&self.keyed);
        // Lengths make the concatenation unambiguous.
        mac.update(label);
        mac.update(&(tenant.len() as u64).to_be_bytes());
        mac.update(tenant.as_bytes());
        mac.update(data);
        let mut digest = [0; 32];
        digest.copy_from_slice(mac.sign().as_ref());
        digest
    }

    /// The digest a claim is known by.
    pub fn key(&self, tenant: &str, key: &str) -> [u8; 32] {
        self.digest(b"idem/key/v1", tenant, key.as_bytes())
    }

    /// The claim of a bulk redelivery's idempotency key: a domain of its own, so the same key
    /// on a signal and on a bulk request are two claims.
    pub fn bulk_key(&self, tenant: &str, key: &str) -> [u8; 32] {
        self.digest(b"idem/bulk-key/v1", tenant, key.as_bytes())
    }

    /// The digest a subject's claim is known by (a playbook decided once per subject): the
    /// signal type and the subject.
    pub fn subject_claim(&self, tenant: &str, signal_type: &str, subject: &str) -> [u8; 32] {
        // The type's length makes (type, subject) unambiguous.
        let data = [
            &(signal_type.len() as u64).to_be_bytes()[..],
            signal_type.as_bytes(),
            subject.as_bytes(),
        ]
        .concat();
        self.digest(b"idem/subject-claim/v1", tenant, &data)
    }

    /// The claim of a source's event, known by the provider's event id: a domain of its own,
    /// so an event id and an idempotency key with the same text are two claims.
    pub fn source_event(&self, tenant: &str, source: &str, event_id: &str) -> [u8; 32] {
        // The source's length makes (source, event id) unambiguous.
        let data = [
            &(source.len() as u64).to_be_bytes()[..],
            source.as_bytes(),
            event_id.as_bytes(),
        ]
        .concat();
        self.digest(b"idem/source-event/v1", tenant, &data)
    }

    /// The `subject_hash` of a subject (hex).
    pub fn subject(&self, tenant: &str, subject: &str) -> String {
        idem_schemas::lower_hex(&self.subject_bytes(tenant, subject))
    }

    /// The digest behind a subject's `subject_hash`.
    pub fn subject_bytes(&self, tenant: &str, subject: &str) -> [u8; 32] {
        self.digest(b"idem/subject/v1", tenant, subject.as_bytes())
    }

    /// A key for `purpose` (a domain of its own), derived from `key_secret`: the same on every
    /// node that shares the secret, and no digest's.
    pub fn derived_key(&self, purpose: &[u8]) -> [u8; 32] {
        self.digest(purpose, "", &[])
    }

    /// The fingerprint of a request body: of its RFC 8785 canonical form, so a retry that
    /// re-serialises with another member order, whitespace, escapes or number spelling is the
    /// same payload. (`v1` was over serde_json's `to_string`.)
    pub fn fingerprint(&self, tenant: &str, body: &Value) -> [u8; 32] {
        self.digest(b"idem/body/v2", tenant, canonical(body).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // An independent HMAC implementation: the digests are plain HMAC-SHA-256.
    use ::hmac::{Hmac, Mac};
    use sha2::Sha256;

    use idem_schemas::canonical::parse;

    fn json(text: &str) -> Value {
        match parse(text.as_bytes()) {
            Ok(v) => v,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn fingerprint_ignores_order_and_whitespace() {
        let a = json(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#);
        let b = json("{ \"a\" : {\"x\":\"s\", \"y\":[1, 2]},\n \"b\":1 }");
        assert_eq!(canonical(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        let d = Digester::new(b"secret");
        assert_eq!(d.fingerprint("acme", &a), d.fingerprint("acme", &b));
        let c = json(r#"{"b":2,"a":{"y":[1,2],"x":"s"}}"#);
        assert_ne!(d.fingerprint("acme", &a), d.fingerprint("acme", &c));
    }

    #[test]
    fn fingerprint_ignores_number_and_string_spelling() {
        let d = Digester::new(b"secret");
        let one = d.fingerprint("acme", &json(r#"{"n":1,"s":"a"}"#));
        assert_eq!(d.fingerprint("acme", &json(r#"{"n":1.0,"s":"a"}"#)), one);
        assert_eq!(
            d.fingerprint("acme", &json(r#"{"n":1e0,"s":"\u0061"}"#)),
            one
        );
        assert_ne!(d.fingerprint("acme", &json(r#"{"n":1.5,"s":"a"}"#)), one);
        assert_ne!(d.fingerprint("acme", &json(r#"{"n":"1","s":"a"}"#)), one);
    }

    #[test]
    fn fingerprint_is_hmac_of_the_canonical_form() {
        let body = json(r#"{"b":[1.0,"\u00e9"],"a":null}"#);
        let mut fresh = Hmac::<Sha256>::new_from_slice(b"secret").expect("hmac");
        fresh.update(b"idem/body/v2");
        fresh.update(&4u64.to_be_bytes());
        fresh.update(b"acme");
        fresh.update("{\"a\":null,\"b\":[1,\"é\"]}".as_bytes());
        let expected: [u8; 32] = fresh.finalize().into_bytes().into();
        assert_eq!(
            Digester::new(b"secret").fingerprint("acme", &body),
            expected
        );
    }

    #[test]
    fn canonical_form_is_a_fixed_point_for_floats() {
        // Found by the signal_body fuzz target: without correctly rounded float parsing, a body
        // re-serialised from its canonical form had another fingerprint (a retry seen as reuse).
        let v = json(r#"{"m":{"big":93333333300000000000000000000003246680448946580146,"x":0.1}}"#);
        let canonical_text = canonical(&v);
        assert_eq!(canonical_text, r#"{"m":{"big":9.33333333e+49,"x":0.1}}"#);
        let again = json(&canonical_text);
        assert_eq!(canonical(&again), canonical_text);
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
        assert_ne!(
            idem_schemas::lower_hex(&d.key("acme", "k1")),
            d.subject("acme", "k1")
        );
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
