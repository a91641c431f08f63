//! Retry schedule, endpoint health and bulk recovery (docs/REFERENCE.md, from "Callbacks" to
//! "Deliveries"), against a real `idem serve` and a real receiver on loopback, on either store:
//! retries wait the schedule's steps from the end of each attempt and then the delivery is dead, a
//! `Retry-After` delays a retry but never beyond the longest step, and a schedule beside
//! `retry_interval` or `max_retries` is refused at start. An endpoint (tenant, action URL) opens
//! after `breaker_threshold` consecutive retryable failures (a 2xx or a 4xx resets the count);
//! while open nothing is sent to it, not even inline, and its held deliveries use up no attempt;
//! after `breaker_cooldown` one probe runs (`half_open`), a success drains the backlog within
//! `max_in_flight_per_endpoint` and a failure opens it again for a new cooldown; the state survives
//! a restart and shows in `GET /v1/endpoints` and `/metrics`. `POST /v1/deliveries/redeliver`
//! redelivers what its filters match, answers a retry under its `Idempotency-Key` with the first
//! answer without redelivering again, and redelivery is rate-limited per tenant; a delivery's view
//! counts every attempt (`attempts_total`) and logs the last hundred.

use std::cell::Cell;
use std::process::{Command, Stdio};
use std::time::Duration;

use devtools::metric_value;
use idem_schemas::timefmt::{now_ms, rfc3339_millis};
use serde_json::{json, Value};

use crate::support::*;

/// How long a negative check watches for something that must not happen (an attempt to an open
/// endpoint, a redelivery by a replayed request): several of the schedule's short steps. The
/// check polls, so it fails as soon as the thing happens.
const LATE: Duration = Duration::from_millis(700);

const BETA: &str = "Bearer sk_beta_test_key";
const ACME: &str = "Bearer sk_acme_test_key";

/// Posts a keyless `sim_swap` as tenant beta (one action, `notify`, POSTed to `/notify`); the
/// action's status in the 201 and its delivery id.
async fn notify_signal(client: &Client) -> (String, String) {
    let r = client.signal(Req::new(&sim_swap("+1555")).beta()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let body = r.json();
    let action = &body["actions"][0];
    assert_eq!(action["name"], "notify", "{body}");
    (
        action["status"].as_str().unwrap_or("").to_string(),
        action["delivery_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no delivery_id: {body}"))
            .to_string(),
    )
}

/// The delivery's `attempts_total`.
fn total(d: &Value) -> u64 {
    d["attempts_total"]
        .as_u64()
        .unwrap_or_else(|| panic!("no attempts_total: {d}"))
}

/// The delivery's attempt log.
fn logged(d: &Value) -> &Vec<Value> {
    d["attempts"]
        .as_array()
        .unwrap_or_else(|| panic!("no attempts: {d}"))
}

/// `GET /v1/endpoints` with `authorization`; its `data`.
async fn endpoints_as(client: &Client, authorization: &str) -> Vec<Value> {
    let r = client
        .send(
            "GET",
            "/v1/endpoints",
            Req::new("").header("authorization", authorization),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {}", text(&r)))
        .clone()
}

/// Beta's endpoint for `url`.
async fn endpoint(client: &Client, url: &str) -> Value {
    let all = endpoints_as(client, BETA).await;
    all.iter()
        .find(|e| e["url"] == url)
        .cloned()
        .unwrap_or_else(|| panic!("no endpoint {url} in {all:?}"))
}

/// Polls beta's endpoint for `url` until it is `open` (or fails after 5 s).
async fn until_open(client: &Client, url: &str) -> Value {
    let e = eventually(
        Duration::from_secs(5),
        || endpoint(client, url),
        |e| e["state"] == "open",
    )
    .await;
    assert_eq!(e["state"], "open", "the endpoint never opened: {e}");
    e
}

/// An RFC 3339 time of the API, as unix milliseconds.
fn ms(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"));
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// The callbacks of delivery `id` that reached `/notify`.
fn calls_for(receiver: &Receiver, id: &str) -> Vec<Received> {
    receiver
        .seen_on("/notify")
        .into_iter()
        .filter(|cb| cb.header("webhook-id") == id)
        .collect()
}

/// `POST /v1/deliveries/redeliver` as beta with `body`, under `key` if given.
async fn bulk(client: &Client, body: &Value, key: Option<&str>) -> Resp {
    let mut req = Req::new(&body.to_string()).beta();
    if let Some(key) = key {
        req = req.key(key);
    }
    client.send("POST", "/v1/deliveries/redeliver", req).await
}

/// `POST /v1/deliveries/{id}/redeliver` as beta.
async fn redeliver(client: &Client, id: &str) -> Resp {
    client
        .send(
            "POST",
            &format!("/v1/deliveries/{id}/redeliver"),
            Req::new("").beta(),
        )
        .await
}

/// The `/metrics` page.
async fn metrics(client: &Client) -> String {
    let r = client.send("GET", "/metrics", Req::new("")).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    String::from_utf8(r.body).expect("utf8")
}

/// Runs the binary with `args` until it exits (killed after 10 s); its exit code (none when it
/// had to be killed) and stderr.
async fn run_idem(args: &[&str]) -> (Option<i32>, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn idem");
    let pid = child.id() as i32;
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output());
    match tokio::time::timeout(Duration::from_secs(10), exited).await {
        Ok(done) => {
            let out = done.expect("join").expect("wait");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid, which has not been reaped (its wait runs).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            (None, String::new())
        }
    }
}

#[tokio::test]
async fn a_schedule_beside_retry_interval_or_max_retries_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let path = dir.path().join("idem.toml");
    let path_str = path.to_str().expect("utf8 path").to_string();
    let schedule = "schedule = [\"1s\", \"2s\"]";

    let alone = config(&dir.path().join("data"), &receiver, "", schedule);
    std::fs::write(&path, alone).expect("write config");
    let (code, err) = run_idem(&["check-config", "--config", &path_str]).await;
    assert_eq!(code, Some(0), "a schedule alone is a valid config: {err}");

    for extra in ["retry_interval = \"1s\"", "max_retries = 2"] {
        let both = config(
            &dir.path().join("data"),
            &receiver,
            "",
            &format!("{schedule}\n{extra}"),
        );
        std::fs::write(&path, both).expect("write config");
        for sub in ["check-config", "serve"] {
            let (code, err) = run_idem(&[sub, "--config", &path_str]).await;
            assert_eq!(
                code,
                Some(2),
                "{sub} with `{extra}` beside the schedule: {err}"
            );
            assert!(
                err.lines().any(|l| l.contains("delivery.schedule")),
                "{sub}: a line naming delivery.schedule: {err}"
            );
        }
    }
}

