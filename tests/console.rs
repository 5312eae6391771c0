//! The operator console's HTTP API against a real store: every endpoint's
//! answer, each refusal with its status and code, and nothing changed in
//! the store by a refused request. `sluice serve` refuses to listen beyond
//! loopback without a token, and serves on loopback.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Stdio;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{TestDb, create_counted_items, enqueue_increment, sluice};
use serde_json::Value;
use sluice::console::{Access, Console};
use sluice_store::BatchStatus;
use tower::ServiceExt as _;

for_each_backend!(
    the_api_reads_and_controls_operations_and_refuses_what_does_not_apply,
    tokens_decide_who_reads_and_who_controls,
    a_browser_session_signs_in_with_a_token_and_controls_only_with_its_csrf_token,
    the_api_enqueues_with_the_checks_of_the_command_line,
    the_openapi_document_lists_the_endpoints_the_console_answers,
    schedules_and_retention_are_managed_through_the_api,
    without_a_token_only_this_machine_and_this_origin_may_control,
    a_failed_operation_s_errors_show_no_row_value,
    every_refusal_on_every_route_is_json_and_every_body_is_capped,
    an_undone_operation_is_reverted_through_the_api,
);

/// A request to the console and its answer: status and body (JSON when it
/// parses, else a string).
struct Call<'a> {
    console: &'a Console,
    headers: Vec<(&'static str, String)>,
}

impl<'a> Call<'a> {
    fn new(console: &'a Console) -> Self {
        Call {
            console,
            headers: vec![("host", "127.0.0.1:8080".into())],
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.to_owned()));
        self
    }

    fn token(self, token: &str) -> Self {
        self.header("authorization", &format!("Bearer {token}"))
    }

    async fn get(self, path: &str) -> (StatusCode, Value) {
        self.send("GET", path).await
    }

    async fn post(self, path: &str) -> (StatusCode, Value) {
        self.send("POST", path).await
    }

    async fn send(self, method: &str, path: &str) -> (StatusCode, Value) {
        self.send_body(method, path, Body::empty()).await
    }

    /// POSTs `body` as JSON.
    async fn post_json(self, path: &str, body: String) -> (StatusCode, Value) {
        self.header("content-type", "application/json")
            .send_body("POST", path, Body::from(body))
            .await
    }

    async fn send_body(self, method: &str, path: &str, body: Body) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        let response = self
            .console
            .clone()
            .router()
            .oneshot(request.body(body).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if body.is_object() || body.is_array() {
            fits_the_document(method, path, status, &body);
        }
        (status, body)
    }
}

/// Panics unless `body`, a JSON answer of `status` to `method path`, has
/// the shape the OpenAPI document gives that answer (a refusal the route
/// does not list: the `Error` shape every refusal has).
fn fits_the_document(method: &str, path: &str, status: StatusCode, body: &Value) {
    let document = sluice::console::openapi_document();
    let components = document["components"]["schemas"].as_object().unwrap();
    let path = path.split('?').next().unwrap();
    let segments: Vec<&str> = path.split('/').collect();
    // The route with the most literal segments that matches the path.
    let route = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(template, item)| {
            let parts: Vec<&str> = template.split('/').collect();
            let matches = parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(part, segment)| part.starts_with('{') || part == segment);
            let literal = parts.iter().filter(|p| !p.starts_with('{')).count();
            (matches && item.get(method.to_lowercase()).is_some()).then_some((literal, item))
        })
        .max_by_key(|(literal, _)| *literal)
        .map(|(_, item)| &item[method.to_lowercase()]);
    let documented = route
        .and_then(|operation| operation["responses"].get(status.as_str()))
        .and_then(|answer| answer.pointer("/content/application~1json/schema"));
    let error = serde_json::json!({"$ref": "#/components/schemas/Error"});
    let schema = match documented {
        Some(schema) => schema,
        None if !status.is_success() => &error,
        // The document itself.
        None if path == "/openapi.json" => return,
        None => {
            panic!("{method} {path} answered {status} with JSON the document does not give: {body}")
        }
    };
    if let Err(difference) = sluice::console::schemas::check(body, schema, components) {
        panic!("{method} {path} answered {status} off its documented shape: {difference}\n{body}");
    }
}

/// The error code of a refusal.
fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(not an error)")
}

