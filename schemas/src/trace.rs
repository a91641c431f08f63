//! W3C Trace Context (`traceparent`), with no I/O: the trace a decision was made in, kept with
//! it so that every attempt of its callbacks, made later, after a crash or by another node,
//! belongs to that trace. A context is parsed from a request's header and written into each
//! attempt's; it holds ids only (a trace id, a span id and the sampled flag), never anything of
//! the request it came with. `tracestate` is not kept: it is vendor data of any content, and the
//! store holds ids and digests only.
//!
//! Records written before trace contexts (codec version 5) have no field for one: while such a
//! record is decoded ([`before_traces`]), every trace field reads as absent without consuming a
//! byte, so those records read as they always did.

use std::cell::Cell;

use serde::{Deserialize, Deserializer, Serialize};

use crate::hex;

/// A span of a trace, as a `traceparent` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceContext {
    /// The trace's id (never all zeros).
    pub trace_id: [u8; 16],
    /// The span's id (never all zeros).
    pub span_id: [u8; 8],
    /// The trace flags; bit 0 is `sampled`.
    pub flags: u8,
}

impl TraceContext {
    /// The context a `traceparent` header names, if it is one (W3C Trace Context, version 00,
    /// or a later version read as 00 names it); `None` for anything else, which a receiver
    /// ignores as if no header had come.
    pub fn parse(header: &str) -> Option<TraceContext> {
        let b = header.as_bytes();
        // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex::decode_lower(&header[0..2])?;
        match version[0] {
            0xff => return None,
            0 if b.len() != 55 => return None,
            // A later version may add fields, after a `-`.
            _ if b.len() > 55 && b[55] != b'-' => return None,
            _ => {}
        }
        let trace_id: [u8; 16] = hex::decode_lower(&header[3..35])?.try_into().ok()?;
        let span_id: [u8; 8] = hex::decode_lower(&header[36..52])?.try_into().ok()?;
        let flags = hex::decode_lower(&header[53..55])?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags,
        })
    }

    /// Its `traceparent` header value (version 00).
    pub fn traceparent(&self) -> String {
        let mut text = String::with_capacity(55);
        text.push_str("00-");
        hex::push_lower_hex(&mut text, &self.trace_id);
        text.push('-');
        hex::push_lower_hex(&mut text, &self.span_id);
        text.push('-');
        hex::push_lower_hex(&mut text, &[self.flags]);
        text
    }

    /// The trace's id in lowercase hex, as trace viewers show it.
    pub fn trace_id_hex(&self) -> String {
        hex::lower_hex(&self.trace_id)
    }

    /// Whether the trace is sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

thread_local! {
    static BEFORE_TRACES: Cell<bool> = const { Cell::new(false) };
}

/// Runs `decode` (the decoding of one record written before trace contexts) with every trace
/// field read as absent.
pub fn before_traces<R>(decode: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BEFORE_TRACES.set(false);
        }
    }
    BEFORE_TRACES.set(true);
    let _reset = Reset;
    decode()
}

/// A stored record's trace field (serde `deserialize_with`): absent in a record written before
/// trace contexts, read as written otherwise.
pub fn stored_field<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TraceContext>, D::Error> {
    match BEFORE_TRACES.get() {
        true => Ok(None),
        false => Option::<TraceContext>::deserialize(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_back_to_the_same_header() {
        let cx = TraceContext::parse(EXAMPLE).expect("the W3C example");
        assert_eq!(cx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(cx.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(cx.sampled());
        assert_eq!(cx.traceparent(), EXAMPLE);
        let unsampled = TraceContext::parse(&EXAMPLE.replace("-01", "-00")).expect("valid");
        assert!(!unsampled.sampled());
    }

    #[test]
    fn anything_but_a_traceparent_is_ignored() {
        let refused = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            // Upper case, all-zero ids, the forbidden version, version 00 with more after it.
            &EXAMPLE.to_uppercase(),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            &EXAMPLE.replacen("00", "ff", 1),
            &format!("{EXAMPLE}-what"),
            &EXAMPLE.replace('-', "_"),
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for header in refused {
            assert_eq!(TraceContext::parse(header), None, "{header:?}");
        }
        // A later version is read as version 00 names it, whatever follows.
        let later = format!("cc{}-what-the-future-holds", &EXAMPLE[2..]);
        assert_eq!(
            TraceContext::parse(&later).map(|c| c.traceparent()),
            Some(EXAMPLE.to_string())
        );
    }
}
