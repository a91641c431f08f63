//! What happened to a signal: one type, with one label that spans, metrics and the HTTP front
//! all use, whether the signal was posted or came as a source's event.

use idem_schemas::{StoredResponse, Verdict};

/// What happened to a signal.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// This signal made a new decision (a keyless one, every time): its response, durable.
    Decided {
        /// The response.
        response: StoredResponse,
        /// The playbook's verdict.
        verdict: Verdict,
        /// It was decided under no claim at all.
        keyless: bool,
    },
    /// The signal's claim is new, but its subject had a decision within the playbook's window:
    /// that decision's response, now this signal's too.
    Deduplicated {
        /// The response.
        response: StoredResponse,
        /// It waited for that decision's first request (`Prefer: wait`).
        waited: bool,
    },
    /// The signal's key was decided before: the stored response.
    Replayed {
        /// The response.
        response: StoredResponse,
        /// It waited for the key's first request (`Prefer: wait`).
        waited: bool,
    },
    /// Another request holds the key right now.
    InFlight,
    /// The key was used with another payload.
    Mismatch,
}

impl Outcome {
    /// Every outcome's label.
    pub const LABELS: [&'static str; 7] = [
        "first",
        "keyless",
        "deduplicated",
        "replayed",
        "awaited",
        "key-in-flight",
        "key-reused",
    ];

    /// Its name, as spans, metrics and the front say it (the last two are also the slugs of
    /// the problem documents they are answered with).
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Decided { keyless: false, .. } => "first",
            Outcome::Decided { keyless: true, .. } => "keyless",
            Outcome::Deduplicated { .. } => "deduplicated",
            Outcome::Replayed { waited: false, .. } => "replayed",
            Outcome::Replayed { waited: true, .. } => "awaited",
            Outcome::InFlight => "key-in-flight",
            Outcome::Mismatch => "key-reused",
        }
    }

    /// Whether the signal was taken now: decided, or answered with its subject's decision
    /// under a claim of its own (a source counts it accepted, and it uses up a rate limit's
    /// token).
    pub fn taken_now(&self) -> bool {
        matches!(self, Outcome::Decided { .. } | Outcome::Deduplicated { .. })
    }

    /// The verdict of the decision this signal made, if it made one.
    pub fn new_decision(&self) -> Option<Verdict> {
        match self {
            Outcome::Decided { verdict, .. } => Some(*verdict),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> StoredResponse {
        StoredResponse {
            status: 201,
            body: b"{}".to_vec(),
            trace: None,
        }
    }

    #[test]
    fn each_outcome_has_a_label_of_its_own() {
        let outcomes = [
            Outcome::Decided {
                response: response(),
                verdict: Verdict::Deny,
                keyless: false,
            },
            Outcome::Decided {
                response: response(),
                verdict: Verdict::Deny,
                keyless: true,
            },
            Outcome::Deduplicated {
                response: response(),
                waited: false,
            },
            Outcome::Replayed {
                response: response(),
                waited: false,
            },
            Outcome::Replayed {
                response: response(),
                waited: true,
            },
            Outcome::InFlight,
            Outcome::Mismatch,
        ];
        let labels: std::collections::BTreeSet<_> = outcomes.iter().map(Outcome::label).collect();
        assert_eq!(labels.len(), outcomes.len());
        assert_eq!(labels, Outcome::LABELS.into_iter().collect());
        let taken: Vec<_> = outcomes.iter().map(Outcome::taken_now).collect();
        assert_eq!(taken, [true, true, true, false, false, false, false]);
    }
}
