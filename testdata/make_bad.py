#!/usr/bin/env python3
"""Derive malformed .pt2 archives from the generated ones (stdlib only).

    python3 testdata/make_bad.py

Reads testdata/models/mlp.pt2 (and llama_tiny_dyn.pt2 for bad_sym_expr), writes
testdata/bad/<case>.pt2 and testdata/bad/README.md.  Deterministic for given
inputs.  Archives that are rewritten keep the root folder and entry order and
store every entry (method STORED); payload alignment is not preserved.
"""
import json
import os
import shutil
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
BAD = os.path.join(HERE, "bad")
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


# ---------------------------------------------------------------------------
# zip helpers
# ---------------------------------------------------------------------------
def read_entries(path):
    """[(name, bytes)] in archive order, plus the root folder name."""
    with zipfile.ZipFile(path) as zf:
        entries = [(i.filename, zf.read(i)) for i in zf.infolist()]
    root = entries[0][0].split("/")[0]
    return root, entries


def write_entries(path, entries):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            zi.compress_type = zipfile.ZIP_STORED
            zi.create_system = 0
            zi.external_attr = 0
            zf.writestr(zi, data)


def get(entries, name):
    for n, d in entries:
        if n == name:
            return d
    raise KeyError(name)


def replace(entries, name, data):
    assert any(n == name for n, _ in entries), name
    return [(n, data if n == name else d) for n, d in entries]


def remove(entries, name):
    assert any(n == name for n, _ in entries), name
    return [(n, d) for n, d in entries if n != name]


def dumps(obj):
    # torch writes model.json / payload configs with json.dumps defaults, so a
    # load/dump round trip is byte-identical apart from the edit.
    return json.dumps(obj).encode()


def edit_json(entries, name, fn):
    raw = get(entries, name)
    obj = json.loads(raw)
    if dumps(obj) != raw:
        print(f"note: {name} does not round-trip byte-identically through json", file=sys.stderr)
    fn(obj)
    return replace(entries, name, dumps(obj))


def central_directory(data):
    """[(cd_record_offset, name)] from the end-of-central-directory record (ZIP64 aware)."""
    eocd = data.rfind(b"PK\x05\x06")
    assert eocd >= 0, "no EOCD"
    n_entries, cd_size, cd_off = struct.unpack_from("<HII", data, eocd + 10)
    if cd_off == 0xFFFFFFFF or n_entries == 0xFFFF:
        loc = data.rfind(b"PK\x06\x07", 0, eocd)
        (z64_off,) = struct.unpack_from("<Q", data, loc + 8)
        assert data[z64_off:z64_off + 4] == b"PK\x06\x06"
        n_entries, cd_size, cd_off = struct.unpack_from("<QQQ", data, z64_off + 32)
    out, p = [], cd_off
    for _ in range(n_entries):
        assert data[p:p + 4] == b"PK\x01\x02", hex(p)
        nlen, xlen, clen = struct.unpack_from("<HHH", data, p + 28)
        out.append((p, data[p + 46:p + 46 + nlen].decode()))
        p += 46 + nlen + xlen + clen
    return out


# ---------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------
def node_by_name(model, name):
    for n in model["graph_module"]["graph"]["nodes"]:
        if n["name"] == name:
            return n
    raise KeyError(name)


