//! Hexadecimal, the one implementation of the workspace: digests and ids are written in
//! lowercase hex (byte by byte into one string, on every claim's path), and read back from it
//! (stored digests, providers' signatures). [`decode_lower`] takes lowercase only, for text that
//! must read back to exactly what was written; [`decode`] takes either case.

/// `bytes` in lowercase hex.
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(2 * bytes.len());
    push_lower_hex(&mut text, bytes);
    text
}

/// Appends `bytes` in lowercase hex to `text`.
pub fn push_lower_hex(text: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// The bytes behind hex `text` of either case; `None` unless it is an even number of hex
/// digits.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    decode_with::<true>(text)
}

/// The bytes behind lowercase hex `text`, which reads back to exactly `text`; `None` unless it
/// is an even number of lowercase hex digits.
pub fn decode_lower(text: &str) -> Option<Vec<u8>> {
    decode_with::<false>(text)
}

/// [`decode_lower`] into `out`, which must be half as long as `text`.
pub fn decode_lower_into(text: &str, out: &mut [u8]) -> Option<()> {
    let digits = text.as_bytes();
    if digits.len() != 2 * out.len() {
        return None;
    }
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = digit::<false>(pair[0])? << 4 | digit::<false>(pair[1])?;
    }
    Some(())
}

fn decode_with<const UPPER: bool>(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    // A loop into a sized vector: ids are packed this way on every claim's path.
    let mut bytes = Vec::with_capacity(digits.len() / 2);
    for pair in digits.chunks_exact(2) {
        bytes.push(digit::<UPPER>(pair[0])? << 4 | digit::<UPPER>(pair[1])?);
    }
    Some(bytes)
}

/// A hex digit's value (an upper-case one only if `UPPER`).
#[inline(always)]
fn digit<const UPPER: bool>(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' if UPPER => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_written_in_two_lowercase_digits_and_read_back() {
        let every: Vec<u8> = (0..=255).collect();
        let text = lower_hex(&every);
        assert_eq!(text.len(), 512);
        assert!(text.starts_with("000102030405060708090a0b0c0d0e0f10"));
        assert!(text.ends_with("f8f9fafbfcfdfeff"));
        assert_eq!(decode_lower(&text), Some(every.clone()));
        assert_eq!(decode(&text.to_uppercase()), Some(every));
        assert_eq!(lower_hex(&[]), "");
        assert_eq!(decode(""), Some(Vec::new()));
    }

    #[test]
    fn anything_but_pairs_of_hex_digits_is_refused() {
        assert_eq!(decode("00FF10ab"), Some(vec![0x00, 0xff, 0x10, 0xab]));
        assert_eq!(decode_lower("00FF"), None, "upper case does not read back");
        for bad in ["0", "abc", "zz", "0g", " 00", "é1"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
