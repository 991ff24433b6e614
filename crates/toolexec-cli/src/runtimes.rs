//! The sandbox runtimes the CLI registers, and `toolexec runtimes`.
//!
//! Registration is a list of functions, one per runtime: adding a runtime
//! is one line in [`REGISTRARS`]. A runtime the configuration does not set
//! up (no root filesystem, image or URL) is still listed, as unavailable
//! with the reason ([`UnavailableRuntime`], with the runtime's own
//! descriptor).

use std::io::{self, Write};
use std::path::PathBuf;

use serde_json::json;
use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
use toolexec_runtime::{Runtimes, UnavailableRuntime};
use toolexec_sandbox::{HostRuntime, UnsandboxedOptIn};

use toolexec_code::InProcessRuntime;
use toolexec_docker::DockerRuntime;
use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, RootfsSource};
use toolexec_remote::{RemoteConfig, RemoteRuntime};
use toolexec_wasm::WasmRuntime;

use crate::config::RuntimesConfig;
use crate::render;

/// Registers one runtime (or none, when the configuration does not want it).
type Registrar = fn(&RuntimesConfig, &mut Runtimes);

/// Every runtime the CLI knows, in listing order.
const REGISTRARS: &[Registrar] = &[
    register_bubblewrap,
    register_runc,
    register_runsc,
    register_docker,
    register_wasm,
    register_in_process,
    register_remote,
    register_host,
];

/// The bubblewrap namespaces sandbox; its init runs as `toolexec
/// __sandbox-init` and scripts as `toolexec __script-worker` (both this
/// executable) inside it.
fn register_bubblewrap(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    runtimes.register(BubblewrapRuntime::new(BubblewrapConfig {
        init: current_exe(),
        script_worker: current_exe(),
        ..config.bubblewrap.clone()
    }));
}

/// runc on the `[runtimes.oci]` root filesystem (profile standard).
fn register_runc(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    register_oci(OciFlavor::Runc, config, runtimes);
}

/// gVisor runsc on the `[runtimes.oci]` root filesystem (profile hardened).
fn register_runsc(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    register_oci(OciFlavor::Runsc, config, runtimes);
}

fn register_oci(flavor: OciFlavor, config: &RuntimesConfig, runtimes: &mut Runtimes) {
    let options = &config.oci;
    let Some(rootfs) = &options.rootfs else {
        runtimes.register(UnavailableRuntime::new(
            flavor.descriptor(),
            "no root filesystem: set rootfs (a directory or tarball) in [runtimes.oci]",
        ));
        return;
    };
    // A file is a tarball; a directory (or a path that does not exist, which
    // the runtime reports as unavailable) is used in place.
    let source = if rootfs.is_file() {
        RootfsSource::Tarball(rootfs.clone())
    } else {
        RootfsSource::Dir(rootfs.clone())
    };
    let mut oci = OciConfig::new(flavor, source);
    let binary = match flavor {
        OciFlavor::Runc => &options.runc,
        OciFlavor::Runsc => &options.runsc,
    };
    if let Some(binary) = binary {
        oci.binary = binary.clone();
    }
    runtimes.register(OciRuntime::new(oci));
}

/// Docker containers from `[runtimes.docker]` (image required).
fn register_docker(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    let Some(docker) = config.docker.as_ref().filter(|d| !d.image.is_empty()) else {
        runtimes.register(UnavailableRuntime::new(
            DockerRuntime::DESCRIPTOR,
            "no image: set image in [runtimes.docker]",
        ));
        return;
    };
    match DockerRuntime::new(docker.clone()) {
        Ok(runtime) => {
            runtimes.register(runtime);
        }
        // Checked when the file was read; kept visible if it ever differs.
        Err(e) => {
            runtimes.register(UnavailableRuntime::new(
                DockerRuntime::DESCRIPTOR,
                e.to_string(),
            ));
        }
    }
}

