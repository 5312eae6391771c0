//! The dashboard in a real headless Chromium, driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`): an operator opens an
//! operation while a worker runs it, sees its progress move, pauses it
//! through the confirmation, sees it paused in the page and in the store,
//! resumes it and sees it finish. Screenshots go to
//! `target/console-screenshots/`. Skipped with a message where
//! `chromedriver` is absent, unless `SLUICE_REQUIRE_SERVERS=1`.

mod common;

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{TestDb, create_counted_items, enqueue_increment, spawn_worker, until_within};
use fantoccini::{Client, ClientBuilder, Locator};
use sluice::console::{Access, Console};

/// How long the page may take to show what the store holds.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_and_resumes_a_running_operation_from_the_dashboard() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let db = TestDb::sqlite().await;
    // 10,000 rows in scope, 50 per sub-batch with an 80 ms pause after
    // each: at least 16 s of work, time for the page to read the canary and
    // pause it midway even on a loaded machine.
    create_counted_items(&db, 20_000).await;
    let enqueued = enqueue_increment(
        &db,
        &[
            "--where",
            "grp = 1",
            "--batch-size",
            "100",
            "--sub-batch-size",
            "50",
            "--pause",
            "80ms",
        ],
    );
    let id = enqueued["id"].as_i64().unwrap();
    let mut worker = spawn_worker(&db, &["--node", "browser-test"]);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let console = Console::new(db.store.clone(), Access::default());
    tokio::spawn(console.serve(listener, std::future::pending()));

    let browser = driver.client().await;
    browser
        .goto(&format!("http://{address}/#/operations/{id}"))
        .await
        .unwrap();
    let text = |selector: &'static str| {
        let browser = browser.clone();
        async move {
            match browser.find(Locator::Css(selector)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        }
    };
    until_within("the page to show the operation running", LIMIT, || async {
        text("#op-status").await == "running"
    })
    .await;
    let first = text("#op-rows").await;
    until_within("the page to show progress moving", LIMIT, || async {
        let now = text("#op-rows").await;
        !now.is_empty() && now != first
    })
    .await;
    // While it runs, its table's canary says what the latency is and, as
    // no budget is set, against the default one.
    until_within("the page to show the canary's reading", LIMIT, || async {
        text("#op-latency").await.starts_with("canary p99 ")
    })
    .await;
    screenshot(&browser, "running").await;

    confirm(&browser, "pause").await;
    until_within("the store to hold the operation paused", LIMIT, || async {
        status(&db, id).await == "paused"
    })
    .await;
    until_within("the page to show it paused", LIMIT, || async {
        text("#op-status").await == "paused"
    })
    .await;
    let paused_at = text("#op-rows").await;
    screenshot(&browser, "paused").await;
    let event = db.store.events(id, 0).await.unwrap();
    let paused = event
        .iter()
        .rev()
        .find(|e| e.event.kind() == "paused")
        .expect("a paused event");
    assert!(
        format!("{:?}", paused.event).contains("console (local token) from 127.0.0.1"),
        "{:?}",
        paused.event
    );

    confirm(&browser, "resume").await;
    // The rest of its work, at the pace its latency budget allows: on a
    // machine busy with other tests the canary holds it back.
    until_within("the page to show it finished", 4 * LIMIT, || async {
        text("#op-status").await == "finished"
    })
    .await;
    assert_eq!(status(&db, id).await, "finished");
    assert_ne!(text("#op-rows").await, paused_at);
    assert_eq!(text("#op-latency").await, "–", "no reading once it ends");
    screenshot(&browser, "finished").await;
    // The state machine allows no control on a finished operation: the page
    // offers none.
    for action in ["pause", "resume", "cancel", "retry"] {
        let button = browser
            .find(Locator::Css(&format!("button[data-action={action}]")))
            .await
            .unwrap();
        assert!(
            button.attr("disabled").await.unwrap().is_some(),
            "{action} is offered on a finished operation"
        );
    }
    common::assert_group_one_changed_once(&db).await;

    browser.close().await.unwrap();
    worker.kill().unwrap();
    worker.wait().unwrap();
    db.cleanup().await;
}

