//! What a server's descriptors and answers must satisfy before toolexec
//! trusts them: prost-reflect assumes well-formed input in places (an
//! import cycle recurses without end, a map entry without its fields
//! panics, nested `Any`s are decoded with a fresh depth limit each).

use std::collections::{BTreeMap, HashSet};

use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, ReflectMessage, Value};
use prost_types::FileDescriptorProto;

/// Most levels of `google.protobuf.Any` inside one another in an answer.
pub(crate) const MAX_ANY_DEPTH: usize = 32;
/// Most message types a method's request and answer may reach.
const MAX_MESSAGES: usize = 5_000;

/// Refuses files whose imports form a cycle (a file importing itself
/// included), which prost-reflect would follow forever. Imports of files
/// outside `files` (already in the pool) are not followed.
pub(crate) fn acyclic(files: &[FileDescriptorProto]) -> Result<(), String> {
    let names: BTreeMap<&str, &FileDescriptorProto> = files.iter().map(|f| (f.name(), f)).collect();
    // Kahn's algorithm over the files of this batch: what is left has a cycle.
    let mut waiting: BTreeMap<&str, usize> = BTreeMap::new();
    let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (&name, file) in &names {
        let deps: HashSet<&str> = file
            .dependency
            .iter()
            .map(String::as_str)
            .filter(|d| names.contains_key(d))
            .collect();
        waiting.insert(name, deps.len());
        for d in deps {
            users.entry(d).or_default().push(name);
        }
    }
    let mut ready: Vec<&str> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(k, _)| *k)
        .collect();
    let mut done = 0;
    while let Some(name) = ready.pop() {
        done += 1;
        for user in users.get(name).into_iter().flatten() {
            let n = waiting.get_mut(user).expect("every user is a file");
            *n -= 1;
            if *n == 0 {
                ready.push(user);
            }
        }
    }
    if done == names.len() {
        return Ok(());
    }
    let cyclic: Vec<&str> = waiting
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, _)| *k)
        .take(5)
        .collect();
    Err(format!("the imports of {} form a cycle", cyclic.join(", ")))
}

/// Checks every message type `message` reaches: map entries carry a key
/// of a map-key type and a value, and there are at most
/// [`MAX_MESSAGES`] types.
pub(crate) fn messages(message: &MessageDescriptor) -> Result<(), String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut todo = vec![message.clone()];
    while let Some(m) = todo.pop() {
        if !seen.insert(m.full_name().to_owned()) {
            continue;
        }
        if seen.len() > MAX_MESSAGES {
            return Err(format!("it reaches more than {MAX_MESSAGES} message types"));
        }
        for field in m.fields() {
            let Kind::Message(inner) = field.kind() else {
                continue;
            };
            if field.is_map() {
                let (Some(key), Some(value)) = (inner.get_field(1), inner.get_field(2)) else {
                    return Err(format!(
                        "map field {} has an entry without its key or value",
                        field.full_name()
                    ));
                };
                let key_ok = matches!(
                    key.kind(),
                    Kind::Int32
                        | Kind::Int64
                        | Kind::Uint32
                        | Kind::Uint64
                        | Kind::Sint32
                        | Kind::Sint64
                        | Kind::Fixed32
                        | Kind::Fixed64
                        | Kind::Sfixed32
                        | Kind::Sfixed64
                        | Kind::Bool
                        | Kind::String
                );
                if !key_ok {
                    return Err(format!(
                        "map field {} has a key of a type maps cannot have",
                        field.full_name()
                    ));
                }
                if let Kind::Message(v) = value.kind() {
                    todo.push(v);
                }
            } else {
                todo.push(inner);
            }
        }
    }
    Ok(())
}

/// Refuses an answer with `google.protobuf.Any`s nested deeper than
/// [`MAX_ANY_DEPTH`] (each is decoded again to print it as JSON, with a
/// fresh recursion limit); walked without recursion.
pub(crate) fn any_depth(message: &DynamicMessage) -> Result<(), String> {
    let mut todo: Vec<(DynamicMessage, usize)> = vec![(message.clone(), 0)];
    while let Some((m, depth)) = todo.pop() {
        let push = |v: &Value, todo: &mut Vec<(DynamicMessage, usize)>| {
            if let Value::Message(inner) = v {
                todo.push((inner.clone(), depth));
            }
        };
        if m.descriptor().full_name() == "google.protobuf.Any" {
            if depth >= MAX_ANY_DEPTH {
                return Err(format!(
                    "google.protobuf.Any nested deeper than {MAX_ANY_DEPTH}"
                ));
            }
            let url = m.get_field_by_name("type_url");
            let bytes = m.get_field_by_name("value");
            let (Some(Value::String(url)), Some(Value::Bytes(bytes))) =
                (url.as_deref(), bytes.as_deref())
            else {
                continue;
            };
            let name = url.rsplit('/').next().unwrap_or_default();
            if let Some(inner) = m.descriptor().parent_pool().get_message_by_name(name)
                && let Ok(inner) = DynamicMessage::decode(inner, bytes.clone())
            {
                todo.push((inner, depth + 1));
            }
            continue;
        }
        for (_, value) in m.fields() {
            match value {
                Value::List(items) => items.iter().for_each(|v| push(v, &mut todo)),
                Value::Map(entries) => entries.values().for_each(|v| push(v, &mut todo)),
                other => push(other, &mut todo),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, deps: &[&str]) -> FileDescriptorProto {
        FileDescriptorProto {
            name: Some(name.into()),
            dependency: deps.iter().map(|d| (*d).to_owned()).collect(),
            ..Default::default()
        }
    }

    /// 3,000 nested `Any`s (77 KB) would overflow the stack when printed
    /// as JSON; past [`MAX_ANY_DEPTH`] they are refused, walked without
    /// recursion (on a small stack here).
    #[test]
    fn deeply_nested_any_is_refused() {
        use prost::Message as _;
        let nest = |levels: usize| {
            let mut bytes = prost_types::Any {
                type_url: "type.googleapis.com/google.protobuf.Empty".into(),
                value: Vec::new(),
            }
            .encode_to_vec();
            for _ in 0..levels {
                bytes = prost_types::Any {
                    type_url: "type.googleapis.com/google.protobuf.Any".into(),
                    value: bytes,
                }
                .encode_to_vec();
            }
            let any = prost_reflect::DescriptorPool::global()
                .get_message_by_name("google.protobuf.Any")
                .unwrap();
            DynamicMessage::decode(any, bytes.as_slice()).unwrap()
        };
        let shallow = nest(5);
        let deep = nest(3_000);
        let (ok, refused) = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || (any_depth(&shallow), any_depth(&deep)))
            .unwrap()
            .join()
            .unwrap();
        assert!(ok.is_ok());
        assert!(refused.unwrap_err().contains("nested deeper"));
    }

    #[test]
    fn import_cycles_are_refused() {
        assert!(acyclic(&[file("a", &["b"]), file("b", &["google/x.proto"])]).is_ok());
        assert!(acyclic(&[file("a", &["a"])]).unwrap_err().contains("cycle"));
        assert!(acyclic(&[file("a", &["b"]), file("b", &["c"]), file("c", &["a"])]).is_err());
    }
}
