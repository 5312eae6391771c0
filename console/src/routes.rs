//! Every endpoint once, as data: the router is built from this table and
//! `GET /openapi.json` is generated from it, so the document cannot list an
//! endpoint the console lacks or miss one it has.

use axum::Router;
use axum::routing::{MethodRouter, delete, get, post};
use serde_json::{Map, Value, json};

use crate::schemas::{self, Returns};
use crate::{Console, api, assets, enqueue, metrics, schedules, session};

/// One endpoint: how it is reached, what it does, and who may call it.
pub(crate) struct Endpoint {
    /// `get`, `post` or `delete`.
    method: &'static str,
    /// The path, `{name}` for a path parameter.
    path: &'static str,
    /// What it does, for the document.
    summary: &'static str,
    /// The query parameters it reads: name and meaning.
    query: &'static [(&'static str, &'static str)],
    /// What a caller needs: `None` (anyone), a read or an admin credential.
    needs: Needs,
    /// Its answers besides the refusals every guarded endpoint shares.
    answers: &'static [(u16, &'static str)],
    /// The JSON its successful answer holds.
    pub(crate) returns: Returns,
    /// The handler.
    handler: fn() -> MethodRouter<Console>,
}

/// What an endpoint's caller must show.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Nothing: a page, an asset, a probe.
    Nothing,
    /// The read or admin token (or a session), or an open console.
    Read,
    /// The admin token (or an admin session with its CSRF token), or an
    /// open console.
    Admin,
}

/// The console's endpoints, in the document's order.
pub(crate) const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        method: "get",
        path: "/",
        summary: "The dashboard page.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "HTML")],
        returns: Returns::Other,
        handler: || get(assets::index),
    },
    Endpoint {
        method: "get",
        path: "/assets/app.js",
        summary: "The dashboard's script.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "JavaScript")],
        returns: Returns::Other,
        handler: || get(assets::script),
    },
    Endpoint {
        method: "get",
        path: "/assets/app.css",
        summary: "The dashboard's style.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "CSS")],
        returns: Returns::Other,
        handler: || get(assets::style),
    },
    Endpoint {
        method: "get",
        path: "/login",
        summary: "The sign-in form.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "HTML")],
        returns: Returns::Other,
        handler: || get(session::form),
    },
    Endpoint {
        method: "post",
        path: "/login",
        summary: "Sign in with a token (form field `token`): a session cookie.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[
            (303, "signed in: to the dashboard"),
            (401, "not a token: the form again"),
        ],
        returns: Returns::Other,
        handler: || post(session::sign_in),
    },
    Endpoint {
        method: "post",
        path: "/logout",
        summary: "End the session.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(303, "to the sign-in form")],
        returns: Returns::Other,
        handler: || post(session::sign_out),
    },
    Endpoint {
        method: "get",
        path: "/openapi.json",
        summary: "This document.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "OpenAPI 3.1")],
        returns: Returns::Other,
        handler: || get(openapi),
    },
    Endpoint {
        method: "get",
        path: "/healthz",
        summary: "The process answers.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "ok")],
        returns: Returns::Other,
        handler: || get(api::healthz),
    },
    Endpoint {
        method: "get",
        path: "/readyz",
        summary: "The store answers a query.",
        query: &[],
        needs: Needs::Nothing,
        answers: &[(200, "ready"), (503, "the store cannot be reached")],
        returns: Returns::Other,
        handler: || get(api::readyz),
    },
    Endpoint {
        method: "get",
        path: "/metrics",
        summary: "Operations by status and rows done by kind, in Prometheus' text format.",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "Prometheus text")],
        returns: Returns::Other,
        handler: || get(metrics::metrics),
    },
    Endpoint {
        method: "get",
        path: "/api/session",
        summary: "Who the caller is: the token's name, whether it may control, a session's CSRF token.",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "{name, controls, csrf}")],
        returns: Returns::One("Session"),
        handler: || get(api::session),
    },
    Endpoint {
        method: "get",
        path: "/api/operations",
        summary: "Operations, oldest first.",
        query: &[
            ("status", "only this status"),
            ("kind", "only this kind"),
            ("limit", "at most this many, 1 to 1000 (100)"),
            ("order", "oldest (by default) or newest first"),
            ("after", "only past this id in that order: the next page"),
        ],
        needs: Needs::Read,
        answers: &[(200, "operations")],
        returns: Returns::Many("Operation"),
        handler: || get(api::list),
    },
    Endpoint {
        method: "post",
        path: "/api/operations",
        summary: "Enqueue an operation: {kind, arguments, options}, checked as `sluice enqueue` checks it.",
        query: &[],
        needs: Needs::Admin,
        answers: &[
            (201, "enqueued"),
            (200, "the same operation is already active"),
        ],
        returns: Returns::One("Enqueued"),
        handler: || post(enqueue::create),
    },
    Endpoint {
        method: "post",
        path: "/api/operations/{id}/revert",
        summary: "Enqueue the revert of an operation run with undo: {force, batch_size, sub_batch_size}, each optional, as `sluice revert` takes them.",
        query: &[],
        needs: Needs::Admin,
        answers: &[
            (201, "the revert enqueued"),
            (200, "a revert of it is already active"),
        ],
        returns: Returns::One("Enqueued"),
        handler: || post(enqueue::revert_one),
    },
    Endpoint {
        method: "get",
        path: "/api/operations/{id}",
        summary: "One operation (without its arguments and cursors).",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "the operation")],
        returns: Returns::One("Operation"),
        handler: || get(api::show),
    },
    Endpoint {
        method: "get",
        path: "/api/operations/{id}/events",
        summary: "Its event log, oldest first (counts and reasons, no key values).",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "events")],
        returns: Returns::Many("Event"),
        handler: || get(api::events),
    },
    Endpoint {
        method: "get",
        path: "/api/operations/{id}/batches",
        summary: "Its batches, in order (without their bounds).",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "batches")],
        returns: Returns::Many("Batch"),
        handler: || get(api::batches),
    },
    Endpoint {
        method: "post",
        path: "/api/operations/{id}/{action}",
        summary: "pause, resume, cancel or retry one operation.",
        query: &[],
        needs: Needs::Admin,
        answers: &[(200, "{action, changed, skipped}")],
        returns: Returns::One("Controlled"),
        handler: || post(api::control_one),
    },
    Endpoint {
        method: "post",
        path: "/api/kinds/{kind}/{action}",
        summary: "The same for every operation of a kind (pause and resume are its kill switch).",
        query: &[],
        needs: Needs::Admin,
        answers: &[(200, "{action, changed, skipped}")],
        returns: Returns::One("Controlled"),
        handler: || post(api::control_kind),
    },
    Endpoint {
        method: "post",
        path: "/api/all/{action}",
        summary: "The same for every operation (and the global switch).",
        query: &[],
        needs: Needs::Admin,
        answers: &[(200, "{action, changed, skipped}")],
        returns: Returns::One("Controlled"),
        handler: || post(api::control_all),
    },
    Endpoint {
        method: "get",
        path: "/api/schedules",
        summary: "Schedules with their next fire (without their arguments).",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "schedules")],
        returns: Returns::Many("Schedule"),
        handler: || get(api::schedules),
    },
    Endpoint {
        method: "post",
        path: "/api/schedules",
        summary: "Add a schedule: {name, kind, arguments, cron, time_zone, jitter_ms, options}, checked as `sluice schedule add` checks it.",
        query: &[],
        needs: Needs::Admin,
        answers: &[(201, "the schedule as stored")],
        returns: Returns::One("Schedule"),
        handler: || post(schedules::add),
    },
    Endpoint {
        method: "delete",
        path: "/api/schedules/{name}",
        summary: "Remove a schedule.",
        query: &[],
        needs: Needs::Admin,
        answers: &[(200, "{removed}")],
        returns: Returns::One("Removed"),
        handler: || delete(schedules::remove),
    },
    Endpoint {
        method: "post",
        path: "/api/schedules/{name}/{action}",
        summary: "enable or disable a schedule.",
        query: &[],
        needs: Needs::Admin,
        answers: &[(200, "{schedule, enabled}")],
        returns: Returns::One("ScheduleEnabled"),
        handler: || post(schedules::switch),
    },
    Endpoint {
        method: "post",
        path: "/api/prune",
        summary: "Delete the batch records of operations that ended longer ago than {older_than} (event logs are kept).",
        query: &[],
        needs: Needs::Admin,
        answers: &[(200, "{batches_deleted}")],
        returns: Returns::One("Pruned"),
        handler: || post(schedules::prune),
    },
    Endpoint {
        method: "get",
        path: "/api/switches",
        summary: "The kill switches set.",
        query: &[],
        needs: Needs::Read,
        answers: &[(200, "switches")],
        returns: Returns::Many("Switch"),
        handler: || get(api::switches),
    },
];

