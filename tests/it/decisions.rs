//! The decisions a tenant can look up, against a real `idem serve` and a real receiver:
//! `GET /v1/decisions/{id}` shows a decision as its `201` showed it, except that each action's
//! status is where its delivery stands now (queued, then dead or delivered, as the retry worker
//! gets on); `GET /v1/decisions?subject=…` lists the tenant's decisions about that raw subject,
//! newest first, filtered by type and walked a page at a time, one entry per decision made (a
//! keyed signal's replay and a once-per-subject signal's copies make none); another tenant's
//! decision is as missing as a missing one; bad queries are 400 `invalid-query` and keyless
//! requests 401; decisions survive a restart and a SIGKILL, outlive their idempotency key, are
//! forgotten after `[decisions] retention`, and the subject is never stored or logged in clear.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const DELIVERY: &str = "inline_timeout = \"1s\"";
/// One retry, soon: a failing delivery is dead after two attempts.
const RETRYING: &str = "inline_timeout = \"1s\"\nretry_interval = \"300ms\"\nmax_retries = 1";

/// A bodiless request as tenant beta.
fn beta() -> Req {
    Req::new("").beta()
}

/// A bodiless request as tenant acme (its Bearer key; reads need no signature).
fn acme() -> Req {
    Req::new("").header("authorization", "Bearer sk_acme_test_key")
}

/// The listing path of `subject`'s decisions, with `rest` (`&type=…`, …) after it.
fn about(subject: &str, rest: &str) -> String {
    format!("/v1/decisions?subject={}{rest}", enc(subject))
}

/// Asserts that `r` is a first processing's `201`; its body.
fn created(r: Resp, what: &str) -> Value {
    assert_eq!(r.status, 201, "{what}: {}", text(&r));
    assert!(!r.replayed(), "{what}: a first processing: {}", text(&r));
    r.json()
}

fn id_of(decision: &Value) -> String {
    decision["decision_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision_id in {decision}"))
        .to_string()
}

/// `GET /v1/decisions/{id}` with `req`'s headers.
async fn lookup(client: &Client, id: &str, req: Req) -> Resp {
    client
        .send("GET", &format!("/v1/decisions/{id}"), req)
        .await
}

/// A decision's view of a signal posted to `/v1/signals`: its `source` is null; the rest, the
/// fields of its 201, is returned to compare with that.
fn posted(mut view: Value) -> Value {
    let source = view.as_object_mut().and_then(|v| v.remove("source"));
    assert_eq!(source, Some(Value::Null), "posted, from no source: {view}");
    view
}

/// Beta's decision `id`, asserted found (without its null `source`: see [`posted`]).
async fn found(client: &Client, id: &str) -> Value {
    let r = lookup(client, id, beta()).await;
    assert_eq!(r.status, 200, "GET /v1/decisions/{id}: {}", text(&r));
    assert_eq!(r.header("content-type"), Some("application/json"));
    posted(r.json())
}

/// The status of the first action of beta's decision `id` now.
async fn first_action_status(client: &Client, id: &str) -> String {
    found(client, id).await["actions"][0]["status"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// One page of a listing (asserted 200): its decisions (see [`posted`]) and its `next_after`.
async fn page(client: &Client, path: &str, req: Req) -> (Vec<Value>, Option<String>) {
    let r = client.send("GET", path, req).await;
    assert_eq!(r.status, 200, "GET {path}: {}", text(&r));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.json();
    let next = &body["next_after"];
    assert!(
        next.is_null() || next.is_string(),
        "next_after is a string or null: {body}"
    );
    let data = body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("GET {path}: no data in {body}"))
        .iter()
        .cloned()
        .map(posted)
        .collect();
    (data, next.as_str().map(str::to_string))
}

/// The decision ids of one page (asserted 200, whatever its `next_after`).
async fn listed(client: &Client, path: &str, req: Req) -> Vec<String> {
    page(client, path, req).await.0.iter().map(id_of).collect()
}

/// The ids of a whole listing that fits one page: asserts `next_after` is null.
async fn all_listed(client: &Client, path: &str, req: Req) -> Vec<String> {
    let (data, next) = page(client, path, req).await;
    assert_eq!(next, None, "GET {path}: a single page");
    data.iter().map(id_of).collect()
}

/// Walks a listing page by page (beta), `limit` a page: each page's ids, in order.
async fn walk(client: &Client, path: &str, limit: usize) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..20 {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = match &after {
            Some(a) => format!("{path}{sep}limit={limit}&after={}", enc(a)),
            None => format!("{path}{sep}limit={limit}"),
        };
        let (data, next) = page(client, &url, beta()).await;
        assert!(data.len() <= limit, "GET {url}: at most {limit}");
        pages.push(data.iter().map(id_of).collect());
        match next {
            Some(next) => {
                assert!(
                    next.starts_with("dec_"),
                    "GET {url}: a cursor, got {next:?}"
                );
                after = Some(next);
            }
            None => return pages,
        }
    }
    panic!("GET {path}: the pages never ended: {pages:?}");
}

