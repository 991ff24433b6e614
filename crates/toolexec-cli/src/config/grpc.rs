//! `[[grpc]]`: gRPC services as tools, as `toolexec-grpc`'s
//! [`ImportOptions`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolexec::Limits;
use toolexec_grpc::{GrpcOptions, ImportOptions, Source, TlsOptions};

use super::error::Fault;
use super::values::{DurationText, SecretSource, SizeText, id_problem, relative_to};

/// One `[[grpc]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrpcTable {
    name: String,
    url: String,
    /// A descriptor set file; without one, the server's reflection.
    descriptor_set: Option<PathBuf>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    timeout: Option<DurationText>,
    connect_timeout: Option<DurationText>,
    max_concurrency: Option<usize>,
    max_message_bytes: Option<SizeText>,
    max_stream_messages: Option<usize>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    #[serde(default)]
    metadata: BTreeMap<String, SecretSource>,
}

/// The services of the file; names are namespaces apart from the
/// built-ins, the servers, the APIs (`taken`) and each other.
pub(super) fn resolve(
    tables: Vec<GrpcTable>,
    base: &Path,
    taken: &[String],
    limits: &Limits,
) -> Result<Vec<ImportOptions>, Fault> {
    let mut out: Vec<ImportOptions> = Vec::with_capacity(tables.len());
    for (i, t) in tables.into_iter().enumerate() {
        let key = |k: &str| format!("grpc[{i}].{k}");
        if let Err(e) = toolexec::ToolIdRef::parse(&format!("{}:x", t.name)) {
            return Err(Fault::new(
                key("name"),
                format!("not a valid namespace: {}", id_problem(e)),
            ));
        }
        if taken.contains(&t.name) || out.iter().any(|o| o.name == t.name) {
            return Err(Fault::new(
                key("name"),
                format!("namespace {:?} is taken", t.name),
            ));
        }
        let defaults = GrpcOptions::default();
        let metadata = t
            .metadata
            .iter()
            .map(|(name, src)| {
                Ok((
                    name.clone(),
                    src.resolve(&key(&format!("metadata.{name}")), base)?,
                ))
            })
            .collect::<Result<_, Fault>>()?;
        let options = GrpcOptions {
            timeout: t.timeout.map_or(limits.default_timeout, |d| d.0),
            connect_timeout: t.connect_timeout.map_or(defaults.connect_timeout, |d| d.0),
            max_concurrency: t.max_concurrency.unwrap_or(defaults.max_concurrency),
            max_message_bytes: t
                .max_message_bytes
                .map_or(defaults.max_message_bytes, |s| s.0),
            max_stream_messages: t
                .max_stream_messages
                .unwrap_or(defaults.max_stream_messages),
            tls: TlsOptions {
                ca_file: t.ca_file.map(|p| relative_to(base, &p)),
                client_cert: t.client_cert.map(|p| relative_to(base, &p)),
                client_key: t.client_key.map(|p| relative_to(base, &p)),
            },
            metadata,
        };
        options.check(&t.url).map_err(|e| {
            let (field, message) = e.into_field_message("url");
            Fault::new(key(field.trim_start_matches("tls.")), message)
        })?;
        let source = match t.descriptor_set {
            Some(path) => Source::DescriptorSet(relative_to(base, &path)),
            None => Source::Reflection,
        };
        out.push(ImportOptions {
            name: t.name,
            url: t.url,
            source,
            include: t.include,
            exclude: t.exclude,
            options,
        });
    }
    Ok(out)
}
