//! Byte encodings for `Buffer`, `TextEncoder`/`TextDecoder` and `atob`/`btoa`, with Node's
//! names and its lenient decoding (hex stops at the first bad pair, base64 skips what is not
//! in its alphabet and accepts both the standard and the URL-safe one).

use base64::alphabet;
use base64::engine::general_purpose::{
    GeneralPurpose, GeneralPurposeConfig, STANDARD, URL_SAFE_NO_PAD,
};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;

/// Decodes with or without padding and ignores stray bits at the end, like Node does.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The encodings `Buffer` knows, by Node's names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Encoding {
    Utf8,
    Hex,
    Base64,
    Base64Url,
    Latin1,
    Ascii,
    Utf16Le,
}

impl Encoding {
    pub(super) fn parse(name: &str) -> Result<Self, String> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "utf8" | "utf-8" => Encoding::Utf8,
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            "base64url" => Encoding::Base64Url,
            "latin1" | "binary" => Encoding::Latin1,
            "ascii" => Encoding::Ascii,
            "utf16le" | "utf-16le" | "ucs2" | "ucs-2" => Encoding::Utf16Le,
            _ => {
                return Err(format!(
                    "Unknown encoding: {name} (known: utf8, hex, base64, base64url, latin1, \
                     binary, ascii, utf16le, ucs2)"
                ))
            }
        })
    }
}

/// `text` as bytes in `encoding` (`Buffer.from(text, encoding)`).
pub(super) fn encode(text: &str, encoding: Encoding) -> Vec<u8> {
    match encoding {
        Encoding::Utf8 => text.as_bytes().to_vec(),
        Encoding::Hex => text
            .as_bytes()
            .chunks_exact(2)
            .map_while(|pair| {
                let digits = std::str::from_utf8(pair).ok()?;
                u8::from_str_radix(digits, 16).ok()
            })
            .collect(),
        Encoding::Base64 | Encoding::Base64Url => {
            let cleaned: Vec<u8> = text
                .bytes()
                .filter_map(|b| match b {
                    b'-' => Some(b'+'),
                    b'_' => Some(b'/'),
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' => Some(b),
                    _ => None,
                })
                .collect();
            // A lone last character carries no whole byte: Node drops it.
            let usable = if cleaned.len() % 4 == 1 {
                &cleaned[..cleaned.len() - 1]
            } else {
                &cleaned[..]
            };
            LENIENT.decode(usable).unwrap_or_default()
        }
        Encoding::Latin1 | Encoding::Ascii => text.encode_utf16().map(|unit| unit as u8).collect(),
        Encoding::Utf16Le => text.encode_utf16().flat_map(u16::to_le_bytes).collect(),
    }
}

/// `bytes` as text in `encoding` (`buffer.toString(encoding)`).
pub(super) fn decode(bytes: &[u8], encoding: Encoding) -> String {
    match encoding {
        Encoding::Utf8 => String::from_utf8_lossy(bytes).into_owned(),
        Encoding::Hex => {
            let mut out = String::with_capacity(bytes.len() * 2);
            for byte in bytes {
                out.push_str(&format!("{byte:02x}"));
            }
            out
        }
        Encoding::Base64 => STANDARD.encode(bytes),
        Encoding::Base64Url => URL_SAFE_NO_PAD.encode(bytes),
        Encoding::Latin1 => bytes.iter().map(|&b| char::from(b)).collect(),
        Encoding::Ascii => bytes.iter().map(|&b| char::from(b & 0x7f)).collect(),
        Encoding::Utf16Le => {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        }
    }
}

/// `TextDecoder`'s UTF-8 decoding: a bad sequence is an error when `fatal`, else U+FFFD. A
/// leading byte order mark is dropped unless `keep_bom`.
pub(super) fn decode_utf8(bytes: &[u8], fatal: bool, keep_bom: bool) -> Result<String, String> {
    let bytes = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) if !keep_bom => rest,
        _ => bytes,
    };
    if fatal {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| "The encoded data was not valid for encoding utf-8".to_string())
    } else {
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// `btoa`: a string of characters up to U+00FF as base64.
pub(super) fn btoa(text: &str) -> Result<String, String> {
    let mut bytes = Vec::with_capacity(text.len());
    for c in text.chars() {
        let code = u32::from(c);
        if code > 0xff {
            return Err(format!(
                "Invalid character: btoa() takes characters up to U+00FF, got U+{code:04X} \
                 (encode text as UTF-8 bytes first, e.g. Buffer.from(text).toString('base64'))"
            ));
        }
        bytes.push(code as u8);
    }
    Ok(STANDARD.encode(bytes))
}

/// `atob`: the "forgiving base64" decoding of the HTML standard, as a string of bytes.
pub(super) fn atob(text: &str) -> Result<String, String> {
    let mut cleaned: Vec<u8> = text
        .bytes()
        .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0c' | b'\r'))
        .collect();
    if cleaned.len().is_multiple_of(4) {
        for _ in 0..2 {
            if cleaned.last() == Some(&b'=') {
                cleaned.pop();
            }
        }
    }
    let valid = cleaned.len() % 4 != 1
        && cleaned
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/'));
    if !valid {
        return Err("Invalid character: atob() was given a string that is not valid base64".into());
    }
    let bytes = LENIENT
        .decode(&cleaned)
        .map_err(|err| format!("Invalid character: atob(): {err}"))?;
    Ok(bytes.iter().map(|&b| char::from(b)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_encodings_round_trip() {
        let hi = encode("hi", Encoding::Utf8);
        assert_eq!(decode(&hi, Encoding::Base64), "aGk=");
        assert_eq!(decode(&hi, Encoding::Hex), "6869");
        assert_eq!(encode("aGk", Encoding::Base64), b"hi");
        assert_eq!(encode("-_8", Encoding::Base64Url), vec![0xfb, 0xff]);
        assert_eq!(encode("68zz69", Encoding::Hex), b"h");
        assert_eq!(
            decode(&encode("é", Encoding::Latin1), Encoding::Latin1),
            "é"
        );
        assert_eq!(
            decode(&encode("hé", Encoding::Utf16Le), Encoding::Utf16Le),
            "hé"
        );
        assert!(Encoding::parse("klingon")
            .unwrap_err()
            .contains("known: utf8"));
    }

    #[test]
    fn atob_and_btoa_follow_the_html_standard() {
        assert_eq!(btoa("hi").unwrap(), "aGk=");
        assert_eq!(atob(" aG k= ").unwrap(), "hi");
        assert_eq!(atob("aGk").unwrap(), "hi");
        assert!(atob("a").is_err());
        assert!(atob("a*b=").is_err());
        assert!(btoa("€").unwrap_err().contains("U+20AC"));
    }

    #[test]
    fn text_decoder_options() {
        assert_eq!(decode_utf8(b"\xEF\xBB\xBFok", false, false).unwrap(), "ok");
        assert_eq!(
            decode_utf8(b"\xEF\xBB\xBFok", false, true).unwrap(),
            "\u{feff}ok"
        );
        assert_eq!(decode_utf8(b"a\xffb", false, false).unwrap(), "a\u{fffd}b");
        assert!(decode_utf8(b"a\xffb", true, false).is_err());
    }
}
