//! Resource limits set with `setrlimit` in the child before exec, and the
//! set every process runtime derives from [`RuntimeLimits`] (rendered as
//! they are for bubblewrap and the host, or into an OCI spec or Docker's
//! ulimits).

use std::time::Duration;

use toolexec_runtime::RuntimeLimits;

/// A CPU-time limit as whole `RLIMIT_CPU` seconds: rounded up, at least 1.
pub fn rlimit_cpu_seconds(cpu: Duration) -> u64 {
    cpu.as_secs_f64().ceil().max(1.0) as u64
}

/// A resource limit set with `setrlimit` in the child before exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    /// Which resource.
    pub resource: RlimitResource,
    /// Soft limit.
    pub soft: u64,
    /// Hard limit.
    pub hard: u64,
}

/// The resources [`Rlimit`] can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlimitResource {
    /// `RLIMIT_CPU`, seconds.
    Cpu,
    /// `RLIMIT_AS`, bytes.
    AddressSpace,
    /// `RLIMIT_NPROC`, processes of the user (ignored for real root).
    Processes,
    /// `RLIMIT_FSIZE`, bytes per file written.
    FileSize,
    /// `RLIMIT_NOFILE`, open descriptors.
    OpenFiles,
    /// `RLIMIT_CORE`, bytes of core dumps.
    Core,
}

impl RlimitResource {
    /// The `RLIMIT_*` number.
    pub fn raw(self) -> libc::__rlimit_resource_t {
        match self {
            RlimitResource::Cpu => libc::RLIMIT_CPU,
            RlimitResource::AddressSpace => libc::RLIMIT_AS,
            RlimitResource::Processes => libc::RLIMIT_NPROC,
            RlimitResource::FileSize => libc::RLIMIT_FSIZE,
            RlimitResource::OpenFiles => libc::RLIMIT_NOFILE,
            RlimitResource::Core => libc::RLIMIT_CORE,
        }
    }

    /// The name in an OCI runtime spec's `process.rlimits` (`RLIMIT_CPU`).
    pub fn oci_name(self) -> &'static str {
        match self {
            RlimitResource::Cpu => "RLIMIT_CPU",
            RlimitResource::AddressSpace => "RLIMIT_AS",
            RlimitResource::Processes => "RLIMIT_NPROC",
            RlimitResource::FileSize => "RLIMIT_FSIZE",
            RlimitResource::OpenFiles => "RLIMIT_NOFILE",
            RlimitResource::Core => "RLIMIT_CORE",
        }
    }

    /// The name of a Docker ulimit (`cpu`).
    pub fn ulimit_name(self) -> &'static str {
        match self {
            RlimitResource::Cpu => "cpu",
            RlimitResource::AddressSpace => "as",
            RlimitResource::Processes => "nproc",
            RlimitResource::FileSize => "fsize",
            RlimitResource::OpenFiles => "nofile",
            RlimitResource::Core => "core",
        }
    }
}

/// The rlimits every process runtime sets for `limits`: no core dumps,
/// `RLIMIT_CPU` (soft at the limit rounded up to whole seconds, hard one
/// second later), `RLIMIT_FSIZE` at the disk limit, and `RLIMIT_AS` at the
/// memory limit when `address_space` (runtimes with a memory cgroup leave
/// it out: it counts reservations, not use).
pub fn for_limits(limits: &RuntimeLimits, address_space: bool) -> Vec<Rlimit> {
    let rl = |resource, soft, hard| Rlimit {
        resource,
        soft,
        hard,
    };
    let mut out = vec![rl(RlimitResource::Core, 0, 0)];
    if let Some(secs) = cpu_seconds(limits) {
        out.push(rl(RlimitResource::Cpu, secs, secs.saturating_add(1)));
    }
    if let Some(disk) = limits.disk_bytes {
        out.push(rl(RlimitResource::FileSize, disk, disk));
    }
    if let (Some(mem), true) = (limits.memory_bytes, address_space) {
        out.push(rl(RlimitResource::AddressSpace, mem, mem));
    }
    out
}

/// [`for_limits`] plus `RLIMIT_NOFILE` at `open_files`: the set container
/// runtimes render into their specs (no `RLIMIT_AS`: they have a memory
/// cgroup).
pub fn for_container(limits: &RuntimeLimits, open_files: u64) -> Vec<Rlimit> {
    let mut out = for_limits(limits, false);
    out.push(Rlimit {
        resource: RlimitResource::OpenFiles,
        soft: open_files,
        hard: open_files,
    });
    out
}

/// Moves `RLIMIT_CPU` one second later, for runtimes whose cgroup CPU
/// watch decides (a total over the unit's processes): the rlimit is then a
/// per-process backstop, so an exit code a unit can forge (128 + SIGXCPU)
/// never decides. Saturates at the largest limit.
pub fn backstop_cpu(rlimits: &mut [Rlimit]) {
    for r in rlimits
        .iter_mut()
        .filter(|r| r.resource == RlimitResource::Cpu)
    {
        r.soft = r.soft.saturating_add(1);
        r.hard = r.hard.saturating_add(1);
    }
}

/// The CPU limit of `limits` as `RLIMIT_CPU` seconds: rounded up, at least 1.
pub fn cpu_seconds(limits: &RuntimeLimits) -> Option<u64> {
    limits.cpu_time.map(rlimit_cpu_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backstop moves only `RLIMIT_CPU`, and a CPU limit too large for
    /// seconds stays at the largest value instead of overflowing.
    #[test]
    fn backstop_moves_cpu_only_and_saturates() {
        let limits = RuntimeLimits {
            cpu_time: Some(Duration::MAX),
            disk_bytes: Some(1 << 20),
            ..RuntimeLimits::default()
        };
        let mut out = for_limits(&limits, false);
        let before = out.clone();
        backstop_cpu(&mut out);
        for (old, new) in before.iter().zip(&out) {
            if new.resource == RlimitResource::Cpu {
                assert_eq!((new.soft, new.hard), (u64::MAX, u64::MAX));
            } else {
                assert_eq!(old, new);
            }
        }
        let mut small = for_limits(
            &RuntimeLimits {
                cpu_time: Some(Duration::from_millis(1500)),
                ..RuntimeLimits::default()
            },
            false,
        );
        backstop_cpu(&mut small);
        let cpu = small
            .iter()
            .find(|r| r.resource == RlimitResource::Cpu)
            .unwrap();
        assert_eq!((cpu.soft, cpu.hard), (3, 4));
    }
}
