//! Unit code: text to binary, module or component, content hash.

use sha2::{Digest, Sha256};
use toolexec_runtime::WasmCode;

/// Whether code is a core module or a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeKind {
    /// A core WebAssembly module.
    Module,
    /// A component (component model).
    Component,
}

/// The cache key of some code: SHA-256 of its kind tag and source bytes.
pub(crate) type CodeHash = [u8; 32];

/// Hashes the code as given (text or binary), so a cache hit skips parsing.
pub(crate) fn hash(code: &WasmCode) -> CodeHash {
    let mut h = Sha256::new();
    match code {
        WasmCode::Binary(bytes) => {
            h.update(b"bin\0");
            h.update(bytes);
        }
        WasmCode::Wat(text) => {
            h.update(b"wat\0");
            h.update(text.as_bytes());
        }
    }
    h.finalize().into()
}

/// The size of the code as given.
pub(crate) fn size(code: &WasmCode) -> usize {
    match code {
        WasmCode::Binary(bytes) => bytes.len(),
        WasmCode::Wat(text) => text.len(),
    }
}

/// The binary form of the code and its kind, or why it is not WebAssembly.
pub(crate) fn to_binary(code: &WasmCode) -> Result<(Vec<u8>, CodeKind), String> {
    let bytes = match code {
        WasmCode::Binary(bytes) => bytes.clone(),
        WasmCode::Wat(text) => wat::parse_str(text).map_err(|e| {
            let msg = e.to_string().replace('\n', " ");
            format!("invalid WebAssembly text: {msg}")
        })?,
    };
    let kind = kind_of(&bytes)?;
    Ok((bytes, kind))
}

/// Reads the preamble: `\0asm`, then a version and a layer (0: core module,
/// 1: component).
pub fn kind_of(bytes: &[u8]) -> Result<CodeKind, String> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err("not a WebAssembly binary (missing \\0asm magic)".into());
    }
    match u16::from_le_bytes([bytes[6], bytes[7]]) {
        0 => Ok(CodeKind::Module),
        1 => Ok(CodeKind::Component),
        layer => Err(format!("unknown WebAssembly layer {layer}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_module_component_and_garbage() {
        let module = wat::parse_str("(module)").unwrap();
        assert_eq!(kind_of(&module), Ok(CodeKind::Module));
        let component = wat::parse_str("(component)").unwrap();
        assert_eq!(kind_of(&component), Ok(CodeKind::Component));
        assert!(kind_of(b"\0as").is_err());
        assert!(kind_of(b"MZ\0\0\0\0\0\0").is_err());
        assert!(kind_of(b"\0asm\x01\0\x07\0").is_err());
    }

    #[test]
    fn text_and_binary_hash_differently() {
        let text = WasmCode::Wat("(module)".into());
        let bin = WasmCode::Binary(b"(module)".to_vec());
        assert_ne!(hash(&text), hash(&bin));
        assert_eq!(hash(&text), hash(&WasmCode::Wat("(module)".into())));
    }

    #[test]
    fn bad_text_is_an_error() {
        let err = to_binary(&WasmCode::Wat("(module (func (i32.bogus)))".into())).unwrap_err();
        assert!(err.starts_with("invalid WebAssembly text"), "{err}");
    }
}
