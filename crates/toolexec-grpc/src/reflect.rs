//! Where the services' descriptors come from: the server's reflection
//! service, or a descriptor set file.

use std::collections::BTreeMap;
use std::path::Path;

use http::uri::PathAndQuery;
use prost::Message as _;
use prost_reflect::DescriptorPool;
use prost_types::{FileDescriptorProto, FileDescriptorSet};
use tokio::time::Instant;
use tonic::Code;
use tonic_prost::ProstCodec;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use toolexec::Error;

use crate::check;
use crate::connect::Service;
use crate::status::{code_name, excerpt, status_error};

/// Most files a server may describe; a server that keeps naming new ones
/// is refused past it.
const MAX_FILES: usize = 10_000;
/// Most bytes of file descriptors a server may send in all.
const MAX_DESCRIPTOR_BYTES: usize = 64 << 20;

/// The reflection services, newest first: grpcio serves only `v1alpha`,
/// whose messages are the same on the wire.
const REFLECTION: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// What the server's reflection service describes: the names of its
/// services (the reflection service itself left out) and a pool with the
/// files that define them and everything they import.
pub(crate) async fn discover(service: &Service) -> Result<(Vec<String>, DescriptorPool), Error> {
    let deadline = Instant::now() + service.options.timeout;
    let mut asker = Asker {
        service,
        path: None,
        deadline,
        received: 0,
    };
    let names = match asker
        .ask(MessageRequest::ListServices(String::new()))
        .await?
    {
        MessageResponse::ListServicesResponse(list) => list
            .service
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !n.starts_with("grpc.reflection."))
            .collect::<Vec<_>>(),
        other => return Err(asker.unexpected("ListServices", &other)),
    };
    let mut pool = DescriptorPool::global();
    let mut files: BTreeMap<String, FileDescriptorProto> = BTreeMap::new();
    for name in &names {
        let answer = asker
            .ask(MessageRequest::FileContainingSymbol(name.clone()))
            .await?;
        asker.collect(answer, &mut files, &pool)?;
    }
    // The imports the server did not send with the files that need them.
    loop {
        let missing: Vec<String> = files
            .values()
            .flat_map(|f| f.dependency.iter())
            .filter(|d| !files.contains_key(*d) && pool.get_file_by_name(d).is_none())
            .cloned()
            .collect::<std::collections::BTreeSet<String>>()
            .into_iter()
            .collect();
        if missing.is_empty() {
            break;
        }
        for name in missing {
            let answer = asker
                .ask(MessageRequest::FileByFilename(name.clone()))
                .await?;
            asker.collect(answer, &mut files, &pool)?;
            if !files.contains_key(&name) {
                return Err(Error::backend_unavailable(
                    service.name(),
                    format!("server reflection did not describe {name}, which its services import"),
                ));
            }
        }
    }
    let files: Vec<FileDescriptorProto> = files.into_values().collect();
    check::acyclic(&files).map_err(|why| {
        Error::backend_unavailable(service.name(), format!("server reflection: {why}"))
    })?;
    pool.add_file_descriptor_protos(files).map_err(|e| {
        Error::backend_unavailable(
            service.name(),
            format!("the descriptors from server reflection do not fit together: {e}"),
        )
    })?;
    Ok((names, pool))
}

/// The services of a descriptor set file (`protoc --include_imports
/// --descriptor_set_out=FILE`), and a pool of its files.
pub(crate) fn from_file(path: &Path) -> Result<(Vec<String>, DescriptorPool), Error> {
    let field = "descriptor_set";
    let bytes = std::fs::read(path).map_err(|e| {
        Error::invalid_request(field, format!("cannot read {}: {e}", path.display()))
    })?;
    let set = FileDescriptorSet::decode(bytes.as_slice()).map_err(|e| {
        Error::invalid_request(
            field,
            format!("{} is not a protobuf descriptor set: {e}", path.display()),
        )
    })?;
    let mut pool = DescriptorPool::global();
    let services: Vec<String> = set
        .file
        .iter()
        .flat_map(|f| {
            let package = f.package().to_owned();
            f.service.iter().map(move |s| match package.as_str() {
                "" => s.name().to_owned(),
                p => format!("{p}.{}", s.name()),
            })
        })
        .collect();
    check::acyclic(&set.file)
        .map_err(|why| Error::invalid_request(field, format!("{}: {why}", path.display())))?;
    pool.add_file_descriptor_protos(set.file).map_err(|e| {
        Error::invalid_request(
            field,
            format!(
                "{}: {e} (build it with protoc --include_imports)",
                path.display()
            ),
        )
    })?;
    Ok((services, pool))
}

