//! Waiting for what happens in another process: probe until a condition holds or the time is
//! up, then hand the last value to the test, whose assertion says what was expected.

use std::time::Duration;

/// Probes every 50 ms until `done` holds for the probed value or `within` has passed; returns
/// the last value probed, for the caller to assert on.
pub async fn eventually<T, Fut>(
    within: Duration,
    mut probe: impl FnMut() -> Fut,
    done: impl Fn(&T) -> bool,
) -> T
where
    Fut: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = probe().await;
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
