//! Rules: a playbook decides by the first of its CEL rules whose `when` is true, over the signal
//! and the subject's earlier decisions, and by its own decision otherwise. A bad rule or a
//! failing test is a config error naming its key and the position in the expression, from
//! `check-config`, at start and on SIGHUP (the running config kept); the rule that decided is
//! named in the response, `GET /v1/decisions/{id}` and the callbacks; a rule whose evaluation
//! fails does not match, and its failure is kept and counted; a replay answers the stored
//! decision even after the rules changed. Runs on sled, or PostgreSQL with
//! `IDEM_TEST_STORE=postgres`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::store::store_section;
use crate::support::*;

/// Tenant `acme`: `sim_swap` reviews by default (`/case`), denies a risky signal (`/lock`) and
/// steps up a subject with a `breach` decision in the last hour (`/notify`); `breach` allows.
/// `high_risk` is the first rule's decision.
pub(crate) fn tenants(receiver: &Receiver, high_risk: &str) -> String {
    format!(
        r#"
[tenants.acme]
api_key = "sk_acme_test_key"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.breach]
decision = "allow"

[tenants.acme.playbooks.sim_swap]
decision = "review"
actions = [{{ name = "open_case", url = "{case}" }}]

[[tenants.acme.playbooks.sim_swap.rules]]
name = "high-risk"
when = 'signal.metadata.risk >= 90'
decision = "{high_risk}"
actions = [{{ name = "lock_account", url = "{lock}" }}]

[[tenants.acme.playbooks.sim_swap.rules]]
name = "after-breach"
when = 'subject.decisions("breach", duration("1h")) > 0'
decision = "step_up"
actions = [{{ name = "notify", url = "{notify}" }}]

[[tenants.acme.playbooks.sim_swap.tests]]
signal = {{ subject = "+447700900123", metadata = {{ risk = 95 }} }}
expect = {{ decision = "{high_risk}", rule = "high-risk" }}

[[tenants.acme.playbooks.sim_swap.tests]]
signal = {{ subject = "+447700900123" }}
history = [{{ type = "breach", ago = "5m" }}]
expect = {{ decision = "step_up", rule = "after-breach" }}

[[tenants.acme.playbooks.sim_swap.tests]]
signal = {{ subject = "+447700900123" }}
history = [{{ type = "breach", ago = "2h" }}]
expect = {{ decision = "review" }}
"#,
        case = receiver.url("/case"),
        lock = receiver.url("/lock"),
        notify = receiver.url("/notify"),
    )
}

fn settings_for(dir: &std::path::Path) -> String {
    settings(&store_section(), &dir.join("data"), "", "")
}

/// `idem check-config` on the config `text`: its exit code and stderr.
fn check_text(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, text).expect("write");
    check_config(&path)
}

fn signal(subject: &str, metadata: Value) -> String {
    json!({"type": "sim_swap", "subject": subject, "metadata": metadata}).to_string()
}

fn acme(body: &str) -> Req {
    Req::new(body).header("authorization", "Bearer sk_acme_test_key")
}