/// An update run with `--undo` has finished: its page offers Revert; the
/// operator confirms, the page moves to the revert (which names the
/// operation it puts back), a worker runs it, and every counter is back.
/// An operation without undo offers no Revert at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reverts_an_undone_update_from_the_dashboard() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let db = TestDb::sqlite().await;
    create_counted_items(&db, 100).await;
    let plain = enqueue_increment(&db, &["--where", "grp = 0"])["id"]
        .as_i64()
        .unwrap();
    let id = enqueue_increment(&db, &["--where", "grp = 1", "--undo"])["id"]
        .as_i64()
        .unwrap();
    let ran = common::sluice(&db, &["run", "--until-idle"]);
    assert!(ran.status.success(), "{ran:?}");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(
        Console::new(db.store.clone(), Access::default()).serve(listener, std::future::pending()),
    );

    let browser = driver.client().await;
    browser
        .goto(&format!("http://{address}/#/operations/{plain}"))
        .await
        .unwrap();
    let shows_finished = || async {
        match browser.find(Locator::Css("#op-status")).await {
            Ok(element) => element.text().await.unwrap_or_default() == "finished",
            Err(_) => false,
        }
    };
    until_within("the page to show the plain update", LIMIT, shows_finished).await;
    assert!(
        browser
            .find(Locator::Css("button[data-action=revert]"))
            .await
            .is_err(),
        "Revert offered on an operation that kept no undo"
    );

    browser
        .goto(&format!("http://{address}/#/operations/{id}"))
        .await
        .unwrap();
    until_within("the page to show the undone update", LIMIT, || async {
        shows_finished().await
            && browser
                .find(Locator::Css("button[data-action=revert]"))
                .await
                .is_ok()
    })
    .await;
    screenshot(&browser, "revertible").await;
    confirm(&browser, "revert").await;
    until_within("the revert to be enqueued", LIMIT, || async {
        db.store
            .list(&Default::default())
            .await
            .unwrap()
            .iter()
            .any(|o| o.state.kind == "revert")
    })
    .await;
    let reverting = db
        .store
        .list(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.state.kind == "revert")
        .unwrap()
        .id;
    until_within("the page to show the revert", LIMIT, || async {
        browser
            .current_url()
            .await
            .is_ok_and(|url| url.as_str().ends_with(&format!("#/operations/{reverting}")))
            && match browser
                .find(Locator::LinkText(&format!("operation {id}")))
                .await
            {
                Ok(link) => link.is_displayed().await.unwrap_or(false),
                Err(_) => false,
            }
    })
    .await;
    screenshot(&browser, "reverting").await;
    assert!(
        browser
            .find(Locator::Css("button[data-action=revert]"))
            .await
            .is_err(),
        "a revert offers to revert itself"
    );

    let ran = common::sluice(&db, &["run", "--until-idle"]);
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(status(&db, reverting).await, "finished");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1 AND counter = 0")
            .await,
        50,
        "group 1 put back"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 0 AND counter = 1")
            .await,
        50
    );
    browser.close().await.unwrap();
    db.cleanup().await;
}