def make_cases(mlp_path, llama_dyn_path):
    mlp_bytes = open(mlp_path, "rb").read()
    root, mlp = read_entries(mlp_path)
    MJ = f"{root}/models/model.json"
    WCFG = f"{root}/data/weights/model_weights_config.json"
    W0 = f"{root}/data/weights/weight_0"
    wcfg = json.loads(get(mlp, WCFG))["config"]
    w0_fqns = sorted(k for k, v in wcfg.items() if v["path_name"] == "weight_0")
    assert w0_fqns == ["fc1.weight"], w0_fqns  # f32[32,16], 2048 bytes
    cases = []  # (file name, bytes-or-entries, README line)

    # -- raw byte cases ----------------------------------------------------
    text = (b"This is not a zip archive; it is fixed text standing in for a corrupt .pt2 file.\n"
            b"0123456789abcdef" * 4 + b"\n")
    cases.append(("not_a_zip.pt2", text,
                  "plain ASCII text, no ZIP signatures at all (no local headers, no EOCD)"))

    half = len(mlp_bytes) // 2
    with zipfile.ZipFile(mlp_path) as zf:
        cut = [i.filename for i in zf.infolist() if i.header_offset < half][-1]
    cases.append(("truncated.pt2", mlp_bytes[:half],
                  f"first {half} of {len(mlp_bytes)} bytes of mlp.pt2: the central directory and "
                  f"EOCD are gone; the file ends inside entry `{cut}`"))

    # size_exceeds_file: patch weight_0's central-directory record in place
    data = bytearray(mlp_bytes)
    big = 4 * len(mlp_bytes)
    for off, name in central_directory(mlp_bytes):
        if name == W0:
            csz, usz = struct.unpack_from("<II", data, off + 20)
            assert csz == usz == 2048, (csz, usz)
            struct.pack_into("<II", data, off + 20, big, big)
            break
    else:
        raise KeyError(W0)
    cases.append(("size_exceeds_file.pt2", bytes(data),
                  f"`{W0}` (fc1.weight): central-directory compressed and uncompressed size patched "
                  f"from 2048 to {big} (> file size {len(mlp_bytes)}); local header and everything "
                  "else untouched (bytes of mlp.pt2 otherwise identical)"))

    # -- rewritten archives -------------------------------------------------
    cases.append(("missing_model_json.pt2", remove(mlp, MJ),
                  f"entry `{MJ}` removed"))

    garbage = b'{"graph_module": {"graph": {"inputs": [\n  {"as_tensor": {"name": "x"}},\n  @@@ not json @@@\n'
    cases.append(("invalid_json.pt2", replace(mlp, MJ, garbage),
                  f"`{MJ}` replaced by a truncated document `{{\"graph_module\": {{\"graph\": "
                  "{\"inputs\": [` + garbage `@@@ not json @@@` (serde: expected value at line 3 column 3)"))

    def major9(m):
        assert m["schema_version"]["major"] == 8
        m["schema_version"]["major"] = 9
    cases.append(("schema_major_9.pt2", edit_json(mlp, MJ, major9),
                  f"`{MJ}`: schema_version.major 8 -> 9 (minor unchanged)"))

    cases.append(("missing_weight_file.pt2", remove(mlp, W0),
                  f"entry `{W0}` removed; `{WCFG}` still maps fc1.weight to path_name weight_0"))

    cases.append(("short_weight.pt2", replace(mlp, W0, get(mlp, W0)[:1000]),
                  f"`{W0}` (fc1.weight, f32 sizes [32,16] strides [16,1] = 2048 bytes needed) "
                  "truncated to 1000 bytes (250 f32 elements)"))

    def dtype99(c):
        c["config"]["fc1.weight"]["tensor_meta"]["dtype"] = 99
    cases.append(("unknown_dtype.pt2", edit_json(mlp, WCFG, dtype99),
                  f"`{WCFG}`: fc1.weight tensor_meta.dtype 7 (FLOAT) -> 99 (no such ScalarType); "
                  "model.json's tensor_values for p_fc1_weight still say 7"))

    cases.append(("path_traversal.pt2", mlp + [(f"{root}/../evil", b"evil\n")],
                  f"extra last entry `{root}/../evil` (5 bytes) escapes the root folder"))

    def pickled(c):
        c["config"]["fc1.weight"]["use_pickle"] = True
    cases.append(("pickled_weight.pt2", edit_json(mlp, WCFG, pickled),
                  f"`{WCFG}`: fc1.weight use_pickle false -> true (payload `weight_0` is still raw f32 "
                  "bytes); a reader must refuse pickled payloads"))

    def dangling(m):
        nd = node_by_name(m, "relu")
        assert nd["inputs"][0]["name"] == "self"
        assert nd["inputs"][0]["arg"]["as_tensor"]["name"] == "addmm"
        nd["inputs"][0]["arg"]["as_tensor"]["name"] = "no_such_tensor"
    cases.append(("dangling_input.pt2", edit_json(mlp, MJ, dangling),
                  f"`{MJ}`: node `relu` (aten.relu.default), input `self` renamed from `addmm` to "
                  "`no_such_tensor`, which no node or graph input produces (node `addmm` is now unused)"))

    def duplicate(m):
        nodes = m["graph_module"]["graph"]["nodes"]
        first, second = nodes[0], nodes[1]
        assert first["name"] == "permute" and second["name"] == "addmm"
        assert second["outputs"] == [{"as_tensor": {"name": "addmm"}}]
        second["name"] = "permute"
        second["outputs"][0]["as_tensor"]["name"] = "permute"
        relu = node_by_name(m, "relu")  # keep the consumer pointing at addmm's (renamed) output
        relu["inputs"][0]["arg"]["as_tensor"]["name"] = "permute"
    cases.append(("duplicate_node_name.pt2", edit_json(mlp, MJ, duplicate),
                  f"`{MJ}`: second node (aten.addmm.default, was `addmm`) renamed to `permute` and its "
                  "output tensor renamed to `permute`, the same as the first node (aten.permute.default "
                  "`permute`); consumer `relu` now reads `permute`; tensor_values keeps a stale `addmm` entry"))

    # -- bad_sym_expr from llama_tiny_dyn -----------------------------------
    lroot, llama = read_entries(llama_dyn_path)
    LMJ = f"{lroot}/models/model.json"
    bad_expr = "Mul(Integer(2), "
    old = {}

    def symexpr(m):
        tv = m["graph_module"]["graph"]["tensor_values"]["input_ids"]
        sz = tv["sizes"][1]
        assert "as_expr" in sz, sz
        old["expr"] = sz["as_expr"]["expr_str"]
        sz["as_expr"]["expr_str"] = bad_expr
    edited = edit_json(llama, LMJ, symexpr)
    cases.append(("bad_sym_expr.pt2", edited,
                  f"derived from llama_tiny_dyn.pt2: `{LMJ}`: tensor_values[\"input_ids\"].sizes[1]"
                  f".as_expr.expr_str `{old['expr']}` replaced by the unparsable `{bad_expr}` "
                  "(unbalanced parenthesis); all other occurrences of the symbol are intact"))
    return cases


