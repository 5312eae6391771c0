//! `sluice serve`, and `sluice run --console`: the operator console on one
//! address, until Ctrl-C or SIGTERM (or the worker's end).

use std::net::SocketAddr;

use clap::Args;
use sluice_console::{Access, Console, check_listen};
use sluice_store::Store;
use sluice_telemetry::PrometheusReader;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::failure::Failure;
use crate::run::shutdown_signal;

/// Where `sluice serve` listens and the tokens that guard it.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on. Anything but loopback needs a token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[command(flatten)]
    tokens: Tokens,
}

/// The console's tokens, from the command line or the environment.
#[derive(Debug, Args)]
pub struct Tokens {
    /// The console's read-only token (at least 16 characters).
    #[arg(
        long = "console-token",
        env = "SLUICE_CONSOLE_TOKEN",
        hide_env_values = true
    )]
    read: Option<String>,
    /// The console's admin token: reads and controls (at least 16 characters).
    #[arg(
        long = "console-admin-token",
        env = "SLUICE_CONSOLE_ADMIN_TOKEN",
        hide_env_values = true
    )]
    admin: Option<String>,
}

/// A console serving in the background.
pub struct Serving {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

/// Serves the console for `store` as `args` say, until a shutdown signal.
pub async fn run(store: &Store, args: ServeArgs) -> Result<(), Failure> {
    let serving = start(store, args.listen, args.tokens, None).await?;
    shutdown_signal().await;
    serving.stop().await
}

/// Checks `address` against the tokens, binds it and serves the console
/// there in the background, with a worker's `instruments` in `/metrics`
/// when given. Bad input (an open address without a token) binds nothing.
pub async fn start(
    store: &Store,
    address: SocketAddr,
    tokens: Tokens,
    instruments: Option<PrometheusReader>,
) -> Result<Serving, Failure> {
    let set = |token: Option<String>| token.filter(|t| !t.is_empty());
    let access = Access {
        read_token: set(tokens.read),
        admin_token: set(tokens.admin),
    };
    check_listen(address, &access).map_err(|e| Failure::BadInput(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot listen on {address}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::Runtime(e.into()))?;
    eprintln!("console listening on http://{bound}/");
    let (stop, stopped) = oneshot::channel();
    let mut console = Console::new(store.clone(), access);
    if let Some(instruments) = instruments {
        console = console.with_instruments(instruments);
    }
    let task = tokio::spawn(console.serve(listener, async {
        let _ = stopped.await;
    }));
    Ok(Serving { stop, task })
}

impl Serving {
    /// Stops accepting, lets requests in flight finish, and reports a
    /// failure of the server.
    pub async fn stop(self) -> Result<(), Failure> {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(served) => served.map_err(|e| Failure::Runtime(e.into())),
            Err(e) => Err(Failure::Runtime(e.into())),
        }
    }
}