/// A fleet over two SQLite files apart from the store: the list names each
/// operation's target, and an operation's page shows the fleet as a whole
/// and a line per target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_fleet_and_each_target() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    let (first, second) = (TestDb::sqlite().await, TestDb::sqlite().await);
    create_counted_items(&first, 100).await;
    create_counted_items(&second, 300).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        format!("tenant-01 {}\ntenant-02 {}\n", first.url, second.url),
    )
    .unwrap();
    let enqueued = common::json(&common::sluice(
        &coordinator,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + 1",
            "--targets",
            file.path().to_str().unwrap(),
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap();
    let ran = common::sluice(&coordinator, &["run", "--until-idle"]);
    assert!(ran.status.success(), "{ran:?}");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(
        Console::new(coordinator.store.clone(), Access::default())
            .serve(listener, std::future::pending()),
    );
    let browser = driver.client().await;
    browser.goto(&format!("http://{address}/#/")).await.unwrap();
    until_within("the list to name both targets", LIMIT, || async {
        browser
            .find_all(Locator::Css("[data-target]"))
            .await
            .map(|found| found.len())
            .unwrap_or(0)
            == 2
    })
    .await;
    screenshot(&browser, "fleet-list").await;
    browser
        .goto(&format!("http://{address}/#/operations/{id}"))
        .await
        .unwrap();
    let summary = || async {
        match browser.find(Locator::Css("#fleet-summary")).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    until_within("the page to show the fleet", LIMIT, || async {
        summary().await.starts_with("2 of 2 targets finished")
    })
    .await;
    assert!(summary().await.contains("400 rows"), "{}", summary().await);
    for target in ["tenant-01", "tenant-02"] {
        let row = browser
            .find(Locator::Css(&format!("tr[data-fleet-target={target}]")))
            .await
            .unwrap_or_else(|_| panic!("no line for {target}"));
        assert!(row.text().await.unwrap().contains("finished"));
    }
    let target = browser.find(Locator::Css("#op-target")).await.unwrap();
    assert_eq!(target.text().await.unwrap(), "tenant-01");
    screenshot(&browser, "fleet-operation").await;
    browser.close().await.unwrap();
    coordinator.cleanup().await;
    first.cleanup().await;
    second.cleanup().await;
}

/// With tokens, the page sends a browser to sign in; the read-only token
/// shows the operation with its controls disabled, the admin token pauses
/// it (the session's cookie and CSRF token carry the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_an_operator_signs_in_and_only_the_admin_token_controls() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let db = TestDb::sqlite().await;
    create_counted_items(&db, 100).await;
    let id = enqueue_increment(&db, &["--where", "grp = 1"])["id"]
        .as_i64()
        .unwrap();
    let (read, admin) = ("read-token-0123456789", "admin-token-0123456789");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let access = Access {
        read_token: Some(read.into()),
        admin_token: Some(admin.into()),
    };
    tokio::spawn(Console::new(db.store.clone(), access).serve(listener, std::future::pending()));

    let browser = driver.client().await;
    let page = format!("http://{address}/#/operations/{id}");
    for (token, name, controls) in [(read, "read-only", false), (admin, "admin", true)] {
        browser.goto(&page).await.unwrap();
        until_within("the page to send the browser to sign in", LIMIT, || async {
            browser
                .current_url()
                .await
                .is_ok_and(|url| url.path() == "/login")
        })
        .await;
        let field = browser.find(Locator::Css("#token")).await.unwrap();
        field.send_keys(token).await.unwrap();
        field.send_keys("\n").await.unwrap();
        until_within("the dashboard to show who signed in", LIMIT, || async {
            browser
                .find(Locator::Css(&format!("[data-session=\"{name}\"]")))
                .await
                .is_ok()
        })
        .await;
        browser.goto(&page).await.unwrap();
        let pause = "button[data-action=\"pause\"]";
        until_within(
            "the pause button to show what the token allows",
            LIMIT,
            || async {
                match browser.find(Locator::Css(pause)).await {
                    Ok(button) => button.is_enabled().await.is_ok_and(|on| on == controls),
                    Err(_) => false,
                }
            },
        )
        .await;
        screenshot(&browser, &format!("signed-in-{name}")).await;
        if controls {
            confirm(&browser, "pause").await;
            until_within("the store to hold the operation paused", LIMIT, || async {
                status(&db, id).await == "paused"
            })
            .await;
        } else {
            assert_eq!(status(&db, id).await, "pending");
            let sign_out = browser
                .find(Locator::Css("#who button[type=submit]"))
                .await
                .unwrap();
            sign_out.click().await.unwrap();
        }
    }
    let paused = db.store.events(id, 0).await.unwrap();
    assert!(
        format!("{:?}", paused.last().unwrap().event).contains("console (admin token)"),
        "{:?}",
        paused.last()
    );
    browser.close().await.unwrap();
    db.cleanup().await;
}

/// Clicks the control button `action`, then the confirmation's Confirm.
async fn confirm(browser: &Client, action: &str) {
    let button = format!("button[data-action=\"{action}\"]");
    until_within(
        &format!("the {action} button to be clicked"),
        LIMIT,
        || async {
            match browser.find(Locator::Css(&button)).await {
                Ok(element) => {
                    element.is_enabled().await.unwrap_or(false) && element.click().await.is_ok()
                }
                Err(_) => false,
            }
        },
    )
    .await;
    until_within("the confirmation to open", LIMIT, || async {
        match browser.find(Locator::Css("#confirm-yes")).await {
            Ok(yes) => yes.is_displayed().await.unwrap_or(false) && yes.click().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
}

async fn status(db: &TestDb, id: i64) -> String {
    db.store
        .operation(id)
        .await
        .unwrap()
        .state
        .status
        .as_str()
        .to_owned()
}

/// Saves the page as `target/console-screenshots/<name>.png`.
async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../console-screenshots");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(format!("{name}.png")), png).unwrap();
}

/// A `chromedriver` process on a free port, killed when dropped.
struct Driver {
    process: Child,
    port: u16,
}

impl Driver {
    /// Starts `chromedriver`, or says why not and returns `None` (a failure
    /// under `SLUICE_REQUIRE_SERVERS=1`).
    fn start() -> Option<Driver> {
        let port = StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        match Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(process) => Some(Driver { process, port }),
            Err(e) => {
                assert!(
                    !common::servers_required(),
                    "chromedriver is required (apt-get install chromium chromium-driver): {e}"
                );
                eprintln!(
                    "skipped: chromedriver not found ({e}); apt-get install chromium chromium-driver"
                );
                None
            }
        }
    }

    /// A headless Chromium session, once the driver answers.
    async fn client(&self) -> Client {
        let mut options = serde_json::Map::new();
        options.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,1000"
            ]}),
        );
        let url = format!("http://127.0.0.1:{}", self.port);
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            let session = ClientBuilder::new(connector)
                .capabilities(options.clone())
                .connect(&url)
                .await;
            match session {
                Ok(client) => return client,
                Err(e) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "chromedriver did not start a session: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