#[tokio::test]
async fn the_endpoints_of_a_tenant_are_its_action_urls_sorted_and_never_attempted_ones_closed() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery("inline_timeout = \"2s\"\nschedule = [\"1h\"]")
        .start()
        .await;
    let mut beta: Vec<String> = [
        "/notify",
        "/takeover",
        "/breach",
        "/ok",
        "/busy",
        "/refused",
        "/moved",
        "/slow",
        "/limited",
    ]
    .iter()
    .map(|p| receiver.url(p))
    .collect();
    beta.sort();
    let listed = endpoints_as(&client, BETA).await;
    let urls: Vec<&str> = listed
        .iter()
        .map(|e| e["url"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        urls, beta,
        "one entry per distinct action URL, sorted by url"
    );
    for e in &listed {
        assert_eq!(e["state"], "closed", "{e}");
        assert_eq!(e["consecutive_failures"], 0, "{e}");
        assert_eq!(e["last_success_at"], Value::Null, "{e}");
        assert_eq!(e["last_failure_at"], Value::Null, "{e}");
        assert_eq!(e["queued"], 0, "{e}");
    }

    let mut acme = vec![receiver.url("/case"), receiver.url("/lock")];
    acme.sort();
    let acme_urls: Vec<String> = endpoints_as(&client, ACME)
        .await
        .iter()
        .map(|e| e["url"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(acme_urls, acme, "each tenant sees its own endpoints only");

    for auth in [None, Some("Bearer sk_nobody_0123456789abcdef")] {
        let mut req = Req::new("");
        if let Some(auth) = auth {
            req = req.header("authorization", auth);
        }
        let r = client.send("GET", "/v1/endpoints", req).await;
        assert_problem(
            &r,
            401,
            "unauthorized",
            "GET /v1/endpoints without a valid key",
        );
    }

    // A delivered callback sets last_success_at, and only on its own endpoint.
    let (action, _) = notify_signal(&client).await;
    assert_eq!(action, "delivered");
    let notify_url = receiver.url("/notify");
    let notify = eventually(
        Duration::from_secs(2),
        || endpoint(&client, &notify_url),
        |e| e["last_success_at"].is_string(),
    )
    .await;
    assert_eq!(notify["state"], "closed", "{notify}");
    assert_eq!(notify["consecutive_failures"], 0, "{notify}");
    assert!(ms(&notify["last_success_at"]) > 0, "{notify}");
    assert_eq!(notify["last_failure_at"], Value::Null, "{notify}");
    let ok = endpoint(&client, &receiver.url("/ok")).await;
    assert_eq!(ok["last_success_at"], Value::Null, "{ok}");
}

#[tokio::test]
async fn a_2xx_or_a_4xx_resets_the_count_of_consecutive_failures() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery("inline_timeout = \"2s\"\nschedule = [\"1h\"]\nbreaker_threshold = 3\nbreaker_cooldown = \"1h\"").start().await;
    // Each signal's inline attempt gets the next answer (retries wait an hour).
    receiver.script(
        "/notify",
        &[
            status(503),
            status(200),
            status(503),
            status(503),
            status(400),
            status(503),
            status(503),
            status(503),
        ],
    );
    let url = receiver.url("/notify");
    let expect = [
        ("queued", 1, "a first failure"),
        ("delivered", 0, "a 2xx resets the count"),
        ("queued", 1, "counting again from the 2xx"),
        ("queued", 2, "a second one in a row"),
        (
            "failed",
            0,
            "a 4xx, a live receiver's verdict, resets the count",
        ),
        ("queued", 1, "counting again from the 4xx"),
        ("queued", 2, "still below the threshold of 3"),
    ];
    for (n, (want, failures, what)) in expect.into_iter().enumerate() {
        let (action, _) = notify_signal(&client).await;
        assert_eq!(action, want, "signal {}: {what}", n + 1);
        let e = eventually(
            Duration::from_secs(2),
            || endpoint(&client, &url),
            |e| e["consecutive_failures"] == failures,
        )
        .await;
        assert_eq!(e["state"], "closed", "signal {}: {what}: {e}", n + 1);
        assert_eq!(
            e["consecutive_failures"],
            failures,
            "signal {}: {what}: {e}",
            n + 1
        );
    }
    let e = endpoint(&client, &url).await;
    assert!(
        ms(&e["last_failure_at"]) >= ms(&e["last_success_at"]),
        "the last failure came after the success: {e}"
    );

    let (action, _) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    let open = until_open(&client, &url).await;
    assert_eq!(open["consecutive_failures"], 3, "{open}");
    assert_eq!(
        open["queued"], 6,
        "the six deliveries that got a retryable failure wait: {open}"
    );
    assert_eq!(receiver.seen_on("/notify").len(), 8);
}

#[tokio::test]
async fn retries_wait_each_step_of_the_schedule_from_the_end_of_the_attempt_then_the_delivery_is_dead(
) {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"2s\"\nschedule = [\"300ms\", \"600ms\"]\nbreaker_threshold = 100",
        )
        .start()
        .await;
    // Each attempt takes 200 ms, so a wait counted from the attempt's start would show.
    let slow_503 = ScriptedAnswer {
        status: 503,
        delay: Duration::from_millis(200),
        retry_after: None,
        body: None,
    };
    receiver.script("/notify", &[slow_503]);
    let (action, id) = notify_signal(&client).await;
    assert_eq!(action, "queued");

    let dead = until_status(&client, &id, "dead").await;
    assert_eq!(
        total(&dead),
        3,
        "the inline attempt and one retry per step: {dead}"
    );
    let attempts = logged(&dead);
    assert_eq!(attempts.len(), 3, "{dead}");
    for (n, a) in attempts.iter().enumerate() {
        assert_eq!(a["attempt"], n as u64 + 1, "{dead}");
        assert_eq!(a["status_code"], 503, "{dead}");
    }
    assert_eq!(dead["next_attempt_at"], Value::Null, "{dead}");
    for (n, step) in [(1usize, 300i64), (2, 600)] {
        let previous = &attempts[n - 1];
        let latency = previous["latency_ms"]
            .as_i64()
            .unwrap_or_else(|| panic!("no latency_ms: {previous}"));
        assert!(latency >= 190, "the receiver took 200 ms: {previous}");
        let gap = ms(&attempts[n]["at"]) - ms(&previous["at"]);
        assert!(
            gap >= latency + step - 5,
            "retry {n} waits {step} ms from the end of attempt {n}: {gap} ms after its start, \
             which took {latency} ms: {dead}"
        );
        assert!(
            gap <= latency + step * 11 / 10 + 1500,
            "retry {n} waits {step} ms times a jitter under 1.1, not much more: {gap} ms: {dead}"
        );
    }

    let seen = receiver.seen_on("/notify");
    assert_eq!(seen.len(), 3);
    assert!(seen[1].at.duration_since(seen[0].at) >= Duration::from_millis(495));
    assert!(seen[2].at.duration_since(seen[1].at) >= Duration::from_millis(795));
    let later = eventually(
        LATE,
        || async { receiver.seen_on("/notify").len() },
        |n| *n > 3,
    )
    .await;
    assert_eq!(later, 3, "no attempt once the schedule is used up");
}

