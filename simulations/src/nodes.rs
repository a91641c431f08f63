//! The nodes of a run: each one's directory and config (the simulated tenant, its playbooks,
//! its Okta, Shared Signals (one of them subscribed by idem itself) and CloudEvents sources,
//! and its streams; the store, on sled or on PostgreSQL, reached straight or through a fault
//! proxy of its own), its port, and its process, under `faketime` with a clock of its own under
//! `--skew`. Written, not started.

use std::path::Path;
use std::sync::Arc;

use crate::args::RunArgs;
use crate::process::IdemProcess;
use crate::proxy::Proxy;
use crate::rng::Rng;
use crate::{cloudevents, proxy, sources, ssf, streams, CALLBACK_SECRET, SIGNING_SECRET};

/// The clock offset of node `n` (not the first) under `--skew`: one to five minutes, ahead for
/// odd nodes and behind for even ones, the same for a seed.
pub fn clock_offset(seed: u64, n: usize) -> String {
    let seconds = Rng::new(seed.wrapping_mul(31).wrapping_add(n as u64)).range(60, 301);
    match n % 2 {
        1 => format!("+{seconds}s"),
        _ => format!("-{seconds}s"),
    }
}

/// Writes the config of each of `args.nodes` nodes under `dir`, on `database` if there is one,
/// calling the receiver at `recv` and the transmitter at `tx`, with the source lines
/// `subscribed` (a source subscribed at another transmitter); each node's base URL, its process
/// (not started) and, with `--partitions`, its route to the database.
pub async fn configure(
    args: &RunArgs,
    dir: &Path,
    binary: &Path,
    database: &Option<String>,
    recv: &str,
    tx: &str,
    subscribed: &str,
) -> Result<(Vec<String>, Vec<IdemProcess>, Vec<Arc<Proxy>>), String> {
    let transmitter_config = streams::config(dir)?;
    let mut bases = Vec::new();
    let mut nodes = Vec::new();
    // Each node's own route to the database, which a partition cuts (`--partitions`).
    let mut proxies = Vec::new();
    // Under `--skew`, keys live a little longer than the run and its checks, and less than the
    // clocks are apart: a node that kept its own clock would find keys of another node expired
    // (or its own expired to the others) and decide them twice.
    let key_ttl = match args.skew {
        true => format!("key_ttl = \"{}s\"\n", 2 * args.seconds + 60),
        false => String::new(),
    };
    for n in 0..args.nodes {
        let url = match (database, args.partitions) {
            (Some(url), true) => {
                let proxy = proxy::Proxy::start("127.0.0.1:5432".into())
                    .await
                    .map_err(|e| e.to_string())?;
                let routed = url.replace(":5432/", &format!(":{}/", proxy.port));
                proxies.push(Arc::new(proxy));
                Some(routed)
            }
            (url, _) => url.clone(),
        };
        let store = match &url {
            Some(url) => {
                format!("[store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 4\n")
            }
            None => String::new(),
        };
        let port = devtools::free_port().map_err(|e| e.to_string())?;
        let node_dir = dir.join(format!("node{n}"));
        std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
        let config = node_dir.join("idem.toml");
        std::fs::write(
            &config,
            format!(
                r#"
listen = "127.0.0.1:{port}"
public_url = "{public_url}"
data_dir = "{data}"
{store}
[idempotency]
key_secret = "simulation-key-secret-0123456789"
in_flight_timeout = "1s"
{key_ttl}idle_actor_timeout = "300ms"
[delivery]
inline_timeout = "300ms"
schedule = ["200ms", "200ms", "200ms"]
breaker_threshold = 2
breaker_cooldown = "300ms"
max_in_flight_per_endpoint = 4
max_hold = "5s"
[tenants.sim]
api_key = "sk_simulation_key"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"
[tenants.sim.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "{recv}/lock" }}, {{ name = "open_case", url = "{recv}/case" }}, {revoke} ]
{rules}[tenants.sim.playbooks.port_out]
decision = "review"
actions = [ {{ name = "notify", url = "{recv}/notify" }} ]
[tenants.sim.sources.okta_sim]
kind = "okta"
secret = "{okta}"
[[tenants.sim.sources.okta_sim.map]]
event = "user.mfa.*"
type = "port_out"
subject = "/target/0/alternateId"
[tenants.sim.sources.ssf_push]
kind = "ssf"
issuer = "{ssf_issuer}"
audience = "{ssf_audience}"
jwks = "{tx}/jwks"
jwks_refetch = "1s"
[[tenants.sim.sources.ssf_push.map]]
event = "{ssf_event}"
type = "port_out"
[tenants.sim.sources.ssf_poll]
kind = "ssf"
issuer = "{ssf_issuer}"
audience = "{ssf_audience}"
jwks = "{tx}/jwks"
jwks_refetch = "1s"
poll = {{ url = "{tx}/poll", token = "{poll_token}" }}
[[tenants.sim.sources.ssf_poll.map]]
event = "{ssf_event}"
type = "port_out"
[tenants.sim.sources.camara]
kind = "cloudevents"
secret = "{camara}"
[[tenants.sim.sources.camara.map]]
event = "{swapped}"
type = "sim_swap"
subject = "/data/phoneNumber"
{subscribed}{transmitter_config}"#,
                okta = sources::OKTA_AUTH,
                ssf_issuer = ssf::ISSUER,
                ssf_audience = ssf::AUDIENCE,
                ssf_event = ssf::EVENT,
                poll_token = ssf::POLL_TOKEN,
                camara = cloudevents::SECRET,
                swapped = cloudevents::SWAPPED,
                data = node_dir.join("data").display(),
                key_ttl = key_ttl,
                public_url = streams::PUBLIC_URL,
                revoke = streams::action(),
                rules = crate::rules::sim_swap_rules(&format!(
                    r#"{{ name = "lock_account", url = "{recv}/lock" }}, {{ name = "open_case", url = "{recv}/case" }}, {}"#,
                    streams::action()
                )),
            ),
        )
        .map_err(|e| e.to_string())?;
        bases.push(format!("http://127.0.0.1:{port}"));
        let node = IdemProcess::new(binary, &config, &node_dir);
        nodes.push(match args.skew && n > 0 {
            true => node.skewed(clock_offset(args.seed, n)),
            false => node,
        });
    }
    Ok((bases, nodes, proxies))
}
