//! How many failed token requests a client and an address may make: a bucket of failures per
//! receiver (`client_id`) and per peer address of each tenant, holding
//! `token_failures.per_client` and `.per_address` and given one back every
//! `token_failures.every`. Only a failure (an unknown client or a wrong secret) takes from
//! them, so a receiver sending its right secret never empties its own; once either bucket of a
//! request is empty, the request is refused before its secret is looked at, until one comes
//! back. The table is bounded: past [`MAX_KEPT`] entries, the refilled ones go first, then the
//! longest untouched. Plain bookkeeping over a clock given by the caller, no I/O.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use crate::transmitter::TokenFailures;

/// The most buckets kept, across tenants, clients and addresses.
pub const MAX_KEPT: usize = 10_000;

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Client(String, String),
    Address(String, IpAddr),
}

struct Bucket {
    /// Failures still allowed, fractions included.
    left: f64,
    updated: Instant,
}

/// Whose failures one token request counts against.
pub struct Requester<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The configured receiver it names, if it names one (an unknown name has no bucket: it
    /// would let a stranger fill the table).
    pub client: Option<&'a str>,
    /// Its peer address, when known.
    pub address: Option<IpAddr>,
}

impl Requester<'_> {
    fn keys(&self, limits: &TokenFailures) -> Vec<(Key, u32)> {
        let mut keys = Vec::with_capacity(2);
        if let Some(client) = self.client {
            let key = Key::Client(self.tenant.to_string(), client.to_string());
            keys.push((key, limits.per_client));
        }
        if let Some(address) = self.address {
            let key = Key::Address(self.tenant.to_string(), address);
            keys.push((key, limits.per_address));
        }
        keys
    }
}

/// The failure buckets of every tenant's token endpoint.
#[derive(Default)]
pub struct TokenLimiter {
    buckets: Mutex<HashMap<Key, Bucket>>,
}

impl TokenLimiter {
    /// Whether `who` may try now under `limits`; when not, the whole seconds until it may.
    pub fn check(&self, who: &Requester, limits: &TokenFailures, now: Instant) -> Result<(), u64> {
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait = 0.0f64;
        for (key, size) in who.keys(limits) {
            if let Some(bucket) = buckets.get(&key) {
                let left = refilled(bucket, size, limits, now);
                if left < 1.0 {
                    wait = wait.max((1.0 - left) * limits.every.as_secs_f64());
                }
            }
        }
        if wait > 0.0 {
            Err(wait.ceil().max(1.0) as u64)
        } else {
            Ok(())
        }
    }

    /// Counts a failure of `who`'s.
    pub fn failed(&self, who: &Requester, limits: &TokenFailures, now: Instant) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        for (key, size) in who.keys(limits) {
            if !buckets.contains_key(&key) && buckets.len() >= MAX_KEPT {
                make_room(&mut buckets, limits, now);
            }
            let bucket = buckets.entry(key).or_insert(Bucket {
                left: f64::from(size),
                updated: now,
            });
            bucket.left = (refilled(bucket, size, limits, now) - 1.0).max(0.0);
            bucket.updated = now;
        }
    }

    /// How many buckets are kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.buckets.lock().map(|b| b.len()).unwrap_or_default()
    }
}

/// What `bucket` (of `size`) holds at `now`.
fn refilled(bucket: &Bucket, size: u32, limits: &TokenFailures, now: Instant) -> f64 {
    let every = limits.every.as_secs_f64().max(f64::MIN_POSITIVE);
    let back = now.saturating_duration_since(bucket.updated).as_secs_f64() / every;
    (bucket.left + back).min(f64::from(size))
}

/// Drops the buckets that are full again (as good as none); if none is, the longest untouched.
fn make_room(buckets: &mut HashMap<Key, Bucket>, limits: &TokenFailures, now: Instant) {
    buckets.retain(|key, bucket| {
        let size = match key {
            Key::Client(..) => limits.per_client,
            Key::Address(..) => limits.per_address,
        };
        refilled(bucket, size, limits, now) < f64::from(size)
    });
    if buckets.len() >= MAX_KEPT {
        let oldest = buckets
            .iter()
            .min_by_key(|(_, b)| b.updated)
            .map(|(k, _)| k.clone());
        if let Some(oldest) = oldest {
            buckets.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const LIMITS: TokenFailures = TokenFailures {
        per_client: 3,
        per_address: 5,
        every: Duration::from_secs(60),
    };

    fn okta_from(address: &str) -> Requester<'static> {
        Requester {
            tenant: "acme",
            client: Some("okta"),
            address: address.parse().ok(),
        }
    }

    #[test]
    fn failures_empty_a_clients_bucket_and_one_comes_back_every_interval() {
        let limiter = TokenLimiter::default();
        let t = Instant::now();
        for n in 0..3 {
            assert_eq!(
                limiter.check(&okta_from("192.0.2.1"), &LIMITS, t),
                Ok(()),
                "{n}"
            );
            limiter.failed(&okta_from("192.0.2.1"), &LIMITS, t);
        }
        assert_eq!(limiter.check(&okta_from("192.0.2.1"), &LIMITS, t), Err(60));
        assert_eq!(
            limiter.check(&okta_from("192.0.2.9"), &LIMITS, t),
            Err(60),
            "the client's bucket, from any address"
        );
        let other = Requester {
            client: Some("entra"),
            ..okta_from("192.0.2.9")
        };
        assert_eq!(limiter.check(&other, &LIMITS, t), Ok(()), "another client");
        let later = t + Duration::from_secs(45);
        assert_eq!(
            limiter.check(&okta_from("192.0.2.1"), &LIMITS, later),
            Err(15)
        );
        let later = t + Duration::from_secs(60);
        assert_eq!(
            limiter.check(&okta_from("192.0.2.1"), &LIMITS, later),
            Ok(())
        );
    }

    #[test]
    fn an_address_failing_as_many_clients_is_stopped_by_its_own_bucket() {
        let limiter = TokenLimiter::default();
        let t = Instant::now();
        for n in 0..5 {
            let stranger = Requester {
                tenant: "acme",
                client: None,
                address: "198.51.100.7".parse().ok(),
            };
            assert_eq!(limiter.check(&stranger, &LIMITS, t), Ok(()), "{n}");
            limiter.failed(&stranger, &LIMITS, t);
        }
        assert_eq!(
            limiter.check(&okta_from("198.51.100.7"), &LIMITS, t),
            Err(60)
        );
        assert_eq!(
            limiter.check(&okta_from("198.51.100.8"), &LIMITS, t),
            Ok(())
        );
    }

    #[test]
    fn the_table_stays_bounded() {
        let limiter = TokenLimiter::default();
        let t = Instant::now();
        for n in 0..(MAX_KEPT as u32 + 100) {
            let who = Requester {
                tenant: "acme",
                client: None,
                address: Some(IpAddr::from(n.to_be_bytes())),
            };
            limiter.failed(&who, &LIMITS, t + Duration::from_millis(u64::from(n)));
        }
        assert!(limiter.kept() <= MAX_KEPT, "{}", limiter.kept());
    }
}
