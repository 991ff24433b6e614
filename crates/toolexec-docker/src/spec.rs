//! The container a unit runs in: create body and how each limit maps to a
//! Docker mechanism.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use toolexec_runtime::{CommandUnit, Enforcement, LimitKind, NetworkPolicy, RuntimeLimits};

use toolexec_sandbox::rlimits;
use toolexec_sandbox::seccomp::profile::{self, Clone3};

use crate::DockerConfig;
use crate::sweep::{OWNER_LABEL, RUNTIME_LABEL, owner_id};

/// The label every container of this runtime carries, with the run id.
pub const RUN_LABEL: &str = "toolexec.run";

/// Where the channel socket appears inside the container.
pub const CONTAINER_CHANNEL_SOCKET: &str = "/run/toolexec/channel.sock";

/// The `PATH` units get.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The create body for `command` under `limits`, and the enforcement of
/// the limits the container itself carries (wall time, output and tool
/// calls are the host's, added by the runtime).
pub(crate) fn container_body(
    config: &DockerConfig,
    command: &CommandUnit,
    limits: &RuntimeLimits,
    run_id: &str,
    channel_socket: Option<&str>,
) -> (ContainerCreateBody, Vec<Enforcement>) {
    let mut enforcement = Vec::new();
    let mut env = Vec::new();
    if !command.env.contains_key("PATH") {
        env.push(format!("PATH={PATH}"));
    }
    env.extend(command.env.iter().map(|(k, v)| format!("{k}={v}")));
    let mut binds = Vec::new();
    if let Some(socket) = channel_socket {
        env.push(format!(
            "{}={CONTAINER_CHANNEL_SOCKET}",
            toolexec_runtime::protocol::CHANNEL_SOCKET_ENV
        ));
        binds.push(format!("{socket}:{CONTAINER_CHANNEL_SOCKET}:rw"));
    }

    let ulimits = rlimits::for_container(limits, config.max_open_files)
        .into_iter()
        .map(|r| ulimit(r.resource.ulimit_name(), r.soft, r.hard))
        .collect();
    match rlimits::cpu_seconds(limits) {
        Some(secs) => {
            enforcement.push(Enforcement::by(
                LimitKind::CpuTime,
                format!(
                    "RLIMIT_CPU {secs} s for each process separately, not a total over the unit's processes (container ulimit); NanoCpus {} caps the rate",
                    config.cpus
                ),
            ));
        }
        None => enforcement.push(Enforcement::not_enforced(
            LimitKind::CpuTime,
            "no cpu_time limit requested",
        )),
    }

    let mut tmpfs_options = String::from("rw,noexec,nosuid,nodev,mode=1777");
    match limits.disk_bytes {
        Some(disk) => {
            // tmpfs rounds to pages; at least one page.
            tmpfs_options.push_str(&format!(",size={}", disk.max(4096)));
            enforcement.push(Enforcement::by(
                LimitKind::Disk,
                format!("tmpfs /tmp size={disk} bytes, read-only root filesystem"),
            ));
        }
        None => enforcement.push(Enforcement::not_enforced(
            LimitKind::Disk,
            "no disk limit requested (tmpfs /tmp at the kernel's default size)",
        )),
    }

    let memory = limits.memory_bytes.map(clamp_i64);
    enforcement.push(match memory {
        Some(_) => Enforcement::by(
            LimitKind::Memory,
            "docker cgroup memory limit (Memory = MemorySwap, no swap)",
        ),
        None => Enforcement::not_enforced(LimitKind::Memory, "no memory limit requested"),
    });
    enforcement.push(match limits.max_processes {
        Some(_) => Enforcement::by(LimitKind::Processes, "docker cgroup pids limit (PidsLimit)"),
        None => Enforcement::not_enforced(LimitKind::Processes, "no process limit requested"),
    });
    enforcement.push(match &limits.network {
        NetworkPolicy::Off => Enforcement::by(
            LimitKind::Network,
            "docker NetworkMode none (empty network namespace, loopback only)",
        ),
        NetworkPolicy::Allow { .. } => Enforcement::not_enforced(
            LimitKind::Network,
            "host allowlists are refused (docker cannot filter by host)",
        ),
    });

    let host_config = HostConfig {
        network_mode: Some("none".into()),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([("/tmp".to_owned(), tmpfs_options)])),
        memory,
        memory_swap: memory,
        pids_limit: limits.max_processes.map(i64::from),
        nano_cpus: Some((config.cpus * 1e9) as i64),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec![
            "no-new-privileges".into(),
            // The deny-list every sandbox runtime shares, not the daemon's
            // default profile.
            format!("seccomp={}", profile::libseccomp_json(Clone3::Enosys)),
        ]),
        ulimits: Some(ulimits),
        // docker-init as pid 1: the unit gets kernel signals (SIGXCPU)
        // that pid 1 would ignore, and its zombies are reaped.
        init: Some(true),
        ipc_mode: Some("private".into()),
        privileged: Some(false),
        auto_remove: Some(false),
        binds: (!binds.is_empty()).then_some(binds),
        // Output goes through the attach stream only; nothing is kept on
        // the daemon's disk, whatever the unit writes.
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        ..HostConfig::default()
    };
    let has_stdin = command.stdin.is_some();
    let body = ContainerCreateBody {
        image: Some(config.image.clone()),
        cmd: Some(command.argv.clone()),
        env: Some(env),
        working_dir: Some(command.cwd.clone().unwrap_or_else(|| "/tmp".into())),
        // Validated numbers, as Docker will read them (no name lookup in
        // the image, no leading zeros).
        user: Some(
            config
                .unit_user()
                .map(|(uid, gid)| format!("{uid}:{gid}"))
                .unwrap_or_else(|_| "65534:65534".into()),
        ),
        labels: Some(
            config
                .labels
                .clone()
                .into_iter()
                .chain([
                    (RUN_LABEL.to_owned(), run_id.to_owned()),
                    (RUNTIME_LABEL.to_owned(), "docker".to_owned()),
                    (OWNER_LABEL.to_owned(), owner_id().to_owned()),
                ])
                .collect(),
        ),
        network_disabled: Some(true),
        tty: Some(false),
        attach_stdin: Some(has_stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(has_stdin),
        stdin_once: Some(has_stdin),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    };
    (body, enforcement)
}

