#!/usr/bin/env bash
# Writes mlp-format3.tpuexe: the mlp test model compiled for `cpu` by this tree's compiler, in
# the current artifact format, torchtpu-artifact/3 (weights and source digested with BLAKE3;
# the export's guards recorded). Committed so that tests check that artifacts of each format
# keep loading (and recompile) as the compiler changes. Rerun only for a new format, renaming the
# output here and keeping the old files: mlp-format1.tpuexe (weights digested with sha256) was
# written by this script at 1cc35cf, mlp-format2.tpuexe (weights with BLAKE3, source with sha256)
# at 30ba1e0.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo run -q --bin torchtpu-compile -- compile testdata/models/mlp.pt2 -o testdata/artifacts/mlp-format3.tpuexe \
    --target cpu --no-cache -q
