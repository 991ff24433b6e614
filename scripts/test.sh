#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and doc tests,
# and the search-quality evaluation. Everything it needs comes from
# crates.io through cargo; later suites (MCP, sandboxes) install their own
# packages here.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 is required ($2)" >&2; exit 2; }; }
need cargo "the Rust toolchain, 1.95"
need python3 "used by nothing yet; checked so later suites fail early"

echo "== toolchain: $(cargo --version), $(rustc --version)"
rustup component list --installed 2>/dev/null | grep -qE '^(rustfmt|clippy)' || \
  rustup component add rustfmt clippy

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked
