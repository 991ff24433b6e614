//! `json:*`: jq queries, merge patches (RFC 7386) and JSON Patch (RFC 6902).

use json_patch::PatchOperation;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolexec::{LocalTool, ToolAnnotations, ToolDocs, ToolError, ToolExample};

use crate::jq;

/// Largest document `json:patch` may build (estimated bytes).
const MAX_DOCUMENT_BYTES: usize = 16 << 20;
/// Deepest document `json:patch` may build.
const MAX_DOCUMENT_DEPTH: usize = 128;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QueryArgs {
    /// The jq filter, e.g. `.items[] | select(.price > 10) | .name`.
    #[schemars(length(min = 1, max = 16_384))]
    filter: String,
    /// The JSON input of the filter (`.`); null when omitted.
    #[serde(default)]
    data: Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MergeArgs {
    /// The document to update.
    base: Value,
    /// The merge patch: its members replace those of base; null members delete them;
    /// objects merge recursively; anything else (arrays too) replaces wholesale.
    patch: Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DiffArgs {
    /// The original document.
    from: Value,
    /// The changed document.
    to: Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PatchArgs {
    /// The document to change.
    document: Value,
    /// RFC 6902 operations, applied in order: add, remove, replace, move, copy, test.
    /// Paths are JSON Pointers ("/a/0/b"; "~1" escapes "/", "~0" escapes "~";
    /// "/-" appends to an array).
    patch: Vec<PatchOperation>,
}

/// The outputs of a jq filter.
#[derive(Serialize, JsonSchema)]
struct QueryResult {
    /// Every output of the filter, in order (a filter may output zero, one or many values).
    results: Vec<Value>,
}

/// A changed document.
#[derive(Serialize, JsonSchema)]
struct DocumentResult {
    /// The resulting document.
    result: Value,
}

/// A JSON Patch.
#[derive(Serialize, JsonSchema)]
struct DiffResult {
    /// RFC 6902 operations that turn `from` into `to` (empty when they are equal).
    patch: Vec<PatchOperation>,
}

/// Size (estimated bytes) and depth of a value, stopping early once either
/// passes its limit.
fn measure(v: &Value, max_bytes: usize, max_depth: usize) -> (usize, usize) {
    fn walk(
        v: &Value,
        depth: usize,
        bytes: &mut usize,
        max_bytes: usize,
        max_depth: usize,
    ) -> usize {
        *bytes += 8;
        if depth > max_depth || *bytes > max_bytes {
            return depth;
        }
        match v {
            Value::String(s) => {
                *bytes += s.len();
                depth
            }
            Value::Array(a) => a
                .iter()
                .map(|x| walk(x, depth + 1, bytes, max_bytes, max_depth))
                .max()
                .unwrap_or(depth + 1),
            Value::Object(o) => o
                .iter()
                .map(|(k, x)| {
                    *bytes += k.len();
                    walk(x, depth + 1, bytes, max_bytes, max_depth)
                })
                .max()
                .unwrap_or(depth + 1),
            _ => depth,
        }
    }
    let mut bytes = 0;
    let depth = walk(v, 0, &mut bytes, max_bytes, max_depth);
    (bytes, depth)
}

/// Applies the operations one at a time, refusing documents that grow past
/// the limits (`copy` can double a document per operation).
fn apply_patch(mut doc: Value, ops: &[PatchOperation]) -> Result<Value, ToolError> {
    let (mut size, mut depth) = measure(&doc, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH);
    for (i, op) in ops.iter().enumerate() {
        let path_len = op.path().count();
        let added = match op {
            PatchOperation::Add(a) => Some((
                measure(&a.value, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH),
                true,
            )),
            PatchOperation::Replace(r) => Some((
                measure(&r.value, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH),
                true,
            )),
            PatchOperation::Copy(c) => doc
                .pointer(c.from.as_str())
                .map(|v| (measure(v, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH), true)),
            PatchOperation::Move(m) => doc
                .pointer(m.from.as_str())
                .map(|v| (measure(v, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH), false)),
            PatchOperation::Remove(_) | PatchOperation::Test(_) => None,
        };
        if let Some(((bytes, d), grows)) = added {
            if grows {
                size += bytes;
            }
            depth = depth.max(path_len + d);
            if size > MAX_DOCUMENT_BYTES {
                return Err(ToolError::new(format!(
                    "operation {i} would make the document larger than {} MiB",
                    MAX_DOCUMENT_BYTES >> 20
                )));
            }
            if depth > MAX_DOCUMENT_DEPTH {
                return Err(ToolError::new(format!(
                    "operation {i} would nest the document deeper than {MAX_DOCUMENT_DEPTH} levels"
                )));
            }
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op)).map_err(|e| {
            ToolError::new(format!(
                "patch operation {i} ({} at {:?}) failed: {}",
                op_name(op),
                e.path.as_str(),
                e.kind
            ))
        })?;
    }
    Ok(doc)
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

/// The `json:*` tools.
pub(crate) fn tools() -> Vec<LocalTool> {
    vec![
        LocalTool::new("json:query", |a: QueryArgs| async move {
            jq::query(a.filter, a.data)
                .await
                .map(|results| QueryResult { results })
        })
        .title("jq query")
        .description(
            "Runs a jq filter on JSON data and returns every output of the filter in results. \
             filter is a jq program (jaq dialect, nearly all of jq 1.7: paths, select, map, \
             reduce, foreach, def, try/catch, string interpolation, regex functions like \
             test/capture/sub/gsub, @base64/@csv formats, dates). data is the input (`.`). A \
             filter that outputs nothing returns an empty list; a jq error (such as indexing a \
             number) fails the call with the error message. Use it to extract, filter, reshape or \
             aggregate JSON.",
        )
        .tags(["json", "jq", "query", "filter", "transform", "extract"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Runs a jq filter on JSON data")
                .note(
                    "Limits: at most 10,000 results and 8 MiB of output, 5 s of run time, 256 MiB \
                     of allocation, strings up to 16 MiB and values nested up to 10,000 levels \
                     inside the filter. Runaway filters (infinite loops, unbounded recursion) stop \
                     with an error.",
                )
                .note(
                    "Not available: input/inputs, $ENV/env (empty), modules (import/include), \
                     halt. debug and stderr pass values through without logging.",
                )
                .note(
                    "Numbers are doubles or integers; NaN becomes null and infinities the \
                     largest finite doubles in the results.",
                )
                .example(
                    ToolExample::new(
                        "Names of expensive items",
                        json!({
                            "filter": ".items[] | select(.price > 10) | .name",
                            "data": {"items": [
                                {"name": "pen", "price": 2},
                                {"name": "lamp", "price": 25},
                                {"name": "desk", "price": 120}
                            ]}
                        }),
                    )
                    .result(json!({"results": ["lamp", "desk"]})),
                )
                .example(
                    ToolExample::new(
                        "Aggregate into one object",
                        json!({
                            "filter": "{count: length, total: map(.n) | add}",
                            "data": [{"n": 1}, {"n": 2}, {"n": 3}]
                        }),
                    )
                    .result(json!({"results": [{"count": 3, "total": 6}]})),
                ),
        ),
        LocalTool::new("json:merge", |a: MergeArgs| async move {
            let mut result = a.base;
            json_patch::merge(&mut result, &a.patch);
            Ok::<_, ToolError>(DocumentResult { result })
        })
        .title("JSON merge patch")
        .description(
            "Applies an RFC 7386 JSON Merge Patch to a document and returns the result. Members \
             of patch replace members of base, a null member deletes the member, nested objects \
             merge recursively, and anything that is not an object (arrays included) replaces the \
             old value wholesale. A patch that is not an object replaces the whole document.",
        )
        .tags(["json", "merge", "patch", "update", "rfc7386"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Applies an RFC 7386 merge patch")
                .note(
                    "Merge patches cannot set a member to null (null means delete) nor change \
                     single array elements; use json:patch for that.",
                )
                .example(
                    ToolExample::new(
                        "Update, add and delete members",
                        json!({
                            "base": {"title": "Hello", "author": {"name": "Ann", "email": "a@x.org"}, "tags": ["a"]},
                            "patch": {"title": "Hi", "author": {"email": null}, "tags": ["b", "c"]}
                        }),
                    )
                    .result(json!({"result": {"title": "Hi", "author": {"name": "Ann"}, "tags": ["b", "c"]}})),
                ),
        ),
        LocalTool::new("json:diff", |a: DiffArgs| async move {
            Ok::<_, ToolError>(DiffResult {
                patch: json_patch::diff(&a.from, &a.to).0,
            })
        })
        .title("JSON diff")
        .description(
            "Compares two JSON documents and returns an RFC 6902 JSON Patch (a list of add, \
             remove and replace operations with JSON Pointer paths) that turns from into to. \
             Equal documents give an empty patch. Apply the patch with json:patch.",
        )
        .tags(["json", "diff", "compare", "patch", "rfc6902"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Computes an RFC 6902 JSON Patch between two documents")
                .note(
                    "Arrays are compared index by index: inserting at the front of an array shows \
                     up as replacing every element and adding one at the end.",
                )
                .example(
                    ToolExample::new(
                        "Changed, added and removed members",
                        json!({"from": {"a": 1, "b": 2}, "to": {"a": 1, "b": 3, "c": 4}}),
                    )
                    .result(json!({"patch": [
                        {"op": "replace", "path": "/b", "value": 3},
                        {"op": "add", "path": "/c", "value": 4}
                    ]})),
                ),
        ),
        LocalTool::new("json:patch", |a: PatchArgs| async move {
            apply_patch(a.document, &a.patch).map(|result| DocumentResult { result })
        })
        .title("Apply JSON Patch")
        .description(
            "Applies RFC 6902 JSON Patch operations, in order, to a document and returns the \
             result. Operations: add (insert or set; \"/-\" appends to an array), remove, \
             replace, move, copy and test (fails unless the value at path equals value). If any \
             operation fails (missing path, failed test) the call fails, naming the operation.",
        )
        .tags(["json", "patch", "update", "edit", "rfc6902"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Applies RFC 6902 JSON Patch operations")
                .note(
                    "Paths are JSON Pointers: \"\" is the whole document, \"/a/0\" the first \
                     element of member a; escape \"/\" as \"~1\" and \"~\" as \"~0\" in keys.",
                )
                .note("Use a test operation first to make a patch conditional.")
                .example(
                    ToolExample::new(
                        "Set, append and remove",
                        json!({
                            "document": {"name": "app", "tags": ["a"], "draft": true},
                            "patch": [
                                {"op": "test", "path": "/name", "value": "app"},
                                {"op": "replace", "path": "/name", "value": "app2"},
                                {"op": "add", "path": "/tags/-", "value": "b"},
                                {"op": "remove", "path": "/draft"}
                            ]
                        }),
                    )
                    .result(json!({"result": {"name": "app2", "tags": ["a", "b"]}})),
                ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(v: Value) -> Vec<PatchOperation> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn copy_bombs_are_refused() {
        let mut list = Vec::new();
        for _ in 0..200 {
            list.push(json!({"op": "copy", "from": "", "path": "/a"}));
        }
        let doc = json!({"a": "x".repeat(1000)});
        let err = apply_patch(doc.clone(), &ops(Value::Array(list))).unwrap_err();
        assert!(err.message.contains("deeper"), "{err}");
        let list: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/k{i}")}))
            .collect();
        let err = apply_patch(doc, &ops(Value::Array(list))).unwrap_err();
        assert!(err.message.contains("larger"), "{err}");
    }

    #[test]
    fn failing_operations_are_named() {
        let err = apply_patch(
            json!({"a": 1}),
            &ops(json!([{"op": "remove", "path": "/b"}])),
        )
        .unwrap_err();
        assert!(err.message.contains("operation 0 (remove"), "{err}");
    }
}
