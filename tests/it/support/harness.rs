//! The harness most tests start with: a temp dir, a [`Receiver`], an [`Idem`] on a config in
//! that dir calling the receiver, and a [`Client`] of it. The builder sets what tests vary: lines
//! of `[idempotency]`, `[delivery]` and `[decisions]`, the tenants (the [`test_tenants`] unless
//! told otherwise) and how the receiver answers a path from the start.
//!
//! `let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;`

use std::path::Path;

use tempfile::TempDir;

use crate::support::client::Client;
use crate::support::config::{settings, test_tenants};
use crate::support::idem::Idem;
use crate::support::receiver::{Receiver, ScriptedAnswer};
use crate::support::store::store_section;

/// What a test's idem is started with; [`Harness::start`] starts it.
pub struct Harness {
    idempotency: String,
    delivery: String,
    decisions: String,
    tenants: Box<dyn Fn(&Receiver) -> String>,
    answers: Vec<(&'static str, ScriptedAnswer)>,
    failpoints: Option<String>,
}

impl Harness {
    /// The test tenants on the store `IDEM_TEST_STORE` names, idem's defaults elsewhere.
    pub fn new() -> Harness {
        Harness {
            idempotency: String::new(),
            delivery: String::new(),
            decisions: String::new(),
            tenants: Box::new(test_tenants),
            answers: Vec::new(),
            failpoints: None,
        }
    }

    /// Lines added to `[idempotency]` (after its `key_secret`).
    pub fn idempotency(mut self, lines: &str) -> Harness {
        self.idempotency = lines.to_string();
        self
    }

    /// The lines of `[delivery]`.
    pub fn delivery(mut self, lines: &str) -> Harness {
        self.delivery = lines.to_string();
        self
    }

    /// The lines of `[decisions]`.
    pub fn decisions(mut self, lines: &str) -> Harness {
        self.decisions = lines.to_string();
        self
    }

    /// The `[tenants.*]` sections, made from the receiver (for their actions' URLs), in place
    /// of the test tenants.
    pub fn tenants(mut self, tenants: impl Fn(&Receiver) -> String + 'static) -> Harness {
        self.tenants = Box::new(tenants);
        self
    }

    /// idem starts with these `FAILPOINTS` (a failpoints build's).
    #[cfg(feature = "failpoints")]
    pub fn failpoints(mut self, spec: &str) -> Harness {
        self.failpoints = Some(spec.to_string());
        self
    }

    /// The receiver answers `path` with `answer` from the start.
    pub fn answer(mut self, path: &'static str, answer: ScriptedAnswer) -> Harness {
        self.answers.push((path, answer));
        self
    }

    /// The config text for an idem on `data_dir` calling `receiver`.
    pub fn config(&self, data_dir: &Path, receiver: &Receiver) -> String {
        let mut config = settings(
            &store_section(),
            data_dir,
            &self.idempotency,
            &self.delivery,
        );
        if !self.decisions.is_empty() {
            config += &format!("\n[decisions]\n{}\n", self.decisions);
        }
        config + &(self.tenants)(receiver)
    }

    /// Starts the receiver, then idem on `<temp dir>/data` with its config in
    /// `<temp dir>/idem.toml`; the temp dir (removed when dropped), the receiver, idem and a
    /// client of it.
    pub async fn start(self) -> (TempDir, Receiver, Idem, Client) {
        let dir = tempfile::tempdir().expect("tempdir");
        let receiver = Receiver::start().await;
        for (path, answer) in &self.answers {
            receiver.script(path, &[*answer]);
        }
        let config = self.config(&dir.path().join("data"), &receiver);
        let idem = match &self.failpoints {
            Some(spec) => Idem::start_env(dir.path(), &config, &[("FAILPOINTS", spec)]),
            None => Idem::start(dir.path(), &config),
        };
        let client = Client::new(&idem.base);
        (dir, receiver, idem, client)
    }
}