/// A looked-up decision says what its `201` answer said.
fn assert_same_decision(view: &serde_json::Value, answer: &serde_json::Value) {
    for field in [
        "decision_id",
        "type",
        "decision",
        "subject_hash",
        "created_at",
    ] {
        assert_eq!(view[field], answer[field], "{field}: {view} vs {answer}");
    }
}

#[tokio::test]
async fn a_decision_looked_up_by_its_id_is_the_decision_its_answer_showed() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let subject = "+447700900123";
    let key = unique("show");
    let body = sim_swap(subject);
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    let first_bytes = first.body.clone();
    let answer = created(first, "a keyed sim_swap");
    assert_eq!(answer["actions"][0]["status"], "delivered");
    let id = id_of(&answer);

    let view = found(&client, &id).await;
    assert_same_decision(&view, &answer);
    assert_eq!(view["type"], "sim_swap");
    assert_eq!(view["decision"], "step_up");
    let actions = view["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 1, "{view}");
    assert_eq!(actions[0]["name"], "notify");
    assert_eq!(
        actions[0]["delivery_id"],
        answer["actions"][0]["delivery_id"]
    );
    assert_eq!(actions[0]["status"], "delivered");
    assert_eq!(view, answer, "the 201's fields, nothing more, nothing less");
    let callbacks = receiver.seen_on("/notify");
    assert_eq!(callbacks.len(), 1);
    assert_eq!(callbacks[0].header("webhook-id"), actions[0]["delivery_id"]);

    // The key's replay is that decision's answer, and the decision is unchanged by it.
    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert!(replay.replayed(), "{}", text(&replay));
    assert_eq!(replay.body, first_bytes);
    assert_eq!(found(&client, &id).await, view);

    // A keyless decision is kept too.
    let keyless = created(
        client.signal(Req::new(&sim_swap(subject)).beta()).await,
        "a keyless sim_swap",
    );
    assert_ne!(id_of(&keyless), id);
    assert_eq!(found(&client, &id_of(&keyless)).await, keyless);

    // A keyed decision without actions (acme's port_out; acme's signals are keyed by their
    // webhook-id), looked up with acme's key.
    let port_out = format!(r#"{{"type":"port_out","subject":"{subject}"}}"#);
    let acme_answer = created(
        client
            .signal(Req::new(&port_out).acme_signed(&unique("port")))
            .await,
        "acme's port_out",
    );
    assert_eq!(acme_answer["actions"], serde_json::json!([]));
    let r = lookup(&client, &id_of(&acme_answer), acme()).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(posted(r.json()), acme_answer);

    // Unknown ids.
    for unknown in [
        "dec_0000000000000000000000000000000a".to_string(),
        format!("{id}0"),
        "nope".to_string(),
    ] {
        let r = lookup(&client, &unknown, beta()).await;
        assert_problem(
            &r,
            404,
            "not-found",
            &format!("GET /v1/decisions/{unknown}"),
        );
    }
}

#[tokio::test]
async fn a_decision_shows_its_deliveries_status_now_until_dead_then_redelivered() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(RETRYING).start().await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let subject = "+447700900201";
    let key = unique("dead");
    let body = sim_swap(subject);
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    let first_bytes = first.body.clone();
    let answer = created(first, "a sim_swap whose callback gets 503");
    assert_eq!(answer["actions"][0]["status"], "queued", "{answer}");
    let id = id_of(&answer);
    let delivery_id = answer["actions"][0]["delivery_id"]
        .as_str()
        .expect("delivery_id")
        .to_string();

    assert_eq!(
        first_action_status(&client, &id).await,
        "queued",
        "before the retry"
    );
    let status = eventually(
        Duration::from_secs(5),
        || first_action_status(&client, &id),
        |s| s == "dead",
    )
    .await;
    assert_eq!(
        status, "dead",
        "after the inline attempt and one retry got 503"
    );
    assert_eq!(
        receiver.seen_on("/notify").len(),
        2,
        "the inline attempt and max_retries = 1 retry"
    );
    let view = found(&client, &id).await;
    assert_same_decision(&view, &answer);
    assert_eq!(view["actions"][0]["delivery_id"], delivery_id.as_str());
    let (data, _) = page(&client, &about(subject, ""), beta()).await;
    assert_eq!(
        data,
        vec![view.clone()],
        "the listing shows the status now too"
    );
    // The key's replay is still the answer as it was: the stored bytes.
    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first_bytes);

    // Redelivered, it is delivered: the decision follows.
    receiver.answer("/notify", 200, Duration::ZERO);
    let again = client
        .send(
            "POST",
            &format!("/v1/deliveries/{delivery_id}/redeliver"),
            beta(),
        )
        .await;
    assert_eq!(again.status, 202, "{}", text(&again));
    let status = eventually(
        Duration::from_secs(5),
        || first_action_status(&client, &id),
        |s| s == "delivered",
    )
    .await;
    assert_eq!(status, "delivered", "after the redelivery got 200");
}

