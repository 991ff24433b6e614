//! Errors setting up a container run.

use std::path::Path;

use serde_json::json;
use toolexec::{ErrorBody, ErrorCode};

/// Why a run could not be set up. Each maps to a stable [`ErrorCode`] and
/// names the failing field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    /// The request asks for something this runtime refuses (a field of
    /// the unit or the limits).
    #[error("invalid_request: {field}: {message}")]
    Invalid {
        /// The field (`unit.argv`, `limits.network`, ...).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The root filesystem is unusable.
    #[error("backend_unavailable: rootfs {path}: {message}")]
    Rootfs {
        /// The path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The runtime is not configured for the request (e.g. a script unit
    /// without a script worker).
    #[error("backend_unavailable: {field}: {message}")]
    NotConfigured {
        /// The missing setting (`runtime.script_worker`).
        field: String,
        /// What is missing.
        message: String,
    },
    /// The configuration would weaken the sandbox (a unit user that is
    /// root on the host); the runtime refuses to run.
    #[error("backend_unavailable: {field}: {message}")]
    Unsafe {
        /// The setting (`runtime.user`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A directory the runtime keeps private (bundles, state, rootfs
    /// cache, channel sockets) is not: another user owns it or a
    /// directory above it, it is a symlink, or others can write to it.
    /// Whoever controls it controls the container's spec and hooks.
    #[error("backend_unavailable: {field}: {path}: {message}")]
    UnsafeDir {
        /// The setting (`runtime.work_dir`, `runtime.state_dir`,
        /// `runtime.cache_dir`, `runtime.channel_dir`).
        field: String,
        /// The offending path (the directory or one of its ancestors).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The host could not prepare the run (bundle, cgroups, runtime binary).
    #[error("backend_unavailable: {0}")]
    Setup(String),
}

impl OciError {
    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> Self {
        OciError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn not_configured(field: &str, message: impl Into<String>) -> Self {
        OciError::NotConfigured {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn rootfs(path: &Path, message: impl Into<String>) -> Self {
        OciError::Rootfs {
            path: path.display().to_string(),
            message: message.into(),
        }
    }

    /// Makes `dir` private (see [`toolexec_sandbox::channel_socket::private_dir`]),
    /// naming `field` if it cannot be.
    pub(crate) fn private_dir(field: &str, dir: &Path) -> Result<(), Self> {
        toolexec_sandbox::channel_socket::private_dir(dir).map_err(|e| OciError::UnsafeDir {
            field: field.into(),
            path: e.path.display().to_string(),
            message: e.message,
        })
    }

    /// A request the contract's own checks refused ([`CommandUnit::check`],
    /// [`RuntimeLimits::validate`]), with its field.
    ///
    /// [`CommandUnit::check`]: toolexec_runtime::CommandUnit::check
    /// [`RuntimeLimits::validate`]: toolexec_runtime::RuntimeLimits::validate
    pub(crate) fn refused(error: toolexec::Error) -> Self {
        let (field, message) = error.into_field_message("request");
        OciError::Invalid { field, message }
    }

    pub(crate) fn setup(message: impl Into<String>) -> Self {
        OciError::Setup(message.into())
    }

    /// The error as a run reports it.
    pub fn to_body(&self) -> ErrorBody {
        let (code, field) = match self {
            OciError::Invalid { field, .. } => (ErrorCode::InvalidRequest, field.as_str()),
            OciError::Rootfs { .. } => (ErrorCode::BackendUnavailable, "rootfs"),
            OciError::NotConfigured { field, .. } => {
                (ErrorCode::BackendUnavailable, field.as_str())
            }
            OciError::Unsafe { field, .. } | OciError::UnsafeDir { field, .. } => {
                (ErrorCode::BackendUnavailable, field.as_str())
            }
            OciError::Setup(_) => (ErrorCode::BackendUnavailable, "runtime"),
        };
        let details = match self {
            OciError::UnsafeDir { path, .. } => json!({"field": field, "path": path}),
            _ => json!({"field": field}),
        };
        ErrorBody {
            code,
            message: self.to_string(),
            details: Some(details),
        }
    }
}