/// `items` with an update of group 1 enqueued; its id.
async fn one_operation(db: &TestDb) -> i64 {
    create_counted_items(db, 50).await;
    let enqueued = enqueue_increment(db, &["--where", "grp = 1"]);
    enqueued["id"].as_i64().expect("an id")
}

/// The operation's status and event count, as the store has them.
async fn stored(db: &TestDb, id: i64) -> (String, i64) {
    let record = db.store.operation(id).await.unwrap();
    (
        record.state.status.as_str().to_owned(),
        record.state.last_seq,
    )
}

async fn the_api_reads_and_controls_operations_and_refuses_what_does_not_apply(db: &TestDb) {
    let id = one_operation(db).await;
    let console = Console::new(db.store.clone(), Access::default());
    let call = || Call::new(&console);

    let (status, list) = call().get("/api/operations").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[0]["status"], "pending");
    assert_eq!(list[0]["kind"], "update-in-batches");
    let (_, filtered) = call().get("/api/operations?status=running").await;
    assert_eq!(filtered, Value::Array(vec![]));
    let (_, by_kind) = call()
        .get("/api/operations?kind=update-in-batches&limit=5")
        .await;
    assert_eq!(by_kind.as_array().map(Vec::len), Some(1));

    let (status, shown) = call().get(&format!("/api/operations/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (shown["table"].as_str(), shown["health"].as_str()),
        (Some("items"), Some("normal"))
    );
    let text = shown.to_string();
    for value in ["counter + 1", "grp = 1", "arguments", "cursor"] {
        assert!(!text.contains(value), "{value} shown: {text}");
    }
    let (status, events) = call().get(&format!("/api/operations/{id}/events")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events[0]["kind"], "created");

    let (status, paused) = call().post(&format!("/api/operations/{id}/pause")).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(
        (paused["action"].as_str(), &paused["changed"]),
        (Some("pause"), &serde_json::json!([id]))
    );
    let (_, events) = call().get(&format!("/api/operations/{id}/events")).await;
    let reason = events.as_array().unwrap().last().unwrap()["reason"].to_string();
    assert!(reason.contains("console (local token)"), "{reason}");

    // Refusals: each with its status and code, and nothing changed.
    let before = stored(db, id).await;
    assert_eq!(before.0, "paused");
    for (method, path, status, expected) in [
        (
            "POST",
            format!("/api/operations/{id}/pause"),
            StatusCode::CONFLICT,
            "not_applicable",
        ),
        (
            "POST",
            format!("/api/operations/{id}/retry"),
            StatusCode::CONFLICT,
            "not_applicable",
        ),
        (
            "POST",
            format!("/api/operations/{id}/explode"),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/api/operations/999999/cancel".to_owned(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/api/operations/x1/cancel".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/api/operations/999999".to_owned(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "GET",
            "/api/operations/-3/events".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/api/operations?status=sleeping".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/api/operations?limit=0".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/api/operations?limit=many".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/api/operations?order=id".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/api/nothing".to_owned(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "DELETE",
            format!("/api/operations/{id}"),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ] {
        let (got, body) = call().send(method, &path).await;
        assert_eq!(
            (got, code(&body)),
            (status, expected),
            "{method} {path}: {body}"
        );
        assert!(
            code(&body) == "(not an error)"
                || body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    assert_eq!(
        stored(db, id).await,
        before,
        "a refusal changed the operation"
    );

    // A kind nobody knows is a typo: refused, naming it, and no switch is
    // set; a resume of it is taken (a switch for a kind since gone can
    // still be lifted).
    for action in ["pause", "cancel", "retry"] {
        let (status, body) = call()
            .post(&format!("/api/kinds/update-in-batchez/{action}"))
            .await;
        assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("unknown kind `update-in-batchez`")),
            "{body}"
        );
    }
    assert_eq!(call().get("/api/switches").await.1, serde_json::json!([]));
    assert_eq!(
        call().post("/api/kinds/update-in-batchez/resume").await.0,
        StatusCode::OK
    );
    assert_eq!(
        stored(db, id).await,
        before,
        "a refused kind control changed the operation"
    );

    let (status, resumed) = call().post("/api/kinds/update-in-batches/resume").await;
    assert_eq!(
        (status, &resumed["changed"]),
        (StatusCode::OK, &serde_json::json!([id]))
    );
    let (status, cancelled) = call().post("/api/all/cancel").await;
    assert_eq!(
        (status, &cancelled["changed"]),
        (StatusCode::OK, &serde_json::json!([id]))
    );
    assert_eq!(stored(db, id).await.0, "cancelled");

    let (status, metrics) = call().get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(
        metrics.contains("sluice_operations{status=\"cancelled\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_operations{status=\"running\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_rows_done{kind=\"update-in-batches\"} 0"),
        "{metrics}"
    );
    assert_eq!(call().get("/healthz").await.0, StatusCode::OK);
    assert_eq!(call().get("/readyz").await.0, StatusCode::OK);
}

async fn tokens_decide_who_reads_and_who_controls(db: &TestDb) {
    let id = one_operation(db).await;
    let read = "read-token-0123456789";
    let admin = "admin-token-0123456789";
    let console = Console::new(
        db.store.clone(),
        Access {
            read_token: Some(read.into()),
            admin_token: Some(admin.into()),
        },
    );
    let call = || Call::new(&console).header("host", "sluice.internal:8080");
    let pause = format!("/api/operations/{id}/pause");
    let before = stored(db, id).await;
    for (request, status, expected) in [
        (call(), StatusCode::UNAUTHORIZED, "unauthorized"),
        (
            call().token("read-token-012345678"),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            call().header("authorization", admin),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (call().token(read), StatusCode::FORBIDDEN, "forbidden"),
    ] {
        let (got, body) = request.post(&pause).await;
        assert_eq!((got, code(&body)), (status, expected), "{body}");
    }
    for path in ["/api/operations", "/metrics"] {
        assert_eq!(call().get(path).await.0, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            call().token(read).get(path).await.0,
            StatusCode::OK,
            "{path}"
        );
    }
    assert_eq!(call().get("/healthz").await.0, StatusCode::OK);
    assert_eq!(
        stored(db, id).await,
        before,
        "a refused control changed the operation"
    );

    let (status, body) = call().token(admin).post(&pause).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, events) = call()
        .token(read)
        .get(&format!("/api/operations/{id}/events"))
        .await;
    let reason = events.as_array().unwrap().last().unwrap()["reason"].to_string();
    assert!(reason.contains("console (admin token)"), "{reason}");
}

/// Signs in at `/login` with `token`: the status and the session cookie
/// (`name=value`) it set, if any.
async fn sign_in(console: &Console, token: &str) -> (StatusCode, Option<String>) {
    let request = Request::builder()
        .method("POST")
        .uri("/login")
        .header("host", "sluice.internal:8080")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={token}")))
        .unwrap();
    let response = console.clone().router().oneshot(request).await.unwrap();
    let cookie = response
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_owned());
    if let Some(cookie) = &cookie {
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
    }
    let pair = cookie.map(|c| c.split(';').next().unwrap().to_owned());
    (response.status(), pair)
}

