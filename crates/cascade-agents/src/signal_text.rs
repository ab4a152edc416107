//! Rate limits said in plain text: for agent CLIs whose rate limit only shows
//! as a line on stderr or stdout (aider, gemini, codex's text mode, an HTTP
//! library's error), [`classify_text`] reads the text and returns a
//! [`FailureSignal`] of kind `rate_limited`, with the wait the provider
//! asked for when the text says it (`Retry-After: 30`, `retry after 30s`,
//! `try again in 1m20s`, `resets in 45 seconds`).
//!
//! What counts is what the live watcher counts (one classifier for both):
//! HTTP 429 or 529 named as a status, "rate limit", "too many requests",
//! "overloaded", quota exceeded / `RESOURCE_EXHAUSTED`, "usage limit". A bare
//! number 429 in some other sense (a line count) is not enough. This adds
//! what a line-by-line reading misses: the Retry-After on another line.

use std::time::Duration;

use crate::signal::{FailureSignal, SignalKind};

/// At most this many characters of the matching line are kept.
const MESSAGE_CHARS: usize = 200;

/// The rate-limit signal in `text`, if it holds one: the last line the
/// live watcher's message classifier (`watch::classify_text`) reads as a
/// rate limit is the message; a Retry-After anywhere in the text (often on
/// a line of its own, after the status line) is the wait.
pub fn classify_text(text: &str) -> Option<FailureSignal> {
    let mut found = text
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .find_map(|l| {
            crate::watch::classify_text(l).filter(|s| s.kind == SignalKind::RateLimited)
        })?;
    found.message = found.message.chars().take(MESSAGE_CHARS).collect();
    if found.advice.is_none() {
        found.advice = Some(
            "the provider is rate limiting this agent; cascade waits and retries without charging an attempt".into(),
        );
    }
    let lower = text.to_ascii_lowercase();
    if let Some(wait) = retry_after(&lower) {
        found.retry_after = Some(wait);
    }
    if found.http_status.is_none() {
        found.http_status = if has_status(&lower, "529") {
            Some(529)
        } else if has_status(&lower, "429") {
            Some(429)
        } else {
            None
        };
    }
    Some(found)
}

/// Whether `code` appears as an HTTP status in `lower` (lowercase text).
fn has_status(lower: &str, code: &str) -> bool {
    let mut from = 0;
    while let Some(i) = lower[from..].find(code) {
        let at = from + i;
        let end = at + code.len();
        from = end;
        let before_ok = at == 0 || !lower.as_bytes()[at - 1].is_ascii_digit();
        let after_ok = end == lower.len() || !lower.as_bytes()[end].is_ascii_digit();
        if !(before_ok && after_ok) {
            continue;
        }
        let before = lower[..at].trim_end_matches([' ', ':', '=', '"', '(']);
        let after = lower[end..].trim_start_matches([' ', ':', '-', ')', '"']);
        let named_before = [
            "status",
            "http",
            "code",
            "error",
            "status_code",
            "http/1.1",
            "http/2",
        ]
        .iter()
        .any(|w| before.ends_with(w));
        let named_after = after.starts_with("too many")
            || after.starts_with("overloaded")
            || after.starts_with("rate");
        if named_before || named_after {
            return true;
        }
    }
    false
}

/// The wait the text asks for, if it says one.
fn retry_after(lower: &str) -> Option<Duration> {
    const MARKERS: [&str; 7] = [
        "retry-after",
        "retry_after",
        "retry after",
        "try again in",
        "retry in",
        "resets in",
        "please wait",
    ];
    for m in MARKERS {
        let mut from = 0;
        while let Some(i) = lower[from..].find(m) {
            let rest = &lower[from + i + m.len()..];
            from += i + m.len();
            let rest = rest.trim_start_matches([' ', ':', '=', '"', '\'']);
            if let Some(d) = parse_duration(rest) {
                return Some(d);
            }
        }
    }
    None
}

/// `30`, `30s`, `30 seconds`, `1m20s`, `2 minutes`, `1.5s`, `500ms`, `1h`.
fn parse_duration(s: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut rest = s;
    let mut any = false;
    loop {
        let n_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if n_len == 0 {
            break;
        }
        let n: f64 = rest[..n_len].parse().ok()?;
        rest = rest[n_len..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let secs = match unit {
            "ms" | "millisecond" | "milliseconds" => n / 1000.0,
            "" | "s" | "sec" | "secs" | "second" | "seconds" => n,
            "m" | "min" | "mins" | "minute" | "minutes" => n * 60.0,
            "h" | "hr" | "hour" | "hours" => n * 3600.0,
            _ => break,
        };
        total += secs;
        any = true;
        rest = &rest[unit_len..];
        if unit.is_empty() {
            break;
        }
    }
    (any && (0.0..=86_400.0).contains(&total)).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_agents_rate_limit_texts_are_recognised() {
        let cases = [
            ("litellm.RateLimitError: AnthropicException - {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}", None),
            ("Error: 429 Too Many Requests", Some(429)),
            ("API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}", Some(529)),
            ("[API Error: Quota exceeded for quota metric 'Generate Content API requests per minute']", None),
            ("RESOURCE_EXHAUSTED: status code 429", Some(429)),
            ("stream error: exceeded retry limit, last status: 429 Too Many Requests", Some(429)),
            ("You've hit your usage limit. Try again in 2 minutes.", None),
        ];
        for (text, status) in cases {
            let s = classify_text(&format!("working...\n{text}\n"))
                .unwrap_or_else(|| panic!("not recognised: {text}"));
            assert_eq!(s.kind, SignalKind::RateLimited);
            assert_eq!(s.http_status, status, "{text}");
            assert_eq!(s.message, text.chars().take(200).collect::<String>());
        }
    }

    #[test]
    fn other_failures_and_numbers_are_not_rate_limits() {
        for text in [
            "error: test failed, 429 tests passed",
            "compiled 1429 files",
            "Error: invalid x-api-key (401)",
            "panicked at src/lib.rs:429:5",
        ] {
            assert!(classify_text(text).is_none(), "{text}");
        }
    }

    #[test]
    fn retry_after_is_read_in_its_many_spellings() {
        let wait = |t: &str| classify_text(t).and_then(|s| s.retry_after);
        assert_eq!(
            wait("HTTP 429 Too Many Requests\nRetry-After: 30"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            wait("rate limited; retry after 1m20s"),
            Some(Duration::from_secs(80))
        );
        assert_eq!(
            wait("usage limit reached, try again in 2 minutes"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            wait("Rate limit: please retry in 500ms"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(wait("429 Too Many Requests"), None);
    }
}
