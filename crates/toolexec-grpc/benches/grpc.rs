//! The gRPC provider's cost over a direct call:
//!
//! - `call/direct_tonic` and `call/grpc_tool`: one unary call to the same
//!   tonic server (in this process, loopback, HTTP/2 without TLS), sent
//!   with a tonic client and generated-style prost messages, and through
//!   the tool (`run_tool`: input validation, JSON to a dynamic message,
//!   the concurrency slot, the call, the answer to JSON, output
//!   validation). The difference is the tool's overhead.
//! - `import/descriptor_set`: importing the service from its descriptor
//!   set and registering the tool.
//!
//! `cargo bench -p toolexec-grpc --bench grpc`

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use criterion::{Criterion, criterion_group, criterion_main};
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    MethodDescriptorProto, ServiceDescriptorProto,
};
use serde_json::json;
use tonic::codegen::{BoxFuture, Service};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use toolexec::Exec;
use toolexec_grpc::{ImportOptions, Source};

/// `bench.Item`, as generated code would declare it.
#[derive(Clone, PartialEq, prost::Message)]
struct Item {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(string, tag = "2")]
    name: String,
}

/// `bench.Bench/Get`: answers with the item it got, named.
#[derive(Clone)]
struct Bench;

impl tonic::server::NamedService for Bench {
    const NAME: &'static str = "bench.Bench";
}

struct Get;

impl tonic::server::UnaryService<Item> for Get {
    type Response = Item;
    type Future = std::future::Ready<Result<Response<Item>, Status>>;

    fn call(&mut self, request: Request<Item>) -> Self::Future {
        let item = request.into_inner();
        std::future::ready(Ok(Response::new(Item {
            id: item.id,
            name: "hammer".into(),
        })))
    }
}

impl Service<http::Request<tonic::body::Body>> for Bench {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Item, Item>::default());
            Ok(grpc.unary(Get, request).await)
        })
    }
}

/// The descriptor set of `bench.proto`.
fn descriptor_set() -> Vec<u8> {
    let field = |name: &str, number: i32, r#type: Type| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(r#type as i32),
        json_name: Some(name.into()),
        ..Default::default()
    };
    let file = FileDescriptorProto {
        name: Some("bench.proto".into()),
        package: Some("bench".into()),
        syntax: Some("proto3".into()),
        message_type: vec![DescriptorProto {
            name: Some("Item".into()),
            field: vec![field("id", 1, Type::Int64), field("name", 2, Type::String)],
            ..Default::default()
        }],
        service: vec![ServiceDescriptorProto {
            name: Some("Bench".into()),
            method: vec![MethodDescriptorProto {
                name: Some("Get".into()),
                input_type: Some(".bench.Item".into()),
                output_type: Some(".bench.Item".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    FileDescriptorSet { file: vec![file] }.encode_to_vec()
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let incoming = rt.block_on(async {
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
            .unwrap()
            .with_nodelay(Some(true))
    });
    let port = incoming.local_addr().unwrap().port();
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(Bench)
            .serve_with_incoming(incoming)
            .await
    });
    let url = format!("http://127.0.0.1:{port}");
    let dir = std::env::temp_dir().join(format!("toolexec-grpc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let set = dir.join("bench.pb");
    std::fs::write(&set, descriptor_set()).unwrap();
    let options = ImportOptions::new("bench", &url, Source::DescriptorSet(set.clone()));

    let exec = rt.block_on(async {
        let import = toolexec_grpc::import(options.clone()).await.unwrap();
        let exec = Exec::new(Arc::new(toolexec::Catalog::new()));
        exec.catalog().register_many(import.tools(), false).unwrap();
        exec
    });
    let channel = rt.block_on(async {
        tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap()
    });
    let path = http::uri::PathAndQuery::from_static("/bench.Bench/Get");

    let mut group = c.benchmark_group("call");
    group.bench_function("direct_tonic", |b| {
        b.to_async(&rt).iter(|| async {
            let mut client = tonic::client::Grpc::new(channel.clone());
            client.ready().await.unwrap();
            let item = Item {
                id: 7,
                name: "hammer".into(),
            };
            let answer: Response<Item> = client
                .unary(Request::new(item), path.clone(), ProstCodec::default())
                .await
                .unwrap();
            assert_eq!(answer.get_ref().id, 7);
        })
    });
    group.bench_function("grpc_tool", |b| {
        b.to_async(&rt).iter(|| async {
            let out = exec
                .run_tool("bench:bench_get", json!({"id": 7, "name": "hammer"}))
                .await
                .unwrap();
            assert_eq!(out.value["id"], "7");
        })
    });
    group.finish();

    c.bench_function("import/descriptor_set", |b| {
        b.to_async(&rt).iter(|| async {
            let import = toolexec_grpc::import(options.clone()).await.unwrap();
            let exec = Exec::new(Arc::new(toolexec::Catalog::new()));
            exec.catalog().register_many(import.tools(), false).unwrap();
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(grpc, benches);
criterion_main!(grpc);