#[tokio::test]
async fn a_retry_after_delays_a_retry_but_never_beyond_the_longest_step() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"2s\"\nschedule = [\"200ms\", \"400ms\"]\nbreaker_threshold = 100",
        )
        .start()
        .await;
    let an_hour_please = ScriptedAnswer {
        status: 503,
        delay: Duration::ZERO,
        retry_after: Some(3600),
        body: None,
    };
    receiver.script("/notify", &[an_hour_please]);
    let (action, id) = notify_signal(&client).await;
    assert_eq!(action, "queued");

    // While it waits, the next attempt is never announced further ahead than the longest step.
    let furthest = Cell::new(i64::MIN);
    let (dead, _) = eventually(
        Duration::from_secs(5),
        || async {
            let d = delivery(&client, &id).await;
            (d, now_ms() as i64)
        },
        |probe: &(Value, i64)| {
            let (d, now) = probe;
            if d["next_attempt_at"].is_string() {
                furthest.set(furthest.get().max(ms(&d["next_attempt_at"]) - now));
            }
            d["status"] == "dead"
        },
    )
    .await;
    assert_eq!(
        dead["status"], "dead",
        "Retry-After: 3600 is capped: {dead}"
    );
    assert_eq!(total(&dead), 3, "{dead}");
    assert!(
        furthest.get() > i64::MIN,
        "seen queued with a next attempt at least once"
    );
    assert!(
        furthest.get() <= 1500,
        "next_attempt_at at most about the longest step (400 ms) ahead: {} ms",
        furthest.get()
    );

    let seen = receiver.seen_on("/notify");
    assert_eq!(seen.len(), 3);
    for n in 1..3 {
        let gap = seen[n].at.duration_since(seen[n - 1].at);
        assert!(
            gap >= Duration::from_millis(390),
            "retry {n}: Retry-After delays it to the longest step, 400 ms: {gap:?}"
        );
        assert!(
            gap <= Duration::from_millis(2500),
            "retry {n}: never beyond the longest step (with jitter and slack): {gap:?}"
        );
    }
}

