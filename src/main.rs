//! The `idem` binary: `serve`, `sign`, `receive`, `check-config` and `healthcheck`. Errors end
//! here, with one line on stderr and exit status 2 for a bad configuration.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use idem::config::Config;
use idem::telemetry::LogFormat;
use idem_schemas::signature::Secret;

// mimalloc: glibc's malloc contends on its arenas under many concurrent requests.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "idem",
    version,
    about = "Exactly-once trust decisions for identity webhooks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service.
    Serve {
        /// The configuration file (reloaded on SIGHUP).
        #[arg(long, default_value = "idem.toml")]
        config: PathBuf,
        /// Log lines as text or as JSON objects (one per line).
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
    },
    /// Print a Standard Webhooks `webhook-signature` value for the body on standard input.
    Sign {
        /// The signing secret (`whsec_…`).
        #[arg(long)]
        secret: String,
        /// The `webhook-id` (use the Idempotency-Key when sending one).
        #[arg(long)]
        id: String,
        /// The `webhook-timestamp` in unix seconds (default: now).
        #[arg(long)]
        timestamp: Option<i64>,
    },
    /// Run the reference receiver: verify, deduplicate on webhook-id (a SET's jti), print each
    /// callback (and SET).
    Receive {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// The callback secret (`whsec_…`); repeat for rotation.
        #[arg(long, required_unless_present = "ssf_issuer")]
        secret: Vec<String>,
        /// Take SETs pushed by this Shared Signals transmitter (its issuer, e.g.
        /// `http://127.0.0.1:8080/ssf/acme`), verified with the keys its metadata names.
        #[arg(long, requires = "ssf_audience")]
        ssf_issuer: Option<String>,
        /// The audience this receiver's SETs must name (its `audience` at the transmitter).
        #[arg(long, requires = "ssf_issuer")]
        ssf_audience: Option<String>,
        /// The file where seen webhook-ids are remembered.
        #[arg(long, default_value = "idem-receive.seen")]
        state: PathBuf,
        /// How long a webhook-id is remembered (longer than the sender's retry horizon).
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        remember: std::time::Duration,
        /// Accepted clock skew of webhook-timestamp.
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
        tolerance: std::time::Duration,
    },
    /// Validate a configuration without serving (exit 0, or 2 with the reason).
    CheckConfig {
        /// The configuration file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Ask a running idem's /healthz: exit 0 when it answers 200, else 1 with the reason (a
    /// container's HEALTHCHECK).
    Healthcheck {
        /// The URL to ask.
        #[arg(long, default_value = idem::healthcheck::DEFAULT_URL)]
        url: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config: path,
            log_format,
        } => {
            let config = match Config::load(&path) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let telemetry = match idem::telemetry::install(log_format, &config.telemetry) {
                Ok(installed) => installed,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            idem_actors::failpoint::setup_from_env();
            let served = serve(config, path);
            telemetry.shutdown();
            match served {
                Ok(()) => ExitCode::SUCCESS,
                // A database this idem must not read: one line, and the configuration's status.
                Err(e) if refused_store(&e) => {
                    tracing::error!("{e:#}");
                    eprintln!("idem: {e:#}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("idem: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Sign {
            secret,
            id,
            timestamp,
        } => match sign(&secret, &id, timestamp) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("idem sign: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Receive {
            listen,
            secret,
            ssf_issuer,
            ssf_audience,
            state,
            remember,
            tolerance,
        } => {
            let secrets: Result<Vec<Secret>, _> = secret.iter().map(|s| Secret::parse(s)).collect();
            let Ok(secrets) = secrets else {
                eprintln!("idem receive: --secret must be whsec_<base64>");
                return ExitCode::from(2);
            };
            let options = idem::receive::Options {
                listen,
                secrets,
                ssf: ssf_issuer.zip(ssf_audience),
                state,
                remember,
                tolerance,
            };
            match receive(options) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("idem receive: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { config } => match Config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Healthcheck { url } => match idem::healthcheck::check(&url) {
            Ok(()) => {
                println!("healthy: {url} answered 200");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("unhealthy: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn serve(config: Config, path: PathBuf) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
    runtime.block_on(async {
        idem::serve::run(
            config,
            Some(path),
            |addr| {
                let mut out = std::io::stdout();
                let _ = writeln!(out, "idem listening on http://{addr}");
                let _ = out.flush();
            },
            shutdown_signal(),
        )
        .await
    })?;
    Ok(())
}

fn receive(options: idem::receive::Options) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
    runtime.block_on(idem::receive::run(
        options,
        |addr| {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "idem receive listening on http://{addr}");
            let _ = out.flush();
        },
        shutdown_signal(),
    ))?;
    Ok(())
}

/// Whether `e` is a store this idem refuses to use (a schema newer than it knows, a data
/// directory of another format, a database that acknowledges commits before they are durable):
/// not a crash to restart from, but a setup to fix.
fn refused_store(e: &anyhow::Error) -> bool {
    use idem_actors::{EngineError, StoreError};
    matches!(
        e.downcast_ref::<idem::serve::ServeError>(),
        Some(idem::serve::ServeError::Engine(EngineError::Store(
            StoreError::Schema { .. }
                | StoreError::Format(_)
                | StoreError::OldClaims(_)
                | StoreError::NotDurable(_)
        )))
    )
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}

fn sign(secret: &str, id: &str, timestamp: Option<i64>) -> anyhow::Result<()> {
    let secret = Secret::parse(secret).map_err(|e| anyhow::anyhow!("--secret {e}"))?;
    let mut body = Vec::new();
    std::io::stdin()
        .read_to_end(&mut body)
        .context("cannot read the body from standard input")?;
    let timestamp = match timestamp {
        Some(t) => t,
        None => (idem_schemas::timefmt::now_ms() / 1000) as i64,
    };
    println!("{}", secret.sign(id, timestamp, &body));
    Ok(())
}
