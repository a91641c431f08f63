//! The console (`GET /console`) in a real browser: headless Chromium against a real `idem serve`
//! and a real `idem receive`, as a tenant's engineer uses it. Sign in with the API key (a wrong
//! one refused), which stays in sessionStorage only; a signal posted to the API and an event from
//! a source appear as decisions with their source; a search by subject finds one; with the
//! receiver stopped, a signal's callback goes queued and then dead; with it started again, the
//! redeliver button on one and "redeliver all dead" for the other deliver each once, and the
//! decision's timeline shows the failed attempts and the 2xx; the endpoint shows its failures;
//! the sources view counts the source's event and shows a subscribed source's stream, enabled
//! and verified; sign-out forgets the key; with tracing on, a
//! decision names its trace. The page loads nothing from another origin and breaks no rule of
//! its Content-Security-Policy. With `IDEM_CONSOLE_SCREENSHOTS=<dir>` the test also saves
//! screenshots of the main views there (`scripts/screenshots` refreshes those in `docs/`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::elements::Element;
use serde_json::json;

use devtools::jose::{self, JwsKey};
use devtools::transmitter::LoopbackTransmitter;

use crate::support::browser::Browser;
use crate::support::*;

const API_KEY: &str = "sk_acme_console_key";
const RISC_COMPROMISE: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";
const OKTA_AUTH: &str = "Basic b2t0YS1ob29rLWZvci10aGUtY29uc29sZQ==";

/// Callbacks retried twice, five seconds apart: a dead one within the test's patience.
const DELIVERY: &str =
    "inline_timeout = \"1s\"\nschedule = [\"5s\", \"5s\"]\nbreaker_threshold = 10";

/// The console's tenants; with `transmitter`, acme also has the `ssf` source `entra`, subscribed
/// there and polled.
fn console_config(
    data_dir: &Path,
    receiver: &str,
    transmitter: Option<&LoopbackTransmitter>,
) -> String {
    let subscribed = transmitter.map_or(String::new(), |t| {
        format!(
            "[tenants.acme.sources.entra]\nkind = \"ssf\"\n{}\n[[tenants.acme.sources.entra.map]]\nevent = \"{RISC_COMPROMISE}\"\ntype = \"sim_swap\"\n",
            crate::ssf_receiver_plan::subscribed(t, "poll")
        )
    });
    settings(&store_section(), data_dir, "", DELIVERY)
        + &subscribed
        + &format!(
            r#"
[tenants.acme]
api_key = "{API_KEY}"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "http://{receiver}/hooks/lock" }} ]

[[tenants.acme.playbooks.sim_swap.rules]]
name = "vip"
when = 'has(signal.metadata.vip) && signal.metadata.vip'
decision = "review"

[tenants.acme.sources.okta_prod]
kind = "okta"
secret = "{OKTA_AUTH}"
[[tenants.acme.sources.okta_prod.map]]
event = "user.*"
type = "sim_swap"
subject = "/target/0/alternateId"

[tenants.beta]
api_key = "sk_beta_console_key"

[tenants.beta.playbooks.sim_swap]
decision = "allow"
actions = []
"#
        )
}

/// Saves a screenshot as `name` when `IDEM_CONSOLE_SCREENSHOTS` names a directory.
async fn shot(browser: &Browser, name: &str) {
    if let Some(dir) = std::env::var_os("IDEM_CONSOLE_SCREENSHOTS") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        browser.screenshot(&dir.join(format!("{name}.png"))).await;
    }
}

async fn post_signal(client: &Client, subject: &str) -> (String, String) {
    let r = client
        .signal(Req::new(&sim_swap(subject)).header("authorization", &format!("Bearer {API_KEY}")))
        .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let body = r.json();
    (
        body["decision_id"]
            .as_str()
            .expect("decision id")
            .to_string(),
        body["actions"][0]["delivery_id"]
            .as_str()
            .expect("delivery id")
            .to_string(),
    )
}

