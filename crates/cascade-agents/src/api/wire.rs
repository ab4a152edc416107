//! What both provider adapters produce and fail with: one model turn's
//! [`Reply`] and the [`CallError`] of a call that gave none, plus the
//! pieces they share (reading an API error's message, bounded excerpts).

use serde_json::Value;

use super::conversation::Message;
use crate::signal::{FailureSignal, SignalKind};
use crate::stream::Usage;

/// Characters of a raw response quoted in an error.
pub const EXCERPT: usize = 300;

/// One model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The assistant message (text and tool calls).
    pub message: Message,
    pub usage: Usage,
    /// The model the API says answered.
    pub model: Option<String>,
    /// Why the model stopped (`end_turn`, `tool_use`, `stop`, `length`, ...).
    pub stop: String,
    /// Tool calls whose input was not valid JSON (id, raw input): the model
    /// is told so instead of the call being run.
    pub invalid_inputs: Vec<(String, String)>,
}

/// Why a call gave no reply.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// Provider trouble, classified like a CLI's: auth, rate limit,
    /// provider error.
    Provider(FailureSignal),
    /// The API refused the request itself (HTTP 4xx other than auth and
    /// rate limits: an unknown model, a prompt too long).
    Refused { status: u16, message: String },
    /// The answer does not follow the API's protocol.
    Malformed { what: String, excerpt: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Provider(s) => write!(f, "{}: {}", s.kind, s.message),
            CallError::Refused { status, message } => write!(
                f,
                "the API refused the request (HTTP {status}): {message} (check the agent's model and base_url in agents.json)"
            ),
            CallError::Malformed { what, excerpt } => {
                write!(f, "malformed response from the model API: {what}; raw: {excerpt:?}")
            }
        }
    }
}

impl CallError {
    pub fn malformed(what: impl Into<String>, raw: &str) -> CallError {
        CallError::Malformed {
            what: what.into(),
            excerpt: excerpt(raw),
        }
    }

    pub fn provider(
        kind: SignalKind,
        status: Option<u16>,
        message: impl Into<String>,
    ) -> CallError {
        CallError::Provider(FailureSignal {
            kind,
            http_status: status,
            retry_after: None,
            message: message.into(),
            advice: None,
        })
    }
}

/// The first [`EXCERPT`] characters of `raw`.
pub fn excerpt(raw: &str) -> String {
    let mut out: String = raw.chars().take(EXCERPT).collect();
    if raw.chars().count() > EXCERPT {
        out.push_str("...");
    }
    out
}

/// An API error body's message and type: both APIs say
/// `{"error": {"message": ..., "type": ...}}` (Anthropic wraps it in
/// `{"type": "error", ...}`); else the raw text.
pub fn error_message(body: &str) -> (String, Option<String>) {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
        })
        .map(str::to_string)
        .unwrap_or_else(|| excerpt(&body.split_whitespace().collect::<Vec<_>>().join(" ")));
    let kind = error
        .and_then(|e| e.get("type").or_else(|| e.get("code")))
        .and_then(Value::as_str)
        .map(str::to_string);
    (message, kind)
}

/// The class of an error reported inside a stream (`{"type":
/// "overloaded_error"}` and friends, the same names as the HTTP errors').
pub fn stream_error(kind: Option<&str>, message: String, raw: &str) -> CallError {
    let class = match kind.unwrap_or("") {
        "authentication_error" | "permission_error" | "invalid_api_key" => Some(SignalKind::Auth),
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => {
            Some(SignalKind::RateLimited)
        }
        "overloaded_error" | "api_error" | "server_error" => Some(SignalKind::ProviderError),
        _ => None,
    };
    match class {
        Some(k) => CallError::provider(k, None, message),
        None if message.is_empty() => CallError::malformed("an error event without a message", raw),
        // An error the stream names but we cannot place: the provider's side.
        None => CallError::provider(SignalKind::ProviderError, None, message),
    }
}

/// A provider's reader of one streamed reply.
pub trait StreamReader: Send {
    /// One server-sent event; the model's text goes to `t` as it arrives.
    fn event(
        &mut self,
        e: &super::sse::Event,
        t: &mut super::transcript::Transcript,
    ) -> Result<(), CallError>;
    /// The reply, once the stream ended.
    fn finish(&mut self) -> Result<Reply, CallError>;
}

/// `value[key]` as a u64 (0 when absent).
pub fn count(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_of_both_apis_give_their_message() {
        let anthropic =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            error_message(anthropic),
            ("Overloaded".into(), Some("overloaded_error".into()))
        );
        let openai = r#"{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(error_message(openai).0, "Incorrect API key");
        assert_eq!(
            error_message("<html>bad gateway</html>").0,
            "<html>bad gateway</html>"
        );
    }

    #[test]
    fn stream_errors_are_classified() {
        let e = stream_error(Some("overloaded_error"), "Overloaded".into(), "");
        assert!(matches!(e, CallError::Provider(s) if s.kind == SignalKind::ProviderError));
        let e = stream_error(Some("rate_limit_error"), "slow down".into(), "");
        assert!(matches!(e, CallError::Provider(s) if s.kind == SignalKind::RateLimited));
        let e = stream_error(None, String::new(), "{}");
        assert!(e.to_string().contains("malformed"), "{e}");
    }
}
