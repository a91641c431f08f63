//! The configs the tests give idem: the settings above the tenants (listen on a free port, the
//! data directory, the store, `[idempotency]` and `[delivery]`), and the test tenants `acme`
//! and `beta` whose playbooks call the test receiver, with the secrets they sign and verify
//! with. A test that needs other tenants writes its own and puts them under the same settings.

use std::path::Path;

use crate::support::receiver::Receiver;
use crate::support::store::store_section;

pub const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const CALLBACK_SECRET: &str = "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci10ZXN0cw==";
pub const KEY_SECRET: &str = "test-key-secret-0123456789abcdef";

/// A config for tests: the [`test_tenants`] on the store [`store_section`] names.
/// `idempotency_extra` is added to `[idempotency]`, `delivery` is `[delivery]`'s lines.
pub fn config(
    data_dir: &Path,
    receiver: &Receiver,
    idempotency_extra: &str,
    delivery: &str,
) -> String {
    config_on(
        &store_section(),
        data_dir,
        receiver,
        idempotency_extra,
        delivery,
    )
}

/// [`config`] on the store of `store` (a `[store]` section, or nothing for sled).
pub fn config_on(
    store: &str,
    data_dir: &Path,
    receiver: &Receiver,
    idempotency_extra: &str,
    delivery: &str,
) -> String {
    settings(store, data_dir, idempotency_extra, delivery) + &test_tenants(receiver)
}

/// Everything of a config above its tenants: listen on a free port, `data_dir`, `store` (a
/// `[store]` section, or nothing for sled), `[idempotency]` with [`KEY_SECRET`] and
/// `idempotency_extra`, and `[delivery]` with `delivery`.
pub fn settings(store: &str, data_dir: &Path, idempotency_extra: &str, delivery: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
data_dir = "{data}"

{store}
[idempotency]
key_secret = "{KEY_SECRET}"
{idempotency_extra}

[delivery]
{delivery}
"#,
        data = data_dir.display(),
    )
}

/// Tenant `acme` (signed requests), tenant `beta` (API key only), both with a `sim_swap`
/// playbook whose actions call `receiver`; beta also has playbooks decided once per subject
/// (`account_takeover`, `breach`) and `outcomes`, one action per way a receiver can answer.
pub fn test_tenants(receiver: &Receiver) -> String {
    format!(
        r#"
[tenants.acme]
api_key = "sk_acme_test_key"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [
  {{ name = "lock_account", url = "{lock}" }},
  {{ name = "open_case", url = "{case}" }},
]

[tenants.acme.playbooks.port_out]
decision = "review"
actions = []

[tenants.beta]
api_key = "sk_beta_test_key"
callback_secret = "{CALLBACK_SECRET}"

[tenants.beta.playbooks.sim_swap]
decision = "step_up"
actions = [ {{ name = "notify", url = "{notify}" }} ]

# Decided once per subject: within the window, further signals for a subject make no decision.
[tenants.beta.playbooks.account_takeover]
decision = "deny"
once_per_subject = "1h"
actions = [ {{ name = "lock", url = "{takeover}" }} ]

[tenants.beta.playbooks.breach]
decision = "step_up"
once_per_subject = "700ms"
actions = [ {{ name = "reset", url = "{breach}" }} ]

[tenants.beta.playbooks.outcomes]
decision = "review"
actions = [
  {{ name = "ok", url = "{ok}" }},
  {{ name = "busy", url = "{busy}" }},
  {{ name = "refused", url = "{refused}" }},
  {{ name = "moved", url = "{moved}" }},
  {{ name = "slow", url = "{slow}" }},
  {{ name = "limited", url = "{limited}" }},
]
"#,
        lock = receiver.url("/lock"),
        case = receiver.url("/case"),
        notify = receiver.url("/notify"),
        takeover = receiver.url("/takeover"),
        breach = receiver.url("/breach"),
        ok = receiver.url("/ok"),
        busy = receiver.url("/busy"),
        refused = receiver.url("/refused"),
        moved = receiver.url("/moved"),
        slow = receiver.url("/slow"),
        limited = receiver.url("/limited"),
    )
}

/// The Authorization value of the Okta source [`with_okta_hook`] adds.
pub const OKTA_HOOK_AUTH: &str = "okta-hook-value-0123456789";

/// `config` with an Okta source `hook` on tenant beta: `user.*` events become `sim_swap`
/// signals (one action, `/notify`) about the event's first target.
pub fn with_okta_hook(config: &str) -> String {
    format!(
        "{config}\n[tenants.beta.sources.hook]\nkind = \"okta\"\nsecret = \"{OKTA_HOOK_AUTH}\"\n\
         [[tenants.beta.sources.hook.map]]\nevent = \"user.*\"\ntype = \"sim_swap\"\n\
         subject = \"/target/0/alternateId\"\n"
    )
}

/// `idem check-config` on the config at `path`: its exit code (-1 if it had none), and its
/// stderr.
pub fn check_config(path: &Path) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["check-config", "--config"])
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run idem");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