async fn a_browser_session_signs_in_with_a_token_and_controls_only_with_its_csrf_token(
    db: &TestDb,
) {
    let id = one_operation(db).await;
    let admin = "admin-token-0123456789";
    let console = Console::new(
        db.store.clone(),
        Access {
            read_token: Some("read-token-0123456789".into()),
            admin_token: Some(admin.into()),
        },
    );
    let (status, cookie) = sign_in(&console, "not-a-token-at-all").await;
    assert_eq!((status, cookie), (StatusCode::UNAUTHORIZED, None));
    let (status, cookie) = sign_in(&console, admin).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = cookie.expect("a session cookie");
    let call = || {
        Call::new(&console)
            .header("host", "sluice.internal:8080")
            .header("cookie", &cookie)
    };

    let (status, who) = call().get("/api/session").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (who["name"].as_str(), who["controls"].as_bool()),
        (Some("admin"), Some(true))
    );
    let csrf = who["csrf"].as_str().expect("a CSRF token").to_owned();
    assert_eq!(csrf.len(), 64);
    assert_eq!(call().get("/api/operations").await.0, StatusCode::OK);

    let pause = format!("/api/operations/{id}/pause");
    let before = stored(db, id).await;
    let last = if csrf.ends_with('0') { '1' } else { '0' };
    let wrong = format!("{}{last}", &csrf[..63]);
    for request in [call(), call().header("x-csrf-token", &wrong)] {
        let (status, body) = request.post(&pause).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "forbidden"),
            "{body}"
        );
    }
    let forged = Call::new(&console)
        .header("host", "sluice.internal:8080")
        .header("cookie", "sluice_session=0123")
        .header("x-csrf-token", &csrf);
    assert_eq!(forged.post(&pause).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        stored(db, id).await,
        before,
        "a refused control changed the operation"
    );

    let (status, body) = call().header("x-csrf-token", &csrf).post(&pause).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored(db, id).await.0, "paused");

    assert_eq!(call().post("/logout").await.0, StatusCode::SEE_OTHER);
    assert_eq!(
        call().get("/api/operations").await.0,
        StatusCode::UNAUTHORIZED
    );
}

