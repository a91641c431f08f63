//! SET keys in PostgreSQL: one row per SET in `idem_set_keys`, inserted in the transaction that
//! starts its decision's claim and deleted in the one that ends its delivery.

use deadpool_postgres::Transaction;

use super::PgStore;
use crate::store::{ends_set, DeliveryWrite, Read, SetKeyStore, StoreError, Unit};

/// Keeps the keys `units` keep and erases those they erase.
pub(super) async fn write(tx: &Transaction<'_>, units: &[&Unit]) -> Result<(), StoreError> {
    let mut deliveries: Vec<&str> = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    for key in units.iter().flat_map(|u| u.set_keys()) {
        deliveries.push(&key.delivery);
        keys.push(&key.wrapped);
    }
    if !deliveries.is_empty() {
        super::run(
            tx,
            "INSERT INTO idem_set_keys (delivery, key) SELECT * FROM unnest($1::text[], \
             $2::bytea[]) ON CONFLICT (delivery) DO NOTHING",
            &[&deliveries, &keys],
        )
        .await?;
    }
    let erased: Vec<&str> = units
        .iter()
        .flat_map(|u| u.erased_set_keys())
        .map(String::as_str)
        .collect();
    erase(tx, erased).await
}

/// Erases the keys of the SETs that `writes` (the delivery writes made) end.
pub(super) async fn end(
    tx: &Transaction<'_>,
    writes: impl Iterator<Item = &DeliveryWrite>,
) -> Result<(), StoreError> {
    let ended = writes
        .filter(|w| ends_set(&w.url, w.to.status))
        .map(|w| w.id.as_str())
        .collect();
    erase(tx, ended).await
}

async fn erase(tx: &Transaction<'_>, mut deliveries: Vec<&str>) -> Result<(), StoreError> {
    if deliveries.is_empty() {
        return Ok(());
    }
    deliveries.sort_unstable();
    super::run(
        tx,
        "DELETE FROM idem_set_keys WHERE delivery = ANY($1::text[])",
        &[&deliveries],
    )
    .await
    .map(drop)
}

impl SetKeyStore for PgStore {
    fn set_key<'a>(&'a self, delivery: &'a str) -> Read<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT key FROM idem_set_keys WHERE delivery = $1",
                &[&delivery],
            )
            .await?;
            row.map(|row| Ok(row.try_get(0)?)).transpose()
        })
    }
}
