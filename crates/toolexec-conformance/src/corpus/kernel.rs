//! The host kernel out of reach: `/proc/sys`, sysrq, `/sys`, kernel
//! memory, leaky `/proc` files, the shared seccomp deny-list, x32 calls.

use toolexec_sandbox::seccomp::DENIED;

use crate::check::{self, ensure};
use crate::subject::sh;
use crate::{Case, Kernel, Subject};

/// Issue 10's escape and its relatives: rewrite kernel settings with
/// their own values (harmless if it worked, but it must not), poke sysrq,
/// `/sys` and kernel memory. Each success prints an `ESCAPE` line.
const HOST_KERNEL_SCRIPT: &str = r#"
echo "$(cat /proc/sys/kernel/core_pattern)" > /proc/sys/kernel/core_pattern && echo ESCAPE core_pattern
echo "$(cat /proc/sys/kernel/modprobe)" > /proc/sys/kernel/modprobe && echo ESCAPE modprobe
echo "$(cat /proc/sys/kernel/ns_last_pid)" > /proc/sys/kernel/ns_last_pid && echo ESCAPE ns_last_pid
echo h > /proc/sysrq-trigger && echo ESCAPE sysrq-trigger
for f in /sys/kernel/uevent_helper /sys/kernel/profiling /sys/module/printk/parameters/time; do
  if [ -e "$f" ]; then v=$(cat "$f"); echo "$v" > "$f" && echo "ESCAPE $f"; fi
done
touch /sys/toolexec-probe && echo ESCAPE sys-create
mkdir /sys/fs/cgroup/toolexec-probe && echo ESCAPE cgroup-mkdir
test "$(head -c 16 /proc/kcore 2>/dev/null | wc -c)" -gt 0 && echo ESCAPE kcore
grep ' /sys ' /proc/mounts | grep -v '[ ,]ro[ ,]' | grep -q . && echo ESCAPE sys-writable
echo done
"#;

/// Denied calls an unprivileged process may make on itself, each of
/// which answers something other than `EPERM` without the filter (runs,
/// `EBADF`, `EFAULT`, `EINVAL`), with its arguments for the probe.
const DENY_PROBES: [(&str, &str); 10] = [
    ("kcmp", "me,me,1,0,0"),
    ("pidfd_getfd", "-1,0,0"),
    ("unshare", "0"),
    ("modify_ldt", "0,buf,16"),
    ("keyctl", "0,-3,0"),
    ("io_uring_setup", "1,0"),
    ("perf_event_open", "0,0,-1,-1,0"),
    ("clock_settime", "0,0"),
    ("name_to_handle_at", "-100,0,0,0,0"),
    ("mount_setattr", "-1,0,0,0,0"),
];

/// The probe's `syscalls` arguments: the control call, then each probe
/// by its number on this architecture (`modify_ldt` exists on x86 only).
/// The numbers come from `libc`, not from the list under test: a call
/// dropped from [`DENIED`] is still probed, and fails the case.
fn deny_specs() -> Vec<String> {
    let mut specs = vec![format!("getpid:{}:", libc::SYS_getpid)];
    for (name, args) in DENY_PROBES {
        if let Some(nr) = number(name) {
            specs.push(format!("{name}:{nr}:{args}"));
        }
    }
    specs
}

fn number(name: &str) -> Option<i64> {
    Some(match name {
        "kcmp" => libc::SYS_kcmp,
        "pidfd_getfd" => libc::SYS_pidfd_getfd,
        "unshare" => libc::SYS_unshare,
        #[cfg(target_arch = "x86_64")]
        "modify_ldt" => libc::SYS_modify_ldt,
        "keyctl" => libc::SYS_keyctl,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "perf_event_open" => libc::SYS_perf_event_open,
        "clock_settime" => libc::SYS_clock_settime,
        "name_to_handle_at" => libc::SYS_name_to_handle_at,
        "mount_setattr" => libc::SYS_mount_setattr,
        _ => return None,
    })
}

const X32: i64 = 0x4000_0000;

