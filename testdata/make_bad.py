#!/usr/bin/env python3
"""Derive malformed .pt2 archives from the generated ones (stdlib only).

    python3 testdata/make_bad.py

Reads testdata/models/mlp.pt2 (and size_floats.pt2 for the symbolic cases), writes
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
def tv(model, name):
    return model["graph_module"]["graph"]["tensor_values"][name]


def edit_json_text(entries, name, fn):
    """Like edit_json, for edits (huge integers) that json round-trips exactly anyway."""
    obj = json.loads(get(entries, name))
    fn(obj)
    return replace(entries, name, dumps(obj))


def zip_bytes(entries, deflate=()):
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            zi.compress_type = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            zi.create_system = 0
            zi.external_attr = 0
            zf.writestr(zi, data)
    return buf.getvalue()


def mlp_bytes_with(entries, deflate, _method):
    return zip_bytes(entries, deflate)


def overlapping_entries(entries, root):
    """entries + `extra/outer`, whose data holds a complete local header and payload, plus a
    central record `extra/hidden` pointing inside it."""
    hidden_name = f"{root}/extra/hidden".encode()
    payload = b"hidden payload\n"
    import zlib
    crc = zlib.crc32(payload)
    local = struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, 0, 0, 0x21, crc, len(payload), len(payload),
                        len(hidden_name), 0) + hidden_name + payload
    data = zip_bytes(entries + [(f"{root}/extra/outer", local)])
    records = central_directory(data)
    outer_record = [off for off, n in records if n == f"{root}/extra/outer"][0]
    nlen, xlen, clen = struct.unpack_from("<HHH", data, outer_record + 28)
    (outer_header,) = struct.unpack_from("<I", data, outer_record + 42)
    onlen, oxlen = struct.unpack_from("<HH", data, outer_header + 26)
    inner_at = outer_header + 30 + onlen + oxlen
    assert data[inner_at:inner_at + 4] == b"PK\x03\x04"
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 20, 20, 0, 0, 0, 0x21, crc, len(payload),
                          len(payload), len(hidden_name), 0, 0, 0, 0, 0, inner_at) + hidden_name
    eocd = data.rfind(b"PK\x05\x06")
    n_disk, n_total, cd_size, cd_off = struct.unpack_from("<HHII", data, eocd + 8)
    cd_end = cd_off + cd_size
    new_eocd = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, n_disk + 1, n_total + 1, cd_size + len(central), cd_off, 0)
    return data[:cd_end] + central + new_eocd


def node_by_name(model, name):
    for n in model["graph_module"]["graph"]["nodes"]:
        if n["name"] == name:
            return n
    raise KeyError(name)


def make_cases(mlp_path, small_dyn_path, guarded_path):
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

    # -- zip structure --------------------------------------------------------
    cases.append(("empty_file.pt2", b"", "zero bytes"))
    cases.append(("no_entries.pt2", b"PK\x05\x06" + b"\x00" * 18,
                  "only an end-of-central-directory record that lists no entries"))
    cases.append(("duplicate_entry.pt2", mlp + [(W0, b"\x00" * 2048)],
                  f"a second entry named `{W0}` (2048 zero bytes) after the real one; readers that keep "
                  "the last of a name would read zeros for fc1.weight"))
    deflated = mlp_bytes_with(mlp, {MJ}, zipfile.ZIP_DEFLATED)
    cases.append(("compressed_entry.pt2", deflated, f"`{MJ}` stored with deflate compression (method 8)"))
    data = bytearray(mlp_bytes)
    with zipfile.ZipFile(mlp_path) as zf:
        w0_header = zf.getinfo(W0).header_offset
    assert data[w0_header + 30:w0_header + 30 + len(W0)] == W0.encode()
    data[w0_header + 30 + len(W0) - 1] = ord("9")
    cases.append(("local_header_mismatch.pt2", bytes(data),
                  f"the local header of `{W0}` names `{W0[:-1]}9`; its central-directory record is intact"))
    data = bytearray(mlp_bytes)
    records = dict((n, off) for off, n in central_directory(mlp_bytes))
    with zipfile.ZipFile(mlp_path) as zf:
        w1_data = zf.getinfo(f"{root}/data/weights/weight_1").header_offset
    struct.pack_into("<I", data, records[W0] + 42, w1_data)
    cases.append(("header_points_elsewhere.pt2", bytes(data),
                  f"the central record of `{W0}` points at the local header of `weight_1`"))
    inner = zip_bytes([("inner/archive_format", b"pt2")])
    nested = mlp + [(f"{root}/data/sample_inputs/nested.zip", inner)]
    nested_bytes = zip_bytes(nested)
    end = nested_bytes.rfind(b"PK\x01\x02", 0, nested_bytes.rfind(inner) + len(inner) + 1)
    cut_at = nested_bytes.rfind(inner) + len(inner)
    cases.append(("truncated_before_directory.pt2", nested_bytes[:cut_at],
                  "mlp.pt2 plus a last entry that is itself a small zip, cut right after that entry: the "
                  "outer directory is gone and the only end record left is the embedded zip's"))
    del end
    overlap = overlapping_entries(mlp, root)
    cases.append(("overlapping_entries.pt2", overlap,
                  f"an extra entry `{root}/extra/hidden` whose local header and data lie inside the data "
                  f"of entry `{root}/extra/outer`"))

    data = bytearray(mlp_bytes)
    with zipfile.ZipFile(mlp_path) as zf:
        info = zf.getinfo(W0)
    nlen, xlen = struct.unpack_from("<HH", data, info.header_offset + 26)
    data[info.header_offset + 30 + nlen + xlen + 100] ^= 0x10
    cases.append(("weight_bit_flip.pt2", bytes(data),
                  f"one bit of `{W0}` (fc1.weight, byte 100) flipped; sizes, names and the CRC-32 in the "
                  "directory untouched"))

    # -- container markers ------------------------------------------------------
    cases.append(("archive_format_pt3.pt2", replace(mlp, f"{root}/archive_format", b"pt3"),
                  "`archive_format` says `pt3`"))
    cases.append(("big_endian.pt2", replace(mlp, f"{root}/byteorder", b"big"), "`byteorder` says `big`"))
    cases.append(("missing_archive_format.pt2", remove(mlp, f"{root}/archive_format"),
                  "entry `archive_format` removed"))

    # -- JSON ----------------------------------------------------------------
    cases.append(("model_json_wrong_structure.pt2", replace(mlp, MJ, b'{"graph_module": 5}'),
                  "`model.json` is valid JSON of the wrong structure (`graph_module` is a number)"))
    cases.append(("model_json_binary.pt2", replace(mlp, MJ, bytes(range(256))),
                  "`model.json` replaced by 256 bytes 0x00..0xff"))
    cases.append(("weights_config_invalid_json.pt2", replace(mlp, WCFG, b'{"config": {'),
                  "the weights config is cut short"))

    def huge_size(m):
        tv(m, "relu")["sizes"][0] = {"as_int": 10 ** 30}
    cases.append(("size_too_large_for_i64.pt2", edit_json_text(mlp, MJ, huge_size),
                  "tensor_values[relu].sizes[0] is 10^30, which no 64-bit integer holds"))

    def major_string(m):
        m["schema_version"]["major"] = "8"
    cases.append(("schema_major_string.pt2", edit_json(mlp, MJ, major_string),
                  "schema_version.major is the string \"8\""))

    # -- declared types that the ops do not give (tensor_meta lies) -----------
    def lie(name, field, value, why):
        def fn(m):
            tv(m, name)[field] = value
        cases.append((f"{why}.pt2", edit_json(mlp, MJ, fn), f"tensor_values[{name}].{field} = {json.dumps(value)}"))
    lie("addmm", "dtype", 5, "addmm_declared_i64")
    lie("relu", "dtype", 6, "relu_declared_f16")
    lie("addmm", "sizes", [{"as_int": 4}, {"as_int": 33}], "addmm_declared_wider")
    lie("permute", "sizes", [{"as_int": 32}, {"as_int": 16}], "permute_declared_unpermuted")
    lie("relu", "sizes", [{"as_int": 4}, {"as_int": 32}, {"as_int": 1}], "relu_declared_rank3")
    lie("relu", "dtype", 99, "node_unknown_dtype")

    def permute_dims(m):
        node_by_name(m, "permute")["inputs"][1]["arg"]["as_ints"] = [0, 0]
    cases.append(("permute_repeated_dim.pt2", edit_json(mlp, MJ, permute_dims), "node `permute` dims [0, 0]"))

    def permute_dims_range(m):
        node_by_name(m, "permute")["inputs"][1]["arg"]["as_ints"] = [1, 5]
    cases.append(("permute_dim_out_of_range.pt2", edit_json(mlp, MJ, permute_dims_range),
                  "node `permute` dims [1, 5] on a 2-d tensor"))

    def addmm_operands(m):
        node_by_name(m, "addmm")["inputs"][1]["arg"]["as_tensor"]["name"] = "p_fc1_weight"
    cases.append(("addmm_wrong_operand.pt2", edit_json(mlp, MJ, addmm_operands),
                  "node `addmm` multiplies fc1.weight [32,16] by the permuted fc1.weight [16,32] (declared [4,32])"))

    def missing_arg(m):
        nd = node_by_name(m, "addmm")
        nd["inputs"] = [a for a in nd["inputs"] if a["name"] != "mat1"]
    cases.append(("missing_argument.pt2", edit_json(mlp, MJ, missing_arg), "node `addmm` lost its `mat1` argument"))

    def wrong_arg_kind(m):
        node_by_name(m, "permute")["inputs"][1]["arg"] = {"as_tensor": {"name": "x"}}
    cases.append(("argument_wrong_kind.pt2", edit_json(mlp, MJ, wrong_arg_kind),
                  "node `permute`'s `dims` is a tensor instead of a list of ints"))

    def output_twice(m):
        node_by_name(m, "permute_1")["outputs"][0]["as_tensor"]["name"] = "permute"
        node_by_name(m, "addmm_1")["inputs"][2]["arg"]["as_tensor"]["name"] = "permute"
    cases.append(("output_produced_twice.pt2", edit_json(mlp, MJ, output_twice),
                  "nodes `permute` and `permute_1` both produce tensor `permute`"))

    def no_tensor_values(m):
        del m["graph_module"]["graph"]["tensor_values"]["relu"]
    cases.append(("missing_tensor_values.pt2", edit_json(mlp, MJ, no_tensor_values),
                  "tensor_values has no entry for `relu`"))

    def control_name(m):
        nd = node_by_name(m, "relu")
        nd["name"] = "relu\x1b[31m\n" + "x" * 100_000
        nd["inputs"][0]["arg"]["as_tensor"]["name"] = "no_such_tensor"
    cases.append(("hostile_node_name.pt2", edit_json(mlp, MJ, control_name),
                  "node `relu` renamed to `relu` + ESC[31m + newline + 100,000 `x`, and reading a missing tensor"))

    # -- signature ---------------------------------------------------------------
    def unknown_param(m):
        m["graph_module"]["signature"]["input_specs"][0]["parameter"]["parameter_name"] = "nope.weight"
    cases.append(("signature_unknown_weight.pt2", edit_json(mlp, MJ, unknown_param),
                  "input spec 0 names parameter `nope.weight`, which no payload config holds"))

    def fewer_specs(m):
        m["graph_module"]["signature"]["input_specs"].pop(1)
    cases.append(("signature_missing_input_spec.pt2", edit_json(mlp, MJ, fewer_specs),
                  "the input spec of `p_fc1_bias` removed (4 specs for 5 graph inputs)"))

    def dangling_output(m):
        m["graph_module"]["signature"]["output_specs"][0]["user_output"]["arg"]["as_tensor"]["name"] = "nope"
    cases.append(("signature_dangling_output.pt2", edit_json(mlp, MJ, dangling_output),
                  "the user output names tensor `nope`"))

    def token_output(m):
        m["graph_module"]["signature"]["output_specs"].append({"token": {"arg": {"name": "tok"}}})
    cases.append(("signature_token_output.pt2", edit_json(mlp, MJ, token_output), "an effect-token output spec added"))

    def int_user_input(m):
        m["graph_module"]["signature"]["input_specs"][4]["user_input"]["arg"] = {"as_int": 3}
    cases.append(("signature_int_user_input.pt2", edit_json(mlp, MJ, int_user_input),
                  "the user input is an int instead of a tensor"))

    # -- payload configs ---------------------------------------------------------
    def meta_edit(why, fn, desc):
        def edit(c):
            fn(c["config"]["fc1.weight"]["tensor_meta"])
        cases.append((f"{why}.pt2", edit_json(mlp, WCFG, edit), f"`{WCFG}`: fc1.weight {desc}"))
    meta_edit("weight_config_shape", lambda t: t.update(sizes=[{"as_int": 16}, {"as_int": 32}],
                                                        strides=[{"as_int": 32}, {"as_int": 1}]),
              "sizes [16,32] strides [32,1] (the graph reads [32,16])")
    meta_edit("weight_config_dtype", lambda t: t.update(dtype=6), "dtype FLOAT -> HALF (the graph reads f32)")
    meta_edit("weight_config_strides", lambda t: t.update(strides=[{"as_int": 1}, {"as_int": 32}]),
              "strides [16,1] -> [1,32] (the graph's tensor_values say [16,1])")
    meta_edit("weight_offset_overflow", lambda t: t.update(storage_offset={"as_int": 2 ** 63 - 2}),
              "storage_offset 2^63 - 2")
    meta_edit("weight_stride_overflow", lambda t: t.update(strides=[{"as_int": 2 ** 62}, {"as_int": 1}]),
              "strides [2^62, 1]")
    meta_edit("weight_numel_overflow", lambda t: t.update(sizes=[{"as_int": 2 ** 40}, {"as_int": 2 ** 40}]),
              "sizes [2^40, 2^40]")
    meta_edit("weight_negative_size", lambda t: t.update(sizes=[{"as_int": -32}, {"as_int": 16}]), "sizes [-32, 16]")
    meta_edit("weight_symbolic_size", lambda t: t["sizes"].__setitem__(0, {"as_expr": {"expr_str": "Symbol('s0')"}}),
              "sizes[0] symbolic")
    meta_edit("weight_rank_mismatch", lambda t: t.update(strides=[{"as_int": 1}]), "2 sizes but 1 stride")

    def no_meta(c):
        c["config"]["fc1.weight"]["tensor_meta"] = None
    cases.append(("weight_config_no_meta.pt2", edit_json(mlp, WCFG, no_meta), "fc1.weight has no tensor_meta"))

    def other_path(c):
        c["config"]["fc1.weight"]["path_name"] = "weight_99"
    cases.append(("weight_config_wrong_path.pt2", edit_json(mlp, WCFG, other_path),
                  "fc1.weight's path_name is `weight_99`, which the archive lacks"))
    cases.append(("empty_weight.pt2", replace(mlp, W0, b""), f"`{W0}` emptied (0 of 2048 bytes)"))
    cases.append(("partial_element_weight.pt2", replace(mlp, W0, get(mlp, W0)[:2047]),
                  f"`{W0}` cut to 2047 bytes, not a whole number of f32 elements"))

    # -- sizes ---------------------------------------------------------------
    def deep_expr(m):
        tv(m, "relu")["sizes"][0] = {"as_expr": {"expr_str": "Add(Integer(1), " * 30000 + "Integer(1)" + ")" * 30000}}
    cases.append(("size_expr_too_deep.pt2", edit_json(mlp, MJ, deep_expr),
                  "tensor_values[relu].sizes[0] is a sympy expression nested 30,000 calls deep"))

    def overflow_expr(m):
        tv(m, "relu")["sizes"][0] = {"as_expr": {"expr_str": "FloorDiv(Integer(-9223372036854775808), Integer(-1))"}}
    cases.append(("size_expr_overflow.pt2", edit_json(mlp, MJ, overflow_expr),
                  "tensor_values[relu].sizes[0] is FloorDiv(-2^63, -1), which overflows"))

    # -- from a small dynamic model (size_floats: x is f32[s77, 3]) ---------------
    sroot, small_dyn = read_entries(small_dyn_path)
    SMJ = f"{sroot}/models/model.json"
    bad_expr = "Mul(Integer(2), "
    old = {}

    def symexpr(m):
        sz = m["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]
        assert "as_expr" in sz, sz
        old["expr"] = sz["as_expr"]["expr_str"]
        sz["as_expr"]["expr_str"] = bad_expr
    edited = edit_json(small_dyn, SMJ, symexpr)
    cases.append(("bad_sym_expr.pt2", edited,
                  f"derived from size_floats.pt2: `{SMJ}`: tensor_values[\"x\"].sizes[0]"
                  f".as_expr.expr_str `{old['expr']}` replaced by the unparsable `{bad_expr}` "
                  "(unbalanced parenthesis); all other occurrences of the symbol are intact"))

    # -- range constraints and outputs: accepted before although their meaning changed ------
    def ranged(lo, hi):
        def edit(m):
            m["range_constraints"]["s77"] = {"min_val": lo, "max_val": hi}
        return edit
    for fname, lo, hi, why in [
        ("range_min_above_max.pt2", 600, 64, "minimum 600 above its maximum 64"),
        ("range_min_negative.pt2", -1, 64, "minimum -1: a size cannot be negative"),
        ("range_min_int64.pt2", -(2**63), 64, "minimum -2^63 (i64::MIN)"),
    ]:
        cases.append((fname, edit_json(small_dyn, SMJ, ranged(lo, hi)),
                      f"derived from size_floats.pt2: `{SMJ}`: range_constraints[\"s77\"] has {why}"))

    # -- guards: never ignored (guarded_dyn: x is f32[3, s27], guard L['x'].size()[1] != 16) -----
    groot, guarded = read_entries(guarded_path)
    GMJ = f"{groot}/models/model.json"
    for fname, guard, why in [
        ("guard_outside_grammar.pt2", "L['x'].size()[1] !! 16", "`!!` is not Python"),
        ("guard_unknown_input.pt2", "L['y'].size()[0] == 3", "it reads `y`, which the program does not take"),
        ("guard_dim_out_of_range.pt2", "L['x'].size()[5] == 3", "it reads dim 5 of the 2-dim `x`"),
    ]:
        def with_guard(m, guard=guard):
            m["guards_code"] = [guard]
        cases.append((fname, edit_json(guarded, GMJ, with_guard),
                      f"derived from guarded_dyn.pt2: `{GMJ}`: guards_code is [\"{guard}\"]: {why}"))

    def drop_output(m):
        m["graph_module"]["graph"]["outputs"] = []
    cases.append(("outputs_drop_a_spec.pt2", edit_json(mlp, MJ, drop_output),
                  "the graph returns nothing while its output specs still name `addmm_1` as the user output"))
    return cases


def main():
    mlp = os.path.join(MODELS, "mlp.pt2")
    small_dyn = os.path.join(MODELS, "size_floats.pt2")
    guarded = os.path.join(MODELS, "guarded_dyn.pt2")
    for p in (mlp, small_dyn, guarded):
        if not os.path.exists(p):
            sys.exit(f"{p} missing: run testdata/gen.py first")
    if os.path.isdir(BAD):
        shutil.rmtree(BAD)
    os.makedirs(BAD)
    cases = make_cases(mlp, small_dyn, guarded)
    lines = ["# Malformed archives", "",
             "Generated by `python3 testdata/make_bad.py` from `testdata/models/mlp.pt2` "
             "(root folder `mlp/`; `bad_sym_expr.pt2` and the `range_*` cases from `size_floats.pt2`, "
             "root `size_floats/`; the `guard_*` cases from `guarded_dyn.pt2`, root `guarded_dyn/`). Do not edit by hand. Rewritten archives keep the root folder and "
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
    print(f"total test data size (models + bad): {total} bytes ({total / 2**20:.2f} MiB; budget 32 MiB)")
    if total >= 32 * 2**20:
        sys.exit("ERROR: over the 32 MiB budget")


if __name__ == "__main__":
    main()
