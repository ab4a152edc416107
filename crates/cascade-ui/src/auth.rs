//! The access token and the checks every request passes.
//!
//! The token is 128 bits from the operating system's random source, shown
//! as 32 hex digits in the URL `cascade ui` prints. A request carries it as
//! `?token=`, the `X-Cascade-Token` header, or the `cascade_token` cookie
//! (HttpOnly, SameSite=Strict) that loading `/` with a valid query token
//! sets. Without it: 401. Requests that change something are POST only and
//! must carry the header (a cross-site form or image cannot set a custom
//! header) and, when the browser sends an `Origin`, it must be this
//! server's own: otherwise 403. That makes the actions CSRF-safe without a
//! second token.

use crate::UiError;

/// The header that carries the token.
pub const HEADER: &str = "x-cascade-token";
/// The cookie that carries the token.
pub const COOKIE: &str = "cascade_token";

/// A random access token.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// 16 bytes from the OS RNG, as lowercase hex.
    pub fn generate() -> Result<Token, UiError> {
        let mut bytes = [0u8; 16];
        getrandom::getrandom(&mut bytes).map_err(|e| UiError::Random(e.to_string()))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token as it appears in the URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time independent of where they differ.
    pub fn matches(&self, given: &str) -> bool {
        use subtle::ConstantTimeEq;
        // Slices of different lengths compare unequal (the length is not secret).
        self.0.as_bytes().ct_eq(given.as_bytes()).into()
    }
}

/// The value of `name` in a `Cookie:` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_differ() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), b.as_str());
        assert!(a.matches(a.as_str()));
        assert!(!a.matches(b.as_str()));
        assert!(!a.matches(""));
        assert!(!a.matches(&a.as_str()[..31]));
    }

    #[test]
    fn reads_cookies() {
        assert_eq!(
            cookie_value("a=1; cascade_token=xyz; b=2", COOKIE),
            Some("xyz")
        );
        assert_eq!(cookie_value("a=1", COOKIE), None);
    }
}
