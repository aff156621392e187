#!/usr/bin/env bash
# The whole test suite, as the README shows it. Installs what the build needs on
# a fresh machine of this kind first (idempotent, quiet when already there).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo test --workspace