#[tokio::test]
async fn an_open_endpoint_gets_no_attempt_not_even_the_inline_one() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery("inline_timeout = \"2s\"\nschedule = [\"100ms\"]\nbreaker_threshold = 2\nbreaker_cooldown = \"1h\"\nmax_hold = \"1h\"").start().await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let url = receiver.url("/notify");
    assert_eq!(endpoint(&client, &url).await["state"], "closed");
    for _ in 0..2 {
        let (action, _) = notify_signal(&client).await;
        assert_eq!(action, "queued");
    }
    let open = until_open(&client, &url).await;
    assert!(
        open["consecutive_failures"]
            .as_u64()
            .is_some_and(|n| n >= 2),
        "{open}"
    );
    assert!(ms(&open["last_failure_at"]) > 0, "{open}");
    let attempted = receiver.seen_on("/notify").len();
    assert!(attempted >= 2, "two failures opened it");

    let (action, id) = notify_signal(&client).await;
    assert_eq!(
        action, "queued",
        "the inline attempt is skipped: queued at once"
    );
    let held = eventually(
        LATE,
        || delivery(&client, &id),
        |d| total(d) > 0 || d["status"] != "queued",
    )
    .await;
    assert_eq!(
        held["status"], "queued",
        "held, not dead: no attempt is used up while open (the schedule has one 100 ms step): {held}"
    );
    assert_eq!(total(&held), 0, "{held}");
    assert!(
        logged(&held).is_empty(),
        "an attempt not made is not logged: {held}"
    );
    assert!(
        calls_for(&receiver, &id).is_empty(),
        "the receiver never saw it"
    );
    assert_eq!(
        receiver.seen_on("/notify").len(),
        attempted,
        "nothing at all reaches an open endpoint"
    );
    let still = endpoint(&client, &url).await;
    assert_eq!(still["state"], "open", "{still}");
    assert!(still["queued"].as_u64().is_some_and(|n| n >= 1), "{still}");

    for e in endpoints_as(&client, ACME).await {
        assert_eq!(
            e["state"], "closed",
            "another tenant's endpoints are its own: {e}"
        );
        assert_ne!(e["url"], url);
    }
}

#[tokio::test]
async fn after_a_successful_probe_the_backlog_drains_within_the_in_flight_limit() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"2s\"\nschedule = [\"100ms\", \"100ms\", \"100ms\"]\n\
         breaker_threshold = 1\nbreaker_cooldown = \"2s\"\nmax_in_flight_per_endpoint = 2\nmax_hold = \"1h\"",
        )
        .start()
        .await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let url = receiver.url("/notify");
    let (action, first) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    until_open(&client, &url).await;
    let mut ids = vec![first];
    for _ in 0..8 {
        let (action, id) = notify_signal(&client).await;
        assert_eq!(action, "queued", "open: queued without an attempt");
        ids.push(id);
    }
    assert_eq!(
        receiver.seen_on("/notify").len(),
        1,
        "only the first signal's inline attempt was made"
    );

    // The receiver is back, and takes 200 ms over each callback.
    let answer_time = Duration::from_millis(200);
    receiver.answer("/notify", 200, answer_time);
    for id in &ids {
        until_status(&client, id, "delivered").await;
    }
    let seen = receiver.seen_on("/notify");
    assert_eq!(seen.len(), 10, "one failure, then one success per delivery");
    let d = delivery(&client, &ids[0]).await;
    assert_eq!(total(&d), 2, "{d}");
    for id in &ids[1..] {
        let d = delivery(&client, id).await;
        assert_eq!(total(&d), 1, "held while open, it used up no attempt: {d}");
        assert_eq!(logged(&d)[0]["status_code"], 200, "{d}");
    }

    assert!(
        seen[1].at.duration_since(seen[0].at) >= Duration::from_millis(1950),
        "the probe waits out the 2 s cooldown"
    );
    assert!(
        seen[2].at.duration_since(seen[1].at) >= Duration::from_millis(195),
        "nothing else goes out while the probe runs"
    );
    // Each callback holds one of idem's slots for at least the receiver's 200 ms.
    let held_for = Duration::from_millis(190);
    let arrivals: Vec<std::time::Instant> = seen[1..].iter().map(|cb| cb.at).collect();
    let most = most_at_once(&arrivals, held_for);
    assert!(
        most <= 2,
        "at most max_in_flight_per_endpoint = 2 attempts at once, saw {most}"
    );

    let closed = eventually(
        Duration::from_secs(2),
        || endpoint(&client, &url),
        |e| e["state"] == "closed" && e["queued"] == 0,
    )
    .await;
    assert_eq!(closed["state"], "closed", "{closed}");
    assert_eq!(closed["consecutive_failures"], 0, "{closed}");
    assert_eq!(closed["queued"], 0, "{closed}");
    assert!(
        ms(&closed["last_success_at"]) >= ms(&closed["last_failure_at"]),
        "{closed}"
    );
}

