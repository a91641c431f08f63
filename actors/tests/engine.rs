//! The engine through its public handle, on real sled in a temp dir, without HTTP: a key's first
//! request decides, a retry replays the same bytes, another payload is refused, and once the key
//! has expired it decides anew, which a sweep leaves alone.

use std::sync::Arc;
use std::time::Duration;

use idem_actors::store::Backend;
use idem_actors::{ClaimId, Engine, EngineConfig, Keyring, Reply, Submission};
use idem_schemas::signature::Secret;
use idem_schemas::{Decision, Verdict};

struct NoSecrets;

impl Keyring for NoSecrets {
    fn callback_secrets(&self, _: &str) -> Vec<Secret> {
        Vec::new()
    }
}

/// The key's window: long enough that a busy machine still retries the new generation within
/// it, short enough to wait out once.
const KEY_TTL: Duration = Duration::from_millis(1500);

fn config(dir: &std::path::Path) -> EngineConfig {
    EngineConfig {
        store: Backend::Sled {
            data_dir: dir.to_path_buf(),
        },
        key_ttl: KEY_TTL,
        in_flight_timeout: Duration::from_secs(30),
        idle_actor_timeout: Duration::from_secs(60),
        max_live_actors: 100,
        max_waiters: 8,
        decision_retention: Duration::from_secs(60),
        // Only the test sweeps.
        sweep_interval: Duration::from_secs(3_600),
        inline_timeout: Duration::from_secs(1),
        schedule: vec![Duration::from_secs(60)],
        breaker: idem_actors::endpoint::BreakerSettings {
            threshold: 5,
            cooldown: Duration::from_secs(60),
            probe_timeout: Duration::from_secs(2),
            max_in_flight: 8,
        },
    }
}

/// A submission of a body with `fingerprint` whose decision (without actions) is made at the
/// claim's time.
fn submission(fingerprint: u8) -> Submission {
    Submission::new([fingerprint; 32], |at| {
        Ok(Decision {
            id: format!("dec_{at}"),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            source: None,
            verdict: Verdict::Deny,
            subject_hash: "ab".into(),
            created_at_ms: at,
            deliveries: vec![],
        })
    })
}

#[tokio::test]
async fn a_key_decides_once_per_generation_and_the_sweep_takes_only_expired_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::start(config(dir.path()), Arc::new(NoSecrets))
        .await
        .expect("engine");
    let id = ClaimId {
        tenant: "acme".into(),
        digest: [1; 32],
    };
    let Ok(Reply::First(first)) = engine.submit(&id, submission(7)).await else {
        panic!("the first request did not decide");
    };
    assert_eq!(first.status, 201);
    let Ok(Reply::Replayed(again)) = engine.submit(&id, submission(7)).await else {
        panic!("the retry was not a replay");
    };
    assert_eq!(again, first);
    assert!(matches!(
        engine.submit(&id, submission(8)).await,
        Ok(Reply::Mismatch)
    ));

    // The key's window is config; past it, the key decides anew, and a sweep takes the expired
    // generation and leaves the new one: its retry is still a replay.
    tokio::time::sleep(KEY_TTL + Duration::from_millis(50)).await;
    let Ok(Reply::First(later)) = engine.submit(&id, submission(8)).await else {
        panic!("the expired key did not decide anew");
    };
    assert_ne!(
        later.body, first.body,
        "a new generation makes a new decision"
    );
    engine.sweep().await.expect("sweep");
    let Ok(Reply::Replayed(replayed)) = engine.submit(&id, submission(8)).await else {
        panic!("the sweep took the live generation");
    };
    assert_eq!(replayed, later);
    engine.shutdown().await.expect("shutdown");
}
