#!/usr/bin/env bash
# The product as users install it, checked before any test runs:
#   1. a plain `pip install .` (no extras) in a clean venv: every module imports, the commands run, every
#      shipped policy checks, and `serve --fleet` answers a streamed chat from the official openai client
#      and serves its status page (/ui, package data);
#   2. the Dockerfile's own install (`pip install --prefix`, then the `spark-gateway` entrypoint from that
#      prefix on a clean interpreter, from a working directory laid out like the image's /app).
# Any failure exits non-zero; the servers started here are stopped by .ci/serve_and_ask.py.
#
#   usage: .ci/smoke_installed.sh CLIENT_PYTHON   (a python with the openai package, e.g. the test venv's)
set -euo pipefail
cd "$(dirname "$0")/.."

client_python=${1:?usage: .ci/smoke_installed.sh CLIENT_PYTHON}
fleet=deploy/fleets/spark-duo-35b.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step() { printf '\n== installed: %s\n' "$*"; }

step "plain pip install . (no extras) in a clean venv"
python3 -m venv "$work/plain"
"$work/plain/bin/python" -m pip install --quiet .
gw="$work/plain/bin/spark-gateway"

step "every gateway module imports with the runtime dependencies alone"
"$work/plain/bin/python" .ci/import_all.py

step "the command line starts"
"$gw" --help >/dev/null
"$gw" bench --help >/dev/null
"$gw" serve --help >/dev/null
for policy in policies/*.yaml; do
    "$gw" check "$policy"
done
# The example config, its policy cross-checked against its backends (the Docker configs name the image's
# /app paths: tests/deploy checks those).
"$gw" check --config deploy/gateway.example.yaml
"$gw" schema | "$work/plain/bin/python" -c 'import json, sys; assert json.load(sys.stdin)["properties"]'
# A benchmark whose tool is missing says so in one line and exits 2, instead of a traceback.
if message=$("$gw" bench transport 2>&1); then
    echo "bench transport ran without httpx installed" >&2
    exit 1
fi
[ "$(printf '%s\n' "$message" | wc -l)" -eq 1 ] && [[ $message == *"spark-gateway[bench]"* ]] || {
    echo "bench transport without httpx: expected one line naming the bench extra, got: $message" >&2
    exit 1
}

step "serve --fleet $fleet answers the official openai client"
"$client_python" .ci/serve_and_ask.py --fleet "$fleet" -- "$gw"

step "serve with no config, from a folder outside the repo, serves the built-in twin fleet"
mkdir "$work/elsewhere"
"$client_python" .ci/serve_and_ask.py --cwd "$work/elsewhere" -- "$gw"

step "the Dockerfile's install: pip install --prefix, entrypoint run from the prefix"
# A clean interpreter stands in for the image's python:3.11-slim; the prefix is its /install stage.
python3 -m venv "$work/base"
"$work/base/bin/python" -m pip install --quiet --prefix="$work/prefix" .
site=$("$work/base/bin/python" -c 'import sys, sysconfig
print(sysconfig.get_path("purelib", "posix_prefix", {"base": sys.argv[1], "platbase": sys.argv[1]}))' \
    "$work/prefix")
# The image's WORKDIR /app holds the shipped policies and deploy/ (fleets), nothing else of the repo.
mkdir "$work/app"
cp -r policies deploy "$work/app/"
# The entrypoint by its full path: a `spark-gateway` elsewhere on PATH (an active venv) must not stand in.
"$client_python" .ci/serve_and_ask.py --fleet "$work/app/$fleet" --cwd "$work/app" -- \
    env PATH="$work/prefix/bin:$PATH" PYTHONPATH="$site" "$work/prefix/bin/spark-gateway"

step "ok"
