//! `[runtimes]`: which runtimes serve each profile, and each runtime's own
//! settings. Where a table is one runtime's configuration, that runtime's
//! type reads it ([`BubblewrapConfig`], [`DockerConfig`], [`WasmConfig`])
//! and its own check refuses bad values; `[runtimes.oci]` (two runtimes on
//! one root filesystem) and `[runtimes.remote]` (a key read only when the
//! runtime is registered) are the CLI's.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolexec_bwrap::BubblewrapConfig;
use toolexec_docker::DockerConfig;
use toolexec_remote::auth::KeySource;
use toolexec_runtime::{Profile, ProfileMap, UnitKind};
use toolexec_sandbox::HostRuntime;
use toolexec_wasm::WasmConfig;

use super::error::{Document, Fault};
use super::values::{from_text, relative_to};

/// `[runtimes]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuntimesConfig {
    /// Runtimes for each profile, in order of preference; unset: the
    /// defaults of [`ProfileMap`].
    dev: Option<Vec<String>>,
    standard: Option<Vec<String>>,
    hardened: Option<Vec<String>>,
    /// Registers the unsandboxed `host` runtime (dev profile only).
    #[serde(default)]
    pub allow_unsandboxed_host: bool,
    /// `[runtimes.bubblewrap]`.
    #[serde(default)]
    pub bubblewrap: BubblewrapConfig,
    /// `[runtimes.oci]` (runc and runsc).
    #[serde(default)]
    pub oci: OciOptions,
    /// `[runtimes.docker]`; without an image the runtime is unavailable.
    pub docker: Option<DockerConfig>,
    /// `[runtimes.remote]`.
    #[serde(default)]
    pub remote: RemoteOptions,
    /// `[runtimes.wasm]`.
    #[serde(default)]
    pub wasm: WasmConfig,
}

/// `[runtimes.oci]`: runc (standard) and gVisor runsc (hardened) on one
/// root filesystem.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OciOptions {
    /// The root filesystem: a directory, or a tarball (relative to the
    /// config file's directory). Without one both runtimes are
    /// unavailable.
    pub rootfs: Option<PathBuf>,
    /// The `runc` binary (default: on `PATH`).
    pub runc: Option<PathBuf>,
    /// The `runsc` binary (default: on `PATH`).
    pub runsc: Option<PathBuf>,
}

/// `[runtimes.remote]`: a `toolexec runtime-server` elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RemoteOptions {
    /// `http://host:port` of the server; without one the runtime is
    /// unavailable.
    pub url: Option<String>,
    /// The shared key's file (relative to the config file's directory).
    key_file: Option<PathBuf>,
    /// The shared key's environment variable.
    key_env: Option<String>,
    /// The strongest profile the server honours (default `standard`).
    #[serde(deserialize_with = "from_text")]
    pub max_profile: Profile,
    /// The unit kinds the server runs (default `["command"]`).
    pub unit_kinds: Vec<UnitKind>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            url: None,
            key_file: None,
            key_env: None,
            max_profile: Profile::Standard,
            unit_kinds: vec![UnitKind::Command],
        }
    }
}

impl RemoteOptions {
    /// Where the shared key comes from (read when the runtime is
    /// registered, never printed).
    pub(crate) fn key(&self) -> Option<KeySource> {
        match (&self.key_file, &self.key_env) {
            (Some(file), _) => Some(KeySource::File(file.clone())),
            (None, Some(env)) => Some(KeySource::Env(env.clone())),
            (None, None) => None,
        }
    }

    /// The URL as the client parses it, one key source, a variable name
    /// that can be one, at least one unit kind.
    fn check(&self) -> Result<(), Fault> {
        let fail =
            |key: &str, message: String| Err(Fault::new(format!("runtimes.remote.{key}"), message));
        if let Some(url) = &self.url {
            let config = toolexec_remote::RemoteConfig::new(url.clone(), None);
            if let Err(e) = toolexec_remote::RemoteRuntime::new(config) {
                return fail("url", e.into_field_message("").1);
            }
        }
        if self.key_file.is_some() && self.key_env.is_some() {
            return fail("key_env", "give key_file or key_env, not both".into());
        }
        if let Some(name) = &self.key_env
            && (name.is_empty() || name.contains(['=', '\0']))
        {
            return fail(
                "key_env",
                format!("{name:?} is not an environment variable name"),
            );
        }
        if self.unit_kinds.is_empty() {
            return fail(
                "unit_kinds",
                "list at least one unit kind (command, script, wasm)".into(),
            );
        }
        Ok(())
    }
}

/// Runtime names in profile lists: lowercase letters, digits, `_` and `-`.
fn valid_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

impl RuntimesConfig {
    /// Which runtimes serve each profile: the lists the file gives, the
    /// defaults for the others, and `host` for dev when the file allows it
    /// and gives no dev list.
    pub(crate) fn map(&self) -> ProfileMap {
        let mut map = ProfileMap::default();
        for (profile, list) in self.lists() {
            if let Some(list) = list {
                *map.candidates_mut(profile) = list.clone();
            }
        }
        if self.allow_unsandboxed_host && self.dev.is_none() {
            map.dev.push(HostRuntime::NAME.into());
        }
        map
    }

    fn lists(&self) -> [(Profile, &Option<Vec<String>>); 3] {
        [
            (Profile::Dev, &self.dev),
            (Profile::Standard, &self.standard),
            (Profile::Hardened, &self.hardened),
        ]
    }

    /// Checks the profile lists and every runtime's settings with the
    /// runtime's own checks, and makes paths relative to `base`, the config
    /// file's directory. `document` tells a key written empty from one not
    /// written.
    pub(super) fn resolve(&mut self, base: &Path, document: &Document<'_>) -> Result<(), Fault> {
        for (profile, list) in self.lists() {
            for (i, name) in list.iter().flatten().enumerate() {
                let fail =
                    |message: String| Err(Fault::new(format!("runtimes.{profile}[{i}]"), message));
                if !valid_runtime_name(name) {
                    return fail(format!(
                        "{name:?} is not a runtime name (lowercase letters, digits, `_`, `-`)"
                    ));
                }
                if name == HostRuntime::NAME {
                    if profile != Profile::Dev {
                        return fail(format!(
                            "the unsandboxed host runtime is only fit for the dev profile, not {profile}"
                        ));
                    }
                    if !self.allow_unsandboxed_host {
                        return fail(
                            "the unsandboxed host runtime needs `allow_unsandboxed_host = true` in [runtimes]"
                                .into(),
                        );
                    }
                }
                if list.iter().flatten().take(i).any(|n| n == name) {
                    return fail(format!("{name:?} is listed twice"));
                }
            }
        }
        self.bubblewrap
            .validate()
            .map_err(|e| Fault::refused("runtimes.bubblewrap", e, &[]))?;
        if let Some(rootfs) = &mut self.oci.rootfs {
            *rootfs = relative_to(base, rootfs);
        }
        if let Some(docker) = &self.docker
            && (!docker.image.is_empty() || document.has("runtimes.docker.image"))
        {
            docker
                .validate()
                .map_err(|e| Fault::refused("runtimes.docker", e, &[]))?;
        }
        self.remote.check()?;
        if let Some(file) = &mut self.remote.key_file {
            *file = relative_to(base, file);
        }
        self.wasm
            .validate()
            .map_err(|e| Fault::refused("runtimes.wasm", e, &[("max_memory_bytes", "max_memory")]))
    }
}
