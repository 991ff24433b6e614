//! Rate limits and concurrency quotas per caller and per tool
//! ([`Quotas`]), checked by the pipeline before every call (so they hold
//! for chain steps and for the tool calls of scripts too). Rates are GCRA
//! token buckets from `governor`; a refused call is
//! [`Error::Throttled`] (`limit_exceeded`) with a retry-after hint.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, LimitKind};
use crate::telemetry::{Caller, PrincipalKind};

/// Every this many checks a rate limiter forgets keys whose buckets are
/// full again, so many short-lived callers cannot grow it without bound.
const RETAIN_EVERY: u64 = 4096;

/// Limits of one scope (each caller, or each tool).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallQuota {
    /// Sustained calls per second (fractions allowed: `0.5` is one call
    /// every 2 s). `None`: no rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Calls allowed at once above the rate (the bucket's size). Default:
    /// the rate rounded up, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Calls in flight at once. `None`: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent: Option<u32>,
}

/// Quotas as configured: per caller (each principal has its own; every
/// anonymous caller shares one) and per tool (each tool's, shared by all
/// callers; versions of a tool share it).
///
/// ```
/// use toolexec::quota::{CallQuota, QuotaConfig, Quotas};
/// let quotas = Quotas::new(&QuotaConfig {
///     caller: Some(CallQuota { rate: Some(10.0), burst: Some(20), concurrent: Some(4) }),
///     tool: None,
/// }).unwrap();
/// # let _ = quotas;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Each caller's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<CallQuota>,
    /// Each tool's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<CallQuota>,
}

/// Compiled [`QuotaConfig`]: the buckets and in-flight counts.
#[derive(Debug)]
pub struct Quotas {
    caller: Option<Scope>,
    tool: Option<Scope>,
}

impl Quotas {
    /// Checks and compiles `config`: `invalid_request` at
    /// `quotas.caller.rate` and so on for a rate that is not a positive
    /// number or a zero burst or concurrency.
    pub fn new(config: &QuotaConfig) -> Result<Self, Error> {
        Ok(Quotas {
            caller: config
                .caller
                .map(|q| Scope::new("caller", &q))
                .transpose()?,
            tool: config.tool.map(|q| Scope::new("tool", &q)).transpose()?,
        })
    }

    /// Takes a call's share of the quotas of `caller` (anonymous when
    /// `None`) and the tool `key` (`namespace:name`), or refuses it with
    /// [`Error::Throttled`]. The concurrency share is held until the
    /// returned [`Admission`] is dropped.
    pub fn admit(self: &Arc<Self>, caller: Option<&Caller>, key: &str) -> Result<Admission, Error> {
        let caller_key: Box<str> = caller.map_or_else(
            || PrincipalKind::Anonymous.as_str().into(),
            |c| c.principal_key().into(),
        );
        let mut admission = Admission {
            quotas: self.clone(),
            caller: None,
            tool: None,
        };
        if let Some(scope) = &self.caller {
            scope.enter(&caller_key)?;
            admission.caller = scope.concurrent.is_some().then(|| caller_key.clone());
        }
        let tool_key: Box<str> = key.into();
        if let Some(scope) = &self.tool {
            scope.enter(&tool_key)?;
            admission.tool = scope.concurrent.is_some().then_some(tool_key);
        }
        Ok(admission)
    }
}

/// A call's hold on the concurrency quotas, released when dropped.
#[derive(Debug)]
pub struct Admission {
    quotas: Arc<Quotas>,
    caller: Option<Box<str>>,
    tool: Option<Box<str>>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let (Some(scope), Some(key)) = (&self.quotas.caller, &self.caller) {
            scope.leave(key);
        }
        if let (Some(scope), Some(key)) = (&self.quotas.tool, &self.tool) {
            scope.leave(key);
        }
    }
}

/// The limits of one scope: a keyed bucket and in-flight counts.
#[derive(Debug)]
struct Scope {
    what: &'static str,
    rate: Option<Rate>,
    concurrent: Option<(u32, InFlight)>,
}

/// Calls in flight per key; keys at zero are removed.
type InFlight = Mutex<HashMap<Box<str>, u32>>;

#[derive(Debug)]
struct Rate {
    limiter: DefaultKeyedRateLimiter<Box<str>>,
    per_second: f64,
    burst: u32,
    checks: AtomicU64,
}

impl Scope {
    fn new(what: &'static str, q: &CallQuota) -> Result<Self, Error> {
        let at = |field: &str| format!("quotas.{what}.{field}");
        let rate = match q.rate {
            None => None,
            Some(r) => {
                if !(r.is_finite() && r > 0.0) {
                    return Err(Error::invalid_request(
                        at("rate"),
                        "must be a positive number of calls per second",
                    ));
                }
                let burst = q.burst.unwrap_or((r.ceil() as u32).max(1));
                let burst = NonZeroU32::new(burst)
                    .ok_or_else(|| Error::invalid_request(at("burst"), "must be at least 1"))?;
                let period = Duration::from_secs_f64(1.0 / r);
                let quota = Quota::with_period(period)
                    .ok_or_else(|| Error::invalid_request(at("rate"), "is too high"))?
                    .allow_burst(burst);
                Some(Rate {
                    limiter: RateLimiter::keyed(quota),
                    per_second: r,
                    burst: burst.get(),
                    checks: AtomicU64::new(0),
                })
            }
        };
        if rate.is_none() && q.burst.is_some() {
            return Err(Error::invalid_request(at("burst"), "needs a rate"));
        }
        let concurrent = match q.concurrent {
            None => None,
            Some(0) => {
                return Err(Error::invalid_request(
                    at("concurrent"),
                    "must be at least 1",
                ));
            }
            Some(n) => Some((n, Mutex::default())),
        };
        Ok(Scope {
            what,
            rate,
            concurrent,
        })
    }

