//! `typescript_declarations` over the built-in catalog and local tools with
//! awkward names and schemas. With `TOOLEXEC_TSC` pointing at a `tsc`
//! binary, the declarations and a script using them are also type-checked.

use crate::support::*;
use serde_json::json;
use toolexec::Tool;
use toolexec_code::typescript_declarations;

#[test]
fn builtins_render_every_namespace_with_types() {
    let catalog = toolexec_builtins::catalog();
    let ts = typescript_declarations(&catalog, None);
    for iface in [
        "MathTools",
        "TextTools",
        "JsonTools",
        "TimeTools",
        "HashTools",
        "EncodingTools",
    ] {
        assert!(ts.contains(&format!("interface {iface} {{")), "{iface}");
    }
    // Required vs optional, enums from schemars' oneOf/enum, descriptions as JSDoc.
    assert!(ts.contains("add(args: {"), "{ts}");
    assert!(
        ts.contains("    /** The left operand. */\n    a: number;"),
        "{ts}"
    );
    assert!(ts.contains("decimals?: number;"), "{ts}");
    assert!(ts.contains("\"upper\""), "text:case enum: {ts}");
    assert!(
        ts.contains("): Promise<{\n    /** The result. */\n    result: number;\n  }>;"),
        "{ts}"
    );
    assert!(ts.contains("\"math:add\": { args: Parameters<MathTools[\"add\"]>[0]; result: Awaited<ReturnType<MathTools[\"add\"]>> };"));
    assert!(ts.contains("declare const tools: {"));
    assert!(ts.contains("  readonly math: MathTools;"));
    assert!(ts.contains("search(query: string, limit?: number): Promise<ToolMatch[]>;"));
    assert!(ts.contains("declare const console: {"));
    // Balanced braces: a cheap structural check that runs everywhere.
    let opens = ts.matches('{').count();
    let closes = ts.matches('}').count();
    assert_eq!(opens, closes);
    // One namespace only.
    let math = typescript_declarations(&catalog, Some("math"));
    assert!(math.contains("MathTools") && !math.contains("TextTools"));
}

#[test]
fn odd_names_versions_and_schemas() {
    let f = fixture(1);
    let c = f.exec.catalog();
    let tool = Tool::builder("odd-ns.v2:list.items:1.0")
        .description("Lists items.\nSecond line with */ inside.")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "filter": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}], "description": "One or many"},
                "mode": {"enum": ["fast", "slow"]},
                "limit": {"type": ["integer", "null"]},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "items": false},
                "meta": {"type": "object", "additionalProperties": {"type": "boolean"}},
                "tree": {"$ref": "#/$defs/Tree"},
                "const": {"const": "x"}
            },
            "required": ["mode"],
            "$defs": {"Tree": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}}
        }))
        .output_schema(json!({"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}))
        .build()
        .unwrap();
    c.register(tool, std::sync::Arc::new(NoBackend)).unwrap();
    let ts = typescript_declarations(c, None);
    assert!(ts.contains("interface OddNsV2Tools {"), "{ts}");
    assert!(ts.contains("readonly \"odd-ns.v2\": OddNsV2Tools;"), "{ts}");
    assert!(ts.contains("\"list.items\"(args: {"), "{ts}");
    assert!(ts.contains("* Second line with *\\/ inside."), "{ts}");
    assert!(ts.contains("filter?: string | string[];"), "{ts}");
    assert!(ts.contains("mode: \"fast\" | \"slow\";"), "{ts}");
    assert!(ts.contains("limit?: number | null;"), "{ts}");
    assert!(ts.contains("pair?: [string, number];"), "{ts}");
    assert!(ts.contains("meta?: { [key: string]: boolean };"), "{ts}");
    assert!(ts.contains("children?: unknown[];"), "recursive ref: {ts}");
    assert!(ts.contains("const?: \"x\";"), "{ts}");
    assert!(ts.contains("Promise<{\n    id: number;\n  }[]>"), "{ts}");
    assert!(
        ts.contains("\"odd-ns.v2:list.items:1.0\": { args: {"),
        "versioned id in ToolMap: {ts}"
    );
    assert!(
        ts.contains("  \"na-me\"(args?: { [key: string]: unknown }): Promise<unknown>;"),
        "{ts}"
    );

    if let Ok(tsc) = std::env::var("TOOLEXEC_TSC") {
        type_check(&tsc, &ts);
    }
}

struct NoBackend;

impl toolexec::Backend for NoBackend {
    fn kind(&self) -> &str {
        "none"
    }
    fn call<'a>(
        &'a self,
        _call: toolexec::Call<'a>,
    ) -> toolexec::BoxFuture<'a, Result<toolexec::ToolOutput, toolexec::Error>> {
        Box::pin(async { Err(toolexec::Error::backend_unavailable("none", "test")) })
    }
}

/// Type-checks the declarations plus a script that uses them (wrapped as
/// the async function body it is), and a script that must fail to check.
fn type_check(tsc: &str, decls: &str) {
    let dir = std::env::temp_dir().join(format!("toolexec-code-ts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tools.d.ts"), decls).unwrap();
    let good = r#"async function main() {
  const sum = await tools.math.add({ a: 1, b: 2 });
  const n: number = sum.result;
  const viaRun = await tools.run("math:multiply", { a: 2, b: 3 });
  const m: number = viaRun.result;
  const up = await tools.text.case({ text: "x", to: "upper" });
  const items = await tools["odd-ns.v2"]["list.items"]({ mode: "fast", pair: ["a", 1] });
  const id: number = items[0].id;
  const hits = await tools.search("add", 3);
  const dashed = await tools.test["na-me"]();
  const doc = await tools.describe(hits[0].id, "full");
  const any = await tools.run("whatever:tool", { x: 1 });
  console.log(n, m, up.text, id, doc.summary, any, dashed);
  return n + m;
}
export {};
"#;
    let bad = r#"async function main() {
  const sum = await tools.math.add({ a: "one", b: 2 });
  return sum;
}
export {};
"#;
    std::fs::write(dir.join("good.ts"), good).unwrap();
    std::fs::write(dir.join("bad.ts"), bad).unwrap();
    let run = |file: &str| {
        std::process::Command::new(tsc)
            .args([
                "--noEmit", "--strict", "--target", "es2022", "--lib", "es2022",
            ])
            .arg(dir.join("tools.d.ts"))
            .arg(dir.join(file))
            .output()
            .unwrap()
    };
    let out = run("good.ts");
    assert!(
        out.status.success(),
        "tsc rejected the declarations:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run("bad.ts");
    assert!(!out.status.success(), "tsc accepted a wrong argument type");
    assert!(String::from_utf8_lossy(&out.stdout).contains("bad.ts"));
}