fn x86_64(_: &Subject) -> Result<(), String> {
    if cfg!(target_arch = "x86_64") {
        Ok(())
    } else {
        Err("x32 exists on x86_64 only".into())
    }
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "host_kernel_is_out_of_reach",
            |_, _, _| sh(HOST_KERNEL_SCRIPT),
            |_, h, o| {
                check::never(&o.outcome, "ESCAPE")?;
                check::stdout_has(&o.outcome, "done\n")?;
                ensure(
                    h.core_pattern_unchanged(),
                    &o.outcome,
                    "the host's kernel.core_pattern changed",
                )
            },
        ),
        Case::new(
            "no_capabilities",
            |_, _, _| sh("grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status"),
            |_, _, o| {
                check::ok(&o.outcome)?;
                let held: Vec<&str> = o
                    .outcome
                    .stdout
                    .lines()
                    .filter(|l| !l.ends_with("0000000000000000"))
                    .collect();
                ensure(
                    o.outcome.stdout.contains("CapEff:") && held.is_empty(),
                    &o.outcome,
                    format!("the unit holds capabilities: {held:?}"),
                )
            },
        ),
        Case::new(
            "leaky_proc_files_are_masked",
            |_, _, _| {
                sh("for f in keys timer_list sched_debug; do \
                      head -c 64 /proc/$f 2>/dev/null | grep -q . && echo LEAK $f; done; echo done")
            },
            |_, _, o| {
                check::never(&o.outcome, "LEAK")?;
                check::stdout_has(&o.outcome, "done\n")
            },
        ),
        Case::new(
            "seccomp_deny_list",
            |s, _, _| {
                let mut args = vec!["syscalls".to_owned()];
                args.extend(deny_specs());
                s.probe(&args)
            },
            |s, _, o| {
                let answers = check::errnos(&o.outcome);
                let expected: Vec<String> = deny_specs()
                    .iter()
                    .filter_map(|s| s.split(':').next().map(str::to_owned))
                    .collect();
                let names: Vec<&String> = answers.iter().map(|(n, _)| n).collect();
                ensure(
                    names == expected.iter().collect::<Vec<_>>(),
                    &o.outcome,
                    format!("expected answers for {expected:?}"),
                )?;
                ensure(
                    answers[0].1 == 0,
                    &o.outcome,
                    "the control call getpid failed",
                )?;
                let unlisted: Vec<&str> = DENY_PROBES
                    .iter()
                    .map(|(n, _)| *n)
                    .filter(|n| number(n).is_some() && !DENIED.iter().any(|(d, _)| d == n))
                    .collect();
                ensure(
                    unlisted.is_empty(),
                    &o.outcome,
                    format!("no longer on the shared deny-list: {unlisted:?}"),
                )?;
                let allowed: Vec<String> = answers[1..]
                    .iter()
                    .filter(|(_, errno)| {
                        // A user-space kernel answers ENOSYS for calls it
                        // lacks, before any filter (gVisor: pidfd_getfd).
                        *errno != libc::EPERM
                            && !(s.kernel == Kernel::UserSpace && *errno == libc::ENOSYS)
                    })
                    .map(|(n, e)| format!("{n} (errno {e})"))
                    .collect();
                ensure(
                    allowed.is_empty(),
                    &o.outcome,
                    format!(
                        "denied calls not refused with EPERM: {}",
                        allowed.join(", ")
                    ),
                )
            },
        ),
        Case::new(
            "x32_system_calls_are_refused",
            |s, _, _| {
                s.probe(&[
                    "syscalls".to_owned(),
                    format!("getpid:{}:", libc::SYS_getpid),
                    format!("x32_getpid:{}:", X32 | 39),
                    format!("x32_unshare:{}:{}", X32 | 272, libc::CLONE_NEWUSER),
                ])
            },
            |_, _, o| {
                let answers = check::errnos(&o.outcome);
                ensure(
                    answers.len() == 3 && answers[0].1 == 0,
                    &o.outcome,
                    "expected three answers, getpid working",
                )?;
                ensure(
                    answers[1..].iter().all(|(_, errno)| *errno != 0),
                    &o.outcome,
                    "an x32 system call ran",
                )
            },
        )
        .applies(x86_64),
    ]
}