/// Types `key` into the sign-in form's `field` and submits it.
async fn submit_key(browser: &Browser, field: &Element, key: &str) {
    browser.type_into(field, key).await;
    let submit = browser
        .find("#signin button[type=submit]")
        .await
        .expect("sign-in button");
    browser.click(&submit).await;
}

/// A browser on `idem`'s console, signed in as acme; the console's URL.
async fn signed_in(idem: &Idem) -> (Browser, String) {
    let browser = Browser::start().await;
    let console = format!("{}/console", idem.base);
    browser.open(&console).await;
    let key = browser.wait_for("#key", "the sign-in form").await;
    submit_key(&browser, &key, API_KEY).await;
    browser
        .wait_text("#tenant", "signed in", |t| t == "acme")
        .await;
    (browser, console)
}

async fn storage(browser: &Browser) -> serde_json::Value {
    browser
        .script(
            "return {session: sessionStorage.getItem('idem.key'), \
             sessionKeys: sessionStorage.length, local: localStorage.length, \
             cookie: document.cookie};",
            json!([]),
        )
        .await
}

#[tokio::test]
async fn an_engineer_follows_a_dead_callback_to_its_redelivery_in_the_console() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("receive.seen");
    let receiver = ReceiveProc::start("127.0.0.1:0", &seen);
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&JwsKey::rsa("rsa-1")])).await;
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    let idem = Idem::start(
        dir.path(),
        &console_config(dir.path(), receiver.addr(), Some(&transmitter)),
    );
    let api = Client::new(&idem.base);
    let browser = Browser::start().await;
    let console = format!("{}/console", idem.base);

    // Signing in: a wrong key is refused and nothing is kept; the right one is kept in this
    // tab's sessionStorage only.
    browser.open(&console).await;
    // Every request the page makes stays in the list checked at the end.
    browser
        .script(
            "performance.setResourceTimingBufferSize(100000);",
            json!([]),
        )
        .await;
    let key = browser.wait_for("#key", "the sign-in form").await;
    shot(&browser, "sign-in").await;
    submit_key(&browser, &key, "sk_not_a_key").await;
    browser
        .wait_text("#signin-error", "a wrong key refused", |t| !t.is_empty())
        .await;
    assert_eq!(storage(&browser).await["session"], json!(null));
    submit_key(&browser, &key, API_KEY).await;
    browser
        .wait_text("#tenant", "signed in", |t| t == "acme")
        .await;
    let kept = storage(&browser).await;
    assert_eq!(kept["session"], json!(API_KEY), "{kept}");
    assert_eq!(kept["local"], json!(0), "nothing in localStorage: {kept}");
    assert_eq!(kept["cookie"], json!(""), "no cookie: {kept}");
    browser
        .wait_text("#empty", "the empty state says what to do", |t| {
            t.contains("POST /v1/signals")
        })
        .await;

    // A signal and a source's event: both decisions listed, newest first, with their source.
    let (first, first_delivery) = post_signal(&api, "+15550001").await;
    let okta = json!({"data": {"events": [{
        "uuid": "console-okta-1", "eventType": "user.mfa.factor.deactivate",
        "target": [{"alternateId": "ada@example.com"}]
    }]}})
    .to_string();
    let r = api
        .send(
            "POST",
            "/v1/sources/acme/okta_prod",
            Req::new(&okta).header("authorization", OKTA_AUTH),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    receiver.wait_line(&format!("new {first_delivery}"));
    let row = |id: &str| format!("#decisions tr[data-id=\"{id}\"]");
    let api_row = browser
        .wait_text(&row(&first), "the signal's decision listed", |t| {
            t.contains("sim_swap") && t.contains("deny")
        })
        .await;
    assert!(api_row.contains("API"), "{api_row}");
    let source_row = browser
        .wait_text(
            "#decisions tbody tr:first-child",
            "the source's decision",
            |t| t.contains("okta_prod"),
        )
        .await;
    assert!(source_row.contains("sim_swap"), "{source_row}");
    browser
        .wait_text("#fig-signals .num", "the figures count both signals", |t| {
            t == "2"
        })
        .await;
    shot(&browser, "decisions").await;

    // A search by subject finds its one decision; an unknown subject says what to check.
    let search = browser.find("#subject").await.expect("search box");
    browser.type_into(&search, "+15550001").await;
    let go = browser.find("#search button").await.expect("search button");
    browser.click(&go).await;
    browser
        .wait_text("#decisions tbody", "one decision about the subject", |t| {
            t.contains("API") && !t.contains("okta_prod")
        })
        .await;
    let search = browser.find("#subject").await.expect("search box");
    browser.type_into(&search, "+19999999").await;
    let go = browser.find("#search button").await.expect("search button");
    browser.click(&go).await;
    browser
        .wait_text("#empty", "no decision about an unknown subject", |t| {
            t.contains("Check the identifier")
        })
        .await;

    // The decision: its action delivered at the first attempt, a 200.
    browser.open(&format!("{console}#/decisions/{first}")).await;
    let action = format!(".action[data-delivery=\"{first_delivery}\"]");
    browser
        .wait_text(&format!("{action} .status"), "delivered", |t| {
            t == "delivered"
        })
        .await;
    browser
        .wait_text(&format!("{action} .attempts"), "one attempt, a 200", |t| {
            t.contains("200")
        })
        .await;

    // The receiver stops: two signals' callbacks go queued, then dead.
    let addr = receiver.stop();
    let (second, second_delivery) = post_signal(&api, "+15550002").await;
    let (_, third_delivery) = post_signal(&api, "+15550003").await;
    let queued = browser.find("#fig-queued").await.expect("queued figure");
    browser.click(&queued).await;
    let delivery_row = |id: &str| format!("#deliveries tr[data-id=\"{id}\"]");
    browser
        .wait_text(&delivery_row(&second_delivery), "queued", |t| {
            t.contains("queued")
        })
        .await;
    let dead_tab = browser
        .find(".tab[data-status=dead]")
        .await
        .expect("dead tab");
    browser.click(&dead_tab).await;
    for id in [&second_delivery, &third_delivery] {
        browser
            .wait_text(&delivery_row(id), "dead after its retries", |t| {
                t.contains("dead")
            })
            .await;
    }
    browser
        .wait_text("#fig-dead .num", "the figures count the dead", |t| t == "2")
        .await;
    shot(&browser, "deliveries-dead").await;
    let endpoints = browser
        .find("#nav a[href=\"#/endpoints\"]")
        .await
        .expect("endpoints link");
    browser.click(&endpoints).await;
    let url = format!("http://{addr}/hooks/lock");
    let endpoint = format!("#endpoints tr[data-url=\"{url}\"]");
    browser
        .wait_text(
            &format!("{endpoint} td:nth-child(3)"),
            "six failures in a row",
            |t| t == "6",
        )
        .await;
    let state = browser.text(&format!("{endpoint} .state")).await;
    assert_eq!(state.as_deref(), Some("closed"), "under the threshold");
    shot(&browser, "endpoints").await;
    // The sources view: the Okta event counted as accepted.
    let sources = browser
        .find("#nav a[href=\"#/sources\"]")
        .await
        .expect("sources link");
    browser.click(&sources).await;
    browser
        .wait_text(
            "#sources tr[data-source=okta_prod] .accepted",
            "the okta event accepted",
            |t| t == "1",
        )
        .await;
    let kind = browser
        .text("#sources tr[data-source=okta_prod] td:nth-child(2)")
        .await;
    assert_eq!(kind.as_deref(), Some("okta"));
    // The source subscribed at its transmitter: its stream, enabled and verified.
    browser
        .wait_text(
            "#sources tr[data-source=entra] .subscription",
            "the subscribed stream",
            |t| t == "stream-1 enabled",
        )
        .await;
    browser
        .wait_text(
            "#sources tr[data-source=entra] .verified",
            "the stream verified",
            |t| t == "verified",
        )
        .await;

    // The receiver is back: one delivery redelivered from its row, the other by "redeliver all
    // dead"; each is delivered once, under its own webhook-id.
    let receiver = ReceiveProc::start(&addr, &seen);
    browser
        .open(&format!("{console}#/deliveries?status=dead"))
        .await;
    let redeliver = browser
        .wait_for(
            &format!("{} button.redeliver", delivery_row(&second_delivery)),
            "the row's redeliver button",
        )
        .await;
    browser.click(&redeliver).await;
    receiver.wait_line(&format!("new {second_delivery}"));
    browser
        .wait_text(&delivery_row(&third_delivery), "one dead left", |t| {
            t.contains("dead")
        })
        .await;
    browser
        .wait_gone(
            &delivery_row(&second_delivery),
            "the redelivered one leaves the dead",
        )
        .await;
    let bulk = browser.wait_for("#redeliver-dead", "the bulk button").await;
    browser.click(&bulk).await;
    browser
        .wait_text("#notice", "the bulk redelivery counted", |t| {
            t == "1 dead delivery redelivered"
        })
        .await;
    receiver.wait_line(&format!("new {third_delivery}"));
    browser
        .open(&format!("{console}#/decisions/{second}"))
        .await;
    let action = format!(".action[data-delivery=\"{second_delivery}\"]");
    browser
        .wait_text(&format!("{action} .status"), "delivered", |t| {
            t == "delivered"
        })
        .await;
    let timeline = browser
        .wait_text(&format!("{action} .attempts"), "the timeline", |t| {
            t.contains("200")
        })
        .await;
    let attempts = browser
        .script(
            "return document.querySelectorAll(arguments[0]).length;",
            json!([format!("{action} .attempts li")]),
        )
        .await;
    assert_eq!(
        attempts,
        json!(4),
        "three failures then the 200: {timeline}"
    );
    assert!(
        timeline.contains("cannot connect"),
        "the failures say why: {timeline}"
    );
    shot(&browser, "decision").await;
    browser
        .wait_text("#fig-dead .num", "no dead left", |t| t == "0")
        .await;
    let printed = receiver.printed();
    let callbacks: Vec<&str> = printed
        .iter()
        .filter(|l| l.starts_with("new ") || l.starts_with("duplicate "))
        .filter_map(|l| l.split(' ').take(2).last())
        .collect();
    assert_eq!(
        callbacks,
        [second_delivery.as_str(), third_delivery.as_str()],
        "each redelivered callback arrives once: {printed:?}"
    );

    // Everything came from idem itself, and nothing broke the page's policy.
    let resources = browser
        .script(
            "return performance.getEntriesByType('resource').map(e => e.name);",
            json!([]),
        )
        .await;
    for name in resources.as_array().expect("resource entries") {
        let name = name.as_str().unwrap_or_default();
        assert!(name.starts_with(&idem.base), "{name} is another origin's");
    }
    let log = browser.console_log().await;
    assert!(
        !log.iter()
            .any(|l| l.contains("Content Security Policy") || l.contains("Refused to")),
        "{log:?}"
    );

    // Signing out forgets the key.
    let signout = browser.find("#signout").await.expect("sign-out button");
    browser.click(&signout).await;
    browser.wait_for("#key", "the sign-in form again").await;
    let kept = storage(&browser).await;
    assert_eq!(kept["session"], json!(null), "{kept}");
    assert_eq!(kept["sessionKeys"], json!(0), "{kept}");
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_under_a_strict_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idem = Idem::start(dir.path(), &console_config(dir.path(), "127.0.0.1:9", None));
    let client = Client::new(&idem.base);
    let page = client.send("GET", "/console", Req::new("")).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap_or_default();
    for rule in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(rule), "{csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    let html = text(&page);
    assert!(!html.contains("style="), "no inline style");
    for tag in html.split("<script").skip(1) {
        let tag = tag.split('>').next().unwrap_or_default();
        assert!(
            tag.contains(" src=\"/console/"),
            "no inline script: <script{tag}>"
        );
    }
    for asset in ["app.js", "app.css", "icon.svg"] {
        let r = client
            .send("GET", &format!("/console/{asset}"), Req::new(""))
            .await;
        assert_eq!(r.status, 200, "{asset}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        let tag = r.header("etag").expect("etag").to_string();
        let again = client
            .send(
                "GET",
                &format!("/console/{asset}"),
                Req::new("").header("if-none-match", &tag),
            )
            .await;
        assert_eq!(again.status, 304, "{asset} unchanged");
        let listed = client
            .send(
                "GET",
                &format!("/console/{asset}"),
                Req::new("").header("if-none-match", &format!("\"old\", W/{tag}")),
            )
            .await;
        assert_eq!(listed.status, 304, "{asset}: its tag in a list, weak");
        let other = client
            .send(
                "GET",
                &format!("/console/{asset}"),
                Req::new("").header("if-none-match", "\"old\""),
            )
            .await;
        assert_eq!(other.status, 200, "{asset}: another tag");
    }
    let missing = client.send("GET", "/console/other.js", Req::new("")).await;
    assert_problem(&missing, 404, "not-found", "an unknown asset");

    // The figures the header shows, for this tenant only.
    let stats = |key: &'static str| {
        let client = client.clone();
        async move {
            client
                .send(
                    "GET",
                    "/v1/stats",
                    Req::new("").header("authorization", &format!("Bearer {key}")),
                )
                .await
        }
    };
    let before = stats(API_KEY).await;
    assert_eq!(before.status, 200, "{}", text(&before));
    let (decision, _) = post_signal(&client, "+15550009").await;
    let replay = client
        .signal(
            Req::new(&sim_swap("+15550009"))
                .header("authorization", &format!("Bearer {API_KEY}"))
                .key("stats-key"),
        )
        .await;
    assert_eq!(replay.status, 201);
    let again = client
        .signal(
            Req::new(&sim_swap("+15550009"))
                .header("authorization", &format!("Bearer {API_KEY}"))
                .key("stats-key"),
        )
        .await;
    assert!(again.replayed());
    let after = stats(API_KEY).await.json();
    assert_eq!(after["tenant"], "acme");
    assert_eq!(after["signals"], 3, "{after}");
    assert_eq!(after["decisions"], 2, "a replay decides nothing: {after}");
    assert_eq!(after["counted_to"], 10_000);
    let queued = eventually(
        Duration::from_secs(10),
        || stats(API_KEY),
        |r| r.json()["queued"] == 2,
    )
    .await;
    assert_eq!(queued.json()["queued"], 2, "the callbacks to port 9 wait");
    let beta = stats("sk_beta_console_key").await.json();
    assert_eq!(
        (
            beta["tenant"].clone(),
            beta["signals"].clone(),
            beta["queued"].clone()
        ),
        (json!("beta"), json!(0), json!(0)),
        "{beta}"
    );
    let refused = stats("sk_wrong").await;
    assert_problem(&refused, 401, "unauthorized", "a wrong key");
    let view = client
        .send(
            "GET",
            &format!("/v1/decisions/{decision}"),
            Req::new("").header("authorization", &format!("Bearer {API_KEY}")),
        )
        .await
        .json();
    assert_eq!(view["source"], json!(null), "{view}");
}

