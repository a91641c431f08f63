//! A playbook's `rules` and `tests` (`[[tenants.<t>.playbooks.<type>.rules]]`, `...tests]]`):
//! each rule's `when` compiled and checked as it is read (a refusal names the key and, for CEL,
//! the `line:column` in the expression), its name unique in its playbook; then each test is
//! run against the playbook it belongs to, and one that gets another decision or rule is a
//! refusal of the configuration, at start, by `idem check-config` and on a reload alike.

use std::time::Duration;

use idem_actors::playbook::Playbook;
use idem_actors::rules::{self, Input, Rule};
use idem_actors::settings::read::Dur;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::actions::{self, verdict, RawAction};
use super::{invalid, ConfigError};

/// The most rules one playbook may have.
pub const MAX_RULES: usize = 64;

/// A rule as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    #[serde(default)]
    name: String,
    #[serde(default)]
    when: String,
    decision: Option<String>,
    #[serde(default)]
    actions: Vec<RawAction>,
}

/// A test as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTest {
    signal: RawSignal,
    #[serde(default)]
    history: Vec<RawEarlier>,
    expect: RawExpect,
}

/// A test's signal: its type is the playbook's unless written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignal {
    #[serde(rename = "type")]
    signal_type: Option<String>,
    subject: String,
    #[serde(default)]
    metadata: Map<String, Value>,
}

/// One of the subject's earlier decisions in a test: its signal type, and how long ago.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEarlier {
    #[serde(rename = "type")]
    signal_type: String,
    ago: Dur,
}

/// What a test expects: the decision, and the rule that makes it (unchecked when absent).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    decision: String,
    rule: Option<String>,
}

/// Whether `name` may name a rule: 1 to 64 of `[a-z0-9_-]`.
fn is_rule_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The rules written under `key` (`....rules`).
pub(super) fn read(key: &str, written: Vec<RawRule>) -> Result<Vec<Rule>, ConfigError> {
    if written.len() > MAX_RULES {
        return Err(invalid(key, format!("at most {MAX_RULES} rules")));
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(written.len());
    for (n, raw) in written.into_iter().enumerate() {
        let rkey = format!("{key}[{n}]");
        if !is_rule_name(&raw.name) {
            return Err(invalid(
                format!("{rkey}.name"),
                format!("{:?} is not 1 to 64 of [a-z0-9_-]", raw.name),
            ));
        }
        if rules.iter().any(|r| r.name == raw.name) {
            return Err(invalid(
                format!("{rkey}.name"),
                format!("{:?} is used twice in this playbook", raw.name),
            ));
        }
        if raw.when.is_empty() {
            return Err(invalid(format!("{rkey}.when"), "is required"));
        }
        let when = rules::compile(&raw.when)
            .map_err(|e| invalid(format!("{rkey}.when"), e.to_string()))?;
        let decision = verdict(&rkey, raw.decision.as_deref())?;
        rules.push(Rule {
            name: raw.name,
            when,
            decision,
            actions: actions::read(&format!("{rkey}.actions"), raw.actions, "rule")?,
        });
    }
    Ok(rules)
}

/// Runs the tests written under `key` (`....tests`) against `playbook`, the one of signal
/// type `signal_type`: each must get the decision (and the rule, if it names one) it expects.
pub(super) fn run_tests(
    key: &str,
    signal_type: &str,
    playbook: &Playbook,
    tests: Vec<RawTest>,
) -> Result<(), ConfigError> {
    let calls = playbook.history();
    for (n, test) in tests.into_iter().enumerate() {
        let tkey = format!("{key}[{n}]");
        let expected = verdict(&format!("{tkey}.expect"), Some(&test.expect.decision))?;
        if let Some(rule) = &test.expect.rule {
            if !playbook.rules.iter().any(|r| &r.name == rule) {
                return Err(invalid(
                    format!("{tkey}.expect.rule"),
                    format!("{rule:?} is not a rule of this playbook"),
                ));
            }
        }
        let earlier: Vec<(Option<String>, Duration)> = test
            .history
            .into_iter()
            .map(|e| (Some(e.signal_type), e.ago.0))
            .collect();
        let counts = rules::counts_of(&calls, &earlier);
        let input = Input {
            signal_type: test.signal.signal_type.as_deref().unwrap_or(signal_type),
            subject: &test.signal.subject,
            metadata: &test.signal.metadata,
            source: None,
            now_ms: idem_schemas::timefmt::now_ms(),
        };
        let choice = playbook.choose(input, &counts);
        let rule_ok = test
            .expect
            .rule
            .as_deref()
            .is_none_or(|want| choice.rule == Some(want));
        if choice.verdict != expected || !rule_ok {
            let by = choice
                .rule
                .map_or("the playbook's default".to_string(), |r| {
                    format!("rule {r:?}")
                });
            let errors: Vec<String> = choice
                .errors
                .iter()
                .map(|e| format!("rule {:?} failed: {}", e.rule, e.message))
                .collect();
            let failed = match errors.is_empty() {
                true => String::new(),
                false => format!(" ({})", errors.join("; ")),
            };
            let want = match &test.expect.rule {
                Some(rule) => format!("{} by rule {rule:?}", expected.as_str()),
                None => expected.as_str().to_string(),
            };
            return Err(invalid(
                tkey,
                format!(
                    "the test expects {want}, and the playbook decides {} by {by}{failed}",
                    choice.verdict.as_str()
                ),
            ));
        }
    }
    Ok(())
}
