//! The engine through its public handle, on real sled in a temp dir, without HTTP: a key's first
//! signal decides, a retry replays the same bytes, another payload is refused, and once the key
//! has expired it decides anew, which a sweep leaves alone.

use std::sync::Arc;
use std::time::Duration;

use idem_actors::playbook::{Playbook, Playbooks};
use idem_actors::settings::Backend;
use idem_actors::{By, Engine, Keyring, Outcome, Routed, Settings};
use idem_schemas::signature::Secret;
use idem_schemas::Verdict;
use serde_json::{json, Value};

struct NoSecrets;

impl Keyring for NoSecrets {
    fn callback_secrets(&self, _: &str) -> Arc<[Secret]> {
        Arc::new([])
    }

    fn names_host(&self, _: &str, _: &str, _: &str) -> bool {
        false
    }

    fn transmitters(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The key's window: long enough that a busy machine still retries the new generation within
/// it, short enough to wait out once.
const KEY_TTL: Duration = Duration::from_millis(1500);

fn settings(dir: &std::path::Path) -> Settings {
    let mut settings = Settings {
        store: Backend::Sled {
            data_dir: dir.to_path_buf(),
        },
        ..Settings::default()
    };
    let i = &mut settings.idempotency;
    i.key_ttl = KEY_TTL;
    i.idle_actor_timeout = Duration::from_secs(60);
    i.max_live_actors = 100;
    i.max_waiters = 8;
    // Only the test sweeps.
    i.sweep_interval = Duration::from_secs(3_600);
    settings.decisions.retention = Duration::from_secs(60);
    settings.delivery.inline_timeout = Duration::from_secs(1);
    settings.delivery.schedule = vec![Duration::from_secs(60)];
    settings
}

/// The tenant's playbooks: `sim_swap` decides `deny`, with no actions.
fn playbooks() -> Playbooks {
    let deny = Playbook {
        decision: Verdict::Deny,
        actions: Vec::new(),
        once_per_subject: None,
        rules: Vec::new(),
    };
    Playbooks::from([("sim_swap".to_string(), Arc::new(deny))])
}

/// What the engine makes of `body` (a sim_swap about `+44`) posted with key `k1`.
async fn post(engine: &Engine, playbooks: &Playbooks, body: &Value) -> Outcome {
    let routed = Routed {
        tenant: "acme",
        playbooks,
        signal: serde_json::from_value(body.clone()).expect("a signal"),
        by: By::Request {
            key: Some("k1"),
            body,
            wait: None,
        },
        transmitter: None,
    };
    engine.signals().decide(routed).await.expect("an outcome")
}

#[tokio::test]
async fn a_key_decides_once_per_generation_and_the_sweep_takes_only_expired_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::start(settings(dir.path()), Arc::new(NoSecrets))
        .await
        .expect("engine");
    let playbooks = playbooks();
    let body = json!({"type": "sim_swap", "subject": "+44"});
    let other = json!({"type": "sim_swap", "subject": "+44", "metadata": {"risk": 1}});
    let Outcome::Decided {
        response: first, ..
    } = post(&engine, &playbooks, &body).await
    else {
        panic!("the first request did not decide");
    };
    assert_eq!(first.status, 201);
    let Outcome::Replayed {
        response: again, ..
    } = post(&engine, &playbooks, &body).await
    else {
        panic!("the retry was not a replay");
    };
    assert_eq!(again, first);
    assert!(matches!(
        post(&engine, &playbooks, &other).await,
        Outcome::Mismatch
    ));

    // The key's window is config; past it, the key decides anew, and a sweep takes the expired
    // generation and leaves the new one: its retry is still a replay.
    tokio::time::sleep(KEY_TTL + Duration::from_millis(50)).await;
    let Outcome::Decided {
        response: later, ..
    } = post(&engine, &playbooks, &other).await
    else {
        panic!("the expired key did not decide anew");
    };
    assert_ne!(
        later.body, first.body,
        "a new generation makes a new decision"
    );
    engine.node().sweep().await.expect("sweep");
    let Outcome::Replayed {
        response: replayed, ..
    } = post(&engine, &playbooks, &other).await
    else {
        panic!("the sweep took the live generation");
    };
    assert_eq!(replayed, later);
    engine.shutdown().await.expect("shutdown");
}
