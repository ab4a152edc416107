//! The router: the page, the API endpoints and the guard in front of them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::auth::{self, COOKIE, HEADER};
use crate::{api, assets, AppState};

pub(crate) type Shared = Arc<AppState>;

pub(crate) fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/api/run", get(api::run))
        .route("/api/stories/{id}", get(api::story))
        .route("/api/events", get(crate::sse::events))
        .route("/api/mega", get(api::mega))
        .route("/api/plans", get(api::plans))
        .route("/api/plans/{id}", get(api::plan))
        .route("/api/actions/pause", post(api::pause))
        .route("/api/actions/resume", post(api::resume))
        .route("/api/stories/{id}/retry", post(api::retry))
        .route("/api/stories/{id}/cancel", post(api::cancel))
        .route(
            "/api/mega/features/{feature}/stories/{id}/retry",
            post(api::mega_retry),
        )
        .route(
            "/api/mega/features/{feature}/stories/{id}/cancel",
            post(api::mega_cancel),
        )
        .route(
            "/api/plans/{id}/answer",
            // A key, an answer and JSON around them; bigger is refused
            // before it is read whole (see MAX_ANSWER_BYTES).
            post(api::answer).layer(DefaultBodyLimit::max(
                cascade_planning::MAX_ANSWER_BYTES * 2 + 1024,
            )),
        )
        .route("/api/plans/{id}/approve", post(api::approve))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(Arc::clone(&state), guard))
        .with_state(state)
}

async fn not_found() -> Response {
    api::error(StatusCode::NOT_FOUND, "no such page or endpoint")
}

/// The headers every answer carries: the page may only load its own
/// scripts and styles and talk to its own server (an injected `<script>`
/// or inline handler does not run), may not be framed (clickjacking), and
/// no response is sniffed into another type.
const SECURITY_HEADERS: [(header::HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// Every answer, through [`guard`], with [`SECURITY_HEADERS`].
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let mut response = checked(&app, request, next).await;
    for (name, value) in SECURITY_HEADERS {
        response
            .headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    response
}

/// 421 for a request to another host name (a DNS-rebinding page would
/// send its own); 401 without the token; 403 for a state-changing request
/// without the header or from a foreign origin.
async fn checked(app: &AppState, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Err(host) = host_allowed(headers, app.local) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "421: this dashboard answers only requests addressed to it (127.0.0.1, localhost, [::1] or its --bind address, port {}); Host '{}' is refused\n",
                app.local.port(),
                host.escape_default()
            ),
        )
            .into_response();
    }
    let by_header = headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| app.token.matches(t));
    let by_query = Query::<TokenQuery>::try_from_uri(request.uri())
        .ok()
        .and_then(|q| q.0.token)
        .is_some_and(|t| app.token.matches(&t));
    let by_cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|c| auth::cookie_value(c, COOKIE))
        .any(|t| app.token.matches(t));
    if !(by_header || by_query || by_cookie) {
        return (
            StatusCode::UNAUTHORIZED,
            "401: this dashboard needs its access token: open the URL `cascade ui` printed\n",
        )
            .into_response();
    }
    let method = request.method().clone();
    if method != Method::GET && method != Method::HEAD {
        if method != Method::POST {
            return (StatusCode::METHOD_NOT_ALLOWED, "405: use GET or POST\n").into_response();
        }
        if !by_header {
            return forbidden("actions need the X-Cascade-Token header");
        }
        if !same_origin(headers, app) {
            return forbidden("actions are only accepted from the dashboard's own page");
        }
    }
    let set_cookie = by_query && request.uri().path() == "/";
    let mut response = next.run(request).await;
    if set_cookie {
        let cookie = format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            app.token.as_str()
        );
        if let Ok(v) = header::HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    response
}

/// The query of a request: the token of the URL `cascade ui` printed.
#[derive(serde::Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// Whether the `Host` a request names is this server: `localhost`, a
/// loopback address, or the address it listens on (any address of the
/// machine when it listens on all of them), with its port. A name a
/// DNS-rebinding attacker controls is not. `Err` carries the Host given.
fn host_allowed(headers: &HeaderMap, local: SocketAddr) -> Result<(), String> {
    let given = headers
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .unwrap_or_default();
    let port = local.port();
    let (name, given_port) = match given.rsplit_once(':') {
        Some((n, p)) if !n.is_empty() && !p.contains(']') => (n, p.parse::<u16>().ok()),
        _ => (given.as_str(), Some(80)),
    };
    if given_port != Some(port) {
        return Err(given);
    }
    if name.eq_ignore_ascii_case("localhost") {
        return Ok(());
    }
    let literal = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    match literal.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_loopback() || ip == local.ip() || local.ip().is_unspecified() => Ok(()),
        _ => Err(given),
    }
}

/// No `Origin` (not a browser's cross-site request), or one naming the host
/// the request was sent to.
fn same_origin(headers: &HeaderMap, app: &AppState) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let port = app.local.port();
    rest == host
        || rest == format!("127.0.0.1:{port}")
        || rest == format!("localhost:{port}")
        || rest == format!("[::1]:{port}")
}

fn forbidden(why: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        Json(serde_json::json!({ "error": why })),
    )
        .into_response()
}

async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        assets::INDEX_HTML,
    )
        .into_response()
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        assets::APP_JS,
    )
        .into_response()
}

async fn app_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        assets::APP_CSS,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(local: &str, given: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, header::HeaderValue::from_str(given).unwrap());
        host_allowed(&headers, local.parse().unwrap()).is_ok()
    }

    /// The `--bind` address is the dashboard's own name besides loopback;
    /// on all addresses any address literal is, a host name never.
    #[test]
    fn the_host_must_be_the_bind_address_or_loopback() {
        let bound = "192.0.2.7:8080";
        for ok in [
            "192.0.2.7:8080",
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
        ] {
            assert!(host(bound, ok), "{ok}");
        }
        for refused in [
            "192.0.2.8:8080",
            "192.0.2.7:8081",
            "192.0.2.7",
            "evil.example:8080",
            "192.0.2.7.nip.io:8080",
        ] {
            assert!(!host(bound, refused), "{refused}");
        }
        assert!(host("0.0.0.0:8080", "198.51.100.3:8080"));
        assert!(!host("0.0.0.0:8080", "evil.example:8080"));
        assert!(host("[::]:8080", "[2001:db8::1]:8080"));
    }
}
