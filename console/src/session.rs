//! Browser sessions for a console with tokens: an operator signs in once
//! with a token and the browser holds an HTTP-only, `SameSite=Strict`
//! cookie naming the session; every state-changing request also carries
//! the session's CSRF token in `X-CSRF-Token`, which only the console's own
//! page can read (from `GET /api/session`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::Console;
use crate::access::Right;

/// The cookie that names a session.
pub(crate) const COOKIE: &str = "sluice_session";

/// The header a session's state-changing requests carry its CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// How long a session lasts from sign-in.
const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// At most this many sessions are kept; signing in beyond drops the oldest.
const MAX_SESSIONS: usize = 1_000;

/// The open sessions, in memory: a restart signs everyone out.
#[derive(Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Session>>,
}

/// One signed-in browser.
#[derive(Clone)]
pub(crate) struct Session {
    /// What its token allows.
    pub(crate) right: Right,
    /// The token's name.
    pub(crate) name: &'static str,
    /// The token its state-changing requests must carry.
    pub(crate) csrf: String,
    /// When it ends.
    expires: Instant,
}

impl Sessions {
    /// Opens a session for a token with `right`; its id for the cookie.
    fn open(&self, right: Right, name: &'static str) -> String {
        let id = random_token();
        let now = Instant::now();
        let mut open = self.open.lock().expect("sessions lock");
        open.retain(|_, s| s.expires > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(id, _)| id.clone())
        {
            open.remove(&oldest);
        }
        let session = Session {
            right,
            name,
            csrf: random_token(),
            expires: now + LIFETIME,
        };
        open.insert(id.clone(), session);
        id
    }

    /// The live session the request's cookie names, if any.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers)?;
        let open = self.open.lock().expect("sessions lock");
        open.get(id).filter(|s| s.expires > Instant::now()).cloned()
    }

    fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers) {
            self.open.lock().expect("sessions lock").remove(id);
        }
    }
}

impl Session {
    /// Whether `headers` carry this session's CSRF token.
    pub(crate) fn csrf_matches(&self, headers: &HeaderMap) -> bool {
        headers
            .get(CSRF_HEADER)
            .is_some_and(|shown| bool::from(shown.as_bytes().ct_eq(self.csrf.as_bytes())))
    }
}

/// `GET /login`: the sign-in form.
pub(crate) async fn form() -> Response {
    login_page(StatusCode::OK, "")
}

/// What the sign-in form posts.
#[derive(Deserialize)]
pub(crate) struct SignIn {
    token: String,
}

/// `POST /login`: a valid token opens a session and goes to the dashboard;
/// another shows the form again, 401.
pub(crate) async fn sign_in(
    State(console): State<Console>,
    Form(sign_in): Form<SignIn>,
) -> Response {
    let Some((right, name)) = console.access.right_of(&sign_in.token) else {
        return login_page(StatusCode::UNAUTHORIZED, "That token is not valid.");
    };
    let id = console.sessions.open(right, name);
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        LIFETIME.as_secs()
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

/// `POST /logout`: ends the session and clears the cookie.
pub(crate) async fn sign_out(State(console): State<Console>, headers: HeaderMap) -> Response {
    console.sessions.close(&headers);
    let cookie = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

/// The sign-in page with `message` (fixed text, never the request's).
fn login_page(status: StatusCode, message: &'static str) -> Response {
    let page = include_str!("../assets/login.html").replace("<!--message-->", message);
    (status, crate::assets::page(page)).into_response()
}

/// The session id in the request's cookie.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// 32 random bytes from the system's generator, in hex.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