/// wasmtime, in process.
fn register_wasm(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    runtimes.register(WasmRuntime::new(config.wasm.clone()));
}

/// QuickJS scripts in this process (profiles dev and standard at most).
fn register_in_process(_config: &RuntimesConfig, runtimes: &mut Runtimes) {
    runtimes.register(InProcessRuntime::default());
}

/// A `toolexec runtime-server` from `[runtimes.remote]`; the key is read
/// here and never printed.
fn register_remote(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    let options = &config.remote;
    let unconfigured = |reason: String| {
        UnavailableRuntime::new(RemoteRuntime::DESCRIPTOR, reason)
            .configured(options.max_profile, options.unit_kinds.clone())
    };
    let Some(url) = &options.url else {
        runtimes.register(unconfigured(
            "no server: set url and key_file or key_env in [runtimes.remote]".into(),
        ));
        return;
    };
    let key = match options.key().map(|k| k.load()).transpose() {
        Ok(key) => key,
        Err(e) => {
            runtimes.register(unconfigured(e.to_string()));
            return;
        }
    };
    let mut remote = RemoteConfig::new(url.clone(), key);
    remote.max_profile = options.max_profile;
    remote.unit_kinds = options.unit_kinds.clone();
    match RemoteRuntime::new(remote) {
        Ok(runtime) => {
            runtimes.register(runtime);
        }
        Err(e) => {
            runtimes.register(unconfigured(e.to_string()));
        }
    }
}

/// The unsandboxed host runtime, only with `allow_unsandboxed_host = true`.
fn register_host(config: &RuntimesConfig, runtimes: &mut Runtimes) {
    if config.allow_unsandboxed_host {
        runtimes.register(HostRuntime::new(
            UnsandboxedOptIn::i_understand_units_run_unsandboxed(),
        ));
    }
}

/// The current executable: the sandbox init and script worker sandboxes
/// run (`toolexec __sandbox-init`, `toolexec __script-worker`).
pub(crate) fn current_exe() -> Option<PathBuf> {
    std::env::current_exe().ok()
}

/// The registry for `config`.
pub(crate) fn build(config: &RuntimesConfig) -> Runtimes {
    let mut runtimes = Runtimes::new(config.map());
    for register in REGISTRARS {
        register(config, &mut runtimes);
    }
    runtimes
}

/// `toolexec runtimes [--json]`.
pub(crate) fn list(runtimes: &Runtimes, json_out: bool) -> io::Result<()> {
    let infos = runtimes.list();
    let mut out = io::stdout().lock();
    if json_out {
        return render::json(
            &mut out,
            &json!({"runtimes": infos, "profiles": runtimes.profile_map()}),
        );
    }
    let rows: Vec<Vec<String>> = infos
        .iter()
        .map(|i| {
            vec![
                i.name.clone(),
                i.max_profile.to_string(),
                i.unit_kinds
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                i.profiles
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                match &i.reason {
                    None => "yes".into(),
                    Some(r) => format!("no: {r}"),
                },
                i.isolation.clone(),
            ]
        })
        .collect();
    render::table(
        &mut out,
        &[
            "NAME",
            "MAX PROFILE",
            "UNITS",
            "SERVES",
            "AVAILABLE",
            "ISOLATION",
        ],
        &rows,
        160,
    )?;
    writeln!(out)?;
    for info in infos.iter().filter(|i| !i.mechanisms.is_empty()) {
        writeln!(out, "{} mechanisms:", info.name)?;
        for m in &info.mechanisms {
            let mark = if m.enforced { "enforced" } else { "MISSING" };
            writeln!(out, "  {:<13} {mark}: {}", m.name, m.detail)?;
        }
        writeln!(out)?;
    }
    let map = runtimes.profile_map();
    for p in toolexec_runtime::Profile::ALL {
        writeln!(out, "{p}: {}", map.candidates(p).join(", "))?;
    }
    if infos.is_empty() {
        writeln!(out, "(no runtime is registered)")?;
    }
    Ok(())
}
