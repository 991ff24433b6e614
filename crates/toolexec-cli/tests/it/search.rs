//! `[search]` and `tools search --mode` with the real embedding model
//! (all-MiniLM-L6-v2, `$TOOLEXEC_EMBED_MODEL`) over the built-in catalog.

use crate::support::{TempDir, dep, run, toml_str, toolexec};

#[test]
fn semantic_and_hybrid_search_through_the_cli() {
    let Some(model) = dep("search_cli", "TOOLEXEC_EMBED_MODEL") else {
        return;
    };
    let dir = TempDir::new("search-cli");
    let config = dir.write(
        "toolexec.toml",
        &format!(
            "[search]\nmodel = {}\ncache = \"embeddings\"\n",
            toml_str(&model)
        ),
    );
    let search_with = |config: &std::path::Path, args: &[&str]| {
        let mut all = vec![
            "--config",
            config.to_str().unwrap(),
            "--json",
            "tools",
            "search",
        ];
        all.extend_from_slice(args);
        run(&mut toolexec(dir.path(), &all))
    };
    let search = |args: &[&str]| search_with(&config, args);
    let first = |out: &crate::support::Out| {
        out.json()["results"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // Words no tool's text shares with the query: found by meaning.
    let out = search(&["sum of two figures", "--mode", "semantic", "--limit", "3"]);
    out.expect_code(0);
    assert_eq!(first(&out), "math:add", "{out}");
    // The default with a model is hybrid; an exact id still comes first.
    let out = search(&["math:multiply"]);
    out.expect_code(0);
    assert_eq!(first(&out), "math:multiply", "{out}");
    // The vectors were cached next to the config.
    assert!(dir.path().join("embeddings").is_dir());
    let out = search(&["add", "--mode", "sideways"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("invalid_request") && out.stderr.contains("mode"),
        "{out}"
    );
    // In 32-bit floats too (the default is 8-bit where the CPU has VNNI).
    let exact = dir.write(
        "exact.toml",
        &format!(
            "[search]\nmodel = {}\ncache = \"embeddings\"\nprecision = \"f32\"\n",
            toml_str(&model)
        ),
    );
    let out = search_with(
        &exact,
        &["sum of two figures", "--mode", "semantic", "--limit", "3"],
    );
    out.expect_code(0);
    assert_eq!(first(&out), "math:add", "{out}");
}

#[test]
fn search_configuration_errors_name_their_key() {
    let dir = TempDir::new("search-config");
    for (table, key, words) in [
        (
            "[search]\nmode = \"hybrid\"\n",
            "search.mode",
            "search.model",
        ),
        (
            "[search]\nmode = \"fuzzy\"\n",
            "search.mode",
            "lexical, semantic or hybrid",
        ),
        (
            "[search]\nmodel = \"no-such-model\"\n",
            "search.model",
            "cannot read",
        ),
        (
            "[search]\nprecision = \"f16\"\n",
            "search.precision",
            "int8 or f32",
        ),
    ] {
        let config = dir.write("bad.toml", table);
        let out = run(&mut toolexec(
            dir.path(),
            &[
                "--config",
                config.to_str().unwrap(),
                "tools",
                "search",
                "add",
            ],
        ));
        out.expect_code(2);
        assert!(out.stderr.contains(key), "{key}: {out}");
        assert!(out.stderr.contains(words), "{words}: {out}");
    }
}
