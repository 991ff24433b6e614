//! What hostile or broken descriptions must not achieve: a stack overflow
//! (import cycles), a panic (map entries without their fields), a failed
//! import (two services sharing a short name, a service listed twice), or
//! a configuration that silently drops what it was given. Descriptor sets
//! are written here; no server is contacted.

use std::path::Path;

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
    MethodDescriptorProto, ServiceDescriptorProto,
};
use toolexec::{ErrorCode, Secret};
use toolexec_grpc::{GrpcOptions, ImportOptions, Source};
use toolexec_testkit::TempDir;

fn field(
    name: &str,
    number: i32,
    r#type: Type,
    type_name: Option<&str>,
    label: Label,
) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(r#type as i32),
        type_name: type_name.map(str::to_owned),
        json_name: Some(name.into()),
        ..Default::default()
    }
}

fn message(name: &str, fields: Vec<FieldDescriptorProto>) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.into()),
        field: fields,
        ..Default::default()
    }
}

/// `package` with message `Msg` and service `Echo { Say(Msg) returns (Msg) }`.
fn echo_file(
    name: &str,
    package: &str,
    deps: &[&str],
    msg: DescriptorProto,
) -> FileDescriptorProto {
    FileDescriptorProto {
        name: Some(name.into()),
        package: Some(package.into()),
        syntax: Some("proto3".into()),
        dependency: deps.iter().map(|d| (*d).to_owned()).collect(),
        message_type: vec![msg],
        service: vec![ServiceDescriptorProto {
            name: Some("Echo".into()),
            method: vec![MethodDescriptorProto {
                name: Some("Say".into()),
                input_type: Some(format!(".{package}.Msg")),
                output_type: Some(format!(".{package}.Msg")),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn plain(package: &str) -> DescriptorProto {
    let _ = package;
    message(
        "Msg",
        vec![field("text", 1, Type::String, None, Label::Optional)],
    )
}

fn write_set(dir: &TempDir, name: &str, files: Vec<FileDescriptorProto>) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, FileDescriptorSet { file: files }.encode_to_vec()).unwrap();
    path
}

fn options(set: &Path) -> ImportOptions {
    // Never contacted: the description comes from the file.
    ImportOptions::new(
        "h",
        "http://127.0.0.1:9",
        Source::DescriptorSet(set.to_owned()),
    )
}

#[tokio::test]
async fn import_cycles_are_refused_not_followed() {
    let dir = TempDir::new("grpc-hostile-cycle");
    let set = write_set(
        &dir,
        "self.pb",
        vec![FileDescriptorProto {
            public_dependency: vec![0],
            ..echo_file("a.proto", "a", &["a.proto"], plain("a"))
        }],
    );
    let e = toolexec_grpc::import(options(&set)).await.unwrap_err();
    assert_eq!(e.field(), Some("descriptor_set"), "{e}");
    assert!(e.to_string().contains("cycle"), "{e}");
    let set = write_set(
        &dir,
        "pair.pb",
        vec![
            echo_file("a.proto", "a", &["b.proto"], plain("a")),
            FileDescriptorProto {
                name: Some("b.proto".into()),
                dependency: vec!["a.proto".into()],
                public_dependency: vec![0],
                ..Default::default()
            },
        ],
    );
    let e = toolexec_grpc::import(options(&set)).await.unwrap_err();
    assert!(e.to_string().contains("cycle"), "{e}");
}

#[tokio::test]
async fn broken_map_entries_skip_the_method() {
    let dir = TempDir::new("grpc-hostile-map");
    let entry = DescriptorProto {
        options: Some(MessageOptions {
            map_entry: Some(true),
            ..Default::default()
        }),
        ..message("CountsEntry", vec![])
    };
    let msg = DescriptorProto {
        nested_type: vec![entry],
        ..message(
            "Msg",
            vec![field(
                "counts",
                1,
                Type::Message,
                Some(".m.Msg.CountsEntry"),
                Label::Repeated,
            )],
        )
    };
    let set = write_set(&dir, "map.pb", vec![echo_file("m.proto", "m", &[], msg)]);
    match toolexec_grpc::import(options(&set)).await {
        Ok(import) => {
            assert!(import.tools.is_empty());
            assert_eq!(import.skipped.len(), 1, "{:?}", import.skipped);
            assert!(
                import.skipped[0].reason.contains("key or value"),
                "{:?}",
                import.skipped
            );
        }
        // prost-reflect may refuse the entry itself: also fine, as long as
        // it is an error and not a panic.
        Err(e) => assert_eq!(e.field(), Some("descriptor_set"), "{e}"),
    }
}

#[tokio::test]
async fn services_sharing_a_short_name_both_import() {
    let dir = TempDir::new("grpc-hostile-names");
    let set = write_set(
        &dir,
        "two.pb",
        vec![
            echo_file("a.proto", "a.v1", &[], plain("a")),
            echo_file("b.proto", "b.v2", &[], plain("b")),
        ],
    );
    let import = toolexec_grpc::import(options(&set)).await.unwrap();
    let ids: Vec<String> = import.tools.iter().map(|(t, _)| t.id.to_string()).collect();
    assert_eq!(ids, ["h:a_v1_echo_say", "h:b_v2_echo_say"]);
    let exec = toolexec::Exec::new(std::sync::Arc::new(toolexec::Catalog::new()));
    exec.catalog().register_many(import.tools(), false).unwrap();
}

#[tokio::test]
async fn options_that_cannot_hold_are_refused() {
    let check = |o: GrpcOptions, url: &str| o.check(url).unwrap_err();
    let e = check(
        GrpcOptions {
            timeout: std::time::Duration::MAX,
            ..GrpcOptions::default()
        },
        "http://h:1",
    );
    assert_eq!(e.field(), Some("timeout"), "{e}");
    let e = check(
        GrpcOptions {
            timeout: std::time::Duration::ZERO,
            ..GrpcOptions::default()
        },
        "http://h:1",
    );
    assert_eq!(e.field(), Some("timeout"), "{e}");
    let mut o = GrpcOptions::default();
    o.tls.ca_file = Some("ca.pem".into());
    assert_eq!(check(o, "http://h:1").field(), Some("url"));
    let mut o = GrpcOptions::default();
    o.metadata.insert("X-Key".into(), Secret::new("a"));
    o.metadata.insert("x-key".into(), Secret::new("b"));
    let e = check(o, "http://h:1");
    assert_eq!(e.code(), ErrorCode::InvalidRequest);
    assert!(e.to_string().contains("twice"), "{e}");
}
