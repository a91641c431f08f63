//! SET keys in sled: the tree `set_keys` holds each SET's wrapped key under its delivery id,
//! from the unit that starts its decision's claim until a delivery write ends the SET.

use super::SledStore;
use crate::store::{ends_set, DeliveryWrite, Read, SetKeyStore, StoreError, Unit};

impl SledStore {
    /// Keeps the keys `unit` keeps (its claim write, if any, is not refused).
    pub(super) fn keep_set_keys(&self, unit: &Unit) -> Result<(), StoreError> {
        for key in unit.set_keys() {
            self.set_keys
                .insert(key.delivery.as_bytes(), key.wrapped.as_slice())?;
        }
        Ok(())
    }

    /// Erases the keys `unit` erases (its claim write was granted).
    pub(super) fn erase_set_keys(&self, unit: &Unit) -> Result<(), StoreError> {
        for delivery in unit.erased_set_keys() {
            self.set_keys.remove(delivery.as_bytes())?;
        }
        Ok(())
    }

    /// Erases the key of the SET `write` ends, if it ends one.
    pub(super) fn end_set(&self, write: &DeliveryWrite) -> Result<(), StoreError> {
        if ends_set(&write.url, write.to.status) {
            self.set_keys.remove(write.id.as_bytes())?;
        }
        Ok(())
    }
}

impl SetKeyStore for SledStore {
    fn set_key<'a>(&'a self, delivery: &'a str) -> Read<'a, Option<Vec<u8>>> {
        let read = self.commits.usable().and_then(|()| {
            Ok(self
                .set_keys
                .get(delivery.as_bytes())?
                .map(|key| key.to_vec()))
        });
        Box::pin(std::future::ready(read))
    }
}
