//! Standard Webhooks verification with hostile headers: any id, timestamp and signature header
//! give Ok or an error, never a panic; a signature made by `sign` always verifies.
#![no_main]

use idem_schemas::signature::{verify, Secret};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(4, '\n');
    let (id, ts, sig, body) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
    let _ = verify(
        std::slice::from_ref(&secret),
        id,
        ts,
        sig,
        body.as_bytes(),
        1_614_265_330,
        300,
    );
    let _ = Secret::parse(sig);
    let good = secret.sign(id, 1_614_265_330, body.as_bytes());
    assert_eq!(
        verify(
            &[secret],
            id,
            "1614265330",
            &format!("{sig} {good}"),
            body.as_bytes(),
            1_614_265_330,
            300
        ),
        Ok(())
    );
});
