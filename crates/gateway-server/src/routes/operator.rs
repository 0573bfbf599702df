//! The operator's view: `GET /v1/gateway/status`, everything the status page shows as JSON (per
//! scope its sources' gates, its accounts, tenants and waiting calls, the last minute's
//! outcomes; the configuration's history), and the page, `GET /ui` with its stylesheet and
//! script, served from the binary. Both take the admin or the metrics key (a browser sends it as
//! a Basic password: a 401 asks for one).

use crate::AppState;
use crate::openai::ApiError;
use crate::status::recent::SECONDS;
use crate::status::unix_ms;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_core::outcome::OutcomeClass;
use serde_json::json;
use std::sync::Arc;

const PAGE: &str = include_str!("../status/index.html");
const STYLESHEET: &str = include_str!("../status/status.css");
const SCRIPT: &str = include_str!("../status/status.js");

/// The operator's check for a read-only route, `None` when it passes: a 401 asks a browser for
/// the key.
fn refused(state: &AppState, headers: &HeaderMap, route: &str) -> Option<Response> {
    state.keys.authorize_operator(headers, route, true).err().map(|error| {
        let mut response = error.into_response();
        if response.status() == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert("www-authenticate", HeaderValue::from_static("Basic realm=\"gateway\", charset=\"UTF-8\""));
        }
        response
    })
}

pub(crate) async fn status(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&state, &headers, "/v1/gateway/status") {
        return refused;
    }
    let client = &state.client;
    let (sources, overview) = match (client.status(None).await, client.overview(None).await) {
        (Ok(sources), Ok(overview)) => (sources, overview),
        (Err(e), _) | (_, Err(e)) => return super::backend_unavailable(&e),
    };
    let now_ms = unix_ms();
    let classes: Vec<OutcomeClass> = OutcomeClass::ALL.to_vec();
    let scopes: Vec<serde_json::Value> = overview
        .into_iter()
        .map(|scope| {
            let own: Vec<_> = sources.iter().filter(|s| s.scope == scope.scope).collect();
            let buckets = state.recent.last_minute(&scope.scope, now_ms / 1000);
            json!({
                "scope": scope.scope,
                "waiting": scope.waiting,
                "sources": own,
                "accounts": scope.accounts,
                "tenants": scope.tenants,
                "recent": {"seconds": SECONDS, "classes": classes, "buckets": buckets},
            })
        })
        .collect();
    let body = json!({"now_ms": now_ms, "config": state.config_log.state(), "scopes": scopes});
    ([("content-type", "application/json"), ("cache-control", "no-store")], body.to_string()).into_response()
}

pub(crate) async fn page(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&state, &headers, "/ui") {
        return refused;
    }
    asset("text/html; charset=utf-8", PAGE)
}

/// The page's stylesheet and script hold nothing of the gateway's: served to anyone.
pub(crate) async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLESHEET)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    (
        [
            ("content-type", content_type),
            ("cache-control", "no-cache"),
            ("x-content-type-options", "nosniff"),
            ("content-security-policy", "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'"),
        ],
        text,
    )
        .into_response()
}

/// `POST /v1/gateway/reload` (the admin key): loads the config file again; 200 with what
/// changed, or 422 naming why it was refused (nothing changed).
pub(crate) async fn reload(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(error) = state.keys.authorize_operator(&headers, "/v1/gateway/reload", false) {
        return error.into_response();
    }
    match crate::reload::reload(&state).await {
        Ok(done) => {
            let mut body = serde_json::to_value(&done).unwrap_or_default();
            body["reloaded"] = json!(true);
            ([("content-type", "application/json")], body.to_string()).into_response()
        }
        Err(error) => {
            let status = match error {
                crate::reload::ReloadError::NoFile => StatusCode::CONFLICT,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            };
            ApiError::new(status, "invalid_request_error", "config_refused", error.to_string()).into_response()
        }
    }
}
