//! JSON Schemas of protobuf messages under the proto3 JSON mapping: field
//! names in lowerCamelCase (`json_name`), 64-bit integers as strings
//! (numbers accepted on input), `bytes` as base64, enums by name (in
//! `$defs`, once however many fields use them), the
//! well-known types in their JSON forms (a `Timestamp` is an RFC 3339
//! string, a `Duration` `"1.5s"`, a `Struct` any object, wrappers nullable
//! scalars). Nested messages become `$defs` keyed by their full name, so
//! recursive messages stay finite.

use std::collections::BTreeMap;

use prost_reflect::{Cardinality, FieldDescriptor, Kind, MessageDescriptor, OneofDescriptor};
use prost_types::FileDescriptorProto;
use serde_json::{Map, Value, json};

/// Which side of a call a schema describes: inputs are strict (unknown
/// fields refused, proto2 `required` fields and `oneof` exclusivity
/// checked); outputs describe what the server may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The request message: the tool's input schema.
    Input,
    /// The answer message: the tool's output schema.
    Output,
}

/// The JSON form of a well-known type that is not a JSON object, if
/// `full_name` is one: such a message cannot be a tool's arguments.
pub fn non_object_well_known(full_name: &str) -> bool {
    well_known(full_name, Direction::Input).is_some_and(|s| s.get("type") != Some(&json!("object")))
}

/// The schema of `message` (inlined at the root, with `$defs` for the
/// messages it uses).
///
/// ```
/// let pool = prost_reflect::DescriptorPool::global();
/// let ts = pool.get_message_by_name("google.protobuf.Api").unwrap();
/// let schema = toolexec_grpc::schema::message_schema(&ts, toolexec_grpc::schema::Direction::Input);
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["properties"]["sourceContext"]["$ref"], "#/$defs/google.protobuf.SourceContext");
/// ```
pub fn message_schema(message: &MessageDescriptor, direction: Direction) -> Value {
    // A well-known type at the root has its JSON form (`Struct`: any
    // object), not its fields.
    if let Some(schema) = well_known(message.full_name(), direction) {
        return schema;
    }
    let mut builder = Builder {
        direction,
        defs: BTreeMap::new(),
        pending: Vec::new(),
    };
    let mut root = builder.object(message);
    // Definitions are built from a work list, not by recursion: a chain of
    // thousands of nested message types cannot exhaust the stack.
    while let Some(next) = builder.pending.pop() {
        let def = Value::Object(builder.object(&next));
        builder.defs.insert(next.full_name().to_owned(), def);
    }
    if !builder.defs.is_empty() {
        let defs: Map<String, Value> = builder.defs.into_iter().collect();
        root.insert("$defs".into(), Value::Object(defs));
    }
    Value::Object(root)
}

/// The leading comment of the element at `path` in `file`, when the
/// descriptor carries source info (a descriptor set built with
/// `--include_source_info`; reflection usually sends none).
pub fn comment(file: &FileDescriptorProto, path: &[i32]) -> Option<String> {
    let info = file.source_code_info.as_ref()?;
    let location = info.location.iter().find(|l| l.path == path)?;
    let text = location.leading_comments.as_deref()?.trim();
    (!text.is_empty()).then(|| text.lines().map(str::trim).collect::<Vec<_>>().join("\n"))
}

struct Builder {
    direction: Direction,
    /// Every message met by full name; `Null` until built.
    defs: BTreeMap<String, Value>,
    /// Messages met and not built yet.
    pending: Vec<MessageDescriptor>,
}

impl Builder {
    /// The object schema of `message`'s fields.
    fn object(&mut self, message: &MessageDescriptor) -> Map<String, Value> {
        let input = self.direction == Direction::Input;
        let file = message.parent_file_descriptor_proto();
        let mut properties = Map::new();
        let mut required = Vec::new();
        for field in message.fields() {
            let mut schema = self.field(&field);
            let mut notes = comment(file, field.path()).unwrap_or_default();
            if let Some(oneof) = real_oneof(&field) {
                if !notes.is_empty() {
                    notes.push(' ');
                }
                notes.push_str(&format!("(one of `{}`: set at most one)", oneof.name()));
            }
            if !notes.is_empty()
                && let Some(obj) = schema.as_object_mut()
            {
                obj.insert("description".into(), Value::String(notes));
            }
            if input && field.cardinality() == Cardinality::Required {
                required.push(Value::String(field.json_name().to_owned()));
            }
            properties.insert(field.json_name().to_owned(), schema);
        }
        let mut out = Map::new();
        out.insert("type".into(), "object".into());
        if let Some(text) = comment(file, message.path()) {
            out.insert("description".into(), Value::String(text));
        }
        out.insert("properties".into(), Value::Object(properties));
        if input {
            out.insert("additionalProperties".into(), false.into());
            if !required.is_empty() {
                out.insert("required".into(), Value::Array(required));
            }
            let exclusive: Vec<Value> = message
                .oneofs()
                .filter(|o| !o.is_synthetic())
                .filter_map(|o| at_most_one(&o))
                .collect();
            if !exclusive.is_empty() {
                out.insert("allOf".into(), Value::Array(exclusive));
            }
        }
        out
    }

