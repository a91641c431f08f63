//! Rules under chaos: the simulated tenant's `sim_swap` playbook steps up a subject ending in an
//! even digit by a rule (with the playbook's own actions), and denies the others by its own
//! decision. Whatever was killed when, every answer of a keyed or keyless `sim_swap` signal
//! names the rule its signal calls for and that rule's decision (a decision is evaluated once,
//! and a recovered one is the one stored), and a `port_out` answer names no rule.

use serde_json::Value;

use crate::clients::ClientOutcome;
use crate::report::Report;

/// The rule's name.
pub const RULE: &str = "even-subject";

/// The `[[rules]]` of the tenant's `sim_swap` playbook, its actions `actions` (the playbook's).
pub fn sim_swap_rules(actions: &str) -> String {
    format!(
        "[[tenants.sim.playbooks.sim_swap.rules]]\nname = \"{RULE}\"\n\
         when = 'signal.subject.matches(\"[02468]$\")'\ndecision = \"step_up\"\n\
         actions = [ {actions} ]\n"
    )
}

/// Checks every answer the clients received against the rule its signal calls for.
pub fn check(outcome: &ClientOutcome, report: &mut Report) {
    for answer in &outcome.answers {
        let Some(job) = outcome.jobs.iter().find(|j| j.label == answer.label) else {
            continue;
        };
        let signal: Value = serde_json::from_str(&job.body).unwrap_or_default();
        let body: Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        let subject = signal["subject"].as_str().unwrap_or_default();
        let even = subject.ends_with(['0', '2', '4', '6', '8']);
        let (rule, decision) = match signal["type"].as_str() {
            Some("sim_swap") if even => (Some(RULE), "step_up"),
            Some("sim_swap") => (None, "deny"),
            _ => (None, "review"),
        };
        report.expect(
            body["rule"].as_str() == rule && body["decision"] == decision,
            || {
                format!(
                    "{}: decided {} by rule {}, its signal calls for {decision} by {rule:?}",
                    answer.label, body["decision"], body["rule"]
                )
            },
        );
    }
}