/// The router with every endpoint of [`ENDPOINTS`].
pub(crate) fn router() -> Router<Console> {
    ENDPOINTS.iter().fold(Router::new(), |router, e| {
        router.route(e.path, (e.handler)())
    })
}

/// `GET /openapi.json`: the OpenAPI 3.1 document of [`ENDPOINTS`].
pub(crate) async fn openapi() -> axum::Json<Value> {
    axum::Json(document())
}

/// The document itself.
pub(crate) fn document() -> Value {
    let mut paths = Map::new();
    for endpoint in ENDPOINTS {
        let item = paths
            .entry(endpoint.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[endpoint.method] = operation(endpoint);
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Sluice console", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer",
                    "description": "SLUICE_CONSOLE_TOKEN reads; SLUICE_CONSOLE_ADMIN_TOKEN also controls"},
                "session": {"type": "apiKey", "in": "cookie", "name": session::COOKIE,
                    "description": "a browser session from POST /login; changes also send X-CSRF-Token"}
            },
            "schemas": schemas::components(),
        }
    })
}

/// One endpoint as an OpenAPI operation.
fn operation(endpoint: &Endpoint) -> Value {
    let mut parameters: Vec<Value> = endpoint
        .path
        .split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    parameters.extend(endpoint.query.iter().map(|(name, meaning)| {
        json!({"name": name, "in": "query", "required": false, "description": meaning, "schema": {"type": "string"}})
    }));
    let mut responses = Map::new();
    for (status, meaning) in endpoint.answers {
        let mut answer = json!({"description": meaning});
        if let (200..=299, Some(schema)) = (status, endpoint.returns.schema()) {
            answer["content"] = json!({"application/json": {"schema": schema}});
        }
        responses.insert(status.to_string(), answer);
    }
    let error = json!({"description": "refused; nothing changed",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    if endpoint.needs != Needs::Nothing {
        for status in ["400", "401", "403", "404"] {
            responses.insert(status.to_owned(), error.clone());
        }
    }
    if endpoint.needs == Needs::Admin {
        responses.insert("409".to_owned(), error);
    }
    let mut operation =
        json!({"summary": endpoint.summary, "parameters": parameters, "responses": responses});
    if endpoint.needs != Needs::Nothing {
        operation["security"] = json!([{"token": []}, {"session": []}]);
    }
    operation
}
