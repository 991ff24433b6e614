//! Every runtime under test, built as a library user would, with what the
//! corpus needs (helpers, roots, private directories). The only place
//! that names runtime crates.

use std::path::{Path, PathBuf};
use std::process::Command;

use toolexec::Availability;
use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
use toolexec_conformance::{Kernel, PROBE_RS, Root, Subject};
use toolexec_docker::{DockerConfig, DockerRuntime};
use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, ReadOnlyBind, RootfsSource};
use toolexec_runtime::Runtime;

/// A runtime ready to run the corpus, and what it claims.
pub(crate) struct Built {
    pub runtime: Box<dyn Runtime>,
    pub subject: Subject,
}

/// A helper binary: the `env` override (a copy an unprivileged user can
/// reach, see `scripts/test-unprivileged.sh`), else Cargo's build.
fn helper(env: &str, built: &str) -> PathBuf {
    std::env::var_os(env).map_or_else(|| built.into(), Into::into)
}

fn init() -> PathBuf {
    helper(
        "TOOLEXEC_TEST_SANDBOX_INIT",
        env!("CARGO_BIN_EXE_conformance-sandbox-init"),
    )
}

fn worker() -> PathBuf {
    helper(
        "TOOLEXEC_TEST_SCRIPT_WORKER",
        env!("CARGO_BIN_EXE_conformance-script-worker"),
    )
}

fn available(runtime: &dyn Runtime) -> Result<(), String> {
    match runtime.availability() {
        Availability::Available => Ok(()),
        Availability::Unavailable { reason } => Err(reason),
    }
}

/// bubblewrap with the init (Landlock, the probe) and the script worker.
pub(crate) async fn bubblewrap() -> Result<Built, String> {
    let runtime = BubblewrapRuntime::new(BubblewrapConfig {
        init: Some(init()),
        script_worker: Some(worker()),
        ..BubblewrapConfig::default()
    });
    available(&runtime)?;
    let subject = Subject::of(&runtime, Root::HostUsr, Kernel::Host);
    Ok(Built {
        runtime: Box::new(runtime),
        subject,
    })
}

/// Directories of this test process's own.
fn base_dir() -> PathBuf {
    std::env::temp_dir().join(format!("toolexec-conformance-oci-{}", std::process::id()))
}

/// runc or runsc on a root made of the host's `/usr` (read-only), with
/// the script worker.
pub(crate) async fn oci(flavor: OciFlavor) -> Result<Built, String> {
    let base = base_dir();
    let root = base.join(format!("rootfs-{}", flavor.name()));
    for dir in ["usr", "tmp", "proc", "dev", "etc", "run", "sys"] {
        std::fs::create_dir_all(root.join(dir)).map_err(|e| format!("{}: {e}", root.display()))?;
    }
    // runc gives the /tmp tmpfs the mode of the directory it covers.
    std::fs::set_permissions(
        root.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .map_err(|e| format!("{}: {e}", root.display()))?;
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("sbin", "usr/sbin"),
    ] {
        let _ = std::os::unix::fs::symlink(to, root.join(link));
    }
    let mut config = OciConfig::new(flavor, RootfsSource::Dir(root));
    config.binds = vec![ReadOnlyBind {
        source: "/usr".into(),
        destination: "/usr".into(),
    }];
    config.work_dir = base.join(format!("bundles-{}", flavor.name()));
    config.cache_dir = base.join("cache");
    config.state_dir = base.join(format!("state-{}", flavor.name()));
    config.channel_dir = base.join("gw");
    config.cgroup_parent = format!(
        "toolexec-conformance-{}/{}",
        std::process::id(),
        flavor.name()
    );
    config.script_worker = Some(worker());
    let runtime = OciRuntime::new(config);
    available(&runtime)?;
    let kernel = match flavor {
        OciFlavor::Runc => Kernel::Host,
        OciFlavor::Runsc => Kernel::UserSpace,
    };
    let subject = Subject::of(&runtime, Root::HostUsr, kernel);
    Ok(Built {
        runtime: Box::new(runtime),
        subject,
    })
}

const DOCKER_SOCKET: &str = "/run/toolexec-docker.sock";
const BUSYBOX_IMAGE: &str = "toolexec-test/busybox:1";
/// Where the static probe sits in the test image.
const PROBE_IN_IMAGE: &str = "/bin/conformance-probe";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Docker on the private daemon (started here when its socket is missing
/// and this process is root), on the busybox test image plus the static
/// probe.
pub(crate) async fn docker() -> Result<Built, String> {
    if !Path::new(DOCKER_SOCKET).exists() && toolexec_sandbox::channel_socket::euid() == 0 {
        let out = Command::new("bash")
            .arg(repo().join("scripts/start-dockerd.sh"))
            .output()
            .map_err(|e| format!("scripts/start-dockerd.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/start-dockerd.sh failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let image = probe_image_name();
    let runtime = DockerRuntime::new(DockerConfig::new(&image).with_socket(DOCKER_SOCKET))
        .map_err(|e| e.to_string())?;
    available(&runtime)?;
    build_probe_image(&image)?;
    runtime.sweep().await?;
    let subject = Subject::of(
        &runtime,
        Root::Busybox {
            probe: PROBE_IN_IMAGE.into(),
        },
        Kernel::Host,
    );
    Ok(Built {
        runtime: Box::new(runtime),
        subject,
    })
}

/// The probe image's tag, by the probe's source (a changed probe is a new
/// image).
fn probe_image_name() -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    PROBE_RS.hash(&mut h);
    format!("toolexec-test/conformance-probe:{:016x}", h.finish())
}

fn docker_cli() -> Command {
    let mut cmd = Command::new("docker");
    cmd.env("DOCKER_HOST", format!("unix://{DOCKER_SOCKET}"))
        .env("DOCKER_BUILDKIT", "0");
    cmd
}

/// Builds the busybox image plus the static probe, unless present.
fn build_probe_image(image: &str) -> Result<(), String> {
    let present = docker_cli()
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return Ok(());
    }
    let dir =
        std::env::temp_dir().join(format!("toolexec-conformance-image-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("probe.rs"), PROBE_RS).map_err(|e| e.to_string())?;
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "-O",
            "-C",
            "target-feature=+crt-static",
            "-o",
        ])
        .arg(dir.join("conformance-probe"))
        .arg(dir.join("probe.rs"))
        .output()
        .map_err(|e| format!("rustc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "rustc could not build the static probe: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(
        dir.join("Dockerfile"),
        format!("FROM {BUSYBOX_IMAGE}\nCOPY conformance-probe {PROBE_IN_IMAGE}\n"),
    )
    .map_err(|e| e.to_string())?;
    let out = docker_cli()
        .args(["build", "-q", "-t", image])
        .arg(&dir)
        .output()
        .map_err(|e| format!("docker build: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        return Err(format!(
            "docker build: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}
