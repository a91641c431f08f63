//! Subscriptions in sled: the tree `ssf_subscriptions` holds each under
//! `tenant length ‖ tenant ‖ source`. A change is a compare-and-swap of the bytes it was made
//! from, made durable before it is answered.

use idem_schemas::Subscription;

use super::keys::tenant_prefix;
use super::SledStore;
use crate::codec;
use crate::store::{Read, Store, StoreError, SubscriptionStore, Unit};

fn subscription_key(tenant: &str, source: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.extend_from_slice(source.as_bytes());
    key
}

impl SledStore {
    fn swap_subscription(
        &self,
        tenant: &str,
        source: &str,
        record: &Subscription,
    ) -> Result<bool, StoreError> {
        self.commits.usable()?;
        let key = subscription_key(tenant, source);
        let old = self.subscriptions.get(&key)?;
        let current = old
            .as_ref()
            .map(|bytes| codec::decode::<Subscription>(bytes))
            .transpose()?;
        if current.map_or(0, |s| s.version) + 1 != record.version {
            return Ok(false);
        }
        let new = codec::encode(record)?;
        Ok(self
            .subscriptions
            .compare_and_swap(&key, old.as_ref(), Some(new))?
            .is_ok())
    }
}

impl SubscriptionStore for SledStore {
    fn subscription<'a>(
        &'a self,
        tenant: &'a str,
        source: &'a str,
    ) -> Read<'a, Option<Subscription>> {
        Box::pin(async move {
            self.commits.usable()?;
            let value = self.subscriptions.get(subscription_key(tenant, source))?;
            Ok(value.map(|bytes| codec::decode(&bytes)).transpose()?)
        })
    }

    fn put_subscription<'a>(
        &'a self,
        tenant: &'a str,
        source: &'a str,
        record: &'a Subscription,
    ) -> Read<'a, bool> {
        Box::pin(async move {
            let written = self.swap_subscription(tenant, source, record)?;
            if written {
                let store: &dyn Store = self;
                store.commit(Unit::new()).await?;
            }
            Ok(written)
        })
    }
}
