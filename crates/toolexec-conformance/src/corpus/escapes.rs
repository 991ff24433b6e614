//! Escapes through the filesystem, `/proc`, the network, signals and the
//! host identity.

use toolexec_runtime::{RunStatus, Unit};

use crate::case::Drive;
use crate::check::{self, ensure};
use crate::run::describe;
use crate::subject::sh;
use crate::{Case, Kernel, Subject};

/// Host paths units try to create.
const HOST_TARGETS: [&str; 3] = [
    "/usr/bin/toolexec-conformance-pwned",
    "/etc/toolexec-conformance-pwned",
    "/toolexec-conformance-pwned",
];

/// The first line of the host's `/etc/shadow`, when this process can
/// read it (root), which no unit may print.
fn host_shadow_line() -> Option<String> {
    let shadow = std::fs::read_to_string("/etc/shadow").ok()?;
    shadow.lines().next().map(str::to_owned)
}

fn no_host_shadow(out: &toolexec_runtime::RunOutcome) -> Result<(), String> {
    match host_shadow_line() {
        Some(line) => check::never(out, &line),
        None => Ok(()),
    }
}

/// The unit's uid (`id=` line) and whether its `uid_map` is the identity
/// (no user namespace: the uid is the host's).
fn unit_uid(stdout: &str) -> (Option<u64>, bool) {
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("id="))
        .and_then(|n| n.trim().parse().ok());
    let identity = stdout
        .lines()
        .next()
        .is_some_and(|l| l.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
    (id, identity)
}

