//! The dashboard's files, embedded in the binary: served as they are, with
//! a content security policy that lets the page load only its own script,
//! style and API.

use axum::http::header;
use axum::response::IntoResponse;

/// The policy every dashboard file is served with: its own origin only, no
/// inline script, no framing by another site.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// `GET /`: the dashboard page.
pub(crate) async fn index() -> impl IntoResponse {
    file(
        "text/html; charset=utf-8",
        include_str!("../assets/index.html"),
    )
}

/// `GET /assets/app.js`.
pub(crate) async fn script() -> impl IntoResponse {
    file(
        "text/javascript; charset=utf-8",
        include_str!("../assets/app.js"),
    )
}

/// `GET /assets/app.css`.
pub(crate) async fn style() -> impl IntoResponse {
    file("text/css; charset=utf-8", include_str!("../assets/app.css"))
}

/// A page the console renders (the sign-in form), with the same headers.
pub(crate) fn page(body: String) -> impl IntoResponse {
    file("text/html; charset=utf-8", body)
}

fn file(content_type: &'static str, body: impl IntoResponse) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
