//! Security profiles and the profile-to-runtime mapping.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How strongly a unit of work is isolated from the host.
///
/// The profile says *what is required*; which runtime satisfies it is
/// configured with [`ProfileMap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// For development: in-process engines and, only with an explicit
    /// opt-in, unsandboxed host processes.
    Dev,
    /// Production default: namespaces sandboxes, WASM, in-process engines
    /// with enforced limits.
    Standard,
    /// Untrusted code: kernel-level isolation only (namespaces sandbox with
    /// seccomp and Landlock, gVisor, WASM); nothing runs in the host process.
    Hardened,
}

impl Profile {
    /// All profiles, weakest first.
    pub const ALL: [Profile; 3] = [Profile::Dev, Profile::Standard, Profile::Hardened];

    /// The stable lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Profile::Dev => "dev",
            Profile::Standard => "standard",
            Profile::Hardened => "hardened",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error of [`Profile::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown security profile {0:?} (expected dev, standard or hardened)")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dev" => Ok(Profile::Dev),
            "standard" => Ok(Profile::Standard),
            "hardened" => Ok(Profile::Hardened),
            other => Err(UnknownProfile(other.to_owned())),
        }
    }
}

/// Which runtimes may serve each profile, in order of preference. The first
/// *available* runtime in the list that supports the unit's kind wins.
///
/// ```
/// use toolexec_runtime::{Profile, ProfileMap};
/// let map = ProfileMap::default();
/// assert_eq!(map.candidates(Profile::Hardened), ["bubblewrap", "runsc", "wasm"]);
/// assert!(!map.candidates(Profile::Dev).contains(&"host".to_string()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileMap {
    /// Runtimes for [`Profile::Dev`].
    pub dev: Vec<String>,
    /// Runtimes for [`Profile::Standard`].
    pub standard: Vec<String>,
    /// Runtimes for [`Profile::Hardened`].
    pub hardened: Vec<String>,
}

impl Default for ProfileMap {
    /// `dev`: in-process and namespaces; `standard`: namespaces, runc, WASM,
    /// in-process; `hardened`: namespaces, gVisor, WASM. The unsafe `host`
    /// runtime is in no list: add it to `dev` explicitly (and construct the
    /// runtime with its opt-in) to use it.
    fn default() -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        ProfileMap {
            dev: v(&["in_process", "bubblewrap", "wasm"]),
            standard: v(&["bubblewrap", "runc", "wasm", "in_process"]),
            hardened: v(&["bubblewrap", "runsc", "wasm"]),
        }
    }
}

impl ProfileMap {
    /// The ordered runtime names for `profile`.
    pub fn candidates(&self, profile: Profile) -> &[String] {
        match profile {
            Profile::Dev => &self.dev,
            Profile::Standard => &self.standard,
            Profile::Hardened => &self.hardened,
        }
    }

    /// Mutable access to the list for `profile`.
    pub fn candidates_mut(&mut self, profile: Profile) -> &mut Vec<String> {
        match profile {
            Profile::Dev => &mut self.dev,
            Profile::Standard => &mut self.standard,
            Profile::Hardened => &mut self.hardened,
        }
    }
}
