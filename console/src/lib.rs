//! Sluice's operator console: a JSON HTTP API over the store, for people
//! and orchestrators, as an axum [`Router`] that `sluice serve` listens
//! with and an embedding application can mount in its own server.
//!
//! What it guarantees:
//! - **Access.** With no token configured it answers only requests that
//!   name a loopback host (`127.0.0.1`, `localhost`, `[::1]`), and
//!   [`check_listen`] refuses any other address, so no page on another site
//!   reaches it by rebinding a name to this machine. With tokens, every
//!   `/api` and `/metrics` request carries `Authorization: Bearer <token>`
//!   or a browser session's cookie (signed in at `/login`; its
//!   state-changing requests also carry the session's CSRF token): the read
//!   token reads, the admin token also controls; tokens are compared in
//!   constant time.
//! - **Controls only from here.** A state-changing request sent by a
//!   browser from another origin (`Origin` not this host, or
//!   `Sec-Fetch-Site` cross-site) is refused before it is read.
//! - **Refusals change nothing** and are JSON, `{"error": {"code",
//!   "message"}}`, with a stable code: `unauthorized` (401), `forbidden`
//!   (403), `not_found` (404), `not_applicable` (409), `conflict` (409, a
//!   schedule name taken), `bad_request` (400), `method_not_allowed`
//!   (405), `too_large` (413, for a body over 16 KiB on any route),
//!   `unavailable` (503).
//! - **No SQL value and no secret in a response**: an operation is shown
//!   without its arguments, cursors or trace context, an event without its
//!   payload, and an error with the values a database quoted from a row
//!   hidden (its code, constraint, column and table names stay).
//! - **Controls are recorded as events** through the state machine, as the
//!   CLI's are; a pause or cancel carries who made it (the token's name) and
//!   from where in its reason.

mod access;
mod api;
mod assets;
mod enqueue;
mod metrics;
mod redact;
mod routes;
mod schedules;
pub mod schemas;
mod session;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use sluice_operations::Registry;
use sluice_store::Store;
use sluice_telemetry::PrometheusReader;

pub use access::{Access, ListenError, check_listen};

/// The console's OpenAPI 3.1 document, as `GET /openapi.json` serves it:
/// every endpoint, and the shape of every JSON answer in its component
/// schemas ([`schemas::check`] reads a value against them).
pub fn openapi_document() -> serde_json::Value {
    routes::document()
}

/// The console over one store.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use sluice_console::{Access, Console};
/// use sluice_store::Store;
///
/// let store = Store::connect("sqlite:sluice.sqlite").await?;
/// // Mounted in the application's own axum router, under /sluice.
/// let console = axum::Router::new().nest("/sluice", Console::new(store, Access::default()).router());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, console).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Console {
    store: Store,
    access: Arc<Access>,
    sessions: Arc<session::Sessions>,
    registry: Arc<Registry>,
    instruments: Option<PrometheusReader>,
}

impl Console {
    /// A console reading and controlling `store`, guarded by `access`.
    pub fn new(store: Store, access: Access) -> Self {
        Console {
            store,
            access: Arc::new(access),
            sessions: Arc::default(),
            registry: Arc::new(Registry::with_builtins()),
            instruments: None,
        }
    }

    /// The kinds `POST /api/operations` enqueues (the built-in ones by
    /// default): an embedding application passes its own registry.
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.registry = Arc::new(registry);
        self
    }

    /// Adds a runtime's instruments to `/metrics` (rows, batch and
    /// sub-batch durations, batch size, throttle state), read from `reader`
    /// as installed in the meter provider the runtime records into: a
    /// worker serving the console (`sluice run --console`) passes its own.
    pub fn with_instruments(mut self, reader: PrometheusReader) -> Self {
        self.instruments = Some(reader);
        self
    }

    /// The routes: the dashboard at `/` (its files under `/assets`),
    /// `/healthz`, `/readyz`, `/metrics`, the API under `/api`, and its
    /// OpenAPI document at `/openapi.json`, generated from the same table
    /// the routes are built from. Request
    /// bodies are capped at 16 KiB. Serve it with connection info
    /// (`into_make_service_with_connect_info::<SocketAddr>()`) so controls
    /// record the caller's address.
    pub fn router(self) -> Router {
        routes::router()
            .fallback(api::not_found)
            .layer(DefaultBodyLimit::max(api::BODY_LIMIT))
            .layer(axum::middleware::from_fn(api::guard))
            .with_state(self)
    }

    /// Serves [`Console::router`] on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await
    }
}
