//! `encoding:*`: base64 and UUIDs.

use base64::Engine as _;
use base64::engine::general_purpose::{
    STANDARD, STANDARD_PAD_INDIFFERENT, URL_SAFE_NO_PAD, URL_SAFE_PAD_INDIFFERENT,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::{LocalTool, ToolAnnotations, ToolDocs, ToolError, ToolExample};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EncodeArgs {
    /// The text to encode (its UTF-8 bytes are encoded).
    text: String,
    /// Use the URL-safe alphabet ("-" and "_" instead of "+" and "/") without
    /// "=" padding, as in URLs and JWTs (default false: standard, padded).
    #[serde(default)]
    url_safe: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DecodeArgs {
    /// The base64 to decode; padding is optional and whitespace (line breaks) is ignored.
    base64: String,
    /// Decode the URL-safe alphabet ("-" and "_") instead of the standard one (default false).
    #[serde(default)]
    url_safe: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct UuidArgs {
    /// How many UUIDs to generate (1 to 100, default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 100))]
    count: usize,
}

fn one() -> usize {
    1
}

/// Encoded text.
#[derive(Serialize, JsonSchema)]
struct EncodeResult {
    /// The base64 encoding.
    base64: String,
}

/// Decoded text.
#[derive(Serialize, JsonSchema)]
struct DecodeResult {
    /// The decoded text.
    text: String,
}

/// Generated UUIDs.
#[derive(Serialize, JsonSchema)]
struct UuidResult {
    /// Random (version 4) UUIDs in lowercase hyphenated form.
    uuids: Vec<String>,
}

fn decode(args: &DecodeArgs) -> Result<DecodeResult, ToolError> {
    let compact: String = args.base64.split_whitespace().collect();
    let engine = if args.url_safe {
        &URL_SAFE_PAD_INDIFFERENT
    } else {
        &STANDARD_PAD_INDIFFERENT
    };
    let bytes = engine.decode(&compact).map_err(|e| {
        let hint = if !args.url_safe && compact.contains(['-', '_']) {
            " (it contains - or _: set url_safe to true)"
        } else {
            ""
        };
        ToolError::new(format!("invalid base64: {e}{hint}"))
    })?;
    let len = bytes.len();
    String::from_utf8(bytes)
        .map(|text| DecodeResult { text })
        .map_err(|e| {
            ToolError::new(format!(
                "the decoded {len} bytes are not UTF-8 text (invalid at byte {}); this tool only \
                 returns text",
                e.utf8_error().valid_up_to()
            ))
        })
}

fn uuids(count: usize) -> Result<UuidResult, ToolError> {
    if !(1..=100).contains(&count) {
        return Err(ToolError::new("count must be between 1 and 100"));
    }
    Ok(UuidResult {
        uuids: (0..count)
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect(),
    })
}

/// The `encoding:*` tools.
pub(crate) fn tools() -> Vec<LocalTool> {
    vec![
        LocalTool::new("encoding:base64_encode", |a: EncodeArgs| async move {
            let engine = if a.url_safe { &URL_SAFE_NO_PAD } else { &STANDARD };
            Ok::<_, ToolError>(EncodeResult {
                base64: engine.encode(a.text.as_bytes()),
            })
        })
        .title("Base64 encode")
        .description(
            "Encodes the UTF-8 bytes of text as base64 (RFC 4648). By default uses the standard \
             alphabet with \"=\" padding; with url_safe, the URL-safe alphabet (\"-\", \"_\") \
             without padding, as used in URLs and JWTs.",
        )
        .tags(["encoding", "base64", "encode", "convert"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Encodes text as base64")
                .note("To encode binary data, it must first be text; this tool encodes UTF-8 text only.")
                .example(ToolExample::new("Standard", json!({"text": "hello?"})).result(json!({"base64": "aGVsbG8/"})))
                .example(
                    ToolExample::new("URL-safe", json!({"text": "hello?", "url_safe": true}))
                        .result(json!({"base64": "aGVsbG8_"})),
                ),
        ),
        LocalTool::new("encoding:base64_decode", |a: DecodeArgs| async move { decode(&a) })
            .title("Base64 decode")
            .description(
                "Decodes base64 (RFC 4648) into UTF-8 text. Padding is optional and whitespace is \
                 ignored. Set url_safe for the URL-safe alphabet (\"-\", \"_\"). Invalid base64, or \
                 bytes that are not valid UTF-8 text (binary data), are an error.",
            )
            .tags(["encoding", "base64", "decode", "convert"])
            .annotations(ToolAnnotations::pure())
            .docs(
                ToolDocs::new("Decodes base64 into text")
                    .note("Binary content (images, archives) cannot be returned as text and fails; hash it with hash:sha256 and encoding \"base64\" instead.")
                    .example(ToolExample::new("Decode", json!({"base64": "aGVsbG8gd29ybGQ="})).result(json!({"text": "hello world"})))
                    .example(
                        ToolExample::new("URL-safe without padding", json!({"base64": "aGVsbG8_", "url_safe": true}))
                            .result(json!({"text": "hello?"})),
                    ),
            ),
        LocalTool::new("encoding:uuid", |a: UuidArgs| async move { uuids(a.count) })
            .title("Generate UUIDs")
            .description(
                "Generates random version 4 UUIDs (RFC 9562), e.g. \
                 \"0b6a9f8e-4c1d-4d2e-9f3a-7c5b2e1d0a9f\". count sets how many (1 to 100, default 1). \
                 Every call returns new values.",
            )
            .tags(["encoding", "uuid", "guid", "random", "id", "identifier"])
            .annotations(ToolAnnotations {
                idempotent_hint: Some(false),
                ..ToolAnnotations::pure()
            })
            .docs(
                ToolDocs::new("Generates random version 4 UUIDs")
                    .note("UUIDs come from the operating system's secure random generator.")
                    .example(ToolExample::new("One UUID", json!({})))
                    .example(ToolExample::new("Three UUIDs", json!({"count": 3}))),
            ),
    ]
}
