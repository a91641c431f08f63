//! The Idempotency-Key header: any bytes give a key or an error, never a panic; an accepted key
//! is 1–255 visible ASCII characters, and its bare form parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = idem::key::parse_value(data) {
        assert!((1..=255).contains(&key.len()));
        assert!(key.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        if !key.starts_with('"') {
            assert_eq!(
                idem::key::parse_value(key.as_bytes()).as_deref(),
                Ok(key.as_str())
            );
        }
    }
});