async fn the_api_enqueues_with_the_checks_of_the_command_line(db: &TestDb) {
    create_counted_items(db, 50).await;
    let console = Console::new(db.store.clone(), Access::default());
    let call = || Call::new(&console);
    let update = |arguments: Value| {
        serde_json::json!({"kind": "update-in-batches", "arguments": arguments,
            "options": {"batch_size": 10, "sub_batch_size": 5}})
        .to_string()
    };
    let good = serde_json::json!({"table": "items", "key": "id",
        "set": "counter = counter + 1", "where": "grp = 1"});

    let count = || async { db.store.list(&Default::default()).await.unwrap().len() };
    let too_big = format!("{{\"kind\": \"{}\"}}", "x".repeat(20_000));
    for (body, status, expected, says) in [
        ("{".to_owned(), StatusCode::BAD_REQUEST, "bad_request", "JSON"),
        (r#"{"kind": "update-in-batches"}"#.to_owned(), StatusCode::BAD_REQUEST, "bad_request", "arguments"),
        (r#"{"kind": "drop-table", "arguments": {}}"#.to_owned(), StatusCode::BAD_REQUEST, "bad_request", "drop-table"),
        (update(serde_json::json!({"table": "nope", "key": "id", "set": "counter = 1"})), StatusCode::BAD_REQUEST, "bad_request", "nope"),
        (update(serde_json::json!({"table": "items; DROP TABLE items", "key": "id", "set": "counter = 1"})), StatusCode::BAD_REQUEST, "bad_request", "items; DROP"),
        (update(serde_json::json!({"table": "items", "key": "id", "set": "counter = 1; DELETE FROM items"})), StatusCode::BAD_REQUEST, "bad_request", "SET"),
        (update(serde_json::json!({"table": "items", "key": "id", "set": "id = id + 1"})), StatusCode::BAD_REQUEST, "bad_request", "key"),
        // A misspelt condition is refused, not dropped (it would update every row).
        (update(serde_json::json!({"table": "items", "key": "id", "set": "counter = 1", "condition": "grp = 1"})), StatusCode::BAD_REQUEST, "bad_request", "condition"),
        (serde_json::json!({"kind": "delete-aged-rows", "arguments": {"table": "items", "column": "counter", "older_than": "1d", "where": "grp = 1"}}).to_string(), StatusCode::BAD_REQUEST, "bad_request", "where"),
        (serde_json::json!({"kind": "update-in-batches", "arguments": good, "options": {"batch_size": 0}}).to_string(), StatusCode::BAD_REQUEST, "bad_request", "batch"),
        (serde_json::json!({"kind": "update-in-batches", "arguments": good, "options": {"sql": "x"}}).to_string(), StatusCode::BAD_REQUEST, "bad_request", "sql"),
        (too_big, StatusCode::PAYLOAD_TOO_LARGE, "too_large", "16 KiB"),
    ] {
        let (got, answer) = call().post_json("/api/operations", body.clone()).await;
        assert_eq!((got, code(&answer)), (status, expected), "{body:.80}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body:.80}: {message}");
    }
    assert_eq!(count().await, 0, "a refused enqueue wrote an operation");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 50);

    let (status, created) = call()
        .post_json("/api/operations", update(good.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        (
            created["status"].as_str(),
            created["estimated_rows"].as_i64()
        ),
        (Some("pending"), Some(25))
    );
    let (status, again) = call().post_json("/api/operations", update(good)).await;
    assert_eq!(
        (status, &again["id"], &again["created"]),
        (StatusCode::OK, &created["id"], &Value::Bool(false))
    );
    assert_eq!(count().await, 1);

    // Pages, oldest or newest first.
    let other = serde_json::json!({"table": "items", "key": "id", "set": "counter = 2"});
    let (_, second) = call().post_json("/api/operations", update(other)).await;
    let ids = |list: &Value| -> Vec<i64> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_i64().unwrap())
            .collect()
    };
    let (first, second) = (
        created["id"].as_i64().unwrap(),
        second["id"].as_i64().unwrap(),
    );
    assert_eq!(ids(&call().get("/api/operations").await.1), [first, second]);
    assert_eq!(
        ids(&call().get("/api/operations?order=newest").await.1),
        [second, first]
    );
    let page = format!("/api/operations?order=newest&limit=1&after={second}");
    assert_eq!(ids(&call().get(&page).await.1), [first]);
    let page = format!("/api/operations?limit=1&after={first}");
    assert_eq!(ids(&call().get(&page).await.1), [second]);
    let (status, body) = call().get("/api/operations?order=sideways").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_request")
    );

    // `undo` as the command line's --undo: the undo table comes with it.
    let undone = serde_json::json!({"table": "items", "key": "id", "set": "counter = 3",
        "undo": true});
    let (status, created) = call().post_json("/api/operations", update(undone)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_i64().unwrap();
    let arguments = db.store.operation(id).await.unwrap().state.arguments;
    let arguments: Value = serde_json::from_str(&arguments).unwrap();
    let undo_table = arguments["undo_table"].as_str().expect("an undo table");
    assert_eq!(arguments["undo_columns"], serde_json::json!(["counter"]));
    db.scalar(&format!("SELECT COUNT(*) FROM {undo_table}"))
        .await;
}