#[tokio::test]
async fn a_decision_shows_a_retried_delivery_delivered_and_a_refused_one_failed() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(RETRYING).start().await;
    receiver.script("/notify", &[status(503), status(200)]);
    let answer = created(
        client
            .signal(
                Req::new(&sim_swap("+447700900202"))
                    .key(&unique("retried"))
                    .beta(),
            )
            .await,
        "a sim_swap whose callback gets 503, then 200",
    );
    assert_eq!(answer["actions"][0]["status"], "queued", "{answer}");
    let id = id_of(&answer);
    assert_eq!(first_action_status(&client, &id).await, "queued");
    let status = eventually(
        Duration::from_secs(5),
        || first_action_status(&client, &id),
        |s| s == "delivered",
    )
    .await;
    assert_eq!(status, "delivered", "after the retry got 200");
    assert_eq!(receiver.seen_on("/notify").len(), 2);

    // A terminal answer: failed, inline and now.
    receiver.answer("/notify", 400, Duration::ZERO);
    let refused = created(
        client
            .signal(Req::new(&sim_swap("+447700900203")).beta())
            .await,
        "a sim_swap whose callback gets 400",
    );
    assert_eq!(refused["actions"][0]["status"], "failed", "{refused}");
    assert_eq!(found(&client, &id_of(&refused)).await, refused);
}

