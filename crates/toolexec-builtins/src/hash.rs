//! `hash:*`: SHA-2 digests of text or base64-encoded bytes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256, Sha512};
use toolexec::{LocalTool, ToolAnnotations, ToolDocs, ToolError, ToolExample};

/// How the input is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum InputEncoding {
    #[default]
    Utf8,
    Base64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HashArgs {
    /// The data to hash: text, or base64 when encoding is "base64".
    text: String,
    /// "utf8" (default) hashes the UTF-8 bytes of text; "base64" decodes text
    /// from standard base64 first, to hash binary data.
    #[serde(default)]
    encoding: InputEncoding,
}

/// A digest.
#[derive(Serialize, JsonSchema)]
struct HashResult {
    /// The digest as lowercase hexadecimal.
    hex: String,
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn input(args: &HashArgs) -> Result<Vec<u8>, ToolError> {
    match args.encoding {
        InputEncoding::Utf8 => Ok(args.text.as_bytes().to_vec()),
        InputEncoding::Base64 => {
            let compact: String = args.text.split_whitespace().collect();
            STANDARD_PAD_INDIFFERENT
                .decode(compact)
                .map_err(|e| ToolError::new(format!("text is not valid base64: {e}")))
        }
    }
}

fn tool<D: Digest>(
    id: &str,
    name: &str,
    bits: u32,
    examples: [(&str, serde_json::Value, &str); 2],
) -> LocalTool {
    let mut docs = ToolDocs::new(format!("{name} digest of text or bytes, as hex"))
        .note("The same input always gives the same digest; hashing is not encryption and cannot be reversed.")
        .note("Line endings and trailing whitespace change the digest: \"a\\n\" and \"a\" differ.");
    for (title, args, hex) in examples {
        docs = docs.example(ToolExample::new(title, args).result(json!({"hex": hex})));
    }
    LocalTool::new(id, |a: HashArgs| async move {
        let data = input(&a)?;
        Ok::<_, ToolError>(HashResult {
            hex: to_hex(&D::digest(&data)),
        })
    })
    .title(format!("{name} hash"))
    .description(format!(
        "Computes the {name} digest ({bits}-bit) of text and returns it as lowercase hex. By \
         default the UTF-8 bytes of text are hashed; with encoding \"base64\", text is decoded \
         from base64 first so binary data can be hashed. Use it for checksums, fingerprints and \
         content-addressed keys."
    ))
    .tags(["hash", "checksum", "digest", "sha2", "crypto"])
    .annotations(ToolAnnotations::pure())
    .docs(docs)
}

/// The `hash:*` tools.
pub(crate) fn tools() -> Vec<LocalTool> {
    vec![
        tool::<Sha256>(
            "hash:sha256",
            "SHA-256",
            256,
            [
                (
                    "Hash a word",
                    json!({"text": "hello"}),
                    "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
                ),
                (
                    "Hash bytes given as base64",
                    json!({"text": "AAECAw==", "encoding": "base64"}),
                    "054edec1d0211f624fed0cbca9d4f9400b0e491c43742af2c5b0abebf0c990d8",
                ),
            ],
        ),
        tool::<Sha512>(
            "hash:sha512",
            "SHA-512",
            512,
            [
                (
                    "Hash a word",
                    json!({"text": "hello"}),
                    "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca72323c3d99ba5c11d7c7acc6e14b8c5da0c4663475c2e5c3adef46f73bcdec043",
                ),
                (
                    "Hash the empty string",
                    json!({"text": ""}),
                    "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
                ),
            ],
        ),
    ]
}