#[tokio::test]
async fn a_decisions_security_event_token_shows_the_stream_it_goes_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("acme-ec.pem");
    std::fs::write(&key, devtools::jose::ec_pem()).expect("write key");
    let config = settings(&store_section(), &dir.path().join("data"), "", DELIVERY)
        + &format!(
            r#"
[tenants.acme]
api_key = "{API_KEY}"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "revoke", set = "{revoked}", subject_format = "phone_number" }} ]

[tenants.acme.ssf]
signing_keys = ["{key}"]
[tenants.acme.ssf.receivers.okta]
client_secret = "okta-console-client-secret"
audience = "https://okta.example.test"
"#,
            revoked = crate::transmitter::REVOKED,
            key = key.display(),
        );
    let idem = Idem::start(dir.path(), &config);
    let api = Client::new(&idem.base);
    let token = crate::transmitter::token(&api, "acme", "okta", "okta-console-client-secret").await;
    let body = json!({"delivery": {"method": crate::transmitter::POLL},
                      "events_requested": [crate::transmitter::REVOKED]});
    let r = crate::transmitter::call(&api, "POST", "streams", &token, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let stream = r.json()["stream_id"].as_str().expect("id").to_string();
    let (decision, jti) = post_signal(&api, "+15550009").await;

    let (browser, console) = signed_in(&idem).await;

    // The decision's SET names its stream where a callback names its URL.
    browser
        .open(&format!("{console}#/decisions/{decision}"))
        .await;
    let action = format!(".action[data-delivery=\"{jti}\"]");
    let shown = browser
        .wait_text(&action, "the SET's action", |t| t.contains(&stream))
        .await;
    assert!(
        shown.contains("Stream") && !shown.contains("URL"),
        "{shown}"
    );
    assert!(shown.contains("queued"), "waiting to be polled: {shown}");
    // The queued deliveries list it by its stream too.
    let queued = browser.find("#fig-queued").await.expect("queued figure");
    browser.click(&queued).await;
    let row = browser
        .wait_text(
            &format!("#deliveries tr[data-id=\"{jti}\"]"),
            "the queued SET",
            |t| t.contains("queued"),
        )
        .await;
    assert!(row.contains(&format!("stream {stream}")), "{row}");
    assert!(!row.contains("ssf:"), "{row}");
}

