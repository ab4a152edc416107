//! The signed envelope a remote cache entry travels in.
//!
//! An object in the remote store is one header line and the entry's JSON:
//!
//! ```text
//! {"format":"cascade-gate-cache","version":1,"key":"<64 hex>","signature":"<64 hex>|null"}\n
//! <the CacheEntry as JSON, exactly the bytes that were signed>
//! ```
//!
//! The signature is HMAC-SHA256, with the shared secret of
//! `CASCADE_CACHE_SECRET`, over a domain tag, the key and the entry bytes. It
//! is computed over the bytes as stored (no re-serialisation), so nothing
//! about JSON formatting can make a good entry fail or a forged one pass.
//! Verification compares in constant time (`hmac`'s `verify_slice`).

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const FORMAT: &str = "cascade-gate-cache";
const VERSION: u32 = 1;
/// Keeps these signatures from ever meaning anything in another protocol.
const DOMAIN: &[u8] = b"cascade-gate-cache-v1\0";

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    key: String,
    signature: Option<String>,
}

/// Why an object was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// Not an envelope of this format/version, or stored under another key.
    Malformed(String),
    /// No signature while this reader verifies.
    Unsigned,
    /// A signature that the secret does not produce.
    BadSignature,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejected::Malformed(why) => write!(f, "malformed entry: {why}"),
            Rejected::Unsigned => write!(f, "unsigned entry"),
            Rejected::BadSignature => write!(f, "wrongly signed entry"),
        }
    }
}

fn mac(secret: &[u8], key: &str, entry: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut m = <HmacSha256 as Mac>::new_from_slice(secret).expect("hmac takes any key length");
    m.update(DOMAIN);
    m.update(&(key.len() as u64).to_le_bytes());
    m.update(key.as_bytes());
    m.update(entry);
    m
}

/// Wraps `entry` (JSON bytes) for `key`, signed when a secret is given.
pub fn seal(secret: Option<&[u8]>, key: &str, entry: &[u8]) -> Vec<u8> {
    let header = Header {
        format: FORMAT.into(),
        version: VERSION,
        key: key.into(),
        signature: secret.map(|s| to_hex(&mac(s, key, entry).finalize().into_bytes())),
    };
    // A struct of strings always serialises.
    let mut out = serde_json::to_vec(&header).unwrap_or_default();
    out.push(b'\n');
    out.extend_from_slice(entry);
    out
}

/// Unwraps an object stored under `key`: the entry bytes, once the header
/// matches and (when `secret` is given) the signature verifies. Without a
/// secret nothing can be verified: the entry is returned as is and the caller
/// decides what that trust means.
pub fn open<'a>(secret: Option<&[u8]>, key: &str, object: &'a [u8]) -> Result<&'a [u8], Rejected> {
    let nl = object
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| Rejected::Malformed("no header line".into()))?;
    let header: Header = serde_json::from_slice(&object[..nl])
        .map_err(|e| Rejected::Malformed(format!("header: {e}")))?;
    if header.format != FORMAT || header.version != VERSION {
        return Err(Rejected::Malformed(format!(
            "format {} v{} (expected {FORMAT} v{VERSION})",
            header.format, header.version
        )));
    }
    if header.key != key {
        return Err(Rejected::Malformed(
            "stored under another key than it names".into(),
        ));
    }
    let entry = &object[nl + 1..];
    let Some(secret) = secret else {
        return Ok(entry);
    };
    let Some(sig) = header.signature.as_deref() else {
        return Err(Rejected::Unsigned);
    };
    let sig = from_hex(sig).ok_or(Rejected::BadSignature)?;
    mac(secret, key, entry)
        .verify_slice(&sig)
        .map_err(|_| Rejected::BadSignature)?;
    Ok(entry)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_entries_verify_and_tampering_is_caught() {
        let obj = seal(Some(b"s3cret"), "k1", br#"{"a":1}"#);
        assert_eq!(open(Some(b"s3cret"), "k1", &obj).unwrap(), br#"{"a":1}"#);
        // Another secret, another key, changed bytes: all refused.
        assert_eq!(
            open(Some(b"other"), "k1", &obj),
            Err(Rejected::BadSignature)
        );
        assert!(matches!(
            open(Some(b"s3cret"), "k2", &obj),
            Err(Rejected::Malformed(_))
        ));
        let mut tampered = obj.clone();
        let n = tampered.len();
        tampered[n - 2] = b'2';
        assert_eq!(
            open(Some(b"s3cret"), "k1", &tampered),
            Err(Rejected::BadSignature)
        );
        // Unsigned: refused by a verifying reader, passed through otherwise.
        let unsigned = seal(None, "k1", b"{}");
        assert_eq!(
            open(Some(b"s3cret"), "k1", &unsigned),
            Err(Rejected::Unsigned)
        );
        assert_eq!(open(None, "k1", &unsigned).unwrap(), b"{}");
        assert!(matches!(
            open(None, "k1", b"garbage"),
            Err(Rejected::Malformed(_))
        ));
    }

    #[test]
    fn hmac_matches_a_known_vector() {
        // RFC 4231 test case 2 (no domain tag): checks we use HMAC-SHA256 itself.
        let mut m = <HmacSha256 as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            to_hex(&m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
