//! The binary's other subcommands (`sign`, `check-config`, `healthcheck`) and its refusal of
//! bad configuration.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::*;

fn idem(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // A refusal (bad flag) may exit before reading stdin; a closed pipe is then expected.
    match child.stdin.take().expect("stdin").write_all(stdin) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write: {e}"),
        _ => {}
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sign_prints_the_standard_webhooks_signature() {
    // The example of the Standard Webhooks specification.
    let (code, out, _) = idem(
        &[
            "sign",
            "--secret",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "--id",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            "--timestamp",
            "1614265330",
        ],
        br#"{"test": 2432232314}"#,
    );
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
    let (code, _, err) = idem(&["sign", "--secret", "whsec_!!", "--id", "x"], b"{}");
    assert_eq!(code, 2);
    assert!(err.contains("--secret"));
}

#[tokio::test]
async fn a_request_signed_by_idem_sign_is_accepted() {
    let (_dir, _receiver, _idem, client) = Harness::new().start().await;
    let body = sim_swap("+447700900123");
    let key = unique("cli");
    let ts = (idem_schemas::timefmt::now_ms() / 1000).to_string();
    let (code, sig, _) = idem(
        &[
            "sign",
            "--secret",
            SIGNING_SECRET,
            "--id",
            &key,
            "--timestamp",
            &ts,
        ],
        body.as_bytes(),
    );
    assert_eq!(code, 0);
    let r = client
        .signal(
            Req::new(&body)
                .key(&key)
                .header("authorization", "Bearer sk_acme_test_key")
                .header("webhook-id", &key)
                .header("webhook-timestamp", &ts)
                .header("webhook-signature", sig.trim()),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn check_config_accepts_the_example_and_refuses_bad_keys_in_one_line() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/idem.toml");
    let (code, out, _) = idem(&["check-config", "--config", example], b"");
    assert_eq!(code, 0, "examples/idem.toml must be valid");
    assert!(out.contains("ok"));

    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(example).expect("read example");
    for (broken, names) in [
        (
            text.replace("breaker_threshold = 5", "breaker_threshold = -1"),
            "delivery.breaker_threshold",
        ),
        (
            text.replace(
                "breaker_cooldown  = \"1m\"",
                "breaker_cooldown  = \"1m\"\nmax_retries = 2",
            ),
            "delivery.schedule",
        ),
        (
            text.replace("decision = \"deny\"", "decision = \"perhaps\""),
            "tenants.acme.playbooks.sim_swap.decision",
        ),
        (
            text.replace("[signatures]", "[signatures]\nleeway = \"1m\""),
            "unknown field `leeway`",
        ),
        (
            text.replace(
                "key_secret        = \"change-me-to-a-long-random-string-0123456789abcdef\"",
                "",
            ),
            "idempotency.key_secret",
        ),
        (
            text.replace("change-me-to-a-long-random-string-0123456789abcdef", "abc"),
            "idempotency.key_secret",
        ),
        (
            text.replace("sk_live_acme_example", "sk_live"),
            "tenants.acme.api_key",
        ),
        (
            text.replace("http://127.0.0.1:9000/hooks/lock", "http:///hooks/lock"),
            "tenants.acme.playbooks.sim_swap.actions[0].url",
        ),
        // Secrets are resolved when the file is checked: what is missing is named by its key.
        (
            text.replace(
                "\"change-me-to-a-long-random-string-0123456789abcdef\"",
                "{ file = \"/nonexistent/idem_key_secret\" }",
            ),
            "idempotency.key_secret",
        ),
        (
            text.replace(
                "\"sk_live_acme_example\"",
                "{ env = \"IDEM_CLI_TEST_NEVER_SET\" }",
            ),
            "tenants.acme.api_key",
        ),
        (
            text.replace(
                "# [telemetry]",
                "[telemetry]\notlp_endpoint = \"collector:4318\"\n# ",
            ),
            "telemetry.otlp_endpoint",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, broken).expect("write");
        let path = path.to_str().expect("utf8 path");
        for args in [
            vec!["check-config", "--config", path],
            vec!["serve", "--config", path],
        ] {
            let (code, _, err) = idem(&args, b"");
            assert_eq!(code, 2, "{args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
            assert!(err.contains(names), "{err} should name {names}");
        }
    }
}

#[tokio::test]
async fn healthcheck_exits_0_when_healthz_answers_200_and_1_with_the_reason_otherwise() {
    let (_dir, receiver, idem_, _client) = Harness::new().start().await;
    receiver.script(
        "/healthz",
        &[ScriptedAnswer {
            body: Some(
                r#"{"status":503,"detail":"the store cannot write: store: no answer within 5s"}"#,
            ),
            ..status(503)
        }],
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nothing = format!("http://{}/healthz", closed.local_addr().expect("addr"));
    drop(closed);
    let run = |url: String| {
        tokio::task::spawn_blocking(move || idem(&["healthcheck", "--url", &url], b""))
    };

    let (code, out, _) = run(format!("{}/healthz", idem_.base)).await.expect("join");
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("healthy"), "{out}");

    let (code, _, err) = run(receiver.url("/healthz")).await.expect("join");
    assert_eq!(code, 1);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("answered 503: the store cannot write"),
        "{err}"
    );

    let (code, _, err) = run(nothing).await.expect("join");
    assert_eq!(code, 1);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("did not answer"), "{err}");

    let (code, _, err) = run("localhost:8080".into()).await.expect("join");
    assert_eq!(code, 1, "{err}");
}
