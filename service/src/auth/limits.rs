//! Request limits of one identity: a rate (governor's GCRA: `rate_per_second` sustained,
//! `burst` at once) and a concurrency limit (a semaphore). Going over either is a 429 with a
//! `Retry-After` ([`retry_after_secs`]).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A rate and concurrency limit (0 = unlimited).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub rate_per_second: f64,
    pub burst: u32,
    pub max_concurrent: u32,
}

impl Limits {
    /// No limit at all.
    pub const NONE: Limits = Limits {
        rate_per_second: 0.0,
        burst: 0,
        max_concurrent: 0,
    };

    /// `own` settings where given, else `defaults`.
    pub fn with(
        defaults: Limits,
        rate: Option<f64>,
        burst: Option<u32>,
        concurrent: Option<u32>,
    ) -> Limits {
        Limits {
            rate_per_second: rate.unwrap_or(defaults.rate_per_second),
            burst: burst.unwrap_or(defaults.burst),
            max_concurrent: concurrent.unwrap_or(defaults.max_concurrent),
        }
    }

    pub fn check(&self, what: &str) -> Result<()> {
        if !(self.rate_per_second.is_finite() && self.rate_per_second >= 0.0) {
            bail!("{what}: rate_per_second must be a finite number ≥ 0");
        }
        if self.rate_per_second > 1_000_000.0 {
            bail!("{what}: rate_per_second must be at most 1000000");
        }
        Ok(())
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// Over the rate: retry after this long.
    Rate(Duration),
    /// As many requests in flight as allowed.
    Concurrency,
}

/// The limits of one identity.
pub struct Gate {
    rate: Option<DefaultDirectRateLimiter>,
    clock: DefaultClock,
    concurrency: Option<Arc<Semaphore>>,
}

impl Gate {
    pub fn new(limits: Limits) -> Gate {
        let rate = (limits.rate_per_second > 0.0).then(|| {
            let burst = if limits.burst > 0 {
                limits.burst
            } else {
                // At least one request; a rate of 5/s allows 5 at once by default.
                limits.rate_per_second.ceil().clamp(1.0, u32::MAX as f64) as u32
            };
            let period = Duration::from_secs_f64(1.0 / limits.rate_per_second);
            let quota = Quota::with_period(period.max(Duration::from_nanos(1)))
                .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
                .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
            RateLimiter::direct(quota)
        });
        let concurrency = (limits.max_concurrent > 0)
            .then(|| Arc::new(Semaphore::new(limits.max_concurrent as usize)));
        Gate {
            rate,
            clock: DefaultClock::default(),
            concurrency,
        }
    }

    /// Admits one request: `Ok` holds its concurrency slot until dropped.
    pub fn admit(&self) -> Result<Option<OwnedSemaphorePermit>, Refusal> {
        // The concurrency slot first: a request refused for concurrency spends no rate.
        let permit = match &self.concurrency {
            Some(s) => Some(
                s.clone()
                    .try_acquire_owned()
                    .map_err(|_| Refusal::Concurrency)?,
            ),
            None => None,
        };
        if let Some(r) = &self.rate {
            if let Err(not_until) = r.check() {
                return Err(Refusal::Rate(not_until.wait_time_from(self.clock.now())));
            }
        }
        Ok(permit)
    }
}

/// Gates made on demand, one per name (token subjects). Past `MAX_IDLE` names, gates with no
/// request in flight are dropped (their next request starts with a full burst).
pub struct Gates {
    limits: Limits,
    gates: Mutex<HashMap<String, Arc<Gate>>>,
}

const MAX_IDLE: usize = 10_000;

impl Gates {
    pub fn new(limits: Limits) -> Gates {
        Gates {
            limits,
            gates: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, name: &str) -> Arc<Gate> {
        let mut gates = match self.gates.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(g) = gates.get(name) {
            return g.clone();
        }
        if gates.len() >= MAX_IDLE {
            gates.retain(|_, g| Arc::strong_count(g) > 1);
        }
        let g = Arc::new(Gate::new(self.limits));
        gates.insert(name.to_owned(), g.clone());
        g
    }
}

/// Seconds for `Retry-After` (whole, at least 1).
pub fn retry_after_secs(r: Refusal) -> u64 {
    match r {
        Refusal::Rate(d) => d.as_secs() + u64::from(d.subsec_nanos() > 0),
        Refusal::Concurrency => 1,
    }
    .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rate: f64, burst: u32, conc: u32) -> Limits {
        Limits {
            rate_per_second: rate,
            burst,
            max_concurrent: conc,
        }
    }

    #[test]
    fn the_rate_admits_the_burst_then_refuses_with_a_wait() {
        let g = Gate::new(limits(0.5, 3, 0));
        for i in 0..3 {
            assert!(g.admit().is_ok(), "request {i}");
        }
        match g.admit() {
            Err(Refusal::Rate(wait)) => {
                // One request per 2 s: the next slot is up to 2 s away.
                assert!(
                    wait > Duration::ZERO && wait <= Duration::from_secs(2),
                    "{wait:?}"
                );
                assert_eq!(retry_after_secs(Refusal::Rate(wait)), 2);
            }
            other => panic!("expected a rate refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_default_burst_is_the_rate() {
        let g = Gate::new(limits(4.0, 0, 0));
        let admitted = (0..10).filter(|_| g.admit().is_ok()).count();
        assert_eq!(admitted, 4);
    }

    #[test]
    fn concurrency_counts_requests_in_flight() {
        let g = Gate::new(limits(0.0, 0, 2));
        let a = g.admit().unwrap();
        let _b = g.admit().unwrap();
        assert_eq!(g.admit().unwrap_err(), Refusal::Concurrency);
        drop(a);
        assert!(g.admit().is_ok());
    }

    #[test]
    fn no_limits_admit_everything() {
        let g = Gate::new(limits(0.0, 0, 0));
        assert!((0..1000).all(|_| g.admit().is_ok()));
    }

    #[test]
    fn gates_are_per_name() {
        let gates = Gates::new(limits(1.0, 1, 0));
        assert!(gates.get("alice").admit().is_ok());
        assert!(gates.get("alice").admit().is_err());
        assert!(gates.get("bob").admit().is_ok());
    }

    #[test]
    fn retry_after_rounds_up() {
        let s = |ms| retry_after_secs(Refusal::Rate(Duration::from_millis(ms)));
        assert_eq!(s(0), 1);
        assert_eq!(s(1), 1);
        assert_eq!(s(1000), 1);
        assert_eq!(s(1001), 2);
        assert_eq!(retry_after_secs(Refusal::Concurrency), 1);
    }
}