#[tokio::test]
async fn a_failed_probe_opens_the_endpoint_again_for_a_new_cooldown() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"2s\"\nschedule = [\"100ms\", \"100ms\", \"100ms\", \"100ms\"]\n\
         breaker_threshold = 1\nbreaker_cooldown = \"1s\"\nmax_hold = \"1h\"",
        )
        .start()
        .await;
    // The inline attempt fails at once; every later one fails after 600 ms, so the probe shows.
    let slow_503 = ScriptedAnswer {
        status: 503,
        delay: Duration::from_millis(600),
        retry_after: None,
        body: None,
    };
    receiver.script("/notify", &[status(503), slow_503]);
    let url = receiver.url("/notify");
    let (action, first) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    let opened = until_open(&client, &url).await;
    let first_failure = ms(&opened["last_failure_at"]);
    let mut ids = vec![first];
    for _ in 0..2 {
        let (action, id) = notify_signal(&client).await;
        assert_eq!(action, "queued");
        ids.push(id);
    }

    let probing = eventually(
        Duration::from_secs(5),
        || endpoint(&client, &url),
        |e| e["state"] == "half_open",
    )
    .await;
    assert_eq!(
        probing["state"], "half_open",
        "while the probe runs: {probing}"
    );
    let reopened = eventually(
        Duration::from_secs(5),
        || endpoint(&client, &url),
        |e| e["state"] == "open" && e["last_failure_at"] != opened["last_failure_at"],
    )
    .await;
    assert_eq!(
        reopened["state"], "open",
        "a failed probe opens it again: {reopened}"
    );
    let probe_failure = ms(&reopened["last_failure_at"]);
    assert!(
        probe_failure - first_failure >= 950,
        "the probe (whose start last_failure_at shows) waited out the 1 s cooldown: \
         {first_failure} then {probe_failure}"
    );
    assert!(
        reopened["consecutive_failures"]
            .as_u64()
            .is_some_and(|n| n >= 2),
        "{reopened}"
    );
    assert_eq!(
        receiver.seen_on("/notify").len(),
        2,
        "the inline attempt and the one probe"
    );
    // The breaker reopens when the probe's answer comes; its delivery records the attempt
    // just after, so the count is read until it settles.
    let made = eventually(
        Duration::from_secs(2),
        || async {
            let mut made = 0;
            for id in &ids {
                let d = delivery(&client, id).await;
                assert_eq!(d["status"], "queued", "{d}");
                made += total(&d);
            }
            made
        },
        |made| *made >= 2,
    )
    .await;
    assert_eq!(
        made, 2,
        "no attempt besides the inline one and the single probe"
    );

    let seen = eventually(
        Duration::from_secs(5),
        || async { receiver.seen_on("/notify") },
        |seen| seen.len() >= 3,
    )
    .await;
    assert!(seen.len() >= 3, "a new probe after the new cooldown");
    assert!(
        seen[1].at.duration_since(seen[0].at) >= Duration::from_millis(950),
        "the first probe waited out the cooldown"
    );
    let again = seen[2].at.duration_since(seen[1].at);
    assert!(
        again >= Duration::from_millis(1500),
        "the new cooldown runs from the failed probe's end (600 ms answer + 1 s): {again:?}"
    );
}

