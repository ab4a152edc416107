//! The router: the page, the API endpoints and the guard in front of them.

use std::sync::Arc;

use axum::extract::{Request, State};
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
        .route("/api/plans/{id}/answer", post(api::answer))
        .route("/api/plans/{id}/approve", post(api::approve))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(Arc::clone(&state), guard))
        .with_state(state)
}

async fn not_found() -> Response {
    api::error(StatusCode::NOT_FOUND, "no such page or endpoint")
}

/// 401 without the token; 403 for a state-changing request without the
/// header or from a foreign origin.
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let query = request.uri().query().unwrap_or("");
    let by_header = headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| app.token.matches(t));
    let by_query = auth::query_value(query, "token").is_some_and(|t| app.token.matches(t));
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
        if !same_origin(headers, &app) {
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
