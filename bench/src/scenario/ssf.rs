//! `ssf`: Security Event Tokens pushed to the bench tenant's `ssf` source, each a new `jti` about
//! its own subject, of the type the source maps to `sim_swap` (the playbook `unique` sends to):
//! a signature verified against the transmitter's JWK Set on top of a new claim. The SETs are
//! signed (RS256, what SSF transmitters most often sign with) before the load starts, on every
//! core, so the load generator only sends them; its ratio to `unique` in the same run is what a
//! SET costs over a keyed signal.

use std::path::Path;
use std::sync::Arc;

use devtools::jose::{self, JwsKey};
use serde_json::json;

use super::{with_storage_written, ScenarioContext};
use crate::callgrind::{self, Counters, Measured, WARM_UP};
use crate::report::ScenarioRow;
use crate::server::IdemUnderLoad;
use crate::signals::{SSF_AUDIENCE, SSF_EVENT, SSF_ISSUER};

/// SETs signed ahead per second of load (more than idem answers on two cores).
const PER_SECOND: u64 = 3_500;

/// `count` SETs signed with a new key, its JWK Set written to `dir/jwks.json` (where the bench
/// config's source reads it, at its first SET).
fn signed(dir: &Path, count: u64) -> Result<Arc<Vec<String>>, String> {
    let key = JwsKey::rsa("bench-rs256");
    std::fs::write(dir.join("jwks.json"), jose::jwk_set(&[&key]).to_string())
        .map_err(|e| format!("the JWK Set: {e}"))?;
    let run_id = idem_schemas::timefmt::now_ms();
    let set = |n: u64| {
        key.sign(&json!({
            "iss": SSF_ISSUER, "aud": SSF_AUDIENCE, "jti": format!("s-{run_id}-{n}"),
            "iat": run_id / 1000,
            "sub_id": {"format": "phone_number", "phone_number": format!("+4477009{n:08}")},
            "events": {SSF_EVENT: {"credential_type": "password"}}
        }))
    };
    // An RSA signature takes about a millisecond: sign on every core.
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    let tokens = std::thread::scope(|scope| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..count)
                        .step_by(threads as usize)
                        .map(set)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let parts: Vec<Vec<String>> = parts
            .into_iter()
            .map(|p| p.join().unwrap_or_default())
            .collect();
        let mut tokens = Vec::with_capacity(count as usize);
        for n in 0..count {
            let part = &parts[(n % threads) as usize];
            if let Some(token) = part.get((n / threads) as usize) {
                tokens.push(token.clone());
            }
        }
        tokens
    });
    if tokens.len() as u64 != count {
        return Err("signing the SETs failed".into());
    }
    Ok(Arc::new(tokens))
}

/// Pushes SET `n` of `tokens` (past the last one, they come again: duplicates); its status.
async fn push(http: reqwest::Client, url: String, tokens: Arc<Vec<String>>, n: u64) -> u16 {
    let token = tokens[(n % tokens.len() as u64) as usize].clone();
    let sent = http
        .post(&url)
        .header("content-type", "application/secevent+jwt")
        .body(token)
        .send()
        .await;
    match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            let _ = r.bytes().await;
            status
        }
        Err(_) => 0,
    }
}

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let count = (ctx.args.duration.as_secs().max(1) * PER_SECOND).max(10_000);
    let tokens = signed(ctx.dir, count)?;
    let idem = ctx.start_idem("24h")?;
    let http = ctx.http.clone();
    let url = idem.ssf_url();
    let row = with_storage_written(ctx, &idem, "ssf", move |n| {
        push(http.clone(), url.clone(), tokens.clone(), n)
    })
    .await;
    if row.stats.requests > count {
        return Err(format!(
            "ssf: {} requests outran the {count} SETs signed ahead; raise PER_SECOND",
            row.stats.requests
        ));
    }
    Ok(row)
}

/// `--callgrind`: the same SETs, every one new.
pub async fn instructions(
    idem: &IdemUnderLoad,
    http: reqwest::Client,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    let dir = idem.data_dir.parent().unwrap_or(&idem.data_dir);
    let tokens = signed(dir, WARM_UP + requests)?;
    let url = idem.ssf_url();
    let stats = callgrind::after_warm_up(counters, requests, move |n| {
        push(http.clone(), url.clone(), tokens.clone(), n)
    })
    .await?;
    Ok(stats.into())
}
