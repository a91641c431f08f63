//! Per-tenant rate limits: a token bucket per tenant, refilled at the tenant's `rate_limit`
//! signals per second and holding at most one second's worth. A tenant over its limit gets 429
//! with `Retry-After`; the limit is read from the configuration in force, so a reload changes it.
//! A source's delivery takes as many tokens as it has new events, and gives back those its
//! duplicates did not use.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The buckets of every tenant.
#[derive(Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// Takes a token from `tenant`'s bucket at `rate` per second; when there is none, the whole
    /// seconds until there will be one.
    pub fn take(&self, tenant: &str, rate: u32) -> Result<(), u64> {
        self.take_up_to(tenant, rate, 1).map(|_| ())
    }

    /// Takes as many tokens as there are, up to `wanted` (at least one); when there is none,
    /// the whole seconds until there will be one.
    pub fn take_up_to(&self, tenant: &str, rate: u32, wanted: usize) -> Result<usize, u64> {
        let rate = f64::from(rate);
        self.with_bucket(tenant, rate, |bucket| {
            let taken = bucket.tokens.floor().min(wanted as f64);
            if taken >= 1.0 {
                bucket.tokens -= taken;
                Ok(taken as usize)
            } else {
                Err(((1.0 - bucket.tokens) / rate).ceil().max(1.0) as u64)
            }
        })
    }

    /// Gives back `n` tokens taken and not used (up to the bucket's size).
    pub fn give_back(&self, tenant: &str, rate: u32, n: usize) {
        let rate = f64::from(rate);
        self.with_bucket(tenant, rate, |bucket| {
            bucket.tokens = (bucket.tokens + n as f64).min(rate);
        })
    }

    /// Runs `f` on `tenant`'s bucket, refilled at `rate` up to now.
    fn with_bucket<T>(&self, tenant: &str, rate: f64, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.entry(tenant.to_string()).or_insert(Bucket {
            tokens: rate,
            updated: now,
        });
        let refill = now.duration_since(bucket.updated).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.updated = now;
        f(bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_beyond_the_rate_is_refused_then_refilled() {
        let limiter = RateLimiter::default();
        for _ in 0..5 {
            assert_eq!(limiter.take("acme", 5), Ok(()));
        }
        assert_eq!(limiter.take("acme", 5), Err(1));
        assert_eq!(
            limiter.take("beta", 5),
            Ok(()),
            "tenants have their own buckets"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
        assert_eq!(
            limiter.take("acme", 5),
            Ok(()),
            "a fifth of a second refills one token"
        );
    }

    #[test]
    fn tokens_are_taken_as_many_as_there_are_and_given_back() {
        let limiter = RateLimiter::default();
        assert_eq!(limiter.take_up_to("acme", 10, 4), Ok(4));
        assert_eq!(limiter.take_up_to("acme", 10, 100), Ok(6), "what is left");
        assert_eq!(limiter.take_up_to("acme", 10, 1), Err(1));
        limiter.give_back("acme", 10, 3);
        assert_eq!(limiter.take_up_to("acme", 10, 100), Ok(3));
        limiter.give_back("acme", 10, 1_000);
        assert_eq!(
            limiter.take_up_to("acme", 10, 100),
            Ok(10),
            "never more than the bucket holds"
        );
    }
}
