//! The signal body and its canonical fingerprint: any bytes give a signal or a problem, never a
//! panic; the canonical form is a fixed point (re-parsing it gives the same fingerprint).
#![no_main]

use idem::canonical::{canonical, parse};
use idem::digest::Digester;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((value, _signal)) = idem::http::ingest::parse_signal(data) {
        let d = Digester::new(b"fuzz");
        let canonical_text = canonical(&value);
        let again = parse(canonical_text.as_bytes()).expect("canonical JSON parses");
        assert_eq!(canonical(&again), canonical_text);
        assert_eq!(d.fingerprint("t", &again), d.fingerprint("t", &value));
    }
});
