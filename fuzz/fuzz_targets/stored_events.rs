//! The stored-event decoder: a corrupt record gives an error, never a panic or a wrong state;
//! whatever decodes folds through the state machines without panicking.
#![no_main]

use idem_actors::claim::phase::Phase;
use idem_actors::codec;
use idem_actors::delivery::DeliveryState;
use idem_schemas::{ClaimEvent, DeliveryEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A log is records separated by 0xFF 0x00 (any split will do).
    let records: Vec<&[u8]> = data.split(|b| *b == 0xff).collect();
    let claims: Vec<ClaimEvent> = records
        .iter()
        .filter_map(|r| codec::decode(r).ok())
        .collect();
    let mut phase = Phase::Free;
    for event in claims {
        match phase.clone().apply(event) {
            Ok(next) => phase = next,
            Err(_) => break,
        }
    }
    let deliveries: Vec<DeliveryEvent> = records
        .iter()
        .filter_map(|r| codec::decode(r).ok())
        .collect();
    let _ = DeliveryState::fold(deliveries);
    // Encoding what decoded gives the same bytes back.
    for r in &records {
        if let Ok(event) = codec::decode::<ClaimEvent>(r) {
            assert_eq!(
                codec::decode::<ClaimEvent>(&codec::encode(&event).expect("encode")).ok(),
                Some(event)
            );
        }
    }
});
