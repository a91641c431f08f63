//! The PostgreSQL store's own behaviour, on this machine's server (a fresh database per test):
//! nodes starting together on an empty database all come up and share one schema, and a
//! database whose schema is newer than this idem knows is refused with exit status 2 and one
//! line naming both versions; `/healthz` answers 503 while the database cannot be reached and
//! 200 once it can again; a database of an older schema that still holds claims is refused
//! (its records are in an older idem's format) and an empty one migrated; a request waiting
//! (`Prefer: wait`) on one node for a key held by another is answered as soon as the holder's
//! answer is durable; a once-per-subject window that ends while its decision runs on one node
//! is not decided again on another; nodes whose clocks are minutes off the database's (under
//! libfaketime) change no outcome.
//! (Every contract test also runs on PostgreSQL: `scripts/test`.)

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// Runs `query` on the database at `url`.
fn sql(url: &str, query: &str) {
    psql(url, query);
}

/// What `query` on the database at `url` answers, unaligned and trimmed.
fn psql(url: &str, query: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-Atqc", query])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A temp dir, a receiver, a fresh database and a config on it.
async fn on_a_fresh_database() -> (tempfile::TempDir, Receiver, String, String) {
    on_a_fresh_database_with("").await
}

/// [`on_a_fresh_database`], the config's `[delivery]` section being `delivery`.
async fn on_a_fresh_database_with(delivery: &str) -> (tempfile::TempDir, Receiver, String, String) {
    on_a_fresh_database_configured("", delivery).await
}

/// [`on_a_fresh_database`], with `idempotency` and `delivery` in those sections.
async fn on_a_fresh_database_configured(
    idempotency: &str,
    delivery: &str,
) -> (tempfile::TempDir, Receiver, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let url = test_database();
    let cfg = config_on(
        &on_postgres(&url),
        &dir.path().join("data"),
        &receiver,
        idempotency,
        delivery,
    );
    (dir, receiver, url, cfg)
}

#[tokio::test]
async fn nodes_starting_together_on_an_empty_database_all_come_up() {
    let (dir, _receiver, _, cfg) = on_a_fresh_database().await;
    let nodes: Vec<_> = (0..3)
        .map(|n| {
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir_all(&node_dir).expect("dir");
            let path = node_dir.join("idem.toml");
            std::fs::write(&path, &cfg).expect("config");
            std::thread::spawn(move || Idem::start_with(path, &[]))
        })
        .collect();
    let nodes: Vec<Idem> = nodes
        .into_iter()
        .map(|n| n.join().expect("node started"))
        .collect();
    // One schema, and each node serves: a key claimed through one is a replay through another.
    let key = unique("pg");
    let body = sim_swap("+1555");
    let first = Client::new(&nodes[0].base)
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert_eq!(first.status, 201);
    let again = Client::new(&nodes[2].base)
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
}

/// `idem serve` on the database at `url`, which must refuse it: its exit code and stderr.
async fn refused_on(url: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let cfg = config_on(
        &on_postgres(url),
        &dir.path().join("data"),
        &receiver,
        "",
        "",
    );
    serve_to_exit(dir.path(), &cfg)
}

#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused_with_exit_2() {
    let url = test_database();
    sql(&url, "CREATE TABLE idem_schema (version integer NOT NULL)");
    sql(&url, "INSERT INTO idem_schema (version) VALUES (99)");
    let (code, stderr) = refused_on(&url).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("version 99") && stderr.contains("version 11 "),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_database_that_commits_without_syncing_is_refused_with_exit_2() {
    let url = test_database();
    let name = url.rsplit('/').next().expect("a database name").to_string();
    sql(
        &url,
        &format!("ALTER DATABASE \"{name}\" SET synchronous_commit = off"),
    );
    let (code, stderr) = refused_on(&url).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("synchronous_commit = off"), "{stderr}");
    // Nothing was created there: the refusal comes before the schema.
    let tables = with_postgres(&url, |client| async move {
        client
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'idem%'",
                &[],
            )
            .await
            .map(|row| row.get::<_, i64>(0))
            .expect("count")
    });
    assert_eq!(tables, 0);
}

