//! Who may do what: tokens, the loopback rule, and the same-origin rule for
//! controls.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use subtle::ConstantTimeEq;

use crate::Console;
use crate::api::ApiError;

/// The console's tokens. With neither set, the console is for this machine
/// alone: it listens on loopback only and answers requests naming a
/// loopback host, each with full rights.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Reads everything (`SLUICE_CONSOLE_TOKEN`).
    pub read_token: Option<String>,
    /// Reads and controls (`SLUICE_CONSOLE_ADMIN_TOKEN`).
    pub admin_token: Option<String>,
}

/// Why the console will not listen where asked.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// A non-loopback address without a token would open the store's
    /// controls to the network.
    #[error(
        "refusing to listen on {0} without a token: set SLUICE_CONSOLE_TOKEN and \
         SLUICE_CONSOLE_ADMIN_TOKEN, or listen on 127.0.0.1"
    )]
    NoToken(SocketAddr),
    /// A token shorter than 16 characters is too easy to guess.
    #[error("a console token must be at least 16 characters long")]
    WeakToken,
}

/// Whether a console guarded by `access` may listen on `address`: any
/// loopback address; another only with a token, and every token set at
/// least 16 characters long.
pub fn check_listen(address: SocketAddr, access: &Access) -> Result<(), ListenError> {
    let tokens = [&access.read_token, &access.admin_token];
    if tokens
        .iter()
        .any(|t| t.as_ref().is_some_and(|t| t.len() < 16))
    {
        return Err(ListenError::WeakToken);
    }
    if !address.ip().is_loopback() && tokens.iter().all(|t| t.is_none()) {
        return Err(ListenError::NoToken(address));
    }
    Ok(())
}

impl Access {
    /// What `token` allows and its name, if it is one of the tokens.
    pub(crate) fn right_of(&self, token: &str) -> Option<(Right, &'static str)> {
        let matches = |configured: &Option<String>| {
            configured
                .as_ref()
                .is_some_and(|t| bool::from(t.as_bytes().ct_eq(token.as_bytes())))
        };
        if matches(&self.admin_token) {
            Some((Right::Control, "admin"))
        } else if matches(&self.read_token) {
            Some((Right::Read, "read-only"))
        } else {
            None
        }
    }

    fn open(&self) -> bool {
        self.read_token.is_none() && self.admin_token.is_none()
    }
}

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Right {
    /// Read operations, events and metrics.
    Read,
    /// Also pause, resume, cancel and retry.
    Control,
}

/// The caller of a request, once its credentials are checked: what it may
/// do, the name of the token it showed, and its address when known.
pub(crate) struct Caller {
    right: Right,
    name: &'static str,
    address: Option<SocketAddr>,
    /// The CSRF token of the browser session the request came in (none for
    /// a bearer token or an open console).
    pub(crate) csrf: Option<String>,
}

impl Caller {
    /// Refuses a caller without `right`.
    pub(crate) fn require(&self, right: Right) -> Result<(), ApiError> {
        if self.right >= right {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "the {} token may not change operations; use the admin token",
                self.name
            )))
        }
    }

    /// The name of the token the caller showed (`local` on an open console).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Who made a control, for its event: `console (admin token) from 127.0.0.1:5123`.
    pub(crate) fn describe(&self) -> String {
        match self.address {
            Some(address) => format!("console ({} token) from {address}", self.name),
            None => format!("console ({} token)", self.name),
        }
    }
}

