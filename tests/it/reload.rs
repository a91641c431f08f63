//! Operating a running idem: SIGHUP reloads the tenants (rotated API keys and secrets, changed
//! action URLs: an endpoint no longer named is listed while deliveries to it are queued) without
//! dropping in-flight work, names the keys it changed that need a restart, a bad reload keeps the
//! old configuration, and `--log-format json`
//! writes one JSON object per log line with the request's span fields (never a key or subject;
//! at debug level, where per-request spans are).

use std::time::Duration;

use idem_schemas::signature::Secret;

use crate::support::*;

const NEW_CALLBACK_SECRET: &str = "whsec_cm90YXRlZC1jYWxsYmFjay1zZWNyZXQ=";

#[tokio::test]
async fn sighup_rotates_keys_and_secrets_and_a_bad_reload_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    receiver.answer("/notify", 200, Duration::from_millis(600));
    let original = config(&dir.path().join("data"), &receiver, "", "");
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, &original).expect("write");
    // Per-request spans and events are at debug level.
    let idem = Idem::start_full(
        path.clone(),
        &[("RUST_LOG", "info,idem=debug,idem_actors=debug")],
        &["--log-format", "json"],
    );
    let client = Client::new(&idem.base);

    // A request in flight while the configuration changes under it still completes.
    let c = client.clone();
    let in_flight = tokio::spawn(async move {
        c.signal(Req::new(&sim_swap("+1555")).key("k-inflight").beta())
            .await
    });
    receiver.wait_for(1).await;

    let rotated = original
        .replace(r#"api_key = "sk_beta_test_key""#, r#"api_key = "sk_beta_test_key_2""#)
        .replace(
            &format!("[tenants.beta]\napi_key = \"sk_beta_test_key_2\"\ncallback_secret = \"{CALLBACK_SECRET}\""),
            &format!("[tenants.beta]\napi_key = \"sk_beta_test_key_2\"\ncallback_secret = [\"{CALLBACK_SECRET}\", \"{NEW_CALLBACK_SECRET}\"]"),
        );
    assert_ne!(rotated, original);
    std::fs::write(&path, &rotated).expect("write");
    idem.signal(libc::SIGHUP);
    let status = eventually(
        Duration::from_secs(5),
        || async {
            client
                .signal(
                    Req::new(&sim_swap("+1666"))
                        .header("authorization", "Bearer sk_beta_test_key_2"),
                )
                .await
                .status
        },
        |s| *s == 201,
    )
    .await;
    assert_eq!(status, 201, "the rotated API key works after SIGHUP");
    assert_eq!(
        client
            .signal(Req::new(&sim_swap("+1666")).beta())
            .await
            .status,
        401,
        "the old one no longer does"
    );
    assert_eq!(
        in_flight.await.expect("task").status,
        201,
        "in-flight work was not dropped"
    );

    // Callbacks are now signed with both secrets; a receiver holding either one verifies them.
    let last = receiver.wait_for(2).await.pop().expect("callback");
    assert_eq!(last.header("webhook-signature").split(' ').count(), 2);
    assert!(last.signed_with(CALLBACK_SECRET));
    assert!(last.signed_with(NEW_CALLBACK_SECRET));
    assert!(Secret::parse(NEW_CALLBACK_SECRET).is_ok());

    // A broken file is refused; the running configuration stays.
    std::fs::write(
        &path,
        rotated.replace(r#"decision = "step_up""#, r#"decision = "perhaps""#),
    )
    .expect("write");
    idem.signal(libc::SIGHUP);
    let logs = eventually(
        Duration::from_secs(5),
        || async { idem.stderr() },
        |logs| logs.contains("reload refused"),
    )
    .await;
    assert!(logs.contains("reload refused"), "{logs}");
    let r = client
        .signal(Req::new(&sim_swap("+1777")).header("authorization", "Bearer sk_beta_test_key_2"))
        .await;
    assert_eq!(r.status, 201);

    // The rotation changed only what a reload applies at once; a key read at start is named as
    // needing a restart.
    assert!(!logs.contains("only after a restart"), "{logs}");
    std::fs::write(
        &path,
        rotated.replace("[delivery]", "[delivery]\nmax_hold = \"1h\""),
    )
    .expect("write");
    idem.signal(libc::SIGHUP);
    let logs = eventually(
        Duration::from_secs(5),
        || async { idem.stderr() },
        |logs| logs.contains("only after a restart"),
    )
    .await;
    assert!(logs.contains("delivery.max_hold"), "{logs}");

    // JSON logs: every line an object; the request span carries the tenant, never the subject.
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    assert!(
        logs.contains(r#""tenant":"beta""#),
        "spans carry the tenant: {logs}"
    );
    assert!(!logs.contains("+1555") && !logs.contains("k-inflight"));
}

#[tokio::test]
async fn an_endpoint_a_reload_removed_is_listed_while_deliveries_to_it_are_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let original = config(
        &dir.path().join("data"),
        &receiver,
        "",
        "schedule = [\"2s\"]",
    );
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, &original).expect("write");
    let idem = Idem::start_with(path.clone(), &[]);
    let client = Client::new(&idem.base);
    let r = client.signal(Req::new(&sim_swap("+1555")).beta()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = first_delivery_id(&r);

    // The playbook's URL changes: the old one is still shown, with its queued delivery.
    let (old, new) = (receiver.url("/notify"), receiver.url("/notify2"));
    std::fs::write(&path, original.replace(&old, &new)).expect("write");
    idem.signal(libc::SIGHUP);
    let urls = |list: &Vec<serde_json::Value>| -> Vec<(String, u64)> {
        list.iter()
            .map(|e| {
                let url = e["url"].as_str().unwrap_or("").to_string();
                (url, e["queued"].as_u64().unwrap_or(0))
            })
            .filter(|(url, _)| url.contains("/notify"))
            .collect()
    };
    let listed = || async {
        let r = client
            .send("GET", "/v1/endpoints", Req::new("").beta())
            .await;
        urls(r.json()["data"].as_array().expect("data"))
    };
    let both = vec![(old.clone(), 1), (new.clone(), 0)];
    assert_eq!(
        eventually(Duration::from_secs(5), listed, |l| *l == both).await,
        both
    );
    // Once nothing to it is queued, it is gone from the list (and the new one stays).
    until_status(&client, &id, "dead").await;
    assert_eq!(listed().await, vec![(new, 0)]);
}

#[tokio::test]
async fn secrets_come_from_files_and_the_environment_and_sighup_reads_the_files_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).expect("dir");
    let (key_file, beta_file) = (secrets.join("key_secret"), secrets.join("beta_api_key"));
    std::fs::write(&key_file, format!("{KEY_SECRET}\n")).expect("write");
    std::fs::write(&beta_file, "sk_beta_from_a_file_one\n").expect("write");
    let text = config(&dir.path().join("data"), &receiver, "", "")
        .replace(
            &format!("key_secret = \"{KEY_SECRET}\""),
            &format!("key_secret = {{ file = \"{}\" }}", key_file.display()),
        )
        .replace(
            "api_key = \"sk_beta_test_key\"",
            &format!("api_key = {{ file = \"{}\" }}", beta_file.display()),
        )
        .replace(
            "api_key = \"sk_acme_test_key\"",
            "api_key = { env = \"IDEM_IT_ACME_API_KEY\" }",
        );
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, &text).expect("write");
    let env = [("IDEM_IT_ACME_API_KEY", "sk_acme_from_the_environment")];
    let idem = Idem::start_with(path.clone(), &env);
    let client = Client::new(&idem.base);
    let with =
        |key: &str| Req::new(&sim_swap("+1555")).header("authorization", &format!("Bearer {key}"));
    assert_eq!(
        client.signal(with("sk_beta_from_a_file_one")).await.status,
        201
    );
    // acme's key from the environment: authenticated (its requests must also be signed).
    let acme = client.signal(with("sk_acme_from_the_environment")).await;
    assert_eq!(acme.problem_type(), "urn:idem:problem:signature-required");

    // A rotated file is read again on SIGHUP.
    std::fs::write(&beta_file, "sk_beta_from_a_file_two\n").expect("write");
    idem.signal(libc::SIGHUP);
    let status = eventually(
        Duration::from_secs(5),
        || async { client.signal(with("sk_beta_from_a_file_two")).await.status },
        |s| *s == 201,
    )
    .await;
    assert_eq!(status, 201, "the rotated key works after SIGHUP");
    assert_eq!(
        client.signal(with("sk_beta_from_a_file_one")).await.status,
        401
    );
    let log = idem.stderr();
    for secret in [
        "sk_beta_from_a_file",
        "sk_acme_from_the_environment",
        KEY_SECRET,
    ] {
        assert!(!log.contains(secret), "{secret} logged: {log}");
    }
}