#[tokio::test]
async fn a_traced_decision_names_its_trace() {
    let collector = crate::support::collector::Collector::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let config = console_config(&dir.path().join("data"), &receiver.addr.to_string(), None)
        + &collector.section();
    let idem = Idem::start(dir.path(), &config);
    let api = Client::new(&idem.base);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = api
        .signal(
            Req::new(&sim_swap("+15550010"))
                .header("authorization", &format!("Bearer {API_KEY}"))
                .header("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01")),
        )
        .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let decision = decision_id(&r);

    let (browser, console) = signed_in(&idem).await;
    browser
        .open(&format!("{console}#/decisions/{decision}"))
        .await;
    let shown = browser
        .wait_text("#decision", "the decision", |t| t.contains("Trace"))
        .await;
    assert!(shown.contains(trace), "{shown}");
    assert_eq!(browser.text("#trace-id").await.as_deref(), Some(trace));
}

#[tokio::test]
async fn a_decision_names_the_rule_that_made_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let config = console_config(&dir.path().join("data"), &receiver.addr.to_string(), None);
    let idem = Idem::start(dir.path(), &config);
    let api = Client::new(&idem.base);
    let body =
        serde_json::json!({"type": "sim_swap", "subject": "+15550011", "metadata": {"vip": true}});
    let r = api
        .signal(Req::new(&body.to_string()).header("authorization", &format!("Bearer {API_KEY}")))
        .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let by_rule = decision_id(&r);
    let r = api
        .signal(
            Req::new(&sim_swap("+15550012")).header("authorization", &format!("Bearer {API_KEY}")),
        )
        .await;
    let by_default = decision_id(&r);

    let (browser, console) = signed_in(&idem).await;
    browser
        .open(&format!("{console}#/decisions/{by_rule}"))
        .await;
    browser.wait_for("#rule", "the rule").await;
    assert_eq!(browser.text("#rule").await.as_deref(), Some("vip"));
    browser
        .open(&format!("{console}#/decisions/{by_default}"))
        .await;
    let shown = browser
        .wait_text("#decision", "the decision", |t| t.contains(&by_default))
        .await;
    assert!(shown.contains("the playbook's own decision"), "{shown}");
}