/// Asks the reflection service one question per stream, on whichever
/// version the server answers.
struct Asker<'a> {
    service: &'a Service,
    /// The version that answered, once one has.
    path: Option<&'static str>,
    deadline: Instant,
    /// Bytes of file descriptors received so far.
    received: usize,
}

impl Asker<'_> {
    async fn ask(&mut self, request: MessageRequest) -> Result<MessageResponse, Error> {
        let candidates = match self.path {
            Some(p) => vec![p],
            None => REFLECTION.to_vec(),
        };
        let mut last = None;
        for path in candidates {
            match self.ask_at(path, request.clone()).await {
                Ok(answer) => {
                    self.path = Some(path);
                    return Ok(answer);
                }
                Err(status) if status.code() == Code::Unimplemented && self.path.is_none() => {
                    last = Some(status);
                }
                Err(status) => return Err(self.refused(&status)),
            }
        }
        let status = last.unwrap_or_else(|| tonic::Status::unimplemented(""));
        Err(Error::backend_unavailable(
            self.service.name(),
            format!(
                "the server does not offer server reflection ({}: {}); give a descriptor set instead",
                code_name(status.code()),
                excerpt(status.message())
            ),
        ))
    }

    async fn ask_at(
        &self,
        path: &'static str,
        request: MessageRequest,
    ) -> Result<MessageResponse, tonic::Status> {
        let message = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        let work = async {
            let mut client = self.service.client();
            client
                .ready()
                .await
                .map_err(|e| tonic::Status::from_error(e.into()))?;
            let codec = ProstCodec::<ServerReflectionRequest, ServerReflectionResponse>::default();
            let request = self.service.request(futures::stream::iter([message]));
            let mut answers = client
                .streaming(request, PathAndQuery::from_static(path), codec)
                .await?
                .into_inner();
            let answer = answers
                .message()
                .await?
                .and_then(|a| a.message_response)
                .ok_or_else(|| tonic::Status::internal("the reflection service sent no answer"))?;
            match answer {
                MessageResponse::ErrorResponse(e) => Err(tonic::Status::new(
                    Code::from(e.error_code),
                    e.error_message,
                )),
                answer => Ok(answer),
            }
        };
        tokio::time::timeout_at(self.deadline, work)
            .await
            .unwrap_or_else(|_| {
                Err(tonic::Status::deadline_exceeded(
                    "server reflection did not finish within the timeout",
                ))
            })
    }

    /// Adds the files of a `FileDescriptorResponse` that are new.
    fn collect(
        &mut self,
        answer: MessageResponse,
        files: &mut BTreeMap<String, FileDescriptorProto>,
        pool: &DescriptorPool,
    ) -> Result<(), Error> {
        let MessageResponse::FileDescriptorResponse(response) = answer else {
            return Err(self.unexpected("a file request", &answer));
        };
        for bytes in response.file_descriptor_proto {
            self.received = self.received.saturating_add(bytes.len());
            if self.received > MAX_DESCRIPTOR_BYTES {
                return Err(Error::backend_unavailable(
                    self.service.name(),
                    format!(
                        "server reflection sent more than {MAX_DESCRIPTOR_BYTES} bytes of descriptors"
                    ),
                ));
            }
            let file = FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| {
                Error::backend_unavailable(
                    self.service.name(),
                    format!("server reflection sent a file descriptor that does not decode: {e}"),
                )
            })?;
            let name = file.name().to_owned();
            if pool.get_file_by_name(&name).is_none() && !files.contains_key(&name) {
                if files.len() >= MAX_FILES {
                    return Err(Error::backend_unavailable(
                        self.service.name(),
                        format!("server reflection described more than {MAX_FILES} files"),
                    ));
                }
                files.insert(name, file);
            }
        }
        Ok(())
    }

    fn refused(&self, status: &tonic::Status) -> Error {
        let e = status_error(self.service, "server reflection", status);
        match e.code() {
            toolexec::ErrorCode::BackendUnavailable => e,
            _ => Error::backend_unavailable(
                self.service.name(),
                format!(
                    "server reflection failed: {}: {}",
                    code_name(status.code()),
                    excerpt(status.message())
                ),
            ),
        }
    }

    fn unexpected(&self, question: &str, answer: &MessageResponse) -> Error {
        let kind = match answer {
            MessageResponse::FileDescriptorResponse(_) => "files",
            MessageResponse::AllExtensionNumbersResponse(_) => "extension numbers",
            MessageResponse::ListServicesResponse(_) => "a service list",
            MessageResponse::ErrorResponse(_) => "an error",
        };
        Error::backend_unavailable(
            self.service.name(),
            format!("server reflection answered {question} with {kind}"),
        )
    }
}
