//! Lists of secrets as the file writes them: one secret or a list (for rotation), each the value
//! itself, a file or an environment variable (`read::SecretText`), read from where it is while
//! the file is read; and a list of Standard Webhooks secrets (`whsec_…`).

use idem_actors::settings::read::{self, SecretText};
use idem_schemas::signature::Secret;
use serde::{Deserialize, Deserializer};

/// A secret or a list of them, each read from where it is.
pub(super) struct SecretList(pub Vec<String>);

impl<'de> Deserialize<'de> for SecretList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// As written.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(SecretText),
            Many(Vec<SecretText>),
        }
        let list = match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        };
        let list = list.into_iter().map(SecretText::resolve);
        list.collect::<Result<_, _>>()
            .map(SecretList)
            .map_err(read::refuse)
    }
}

/// A Standard Webhooks secret, or why it is not one.
pub(super) fn webhook_secret(text: &str) -> Result<Secret, String> {
    Secret::parse(text).map_err(|e| format!("a secret {e}"))
}

/// [`webhook_secrets`], shared by every attempt that signs with them.
pub(super) fn shared_webhook_secrets<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::sync::Arc<[Secret]>, D::Error> {
    webhook_secrets(d).map(Into::into)
}

/// A field of Standard Webhooks secrets: one or a non-empty list.
pub(super) fn webhook_secrets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Secret>, D::Error> {
    let SecretList(list) = SecretList::deserialize(d)?;
    if list.is_empty() {
        return Err(read::refuse("an empty list; omit the key instead"));
    }
    let list = list.iter().map(|s| webhook_secret(s));
    list.collect::<Result<_, _>>().map_err(read::refuse)
}
