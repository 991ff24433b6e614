//! # toolexec-docker
//!
//! The Docker runtime for toolexec: command units run in locked-down
//! containers through the Docker Engine API ([bollard]), with the tool
//! channel on a bind-mounted Unix socket. See [`DockerRuntime`].
//!
//! Place in the workspace: one runtime of the contract (`toolexec-runtime`),
//! built on the shared plumbing (`toolexec-sandbox`); step 5 of
//! ARCHITECTURE.md's call flow.
//!
//! ```
//! use toolexec_docker::{DockerConfig, DockerRuntime};
//! use toolexec_runtime::{Profile, Runtime};
//!
//! let runtime = DockerRuntime::new(DockerConfig::new("toolexec-test/busybox:1")).unwrap();
//! assert_eq!(runtime.name(), "docker");
//! assert_eq!(runtime.max_profile(), Profile::Standard);
//! // Bad configuration is refused with the field.
//! let err = DockerRuntime::new(DockerConfig { user: "0:0".into(), ..DockerConfig::new("img") });
//! assert_eq!(err.unwrap_err().field(), Some("docker.user"));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cgroup;
mod channel;
mod cleanup;
mod config;
mod runtime;
mod spec;
mod sweep;

pub use config::DockerConfig;
pub use runtime::{DockerRuntime, MIN_API_VERSION};
pub use spec::{CONTAINER_CHANNEL_SOCKET, RUN_LABEL};
pub use sweep::{OWNER_LABEL, RUNTIME_LABEL, owner_id};
