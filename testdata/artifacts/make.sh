#!/usr/bin/env bash
# Writes mlp-format2.tpuexe: the mlp test model compiled for `cpu` by this tree's compiler, in
# the current artifact format, torchtpu-artifact/2 (weights digested with BLAKE3). Committed so
# that tests check that artifacts of each format keep loading (and recompile) as the compiler
# changes. Rerun only for a new format, renaming the output here and keeping the old files:
# mlp-format1.tpuexe (weights digested with sha256) was written by this script at 1cc35cf.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo run -q --bin torchtpu-compile -- compile testdata/models/mlp.pt2 -o testdata/artifacts/mlp-format2.tpuexe \
    --target cpu --no-cache -q
