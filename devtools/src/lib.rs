//! What the bench, the simulations and the tests share: building the `idem` binary into a target
//! directory of its own (the `cargo run` that started them holds the main one, and a features
//! build must not replace the normal release binary), starting `idem serve` until it prints the
//! address it listens on, a free port on loopback, and reading a value off its `/metrics` page.
//! `postgres` makes fresh databases; `imports` finds import circles between a crate's modules
//! (the workspace's test refuses any); `jose` signs Security Event Tokens as a transmitter does,
//! and `transmitter` serves one's JWK Set and poll endpoint.

pub mod imports;
pub mod jose;
pub mod postgres;
pub mod transmitter;

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Builds `idem` in release mode with `features` into `target/<target_subdir>`; its path.
/// Says on stderr what it builds and where, and lets cargo's progress show there.
pub fn build_idem(features: &[&str], target_subdir: &str) -> Result<PathBuf, String> {
    let devtools = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = devtools.parent().unwrap_or(devtools);
    let target = root.join("target").join(target_subdir);
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(root)
        .args(["build", "--release", "--bin", "idem", "--target-dir"])
        .arg(&target);
    if !features.is_empty() {
        cargo.arg("--features").arg(features.join(","));
    }
    let with = match features {
        [] => "no features".to_string(),
        _ => format!("features {}", features.join(",")),
    };
    eprintln!(
        "building idem (release, {with}) into {}: a first build there compiles every \
         dependency and can take minutes",
        target.display()
    );
    let status = cargo
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building idem (features: {features:?}) failed"));
    }
    Ok(target.join("release").join("idem"))
}

/// Starts `binary serve --config config` with `env` and `stderr`, and waits for the line that
/// says where it listens; the child and its base URL (`http://127.0.0.1:port`).
pub fn serve(
    binary: &Path,
    config: &Path,
    env: &[(&str, &str)],
    stderr: Stdio,
) -> std::io::Result<(Child, String)> {
    serve_under(&[], binary, config, env, stderr)
}

/// As [`serve`], with idem run as the last argument of `wrapper` (a program and its arguments,
/// such as valgrind) when it is not empty.
pub fn serve_under(
    wrapper: &[OsString],
    binary: &Path,
    config: &Path,
    env: &[(&str, &str)],
    stderr: Stdio,
) -> std::io::Result<(Child, String)> {
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    let program = command.get_program().to_owned();
    let mut child = command
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| {
            let program = Path::new(&program).display();
            std::io::Error::new(e.kind(), format!("cannot run {program}: {e}"))
        })?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    match line.trim().strip_prefix("idem listening on ") {
        Some(base) => Ok((child, base.to_string())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(std::io::Error::other(format!(
                "idem did not start: {line:?}"
            )))
        }
    }
}

/// A port on loopback that nothing listens on now (the system's pick for port 0), for a
/// program that is told its port rather than choosing one.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The value of `series` (its name and labels, as printed) in a Prometheus text page.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
