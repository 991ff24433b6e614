//! Ceilings on what a run sent from elsewhere may ask for (a remote
//! runtime server's callers, a fleet worker's).

use std::time::Duration;

use toolexec::Error;

use crate::RuntimeLimits;

/// The most a run request's [`RuntimeLimits`] may ask for where it runs
/// for someone else. A limit above its ceiling, or left unset (`null`,
/// unbounded) where the ceiling has a value, is refused with
/// `invalid_request` naming the field (`limits.memory_bytes`); a `None`
/// ceiling accepts anything.
///
/// ```
/// use toolexec::Error;
/// use toolexec_runtime::{LimitCeilings, RuntimeLimits};
/// let ceilings = LimitCeilings::default();
/// assert!(ceilings.check(&RuntimeLimits::default()).is_ok());
/// let greedy = RuntimeLimits { memory_bytes: None, ..RuntimeLimits::default() };
/// let err = ceilings.check(&greedy).unwrap_err();
/// assert!(matches!(err, Error::InvalidRequest { ref field, .. } if field == "limits.memory_bytes"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitCeilings {
    /// Largest `limits.wall_time`.
    pub wall_time: Duration,
    /// Largest `limits.cpu_time`; `Some` also requires the request to set one.
    pub cpu_time: Option<Duration>,
    /// Largest `limits.memory_bytes` (and required).
    pub memory_bytes: Option<u64>,
    /// Largest `limits.max_processes` (and required).
    pub max_processes: Option<u32>,
    /// Largest `limits.max_output_bytes`.
    pub max_output_bytes: usize,
    /// Largest `limits.disk_bytes` (and required).
    pub disk_bytes: Option<u64>,
    /// Largest `limits.max_tool_calls`.
    pub max_tool_calls: usize,
}

impl Default for LimitCeilings {
    /// 5 min wall and CPU, 1 GiB memory, 256 processes, 16 MiB output,
    /// 1 GiB disk, 1000 tool calls.
    fn default() -> Self {
        LimitCeilings {
            wall_time: Duration::from_secs(300),
            cpu_time: Some(Duration::from_secs(300)),
            memory_bytes: Some(1 << 30),
            max_processes: Some(256),
            max_output_bytes: 16 << 20,
            disk_bytes: Some(1 << 30),
            max_tool_calls: 1000,
        }
    }
}

impl LimitCeilings {
    /// Checks `limits` against the ceilings; the error names the first
    /// field over its ceiling.
    pub fn check(&self, limits: &RuntimeLimits) -> Result<(), Error> {
        above(
            "wall_time",
            limits.wall_time.as_millis(),
            self.wall_time.as_millis(),
            "ms",
        )?;
        optional(
            "cpu_time",
            limits.cpu_time.map(|d| d.as_millis()),
            self.cpu_time.map(|d| d.as_millis()),
            "ms",
        )?;
        optional(
            "memory_bytes",
            limits.memory_bytes.map(u128::from),
            self.memory_bytes.map(u128::from),
            "bytes",
        )?;
        optional(
            "max_processes",
            limits.max_processes.map(u128::from),
            self.max_processes.map(u128::from),
            "",
        )?;
        above(
            "max_output_bytes",
            limits.max_output_bytes as u128,
            self.max_output_bytes as u128,
            "bytes",
        )?;
        optional(
            "disk_bytes",
            limits.disk_bytes.map(u128::from),
            self.disk_bytes.map(u128::from),
            "bytes",
        )?;
        above(
            "max_tool_calls",
            limits.max_tool_calls as u128,
            self.max_tool_calls as u128,
            "",
        )
    }
}

fn refuse(field: &str, message: String) -> Error {
    Error::invalid_request(format!("limits.{field}"), message)
}

fn above(field: &str, asked: u128, ceiling: u128, unit: &str) -> Result<(), Error> {
    if asked > ceiling {
        let unit = if unit.is_empty() {
            String::new()
        } else {
            format!(" {unit}")
        };
        return Err(refuse(
            field,
            format!("{asked}{unit} is above the ceiling of {ceiling}{unit}"),
        ));
    }
    Ok(())
}

fn optional(
    field: &str,
    asked: Option<u128>,
    ceiling: Option<u128>,
    unit: &str,
) -> Result<(), Error> {
    match (asked, ceiling) {
        (_, None) => Ok(()),
        (None, Some(ceiling)) => {
            let unit = if unit.is_empty() {
                String::new()
            } else {
                format!(" {unit}")
            };
            Err(refuse(
                field,
                format!("must be set: unbounded is above the ceiling of {ceiling}{unit}"),
            ))
        }
        (Some(asked), Some(ceiling)) => above(field, asked, ceiling, unit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_over_or_missing_is_named() {
        let c = LimitCeilings::default();
        let base = RuntimeLimits::default();
        let at_ceiling = RuntimeLimits {
            wall_time: c.wall_time,
            cpu_time: c.cpu_time,
            memory_bytes: c.memory_bytes,
            max_processes: c.max_processes,
            max_output_bytes: c.max_output_bytes,
            disk_bytes: c.disk_bytes,
            max_tool_calls: c.max_tool_calls,
            ..base.clone()
        };
        assert!(c.check(&at_ceiling).is_ok());
        let cases: Vec<(RuntimeLimits, &str)> = vec![
            (
                RuntimeLimits {
                    wall_time: Duration::from_secs(301),
                    ..base.clone()
                },
                "limits.wall_time",
            ),
            (
                RuntimeLimits {
                    wall_time: Duration::MAX,
                    ..base.clone()
                },
                "limits.wall_time",
            ),
            (
                RuntimeLimits {
                    cpu_time: None,
                    ..base.clone()
                },
                "limits.cpu_time",
            ),
            (
                RuntimeLimits {
                    cpu_time: Some(Duration::from_secs(301)),
                    ..base.clone()
                },
                "limits.cpu_time",
            ),
            (
                RuntimeLimits {
                    memory_bytes: None,
                    ..base.clone()
                },
                "limits.memory_bytes",
            ),
            (
                RuntimeLimits {
                    memory_bytes: Some(u64::MAX),
                    ..base.clone()
                },
                "limits.memory_bytes",
            ),
            (
                RuntimeLimits {
                    max_processes: None,
                    ..base.clone()
                },
                "limits.max_processes",
            ),
            (
                RuntimeLimits {
                    max_processes: Some(257),
                    ..base.clone()
                },
                "limits.max_processes",
            ),
            (
                RuntimeLimits {
                    max_output_bytes: usize::MAX,
                    ..base.clone()
                },
                "limits.max_output_bytes",
            ),
            (
                RuntimeLimits {
                    disk_bytes: None,
                    ..base.clone()
                },
                "limits.disk_bytes",
            ),
            (
                RuntimeLimits {
                    disk_bytes: Some((1 << 30) + 1),
                    ..base.clone()
                },
                "limits.disk_bytes",
            ),
            (
                RuntimeLimits {
                    max_tool_calls: 1001,
                    ..base.clone()
                },
                "limits.max_tool_calls",
            ),
        ];
        for (limits, field) in cases {
            let err = c.check(&limits).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidRequest { field: f, .. } if f == field),
                "{err}"
            );
            assert!(
                err.to_string()
                    .starts_with(&format!("invalid_request: {field}: ")),
                "{err}"
            );
        }
        // No ceiling: anything goes.
        let open = LimitCeilings {
            memory_bytes: None,
            ..c
        };
        assert!(
            open.check(&RuntimeLimits {
                memory_bytes: None,
                ..base
            })
            .is_ok()
        );
    }
}
