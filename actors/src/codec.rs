//! The one place stored records are encoded and decoded. A record is a format-version byte
//! followed by the bincode 2 (serde) encoding of the event. Decoding checks the version and
//! bounds allocation, so a corrupt or foreign record is an error, never a panic or a wrong state.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The version byte written in front of every record (3: ids and digests stored as bytes; 4: a
/// claim names its subject's claim; 5: a decision names its source; 6: a decision, its
/// response, its deliveries and its kept record name the trace it was made in; 7: a decision
/// and its kept record name the rule that decided and the rules that failed).
pub const FORMAT_VERSION: u8 = 7;

/// An older version still read: its records are version 6's with no trace field, read as
/// absent (see `idem_schemas::trace::before_traces`).
const BEFORE_TRACES: u8 = 5;

/// An older version still read: its records are this version's with no rule fields, read as
/// absent (see `idem_schemas::stored::before_rules`).
const BEFORE_RULES: u8 = 6;

/// No stored record is larger than this; a length prefix claiming more is corruption.
const MAX_RECORD: usize = 4 * 1024 * 1024;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_RECORD>()
}

/// Why a record could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The record is empty.
    #[error("empty record")]
    Empty,
    /// The record was written by an unknown format version.
    #[error("unknown record format version {0}")]
    Version(u8),
    /// The bytes after the version do not decode.
    #[error("corrupt record: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// Bytes follow the decoded record.
    #[error("corrupt record: {0} trailing bytes")]
    Trailing(usize),
    /// An entry ends inside a record's length or bytes.
    #[error("corrupt entry: cut short")]
    Cut,
    /// The value could not be encoded.
    #[error("cannot encode record: {0}")]
    Encode(#[from] bincode::error::EncodeError),
}

/// Encodes `value` as a versioned record.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(RECORD_CAPACITY);
    encode_into(value, &mut out)?;
    Ok(out)
}

/// What a record is given room for before it is written: most fit, so few grow.
const RECORD_CAPACITY: usize = 256;

/// Appends `value`'s versioned record to `out`.
fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.push(FORMAT_VERSION);
    bincode::serde::encode_into_std_write(value, out, config())?;
    Ok(())
}

/// Decodes a versioned record written by [`encode`].
pub fn decode<T: DeserializeOwned>(record: &[u8]) -> Result<T, CodecError> {
    let (&version, payload) = record.split_first().ok_or(CodecError::Empty)?;
    let (value, read) = match version {
        FORMAT_VERSION => bincode::serde::decode_from_slice(payload, config())?,
        BEFORE_RULES => idem_schemas::stored::before_rules(|| {
            bincode::serde::decode_from_slice(payload, config())
        })?,
        BEFORE_TRACES => idem_schemas::trace::before_traces(|| {
            idem_schemas::stored::before_rules(|| {
                bincode::serde::decode_from_slice(payload, config())
            })
        })?,
        _ => return Err(CodecError::Version(version)),
    };
    if read != payload.len() {
        return Err(CodecError::Trailing(payload.len() - read));
    }
    Ok(value)
}

