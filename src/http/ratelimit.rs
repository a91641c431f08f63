//! Per-tenant rate limits: a token bucket per tenant, refilled at the tenant's `rate_limit`
//! signals per second and holding at most one second's worth. A tenant over its limit gets 429
//! with `Retry-After`; the limit is read from the configuration in force, so a reload changes it.

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
        let rate = f64::from(rate);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.entry(tenant.to_string()).or_insert(Bucket {
            tokens: rate,
            updated: now,
        });
        let refill = now.duration_since(bucket.updated).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / rate).ceil().max(1.0) as u64)
        }
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
}