#[tokio::test]
async fn a_subjects_decisions_are_listed_newest_first_by_type_and_in_pages() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let s = "+447700900301";
    let t = "+447700900302";
    let outcomes = format!(r#"{{"type":"outcomes","subject":"{s}"}}"#);
    let replayed_key = unique("list");
    let signals = [
        (sim_swap(s), None),
        (sim_swap(s), Some(replayed_key.clone())),
        (outcomes.clone(), Some(unique("list"))),
        (sim_swap(s), None),
        (sim_swap(s), Some(unique("list"))),
    ];
    let mut made = Vec::new();
    let mut answers = Vec::new();
    for (n, (body, key)) in signals.iter().enumerate() {
        let req = match key {
            Some(key) => Req::new(body).key(key).beta(),
            None => Req::new(body).beta(),
        };
        let answer = created(client.signal(req).await, &format!("signal {n} for S"));
        made.push(id_of(&answer));
        answers.push(answer);
    }
    let mut made_t = Vec::new();
    for n in 0..2 {
        let answer = created(
            client.signal(Req::new(&sim_swap(t)).beta()).await,
            &format!("signal {n} for T"),
        );
        assert_ne!(answer["subject_hash"], answers[0]["subject_hash"]);
        made_t.push(id_of(&answer));
    }
    // A keyed signal's replay makes no decision.
    let replay = client
        .signal(Req::new(&sim_swap(s)).key(&replayed_key).beta())
        .await;
    assert!(replay.replayed(), "{}", text(&replay));
    assert_eq!(id_of(&replay.json()), made[1]);

    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    let (data, next) = page(&client, &about(s, ""), beta()).await;
    assert_eq!(next, None, "one page");
    let ids: Vec<String> = data.iter().map(id_of).collect();
    assert_eq!(
        ids, newest_first,
        "S's five decisions, newest first, no T's"
    );
    for (entry, answer) in data.iter().zip(answers.iter().rev()) {
        assert_eq!(
            entry, answer,
            "each entry is its decision as it was answered"
        );
        assert_eq!(entry, &found(&client, &id_of(entry)).await);
    }
    assert_eq!(
        all_listed(&client, &about(t, ""), beta()).await,
        made_t.iter().rev().cloned().collect::<Vec<_>>(),
        "T's two"
    );
    assert_eq!(
        all_listed(&client, &about("+447700900399", ""), beta()).await,
        Vec::<String>::new(),
        "a subject without decisions"
    );
    assert_eq!(
        all_listed(&client, &about(s.trim_start_matches('+'), ""), beta()).await,
        Vec::<String>::new(),
        "the subject is matched exactly"
    );

    // By type.
    let sim_swaps: Vec<String> = [4, 3, 1, 0].iter().map(|&n| made[n].clone()).collect();
    assert_eq!(
        all_listed(&client, &about(s, "&type=sim_swap"), beta()).await,
        sim_swaps
    );
    assert_eq!(
        all_listed(&client, &about(s, "&type=outcomes"), beta()).await,
        [made[2].clone()]
    );
    assert_eq!(
        all_listed(&client, &about(s, "&type=breach"), beta()).await,
        Vec::<String>::new()
    );

    // In pages: every decision once, the last page's next_after null.
    let pages = walk(&client, &about(s, ""), 2).await;
    assert_eq!(
        pages,
        vec![
            newest_first[0..2].to_vec(),
            newest_first[2..4].to_vec(),
            newest_first[4..5].to_vec(),
        ],
        "5 decisions in pages of 2"
    );
    let pages = walk(&client, &about(s, "&type=sim_swap"), 2).await;
    assert_eq!(
        pages,
        vec![sim_swaps[0..2].to_vec(), sim_swaps[2..4].to_vec()],
        "4 sim_swaps in 2 full pages, the second the last"
    );
    let pages = walk(&client, &about(s, ""), 1).await;
    assert_eq!(pages.concat(), newest_first, "pages of 1");
    assert_eq!(pages.len(), 5);
    // A cursor from the middle starts after it.
    assert_eq!(
        listed(
            &client,
            &about(s, &format!("&after={}", newest_first[1])),
            beta()
        )
        .await,
        newest_first[2..].to_vec()
    );

    // A subject spelled with characters a query must escape is found as it was sent.
    let odd = "user 42 & co/é?=+#";
    let odd_body = format!(r#"{{"type":"sim_swap","subject":"{odd}"}}"#);
    let odd_answer = created(
        client.signal(Req::new(&odd_body).beta()).await,
        "an odd subject",
    );
    assert_eq!(
        all_listed(&client, &about(odd, ""), beta()).await,
        [id_of(&odd_answer)]
    );
}

#[tokio::test]
async fn without_a_subject_the_tenants_decisions_are_listed_newest_first_in_pages() {
    let (_dir, _receiver, _idem, client) = Harness::new().start().await;
    let mut made = Vec::new();
    for n in 0..5 {
        let body = match n % 2 {
            0 => sim_swap(&format!("+1555000{n}")),
            _ => format!(r#"{{"type":"outcomes","subject":"+1666000{n}"}}"#),
        };
        let key = unique("recent");
        made.push(id_of(&created(
            client.signal(Req::new(&body).key(&key).beta()).await,
            "a beta signal",
        )));
    }
    // Another tenant's decision is never in beta's list.
    let other = unique("other");
    created(
        client
            .signal(Req::new(&sim_swap("+1777")).key(&other).acme_signed(&other))
            .await,
        "an acme signal",
    );
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    let pages = walk(&client, "/v1/decisions", 2).await;
    assert_eq!(pages.concat(), newest_first, "{pages:?}");
    assert_eq!(pages.len(), 3, "{pages:?}");
    let swaps: Vec<String> = newest_first.iter().step_by(2).cloned().collect();
    assert_eq!(
        all_listed(&client, "/v1/decisions?type=sim_swap", beta()).await,
        swaps
    );
    assert_eq!(
        all_listed(&client, "/v1/decisions", acme()).await.len(),
        1,
        "acme sees its own one"
    );
}

#[tokio::test]
async fn a_once_per_subject_subject_lists_one_decision_however_many_signals() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let u = "+447700900401";
    let takeover = |risk: u32| {
        format!(r#"{{"type":"account_takeover","subject":"{u}","metadata":{{"risk":{risk}}}}}"#)
    };
    let key = unique("ato");
    let first = created(
        client
            .signal(Req::new(&takeover(90)).key(&key).beta())
            .await,
        "the first account_takeover",
    );
    let id = id_of(&first);
    let copies = [
        Req::new(&takeover(90)).beta(),
        Req::new(&takeover(12)).beta(),
        Req::new(&takeover(55)).key(&unique("ato")).beta(),
        Req::new(&takeover(90)).key(&key).beta(),
    ];
    for (n, req) in copies.into_iter().enumerate() {
        let r = client.signal(req).await;
        assert_eq!(r.status, 201, "copy {n}: {}", text(&r));
        assert!(r.replayed(), "copy {n}: {}", text(&r));
        assert_eq!(id_of(&r.json()), id, "copy {n}: the first decision");
    }
    assert_eq!(
        all_listed(&client, &about(u, ""), beta()).await,
        std::slice::from_ref(&id)
    );
    assert_eq!(
        all_listed(&client, &about(u, "&type=account_takeover"), beta()).await,
        std::slice::from_ref(&id)
    );
    assert_eq!(found(&client, &id).await, first);

    // Another type for the subject is a decision of its own, listed before it.
    let other = created(
        client.signal(Req::new(&sim_swap(u)).beta()).await,
        "a sim_swap for the subject",
    );
    assert_eq!(
        all_listed(&client, &about(u, ""), beta()).await,
        [id_of(&other), id]
    );
}

#[tokio::test]
async fn another_tenants_decisions_are_not_found_nor_listed() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let s = "+447700900501";
    let acme_answer = created(
        client
            .signal(Req::new(&sim_swap(s)).acme_signed(&unique("scope")))
            .await,
        "acme's sim_swap",
    );
    let beta_answer = created(
        client.signal(Req::new(&sim_swap(s)).beta()).await,
        "beta's sim_swap",
    );
    let (acme_id, beta_id) = (id_of(&acme_answer), id_of(&beta_answer));

    let r = lookup(&client, &acme_id, acme()).await;
    assert_eq!(r.status, 200, "acme finds its own: {}", text(&r));
    assert_eq!(posted(r.json()), acme_answer);
    let r = lookup(&client, &acme_id, beta()).await;
    assert_problem(&r, 404, "not-found", "acme's decision with beta's key");
    let r = lookup(&client, &beta_id, acme()).await;
    assert_problem(&r, 404, "not-found", "beta's decision with acme's key");

    assert_eq!(
        all_listed(&client, &about(s, ""), acme()).await,
        [acme_id],
        "acme lists only its own decisions about S"
    );
    assert_eq!(
        all_listed(&client, &about(s, ""), beta()).await,
        [beta_id],
        "beta lists only its own decisions about S"
    );
}

#[tokio::test]
async fn bad_queries_are_invalid_query_and_keyless_requests_unauthorized() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let s = "+447700900601";
    let id = id_of(&created(
        client.signal(Req::new(&sim_swap(s)).beta()).await,
        "a sim_swap",
    ));
    let subject = format!("subject={}", enc(s));
    let bad = [
        "/v1/decisions?subject=".to_string(),
        "/v1/decisions?limit=0".to_string(),
        format!("/v1/decisions?{subject}&limit=0"),
        format!("/v1/decisions?{subject}&limit=201"),
        format!("/v1/decisions?{subject}&limit=x"),
        format!("/v1/decisions?{subject}&limit=-1"),
        format!("/v1/decisions?{subject}&after=msg_0123"),
        format!("/v1/decisions?{subject}&after=x"),
        format!("/v1/decisions?{subject}&status=queued"),
        format!("/v1/decisions?{subject}&subject_hash=ab"),
    ];
    for path in &bad {
        let r = client.send("GET", path, beta()).await;
        assert_problem(&r, 400, "invalid-query", &format!("GET {path}"));
    }
    // The bounds themselves are fine, as is any cursor of the right form.
    for good in [
        format!("/v1/decisions?{subject}&limit=1"),
        format!("/v1/decisions?{subject}&limit=200"),
        format!("/v1/decisions?{subject}&type=sim_swap&limit=1&after=dec_zzz"),
    ] {
        assert_eq!(
            listed(&client, &good, beta()).await,
            std::slice::from_ref(&id),
            "{good}"
        );
    }

    let keyless = [
        format!("/v1/decisions/{id}"),
        format!("/v1/decisions?{subject}"),
        "/v1/decisions".to_string(),
    ];
    for path in &keyless {
        for (what, req) in [
            ("no Authorization", Req::new("")),
            (
                "an unknown key",
                Req::new("").header("authorization", "Bearer sk_nobody"),
            ),
            (
                "not Bearer",
                Req::new("").header("authorization", "Basic c2tfYmV0YV90ZXN0X2tleQ=="),
            ),
        ] {
            let r = client.send("GET", path, req).await;
            assert_problem(&r, 401, "unauthorized", &format!("GET {path} with {what}"));
        }
    }
}