async fn schedules_and_retention_are_managed_through_the_api(db: &TestDb) {
    create_counted_items(db, 10).await;
    let console = Console::new(db.store.clone(), Access::default());
    let call = || Call::new(&console);
    let schedule = |name: &str, cron: &str, zone: &str| {
        serde_json::json!({"name": name, "kind": "update-in-batches", "cron": cron, "time_zone": zone,
            "arguments": {"table": "items", "key": "id", "set": "counter = counter + 1"}})
        .to_string()
    };
    for (body, status, expected, says) in [
        (
            schedule("bad name!", "0 3 * * *", "UTC"),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "bad name!",
        ),
        (
            schedule("nightly", "0 3 * *", "UTC"),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "cron",
        ),
        (
            schedule("nightly", "0 3 30 2 *", "UTC"),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "never",
        ),
        (
            schedule("nightly", "0 3 * * *", "Mars/Olympus"),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Mars/Olympus",
        ),
        (
            schedule("nightly", "0 3 * * *", "UTC").replace("update-in-batches", "truncate"),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "truncate",
        ),
    ] {
        let (got, answer) = call().post_json("/api/schedules", body.clone()).await;
        assert_eq!((got, code(&answer)), (status, expected), "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message}");
    }
    assert_eq!(call().get("/api/schedules").await.1, Value::Array(vec![]));

    let nightly = schedule("nightly", "0 3 * * *", "Europe/Paris");
    let (status, added) = call().post_json("/api/schedules", nightly.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    assert_eq!(
        (added["name"].as_str(), added["enabled"].as_bool()),
        (Some("nightly"), Some(true))
    );
    assert!(added["next_fire_at"].as_i64().is_some());
    let (status, taken) = call().post_json("/api/schedules", nightly).await;
    assert_eq!((status, code(&taken)), (StatusCode::CONFLICT, "conflict"));
    let (status, _) = call().post("/api/schedules/nightly/disable").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call().get("/api/schedules").await.1[0]["enabled"], false);
    assert_eq!(
        call().post("/api/schedules/nightly/enable").await.0,
        StatusCode::OK
    );
    assert_eq!(
        call().post("/api/schedules/nightly/snooze").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call().post("/api/schedules/weekly/enable").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call().send("DELETE", "/api/schedules/nightly").await.0,
        StatusCode::OK
    );
    let (status, gone) = call().send("DELETE", "/api/schedules/nightly").await;
    assert_eq!((status, code(&gone)), (StatusCode::NOT_FOUND, "not_found"));

    let prune = |body: &str| call().post_json("/api/prune", body.to_owned());
    assert_eq!(
        prune(r#"{"older_than": "soon"}"#).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        prune(r#"{"older_than": "7d", "chunk": 0}"#).await.0,
        StatusCode::BAD_REQUEST
    );
    let (status, pruned) = prune(r#"{"older_than": "7d"}"#).await;
    assert_eq!(
        (status, &pruned["batches_deleted"]),
        (StatusCode::OK, &serde_json::json!(0))
    );
}

/// Every method and path in `/openapi.json` reaches an endpoint (not the
/// fallback's "no endpoint"), and one the document lacks does not.
async fn the_openapi_document_lists_the_endpoints_the_console_answers(db: &TestDb) {
    let id = one_operation(db).await;
    let console = Console::new(db.store.clone(), Access::default());
    let (status, document) = Call::new(&console).get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().expect("paths");
    assert!(paths.len() >= 15, "{paths:?}");
    let fallback = |body: &Value| {
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no endpoint at"))
    };
    for (path, methods) in paths {
        let concrete = path
            .replace("{id}", &id.to_string())
            .replace("{name}", "nightly")
            .replace("{action}", "pause")
            .replace("{kind}", "update-in-batches");
        for (method, operation) in methods.as_object().unwrap() {
            assert!(operation["summary"].as_str().is_some_and(|s| !s.is_empty()));
            let (status, body) = Call::new(&console)
                .send(&method.to_uppercase(), &concrete)
                .await;
            assert!(
                !fallback(&body) && status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but not served: {status} {body}"
            );
        }
    }
    let (_, body) = Call::new(&console).get("/api/undocumented").await;
    assert!(fallback(&body), "{body}");
}

async fn without_a_token_only_this_machine_and_this_origin_may_control(db: &TestDb) {
    let id = one_operation(db).await;
    let console = Console::new(db.store.clone(), Access::default());
    let pause = format!("/api/operations/{id}/pause");
    let before = stored(db, id).await;
    for (host, origin, site) in [
        ("evil.example:8080", None, None),
        ("127.0.0.1:8080", Some("http://evil.example"), None),
        ("127.0.0.1:8080", None, Some("cross-site")),
    ] {
        let mut call = Call::new(&console).header("host", host);
        if let Some(origin) = origin {
            call = call.header("origin", origin);
        }
        if let Some(site) = site {
            call = call.header("sec-fetch-site", site);
        }
        let (status, body) = call.post(&pause).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "forbidden"),
            "{host} {body}"
        );
    }
    assert_eq!(
        Call::new(&console)
            .header("host", "evil.example")
            .get("/api/operations")
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        stored(db, id).await,
        before,
        "a refused control changed the operation"
    );
    let (status, _) = Call::new(&console)
        .header("origin", "http://127.0.0.1:8080")
        .header("sec-fetch-site", "same-origin")
        .post(&pause)
        .await;
    assert_eq!(status, StatusCode::OK);
}