fn host_kernel(s: &Subject) -> Result<(), String> {
    match s.kernel {
        Kernel::Host => Ok(()),
        Kernel::UserSpace => Err(
            "a user-space kernel: the unit's processes live inside the sandbox process, not on the host (unit_uid_is_not_root covers the unit's view; the runtime's own tests watch its sandbox process)"
                .into(),
        ),
    }
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "host_secrets_are_invisible",
            |_, h, _| {
                let f = h.secret_file().display().to_string();
                sh(format!(
                    "env; cat /etc/shadow; cat {f}; cat /proc/*/root{f}; \
                     ln -s / /tmp/up && cat /tmp/up{f}; cat /proc/1/environ | tr '\\0' '\\n'; \
                     ls /root /home; true"
                ))
            },
            |_, h, o| {
                check::never(&o.outcome, h.secret())?;
                no_host_shadow(&o.outcome)
            },
        ),
        Case::new(
            "writes_outside_tmp_fail_and_the_host_is_untouched",
            |_, h, _| {
                sh(format!(
                    "for f in {} {}; do echo pwned > $f && echo WROTE $f; done; \
                     echo ok > /tmp/scratch && cat /tmp/scratch",
                    HOST_TARGETS.join(" "),
                    h.marker_file().display()
                ))
            },
            |_, h, o| {
                check::never(&o.outcome, "WROTE")?;
                check::stdout_has(&o.outcome, "ok\n")?;
                for t in HOST_TARGETS {
                    if std::path::Path::new(t).exists() {
                        let _ = std::fs::remove_file(t);
                        return Err(format!("{t} appeared on the host"));
                    }
                }
                ensure(h.marker_untouched(), &o.outcome, "the host's marker file changed")
            },
        ),
        Case::new(
            "tmp_is_bounded_by_the_disk_limit",
            |_, _, _| sh("dd if=/dev/zero of=/tmp/big bs=64k count=64 2>&1; echo size=$(cat /tmp/big | wc -c)"),
            |_, _, o| {
                let size: Option<u64> = o
                    .outcome
                    .stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("size="))
                    .and_then(|n| n.trim().parse().ok());
                // Something is written (/tmp is the unit's), never more
                // than the limit.
                ensure(
                    size.is_some_and(|n| n > 0 && n <= 1 << 20),
                    &o.outcome,
                    format!("/tmp took {size:?} bytes under a 1 MiB disk limit"),
                )
            },
        )
        .limits(|_, l| l.disk_bytes = Some(1 << 20)),
        Case::new(
            "network_is_off",
            |s, h, _| s.probe(&["connect".to_owned(), "127.0.0.1".to_owned(), h.port().to_string()]),
            |_, h, o| {
                check::stdout_has(&o.outcome, "blocked")?;
                ensure(!h.was_reached(), &o.outcome, "the unit reached the host's listener")
            },
        ),
        Case::new(
            "only_loopback_interface",
            |_, _, _| sh("cat /proc/net/dev"),
            |_, _, o| {
                let interfaces: Vec<&str> = o
                    .outcome
                    .stdout
                    .lines()
                    .skip(2)
                    .filter_map(|l| l.split(':').next())
                    .map(str::trim)
                    .filter(|i| *i != "lo")
                    .collect();
                check::ok(&o.outcome)?;
                ensure(interfaces.is_empty(), &o.outcome, format!("interfaces besides lo: {interfaces:?}"))
            },
        ),
        Case::new(
            "proc_and_symlink_escapes_stay_inside",
            |_, h, _| {
                let f = h.secret_file().display().to_string();
                sh(format!(
                    "ls /proc/1/root/ /proc/self/root/../..; cat /proc/1/root/etc/shadow; \
                     ln -s / /tmp/r && cat /tmp/r/etc/shadow /tmp/r{f}; ln -s /etc/shadow /tmp/s && cat /tmp/s; \
                     cat /proc/1/cwd/../../..{f}; cat /proc/{pid}/environ; cat /proc/{pid}/root{f}; \
                     echo procs=$(ls /proc | grep -c '^[0-9]')",
                    pid = h.pid()
                ))
            },
            |_, h, o| {
                check::never(&o.outcome, h.secret())?;
                no_host_shadow(&o.outcome)?;
                let procs: Option<u32> = o
                    .outcome
                    .stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("procs="))
                    .and_then(|n| n.trim().parse().ok());
                ensure(
                    procs.is_some_and(|n| n < 16),
                    &o.outcome,
                    format!("the unit sees {procs:?} processes: not its own pid namespace"),
                )
            },
        ),
        Case::new(
            "signals_cannot_reach_the_host",
            |_, h, _| sh(format!("kill -9 {} && echo KILLED; kill -9 1; kill -9 -1; echo after", h.pid())),
            |_, _, o| {
                // The unit may kill itself with -1; this process is alive
                // to judge, and the runtime must still serve (checked
                // after every case).
                check::never(&o.outcome, "KILLED")?;
                ensure(
                    !matches!(o.outcome.status, RunStatus::Error { .. }),
                    &o.outcome,
                    "the run ended in a runtime error",
                )
            },
        ),
        // From inside, only the unit's own uid is certain: `uid_map`
        // shows one level of user namespaces, and runtimes nest them
        // (bubblewrap's --disable-userns), so the host's view
        // (host_uid_from_the_host) is the authority on host uids. Without
        // a user namespace (identity map) the uid is the host's.
        Case::new(
            "unit_uid_is_not_root",
            |_, _, _| sh("cat /proc/self/uid_map; echo id=$(id -u)"),
            |_, _, o| {
                check::ok(&o.outcome)?;
                let (uid, identity) = unit_uid(&o.outcome.stdout);
                let whose = if identity { "host" } else { "namespace" };
                ensure(
                    uid.is_some_and(|u| u != 0),
                    &o.outcome,
                    format!("the unit runs as {whose} uid {uid:?}"),
                )
            },
        ),
        Case::new(
            "host_uid_from_the_host",
            |_, h, c| Unit::command(["sleep".to_owned(), h.marker(c.index)]),
            |_, _, o| {
                let seen = &o.host_processes;
                ensure(
                    seen.iter().any(|p| p.comm.starts_with("sleep")),
                    &o.outcome,
                    format!("the unit's process was never seen on the host: {}", describe(seen)),
                )?;
                for p in seen {
                    if p.uids.is_empty() || p.uids.contains(&0) {
                        return Err(format!("host process of the unit runs as uid 0: {}", describe(seen)));
                    }
                }
                ensure(o.outcome.status == RunStatus::Cancelled, &o.outcome, "expected status cancelled")
            },
        )
        .drive(Drive::WatchHost)
        .applies(host_kernel),
    ]
}