    fn field(&mut self, field: &FieldDescriptor) -> Value {
        if field.is_map() {
            let Kind::Message(entry) = field.kind() else {
                return json!({"type": "object"});
            };
            let value = self.kind(&entry.map_entry_value_field().kind());
            return json!({"type": "object", "additionalProperties": value});
        }
        let item = self.kind(&field.kind());
        if field.is_list() {
            json!({"type": "array", "items": item})
        } else {
            item
        }
    }

    fn kind(&mut self, kind: &Kind) -> Value {
        let input = self.direction == Direction::Input;
        match kind {
            Kind::Double | Kind::Float => float(),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
                json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX})
            }
            Kind::Uint32 | Kind::Fixed32 => {
                json!({"type": "integer", "minimum": 0, "maximum": u32::MAX})
            }
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => int64(input, true),
            Kind::Uint64 | Kind::Fixed64 => int64(input, false),
            Kind::Bool => json!({"type": "boolean"}),
            Kind::String => json!({"type": "string"}),
            Kind::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
            Kind::Enum(e) if e.full_name() == "google.protobuf.NullValue" => {
                json!({"type": "null"})
            }
            Kind::Enum(e) => {
                // Once, in `$defs`: a large enum used by many fields is not
                // copied into each.
                let name = e.full_name().to_owned();
                if !self.defs.contains_key(&name) {
                    let names: Vec<Value> = e.values().map(|v| v.name().into()).collect();
                    let def = if input {
                        let numbers = e.values().map(|v| Value::from(v.number()));
                        json!({"enum": names.into_iter().chain(numbers).collect::<Vec<_>>()})
                    } else {
                        json!({"anyOf": [{"enum": names}, {"type": "integer"}]})
                    };
                    self.defs.insert(name.clone(), def);
                }
                json!({"$ref": format!("#/$defs/{name}")})
            }
            Kind::Message(m) => {
                if let Some(schema) = well_known(m.full_name(), self.direction) {
                    return schema;
                }
                let name = m.full_name().to_owned();
                if !self.defs.contains_key(&name) {
                    self.defs.insert(name.clone(), Value::Null);
                    self.pending.push(m.clone());
                }
                json!({"$ref": format!("#/$defs/{name}")})
            }
        }
    }
}

/// A `oneof` written in the schema (proto3 `optional` makes synthetic
/// ones, which are not).
fn real_oneof(field: &FieldDescriptor) -> Option<OneofDescriptor> {
    field.containing_oneof().filter(|o| !o.is_synthetic())
}

/// Most members of a `oneof` whose exclusivity is checked (the check
/// lists every pair).
const ONEOF_PAIRS_MAX_MEMBERS: usize = 16;

/// "At most one member set": no pair of members both present.
fn at_most_one(oneof: &OneofDescriptor) -> Option<Value> {
    let names: Vec<String> = oneof.fields().map(|f| f.json_name().to_owned()).collect();
    if names.len() < 2 || names.len() > ONEOF_PAIRS_MAX_MEMBERS {
        return None;
    }
    let mut pairs = Vec::new();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            pairs.push(json!({"required": [a, b]}));
        }
    }
    Some(json!({"not": {"anyOf": pairs}}))
}