/// `count` nodes on one database, each given `cfg`.
fn nodes(dir: &std::path::Path, cfg: &str, count: usize) -> Vec<Idem> {
    (0..count)
        .map(|n| {
            let node_dir = dir.join(format!("node{n}"));
            std::fs::create_dir_all(&node_dir).expect("dir");
            Idem::start(&node_dir, cfg)
        })
        .collect()
}

#[tokio::test]
async fn copies_of_a_key_spread_over_nodes_make_one_decision() {
    let (dir, receiver, _, cfg) = on_a_fresh_database().await;
    let nodes = nodes(dir.path(), &cfg, 3);
    let clients: Vec<Client> = nodes.iter().map(|n| Client::new(&n.base)).collect();
    let keys: Vec<String> = (0..8).map(|n| unique(&format!("spread{n}"))).collect();
    let body = sim_swap("+1555");
    let mut sends = Vec::new();
    for key in &keys {
        for copy in 0..9 {
            let (client, body) = (&clients[copy % 3], &body);
            sends.push(async move {
                let r = client
                    .signal(Req::new(body).key(key).acme_signed(key))
                    .await;
                (key.clone(), r)
            });
        }
    }
    let answers = futures::future::join_all(sends).await;
    for key in &keys {
        let mine: Vec<&Resp> = answers
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, r)| r)
            .collect();
        assert!(mine.iter().all(|r| r.status == 201 || r.status == 409));
        let bodies: std::collections::HashSet<&Vec<u8>> = mine
            .iter()
            .filter(|r| r.status == 201)
            .map(|r| &r.body)
            .collect();
        assert_eq!(bodies.len(), 1, "one decision for {key}");
        let firsts = mine
            .iter()
            .filter(|r| r.status == 201 && !r.replayed())
            .count();
        assert_eq!(firsts, 1, "one first processing for {key}");
    }
    // One callback per action and decision: no node took over a live node's claim.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.seen().len(), keys.len() * 2);
}

#[tokio::test]
async fn a_live_nodes_claim_is_not_taken_over_by_another() {
    let (dir, receiver, _, cfg) = on_a_fresh_database().await;
    receiver.answer("/lock", 200, Duration::from_millis(1500));
    let nodes = nodes(dir.path(), &cfg, 3);
    let (a, b) = (Client::new(&nodes[0].base), Client::new(&nodes[1].base));
    let key = unique("live");
    let body = sim_swap("+1555");
    let first = {
        let (body, key) = (body.clone(), key.clone());
        let a = Client::new(&nodes[0].base);
        tokio::spawn(async move { a.signal(Req::new(&body).key(&key).acme_signed(&key)).await })
    };
    // A's callback has reached the receiver, which holds its answer: A's claim is in flight.
    receiver.wait_for(1).await;
    let meanwhile = b.signal(Req::new(&body).key(&key).acme_signed(&key)).await;
    assert_eq!(
        meanwhile.status, 409,
        "the holder lives: in flight, not taken over"
    );
    let first = first.await.expect("first");
    assert_eq!(first.status, 201);
    let replay = b.signal(Req::new(&body).key(&key).acme_signed(&key)).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    let _ = a;
    assert_eq!(receiver.seen().len(), 2, "each action once");
}

