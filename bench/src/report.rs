//! The bench's report: the figures of one scenario's run (requests/s, its ratio to `keyless` in
//! the same run, latency percentiles, statuses, the server's peak RSS and data-dir bytes, and for
//! the storm its losers' p99 as a ratio to idem's own 404 floor in the same run), their medians
//! over several runs, and how both are printed and written as JSON.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::load::Stats;

/// One row of the table.
pub struct ScenarioRow {
    /// The scenario.
    pub name: String,
    /// What the load generator saw.
    pub stats: Stats,
    /// The server's peak RSS, in bytes (0 when no idem ran).
    pub rss: u64,
    /// The server's data directory, in bytes.
    pub disk: u64,
    /// What the table's columns do not say.
    pub note: String,
    /// The storm's: the p99 of the same bursts sent in the same run to a path idem does not
    /// serve (its HTTP stack's own floor, a 404); the row's p99 is also given as a ratio to it.
    pub floor_p99: Option<Duration>,
}

/// The table's header line.
pub fn print_header() {
    println!(
        "{:<8} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10}  statuses",
        "scenario",
        "req/s",
        "ratio",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "requests",
        "peak RSS",
        "data dir"
    );
}

/// `d` in milliseconds, to two decimals.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// The figures of one row, or the medians of several.
pub struct Figures {
    name: String,
    rate: f64,
    ratio: Option<f64>,
    /// The row's p99 over its `floor_p99` (the storm's losers over idem's own 404).
    floor_ratio: Option<f64>,
    /// `claim`'s (or the store's own ceiling, `sled`'s) requests/s over the `redis` anchor's in
    /// the same run.
    anchor_ratio: Option<f64>,
    /// `ssf`'s (or `set`'s, `rules`') requests/s over `unique`'s in the same run: a pushed SET
    /// against a keyed signal (or a decision sent as a SET against one sent as a callback, or
    /// one decided by rules against one without).
    unique_ratio: Option<f64>,
    /// p50, p90, p99 and max latency, in ms.
    latency_ms: [f64; 4],
    requests: u64,
    rss: u64,
    disk: u64,
    statuses: BTreeMap<u16, u64>,
    note: String,
}

impl Figures {
    /// The figures of `row`, with its ratio to `keyless` requests/s if given.
    pub fn of(row: &ScenarioRow, keyless: Option<f64>) -> Figures {
        let s = &row.stats;
        Figures {
            name: row.name.clone(),
            rate: s.rate(),
            ratio: keyless.map(|k| s.rate() / k),
            floor_ratio: row
                .floor_p99
                .filter(|floor| !floor.is_zero())
                .map(|floor| s.percentile(99.0).as_secs_f64() / floor.as_secs_f64()),
            anchor_ratio: None,
            unique_ratio: None,
            latency_ms: [50.0, 90.0, 99.0, 100.0].map(|p| ms(s.percentile(p))),
            requests: s.requests,
            rss: row.rss,
            disk: row.disk,
            statuses: s.statuses.clone(),
            note: row.note.clone(),
        }
    }

    /// A `claim` (or `sled`) row's figures with its ratio to the `redis` anchor's requests/s in
    /// the same run, and an `ssf`, `set` or `rules` row's with its ratio to `unique`'s, if both
    /// ran.
    pub fn against_anchor(mut self, redis: Option<f64>, unique: Option<f64>) -> Figures {
        if self.name.starts_with("claim") || self.name == "sled" {
            self.anchor_ratio = redis.map(|r| self.rate / r);
        }
        if ["ssf", "set", "rules"]
            .iter()
            .any(|n| self.name.starts_with(n))
        {
            self.unique_ratio = unique.map(|u| self.rate / u);
        }
        self
    }