#[tokio::test]
async fn an_open_endpoint_stays_open_across_a_sigkill_and_restart() {
    let (_dir, receiver, idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"2s\"\nschedule = [\"100ms\"]\nbreaker_threshold = 1\nbreaker_cooldown = \"1h\"\nmax_hold = \"1h\"",
        )
        .answer("/notify", status(503))
        .start()
        .await;
    let url = receiver.url("/notify");
    let (action, held) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    let before = until_open(&client, &url).await;
    assert_eq!(before["consecutive_failures"], 1, "{before}");

    // SIGKILL: the opening is durable once it shows, with no shutdown to flush it.
    let config_path = idem.kill();
    let idem = Idem::start_with(config_path, &[]);
    let client = Client::new(&idem.base);

    let after = endpoint(&client, &url).await;
    assert_eq!(after["state"], "open", "{after}");
    assert_eq!(
        after["consecutive_failures"], before["consecutive_failures"],
        "{after}"
    );
    assert_eq!(
        after["last_failure_at"], before["last_failure_at"],
        "{after}"
    );
    let (action, id) = notify_signal(&client).await;
    assert_eq!(
        action, "queued",
        "still open after the restart: no inline attempt"
    );
    let d = eventually(LATE, || delivery(&client, &id), |d| total(d) > 0).await;
    assert_eq!(total(&d), 0, "{d}");
    assert_eq!(d["status"], "queued", "{d}");
    assert!(calls_for(&receiver, &id).is_empty());
    let old = delivery(&client, &held).await;
    assert_eq!(
        old["status"], "queued",
        "still held, the cooldown is an hour: {old}"
    );
    assert_eq!(total(&old), 1, "{old}");
    assert_eq!(
        receiver.seen_on("/notify").len(),
        1,
        "nothing was sent to the open endpoint after the restart"
    );
}