fn ulimit(name: &str, soft: u64, hard: u64) -> ResourcesUlimits {
    ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(clamp_i64(soft)),
        hard: Some(clamp_i64(hard)),
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_down_by_default() {
        let config = DockerConfig::new("img");
        let command = CommandUnit {
            argv: vec!["true".into()],
            ..CommandUnit::default()
        };
        let (body, enforcement) = container_body(
            &config,
            &command,
            &RuntimeLimits::default(),
            "r1",
            Some("/h/g.sock"),
        );
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(host.memory, host.memory_swap);
        assert_eq!(host.memory, Some(256 << 20));
        assert_eq!(host.pids_limit, Some(64));
        assert!(host.tmpfs.unwrap()["/tmp"].contains("size=67108864"));
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        let labels = body.labels.unwrap();
        assert_eq!(labels[RUN_LABEL], "r1");
        assert_eq!(labels[RUNTIME_LABEL], "docker");
        assert_eq!(labels[OWNER_LABEL], owner_id());
        assert!(
            body.env
                .unwrap()
                .iter()
                .any(|e| e.starts_with("TOOLEXEC_CHANNEL_SOCKET="))
        );
        assert_eq!(
            host.binds.unwrap(),
            vec![format!("/h/g.sock:{CONTAINER_CHANNEL_SOCKET}:rw")]
        );
        for limit in [
            LimitKind::CpuTime,
            LimitKind::Disk,
            LimitKind::Memory,
            LimitKind::Processes,
            LimitKind::Network,
        ] {
            let e = enforcement.iter().find(|e| e.limit == limit).unwrap();
            assert!(e.is_enforced(), "{e:?}");
        }
    }

    #[test]
    fn huge_limits_do_not_overflow() {
        let config = DockerConfig::new("img");
        let command = CommandUnit {
            argv: vec!["true".into()],
            ..CommandUnit::default()
        };
        let limits = RuntimeLimits {
            memory_bytes: Some(u64::MAX),
            cpu_time: Some(std::time::Duration::from_secs(u64::MAX)),
            ..RuntimeLimits::default()
        };
        let (body, _) = container_body(&config, &command, &limits, "r", None);
        let host = body.host_config.unwrap();
        assert_eq!(host.memory, Some(i64::MAX));
        assert!(host.binds.is_none());
    }
}