    /// Each figure's median over `runs` (statuses summed).
    pub fn median<'a>(runs: impl Iterator<Item = &'a Figures> + Clone) -> Figures {
        let of = |f: &dyn Fn(&Figures) -> f64| median(runs.clone().map(f).collect());
        let first = runs.clone().next();
        let mut statuses = BTreeMap::new();
        for run in runs.clone() {
            for (status, n) in &run.statuses {
                *statuses.entry(*status).or_default() += n;
            }
        }
        let ratios: Vec<f64> = runs.clone().filter_map(|r| r.ratio).collect();
        let floor_ratios: Vec<f64> = runs.clone().filter_map(|r| r.floor_ratio).collect();
        let anchor_ratios: Vec<f64> = runs.clone().filter_map(|r| r.anchor_ratio).collect();
        let unique_ratios: Vec<f64> = runs.clone().filter_map(|r| r.unique_ratio).collect();
        Figures {
            name: first.map_or_else(String::new, |f| f.name.clone()),
            rate: of(&|f| f.rate),
            ratio: (!ratios.is_empty()).then(|| median(ratios)),
            floor_ratio: (!floor_ratios.is_empty()).then(|| median(floor_ratios)),
            anchor_ratio: (!anchor_ratios.is_empty()).then(|| median(anchor_ratios)),
            unique_ratio: (!unique_ratios.is_empty()).then(|| median(unique_ratios)),
            latency_ms: [0, 1, 2, 3].map(|i| of(&|f| f.latency_ms[i])),
            requests: of(&|f| f.requests as f64) as u64,
            rss: of(&|f| f.rss as f64) as u64,
            disk: of(&|f| f.disk as f64) as u64,
            statuses,
            note: first.map_or_else(String::new, |f| f.note.clone()),
        }
    }

    /// One line of the table, and under it the p99's ratio to idem's own 404 floor if the row
    /// has one.
    pub fn print(&self) {
        let ratio = self.ratio.map_or(String::new(), |r| format!("{r:.2}x"));
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        let [p50, p90, p99, max] = self.latency_ms;
        println!(
            "{:<8} {:>9.0} {:>7} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>8}M {:>9}M  {}",
            self.name,
            self.rate,
            ratio,
            p50,
            p90,
            p99,
            max,
            self.requests,
            self.rss / (1 << 20),
            self.disk / (1 << 20),
            statuses.join(" ")
        );
        if let Some(r) = self.floor_ratio {
            println!("  {} losers p99 / idem's own 404 p99: {r:.2}x", self.name);
        }
        if let Some(r) = self.anchor_ratio {
            println!(
                "  {} / redis (SET NX, appendfsync always): {r:.2}x",
                self.name
            );
        }
        if let Some(r) = self.unique_ratio {
            println!(
                "  {} / unique (a keyed POST /v1/signals): {r:.2}x",
                self.name
            );
        }
    }

    /// The row's note, if it has one, under the table.
    pub fn print_note(&self) {
        if !self.note.is_empty() {
            println!("  {}: {}", self.name, self.note);
        }
    }

    /// The figures as a JSON object.
    pub fn json(&self) -> serde_json::Value {
        let [p50, p90, p99, max] = self.latency_ms;
        json!({
            "name": self.name,
            "requests_per_s": self.rate,
            "ratio_to_keyless": self.ratio,
            "p99_ratio_to_404_floor": self.floor_ratio,
            "ratio_to_redis": self.anchor_ratio,
            "ratio_to_unique": self.unique_ratio,
            "requests": self.requests,
            "p50_ms": p50,
            "p90_ms": p90,
            "p99_ms": p99,
            "max_ms": max,
            "statuses": self.statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "peak_rss_bytes": self.rss,
            "data_dir_bytes": self.disk,
            "note": self.note,
        })
    }
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, requests: u64, latencies_ms: &[u64], status: u16) -> ScenarioRow {
        let mut latencies: Vec<Duration> = latencies_ms
            .iter()
            .map(|&ms| Duration::from_millis(ms))
            .collect();
        latencies.sort();
        ScenarioRow {
            name: name.into(),
            stats: Stats {
                requests,
                elapsed: Duration::from_secs(1),
                latencies,
                statuses: BTreeMap::from([(status, requests)]),
            },
            rss: requests << 20,
            disk: 0,
            note: String::new(),
            floor_p99: None,
        }
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn runs_combine_into_medians_with_ratios_taken_within_each_run() {
        // Three runs whose unique/keyless ratios are 0.5, 0.8 and 0.6: the median ratio is 0.6,
        // where the ratio of the median rates (50 over 100) would say 0.5.
        let runs: Vec<Vec<Figures>> = [(100, 50), (50, 40), (110, 66)]
            .iter()
            .map(|&(keyless, unique)| {
                let k = row("keyless", keyless, &[1, 2, 3], 201);
                let u = row("unique", unique, &[4, 5, 6], 201);
                let rate = Some(k.stats.rate());
                vec![Figures::of(&k, rate), Figures::of(&u, rate)]
            })
            .collect();
        let unique = Figures::median(runs.iter().map(|run| &run[1]));
        assert_eq!(unique.name, "unique");
        assert_eq!(unique.rate, 50.0);
        assert!((unique.ratio.unwrap_or(0.0) - 0.6).abs() < 1e-9);
        assert_eq!(unique.statuses.get(&201), Some(&156));
        assert_eq!(unique.latency_ms, [5.0, 6.0, 6.0, 6.0]);
        assert_eq!(unique.rss, 50 << 20);
    }

    #[test]
    fn claim_and_the_store_ceiling_are_ratios_to_the_redis_anchor_of_their_run_no_other_row_is() {
        // Runs whose claim/redis ratios are 0.1, 0.3 and 0.2: the median is 0.2.
        let runs: Vec<Figures> = [(10, 100), (30, 100), (40, 200)]
            .iter()
            .map(|&(claim, redis)| {
                Figures::of(&row("claim", claim, &[1], 201), None)
                    .against_anchor(Some(redis as f64), None)
            })
            .collect();
        let claim = Figures::median(runs.iter());
        assert!((claim.anchor_ratio.unwrap_or(0.0) - 0.2).abs() < 1e-9);
        let unique =
            Figures::of(&row("unique", 10, &[1], 201), None).against_anchor(Some(100.0), None);
        assert_eq!(unique.anchor_ratio, None);
        // The store's own ceiling is held to the same anchor.
        let sled = Figures::of(&row("sled", 10, &[1], 201), None).against_anchor(Some(100.0), None);
        assert!((sled.anchor_ratio.unwrap_or(0.0) - 0.1).abs() < 1e-9);
        let alone = Figures::of(&row("claim", 10, &[1], 201), None).against_anchor(None, None);
        assert_eq!(alone.anchor_ratio, None, "no redis row in the run");
    }

    #[test]
    fn the_storm_p99_is_a_ratio_to_its_404_floor_and_its_median_is_of_each_runs_ratio() {
        // Three runs: losers' p99 of 40, 30 and 60 ms against 404 floors of 20, 30 and 40 ms, so
        // ratios of 2.0, 1.0 and 1.5: the median is 1.5 (the ratio of the median p99s, 40 over
        // 30, would say 1.33).
        let runs: Vec<Figures> = [(40, 20), (30, 30), (60, 40)]
            .iter()
            .map(|&(p99, floor)| {
                let mut storm = row("storm", 3, &[1, 2, p99], 409);
                storm.floor_p99 = Some(Duration::from_millis(floor));
                Figures::of(&storm, Some(100.0))
            })
            .collect();
        let close =
            |ratio: Option<f64>, expected: f64| ratio.is_some_and(|r| (r - expected).abs() < 1e-9);
        for (figures, expected) in runs.iter().zip([2.0, 1.0, 1.5]) {
            assert!(
                close(figures.floor_ratio, expected),
                "{:?}",
                figures.floor_ratio
            );
        }
        let storm = Figures::median(runs.iter());
        assert!(close(storm.floor_ratio, 1.5), "{:?}", storm.floor_ratio);
        assert!(close(storm.json()["p99_ratio_to_404_floor"].as_f64(), 1.5));
        // A row without a floor (or with a floor of nothing) has no such ratio.
        let keyless = Figures::of(&row("keyless", 3, &[1, 2, 3], 201), Some(3.0));
        assert_eq!(keyless.floor_ratio, None);
        assert!(keyless.json()["p99_ratio_to_404_floor"].is_null());
        let mut zero = row("storm", 3, &[1, 2, 3], 409);
        zero.floor_p99 = Some(Duration::ZERO);
        assert_eq!(Figures::of(&zero, None).floor_ratio, None);
        assert_eq!(Figures::median([keyless].iter()).floor_ratio, None);
    }
}