    /// Takes one in-flight slot and one token for `key`, or neither.
    #[allow(clippy::borrowed_box)] // the limiter's keys are `Box<str>`
    fn enter(&self, key: &Box<str>) -> Result<(), Error> {
        if let Some((max, counts)) = &self.concurrent {
            let mut counts = counts.lock();
            let n = counts.entry(key.clone()).or_insert(0);
            if *n >= *max {
                return Err(Error::Throttled {
                    limit: LimitKind::ConcurrentCalls,
                    message: format!(
                        "{} {key} already has {max} calls in flight (at most {max})",
                        self.what
                    ),
                    retry_after: None,
                });
            }
            *n += 1;
        }
        if let Some(rate) = &self.rate {
            if rate.checks.fetch_add(1, Ordering::Relaxed) % RETAIN_EVERY == RETAIN_EVERY - 1 {
                rate.limiter.retain_recent();
            }
            if let Err(not_until) = rate.limiter.check_key(key) {
                self.leave(key);
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                return Err(Error::Throttled {
                    limit: LimitKind::CallRate,
                    message: format!(
                        "{} {key} is over its rate of {} calls per second (burst {})",
                        self.what, rate.per_second, rate.burst
                    ),
                    retry_after: Some(wait),
                });
            }
        }
        Ok(())
    }

    /// Gives back the in-flight slot of `key`.
    fn leave(&self, key: &str) {
        if let Some((_, counts)) = &self.concurrent {
            let mut counts = counts.lock();
            if let Some(n) = counts.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str) -> Caller {
        Caller {
            principal: Some(name.into()),
            kind: PrincipalKind::Token,
            ..Caller::default()
        }
    }

    #[test]
    fn a_burst_is_admitted_then_refused_with_a_hint() {
        let quotas = Arc::new(
            Quotas::new(&QuotaConfig {
                caller: Some(CallQuota {
                    rate: Some(1.0),
                    burst: Some(3),
                    concurrent: None,
                }),
                tool: None,
            })
            .unwrap(),
        );
        let a = caller("a");
        for _ in 0..3 {
            drop(quotas.admit(Some(&a), "t:x").unwrap());
        }
        let err = quotas.admit(Some(&a), "t:x").unwrap_err();
        let body = err.to_body();
        assert_eq!(body.code.as_str(), "limit_exceeded");
        let details = body.details.unwrap();
        assert_eq!(details["limit"], "call_rate");
        let wait = details["retry_after_ms"].as_u64().unwrap();
        assert!((1..=1000).contains(&wait), "{wait}");
        assert!(body.message.contains("caller token:a"), "{}", body.message);
        // Another caller has its own bucket.
        drop(quotas.admit(Some(&caller("b")), "t:x").unwrap());
    }

    #[test]
    fn concurrency_is_held_until_the_admission_drops() {
        let quotas = Arc::new(
            Quotas::new(&QuotaConfig {
                caller: None,
                tool: Some(CallQuota {
                    concurrent: Some(2),
                    ..CallQuota::default()
                }),
            })
            .unwrap(),
        );
        let one = quotas.admit(None, "t:x").unwrap();
        let two = quotas.admit(Some(&caller("b")), "t:x").unwrap();
        let err = quotas.admit(None, "t:x").unwrap_err();
        assert!(matches!(
            err,
            Error::Throttled {
                limit: LimitKind::ConcurrentCalls,
                retry_after: None,
                ..
            }
        ));
        // Other tools are not affected.
        drop(quotas.admit(None, "t:y").unwrap());
        drop(one);
        let three = quotas.admit(None, "t:x").unwrap();
        drop((two, three));
        assert!(
            quotas
                .tool
                .as_ref()
                .unwrap()
                .concurrent
                .as_ref()
                .unwrap()
                .1
                .lock()
                .is_empty()
        );
    }

    #[test]
    fn a_refused_rate_gives_back_the_concurrency_slot() {
        let quotas = Arc::new(
            Quotas::new(&QuotaConfig {
                caller: Some(CallQuota {
                    rate: Some(0.001),
                    burst: Some(1),
                    concurrent: Some(1),
                }),
                tool: None,
            })
            .unwrap(),
        );
        drop(quotas.admit(None, "t:x").unwrap());
        assert!(quotas.admit(None, "t:x").is_err());
        let counts = &quotas
            .caller
            .as_ref()
            .unwrap()
            .concurrent
            .as_ref()
            .unwrap()
            .1;
        assert!(counts.lock().is_empty());
    }

    #[test]
    fn bad_quotas_name_their_field() {
        let bad = |q: CallQuota| {
            Quotas::new(&QuotaConfig {
                caller: None,
                tool: Some(q),
            })
            .unwrap_err()
            .to_body()
            .details
            .unwrap()["field"]
                .clone()
        };
        let q = CallQuota::default();
        assert_eq!(
            bad(CallQuota {
                rate: Some(0.0),
                ..q
            }),
            "quotas.tool.rate"
        );
        assert_eq!(
            bad(CallQuota {
                rate: Some(f64::NAN),
                ..q
            }),
            "quotas.tool.rate"
        );
        assert_eq!(
            bad(CallQuota {
                rate: Some(1.0),
                burst: Some(0),
                ..q
            }),
            "quotas.tool.burst"
        );
        assert_eq!(
            bad(CallQuota {
                burst: Some(3),
                ..q
            }),
            "quotas.tool.burst"
        );
        assert_eq!(
            bad(CallQuota {
                concurrent: Some(0),
                ..q
            }),
            "quotas.tool.concurrent"
        );
    }
}
