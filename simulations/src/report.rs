//! What the checks of a run found: how many invariants were checked and each violation, in
//! words. The checker (`check`), the source's checks (`sources`) and the database's (`stored`)
//! add to one report.

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub checked: usize,
    pub violations: Vec<String>,
}

impl Report {
    /// Counts one check, and its violation if `ok` is false.
    pub fn expect(&mut self, ok: bool, violation: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.violations.push(violation());
        }
    }
}