#[tokio::test]
async fn bulk_redelivery_follows_its_filters_and_a_retry_under_its_key_redelivers_nothing() {
    let started = now_ms();
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery("inline_timeout = \"2s\"\nschedule = [\"100ms\"]\nbreaker_threshold = 100")
        .start()
        .await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (action, id) = notify_signal(&client).await;
        assert_eq!(action, "queued");
        ids.push(id);
    }
    for id in &ids {
        let d = until_status(&client, id, "dead").await;
        assert_eq!(total(&d), 2, "{d}");
    }

    let hour_ahead = rfc3339_millis(now_ms() + 3_600_000);
    let excluding = [
        (json!({"status": "dead", "action": "ok"}), "another action"),
        (
            json!({"status": "dead", "since": hour_ahead.clone()}),
            "created before `since`",
        ),
        (
            json!({"status": "dead", "until": "2020-01-01T00:00:00Z"}),
            "created after `until`",
        ),
        (json!({"status": "failed"}), "none failed"),
    ];
    for (filter, what) in excluding {
        let r = bulk(&client, &filter, None).await;
        assert_eq!(r.status, 202, "{what}: {}", text(&r));
        assert_eq!(r.json(), json!({"redelivered": 0}), "{what}");
    }
    for id in &ids {
        let d = delivery(&client, id).await;
        assert_eq!(
            d["status"], "dead",
            "untouched by a filter that excludes it: {d}"
        );
        assert_eq!(total(&d), 2, "{d}");
    }

    // Still 503: the redelivered series die again, so a repeated request would show.
    let matching = json!({
        "status": "dead",
        "action": "notify",
        "since": rfc3339_millis(started - 1000),
        "until": hour_ahead.clone(),
    });
    let key = unique("bulk");
    let first = bulk(&client, &matching, Some(key.as_str())).await;
    assert_eq!(first.status, 202, "{}", text(&first));
    assert!(!first.replayed());
    assert_eq!(first.json(), json!({"redelivered": 3}));
    for id in &ids {
        let d = eventually(
            Duration::from_secs(5),
            || delivery(&client, id),
            |d| total(d) >= 4 && d["status"] == "dead",
        )
        .await;
        assert_eq!(d["status"], "dead", "{d}");
        assert_eq!(total(&d), 4, "a new series of two attempts: {d}");
    }
    let calls = receiver.seen_on("/notify").len();
    assert_eq!(calls, 12);

    let again = bulk(&client, &matching, Some(key.as_str())).await;
    assert_eq!(again.status, 202, "{}", text(&again));
    assert!(again.replayed(), "Idempotent-Replayed: {}", text(&again));
    assert_eq!(again.body, first.body, "the first answer again");
    let later = eventually(
        LATE,
        || async { receiver.seen_on("/notify").len() },
        |n| *n > calls,
    )
    .await;
    assert_eq!(
        later, calls,
        "a retry of the bulk request redelivers nothing"
    );
    for id in &ids {
        let d = delivery(&client, id).await;
        assert_eq!(d["status"], "dead", "{d}");
        assert_eq!(total(&d), 4, "{d}");
    }
    let reused = bulk(&client, &json!({"status": "dead"}), Some(key.as_str())).await;
    assert_problem(&reused, 422, "key-reused", "the bulk key with another body");

    receiver.answer("/notify", 200, Duration::ZERO);
    let other_key = unique("bulk");
    let recovered = bulk(
        &client,
        &json!({"status": "dead"}),
        Some(other_key.as_str()),
    )
    .await;
    assert_eq!(recovered.status, 202, "{}", text(&recovered));
    assert_eq!(recovered.json(), json!({"redelivered": 3}));
    for id in &ids {
        let d = until_status(&client, id, "delivered").await;
        assert_eq!(total(&d), 5, "{d}");
        assert_eq!(logged(&d)[4]["status_code"], 200, "{d}");
        assert_eq!(calls_for(&receiver, id).len(), 5);
    }
    let none_left = bulk(&client, &json!({"status": "dead"}), None).await;
    assert_eq!(none_left.status, 202, "{}", text(&none_left));
    assert_eq!(none_left.json(), json!({"redelivered": 0}));

    for (body, what) in [
        ("{}", "no status"),
        (
            r#"{"status":"queued"}"#,
            "a status that cannot be redelivered",
        ),
        (r#"{"status":"lost"}"#, "no such status"),
        (
            r#"{"status":"dead","since":"yesterday"}"#,
            "since is not RFC 3339",
        ),
        (r#"{"status":"dead""#, "not JSON"),
        (
            r#"{"status":"failed","status":"dead"}"#,
            "status named twice (which filter applies?)",
        ),
        (
            r#"{"status":"dead","action":"notify","action":"ok"}"#,
            "action named twice",
        ),
    ] {
        let r = client
            .send("POST", "/v1/deliveries/redeliver", Req::new(body).beta())
            .await;
        assert_eq!(r.status, 400, "{what}: {}", text(&r));
        assert!(
            r.problem_type().starts_with("urn:idem:problem:"),
            "{what}: {}",
            text(&r)
        );
    }
    let anonymous = client
        .send(
            "POST",
            "/v1/deliveries/redeliver",
            Req::new(r#"{"status":"dead"}"#),
        )
        .await;
    assert_eq!(anonymous.status, 401, "{}", text(&anonymous));
}

#[tokio::test]
async fn redelivery_is_rate_limited_and_the_log_keeps_the_last_hundred_attempts() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery("inline_timeout = \"2s\"\nschedule = [\"50ms\"]\nbreaker_threshold = 1000")
        .start()
        .await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let (action, id) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    let d = until_status(&client, &id, "dead").await;
    assert_eq!(total(&d), 2, "{d}");

    // Thirty at once: well beyond the burst of 10, however slowly they are served.
    let burst = futures::future::join_all((0..30).map(|_| redeliver(&client, &id))).await;
    let statuses: Vec<u16> = burst.iter().map(|r| r.status).collect();
    for r in &burst {
        assert!(matches!(r.status, 202 | 409 | 429), "{}", text(r));
    }
    let accepted = burst.iter().filter(|r| r.status == 202).count() as u64;
    assert!(accepted >= 1, "the first one redelivers: {statuses:?}");
    let limited: Vec<&Resp> = burst.iter().filter(|r| r.status == 429).collect();
    assert!(
        !limited.is_empty(),
        "30 at once exceed 10 a second: {statuses:?}"
    );
    for r in limited {
        assert!(
            r.header("retry-after")
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|s| s >= 1),
            "Retry-After in seconds: {}",
            text(r)
        );
        assert_problem(r, 429, "rate-limited", "over the redelivery rate");
    }
    let other_tenant = client
        .send(
            "POST",
            "/v1/deliveries/redeliver",
            Req::new(r#"{"status":"dead"}"#).header("authorization", ACME),
        )
        .await;
    assert_eq!(
        other_tenant.status,
        202,
        "the limit is per tenant: {}",
        text(&other_tenant)
    );
    assert_eq!(other_tenant.json(), json!({"redelivered": 0}));

    // Every series is two attempts (the first and one retry); redeliver, at the rate allowed,
    // until more than a hundred were made.
    let mut want = 2 + 2 * accepted;
    let mut d = eventually(
        Duration::from_secs(5),
        || delivery(&client, &id),
        |d| total(d) >= want && d["status"] == "dead",
    )
    .await;
    assert_eq!(total(&d), want, "{d}");
    while total(&d) <= 100 {
        assert_eq!(
            logged(&d).len() as u64,
            total(&d).min(100),
            "the log holds every attempt up to a hundred: {d}"
        );
        let r = eventually(
            Duration::from_secs(3),
            || redeliver(&client, &id),
            |r| r.status != 429,
        )
        .await;
        assert_eq!(r.status, 202, "{}", text(&r));
        want += 2;
        d = eventually(
            Duration::from_secs(5),
            || delivery(&client, &id),
            |d| total(d) >= want && d["status"] == "dead",
        )
        .await;
        assert_eq!(d["status"], "dead", "{d}");
        assert_eq!(total(&d), want, "{d}");
    }

    let made = total(&d);
    assert_eq!(
        made,
        calls_for(&receiver, &id).len() as u64,
        "attempts_total counts every attempt the receiver saw"
    );
    let log = logged(&d);
    assert_eq!(
        log.len(),
        100,
        "at most the last hundred are kept: {made} made"
    );
    let numbers: Vec<u64> = log
        .iter()
        .map(|a| a["attempt"].as_u64().unwrap_or(0))
        .collect();
    let last_hundred: Vec<u64> = (made - 99..=made).collect();
    assert_eq!(
        numbers, last_hundred,
        "the last hundred, numbered from the first attempt ever"
    );
}

#[tokio::test]
async fn metrics_count_endpoints_by_state() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery("inline_timeout = \"2s\"\nschedule = [\"1h\"]\nbreaker_threshold = 1\nbreaker_cooldown = \"1h\"").start().await;
    const OPEN: &str = r#"idem_endpoints{state="open"}"#;
    const HALF_OPEN: &str = r#"idem_endpoints{state="half_open"}"#;
    const CLOSED: &str = r#"idem_endpoints{state="closed"}"#;
    let page = metrics(&client).await;
    assert_eq!(
        metric_value(&page, OPEN).unwrap_or(0.0),
        0.0,
        "nothing open yet:\n{page}"
    );

    receiver.answer("/notify", 503, Duration::ZERO);
    let (action, _) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    until_open(&client, &receiver.url("/notify")).await;
    let page = eventually(
        Duration::from_secs(5),
        || metrics(&client),
        |p| metric_value(p, OPEN) == Some(1.0),
    )
    .await;
    assert_eq!(metric_value(&page, OPEN), Some(1.0), "{page}");
    assert_eq!(metric_value(&page, HALF_OPEN).unwrap_or(0.0), 0.0, "{page}");
    assert!(metric_value(&page, CLOSED).is_some(), "{page}");
}