/// Floats: numbers, or the strings proto3 JSON uses for the non-finite.
fn float() -> Value {
    json!({"anyOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]})
}

/// 64-bit integers: decimal strings (canonical, and what answers carry),
/// numbers accepted on input.
fn int64(input: bool, signed: bool) -> Value {
    let pattern = if signed { "^-?[0-9]+$" } else { "^[0-9]+$" };
    if input {
        let mut n = json!({"type": "integer"});
        if !signed {
            n["minimum"] = 0.into();
        }
        json!({"anyOf": [n, {"type": "string", "pattern": pattern}]})
    } else {
        json!({"type": "string", "pattern": pattern})
    }
}

/// The JSON form of the well-known types that have their own.
fn well_known(full_name: &str, direction: Direction) -> Option<Value> {
    let input = direction == Direction::Input;
    let nullable = |mut schema: Value| {
        let t = schema["type"].take();
        schema["type"] = json!([t, "null"]);
        schema
    };
    Some(match full_name.strip_prefix("google.protobuf.")? {
        "Timestamp" => json!({"type": "string", "format": "date-time"}),
        "Duration" => json!({"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]{1,9})?s$"}),
        "FieldMask" => json!({"type": "string"}),
        "Struct" => json!({"type": "object"}),
        "ListValue" => json!({"type": "array"}),
        "Value" => json!({}),
        "Empty" => json!({"type": "object", "maxProperties": 0}),
        "Any" => json!({
            "type": "object",
            "required": ["@type"],
            "properties": {"@type": {"type": "string"}}
        }),
        "DoubleValue" | "FloatValue" => {
            json!({"anyOf": [{"type": ["number", "null"]}, {"enum": ["NaN", "Infinity", "-Infinity"]}]})
        }
        "Int64Value" => json!({"anyOf": [int64(input, true), {"type": "null"}]}),
        "UInt64Value" => json!({"anyOf": [int64(input, false), {"type": "null"}]}),
        "Int32Value" => {
            nullable(json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX}))
        }
        "UInt32Value" => nullable(json!({"type": "integer", "minimum": 0, "maximum": u32::MAX})),
        "BoolValue" => nullable(json!({"type": "boolean"})),
        "StringValue" => nullable(json!({"type": "string"})),
        "BytesValue" => nullable(json!({"type": "string", "contentEncoding": "base64"})),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::DescriptorPool;

    fn message(name: &str) -> MessageDescriptor {
        DescriptorPool::global().get_message_by_name(name).unwrap()
    }

    #[test]
    fn well_known_types_have_their_json_forms() {
        assert!(non_object_well_known("google.protobuf.Timestamp"));
        assert!(non_object_well_known("google.protobuf.StringValue"));
        assert!(non_object_well_known("google.protobuf.Value"));
        assert!(!non_object_well_known("google.protobuf.Empty"));
        assert!(!non_object_well_known("google.protobuf.Struct"));
        assert!(!non_object_well_known("toolexec.test.v1.SayRequest"));
        let schema = message_schema(&message("google.protobuf.Type"), Direction::Input);
        assert_eq!(schema["additionalProperties"], false);
        // Repeated messages are arrays of references; enums are their names
        // or numbers.
        assert_eq!(
            schema["properties"]["fields"],
            json!({"type": "array", "items": {"$ref": "#/$defs/google.protobuf.Field"}})
        );
        assert_eq!(
            schema["properties"]["syntax"]["$ref"],
            "#/$defs/google.protobuf.Syntax"
        );
        let syntax = &schema["$defs"]["google.protobuf.Syntax"]["enum"];
        assert!(syntax.as_array().unwrap().contains(&json!("SYNTAX_PROTO3")));
        assert!(syntax.as_array().unwrap().contains(&json!(1)));
        let output = message_schema(&message("google.protobuf.Type"), Direction::Output);
        assert!(output.get("additionalProperties").is_none());
        // At the root too, a well-known type has its JSON form.
        let root = message_schema(&message("google.protobuf.Struct"), Direction::Input);
        assert_eq!(root, json!({"type": "object"}));
    }

    /// A chain of thousands of nested message types (as a hostile server
    /// could describe) builds without deep recursion.
    #[test]
    fn long_chains_of_message_types_stay_off_the_stack() {
        use prost_types::field_descriptor_proto::{Label, Type};
        use prost_types::{DescriptorProto, FieldDescriptorProto};
        const N: usize = 5_000;
        let messages = (0..N)
            .map(|i| DescriptorProto {
                name: Some(format!("M{i}")),
                field: if i + 1 < N {
                    vec![FieldDescriptorProto {
                        name: Some("next".into()),
                        number: Some(1),
                        label: Some(Label::Optional as i32),
                        r#type: Some(Type::Message as i32),
                        type_name: Some(format!(".deep.M{}", i + 1)),
                        json_name: Some("next".into()),
                        ..Default::default()
                    }]
                } else {
                    Vec::new()
                },
                ..Default::default()
            })
            .collect();
        let file = FileDescriptorProto {
            name: Some("deep.proto".into()),
            package: Some("deep".into()),
            syntax: Some("proto3".into()),
            message_type: messages,
            ..Default::default()
        };
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_proto(file).unwrap();
        let root = pool.get_message_by_name("deep.M0").unwrap();
        // On a small stack, as a worker thread might have.
        let schema = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || message_schema(&root, Direction::Input))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(schema["$defs"].as_object().unwrap().len(), N - 1);
        assert_eq!(schema["properties"]["next"]["$ref"], "#/$defs/deep.M1");
    }

    #[test]
    fn sixty_four_bit_integers_are_strings_out_and_either_in() {
        let input = message_schema(&message("google.protobuf.Int64Value"), Direction::Input);
        assert_eq!(input["anyOf"][0]["anyOf"][1]["pattern"], "^-?[0-9]+$");
        let output = message_schema(&message("google.protobuf.Int64Value"), Direction::Output);
        assert_eq!(output["anyOf"][0]["type"], "string");
    }
}