async fn decision(client: &Client, id: &str) -> Value {
    let r = client
        .send(
            "GET",
            &format!("/v1/decisions/{id}"),
            Req::new("").header("authorization", "Bearer sk_acme_test_key"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

#[tokio::test]
async fn check_config_refuses_a_bad_rule_or_a_failing_test_naming_its_key_and_position() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let good = settings_for(dir.path()) + &tenants(&receiver, "deny");
    let (code, err) = check_text(&good);
    assert_eq!(code, 0, "{err}");
    let rules = "tenants.acme.playbooks.sim_swap.rules";
    for (broken, names) in [
        (
            good.replace("signal.metadata.risk >= 90", "signal.metadata.risk >= "),
            format!("{rules}[0].when: 1:25: "),
        ),
        (
            good.replace(
                "signal.metadata.risk >= 90",
                "signal.metadata.risk >= threshold",
            ),
            format!("{rules}[0].when: 1:25: unknown variable threshold"),
        ),
        (
            good.replace("signal.metadata.risk >= 90", "lookup(signal.subject)"),
            format!("{rules}[0].when: 1:1: unknown function lookup"),
        ),
        (
            good.replace("signal.metadata.risk >= 90", "signal.metadata.risk + 90"),
            format!("{rules}[0].when: 1:1: is arithmetic, not a bool"),
        ),
        (
            good.replace(r#"name = "after-breach""#, r#"name = "high-risk""#),
            format!("{rules}[1].name: \"high-risk\" is used twice"),
        ),
        (
            good.replace(r#"ago = "5m""#, r#"ago = "3h""#),
            "tenants.acme.playbooks.sim_swap.tests[1]: the test expects step_up by rule \
             \"after-breach\", and the playbook decides review by the playbook's default"
                .to_string(),
        ),
    ] {
        assert_ne!(broken, good);
        let (code, err) = check_text(&broken);
        assert_eq!(code, 2, "{names}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains(&names), "{err} should say {names}");
    }
}

#[tokio::test]
async fn the_first_matching_rule_decides_and_is_named_in_the_response_the_api_and_callbacks() {
    let (_dir, receiver, _idem, client) =
        Harness::new().tenants(|r| tenants(r, "deny")).start().await;
    let subject = unique("+4477");

    // A risky signal: the first rule decides, with its own actions.
    let r = client
        .signal(acme(&signal(&subject, json!({"risk": 95}))))
        .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let body = r.json();
    assert_eq!(body["decision"], "deny");
    assert_eq!(body["rule"], "high-risk");
    let actions: Vec<&str> = body["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| a["name"].as_str().expect("name"))
        .collect();
    assert_eq!(actions, ["lock_account"]);
    let callback = receiver.wait_for(1).await.pop().expect("a callback");
    let envelope: Value = serde_json::from_slice(&callback.body).expect("json");
    assert_eq!(envelope["type"], "decision.deny");
    assert_eq!(envelope["data"]["rule"], "high-risk");
    let kept = decision(&client, body["decision_id"].as_str().expect("id")).await;
    assert_eq!(kept["rule"], "high-risk");
    assert!(kept.get("rule_errors").is_none(), "{kept}");

    // No risk: the first rule fails (a missing key), does not match, and is kept and counted;
    // no breach yet, so the playbook's default decides, with no rule named.
    let r = client.signal(acme(&signal(&subject, json!({})))).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let body = r.json();
    assert_eq!(body["decision"], "review");
    assert!(body.get("rule").is_none(), "{body}");
    let kept = decision(&client, body["decision_id"].as_str().expect("id")).await;
    assert!(kept.get("rule").is_none(), "{kept}");
    assert_eq!(kept["rule_errors"][0]["rule"], "high-risk", "{kept}");
    assert!(
        kept["rule_errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("risk")),
        "{kept}"
    );
    let metrics = text(&client.send("GET", "/metrics", Req::new("")).await);
    assert!(
        metrics.contains(
            r#"idem_rule_errors_total{playbook="sim_swap",rule="high-risk",tenant="acme"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"idem_rule_errors_total{playbook="sim_swap",rule="after-breach",tenant="acme"} 0"#
        ),
        "every rule's series from the start: {metrics}"
    );

    // A breach decision about the subject: its next sim_swap is stepped up by the second rule;
    // another subject's is not.
    let breach = json!({"type": "breach", "subject": subject}).to_string();
    assert_eq!(client.signal(acme(&breach)).await.status, 201);
    let r = client
        .signal(acme(&signal(&subject, json!({"risk": 10}))).key(&unique("after-breach")))
        .await;
    let body = r.json();
    assert_eq!(body["decision"], "step_up", "{body}");
    assert_eq!(body["rule"], "after-breach");
    let other = client
        .signal(acme(&signal(&unique("+4478"), json!({"risk": 10}))))
        .await;
    assert_eq!(other.json()["decision"], "review");
}

#[tokio::test]
async fn a_replay_answers_the_stored_decision_after_the_rules_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let config = |high_risk: &str| settings_for(dir.path()) + &tenants(&receiver, high_risk);
    let idem = Idem::start(dir.path(), &config("deny"));
    let client = Client::new(&idem.base);
    let subject = unique("+4479");
    let body = signal(&subject, json!({"risk": 99}));
    let first = client.signal(acme(&body).key("rules-replay")).await;
    assert_eq!(first.status, 201, "{}", text(&first));
    assert_eq!(first.json()["decision"], "deny");

    // A bad rule is refused by SIGHUP, the running rules kept.
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, config("deny").replace(">= 90", ">= nine")).expect("write");
    idem.signal(libc::SIGHUP);
    let logs = eventually(
        Duration::from_secs(5),
        || async { idem.stderr() },
        |logs| logs.contains("reload refused"),
    )
    .await;
    assert!(
        logs.contains("tenants.acme.playbooks.sim_swap.rules[0].when: 1:25"),
        "{logs}"
    );
    let r = client.signal(acme(&body)).await;
    assert_eq!(r.json()["decision"], "deny");

    // The rule now allows: new signals get the new decision, the key's retry the stored one.
    std::fs::write(&path, config("allow")).expect("write");
    idem.signal(libc::SIGHUP);
    let fresh = eventually(
        Duration::from_secs(5),
        || async { client.signal(acme(&body)).await.json() },
        |b| b["decision"] == "allow",
    )
    .await;
    assert_eq!(fresh["decision"], "allow");
    assert_eq!(fresh["rule"], "high-risk");
    let replay = client.signal(acme(&body).key("rules-replay")).await;
    assert_replay_of(&replay, &first, "a retry after the rules changed");
    assert_eq!(replay.json()["decision"], "deny");
}

/// [`tenants`] with an Okta source `hook` on acme whose `user.*` events are `breach` signals
/// about the event's first target, and a rule of `breach` that reviews what Okta sent.
fn with_source(receiver: &Receiver) -> String {
    tenants(receiver, "deny")
        + &format!(
            r#"
[[tenants.acme.playbooks.breach.rules]]
name = "from-okta"
when = 'signal.source != null && signal.source.kind == "okta" && signal.source.name == "hook" && signal.source.event_type.startsWith("user.")'
decision = "review"

[tenants.acme.sources.hook]
kind = "okta"
secret = "{OKTA_HOOK_AUTH}"
[[tenants.acme.sources.hook.map]]
event = "user.*"
type = "breach"
subject = "/target/0/alternateId"
"#
        )
}

#[tokio::test]
async fn a_decision_made_through_a_source_is_the_subjects_history_and_sees_its_source() {
    let (_dir, _receiver, _idem, client) = Harness::new().tenants(with_source).start().await;
    let who = format!("{}@example.com", unique("who"));
    let r = client
        .send(
            "POST",
            "/v1/sources/acme/hook",
            okta_hook_delivery(&unique("uuid"), &who),
        )
        .await;
    assert!(r.status < 300, "{}", text(&r));
    let listed = eventually(
        Duration::from_secs(5),
        || async {
            let path = format!("/v1/decisions?subject={}", enc(&who));
            let r = client.send("GET", &path, acme("")).await;
            r.json()
        },
        |page| page["data"].as_array().is_some_and(|d| !d.is_empty()),
    )
    .await;
    let breach = &listed["data"][0];
    assert_eq!(breach["type"], "breach", "{listed}");
    assert_eq!(breach["decision"], "review", "{listed}");
    assert_eq!(breach["rule"], "from-okta", "{listed}");

    // The same rule on a signal posted directly: no source, the default decides.
    let posted = json!({"type": "breach", "subject": unique("+4470")}).to_string();
    let r = client.signal(acme(&posted)).await;
    assert_eq!(r.json()["decision"], "allow", "{}", text(&r));

    let r = client.signal(acme(&signal(&who, json!({"risk": 1})))).await;
    let body = r.json();
    assert_eq!(body["decision"], "step_up", "{body}");
    assert_eq!(body["rule"], "after-breach");
}

#[tokio::test]
async fn a_decision_on_another_node_is_the_subjects_history_on_postgres() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let store = crate::support::store::on_postgres(&test_database());
    let nodes: Vec<Idem> = (0..2)
        .map(|n| {
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir_all(&node_dir).expect("dir");
            let config =
                settings(&store, &node_dir.join("data"), "", "") + &tenants(&receiver, "deny");
            Idem::start(&node_dir, &config)
        })
        .collect();
    let (a, b) = (Client::new(&nodes[0].base), Client::new(&nodes[1].base));
    let subject = unique("+4471");
    let before = b
        .signal(acme(&signal(&subject, json!({"risk": 1}))).key(&unique("before")))
        .await;
    assert_eq!(before.json()["decision"], "review", "{}", text(&before));
    let breach = json!({"type": "breach", "subject": subject}).to_string();
    let r = a.signal(acme(&breach).key(&unique("breach"))).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let after = b
        .signal(acme(&signal(&subject, json!({"risk": 1}))).key(&unique("after")))
        .await;
    let body = after.json();
    assert_eq!(body["decision"], "step_up", "{body}");
    assert_eq!(body["rule"], "after-breach");
}

#[tokio::test]
async fn evaluate_answers_what_the_playbook_would_decide_and_stores_and_sends_nothing() {
    let (_dir, receiver, _idem, client) =
        Harness::new().tenants(|r| tenants(r, "deny")).start().await;
    let evaluate = |body: String| {
        let client = client.clone();
        async move {
            client
                .send("POST", "/v1/playbooks/sim_swap/evaluate", acme(&body))
                .await
        }
    };
    let subject = unique("+4472");
    let r = evaluate(signal(&subject, json!({"risk": 95}))).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        r.json(),
        json!({"decision": "deny", "rule": "high-risk", "actions": ["lock_account"], "errors": []})
    );
    let r = evaluate(signal(&subject, json!({}))).await;
    let body = r.json();
    assert_eq!(body["decision"], "review", "{body}");
    assert!(body.get("rule").is_none(), "{body}");
    assert_eq!(body["actions"], json!(["open_case"]));
    assert_eq!(body["errors"][0]["rule"], "high-risk", "{body}");

    // It reads the subject's history as a decision would.
    let breached = unique("+4473");
    let breach = json!({"type": "breach", "subject": breached}).to_string();
    assert_eq!(client.signal(acme(&breach)).await.status, 201);
    let r = evaluate(signal(&breached, json!({"risk": 1}))).await;
    assert_eq!(r.json()["rule"], "after-breach", "{}", text(&r));

    // Refusals in the API's own form.
    let r = client
        .send(
            "POST",
            "/v1/playbooks/sim_swap/evaluate",
            Req::new(&signal(&subject, json!({}))),
        )
        .await;
    assert_problem(&r, 401, "unauthorized", "no key");
    let r = client
        .send(
            "POST",
            "/v1/playbooks/port_out/evaluate",
            acme(&json!({"type": "port_out", "subject": "x"}).to_string()),
        )
        .await;
    assert_problem(&r, 400, "unknown-signal-type", "no such playbook");
    let r = client
        .send("POST", "/v1/playbooks/sim_swap/evaluate", acme(&breach))
        .await;
    assert_problem(&r, 400, "invalid-signal", "another type");

    // Nothing was stored or sent: the only decision is the breach, the only rule error none.
    let r = client.send("GET", "/v1/decisions", acme("")).await;
    let page = r.json();
    let types: Vec<&str> = page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| d["type"].as_str().expect("type"))
        .collect();
    assert_eq!(types, ["breach"], "{page}");
    let r = client.send("GET", "/v1/deliveries", acme("")).await;
    assert_eq!(r.json()["data"], json!([]), "no delivery: {}", text(&r));
    assert!(receiver.seen().is_empty(), "no callback");
    let metrics = text(&client.send("GET", "/metrics", Req::new("")).await);
    assert!(
        metrics.contains(
            r#"idem_rule_errors_total{playbook="sim_swap",rule="high-risk",tenant="acme"} 0"#
        ),
        "{metrics}"
    );
}