/// A once-per-subject window shorter than the decision's callback ends while that decision
/// runs on one node. Another node that gets the next signal for the subject meanwhile finds the
/// subject's claim still holding it (expired, but neither completed nor in flight for
/// `in_flight_timeout`), so it decides nothing and cannot fence the first decision's records;
/// once that decision has completed, the next signal is a new decision.
#[tokio::test]
async fn a_subject_whose_window_ends_mid_decision_is_not_decided_again_on_another_node() {
    let (dir, receiver, url, cfg) = on_a_fresh_database_with("inline_timeout = \"5s\"").await;
    let callback = Duration::from_millis(2_000);
    receiver.answer("/breach", 200, callback);
    let nodes = nodes(dir.path(), &cfg, 2);
    let (a, b) = (Client::new(&nodes[0].base), Client::new(&nodes[1].base));
    let subject = unique("acct");
    // `breach` is decided once per 700 ms.
    let window = Duration::from_millis(700);
    let breach =
        |n: u8| format!(r#"{{"type":"breach","subject":"{subject}","metadata":{{"n":{n}}}}}"#);
    let started = std::time::Instant::now();
    let first = {
        let (a, body) = (a.clone(), breach(1));
        tokio::spawn(async move { a.signal(Req::new(&body).beta()).await })
    };
    eventually(
        Duration::from_secs(5),
        || async { receiver.seen_on("/breach").len() },
        |n| *n >= 1,
    )
    .await;
    tokio::time::sleep(window.saturating_sub(started.elapsed()) + Duration::from_millis(100)).await;
    let meanwhile = b.signal(Req::new(&breach(2)).beta()).await;
    assert!(
        started.elapsed() < callback,
        "the callback had ended already"
    );
    assert_eq!(meanwhile.status, 409, "{}", text(&meanwhile));
    let first = first.await.expect("the first request");
    assert_first(&first, "the slow first decision");
    assert_eq!(
        receiver.seen_on("/breach").len(),
        1,
        "one decision, one callback"
    );

    // The completion follows the answer in a later commit: once it is durable, the subject is
    // free and the next signal is a new decision.
    let running = "SELECT count(*) FROM idem_claims WHERE NOT completed";
    eventually(
        Duration::from_secs(5),
        || async { psql(&url, running) },
        |n| n == "0",
    )
    .await;
    let next = b.signal(Req::new(&breach(3)).beta()).await;
    assert_first(&next, "the next signal once the first completed");
    assert_ne!(decision_id(&next), decision_id(&first));
}

/// `libfaketime`, which moves a process's clock (Debian's `faketime`, installed by
/// `scripts/install-faketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Nodes whose clocks are five minutes off the database's, one ahead and one behind, change no
/// outcome: every time a node keeps is the database's, so a key claimed on one node is held by
/// the same clock on every other (a 60 s `key_ttl` has not passed for the node ahead, and one
/// claimed by the node behind has not passed already for the others).
#[tokio::test]
async fn nodes_whose_clocks_are_minutes_off_the_databases_change_no_outcome() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: scripts/install-faketime installs it"
    );
    let (dir, _receiver, _, cfg) = on_a_fresh_database_configured("key_ttl = \"60s\"", "").await;
    let start = |name: &str, skew: &str| {
        let node_dir = dir.path().join(name);
        std::fs::create_dir_all(&node_dir).expect("dir");
        let env = [("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", skew)];
        let env = match skew {
            "" => &env[..0],
            _ => &env[..],
        };
        Idem::start_env(&node_dir, &cfg, env)
    };
    let nodes = [
        start("on_time", ""),
        start("ahead", "+300s"),
        start("behind", "-300s"),
    ];
    let [on_time, ahead, behind] = nodes.each_ref().map(|n| Client::new(&n.base));
    for (first, then, what) in [
        (
            &on_time,
            &ahead,
            "claimed on time, sent again to the node ahead",
        ),
        (
            &behind,
            &on_time,
            "claimed by the node behind, sent again on time",
        ),
        (
            &ahead,
            &behind,
            "claimed by the node ahead, sent again to the node behind",
        ),
    ] {
        let key = unique("skew");
        let body = sim_swap("+1555");
        let decided = first.signal(Req::new(&body).beta().key(&key)).await;
        assert_first(&decided, what);
        let again = then.signal(Req::new(&body).beta().key(&key)).await;
        assert!(again.replayed(), "{what}: {}", text(&again));
        assert_eq!(again.body, decided.body, "{what}");
    }
    for (node, name) in [(&nodes[1], "ahead"), (&nodes[2], "behind")] {
        assert!(
            node.stderr().contains("clock is off the database's"),
            "the node {name} says so: {}",
            node.stderr()
        );
    }
}