/// `sluice serve` on SQLite: refused beyond loopback without a token (exit
/// 2, one line), and on loopback it answers `/healthz` and the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_serve_listens_on_loopback_and_refuses_the_network_without_a_token() {
    let db = TestDb::sqlite().await;
    let refused = sluice(&db, &["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("without a token"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let (mut server, address) = serving(&db, &["serve", "--listen", "127.0.0.1:0"]);
    let get = |path: &str| http_get(&address, path);
    assert!(get("/healthz").starts_with("HTTP/1.1 200"));
    let listed = get("/api/operations");
    assert!(
        listed.starts_with("HTTP/1.1 200") && listed.ends_with("[]"),
        "{listed}"
    );
    server.kill().unwrap();
    server.wait().unwrap();
    db.cleanup().await;
}

/// A worker serving the console (`sluice run --console`) adds its runtime's
/// instruments to `/metrics`: rows changed as a counter, sub-batch and
/// batch durations as histograms in seconds, the batch size, beside the
/// store's operations by status (counted once, from the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serving_the_console_exports_its_instruments_in_metrics() {
    let db = TestDb::sqlite().await;
    create_counted_items(&db, 3_000).await;
    let id = enqueue_increment(&db, &["--batch-size", "1000", "--sub-batch-size", "250"])["id"]
        .as_i64()
        .unwrap();
    let (mut worker, address) = serving(&db, &["run", "--console", "127.0.0.1:0"]);
    common::until_within(
        "the operation finishes",
        std::time::Duration::from_secs(60),
        || async { stored(&db, id).await.0 == "finished" },
    )
    .await;
    let metrics = http_get(&address, "/metrics");
    worker.kill().unwrap();
    worker.wait().unwrap();
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let sample = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
    };
    let kind = "{db_collection_name=\"items\",sluice_operation_kind=\"update-in-batches\"";
    assert_eq!(sample(&format!("sluice_rows_total{kind}}}")), 3_000.0);
    // The batch size adapts as it runs, so the counts are checked against
    // the store's batches and the least number of sub-batches of 250 rows.
    let batches = db.store.batches(id).await.unwrap();
    assert!(batches.iter().all(|b| b.status == BatchStatus::Succeeded));
    let batch_count = sample(&format!("sluice_batch_duration_seconds_count{kind}}}"));
    assert_eq!(batch_count, batches.len() as f64);
    assert!(sample(&format!("sluice_sub_batch_duration_seconds_count{kind}}}")) >= 12.0);
    assert!(sample(&format!("sluice_sub_batch_duration_seconds_sum{kind}}}")) > 0.0);
    assert!(
        metrics.contains(&format!(
            "sluice_sub_batch_duration_seconds_bucket{kind},le=\"0.001\"}}"
        )),
        "{metrics}"
    );
    assert!(
        sample(&format!(
            "sluice_batch_size{{sluice_operation_id=\"{id}\"}}"
        )) >= 1.0
    );
    assert_eq!(sample("sluice_operations{status=\"finished\"}"), 1.0);
    assert_eq!(
        metrics.matches("# TYPE sluice_operations gauge").count(),
        1,
        "{metrics}"
    );
    db.cleanup().await;
}

