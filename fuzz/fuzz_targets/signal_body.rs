//! The signal body and its canonical form: any bytes give a signal or a problem, never a panic;
//! the canonical form is a fixed point (re-parsing it gives the same bytes, so the same
//! fingerprint, which is a keyed digest of exactly those bytes).
#![no_main]

use idem_schemas::canonical::{canonical, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((value, _signal)) = idem::http::ingest::parse_signal(data) {
        let canonical_text = canonical(&value);
        let again = parse(canonical_text.as_bytes()).expect("canonical JSON parses");
        assert_eq!(canonical(&again), canonical_text);
    }
});