impl FromRequestParts<Console> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, ApiError> {
        let address = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        if parts.method != Method::GET && parts.method != Method::HEAD {
            same_origin(&parts.headers)?;
        }
        let changes = parts.method != Method::GET && parts.method != Method::HEAD;
        let access = &console.access;
        if access.open() {
            if !names_loopback(&parts.headers) {
                return Err(ApiError::forbidden(
                    "without a token the console answers only requests to a loopback host".into(),
                ));
            }
            return Ok(Caller {
                right: Right::Control,
                name: "local",
                address,
                csrf: None,
            });
        }
        // The scheme's name is matched without regard to case (RFC 9110).
        let bearer = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(char::is_whitespace))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        if let Some(token) = bearer {
            let (right, name) = access
                .right_of(token)
                .ok_or_else(|| ApiError::unauthorized("a valid token"))?;
            return Ok(Caller {
                right,
                name,
                address,
                csrf: None,
            });
        }
        let session = console.sessions.find(&parts.headers).ok_or_else(|| {
            ApiError::unauthorized(
                "an `Authorization: Bearer <token>` header or a session from /login",
            )
        })?;
        if changes && !session.csrf_matches(&parts.headers) {
            return Err(ApiError::forbidden(
                "a change from a browser session needs its CSRF token in X-CSRF-Token".into(),
            ));
        }
        Ok(Caller {
            right: session.right,
            name: session.name,
            address,
            csrf: Some(session.csrf),
        })
    }
}

/// Refuses a state-changing request a browser sent from another site: its
/// `Sec-Fetch-Site` is not `same-origin` or `none`, or its `Origin` names
/// another host than its `Host`. (Clients other than browsers send
/// neither header and pass.)
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && !matches!(site, "same-origin" | "none")
    {
        return Err(ApiError::forbidden(format!(
            "a control sent from another site ({site}) is refused"
        )));
    }
    if let Some(origin) = text(header::ORIGIN) {
        let origin_host = origin.split_once("://").map(|(_, host)| host);
        if origin_host.is_none() || origin_host != text(header::HOST) {
            return Err(ApiError::forbidden(format!(
                "a control sent from another origin ({origin}) is refused"
            )));
        }
    }
    Ok(())
}

/// Whether the request's `Host` is a loopback name or address (with any
/// port).
fn names_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(address, _)| address),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_loopback_hosts_are_loopback() {
        for (host, loopback) in [
            ("127.0.0.1:8080", true),
            ("localhost:8080", true),
            ("LOCALHOST", true),
            ("[::1]:8080", true),
            ("127.1.2.3", true),
            ("evil.example:8080", false),
            ("localhost.evil.example", false),
            ("10.0.0.1:8080", false),
            ("[::2]:80", false),
        ] {
            assert_eq!(
                names_loopback(&headers(&[("host", host)])),
                loopback,
                "{host}"
            );
        }
        assert!(!names_loopback(&HeaderMap::new()));
    }

    #[test]
    fn controls_from_another_site_are_refused() {
        let host = ("host", "127.0.0.1:8080");
        for (extra, allowed) in [
            (vec![], true),
            (vec![("origin", "http://127.0.0.1:8080")], true),
            (vec![("sec-fetch-site", "same-origin")], true),
            (vec![("origin", "http://evil.example")], false),
            (vec![("origin", "null")], false),
            (vec![("sec-fetch-site", "cross-site")], false),
            (vec![("sec-fetch-site", "same-site")], false),
        ] {
            let mut pairs = vec![host];
            pairs.extend(extra.iter().cloned());
            assert_eq!(same_origin(&headers(&pairs)).is_ok(), allowed, "{pairs:?}");
        }
    }

    #[test]
    fn listening_beyond_loopback_needs_a_strong_token() {
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let open: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let none = Access::default();
        let strong = Access {
            read_token: None,
            admin_token: Some("x".repeat(16)),
        };
        let weak = Access {
            read_token: Some("short".into()),
            admin_token: Some("x".repeat(16)),
        };
        assert!(check_listen(local, &none).is_ok());
        assert!(matches!(
            check_listen(open, &none),
            Err(ListenError::NoToken(_))
        ));
        assert!(check_listen(open, &strong).is_ok());
        assert!(matches!(
            check_listen(local, &weak),
            Err(ListenError::WeakToken)
        ));
    }
}