#[tokio::test]
async fn healthz_says_while_the_database_cannot_be_reached() {
    let (dir, _receiver, url, cfg) = on_a_fresh_database().await;
    let idem = Idem::start(dir.path(), &cfg);
    let client = Client::new(&idem.base);
    let (answered, refused) = send_until_refused(&idem.base, 5).await;
    assert!(refused.is_none());
    assert_eq!(
        client.send("GET", "/healthz", Req::new("")).await.status,
        200
    );

    // The database goes away for idem: no new connection, the open ones cut.
    let (server, name) = url.rsplit_once('/').expect("a database URL");
    let admin = format!("{server}/postgres");
    sql(
        &admin,
        &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"),
    );
    sql(
        &admin,
        &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"),
    );
    let down = client.send("GET", "/healthz", Req::new("")).await;
    assert_eq!(down.status, 503, "the store cannot write");
    assert_eq!(
        down.header("content-type"),
        Some("application/problem+json")
    );
    assert!(
        down.json()["detail"]
            .as_str()
            .unwrap_or("")
            .contains("store"),
        "with the reason: {}",
        String::from_utf8_lossy(&down.body)
    );
    let (_, refused) = send_until_refused(&idem.base, 1).await;
    let (failed, answer) = refused.expect("no claim while the database is away");
    let answer = answer.expect("answered, not cut off");
    assert!(answer.status >= 500, "{}", answer.status);

    // Back: the same process recovers by itself.
    sql(
        &admin,
        &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
    );
    let up = eventually(
        Duration::from_secs(10),
        || client.send("GET", "/healthz", Req::new("")),
        |r| r.status == 200,
    )
    .await;
    assert_eq!(up.status, 200, "healthy again once the database answers");
    assert_replays(&idem.base, &answered).await;
    let r = retry_after_crash(|| client.signal(failed.request())).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Runs `idem serve` on `cfg` to its exit: its status and its stderr.
fn serve_to_exit(dir: &std::path::Path, cfg: &str) -> (Option<i32>, String) {
    let path = dir.join("idem.toml");
    std::fs::write(&path, cfg).expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run idem");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn an_older_schema_holding_records_is_refused_and_an_empty_one_migrated() {
    let (dir, _receiver, url, cfg) = on_a_fresh_database().await;
    // Schema 3 as an older idem left it (its records in another format): one claim of its own,
    // and an endpoint's health.
    {
        let idem = Idem::start(dir.path(), &cfg);
        idem.terminate().await;
    }
    sql(&url, "UPDATE idem_schema SET version = 3");
    sql(
        &url,
        "INSERT INTO idem_claims (tenant, digest, generation, expires_at_ms, log, writes, holder) \
         VALUES ('acme', '\\x00', 1, 9999999999999, '\\x04', 1, 1)",
    );
    sql(
        &url,
        "INSERT INTO idem_endpoints (tenant, url, health) VALUES ('acme', 'http://x/', '\\x04')",
    );
    let (code, stderr) = serve_to_exit(dir.path(), &cfg);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("schema 3 with 1 claims, deliveries and decisions")
            && stderr.contains("new database"),
        "{stderr}"
    );
    // Without them, schema 3 is brought to this idem's; the old health is gone.
    sql(&url, "DELETE FROM idem_claims");
    let idem = Idem::start(dir.path(), &cfg);
    let key = unique("migrated");
    let first = Client::new(&idem.base)
        .signal(Req::new(&sim_swap("+1555")).key(&key).acme_signed(&key))
        .await;
    assert_eq!(first.status, 201);
    let version = with_postgres(&url, |client| async move {
        let row = client
            .query_one("SELECT version FROM idem_schema", &[])
            .await
            .expect("version");
        row.get::<_, i32>(0)
    });
    assert_eq!(version, 11);
    let old_health = with_postgres(&url, |client| async move {
        let row = client
            .query_one(
                "SELECT count(*) FROM idem_endpoints WHERE url = 'http://x/'",
                &[],
            )
            .await
            .expect("endpoints");
        row.get::<_, i64>(0)
    });
    assert_eq!(old_health, 0);
}