/// Several records as one entry, `(u32 length ‖ record)*`: what one write appends to a log.
pub fn encode_entry<T: Serialize>(values: &[T]) -> Result<Vec<u8>, CodecError> {
    let mut entry = Vec::with_capacity(values.len() * RECORD_CAPACITY);
    for value in values {
        let at = entry.len();
        entry.extend_from_slice(&[0; 4]);
        encode_into(value, &mut entry)?;
        let len = (entry.len() - at - 4) as u32;
        entry[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(entry)
}

/// The records of an entry written by [`encode_entry`], decoded.
pub fn decode_entry<T: DeserializeOwned>(entry: &[u8]) -> Result<Vec<T>, CodecError> {
    let mut values = Vec::new();
    let mut rest = entry;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or(CodecError::Cut)?;
        let (record, tail) = tail
            .split_at_checked(u32::from_be_bytes(*len) as usize)
            .ok_or(CodecError::Cut)?;
        values.push(decode(record)?);
        rest = tail;
    }
    Ok(values)
}

/// The first record of an entry written by [`encode_entry`], decoded, if it has one.
pub fn decode_first<T: DeserializeOwned>(entry: &[u8]) -> Result<Option<T>, CodecError> {
    let Some((len, tail)) = entry.split_first_chunk::<4>() else {
        return Ok(None);
    };
    let record = tail
        .get(..u32::from_be_bytes(*len) as usize)
        .ok_or(CodecError::Cut)?;
    Ok(Some(decode(record)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::{ClaimEvent, StoredResponse};

    fn sample() -> ClaimEvent {
        ClaimEvent::Dispatched {
            outcomes: vec![],
            response: StoredResponse {
                status: 201,
                body: b"{\"decision_id\":\"dec_1\"}".to_vec(),
                trace: idem_schemas::TraceContext::parse(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                ),
            },
        }
    }

    #[test]
    fn a_body_is_stored_as_the_list_of_bytes_it_always_was() {
        // Bodies are (de)serialised as bytes: the same encoding as a list of bytes, so records
        // written either way read either way.
        let body = b"{\"decision_id\":\"dec_1\"}".to_vec();
        let as_list = bincode::serde::encode_to_vec(&body, config()).expect("encode");
        let as_bytes = bincode::serde::encode_to_vec(serde_bytes::Bytes::new(&body), config())
            .expect("encode");
        assert_eq!(as_list, as_bytes);
    }

    #[test]
    fn round_trips() {
        let bytes = encode(&sample()).expect("encode");
        assert_eq!(bytes[0], FORMAT_VERSION);
        let back: ClaimEvent = decode(&bytes).expect("decode");
        assert_eq!(back, sample());
    }

    #[test]
    fn ids_and_digests_read_back_whatever_their_shape() {
        let outcome = |id: &str| idem_schemas::ActionOutcome {
            delivery_id: id.to_string(),
            status: idem_schemas::ActionStatus::Delivered,
            attempt: idem_schemas::AttemptRecord {
                at_ms: 1,
                code: Some(200),
                error: None,
                latency_ms: 2,
                retry_after_ms: None,
            },
        };
        let made = "msg_0193a1b2c3d47000ab12cd34ef56ab78";
        for id in [
            made,
            "msg_0193A1",
            "msg_",
            "msg_abc",
            "whatever",
            "",
            "dec_00",
            "ff",
        ] {
            let bytes = encode(&outcome(id)).expect("encode");
            let back: idem_schemas::ActionOutcome = decode(&bytes).expect("decode");
            assert_eq!(back, outcome(id), "{id:?}");
        }
        // An id idem made is stored as its 16 bytes, not its 36 characters.
        let text = encode(&outcome("whatever_0193a1b2c3d47000ab12cd34ef")).expect("encode");
        let packed = encode(&outcome(made)).expect("encode");
        assert!(
            packed.len() + 12 < text.len(),
            "{} vs {}",
            packed.len(),
            text.len()
        );
    }

    #[test]
    fn refuses_corruption_without_panicking() {
        let bytes = encode(&sample()).expect("encode");
        assert!(matches!(decode::<ClaimEvent>(&[]), Err(CodecError::Empty)));
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(matches!(
            decode::<ClaimEvent>(&other),
            Err(CodecError::Version(9))
        ));
        assert!(decode::<ClaimEvent>(&bytes[..bytes.len() - 3]).is_err());
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(matches!(
            decode::<ClaimEvent>(&trailing),
            Err(CodecError::Trailing(1))
        ));
        // Every truncation and every single-byte flip decodes to an error or to some value, never
        // a panic; a huge length prefix is refused by the limit instead of allocated.
        for cut in 0..bytes.len() {
            let _ = decode::<ClaimEvent>(&bytes[..cut]);
        }
        for i in 1..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0xff;
            let _ = decode::<ClaimEvent>(&flipped);
        }
        let huge = [
            FORMAT_VERSION,
            2,
            0xfd,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x7f,
        ];
        assert!(decode::<ClaimEvent>(&huge).is_err());
    }

    /// Records as an idem of codec version 5 wrote them (a claim, its recovery point, a
    /// delivery's creation, a kept decision), before trace contexts.
    const VERSION_5: [&str; 4] = [
        "050007070707070707070707070707070707070707070707070707070707070707072afd0068e5cf8b010000fd00c40bd58b01000000011000112233445566778899aabbccddeeff0461636d650873696d5f7377617001046f6b746101000020ababababababababababababababababababababababababababababababababfd0068e5cf8b010000010002100123456789abcdef0123456789abcdef0c6c6f636b5f6163636f756e741a687474703a2f2f3132372e302e302e313a393030302f6c6f636b187b2274797065223a226465636973696f6e2e6d616465227d010909090909090909090909090909090909090909090909090909090909090909fb60ea",
        "0501010002100123456789abcdef0123456789abcdef01fd0168e5cf8b01000001fbf701000301fbe803c9177b226465636973696f6e5f6964223a226465635f31227d",
        "05000002100123456789abcdef0123456789abcdef0461636d6500011000112233445566778899aabbccddeeff0c6c6f636b5f6163636f756e741a687474703a2f2f3132372e302e302e313a393030302f6c6f636b187b2274797065223a226465636973696f6e2e6d616465227dfd0068e5cf8b010000fd00c40bd58b010000",
        "0500011000112233445566778899aabbccddeeff0461636d650873696d5f7377617001046f6b746101000020ababababababababababababababababababababababababababababababababfd0068e5cf8b010000fd00c40bd58b010000010c6c6f636b5f6163636f756e740002100123456789abcdef0123456789abcdef",
    ];

    #[test]
    fn records_from_before_traces_read_as_they_were_written() {
        use idem_schemas::*;
        let decision = Decision {
            id: "dec_00112233445566778899aabbccddeeff".into(),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            source: Some("okta".into()),
            verdict: Verdict::Deny,
            subject_hash: "ab".repeat(32),
            created_at_ms: 1_700_000_000_000,
            deliveries: vec![PlannedDelivery {
                id: "msg_0123456789abcdef0123456789abcdef".into(),
                action: "lock_account".into(),
                url: "http://127.0.0.1:9000/lock".into(),
                body: b"{\"type\":\"decision.made\"}".to_vec(),
                key: None,
                token: None,
            }],
            trace: None,
            rule: None,
            rule_errors: Vec::new(),
        };
        let claimed = ClaimEvent::Claimed(Claim {
            fingerprint: [7; 32],
            holder: 42,
            claimed_at_ms: 1_700_000_000_000,
            expires_at_ms: 1_700_086_400_000,
            decision: decision.clone(),
            subject: Some(SubjectLink {
                digest: [9; 32],
                window_ms: 60_000,
            }),
        });
        let dispatched = ClaimEvent::Dispatched {
            outcomes: vec![ActionOutcome {
                delivery_id: "msg_0123456789abcdef0123456789abcdef".into(),
                status: ActionStatus::Queued,
                attempt: AttemptRecord {
                    at_ms: 1_700_000_000_001,
                    code: Some(503),
                    error: None,
                    latency_ms: 3,
                    retry_after_ms: Some(1000),
                },
            }],
            response: StoredResponse {
                status: 201,
                body: b"{\"decision_id\":\"dec_1\"}".to_vec(),
                trace: None,
            },
        };
        let created = DeliveryEvent::Created(DeliveryRecord {
            id: "msg_0123456789abcdef0123456789abcdef".into(),
            tenant: "acme".into(),
            decision_id: "dec_00112233445566778899aabbccddeeff".into(),
            action: "lock_account".into(),
            url: "http://127.0.0.1:9000/lock".into(),
            body: b"{\"type\":\"decision.made\"}".to_vec(),
            created_at_ms: 1_700_000_000_000,
            expires_at_ms: 1_700_086_400_000,
            trace: None,
        });
        let record = DecisionRecord::kept_for(&decision, std::time::Duration::from_secs(86_400));
        let bytes: Vec<Vec<u8>> = VERSION_5
            .iter()
            .map(|h| idem_schemas::hex::decode_lower(h).expect("hex"))
            .collect();
        assert_eq!(decode::<ClaimEvent>(&bytes[0]).expect("claimed"), claimed);
        assert_eq!(
            decode::<ClaimEvent>(&bytes[1]).expect("dispatched"),
            dispatched
        );
        assert_eq!(
            decode::<DeliveryEvent>(&bytes[2]).expect("created"),
            created
        );
        assert_eq!(decode::<DecisionRecord>(&bytes[3]).expect("kept"), record);
        // Read as this version's, the same bytes are cut short: a trace field is read.
        let mut now = bytes[0].clone();
        now[0] = FORMAT_VERSION;
        assert!(decode::<ClaimEvent>(&now).is_err());
        // And a record of this version keeps its trace.
        let traced = sample();
        assert_eq!(
            decode::<ClaimEvent>(&encode(&traced).expect("encode")).expect("decode"),
            traced
        );
    }

    #[test]
    fn records_from_before_rules_read_with_no_rule() {
        use idem_schemas::*;
        let decision = Decision {
            id: "dec_00112233445566778899aabbccddeeff".into(),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            source: None,
            verdict: Verdict::Review,
            subject_hash: "ab".repeat(32),
            created_at_ms: 1_700_000_000_000,
            deliveries: Vec::new(),
            trace: TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            rule: None,
            rule_errors: Vec::new(),
        };
        // A version 6 record is this version's less the two rule fields, which close a decision
        // and its kept record: `None` and an empty list, a zero byte each.
        let without_rules = |record: Vec<u8>, end: usize| {
            assert_eq!(&record[end - 2..end], [0, 0]);
            let mut old = [&record[..end - 2], &record[end..]].concat();
            old[0] = BEFORE_RULES;
            old
        };
        let own = encode(&decision).expect("encode")[1..].to_vec();
        let claimed = ClaimEvent::Claimed(Claim {
            fingerprint: [7; 32],
            holder: 42,
            claimed_at_ms: 1_700_000_000_000,
            expires_at_ms: 1_700_086_400_000,
            decision: decision.clone(),
            subject: Some(SubjectLink {
                digest: [9; 32],
                window_ms: 60_000,
            }),
        });
        let bytes = encode(&claimed).expect("encode");
        let at = bytes.windows(own.len()).position(|w| w == own);
        let old = without_rules(bytes, at.expect("the decision's bytes") + own.len());
        assert_eq!(decode::<ClaimEvent>(&old).expect("claimed"), claimed);
        let record = DecisionRecord::kept_for(&decision, std::time::Duration::from_secs(60));
        let kept = encode(&record).expect("encode");
        let old = without_rules(kept.clone(), kept.len());
        assert_eq!(decode::<DecisionRecord>(&old).expect("kept"), record);
        // A record of this version keeps its rule and failures.
        let ruled = DecisionRecord {
            rule: Some("high-risk".into()),
            rule_errors: vec![RuleError {
                rule: "recent".into(),
                message: "No such key: risk".into(),
            }],
            ..record
        };
        assert_eq!(
            decode::<DecisionRecord>(&encode(&ruled).expect("encode")).expect("decode"),
            ruled
        );
    }
}
