//! The signal body and its canonical fingerprint: any bytes give a signal or a problem, never a
//! panic; the canonical form is a fixed point (re-parsing it gives the same fingerprint).
#![no_main]

use idem::digest::{canonical_json, Digester};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((value, _signal)) = idem::http::ingest::parse_signal(data) {
        let d = Digester::new(b"fuzz");
        let canonical = canonical_json(&value);
        let again: serde_json::Value =
            serde_json::from_str(&canonical).expect("canonical JSON parses");
        assert_eq!(canonical_json(&again), canonical);
        assert_eq!(d.fingerprint("t", &again), d.fingerprint("t", &value));
    }
});