/// The rows of `idem_decisions` as (where, bytes) when the config at `config_path` is on
/// PostgreSQL (every column's bytes); none on sled.
fn decision_rows(config_path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let Some(url) = postgres_url(config_path) else {
        return Vec::new();
    };
    with_postgres(&url, |client| async move {
        let rows = client
            .query(
                "SELECT tenant || ' ' || id || ' ' || signal_type, subject || record \
                 FROM idem_decisions",
                &[],
            )
            .await
            .expect("read idem_decisions");
        rows.iter()
            .map(|row| {
                let text: String = row.get(0);
                let mut bytes: Vec<u8> = row.get(1);
                bytes.extend_from_slice(text.as_bytes());
                (format!("idem_decisions {text}"), bytes)
            })
            .collect()
    })
}

#[tokio::test]
async fn decisions_survive_a_restart_and_a_sigkill_and_the_subject_is_never_in_clear() {
    let (dir, _receiver, idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let s = "+447700900777";
    let keyed = created(
        client
            .signal(Req::new(&sim_swap(s)).key(&unique("restart")).beta())
            .await,
        "a keyed sim_swap",
    );
    let keyless = created(
        client
            .signal(Req::new(&format!(r#"{{"type":"outcomes","subject":"{s}"}}"#)).beta())
            .await,
        "a keyless outcomes",
    );
    let ids = [id_of(&keyed), id_of(&keyless)];
    let before = [found(&client, &ids[0]).await, found(&client, &ids[1]).await];
    assert_eq!(before, [keyed.clone(), keyless.clone()]);
    let listing = page(&client, &about(s, ""), beta()).await;
    let logs = idem.stderr();
    let (status, config_path) = idem.terminate().await;
    assert!(status.success(), "clean shutdown exits 0: {status:?}");

    // What was stored and logged, the lookups included, has no subject in clear.
    let pg_rows = decision_rows(&config_path);
    let pg = std::env::var("IDEM_TEST_STORE").as_deref() == Ok("postgres");
    if pg {
        assert_eq!(pg_rows.len(), 2, "both decisions are rows: {pg_rows:?}");
    }
    let mut held = stored(&config_path, &dir.path().join("data"));
    held.extend(pg_rows);
    assert_subject_not_held(&held, s);
    assert!(!logs.contains(s.trim_start_matches('+')), "logs: {logs}");

    let idem = Idem::start_with(config_path, &[]);
    let client = Client::new(&idem.base);
    for (id, was) in ids.iter().zip(&before) {
        assert_eq!(&found(&client, id).await, was, "{id} after a restart");
    }
    assert_eq!(
        page(&client, &about(s, ""), beta()).await,
        listing,
        "the listing after a restart"
    );

    // A decision answered just before a SIGKILL was durable when answered.
    let killed = created(
        client.signal(Req::new(&sim_swap(s)).beta()).await,
        "a keyless sim_swap before the SIGKILL",
    );
    let config_path = idem.kill();
    let idem = Idem::start_with(config_path, &[]);
    let client = Client::new(&idem.base);
    assert_eq!(found(&client, &id_of(&killed)).await, killed);
    assert_eq!(
        all_listed(&client, &about(s, ""), beta()).await,
        [id_of(&killed), ids[1].clone(), ids[0].clone()]
    );
}

#[tokio::test]
async fn a_decision_is_forgotten_after_its_retention() {
    let (_dir, _receiver, _idem, client) = Harness::new()
        .idempotency("sweep_interval = \"200ms\"")
        .delivery(DELIVERY)
        .decisions("retention = \"1s\"")
        .start()
        .await;
    let s = "+447700900801";
    let key = unique("retention");
    let body = sim_swap(s);
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    let first_bytes = first.body.clone();
    let answer = created(first, "a keyed sim_swap");
    let keyless = created(
        client.signal(Req::new(&sim_swap(s)).beta()).await,
        "a keyless sim_swap",
    );
    let (id, keyless_id) = (id_of(&answer), id_of(&keyless));
    assert_eq!(found(&client, &id).await, answer, "found at first");
    assert_eq!(
        all_listed(&client, &about(s, ""), beta()).await,
        [keyless_id.clone(), id.clone()],
        "listed at first"
    );

    for id in [&id, &keyless_id] {
        let r = eventually(
            Duration::from_secs(5),
            || lookup(&client, id, beta()),
            |r| r.status != 200,
        )
        .await;
        assert_problem(&r, 404, "not-found", &format!("{id} after retention = 1s"));
    }
    assert_eq!(
        all_listed(&client, &about(s, ""), beta()).await,
        Vec::<String>::new(),
        "no longer listed"
    );

    // The key's window (key_ttl, 24h) is its own: its answer still replays, and the delivery
    // is kept as long as the longer of the two.
    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert!(replay.replayed(), "{}", text(&replay));
    assert_eq!(replay.body, first_bytes);
    let delivery_id = answer["actions"][0]["delivery_id"].as_str().expect("id");
    let d = client.beta_delivery(delivery_id).await;
    assert_eq!(d.status, 200, "{}", text(&d));
}

#[tokio::test]
async fn a_keyed_decision_outlives_its_key() {
    let (_dir, _receiver, _idem, client) = Harness::new()
        .idempotency("key_ttl = \"1s\"\nsweep_interval = \"200ms\"")
        .delivery(DELIVERY)
        .start()
        .await;
    let s = "+447700900901";
    let key = unique("outlive");
    let body = sim_swap(s);
    let answer = created(
        client.signal(Req::new(&body).key(&key).beta()).await,
        "a keyed sim_swap",
    );
    let id = id_of(&answer);

    // Once the key has expired, the same request is a new decision.
    let again = eventually(
        Duration::from_secs(5),
        || client.signal(Req::new(&body).key(&key).beta()),
        |r| !r.replayed(),
    )
    .await;
    let again = created(again, "the key's request after key_ttl");
    assert_ne!(id_of(&again), id);

    // The first decision, and its delivery's status, stay through several sweeps.
    let r = eventually(
        Duration::from_millis(1500),
        || lookup(&client, &id, beta()),
        |r| r.status != 200,
    )
    .await;
    assert_eq!(r.status, 200, "past its key's key_ttl: {}", text(&r));
    assert_eq!(posted(r.json()), answer);
    assert_eq!(
        all_listed(&client, &about(s, ""), beta()).await,
        [id_of(&again), id]
    );
}
