//! Values the file writes as text or in several shapes: durations, sizes,
//! secrets and built-in groups.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toolexec::Secret;
use toolexec_builtins::Group;

use super::error::Fault;

/// A duration written as `"500ms"`, `"30s"`, `"2m"`.
pub(super) struct DurationText(pub Duration);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        toolexec::units::duration(d).map(DurationText)
    }
}

/// A size written as bytes (`1048576`) or text (`"64MiB"`).
pub(super) struct SizeText(pub usize);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        toolexec::units::size(d).map(SizeText)
    }
}

/// A secret: a literal string, `{ env = "NAME" }` or `{ file = "PATH" }`
/// (relative to the config file's directory). Resolved when the file is
/// read; the errors name the key, the variable or the file, never the value.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum SecretSource {
    Literal(String),
    Env { env: String },
    File { file: PathBuf },
}

impl SecretSource {
    /// The secret written at `key`.
    pub(super) fn resolve(&self, key: &str, base: &Path) -> Result<Secret, Fault> {
        match self {
            SecretSource::Literal(s) => Ok(Secret::new(s.clone())),
            SecretSource::Env { env } => std::env::var(env)
                .map(Secret::new)
                .map_err(|_| Fault::new(key, format!("environment variable {env} is not set"))),
            SecretSource::File { file } => Secret::from_private_file(&relative_to(base, file))
                .map_err(|e| Fault::new(key, e.to_string())),
        }
    }
}

/// `path` as written in the file: relative paths start at `base`, the
/// config file's directory.
pub(super) fn relative_to(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    }
}

/// `[builtins]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Builtins {
    /// `true` (all, the default), `false` (none) or a list of groups.
    enabled: Option<Enabled>,
}

impl Builtins {
    /// The groups to register.
    pub(super) fn groups(self) -> Vec<Group> {
        match self.enabled {
            None | Some(Enabled::All(true)) => Group::ALL.to_vec(),
            Some(Enabled::All(false)) => Vec::new(),
            Some(Enabled::Groups(g)) => g.into_iter().map(|g| g.0).collect(),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Enabled {
    All(bool),
    Groups(Vec<GroupName>),
}

struct GroupName(Group);

impl<'de> Deserialize<'de> for GroupName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<Group>().map(GroupName).map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown built-in group {s:?}; expected one of {}",
                Group::ALL
                    .iter()
                    .map(|g| g.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

/// A value written as text and read with its `FromStr`, the error being
/// that parser's message (for `#[serde(deserialize_with = "from_text")]`).
pub(super) fn from_text<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// Why a tool id or namespace is refused, without the error's code (the
/// file's error carries its own, `invalid_request`).
pub(super) fn id_problem(e: toolexec::Error) -> String {
    match e {
        toolexec::Error::InvalidToolId { reason, .. } => reason,
        other => other.to_body().message,
    }
}