/// Refused, each an older idem's: a schema-1 database (it has no decisions table) holding a
/// delivery, and a schema-2 one holding a decision.
#[tokio::test]
async fn older_schemas_holding_deliveries_or_decisions_are_refused() {
    for (version, setup, insert) in [
        (
            1,
            "DROP TABLE idem_decisions; DROP TABLE idem_endpoints",
            "INSERT INTO idem_deliveries (id, tenant, url, status, expires_at_ms, log, records) \
             VALUES ('msg_old', 'acme', 'http://x/', 0, 9999999999999, '\\x04', 1)",
        ),
        (
            2,
            "DROP TABLE idem_endpoints",
            "INSERT INTO idem_decisions (tenant, id, subject, signal_type, expires_at_ms, record) \
             VALUES ('acme', 'dec_old', '\\x00', 'sim_swap', 9999999999999, '\\x04')",
        ),
    ] {
        let (dir, _receiver, url, cfg) = on_a_fresh_database().await;
        Idem::start(dir.path(), &cfg).terminate().await;
        sql(
            &url,
            &format!("{setup}; UPDATE idem_schema SET version = {version}"),
        );
        sql(&url, insert);
        let (code, stderr) = serve_to_exit(dir.path(), &cfg);
        assert_eq!(code, Some(2), "schema {version}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "schema {version} with 1 claims, deliveries and decisions"
            )),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn a_waiter_on_another_node_is_answered_when_the_holders_answer_is_durable() {
    let (dir, receiver, _, cfg) = on_a_fresh_database().await;
    let hold = Duration::from_millis(900);
    receiver.answer("/notify", 200, hold);
    let nodes = nodes(dir.path(), &cfg, 2);
    let (holder, other) = (Client::new(&nodes[0].base), Client::new(&nodes[1].base));
    let key = unique("remote-wait");
    let body = sim_swap("+1555").replace("\"risk\":97", "\"risk\":3");
    let first = {
        let (c, k, b) = (holder.clone(), key.clone(), body.clone());
        tokio::spawn(async move {
            let r = c.signal(Req::new(&b).beta().key(&k)).await;
            (r, std::time::Instant::now())
        })
    };
    let seen = eventually(
        Duration::from_secs(10),
        || async { receiver.seen_on("/notify").len() },
        |n| *n >= 1,
    )
    .await;
    assert_eq!(seen, 1, "the holder's callback never came");

    let waited = other
        .signal(Req::new(&body).beta().key(&key).header("prefer", "wait=8"))
        .await;
    let waiter_done = std::time::Instant::now();
    let (first, first_done) = first.await.expect("first");
    assert_eq!(first.status, 201);
    assert_eq!(
        waited.status,
        201,
        "{}",
        String::from_utf8_lossy(&waited.body)
    );
    assert!(waited.replayed());
    assert_eq!(waited.body, first.body);
    assert_eq!(waited.header("preference-applied"), Some("wait=8"));
    // Told by the holder's node, not left to its deadline.
    let late = waiter_done.saturating_duration_since(first_done);
    assert!(
        late < Duration::from_millis(500),
        "the waiter came {late:?} after the first"
    );
    assert_eq!(receiver.seen_on("/notify").len(), 1);
}

/// `GET /v1/endpoints`' entry for `url`, as beta.
async fn beta_endpoint(client: &Client, url: &str) -> serde_json::Value {
    let r = client
        .send("GET", "/v1/endpoints", Req::new("").beta())
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()["data"]
        .as_array()
        .and_then(|d| d.iter().find(|e| e["url"] == url).cloned())
        .unwrap_or_else(|| panic!("{url} not listed"))
}

#[tokio::test]
async fn an_endpoint_opened_on_one_node_gets_no_attempt_from_another_and_they_share_its_limit() {
    let (dir, receiver, _url, cfg) = on_a_fresh_database_with(
        "inline_timeout = \"2s\"\nschedule = [\"100ms\"]\nbreaker_threshold = 2\n\
         breaker_cooldown = \"1h\"\nmax_in_flight_per_endpoint = 2",
    )
    .await;
    let nodes = nodes(dir.path(), &cfg, 2);
    let (a, b) = (Client::new(&nodes[0].base), Client::new(&nodes[1].base));
    let signal = |client: &Client| {
        let client = client.clone();
        async move {
            let r = client.signal(Req::new(&sim_swap("+1555")).beta()).await;
            assert_eq!(r.status, 201, "{}", text(&r));
            r.json()["actions"][0]["status"]
                .as_str()
                .unwrap_or("")
                .to_string()
        }
    };

    // The limit is shared: two nodes of max_in_flight_per_endpoint = 2 make one attempt each
    // at once, however many signals each is sent (once each has seen the other alive).
    for client in [&a, &b] {
        let metrics = eventually(
            Duration::from_secs(5),
            || async { text(&client.send("GET", "/metrics", Req::new("")).await) },
            |m| m.contains("idem_endpoint_in_flight_share 1\n"),
        )
        .await;
        assert!(
            metrics.contains("idem_endpoint_in_flight_share 1\n"),
            "{metrics}"
        );
    }
    receiver.answer("/notify", 200, Duration::from_millis(300));
    let notify = receiver.url("/notify");
    let mut sent = Vec::new();
    for client in [&a, &b, &a, &b, &a, &b] {
        sent.push(tokio::spawn(signal(client)));
    }
    for s in sent {
        s.await.expect("signal");
    }
    let arrivals: Vec<std::time::Instant> =
        receiver.seen_on("/notify").iter().map(|cb| cb.at).collect();
    assert_eq!(arrivals.len(), 6, "every callback made once");
    let held_for = Duration::from_millis(290);
    let most = most_at_once(&arrivals, held_for);
    assert!(
        most <= 2,
        "at most 2 attempts at once across the nodes, saw {most}"
    );

    // Two failures on node A open the endpoint in the database.
    receiver.answer("/notify", 503, Duration::ZERO);
    for _ in 0..2 {
        assert_eq!(signal(&a).await, "queued");
    }
    let opened = beta_endpoint(&b, &notify).await;
    assert_eq!(
        opened["state"], "open",
        "node B reads it from the database: {opened}"
    );
    assert!(
        opened["consecutive_failures"]
            .as_u64()
            .is_some_and(|n| n >= 2),
        "{opened}"
    );
    // Node B's breaker follows within its refresh.
    let metrics = eventually(
        Duration::from_secs(5),
        || async {
            let r = b.send("GET", "/metrics", Req::new("")).await;
            text(&r)
        },
        |m| m.contains("idem_endpoints{state=\"open\"} 1"),
    )
    .await;
    assert!(
        metrics.contains("idem_endpoints{state=\"open\"} 1"),
        "{metrics}"
    );
    let before = receiver.seen_on("/notify").len();
    assert_eq!(
        signal(&b).await,
        "queued",
        "node B skips the inline attempt too"
    );
    assert_eq!(
        receiver.seen_on("/notify").len(),
        before,
        "no attempt went to the open endpoint from node B"
    );
}

#[tokio::test]
async fn a_source_event_sent_to_every_node_at_once_makes_one_decision_and_one_delivery() {
    let (dir, receiver, url, cfg) = on_a_fresh_database().await;
    let cfg = with_okta_hook(&cfg);
    let nodes = nodes(dir.path(), &cfg, 3);
    let clients: Vec<Client> = nodes.iter().map(|n| Client::new(&n.base)).collect();
    let events = 12;
    let mut sends = Vec::new();
    for n in 0..events {
        for client in &clients {
            let (uuid, who) = (format!("evt-{n}"), format!("user{n}@example.com"));
            sends.push(async move {
                client
                    .send(
                        "POST",
                        "/v1/sources/beta/hook",
                        okta_hook_delivery(&uuid, &who),
                    )
                    .await
            });
        }
    }
    let answers = futures::future::join_all(sends).await;
    let mut accepted = 0;
    for r in &answers {
        // A copy still being claimed on another node is answered 503, for the provider to retry.
        assert!(r.status == 200 || r.status == 503, "{}", text(r));
        if r.status == 200 {
            accepted += r.json()["accepted"].as_u64().unwrap_or(0);
        }
    }
    assert_eq!(accepted, events, "each event accepted by exactly one node");
    // The nodes that lost the claim wrote none of their decision's queued deliveries.
    let rows = with_postgres(&url, |client| async move {
        let row = client
            .query_one("SELECT count(*) FROM idem_deliveries", &[])
            .await
            .expect("count");
        row.get::<_, i64>(0)
    });
    assert_eq!(rows, events as i64);
    eventually(
        Duration::from_secs(10),
        || async { receiver.seen_on("/notify") },
        |s| s.len() >= events as usize,
    )
    .await;
    // One callback per event, and no more in a while: the check polls, failing at the first.
    let seen = eventually(
        Duration::from_millis(500),
        || async { receiver.seen_on("/notify") },
        |s| s.len() > events as usize,
    )
    .await;
    let ids: std::collections::HashSet<&str> =
        seen.iter().map(|c| c.header("webhook-id")).collect();
    assert_eq!(seen.len(), events as usize, "{seen:?}");
    assert_eq!(ids.len(), events as usize, "{seen:?}");
}