#[tokio::test]
async fn attempts_waiting_for_a_place_are_not_made_once_the_endpoint_opens() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"3s\"\nschedule = [\"1h\"]\nbreaker_threshold = 1\n\
         breaker_cooldown = \"1h\"\nmax_in_flight_per_endpoint = 1",
        )
        .start()
        .await;
    // One place: the first signal's attempt takes it and fails after 500 ms, opening the
    // endpoint while the others wait for the place.
    receiver.answer("/notify", 503, Duration::from_millis(500));
    let sent = futures::future::join_all((0..4).map(|_| notify_signal(&client))).await;
    for (action, _) in &sent {
        assert_eq!(action, "queued");
    }
    assert_eq!(
        receiver.seen_on("/notify").len(),
        1,
        "only the attempt that held the place went; the waiters saw the endpoint open"
    );
    let mut made = 0;
    for (_, id) in &sent {
        made += total(&delivery(&client, id).await);
    }
    assert_eq!(made, 1, "the waiters used up no attempt");
}

#[tokio::test]
async fn an_inline_attempt_waiting_for_a_place_keeps_to_one_inline_timeout() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"4s\"\nschedule = [\"1h\"]\nbreaker_threshold = 100\n\
         max_in_flight_per_endpoint = 1",
        )
        .start()
        .await;
    // One place, held for 3 s by the first signal's attempt: the second waits for it.
    receiver.answer("/notify", 200, Duration::from_secs(3));
    let first = tokio::spawn({
        let client = client.clone();
        async move { notify_signal(&client).await }
    });
    eventually(
        Duration::from_secs(5),
        || async { receiver.seen_on("/notify").len() },
        |n| *n >= 1,
    )
    .await;
    let asked = std::time::Instant::now();
    let (action, id) = notify_signal(&client).await;
    let answered = asked.elapsed();
    // The wait for the place and the attempt share one deadline of inline_timeout: no place
    // within half of it, and the callback is held back, queued with no attempt made.
    assert!(
        answered < Duration::from_secs(4),
        "answered after {answered:?}, past inline_timeout (4 s)"
    );
    assert_eq!(action, "queued");
    assert_eq!(total(&delivery(&client, &id).await), 0, "no attempt made");
    let (action, _) = first.await.expect("first");
    assert_eq!(action, "delivered");
    // Once the place is free, the held-back callback goes, as its first attempt.
    let d = until_status(&client, &id, "delivered").await;
    assert_eq!(total(&d), 1, "{d}");
    assert_eq!(receiver.seen_on("/notify").len(), 2);
}

#[tokio::test]
async fn a_delivery_held_by_an_open_endpoint_past_max_hold_is_dead_with_no_attempt_made() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(
            "inline_timeout = \"1s\"\nschedule = [\"100ms\", \"100ms\"]\nbreaker_threshold = 1\n\
             breaker_cooldown = \"1h\"\nmax_hold = \"1s\"",
        )
        .start()
        .await;
    receiver.answer("/notify", 503, Duration::ZERO);
    // The inline attempt fails and opens the endpoint; the delivery is held from then on.
    let (action, id) = notify_signal(&client).await;
    assert_eq!(action, "queued");
    let d = until_status(&client, &id, "dead").await;
    assert_eq!(d["dead_reason"], "endpoint_open", "{d}");
    assert_eq!(total(&d), 1, "held, never attempted again: {d}");
    assert_eq!(receiver.seen_on("/notify").len(), 1);
}
