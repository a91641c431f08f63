//! `storm`: `--storm-keys` bursts of `--storm-copies` simultaneous copies of one keyed signal,
//! one keep-alive connection per copy, after one unmeasured burst that opens them; each request's
//! bytes built before its burst and written with one call, so the load generator's own cost stays
//! out of the latencies. Exactly one decision per key is checked; the latencies are the losers'.
//! The same bursts then go to the trivial server (the load generator's floor) and to a path idem
//! does not serve (idem's own HTTP floor, a 404), and the losers' p99 is reported as a ratio to
//! that 404's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::ScenarioContext;
use crate::callgrind::{Counters, Measured};
use crate::load::Stats;
use crate::raw;
use crate::report::{ms, ScenarioRow};
use crate::server::IdemUnderLoad;
use crate::signals::signed;

/// `--callgrind`: keys, one burst each.
const CALLGRIND_KEYS: u64 = 20;
/// `--callgrind`: simultaneous copies of each key.
const CALLGRIND_COPIES: usize = 200;

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let (keys, copies) = (ctx.args.storm_keys, ctx.args.storm_copies);
    let nodes = ctx.start_nodes("24h")?;
    let idem = &nodes[0];
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let signals = storm(&addrs, "/v1/signals", keys, copies).await?;
    // The same bursts against the trivial server: what 1000 simultaneous requests cost the load
    // generator and the loopback alone on these cores; and against a path idem does not serve:
    // its HTTP stack's own floor (hyper, the router, the timing middleware, a 404), without the
    // ingest handler or the claim.
    let floor = storm(&[ctx.receiver], "/ceiling", keys, copies)
        .await?
        .losers;
    let http_floor = storm(&addrs, "/v1/nowhere", keys, copies).await?.losers;
    Ok(ScenarioRow {
        name: "storm".into(),
        rss: idem.peak_rss(),
        disk: idem.disk_bytes(),
        note: format!(
            "{keys} keys x {copies} copies; exactly one decision for {}/{keys} keys; latencies are the losers'; the same bursts against the trivial server: p50 {:.2} ms, p99 {:.2} ms; against idem's 404 (its HTTP floor): p50 {:.2} ms, p99 {:.2} ms",
            signals.firsts_ok,
            ms(floor.percentile(50.0)), ms(floor.percentile(99.0)),
            ms(http_floor.percentile(50.0)), ms(http_floor.percentile(99.0)),
        ),
        stats: signals.losers,
        floor_p99: Some(http_floor.percentile(99.0)),
    })
}

/// `--callgrind`: `CALLGRIND_COPIES` connections opened and warmed by two bursts (all of them,
/// then half: 300 requests), the counters zeroed, then `CALLGRIND_KEYS` bursts of
/// `CALLGRIND_COPIES` copies; every request counts, the winners' too.
pub async fn instructions(idem: &IdemUnderLoad, counters: &Counters) -> Result<Measured, String> {
    let (addr, path) = (idem.addr, "/v1/signals");
    let mut conns = connect(addr, CALLGRIND_COPIES).await?;
    burst(&mut conns, addr, path, 0).await;
    let mut half: Vec<_> = conns.drain(..conns.len() / 2).collect();
    burst(&mut half, addr, path, CALLGRIND_KEYS + 1).await;
    conns.append(&mut half);
    counters.zero().await?;
    let Bursts {
        losers,
        firsts_ok,
        answers,
    } = bursts(&mut conns, addr, path, CALLGRIND_KEYS).await;
    let mut statuses = losers.statuses;
    // The winners answered 201 (not a replay) and are not among the losers' statuses.
    let winners = answers - losers.requests;
    if winners > 0 {
        *statuses.entry(201).or_default() += winners;
    }
    Ok(Measured {
        requests: answers,
        statuses,
        note: format!(
            "{CALLGRIND_KEYS} keys x {CALLGRIND_COPIES} simultaneous copies; exactly one decision for {firsts_ok}/{CALLGRIND_KEYS} keys"
        ),
    })
}

/// What a storm's bursts got.
struct Bursts {
    /// The latencies and statuses of every answer but a key's first decision.
    losers: Stats,
    /// Keys that got exactly one decision.
    firsts_ok: u64,
    /// Answers in all (a failed connection's counts, with status 0).
    answers: u64,
}

/// `keys` bursts of `copies` simultaneous copies of one keyed signal to `path` on `addrs`, one
/// connection per copy, after one burst that opens the connections (a sender's pool is warm in a
/// real storm). With several `addrs` (nodes), the connections, and so each burst's copies, are
/// spread over them.
async fn storm(
    addrs: &[SocketAddr],
    path: &str,
    keys: u64,
    copies: usize,
) -> Result<Bursts, String> {
    let mut conns = Vec::with_capacity(copies);
    for (n, &addr) in addrs.iter().enumerate() {
        let share = copies / addrs.len() + usize::from(n < copies % addrs.len());
        conns.extend(connect(addr, share).await?);
    }
    let addr = addrs[0];
    burst(&mut conns, addr, path, 0).await;
    Ok(bursts(&mut conns, addr, path, keys).await)
}

/// Opens `copies` connections to `addr`.
async fn connect(addr: SocketAddr, copies: usize) -> Result<Vec<tokio::net::TcpStream>, String> {
    raw::connect(addr, copies)
        .await
        .map_err(|e| format!("storm: cannot connect {copies} times: {e}"))
}

/// Signals `1..=keys`, one burst each on `conns`.
async fn bursts(
    conns: &mut Vec<tokio::net::TcpStream>,
    addr: SocketAddr,
    path: &str,
    keys: u64,
) -> Bursts {
    let mut losers = Stats::default();
    let (mut firsts_ok, mut answers) = (0, 0);
    let started = Instant::now();
    for k in 1..=keys {
        let mut firsts = 0;
        for answer in burst(conns, addr, path, k).await {
            answers += 1;
            if answer.status == 201 && !answer.replayed {
                firsts += 1;
            } else {
                losers.latencies.push(answer.latency);
                losers.requests += 1;
                *losers.statuses.entry(answer.status).or_default() += 1;
            }
        }
        if firsts == 1 {
            firsts_ok += 1;
        }
    }
    losers.elapsed = started.elapsed();
    losers.latencies.sort();
    Bursts {
        losers,
        firsts_ok,
        answers,
    }
}

/// One copy of signal `k` under one new key on each connection, released at once. A
/// connection that fails is dropped (its answer counts with status 0).
async fn burst(
    conns: &mut Vec<tokio::net::TcpStream>,
    addr: SocketAddr,
    path: &str,
    k: u64,
) -> Vec<raw::Exchange> {
    let key = format!("storm-{}-{k}", idem_schemas::timefmt::now_ms());
    let (body, headers) = signed("sim_swap", k, Some(&key));
    let request = Arc::new(raw::request(path, addr, &headers, &body));
    let barrier = Arc::new(tokio::sync::Barrier::new(conns.len()));
    let tasks: Vec<_> = conns
        .drain(..)
        .map(|mut stream| {
            let (request, barrier) = (request.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let answer = raw::exchange(&mut stream, &request).await;
                (stream, answer)
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok((stream, answer)) = task.await {
            if answer.status != 0 {
                conns.push(stream);
            }
            answers.push(answer);
        }
    }
    answers
}
