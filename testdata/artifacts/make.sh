#!/usr/bin/env bash
# Writes mlp-format1.tpuexe: the mlp test model compiled for `cpu` by this tree's compiler, in
# artifact format torchtpu-artifact/1. Committed so that tests check that artifacts of that
# format keep loading (and recompile) as the compiler changes; rerun only for a new format,
# keeping the old file under its own name.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo run -q --bin torchtpu-compile -- compile testdata/models/mlp.pt2 -o testdata/artifacts/mlp-format1.tpuexe \
    --target cpu --no-cache -q
