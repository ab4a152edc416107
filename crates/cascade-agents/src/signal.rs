//! What an agent's live output says about its provider: authentication
//! refused, rate limited, or the provider failing. These are read while the
//! agent runs (from its event stream and its text), so cascade can stop an
//! agent that cannot succeed instead of waiting for its timeout, and so the
//! engine can treat a rate limit differently from bad work.

use std::time::Duration;

use serde::Serialize;

/// The kind of provider trouble an agent ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalKind {
    /// HTTP 401/403, an invalid or missing key, a login that expired.
    Auth,
    /// HTTP 429/529, "overloaded", a quota or usage limit.
    RateLimited,
    /// HTTP 5xx or another provider-side failure.
    ProviderError,
}

impl SignalKind {
    /// The failure-kind name used in events, status and progress.txt.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalKind::Auth => "auth",
            SignalKind::RateLimited => "rate_limited",
            SignalKind::ProviderError => "provider_error",
        }
    }
}

impl std::fmt::Display for SignalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One classified signal from an agent's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureSignal {
    pub kind: SignalKind,
    /// The HTTP status the agent reported, when it did.
    pub http_status: Option<u16>,
    /// How long the provider asked to wait (Retry-After), when it said.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_secs")]
    pub retry_after: Option<Duration>,
    /// The agent's own words (one line, bounded), for the user.
    pub message: String,
    /// What the user should do about it (e.g. which key or login to fix).
    pub advice: Option<String>,
}

mod opt_secs {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}
