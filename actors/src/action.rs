//! Actions: what a decision does, each a signed callback or a SET to the tenant's Shared Signals
//! streams. A playbook has its own and each of its rules has its own (see `playbook`, `rules`);
//! this module is what both name them by.

use crate::set::SetAction;

/// The most actions one playbook may have (each a callback, or a SET to each stream that asked
/// for it, per decision).
pub const MAX_ACTIONS: usize = 16;

/// One action of a playbook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Its name, unique in the playbook.
    pub name: String,
    /// What it does.
    pub target: Target,
}

/// What an action does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A signed callback POSTed to this URL.
    Callback(String),
    /// A SET to each stream of the tenant's transmitter that asked for its event.
    Set(SetAction),
}

impl Action {
    /// A callback to `url`.
    pub fn callback(name: &str, url: &str) -> Action {
        Action {
            name: name.to_string(),
            target: Target::Callback(url.to_string()),
        }
    }

    /// The URL of a callback action.
    pub fn url(&self) -> Option<&str> {
        match &self.target {
            Target::Callback(url) => Some(url),
            Target::Set(_) => None,
        }
    }
}
