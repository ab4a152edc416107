//! One HTTP exchange with a model API: reqwest over rustls (ring provider,
//! the system's certificates; no OpenSSL), the request posted as JSON, the
//! reply read as server-sent events as it arrives (or as one JSON body from
//! a server that does not stream), and a refusal classified:
//! 401/403 `auth`, 429 `rate_limited` with its Retry-After, 529 and
//! overloaded and 5xx `provider_error`, other 4xx a refused request; a
//! server that cannot be reached is a `provider_error` naming the URL.
//!
//! There is no timeout per request: the agent's `timeout` bounds the whole
//! run (a server that accepts and never answers ends the run as `timeout`).

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::header::{HeaderMap, CONTENT_TYPE};

use super::sse::Decoder;
use super::transcript::Transcript;
use super::wire::{error_message, excerpt, CallError, Reply, StreamReader};
use crate::signal::SignalKind;

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of an error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most bytes of a reply, whole or streamed: a model's reply is far
/// smaller, and a server that streams without end must not fill the memory
/// (the reply is kept whole, as part of the conversation).
const MAX_BODY: usize = 32 * 1024 * 1024;

/// Why a GET or the client failed before any reply.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot set up the HTTP client: {}", chain(.0))]
    Client(#[source] &'static reqwest::Error),
    #[error("cannot reach {url}: {} (is the server running, and is base_url right?)", excerpt(&chain(.source)))]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

/// The process's client (connections are pooled across calls).
pub fn client() -> Result<&'static reqwest::Client, HttpError> {
    static CLIENT: OnceLock<Result<reqwest::Client, reqwest::Error>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // reqwest is built without a TLS provider of its own: the process
            // uses rustls' `ring` one (an error here only means one is set).
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .user_agent(concat!("cascade/", env!("CARGO_PKG_VERSION")))
                .build()
        })
        .as_ref()
        .map_err(HttpError::Client)
}

/// A request to send.
pub struct Request<'a> {
    pub url: &'a str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// Posts `req` and reads the reply with `reader` (streamed) or `whole`
/// (one JSON body).
pub async fn post(
    req: Request<'_>,
    reader: &mut dyn StreamReader,
    whole: fn(&str) -> Result<Reply, CallError>,
    t: &mut Transcript,
) -> Result<Reply, CallError> {
    let client = client()
        .map_err(|e| CallError::provider(SignalKind::ProviderError, None, e.to_string()))?;
    let mut builder = client
        .post(req.url)
        .header(CONTENT_TYPE, "application/json")
        .body(req.body);
    for (k, v) in &req.headers {
        builder = builder.header(*k, v);
    }
    let mut resp = builder.send().await.map_err(|e| unreachable(req.url, e))?;
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let headers = resp.headers().clone();
        let body = read_body(&mut resp, MAX_ERROR_BODY)
            .await
            .unwrap_or_default();
        return Err(status_error(status, &headers, &body));
    }
    let streamed = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streamed {
        let body = read_body(&mut resp, MAX_BODY)
            .await
            .map_err(|e| unreachable(req.url, e))?;
        return whole(&body);
    }
    let mut decoder = Decoder::new();
    let mut received = 0usize;
    loop {
        let chunk = resp.chunk().await.map_err(|e| {
            CallError::provider(
                SignalKind::ProviderError,
                None,
                format!(
                    "the connection broke while the reply streamed: {}",
                    chain(&e)
                ),
            )
        })?;
        let Some(chunk) = chunk else { break };
        received += chunk.len();
        if received > MAX_BODY {
            return Err(CallError::malformed(
                format!(
                    "the reply streamed more than {} MiB, far more than a model answers; stopped reading it",
                    MAX_BODY >> 20
                ),
                &String::from_utf8_lossy(&chunk[..chunk.len().min(200)]),
            ));
        }
        let events = decoder
            .feed(&chunk)
            .map_err(|e| CallError::malformed(e.to_string(), &e.start))?;
        for e in events {
            reader.event(&e, t)?;
        }
    }
    if let Some(e) = decoder.finish() {
        reader.event(&e, t)?;
    }
    t.end_text();
    reader.finish()
}

/// A GET for `agents check` (the models list): the status and body.
pub async fn get(
    url: &str,
    headers: &[(&'static str, String)],
) -> Result<(u16, String), HttpError> {
    let client = client()?;
    let mut builder = client.get(url);
    for (k, v) in headers {
        builder = builder.header(*k, v);
    }
    let mut resp = builder
        .send()
        .await
        .map_err(|source| HttpError::Unreachable {
            url: url.to_string(),
            source,
        })?;
    let status = resp.status().as_u16();
    let body = read_body(&mut resp, MAX_ERROR_BODY)
        .await
        .unwrap_or_default();
    Ok((status, body))
}

/// The class of a refused request (see the module doc).
pub fn status_error(status: u16, headers: &HeaderMap, body: &str) -> CallError {
    let (message, kind) = error_message(body);
    let overloaded = status == 529 || kind.as_deref() == Some("overloaded_error");
    let class = match status {
        401 | 403 => SignalKind::Auth,
        429 => SignalKind::RateLimited,
        _ if overloaded => SignalKind::ProviderError,
        500..=599 => SignalKind::ProviderError,
        _ => return CallError::Refused { status, message },
    };
    let mut e = CallError::provider(class, Some(status), format!("HTTP {status}: {message}"));
    if let (CallError::Provider(s), SignalKind::RateLimited) = (&mut e, class) {
        s.retry_after = retry_after(headers);
    }
    e
}

/// `retry-after` (seconds) or `retry-after-ms`.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let num = |name: &str| -> Option<f64> {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    num("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| num("retry-after").map(Duration::from_secs_f64))
}

/// Reads at most `max` bytes of the body.
async fn read_body(resp: &mut reqwest::Response, max: usize) -> Result<String, reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= max {
            bytes.truncate(max);
            break;
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn unreachable(url: &str, source: reqwest::Error) -> CallError {
    let e = HttpError::Unreachable {
        url: url.to_string(),
        source,
    };
    CallError::provider(SignalKind::ProviderError, None, e.to_string())
}

/// An error with its sources ("error sending request: connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn kind(e: &CallError) -> Option<SignalKind> {
        match e {
            CallError::Provider(s) => Some(s.kind),
            _ => None,
        }
    }

    #[test]
    fn statuses_are_classified_like_the_clis() {
        let none = HeaderMap::new();
        let body = r#"{"error": {"type": "x", "message": "m"}}"#;
        assert_eq!(
            kind(&status_error(401, &none, body)),
            Some(SignalKind::Auth)
        );
        assert_eq!(
            kind(&status_error(403, &none, body)),
            Some(SignalKind::Auth)
        );
        assert_eq!(
            kind(&status_error(500, &none, body)),
            Some(SignalKind::ProviderError)
        );
        assert_eq!(
            kind(&status_error(529, &none, body)),
            Some(SignalKind::ProviderError)
        );
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            kind(&status_error(503, &none, overloaded)),
            Some(SignalKind::ProviderError)
        );
        match status_error(404, &none, r#"{"error": {"message": "model not found"}}"#) {
            CallError::Refused {
                status: 404,
                message,
            } => assert_eq!(message, "model not found"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rate_limit_carries_its_retry_after() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        match status_error(429, &h, "{}") {
            CallError::Provider(s) => {
                assert_eq!(s.kind, SignalKind::RateLimited);
                assert_eq!(s.retry_after, Some(Duration::from_secs(7)));
                assert_eq!(s.http_status, Some(429));
            }
            other => panic!("{other:?}"),
        }
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
    }
}