/// Starts the `sluice` binary with `args` (a command that serves the
/// console on port 0) and returns it with the address it says it bound.
fn serving(db: &TestDb, args: &[&str]) -> (std::process::Child, String) {
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATABASE_URL", &db.url)
        .env_remove("SLUICE_CONSOLE_TOKEN")
        .env_remove("SLUICE_CONSOLE_ADMIN_TOKEN")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut said = String::new();
    let address = loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() == 0 {
            panic!("the server ended without an address: {said}");
        }
        said.push_str(&line);
        if let Some(rest) = line.split("console listening on http://").nth(1) {
            break rest.split('/').next().unwrap().to_owned();
        }
    };
    // Drained, so that a worker's further lines never fill the pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (server, address)
}

/// One `GET` to the console at `address`: the whole answer, status line,
/// headers and body.
fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// An operation failing on a row value (a unique key's duplicate, quoted by
/// MySQL's message) is shown by the console with its constraint and
/// column names and without the value — in the operation, its batches and
/// its events — while the command line shows the whole text.
async fn a_failed_operation_s_errors_show_no_row_value(db: &TestDb) {
    db.execute(
        "CREATE TABLE members (id BIGINT PRIMARY KEY, email VARCHAR(64) NOT NULL UNIQUE, \
         n INTEGER NOT NULL)",
    )
    .await;
    db.execute("INSERT INTO members VALUES (1, 'a@x', 0), (2, 'b@x', 0)")
        .await;
    let secret = "leaked-secret@example.com";
    let enqueued = common::json(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "members",
            "--set",
            &format!("email = '{secret}'"),
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap();
    let _ = sluice(db, &["run", "--until-idle"]);
    let (status, _) = stored(db, id).await;
    assert_eq!(status, "failed");
    let console = Console::new(db.store.clone(), Access::default());
    let mut seen = String::new();
    for path in [
        format!("/api/operations/{id}"),
        format!("/api/operations/{id}/events"),
        format!("/api/operations/{id}/batches"),
        "/api/operations".to_owned(),
    ] {
        let (status, body) = Call::new(&console).get(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        seen.push_str(&body.to_string());
    }
    assert!(!seen.contains("leaked-secret"), "a row value shown: {seen}");
    let (_, operation) = Call::new(&console)
        .get(&format!("/api/operations/{id}"))
        .await;
    // The names stay: every backend's message names the column or its key.
    let error = operation["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("email"), "{error}");
    let shown = sluice(db, &["show", &id.to_string()]);
    if db.backend == "mysql" {
        assert!(
            String::from_utf8_lossy(&shown.stdout).contains(secret),
            "the command line shows the whole text"
        );
    }
}

/// A method a path does not answer (405), an unknown path (404) and a body
/// over 16 KiB — to a control too, which reads none — are refused as JSON,
/// and the control changes nothing; `bearer` is the Bearer scheme.
async fn every_refusal_on_every_route_is_json_and_every_body_is_capped(db: &TestDb) {
    let id = one_operation(db).await;
    let admin = "admin-token-0123456789";
    let console = Console::new(
        db.store.clone(),
        Access {
            read_token: None,
            admin_token: Some(admin.into()),
        },
    );
    let call = || Call::new(&console).token(admin);
    for (method, path) in [
        ("DELETE", format!("/api/operations/{id}")),
        ("PUT", format!("/api/operations/{id}/pause")),
        ("POST", "/healthz".to_owned()),
        ("PATCH", "/api/operations".to_owned()),
    ] {
        let (status, body) = call().send(method, &path).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(code(&body), "method_not_allowed", "{method} {path}: {body}");
    }
    let (status, body) = call().get("/api/nowhere").await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let before = stored(db, id).await;
    let big = "x".repeat(20 * 1024);
    for path in [
        format!("/api/operations/{id}/pause"),
        "/api/all/pause".to_owned(),
        "/api/operations".to_owned(),
    ] {
        let (status, body) = call().post_json(&path, big.clone()).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {body}");
        assert_eq!(code(&body), "too_large", "{path}");
    }
    assert_eq!(
        stored(db, id).await,
        before,
        "a refused control changed nothing"
    );
    let (status, body) = Call::new(&console)
        .header("authorization", &format!("bearer {admin}"))
        .post(&format!("/api/operations/{id}/pause"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored(db, id).await.0, "paused");
}

/// `POST /api/operations/{id}/revert` enqueues the revert of an operation
/// run with undo, sized as it ran, as `sluice revert` does: the operation
/// says it keeps undo, the revert says what it puts back, a second request
/// finds it active, and running it puts every counter back. An operation
/// without undo, an unknown id and a body with an unknown field are
/// refused (400) with the command line's reason, nothing enqueued.
async fn an_undone_operation_is_reverted_through_the_api(db: &TestDb) {
    create_counted_items(db, 40).await;
    let plain = enqueue_increment(db, &["--where", "grp = 0"])["id"]
        .as_i64()
        .unwrap();
    let undone = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--undo",
            "--batch-size",
            "700",
            "--sub-batch-size",
            "7",
        ],
    )["id"]
        .as_i64()
        .unwrap();
    let ran = sluice(db, &["run", "--until-idle"]);
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
            .await,
        40
    );
    let console = Console::new(db.store.clone(), Access::default());
    let call = || Call::new(&console);
    let (_, original) = call().get(&format!("/api/operations/{undone}")).await;
    assert_eq!(
        (&original["undo"], &original["reverts"]),
        (&Value::Bool(true), &Value::Null)
    );
    let (_, shown) = call().get(&format!("/api/operations/{plain}")).await;
    assert_eq!(shown["undo"], Value::Bool(false));

    for (path, body, says) in [
        (
            format!("/api/operations/{plain}/revert"),
            None,
            "ran without --undo",
        ),
        (
            "/api/operations/999999/revert".to_owned(),
            None,
            "there is no operation 999999",
        ),
        (
            format!("/api/operations/{undone}/revert"),
            Some(r#"{"forse": true}"#),
            "forse",
        ),
    ] {
        let (status, refused) = match body {
            Some(body) => call().post_json(&path, body.to_owned()).await,
            None => call().post(&path).await,
        };
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{path}: {refused}");
    }
    let operations = || async { db.store.list(&Default::default()).await.unwrap().len() };
    assert_eq!(operations().await, 2, "a refusal enqueued something");

    let (status, revert) = call()
        .post(&format!("/api/operations/{undone}/revert"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{revert}");
    let id = revert["id"].as_i64().unwrap();
    let (_, shown) = call().get(&format!("/api/operations/{id}")).await;
    assert_eq!(
        (&shown["kind"], &shown["reverts"], &shown["undo"]),
        (
            &Value::from("revert"),
            &Value::from(undone),
            &Value::Bool(false)
        )
    );
    for size in ["batch_size", "sub_batch_size"] {
        assert_eq!(shown[size], original[size], "{size} as it ran");
    }
    let (status, again) = call()
        .post_json(&format!("/api/operations/{undone}/revert"), "{}".into())
        .await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &Value::from(id)));

    let ran = sluice(db, &["run", "--until-idle"]);
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter = 0")
            .await,
        20,
        "group 1 put back"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 0 AND counter = 1")
            .await,
        20,
        "group 0 left as it was"
    );
}
