//! What a reload (SIGHUP) applies only after a restart: the keys read once at start whose values
//! differ between the configuration started with and the one reloaded. It follows from the types:
//! a configuration serialized is what a reload cannot change (what is read from the configuration
//! in force, such as the tenants, `signatures.tolerance` or `idempotency.max_wait`, is skipped
//! where it is declared, and a secret is its fingerprint), so two serializations are compared
//! key by key, each a top-level key or a key of a table whose value is compared whole (a
//! duration, a list), and each difference is named by its dotted key.

use serde_json::Value;

use super::Config;

impl Config {
    /// The dotted keys read once at start whose values differ in `newer`: a reload to `newer`
    /// applies them only after a restart.
    pub fn restart_only(&self, newer: &Config) -> Vec<String> {
        let mut keys = Vec::new();
        changed("", &tree(self), &tree(newer), &mut keys);
        keys
    }
}

/// `config` serialized. It always is: its maps have names for keys, its values plain data.
fn tree(config: &Config) -> Value {
    serde_json::to_value(config).unwrap_or_default()
}

/// Adds to `keys` the dotted key (beneath `key`) of each key whose value differs between `old`
/// and `new`; a key only one of them has differs. The file's keys are a top-level key or a key
/// of a table: no deeper (a dotted `key` is one of a table).
fn changed(key: &str, old: &Value, new: &Value, keys: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) if !key.contains('.') => {
            let added = new.keys().filter(|name| !old.contains_key(*name));
            for name in old.keys().chain(added) {
                let beneath = match key {
                    "" => name.clone(),
                    _ => format!("{key}.{name}"),
                };
                let leaf = |tree: &serde_json::Map<String, Value>| {
                    tree.get(name).cloned().unwrap_or(Value::Null)
                };
                changed(&beneath, &leaf(old), &leaf(new), keys);
            }
        }
        _ if old != new => keys.push(key.to_string()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::MINIMAL as BASE;

    /// The keys a reload from `BASE` to `BASE` with `from` replaced by `to` names.
    fn restart_only(from: &str, to: &str) -> Vec<String> {
        let started = Config::parse(BASE).expect("valid");
        let reloaded = Config::parse(&BASE.replacen(from, to, 1)).expect("valid");
        started.restart_only(&reloaded)
    }

    #[test]
    fn a_reload_names_each_key_read_at_start_that_it_changes_and_nothing_else() {
        assert!(restart_only("", "").is_empty(), "nothing changed");
        // Written at the top (before `[idempotency]`), or in `[idempotency]`.
        let top = |text: &str| ("", text.to_string());
        let idempotency = |line: &str| ("[idempotency]\n", format!("[idempotency]\n{line}\n"));
        for ((from, to), keys) in [
            (top("listen = \"127.0.0.1:9\"\n"), vec!["listen"]),
            (top("data_dir = \"elsewhere\"\n"), vec!["data_dir"]),
            (
                top("[store]\nbackend = \"postgres\"\nurl = \"postgres://u:pw@db/idem\"\n"),
                vec!["store.backend", "store.pool_size", "store.url"],
            ),
            (idempotency("key_ttl = \"1h\""), vec!["idempotency.key_ttl"]),
            // The unwritten sweep_interval follows key_ttl: both change.
            (
                idempotency("key_ttl = \"10s\""),
                vec!["idempotency.key_ttl", "idempotency.sweep_interval"],
            ),
            (
                idempotency("max_waiters = 3"),
                vec!["idempotency.max_waiters"],
            ),
            (
                top("[delivery]\nmax_retries = 4\n"),
                vec!["delivery.schedule"],
            ),
            // The default schedule, written: no change.
            (
                top("[delivery]\nschedule = [\"5m\", \"5m\", \"5m\"]\n"),
                vec![],
            ),
            (
                top("[delivery]\nmax_hold = \"1h\"\n"),
                vec!["delivery.max_hold"],
            ),
            (
                top("[decisions]\nretention = \"1d\"\n"),
                vec!["decisions.retention"],
            ),
            (
                top("[http]\nread_timeout = \"1s\"\n"),
                vec!["http.read_timeout"],
            ),
            (
                top("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n"),
                vec!["telemetry.otlp_endpoint"],
            ),
        ] {
            assert_eq!(restart_only(from, &to), keys, "{to}");
        }
        let secret = restart_only(
            "0123456789abcdef0123456789abcdef",
            "fedcba9876543210fedcba9876543210",
        );
        assert_eq!(secret, vec!["idempotency.key_secret"]);
    }

    #[test]
    fn what_a_reload_applies_at_once_is_not_named() {
        for (from, to) in [
            ("sk_test_0123456789", "sk_test_9876543210"),
            ("decision = \"deny\"", "decision = \"allow\""),
            ("[idempotency]\n", "[idempotency]\nmax_wait = \"1s\"\n"),
            (
                "[idempotency]",
                "[signatures]\ntolerance = \"1m\"\n[idempotency]",
            ),
            (
                "[idempotency]",
                "public_url = \"https://idem.example\"\n[idempotency]",
            ),
        ] {
            assert_eq!(restart_only(from, to), Vec::<String>::new(), "{to}");
        }
    }

    #[test]
    fn a_tree_of_a_configuration_carries_no_secret() {
        let text = BASE.replace(
            "[idempotency]",
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://u:pw@db/idem\"\n[idempotency]",
        );
        let shown = tree(&Config::parse(&text).expect("valid")).to_string();
        for secret in ["0123456789abcdef", "pw@db", "sk_test", "MfKQ9r8GKYqr"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("\"key_secret\":\"sha256:"), "{shown}");
    }
}