def main():
    mlp = os.path.join(MODELS, "mlp.pt2")
    llama = os.path.join(MODELS, "llama_tiny_dyn.pt2")
    for p in (mlp, llama):
        if not os.path.exists(p):
            sys.exit(f"{p} missing: run testdata/gen.py first")
    if os.path.isdir(BAD):
        shutil.rmtree(BAD)
    os.makedirs(BAD)
    cases = make_cases(mlp, llama)
    lines = ["# Malformed archives", "",
             "Generated by `python3 testdata/make_bad.py` from `testdata/models/mlp.pt2` "
             "(root folder `mlp/`; `bad_sym_expr.pt2` from `llama_tiny_dyn.pt2`, root "
             "`llama_tiny_dyn/`). Do not edit by hand. Rewritten archives keep the root folder and "
             "entry order with every entry STORED, but not the 64-byte payload alignment; "
             "`not_a_zip`, `truncated` and `size_exceeds_file` are byte-level edits. "
             "Each archive has exactly one defect:", ""]
    for fname, content, why in cases:
        path = os.path.join(BAD, fname)
        if isinstance(content, (bytes, bytearray)):
            with open(path, "wb") as f:
                f.write(content)
        else:
            write_entries(path, content)
        lines.append(f"- `{fname}`: {why}")
        print(f"{fname:28s} {os.path.getsize(path):8d} bytes")
    with open(os.path.join(BAD, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(r, f))
                for d in (MODELS, BAD) for r, _dirs, fs in os.walk(d) for f in fs)
    print(f"total test data size (models + bad): {total} bytes ({total / 2**20:.2f} MiB; budget 15 MB)")
    if total >= 15_000_000:
        sys.exit("ERROR: over the 15 MB budget")


if __name__ == "__main__":
    main()
