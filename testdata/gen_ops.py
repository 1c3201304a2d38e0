#!/usr/bin/env python3
"""Generate single-op test cases for every Core ATen op of torch 2.15.

Run with the pinned venv (see testdata/README.md, "Op cases"):

    python testdata/gen_ops.py [--out testdata/ops] [op ...]

For each op `<name>.<overload>` of the Core ATen list (OP_LIST below, the 189
lines of core_aten_ops.txt) this builds a tiny nn.Module whose forward takes the
inputs of several samples at once and returns `torch.ops.aten.<name>.<overload>`
applied to each sample (outputs in sample order, a multi-output op contributes
all its tensor outputs), then (torch.manual_seed(0) before everything):

    ep = torch.export.export(module, inputs, dynamic_shapes=..., strict=False)
    ep = ep.run_decompositions(default_decompositions() minus the op under test)
    torch.export.save(ep, "<out>/<op>.pt2")

checks that the op target is in the graph, reloads the archive and compares it
with eager, and writes

    <out>/<op>/in_<i>.npy    user inputs, graph user-input order (bf16 as f32)
    <out>/<op>/out_<i>.npy   eager outputs in order (bf16 widened to f32;
                             Python-scalar outputs as 0-d arrays)
    <out>/cases.json         one entry per op (see testdata/README.md)

An op whose target cannot be kept in the graph is still listed, with status
"refused" and the reason; its archive is kept when export succeeded with a
substitute target ("archive" names it, "graph_target" says what is there).
"""
import argparse
import json
import math
import os
import shutil
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
from torch.export import Dim

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen import compact_json, strip_local_paths  # noqa: E402  (same folder)

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")
F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
I64, I32, I16, I8, U8, BOOL, C64 = (torch.int64, torch.int32, torch.int16, torch.int8,
                                    torch.uint8, torch.bool, torch.complex64)
BUDGET = 10_000_000
EDGE_BUDGET = 4_000_000

# The Core ATen ops of torch 2.15 (core_aten_ops.txt), in its order.
OP_LIST = """
_adaptive_avg_pool2d.default _adaptive_avg_pool2d_backward.default _adaptive_avg_pool3d.default
_cdist_forward.default _embedding_bag.default _fft_c2r.default _fft_r2c.default
_local_scalar_dense.default _log_softmax.default _native_batch_norm_legit.default
_native_batch_norm_legit.no_stats _native_batch_norm_legit_no_training.default
_pdist_forward.default _softmax.default _to_copy.default abs.default acos.default acosh.default
add.Scalar add.Tensor addmm.default alias.default amax.default amin.default any.default any.dim
any.dims arange.start_step argmax.default argmin.default as_strided.default asin.default
asinh.default atan.default atan2.default atan2.out atanh.default avg_pool2d.default
avg_pool2d_backward.default avg_pool3d.default bitwise_and.Scalar bitwise_and.Tensor
bitwise_not.default bitwise_or.Scalar bitwise_or.Tensor bitwise_xor.Scalar bitwise_xor.Tensor
bmm.default cat.default ceil.default clamp.Tensor clamp.default clone.default col2im.default
constant_pad_nd.default convolution.default convolution_backward.default copy.default cos.default
cosh.default cumsum.default diagonal.default div.Scalar div.Scalar_mode div.Tensor div.Tensor_mode
elu.default embedding.default embedding_dense_backward.default empty.memory_format
empty_strided.default eq.Scalar eq.Tensor erf.default exp.default expand.default expm1.default
fill.Scalar flip.default floor.default fmod.Scalar fmod.Tensor full.default full_like.default
gather.default ge.Scalar ge.Tensor gelu.default grid_sampler_2d.default gt.Scalar gt.Tensor
hardtanh.default index.Tensor index_put.default index_select.default isinf.default isnan.default
le.Scalar le.Tensor leaky_relu.default log.default log10.default log1p.default log2.default
logical_and.default logical_not.default logical_or.default logical_xor.default lt.Scalar lt.Tensor
masked_scatter.default max.dim max_pool2d_with_indices.default
max_pool2d_with_indices_backward.default max_pool3d_with_indices.default maximum.default
mean.default mean.dim min.dim minimum.default mm.default mul.Scalar mul.Tensor
native_dropout.default native_group_norm.default native_group_norm_backward.default
native_layer_norm.default native_layer_norm_backward.default ne.Scalar ne.Tensor neg.default
nonzero.default permute.default pow.Scalar pow.Tensor_Scalar pow.Tensor_Tensor prod.default
prod.dim_int rand.default randn.default randperm.default reciprocal.default
reflection_pad1d.default reflection_pad2d.default reflection_pad3d.default relu.default
remainder.Scalar remainder.Tensor repeat.default replication_pad2d.default
replication_pad3d.default round.default rsqrt.default scalar_tensor.default scatter.src
scatter.value scatter_add.default scatter_reduce.two select.int select_scatter.default
sigmoid.default sign.default sin.default sinh.default slice.Tensor slice_scatter.default
sort.default split_with_sizes.default sqrt.default squeeze.dim squeeze.dims sub.Scalar sub.Tensor
sum.dim_IntList sym_numel.default sym_size.int sym_storage_offset.default sym_stride.int
tan.default tanh.default topk.default trunc.default unsqueeze.default upsample_bilinear2d.vec
upsample_nearest2d.vec var.correction var.dim view.default where.self
""".split()

DT = {F32: "f32", F16: "f16", BF16: "bf16", F64: "f64", I64: "i64", I32: "i32", I16: "i16",
      I8: "i8", U8: "u8", BOOL: "bool", C64: "c64", torch.complex128: "c128"}

# relative tolerances (numpy.allclose(got, ref, rtol=tol, atol=tol, equal_nan=True)),
# by output dtype; "ew" for element-wise ops, "red" for reductions, matmuls, convs, norms
TOL = {
    "ew": {"f32": 1e-5, "f64": 1e-12, "f16": 1e-2, "bf16": 2e-2, "c64": 1e-5},
    "red": {"f32": 1e-4, "f64": 1e-10, "f16": 1e-2, "bf16": 2e-2, "c64": 1e-4},
}


def qualified(name):
    """`add.Tensor` -> `aten.add.Tensor`; names with a namespace (`prims.collapse.default`) as
    they are"""
    return name if name.count(".") == 2 else f"aten.{name}"


def opobj(name):
    ns, n, o = qualified(name).split(".")
    return getattr(getattr(getattr(torch.ops, ns), n), o)


# ---------------------------------------------------------------------------
# sample inputs (the global RNG, seeded with torch.manual_seed(0) per op)
# ---------------------------------------------------------------------------
def U(*shape, lo=-2.0, hi=2.0, dtype=F32):
    """uniform [lo, hi), made in f32 then cast"""
    return torch.empty(shape, dtype=F32).uniform_(lo, hi).to(dtype)


def N(*shape, dtype=F32):
    return torch.randn(shape).to(dtype)


def I(lo, hi, *shape, dtype=I64):  # noqa: E743
    return torch.randint(lo, hi, shape).to(dtype)


def B(*shape):
    return torch.rand(shape) > 0.5


def T(v, dtype=F32):
    return torch.tensor(v, dtype=dtype)


class S:
    """One sample: a description, its user inputs and fn(*inputs) -> output(s)."""

    def __init__(self, desc, inputs, fn, dyn=None, moments=None, note=None):
        self.desc, self.inputs, self.fn = desc, list(inputs), fn
        self.dyn = dyn or [None] * len(self.inputs)  # per input: {dim: Dim} or None
        self.moments, self.note = moments, note


SPECS = {}


def reg(name, build, tol="ew", random=False, data_dependent=False, backward=False,
        compare="values", note=None):
    assert name not in SPECS, name
    SPECS[name] = dict(build=build, tol=tol, random=random, data_dependent=data_dependent,
                       backward=backward, compare=compare, note=note)


def fmt(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == 0 and math.copysign(1, v) < 0:
            return "-0"
        return f"{v:g}"
    return str(v)


def vals(vs):
    return "[" + ", ".join(fmt(v) for v in vs) + "]"


# ---------------------------------------------------------------------------
# element-wise unary
# ---------------------------------------------------------------------------
def unary(name, specials, lo=-2.0, hi=2.0, ints=True, half=True, boolean=False, int_desc=None,
          int_dtype=I64, int_range=(-5, 6), complex_desc=None):
    op = opobj(name)

    def build():
        s = [
            S(f"f32 edge values {vals(specials)}", [T(specials)], op),
            S("f32[3,4] non-contiguous (x.t() of f32[4,3] inside forward)",
              [U(4, 3, lo=lo, hi=hi)], lambda x: op(x.t())),
            S("f32 0-d", [U(lo=lo, hi=hi)], op),
            S("f32[0,3] zero-size", [U(0, 3)], op),
        ]
        if half:
            s.append(S("f16[2,3]", [U(2, 3, lo=lo, hi=hi, dtype=F16)], op))
            s.append(S("bf16[2,3] (in .npy as f32)", [U(2, 3, lo=lo, hi=hi, dtype=BF16)], op))
        if ints:
            s.append(S(int_desc or f"{DT[int_dtype]}[5] (int input)",
                       [I(int_range[0], int_range[1], 5, dtype=int_dtype)], op))
        if boolean:
            s.append(S("bool[4] (bool input)", [T([True, False, True, False], BOOL)], op))
        if complex_desc:
            s.append(S(complex_desc, [torch.complex(U(2, 3, lo=lo, hi=hi), U(2, 3, lo=lo, hi=hi))], op))
        return s
    reg(name, build)


SP = [NAN, INF, -INF, 0.0, -0.0]
unary("abs.default", SP + [-1.5, 2.25, -3e38], int_desc="i64[5] stays i64",
      complex_desc="c64[2,3] -> f32: |a+bi| reads both parts (in .npy as complex64)")
unary("neg.default", SP + [-1.5, 2.25], int_desc="i64[5] stays i64")
unary("acos.default", SP + [1.0, -1.0, 0.5, -0.75, 1.5], lo=-1, hi=1,
      int_desc="i64[5] -> f32", int_range=(-1, 2))
unary("asin.default", SP + [1.0, -1.0, 0.5, -0.75, 1.5], lo=-1, hi=1,
      int_desc="i64[5] -> f32", int_range=(-1, 2))
unary("atanh.default", SP + [1.0, -1.0, 0.5, -0.75, 1.5], lo=-0.99, hi=0.99,
      int_desc="i64[5] -> f32 (+-1 -> +-inf)", int_range=(-1, 2))
unary("acosh.default", SP + [1.0, 1.5, 10.0, 0.5, 1e30], lo=1.0, hi=4.0,
      int_desc="i64[5] -> f32", int_range=(0, 5))
unary("asinh.default", SP + [1.0, -1.5, 10.0, 1e30], int_desc="i64[5] -> f32")
unary("atan.default", SP + [1.0, -1.5, 1e30], int_desc="i64[5] -> f32")
unary("cos.default", SP + [1.0, -1.5, 3.14159265, 100.0], lo=-4, hi=4, int_desc="i64[5] -> f32")
unary("sin.default", SP + [1.0, -1.5, 3.14159265, 100.0], lo=-4, hi=4, int_desc="i64[5] -> f32")
unary("tan.default", SP + [1.0, -1.2, 0.5, 3.0], lo=-1.4, hi=1.4, int_desc="i64[5] -> f32",
      int_range=(-3, 4))
unary("cosh.default", SP + [1.0, -1.5, 10.0, 100.0], int_desc="i64[5] -> f32")
unary("sinh.default", SP + [1.0, -1.5, 10.0, -100.0], int_desc="i64[5] -> f32")
unary("tanh.default", SP + [1.0, -1.5, 20.0, -20.0], int_desc="i64[5] -> f32")
unary("sigmoid.default", SP + [1.0, -1.5, 20.0, -100.0], int_desc="i64[5] -> f32")
unary("erf.default", SP + [1.0, -0.5, 3.0, -6.0], int_desc="i64[5] -> f32")
unary("exp.default", SP + [1.0, -1.5, 88.0, 89.0, -104.0, 1e-7], int_desc="i64[5] -> f32",
      boolean=True)
unary("expm1.default", SP + [1.0, -1.5, 1e-7, -1e-6, 89.0], int_desc="i64[5] -> f32")
unary("log.default", SP + [1.0, 2.718281828, -1.0, 1e-30, 1e30], lo=0.01, hi=4,
      int_desc="i64[5] -> f32 (0 -> -inf)", int_range=(0, 10))
unary("log10.default", SP + [1.0, 100.0, -1.0, 1e-30], lo=0.01, hi=4,
      int_desc="i64[5] -> f32 (0 -> -inf)", int_range=(0, 10))
unary("log2.default", SP + [1.0, 8.0, -1.0, 1e-30], lo=0.01, hi=4,
      int_desc="i64[5] -> f32 (0 -> -inf)", int_range=(0, 10))
unary("log1p.default", SP + [-1.0, -2.0, 1e-7, -1e-7, 1e30], lo=-0.9, hi=4,
      int_desc="i64[5] -> f32 (-1 -> -inf)", int_range=(-1, 10))
unary("sqrt.default", SP + [1.0, 2.0, -1.0, 1e-30], lo=0, hi=4,
      int_desc="i64[5] -> f32 (negative -> nan)", int_range=(-2, 10))
unary("rsqrt.default", SP + [1.0, 4.0, -1.0, 1e-30], lo=0.01, hi=4,
      int_desc="i64[5] -> f32 (0 -> inf)", int_range=(0, 10))
unary("reciprocal.default", SP + [1.0, -4.0, 3.0, 1e-39], int_desc="i64[5] -> f32 (0 -> inf)")
RND = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.7, 1e20, -3.5]
unary("round.default", SP + RND, lo=-4, hi=4, int_desc="i64[5] stays i64")
unary("ceil.default", SP + RND, lo=-4, hi=4, int_desc="i64[5] stays i64")
unary("floor.default", SP + RND, lo=-4, hi=4, int_desc="i64[5] stays i64")
unary("trunc.default", SP + RND, lo=-4, hi=4, int_desc="i64[5] stays i64")
unary("sign.default", SP + [-1.5, 2.25, 1e-40], int_desc="i64[5] stays i64", boolean=True)
unary("relu.default", SP + [-1.5, 2.25], int_desc="i64[5] stays i64")
unary("isinf.default", SP + [1.0, 3e38, -3e38], int_desc="i64[5] -> bool", boolean=True)
unary("isnan.default", SP + [1.0, 3e38], int_desc="i64[5] -> bool", boolean=True)
unary("logical_not.default", SP + [1.0, -2.0], int_desc="i64[5] -> bool", boolean=True)


def build_bitwise_not():
    op = aten.bitwise_not.default
    return [
        S("i64[6] incl. 0, -1, min, max", [T([0, -1, 5, -6, 2**63 - 1, -2**63], I64)], op),
        S("i32[2,3] non-contiguous (x.t() inside forward)", [I(-100, 100, 3, 2, dtype=I32)],
          lambda x: op(x.t())),
        S("u8[4] (0, 1, 127, 255)", [T([0, 1, 127, 255], U8)], op),
        S("i8[3]", [T([-128, 0, 127], I8)], op),
        S("bool[4] (logical not)", [T([True, False, True, False], BOOL)], op),
        S("i64 0-d", [T(7, I64)], op),
    ]


reg("bitwise_not.default", build_bitwise_not)


# activation-style unaries with Scalar parameters
def build_gelu():
    op = aten.gelu.default
    sp = SP + [1.0, -1.5, 5.0, -5.0]
    return [
        S(f"approximate='none' (erf), f32 {vals(sp)}", [T(sp)], op),
        S(f"approximate='tanh', f32 {vals(sp)}", [T(sp)], lambda x: op(x, approximate="tanh")),
        S("approximate='none', f32[3,4] non-contiguous (x.t())", [N(4, 3)], lambda x: op(x.t())),
        S("approximate='tanh', bf16[2,3] (in .npy as f32)", [N(2, 3, dtype=BF16)],
          lambda x: op(x, approximate="tanh")),
        S("approximate='none', f16[5]", [N(5, dtype=F16)], op),
    ]


def build_elu():
    op = aten.elu.default
    sp = SP + [1.0, -1.5, -20.0]
    return [
        S(f"defaults (alpha=1, scale=1, input_scale=1), f32 {vals(sp)}", [T(sp)], op),
        S("alpha=0.5, scale=2, input_scale=1.5 (Python scalars)", [N(3, 4)],
          lambda x: op(x, 0.5, 2, 1.5)),
        S("SELU constants alpha=1.6732632, scale=1.0507010", [N(2, 5)],
          lambda x: op(x, 1.6732632423543772, 1.0507009873554805)),
        S("f16[4] defaults", [N(4, dtype=F16)], op),
    ]


def build_leaky_relu():
    op = aten.leaky_relu.default
    sp = SP + [1.0, -1.5]
    return [
        S(f"default negative_slope=0.01, f32 {vals(sp)}", [T(sp)], op),
        S("negative_slope=0.2, f32[3,4] non-contiguous (x.t())", [N(4, 3)],
          lambda x: op(x.t(), 0.2)),
        S("negative_slope=-0.5 (negative slope)", [N(6)], lambda x: op(x, -0.5)),
        S("bf16[2,3] (in .npy as f32), negative_slope=0.1", [N(2, 3, dtype=BF16)],
          lambda x: op(x, 0.1)),
        S("f32 0-d", [T(-3.0)], op),
    ]


def build_hardtanh():
    op = aten.hardtanh.default
    sp = SP + [1.0, -1.5, 0.5, -0.99]
    return [
        S(f"defaults min_val=-1, max_val=1, f32 {vals(sp)}", [T(sp)], op),
        S("min_val=0, max_val=6 (relu6)", [U(3, 4, lo=-3, hi=9)], lambda x: op(x, 0.0, 6.0)),
        S("int scalars min_val=-2, max_val=2 on f32[2,5]", [U(2, 5, lo=-4, hi=4)],
          lambda x: op(x, -2, 2)),
        S("i64[6] (int input)", [T([-5, -1, 0, 1, 2, 7], I64)], op),
        S("f16[4]", [U(4, lo=-3, hi=3, dtype=F16)], op),
    ]


reg("gelu.default", build_gelu)
reg("elu.default", build_elu)
reg("leaky_relu.default", build_leaky_relu)
reg("hardtanh.default", build_hardtanh)


# ---------------------------------------------------------------------------
# element-wise binary, Tensor x Tensor
# ---------------------------------------------------------------------------
BA = [NAN, INF, -INF, 0.0, -0.0, 1.5, -2.0, INF, 3.0, 1.0]
BB = [1.0, INF, 2.0, 0.0, 1.0, NAN, -0.0, -INF, -3.0, 0.5]


def binary(name, kind="arith", ints=True, boolean=False, extra=None, half=True,
           int_lo=-8, int_hi=9, int_b_nonzero=False, pos=False):
    op = opobj(name)

    def build():
        lo = 0.1 if pos else -2.0
        s = [
            S("broadcast f32[3,1] x f32[4] -> [3,4]", [U(3, 1, lo=lo), U(4, lo=lo)], op),
            S(f"f32 special values a={vals(BA)} b={vals(BB)}", [T(BA), T(BB)], op),
            S("non-contiguous f32[3,4] (a.t() of [4,3] inside forward) x f32[3,4]",
              [U(4, 3, lo=lo), U(3, 4, lo=lo)], lambda a, b: op(a.t(), b)),
            S("0-d f64 tensor x f32[3] (0-d does not promote the dim'd f32: out f32)",
              [T(1.25, F64), U(3, lo=lo)], op),
            S("zero-size broadcast f32[0,1] x f32[3] -> [0,3]", [U(0, 1), U(3)], op),
        ]
        if ints:
            ib = I(int_lo, int_hi, 2, 3)
            if int_b_nonzero:
                ib = torch.where(ib == 0, torch.ones_like(ib), ib)
            s.append(S("i64[2,3] x i64[2,3]", [I(int_lo, int_hi, 2, 3), ib], op))
            s.append(S("mixed i32[4] x f32[4] -> f32", [I(1, 9, 4, dtype=I32), U(4, lo=lo)], op))
        if half:
            s.append(S("f16[2,3] x f16[3]", [U(2, 3, lo=lo, dtype=F16), U(3, lo=lo, dtype=F16)],
                       op))
            s.append(S("bf16[2,3] x bf16[2,3] (in .npy as f32)",
                       [U(2, 3, lo=lo, dtype=BF16), U(2, 3, lo=lo, dtype=BF16)], op))
        if boolean:
            s.append(S("bool[4] x bool[4]", [T([True, True, False, False], BOOL),
                                             T([True, False, True, False], BOOL)], op))
        if extra:
            s.extend(extra())
        return s
    reg(name, build)


def add_extra(op):
    return lambda: [
        S("alpha=2 (Python int) f32[3] x f32[3]", [U(3), U(3)], lambda a, b: op(a, b, alpha=2)),
        S("alpha=-0.5 (Python float) f32[2,2] x f32[2]", [U(2, 2), U(2)],
          lambda a, b: op(a, b, alpha=-0.5)),
        S("alpha=3 i64[3] x i64[3]", [I(-5, 5, 3), I(-5, 5, 3)], lambda a, b: op(a, b, alpha=3)),
    ]


binary("add.Tensor", boolean=True, extra=add_extra(aten.add.Tensor))
binary("sub.Tensor", extra=add_extra(aten.sub.Tensor))
binary("mul.Tensor", boolean=True)
binary("div.Tensor", extra=lambda: [
    S("i64 / i64 true division -> f32 (7/2, -7/2, 1/3, 0/5)",
      [T([7, -7, 1, 0], I64), T([2, 2, 3, 5], I64)], aten.div.Tensor)])
binary("atan2.default", extra=lambda: [
    S("signed zeros and infinities: atan2(+-0, +-0), atan2(+-inf, +-inf)",
      [T([0.0, 0.0, -0.0, -0.0, INF, INF, -INF, 1.0]),
       T([0.0, -0.0, 0.0, -0.0, INF, -INF, INF, -INF])], aten.atan2.default)])
binary("maximum.default", boolean=True)
binary("minimum.default", boolean=True)
binary("pow.Tensor_Tensor", pos=False, int_lo=0, int_hi=5, extra=lambda: [
    S("negative base with fractional/integral exponents, 0^0, 0^-1",
      [T([-2.0, -2.0, 0.0, 0.0, -8.0, 4.0, 1.0, NAN]),
       T([0.5, 3.0, 0.0, -1.0, 1 / 3, -0.5, NAN, 0.0])], aten.pow.Tensor_Tensor)])


def fmod_extra(op):
    return lambda: [
        S("sign rules, f32: a=[5.5,-5.5,5.5,-5.5,3,-3,0] b=[2,2,-2,-2,0,1.5,-1]",
          [T([5.5, -5.5, 5.5, -5.5, 3.0, -3.0, 0.0]), T([2.0, 2.0, -2.0, -2.0, 0.0, 1.5, -1.0])],
          op),
        S("sign rules, i64: a=[7,-7,7,-7,6,-6] b=[3,3,-3,-3,3,-3]",
          [T([7, -7, 7, -7, 6, -6], I64), T([3, 3, -3, -3, 3, -3], I64)], op),
    ]


binary("fmod.Tensor", int_b_nonzero=True, extra=fmod_extra(aten.fmod.Tensor))
binary("remainder.Tensor", int_b_nonzero=True, extra=fmod_extra(aten.remainder.Tensor))


def build_div_mode():
    op = aten.div.Tensor_mode
    a = [7.0, -7.0, 7.0, -7.0, 2.5, -2.5, 1.0, -1.0, 0.0, NAN, INF]
    b = [2.0, 2.0, -2.0, -2.0, 0.5, 1.0, 0.0, 0.0, 0.0, 1.0, 2.0]
    ia, ib = T([7, -7, 7, -7, 6, -6, 0], I64), T([2, 2, -2, -2, 3, 4, 5], I64)
    return [
        S(f"rounding_mode='floor' f32 a={vals(a)} b={vals(b)}", [T(a), T(b)],
          lambda x, y: op(x, y, rounding_mode="floor")),
        S(f"rounding_mode='trunc' f32 a={vals(a)} b={vals(b)}", [T(a), T(b)],
          lambda x, y: op(x, y, rounding_mode="trunc")),
        S("rounding_mode=None (true division) broadcast f32[3,1] x f32[4]", [U(3, 1), U(4)],
          lambda x, y: op(x, y, rounding_mode=None)),
        S("rounding_mode='floor' i64 (stays i64; -7//2 = -4)", [ia, ib],
          lambda x, y: op(x, y, rounding_mode="floor")),
        S("rounding_mode='trunc' i64 (stays i64; -7/2 -> -3)", [ia, ib],
          lambda x, y: op(x, y, rounding_mode="trunc")),
        S("rounding_mode=None i64 -> f32", [ia, ib], lambda x, y: op(x, y, rounding_mode=None)),
        S("rounding_mode='floor' bf16[4] (in .npy as f32)",
          [T([7.0, -7.0, 5.0, -3.0], BF16), T([2.0, 2.0, -3.0, 2.0], BF16)],
          lambda x, y: op(x, y, rounding_mode="floor")),
    ]


reg("div.Tensor_mode", build_div_mode)


def compare_op(name):
    op = opobj(name)

    def build():
        return [
            S("broadcast f32[3,1] x f32[4] -> bool[3,4]", [I(-2, 3, 3, 1).float(), I(-2, 3, 4).float()],
              op),
            S(f"f32 special values a={vals(BA)} b={vals(BB)}", [T(BA), T(BB)], op),
            S("i64[2,3] x i64[2,3]", [I(-2, 3, 2, 3), I(-2, 3, 2, 3)], op),
            S("mixed i64[4] x f32[4] (compared in f32)", [T([1, 2, 3, 4], I64),
                                                        T([1.0, 2.5, 2.0, 4.0])], op),
            S("bool[4] x bool[4]", [T([True, True, False, False], BOOL),
                                    T([True, False, True, False], BOOL)], op),
            S("f16[3] x f16 0-d", [T([1.0, 2.0, 3.0], F16), T(2.0, F16)], op),
            S("bf16[3] x bf16[3] (in .npy as f32)", [T([1.0, 2.0, 3.0], BF16),
                                                     T([1.0, 3.0, 2.0], BF16)], op),
        ]
    reg(name, build)


for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    compare_op(f"{_n}.Tensor")


def compare_scalar(name):
    op = opobj(name)

    def build():
        return [
            S("f32[8] specials vs Python float 1.5", [T([NAN, INF, -INF, 0.0, -0.0, 1.5, 2.0, 1.0])],
              lambda x: op(x, 1.5)),
            S("i64[5] vs Python float 2.5 (compared in f32)", [T([1, 2, 3, 4, -3], I64)],
              lambda x: op(x, 2.5)),
            S("i64[5] vs Python int 2", [T([1, 2, 3, 4, -3], I64)], lambda x: op(x, 2)),
            S("f32[2,3] non-contiguous (x.t()) vs 0", [N(3, 2)], lambda x: op(x.t(), 0)),
            S("bool[4] vs True", [T([True, False, True, False], BOOL)], lambda x: op(x, True)),
            S("f16[3] vs 0.1 (0.1 rounded to f16 first)", [T([0.0999, 0.1, 0.1001], F16)],
              lambda x: op(x, 0.1)),
        ]
    reg(name, build)


for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    compare_scalar(f"{_n}.Scalar")


def logical(name):
    op = opobj(name)

    def build():
        return [
            S("bool[4] x bool[4]", [T([True, True, False, False], BOOL),
                                    T([True, False, True, False], BOOL)], op),
            S("broadcast bool[3,1] x bool[4]", [B(3, 1), B(4)], op),
            S("f32 truthiness (nan and -0 count: nan true, -0 false)",
              [T([NAN, -0.0, 0.0, 1.0, INF]), T([1.0, 1.0, 1.0, 0.0, -INF])], op),
            S("mixed i64[4] x f32[4]", [T([0, 1, 2, 0], I64), T([0.0, 0.0, 0.5, 3.0])], op),
            S("bool[3,2] non-contiguous (x.t()) x bool[3,2]", [B(2, 3), B(3, 2)],
              lambda a, b: op(a.t(), b)),
        ]
    reg(name, build)


for _n in ("logical_and.default", "logical_or.default", "logical_xor.default"):
    logical(_n)


def bitwise_tensor(name):
    op = opobj(name)

    def build():
        return [
            S("i64[6] x i64[6] incl. negatives and min/max",
              [T([0, -1, 5, -6, 2**63 - 1, -2**63], I64), T([-1, -1, 3, 12, 255, -1], I64)], op),
            S("broadcast i32[3,1] x i32[4]", [I(-50, 50, 3, 1, dtype=I32), I(-50, 50, 4, dtype=I32)],
              op),
            S("u8[4] x u8[4]", [T([0, 1, 170, 255], U8), T([255, 3, 85, 15], U8)], op),
            S("bool[4] x bool[4]", [T([True, True, False, False], BOOL),
                                    T([True, False, True, False], BOOL)], op),
            S("mixed i8[3] x i64[3] -> i64", [T([-128, 5, 127], I8), T([1, -1, 256], I64)], op),
        ]
    reg(name, build)


def bitwise_scalar(name):
    op = opobj(name)

    def build():
        return [
            S("i64[5] with Python int 6", [T([0, -1, 5, 12, -8], I64)], lambda x: op(x, 6)),
            S("i32[2,3] with Python int -2 (stays i32)", [I(-50, 50, 2, 3, dtype=I32)],
              lambda x: op(x, -2)),
            S("u8[4] with Python int 15 (stays u8)", [T([0, 1, 170, 255], U8)], lambda x: op(x, 15)),
            S("bool[4] with Python bool True", [T([True, True, False, False], BOOL)],
              lambda x: op(x, True)),
        ]
    reg(name, build)


for _n in ("and", "or", "xor"):
    bitwise_tensor(f"bitwise_{_n}.Tensor")
    bitwise_scalar(f"bitwise_{_n}.Scalar")


# ---------------------------------------------------------------------------
# Tensor x Python scalar overloads
# ---------------------------------------------------------------------------
def scalar_arith(name, alpha=False, special=None, int_int="stays i64"):
    op = opobj(name)

    def build():
        s = [
            S("f32[3,4] with Python float 2.5", [U(3, 4)], lambda x: op(x, 2.5)),
            S(f"i64[4] with Python int 3 ({int_int})", [T([-7, -1, 0, 7], I64)], lambda x: op(x, 3)),
            S("i64[4] with Python float 2.5 (-> f32)", [T([-7, -1, 0, 7], I64)],
              lambda x: op(x, 2.5)),
            S("f16[3] with Python float 1.5 (stays f16)", [U(3, dtype=F16)], lambda x: op(x, 1.5)),
            S("bf16[3] with Python int 2 (in .npy as f32; stays bf16)", [U(3, dtype=BF16)],
              lambda x: op(x, 2)),
            S("f32 specials with Python float -0.5",
              [T([NAN, INF, -INF, 0.0, -0.0, 1.0])], lambda x: op(x, -0.5)),
            S("f32[2,3] non-contiguous (x.t()) with Python int 2", [U(3, 2)],
              lambda x: op(x.t(), 2)),
        ]
        if alpha:
            s.append(S("f32[3] with other=2, alpha=1.5", [U(3)], lambda x: op(x, 2, 1.5)))
            s.append(S("i64[3] with other=2, alpha=3", [T([1, 2, 3], I64)], lambda x: op(x, 2, 3)))
        if special:
            s.extend(special())
        return s
    reg(name, build)


scalar_arith("add.Scalar", alpha=True)
scalar_arith("sub.Scalar", alpha=True)
scalar_arith("mul.Scalar", special=lambda: [
    S("bool[4] with Python bool True (stays bool)", [T([True, False, True, False], BOOL)],
      lambda x: aten.mul.Scalar(x, True))])
scalar_arith("div.Scalar", int_int="true division -> f32", special=lambda: [
    S("f32[3] / Python 0 and -0.0 (inf, -inf, nan)", [T([1.0, -1.0, 0.0])],
      lambda x: aten.div.Scalar(x, 0)),
    S("f32[3] / Python -0.0", [T([1.0, -1.0, 0.0])], lambda x: aten.div.Scalar(x, -0.0))])


def build_div_scalar_mode():
    op = aten.div.Scalar_mode
    a = [7.0, -7.0, 2.5, -2.5, 0.0, NAN, INF]
    ia = T([7, -7, 6, -6, 0], I64)
    return [
        S(f"f32 {vals(a)} / 2 rounding_mode='floor'", [T(a)], lambda x: op(x, 2, rounding_mode="floor")),
        S(f"f32 {vals(a)} / -2.0 rounding_mode='trunc'", [T(a)],
          lambda x: op(x, -2.0, rounding_mode="trunc")),
        S("f32[2,3] / 0.5 rounding_mode=None", [U(2, 3)], lambda x: op(x, 0.5, rounding_mode=None)),
        S("i64[5] / Python int 4 rounding_mode='floor' (stays i64)", [ia],
          lambda x: op(x, 4, rounding_mode="floor")),
        S("i64[5] / Python int 4 rounding_mode='trunc' (stays i64)", [ia],
          lambda x: op(x, 4, rounding_mode="trunc")),
        S("i64[5] / Python float 2.5 rounding_mode='floor' (-> f32)", [ia],
          lambda x: op(x, 2.5, rounding_mode="floor")),
    ]


reg("div.Scalar_mode", build_div_scalar_mode)


def fmod_scalar(name):
    op = opobj(name)

    def build():
        a = [5.5, -5.5, 3.0, -3.0, 0.0, -0.0, NAN, INF]
        return [
            S(f"f32 {vals(a)} mod Python 2", [T(a)], lambda x: op(x, 2)),
            S(f"f32 {vals(a)} mod Python -1.5", [T(a)], lambda x: op(x, -1.5)),
            S("f32[3] mod Python 0.0 (nan)", [T([1.0, -1.0, 0.0])], lambda x: op(x, 0.0)),
            S("i64[6] mod Python int 3", [T([7, -7, 6, -6, 0, 1], I64)], lambda x: op(x, 3)),
            S("i64[6] mod Python int -3", [T([7, -7, 6, -6, 0, 1], I64)], lambda x: op(x, -3)),
            S("i64[3] mod Python float 2.5 (-> f32)", [T([7, -7, 5], I64)], lambda x: op(x, 2.5)),
            S("f16[4] mod Python 0.75", [U(4, dtype=F16)], lambda x: op(x, 0.75)),
        ]
    reg(name, build)


fmod_scalar("fmod.Scalar")
fmod_scalar("remainder.Scalar")


def build_pow_scalar():
    op = aten.pow.Scalar  # Scalar ** Tensor
    return [
        S("Python float 2.0 ** f32[6] (incl. -inf, inf, nan)", [T([0.0, 1.5, -1.0, -INF, INF, NAN])],
          lambda x: op(2.0, x)),
        S("Python int 2 ** i64[5] (stays i64)", [T([0, 1, 5, 10, 62], I64)], lambda x: op(2, x)),
        S("Python float 2.5 ** i64[3] (-> f32)", [T([0, 1, 3], I64)], lambda x: op(2.5, x)),
        S("Python 0.0 ** f32[3] (0^-1 = inf, 0^0 = 1)", [T([-1.0, 0.0, 2.0])], lambda x: op(0.0, x)),
        S("Python -2.0 ** f32[3] (fractional -> nan)", [T([2.0, 0.5, 3.0])], lambda x: op(-2.0, x)),
        S("Python 1 ** f32[2] (1^nan = 1)", [T([NAN, INF])], lambda x: op(1, x)),
        S("Python 3.0 ** f16[3] (stays f16)", [U(3, dtype=F16)], lambda x: op(3.0, x)),
    ]


def build_pow_tensor_scalar():
    op = aten.pow.Tensor_Scalar
    sp = [NAN, INF, -INF, 0.0, -0.0, -2.0, 1.5, 4.0]
    return [
        S(f"f32 {vals(sp)} ** 2", [T(sp)], lambda x: op(x, 2)),
        S(f"f32 {vals(sp)} ** 0.5 (negative -> nan)", [T(sp)], lambda x: op(x, 0.5)),
        S(f"f32 {vals(sp)} ** -1 (0 -> inf, -0 -> -inf)", [T(sp)], lambda x: op(x, -1)),
        S(f"f32 {vals(sp)} ** 3.0", [T(sp)], lambda x: op(x, 3.0)),
        S(f"f32 {vals(sp)} ** 0 (all ones, also nan^0)", [T(sp)], lambda x: op(x, 0)),
        S("i64[5] ** Python int 3 (stays i64)", [T([-3, -1, 0, 2, 5], I64)], lambda x: op(x, 3)),
        S("i64[3] ** Python float 0.5 (-> f32)", [T([0, 4, 9], I64)], lambda x: op(x, 0.5)),
        S("f32[2,3] non-contiguous (x.t()) ** -2.5", [U(3, 2, lo=0.5, hi=2)],
          lambda x: op(x.t(), -2.5)),
        S("bf16[3] ** 2 (in .npy as f32)", [U(3, dtype=BF16)], lambda x: op(x, 2)),
    ]


reg("pow.Scalar", build_pow_scalar)
reg("pow.Tensor_Scalar", build_pow_tensor_scalar)


def build_clamp():
    op = aten.clamp.default
    sp = [NAN, INF, -INF, 0.0, -0.0, -2.0, 1.5, 4.0]
    return [
        S(f"min=-1, max=2 on f32 {vals(sp)} (nan stays nan)", [T(sp)], lambda x: op(x, -1, 2)),
        S("min only (0.5)", [U(3, 4)], lambda x: op(x, 0.5)),
        S("max only (0.0)", [U(3, 4)], lambda x: op(x, None, 0.0)),
        S("min > max (min=2, max=1: result is all 1)", [U(5)], lambda x: op(x, 2, 1)),
        S("i64[5] with int bounds (stays i64)", [T([-5, -1, 0, 3, 9], I64)], lambda x: op(x, -1, 3)),
        S("i64[5] with float min 0.5 (-> f32)", [T([-5, -1, 0, 3, 9], I64)], lambda x: op(x, 0.5)),
        S("f16[4] min=-0.5 max=0.5", [U(4, dtype=F16)], lambda x: op(x, -0.5, 0.5)),
    ]


def build_clamp_tensor():
    op = aten.clamp.Tensor
    return [
        S("broadcast: x f32[3,4], min f32[4], max f32[3,1]", [U(3, 4, lo=-3, hi=3), U(4, lo=-2, hi=0),
                                                              U(3, 1, lo=0, hi=2)], op),
        S("min only (max None)", [U(2, 3), U(2, 3)], lambda x, lo: op(x, lo)),
        S("max only (min None)", [U(2, 3), U(3)], lambda x, hi: op(x, None, hi)),
        S("nan in x and in bounds", [T([NAN, 1.0, 5.0, -5.0]), T([0.0, NAN, 0.0, 0.0]),
                                     T([1.0, 1.0, NAN, 1.0])], op),
        S("i64 x, i64 bounds", [T([-5, 0, 5], I64), T([-1, -1, -1], I64), T([1, 1, 1], I64)], op),
        S("min > max elementwise (max wins)", [U(3), T([1.0, 1.0, 1.0]), T([0.0, 0.0, 0.0])], op),
    ]


reg("clamp.default", build_clamp)
reg("clamp.Tensor", build_clamp_tensor)


def build_where():
    op = aten.where.self
    return [
        S("broadcast cond bool[3,1], a f32[3,4], b f32[4]", [B(3, 1), U(3, 4), U(4)], op),
        S("mixed a i64[4], b f32[4] -> f32", [B(4), I(-5, 5, 4), U(4)], op),
        S("b 0-d f32 tensor (masked_fill-style), nan/inf in a",
          [T([True, False, True, False], BOOL), T([NAN, INF, 1.0, 2.0]), T(-INF)], op),
        S("bool a/b", [B(5), B(5), B(5)], op),
        S("f16 a, f16 b; cond non-contiguous (c.t())", [B(3, 2), U(2, 3, dtype=F16),
                                                        U(2, 3, dtype=F16)],
          lambda c, a, b: op(c.t(), a, b)),
        S("zero-size [0,3]", [B(0, 3), U(0, 3), U(0, 3)], op),
    ]


reg("where.self", build_where)


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------
def build_amax(name):
    op = opobj(name)

    def build():
        return [
            S("dim=[] (all dims) f32[3,4]", [N(3, 4)], lambda x: op(x, [])),
            S("dim=[1] f32[3,4]", [N(3, 4)], lambda x: op(x, [1])),
            S("dim=[-1,0] keepdim=True f32[2,3,4]", [N(2, 3, 4)], lambda x: op(x, [-1, 0], True)),
            S("nan propagates; -inf/inf", [T([[1.0, NAN, 3.0], [-INF, -INF, -INF], [INF, 0.0, -0.0]])],
              lambda x: op(x, [1])),
            S("i64[2,3] dim=[0]", [I(-9, 9, 2, 3)], lambda x: op(x, [0])),
            S("bool[2,3] dim=[1]", [B(2, 3)], lambda x: op(x, [1])),
            S("bf16[4,3] (in .npy as f32) dim=[0], non-contiguous (x.t() of [3,4])",
              [N(3, 4, dtype=BF16)], lambda x: op(x.t(), [0])),
            S("zero-size f32[0,3] reduced over dim 1 -> [0]", [N(0, 3)], lambda x: op(x, [1])),
            S("0-d f32, dim=[]", [T(2.5)], lambda x: op(x, [])),
            S("0-d f32, dim=[0]", [T(2.5)], lambda x: op(x, [0])),
            S("0-d f32, dim=[-1] keepdim=True", [T(-2.5)], lambda x: op(x, [-1], True)),
        ]
    reg(name, build, tol="red")


build_amax("amax.default")
build_amax("amin.default")


def build_any_default():
    op = aten.any.default
    return [
        S("bool[2,3]", [B(2, 3)], op),
        S("bool[4] all false", [T([False] * 4, BOOL)], op),
        S("f32[4] (nan counts as true)", [T([0.0, -0.0, NAN, 0.0])], op),
        S("i64[3] zeros", [T([0, 0, 0], I64)], op),
        S("zero-size bool[0] -> false", [torch.zeros(0, dtype=BOOL)], op),
        S("u8 0-d", [T(3, U8)], op),
    ]


def build_any_dim():
    op = aten.any.dim
    return [
        S("bool[3,4] dim=1", [B(3, 4)], lambda x: op(x, 1)),
        S("bool[3,4] dim=-2 keepdim=True", [B(3, 4)], lambda x: op(x, -2, True)),
        S("f32[2,3] dim=0 (f32 in, bool out)", [T([[0.0, NAN, 0.0], [0.0, 0.0, -0.0]])],
          lambda x: op(x, 0)),
        S("i64[2,0] dim=1 (zero-size reduced -> false)", [torch.zeros(2, 0, dtype=I64)],
          lambda x: op(x, 1)),
        S("u8[2,3] dim=1 (u8 in, u8 out)", [T([[0, 0, 7], [0, 0, 0]], U8)], lambda x: op(x, 1)),
    ]


def build_any_dims():
    op = aten.any.dims
    return [
        S("bool[2,3,4] dim=[0,2]", [torch.rand(2, 3, 4) > 0.8], lambda x: op(x, [0, 2])),
        S("bool[2,3] dim=None (all)", [B(2, 3)], lambda x: op(x, None)),
        S("bool[2,3] dim=[] (no reduction: same shape)", [B(2, 3)], lambda x: op(x, [])),
        S("f32[2,3] dim=[-1] keepdim=True", [T([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])],
          lambda x: op(x, [-1], True)),
    ]


reg("any.default", build_any_default)
reg("any.dim", build_any_dim)
reg("any.dims", build_any_dims)


def build_argmax(name):
    op = opobj(name)

    def build():
        ties = T([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -5.0, -5.0, -1.0]])
        return [
            S("dim=None (flattened index) f32[3,4]", [N(3, 4)], op),
            S("dim=1 with ties (first index wins)", [ties], lambda x: op(x, 1)),
            S("dim=-2 keepdim=True", [N(3, 4)], lambda x: op(x, -2, True)),
            S("nan wins (first nan index)", [T([[1.0, NAN, 3.0, NAN], [INF, 0.0, -INF, INF]])],
              lambda x: op(x, 1)),
            S("i64[2,5] dim=1", [I(-3, 3, 2, 5)], lambda x: op(x, 1)),
            S("f32[4,3] non-contiguous (x.t()) dim=0", [N(3, 4)], lambda x: op(x.t(), 0)),
            S("0-d f32 dim=None -> 0", [T(5.0)], op),
            S("0-d f32 dim=0 -> 0", [T(5.0)], lambda x: op(x, 0)),
            S("0-d f32 dim=-1 keepdim=True -> 0", [T(5.0)], lambda x: op(x, -1, True)),
        ]
    reg(name, build)


build_argmax("argmax.default")
build_argmax("argmin.default")


def build_maxmin_dim(name):
    op = opobj(name)

    def build():
        ties = T([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -5.0, -5.0, -1.0]])
        return [
            S("dim=1 with ties (index of first extreme)", [ties], lambda x: op(x, 1)),
            S("dim=-1 keepdim=True f32[2,3,4]", [N(2, 3, 4)], lambda x: op(x, -1, True)),
            S("dim=0 nan propagates (value nan, index of first nan)",
              [T([[1.0, NAN], [NAN, 2.0], [3.0, NAN]])], lambda x: op(x, 0)),
            S("i64[3,4] dim=0", [I(-3, 3, 3, 4)], lambda x: op(x, 0)),
            S("bool[2,3] dim=1", [B(2, 3)], lambda x: op(x, 1)),
            S("f32[4,3] non-contiguous (x.t()) dim=1", [N(3, 4)], lambda x: op(x.t(), 1)),
            S("0-d f32 dim=0", [T(5.0)], lambda x: op(x, 0)),
        ]
    reg(name, build)


build_maxmin_dim("max.dim")
build_maxmin_dim("min.dim")


def build_mean():
    op = aten.mean.default
    return [
        S("f32[3,4]", [N(3, 4)], op),
        S("f16[8]", [N(8, dtype=F16)], op),
        S("bf16[2,3] (in .npy as f32)", [N(2, 3, dtype=BF16)], op),
        S("f32 with inf and nan", [T([1.0, INF, 2.0]), ], op),
        S("zero-size f32[0] -> nan", [N(0)], op),
        S("dtype=f32 from f16[4]", [N(4, dtype=F16)], lambda x: op(x, dtype=F32)),
    ]


def build_mean_dim():
    op = aten.mean.dim
    return [
        S("dim=[1] f32[3,4]", [N(3, 4)], lambda x: op(x, [1])),
        S("dim=[-1,0] keepdim=True f32[2,3,4]", [N(2, 3, 4)], lambda x: op(x, [-1, 0], True)),
        S("dim=None (all) f32[2,3]", [N(2, 3)], lambda x: op(x, None)),
        S("dim=[0] f16[3,2]", [N(3, 2, dtype=F16)], lambda x: op(x, [0])),
        S("dim=[1] on zero-size f32[2,0] -> nan", [N(2, 0)], lambda x: op(x, [1])),
        S("dim=[0] non-contiguous (x.t() of [3,4])", [N(3, 4)], lambda x: op(x.t(), [0])),
        S("dim=[1] dtype=f64 from f32", [N(2, 3)], lambda x: op(x, [1], dtype=F64)),
        S("dim=[0] c64[4,3] (both parts)", [cplx(4, 3)], lambda x: op(x, [0])),
        S("0-d f32 dim=[0]", [T(2.5)], lambda x: op(x, [0])),
        S("0-d f32 dim=[-1] keepdim=True", [T(-1.5)], lambda x: op(x, [-1], True)),
        S("f16[70000] in [1, 2) dim=[0]: its sum and count are past f16's largest value 65504, "
          "so only an f32 accumulation gives the mean", [U(70000, lo=1.0, hi=2.0, dtype=F16)],
          lambda x: op(x, [0])),
    ]


def build_sum():
    op = aten.sum.dim_IntList
    return [
        S("dim=[1] f32[3,4]", [N(3, 4)], lambda x: op(x, [1])),
        S("dim=[-1,0] keepdim=True f32[2,3,4]", [N(2, 3, 4)], lambda x: op(x, [-1, 0], True)),
        S("dim=None (all) f32[2,3]", [N(2, 3)], lambda x: op(x, None)),
        S("dim=[] (all dims, same as None) f32[2,3]", [N(2, 3)], lambda x: op(x, [])),
        S("i32[2,3] dim=[1] (-> i64)", [I(-9, 9, 2, 3, dtype=I32)], lambda x: op(x, [1])),
        S("bool[2,3] dim=[0] (-> i64)", [B(2, 3)], lambda x: op(x, [0])),
        S("f16[4,3] dim=[0] (stays f16)", [N(4, 3, dtype=F16)], lambda x: op(x, [0])),
        S("bf16[3] dim=[0] dtype=f32 (in .npy as f32)", [N(3, dtype=BF16)],
          lambda x: op(x, [0], dtype=F32)),
        S("zero-size f32[0,3] dim=[0] -> zeros[3]", [N(0, 3)], lambda x: op(x, [0])),
        S("inf + -inf -> nan", [T([INF, -INF, 1.0])], lambda x: op(x, [0])),
        S("0-d f32 dim=[0]", [T(2.5)], lambda x: op(x, [0])),
        S("0-d f32 dim=[-1] keepdim=True", [T(-1.5)], lambda x: op(x, [-1], True)),
        S("c64[3,4] dim=[1] (both parts summed)", [cplx(3, 4)], lambda x: op(x, [1])),
    ]


def build_prod():
    op = aten.prod.default
    return [
        S("f32[5]", [U(5, lo=0.5, hi=1.5)], op),
        S("i64[4] (stays i64)", [T([2, -3, 4, 5], I64)], op),
        S("bool[3] (-> i64)", [T([True, True, False], BOOL)], op),
        S("f32 with 0 and inf -> nan", [T([0.0, INF, 2.0])], op),
        S("zero-size f32[0] -> 1", [N(0)], op),
        S("dtype=f64 from f32[3]", [U(3)], lambda x: op(x, dtype=F64)),
    ]


def build_prod_dim():
    op = aten.prod.dim_int
    return [
        S("dim=1 f32[3,4]", [U(3, 4, lo=0.5, hi=1.5)], lambda x: op(x, 1)),
        S("dim=-1 keepdim=True f32[2,3]", [U(2, 3)], lambda x: op(x, -1, True)),
        S("i32[2,3] dim=0 (-> i64)", [I(-4, 4, 2, 3, dtype=I32)], lambda x: op(x, 0)),
        S("bool[2,3] dim=1 (-> i64)", [B(2, 3)], lambda x: op(x, 1)),
        S("zero-size f32[2,0] dim=1 -> ones", [N(2, 0)], lambda x: op(x, 1)),
        S("f16[3,2] dim=0", [U(3, 2, dtype=F16)], lambda x: op(x, 0)),
    ]


def build_var_correction():
    op = aten.var.correction
    return [
        S("dim=None correction=None (default 1) f32[3,4]", [N(3, 4)], lambda x: op(x)),
        S("dim=[1] correction=0 f32[3,4]", [N(3, 4)], lambda x: op(x, [1], correction=0)),
        S("dim=[1] correction=1 keepdim=True", [N(3, 4)],
          lambda x: op(x, [1], correction=1, keepdim=True)),
        S("dim=[-1,0] correction=2 f32[2,3,5]", [N(2, 3, 5)],
          lambda x: op(x, [-1, 0], correction=2)),
        S("single element, correction=1 -> nan", [T([3.0])], lambda x: op(x, [0], correction=1)),
        S("dim=[0] f16[4,3]", [N(4, 3, dtype=F16)], lambda x: op(x, [0], correction=1)),
        S("dim=[0] correction=0.5 (float correction)", [N(4, 3)],
          lambda x: op(x, [0], correction=0.5)),
        S("0-d f32 dim=[0] correction=0 -> 0", [T(3.0)], lambda x: op(x, [0], correction=0)),
    ]


def build_var_dim():
    op = aten.var.dim
    return [
        S("dim=[1] unbiased=True", [N(3, 4)], lambda x: op(x, [1], True)),
        S("dim=[1] unbiased=False", [N(3, 4)], lambda x: op(x, [1], False)),
        S("dim=[-1,0] unbiased=True keepdim=True", [N(2, 3, 4)], lambda x: op(x, [-1, 0], True, True)),
        S("dim=None unbiased=False", [N(2, 3)], lambda x: op(x, None, False)),
        S("dim=[0] with nan column", [T([[1.0, NAN], [2.0, 1.0], [4.0, 2.0]])],
          lambda x: op(x, [0], True)),
    ]


reg("mean.default", build_mean, tol="red")
reg("mean.dim", build_mean_dim, tol="red")
reg("sum.dim_IntList", build_sum, tol="red")
reg("prod.default", build_prod, tol="red")
reg("prod.dim_int", build_prod_dim, tol="red")
reg("var.correction", build_var_correction, tol="red")
reg("var.dim", build_var_dim, tol="red")


def build_cumsum():
    op = aten.cumsum.default
    return [
        S("dim=1 f32[3,4]", [N(3, 4)], lambda x: op(x, 1)),
        S("dim=-1 f32[2,3,4]", [N(2, 3, 4)], lambda x: op(x, -1)),
        S("dim=0 i32[4] (-> i64)", [I(-5, 5, 4, dtype=I32)], lambda x: op(x, 0)),
        S("dim=0 bool[5] (-> i64)", [T([True, False, True, True, False], BOOL)], lambda x: op(x, 0)),
        S("dim=0 f32[4] dtype=f64", [N(4)], lambda x: op(x, 0, dtype=F64)),
        S("dim=0 nan/inf (nan from there on)", [T([1.0, INF, -INF, 1.0, NAN, 2.0])],
          lambda x: op(x, 0)),
        S("dim=0 of 0-d", [T(2.5)], lambda x: op(x, 0)),
        S("dim=0 non-contiguous (x.t() of [3,4])", [N(3, 4)], lambda x: op(x.t(), 0)),
        S("dim=1 f16[2,5]", [N(2, 5, dtype=F16)], lambda x: op(x, 1)),
    ]


reg("cumsum.default", build_cumsum, tol="red")


def build_softmax(name):
    op = opobj(name)

    def build():
        return [
            S("dim=1 f32[3,5]", [N(3, 5)], lambda x: op(x, 1, False)),
            S("dim=-1 f32[2,3,4]", [N(2, 3, 4)], lambda x: op(x, -1, False)),
            S("dim=0 f32[4,3]", [N(4, 3)], lambda x: op(x, 0, False)),
            S("-inf masking: row 0 partly -inf, row 1 all -inf (nan), row 2 has inf, row 3 nan",
              [T([[1.0, -INF, 2.0], [-INF, -INF, -INF], [INF, 1.0, 0.0], [NAN, 1.0, 0.0]])],
              lambda x: op(x, 1, False)),
            S("large values (max subtraction): [1000, 1001, 1002]", [T([[1000.0, 1001.0, 1002.0]])],
              lambda x: op(x, -1, False)),
            S("f16[2,4] half_to_float=False (stays f16)", [N(2, 4, dtype=F16)],
              lambda x: op(x, 1, False)),
            S("bf16[2,4] (in .npy as f32)", [N(2, 4, dtype=BF16)], lambda x: op(x, 1, False)),
            S("0-d f32 dim=0", [T(3.0)], lambda x: op(x, 0, False)),
            S("zero-size f32[0,4] dim=1", [N(0, 4)], lambda x: op(x, 1, False)),
            S("non-contiguous (x.t() of [5,3]) dim=1", [N(5, 3)], lambda x: op(x.t(), 1, False)),
        ]
    reg(name, build, tol="red")


build_softmax("_softmax.default")
build_softmax("_log_softmax.default")


# ---------------------------------------------------------------------------
# matmul, conv, norm
# ---------------------------------------------------------------------------
def build_mm():
    op = aten.mm.default
    return [
        S("f32[3,4] @ f32[4,5]", [N(3, 4), N(4, 5)], op),
        S("non-contiguous: a @ b.t() (b f32[5,4])", [N(3, 4), N(5, 4)], lambda a, b: op(a, b.t())),
        S("i64[2,3] @ i64[3,2]", [I(-5, 5, 2, 3), I(-5, 5, 3, 2)], op),
        S("zero inner dim f32[3,0] @ f32[0,2] -> zeros", [N(3, 0), N(0, 2)], op),
        S("f16[2,8] @ f16[8,3]", [N(2, 8, dtype=F16), N(8, 3, dtype=F16)], op),
        S("bf16[2,8] @ bf16[8,3] (in .npy as f32)", [N(2, 8, dtype=BF16), N(8, 3, dtype=BF16)], op),
        S("nan/inf propagate", [T([[NAN, 1.0], [INF, 0.0], [1.0, 1.0]]), T([[1.0, 2.0], [3.0, 4.0]])],
          op),
        S("c64[3,4] @ c64[4,2] (both parts read)", [cplx(3, 4), cplx(4, 2)], op),
    ]


def build_bmm():
    op = aten.bmm.default
    return [
        S("f32[2,3,4] @ f32[2,4,5]", [N(2, 3, 4), N(2, 4, 5)], op),
        S("non-contiguous: a.transpose(1,2) (a f32[2,4,3])", [N(2, 4, 3), N(2, 4, 2)],
          lambda a, b: op(a.transpose(1, 2), b)),
        S("i64[2,2,3] @ i64[2,3,2]", [I(-5, 5, 2, 2, 3), I(-5, 5, 2, 3, 2)], op),
        S("bf16[1,2,8] @ bf16[1,8,3] (in .npy as f32)", [N(1, 2, 8, dtype=BF16),
                                                          N(1, 8, 3, dtype=BF16)], op),
        S("zero batch f32[0,2,3] @ f32[0,3,4]", [N(0, 2, 3), N(0, 3, 4)], op),
        S("c64[2,3,4] @ c64[2,4,2]", [cplx(2, 3, 4), cplx(2, 4, 2)], op),
    ]


def build_addmm():
    op = aten.addmm.default
    return [
        S("bias f32[5] broadcast + f32[3,4] @ f32[4,5]", [N(5), N(3, 4), N(4, 5)], op),
        S("beta=0.5 alpha=2, self f32[3,1]", [N(3, 1), N(3, 4), N(4, 2)],
          lambda s, a, b: op(s, a, b, beta=0.5, alpha=2)),
        S("beta=0: nan/inf in self are ignored", [T([[NAN, INF]]), N(2, 3), N(3, 2)],
          lambda s, a, b: op(s, a, b, beta=0)),
        S("non-contiguous mat2 (b.t() of f32[2,4])", [N(3, 2), N(3, 4), N(2, 4)],
          lambda s, a, b: op(s, a, b.t())),
        S("i64 self/mat1/mat2", [I(-3, 3, 2), I(-3, 3, 2, 3), I(-3, 3, 3, 2)], op),
        S("f16 (bias f16[3])", [N(3, dtype=F16), N(2, 4, dtype=F16), N(4, 3, dtype=F16)], op),
    ]


reg("mm.default", build_mm, tol="red")
reg("bmm.default", build_bmm, tol="red")
reg("addmm.default", build_addmm, tol="red")


def conv_cases():
    """(desc, x, w, bias-or-None, stride, padding, dilation, transposed, output_padding, groups)"""
    return [
        ("conv2d 3x3 stride 1 padding 1 + bias", N(1, 2, 5, 5), N(3, 2, 3, 3), N(3),
         [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        ("conv2d stride 2, padding (1,0), dilation 2, groups 2, no bias", N(2, 4, 7, 6),
         N(4, 2, 3, 2), None, [2, 2], [1, 0], [2, 2], False, [0, 0], 2),
        ("conv1d stride 2 padding 1 + bias", N(2, 3, 8), N(4, 3, 3), N(4), [2], [1], [1], False,
         [0], 1),
        ("depthwise conv2d groups=C=3, asymmetric stride (1,2)", N(1, 3, 6, 6), N(3, 1, 3, 3), N(3),
         [1, 2], [1, 1], [1, 1], False, [0, 0], 3),
        ("transposed conv2d stride 2 padding 1 output_padding 1 + bias (w [in, out/g, kh, kw])",
         N(1, 4, 3, 3), N(4, 2, 3, 3), N(2), [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
        ("transposed conv1d groups 2 dilation 2", N(1, 4, 5), N(4, 3, 3), None, [1], [0], [2],
         True, [0], 2),
        ("conv3d 2x2x2 stride 1 + bias", N(1, 2, 4, 4, 4), N(2, 2, 2, 2, 2), N(2), [1, 1, 1],
         [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1),
    ]


def build_convolution():
    op = aten.convolution.default
    s = []
    for desc, x, w, b, *rest in conv_cases():
        if b is None:
            s.append(S(desc, [x, w], lambda x, w, r=rest: op(x, w, None, *r)))
        else:
            s.append(S(desc, [x, w, b], lambda x, w, b, r=rest: op(x, w, b, *r)))
    s.append(S("conv2d bf16 (in .npy as f32) 1x1", [N(1, 2, 3, 3, dtype=BF16), N(2, 2, 1, 1, dtype=BF16)],
               lambda x, w: op(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)))
    return s


def build_convolution_backward():
    op = aten.convolution_backward.default
    s = []
    masks = [[True, True, True], [True, True, False], [False, True, False], [True, False, False]]
    for k, (desc, x, w, b, *rest) in enumerate(conv_cases()[:6]):
        y = aten.convolution.default(x, w, b, *rest)
        g = torch.randn(y.shape)
        bias_sizes = [w.shape[1] * rest[-1]] if rest[3] else [w.shape[0]]
        bs = bias_sizes if b is not None else None
        m = masks[k % len(masks)] if b is not None else [True, True, False]
        s.append(S(f"grad of {desc}; output_mask={m} (None results dropped)", [g, x, w],
                   lambda g, x, w, r=rest, bs=bs, m=m: op(g, x, w, bs, *r, m)))
    return s


reg("convolution.default", build_convolution, tol="red")
reg("convolution_backward.default", build_convolution_backward, tol="red", backward=True)


def build_layer_norm():
    op = aten.native_layer_norm.default
    return [
        S("f32[2,3,4] normalized_shape=[4] weight+bias", [N(2, 3, 4), N(4), N(4)],
          lambda x, w, b: op(x, [4], w, b, 1e-5)),
        S("normalized_shape=[3,4] eps=1e-3, weight/bias None", [N(2, 3, 4)],
          lambda x: op(x, [3, 4], None, None, 1e-3)),
        S("constant rows (var 0 -> rstd = 1/sqrt(eps))", [T([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])],
          lambda x: op(x, [3], None, None, 1e-5)),
        S("bf16[2,3] (in .npy as f32; mean/rstd come out bf16 on CPU)", [N(2, 3, dtype=BF16)],
          lambda x: op(x, [3], None, None, 1e-5)),
        S("f16[2,4] weight f16 (mean/rstd f16)", [N(2, 4, dtype=F16), N(4, dtype=F16)],
          lambda x, w: op(x, [4], w, None, 1e-5)),
    ]


def build_layer_norm_backward():
    op = aten.native_layer_norm_backward.default
    fw = aten.native_layer_norm.default

    def case(shape, nshape, masks, affine=True):
        def f(g, x, *wb):
            w, b = wb if affine else (None, None)
            _, mean, rstd = fw(x, nshape, w, b, 1e-5)
            return op(g, x, nshape, mean, rstd, w, b, masks)
        ins = [N(*shape), N(*shape)]
        if affine:
            ins += [N(*nshape), N(*nshape)]
        return ins, f

    s = []
    for desc, shape, nshape, masks, affine in [
            ("f32[2,3,4] normalized [4] weight+bias, mask [T,T,T]", (2, 3, 4), [4],
             [True, True, True], True),
            ("f32[2,3,4] normalized [3,4], mask [T,F,T]", (2, 3, 4), [3, 4],
             [True, False, True], True),
            ("f32[3,5] no weight/bias, mask [T,F,F]", (3, 5), [5], [True, False, False], False)]:
        ins, f = case(shape, nshape, masks, affine)
        s.append(S(f"{desc} (mean/rstd from native_layer_norm inside forward; None results dropped)",
                   ins, f))
    return s


def build_group_norm():
    op = aten.native_group_norm.default
    return [
        S("f32[2,4,3,3] groups 2 weight+bias", [N(2, 4, 3, 3), N(4), N(4)],
          lambda x, w, b: op(x, w, b, 2, 4, 9, 2, 1e-5)),
        S("groups 1 (layer-norm like), no weight/bias", [N(2, 4, 2, 2)],
          lambda x: op(x, None, None, 2, 4, 4, 1, 1e-5)),
        S("groups=C=4 (instance-norm like) eps 1e-3", [N(1, 4, 5)],
          lambda x: op(x, None, None, 1, 4, 5, 4, 1e-3)),
        S("f32[3,6,5] groups 3 weight only", [N(3, 6, 5), N(6)],
          lambda x, w: op(x, w, None, 3, 6, 5, 3, 1e-5)),
        S("f16[1,1,300,300] in [1, 2), groups 1: 90000 elements per group, past f16's largest "
          "value, so the statistics need an f32 accumulation", [U(1, 1, 300, 300, lo=1.0, hi=2.0, dtype=F16)],
          lambda x: op(x, None, None, 1, 1, 90000, 1, 1e-5)),
    ]


def build_group_norm_backward():
    op = aten.native_group_norm_backward.default
    fw = aten.native_group_norm.default
    s = []
    for desc, shape, G, masks, affine in [
            ("f32[2,4,3,3] groups 2 weight, mask [T,T,T]", (2, 4, 3, 3), 2, [True, True, True], True),
            ("f32[1,6,5] groups 3 weight, mask [T,F,T]", (1, 6, 5), 3, [True, False, True], True),
            ("f32[2,4,2,2] groups 4 no weight, mask [T,F,F]", (2, 4, 2, 2), 4, [True, False, False],
             False)]:
        n, c = shape[0], shape[1]
        hw = int(np.prod(shape[2:]))

        def f(g, x, *w, n=n, c=c, hw=hw, G=G, masks=masks):
            w = w[0] if w else None
            _, mean, rstd = fw(x, w, None, n, c, hw, G, 1e-5)
            return op(g, x, mean, rstd, w, n, c, hw, G, masks)
        ins = [N(*shape), N(*shape)] + ([N(c)] if affine else [])
        s.append(S(f"{desc} (mean/rstd from native_group_norm inside forward; None results dropped)",
                   ins, f))
    return s


def build_bn_legit():
    op = aten._native_batch_norm_legit.default

    def f(x, w, b, rm, rv, training):
        rm, rv = rm.clone(), rv.clone()
        out = op(x, w, b, rm, rv, training, 0.1, 1e-5)
        return (*out, rm, rv)
    return [
        S("training=True f32[2,3,4,4]; outputs (out, save_mean, save_invstd, new running_mean, "
          "new running_var) (running stats cloned inside forward, then updated in place)",
          [N(2, 3, 4, 4), N(3), N(3), N(3), U(3, lo=0.5, hi=2)],
          lambda x, w, b, rm, rv: f(x, w, b, rm, rv, True)),
        S("training=False f32[2,3,5] (save_mean/save_invstd come out empty [0])",
          [N(2, 3, 5), N(3), N(3), N(3), U(3, lo=0.5, hi=2)],
          lambda x, w, b, rm, rv: f(x, w, b, rm, rv, False)),
    ]


def build_bn_no_stats():
    op = aten._native_batch_norm_legit.no_stats
    return [
        S("training=True f32[2,3,4,4] weight+bias", [N(2, 3, 4, 4), N(3), N(3)],
          lambda x, w, b: op(x, w, b, True, 0.1, 1e-5)),
        S("training=True f32[4,3] no weight/bias, eps 1e-3", [N(4, 3)],
          lambda x: op(x, None, None, True, 0.1, 1e-3)),
        S("training=True f32[2,2,5] constant channel (var 0)",
          [torch.cat([torch.ones(2, 1, 5), N(2, 1, 5)], 1)],
          lambda x: op(x, None, None, True, 0.1, 1e-5)),
        S("training=True f16[1,1,300,300] in [1, 2) (instance_norm's form): 90000 elements per "
          "channel, past f16's largest value, so the statistics need an f32 accumulation",
          [U(1, 1, 300, 300, lo=1.0, hi=2.0, dtype=F16)], lambda x: op(x, None, None, True, 0.1, 1e-5)),
    ]


def build_bn_no_training():
    op = aten._native_batch_norm_legit_no_training.default
    return [
        S("f32[2,3,4,4] weight+bias+running stats", [N(2, 3, 4, 4), N(3), N(3), N(3),
                                                     U(3, lo=0.5, hi=2)],
          lambda x, w, b, rm, rv: op(x, w, b, rm, rv, 0.1, 1e-5)),
        S("f32[4,3] no weight/bias, eps 1e-3", [N(4, 3), N(3), U(3, lo=0.5, hi=2)],
          lambda x, rm, rv: op(x, None, None, rm, rv, 0.1, 1e-3)),
        S("bf16[2,3,2] input (in .npy as f32) with f32 stats (save_mean/invstd empty)",
          [N(2, 3, 2, dtype=BF16), N(3), U(3, lo=0.5, hi=2)],
          lambda x, rm, rv: op(x, None, None, rm, rv, 0.1, 1e-5)),
    ]


reg("native_layer_norm.default", build_layer_norm, tol="red")
reg("native_layer_norm_backward.default", build_layer_norm_backward, tol="red", backward=True)
reg("native_group_norm.default", build_group_norm, tol="red")
reg("native_group_norm_backward.default", build_group_norm_backward, tol="red", backward=True)
reg("_native_batch_norm_legit.default", build_bn_legit, tol="red")
reg("_native_batch_norm_legit.no_stats", build_bn_no_stats, tol="red")
reg("_native_batch_norm_legit_no_training.default", build_bn_no_training, tol="red")


def build_cdist():
    op = aten._cdist_forward.default
    return [
        S("p=2 f32[2,4,3] x f32[2,5,3]", [N(2, 4, 3), N(2, 5, 3)], lambda a, b: op(a, b, 2.0, None)),
        S("p=1 f32[4,3] x f32[5,3] (no batch)", [N(4, 3), N(5, 3)], lambda a, b: op(a, b, 1.0, None)),
        S("p=inf", [N(3, 2), N(2, 2)], lambda a, b: op(a, b, INF, None)),
        S("p=0 (count of differing coords)", [T([[0.0, 1.0], [1.0, 1.0]]), T([[0.0, 1.0], [2.0, 1.0]])],
          lambda a, b: op(a, b, 0.0, None)),
        S("p=3 compute_mode=2 (never mm)", [N(3, 4), N(2, 4)], lambda a, b: op(a, b, 3.0, 2)),
        S("p=2 compute_mode=1 (mm for euclid)", [N(3, 4), N(2, 4)], lambda a, b: op(a, b, 2.0, 1)),
    ]


def build_pdist():
    op = aten._pdist_forward.default
    return [
        S("p=2 f32[5,3] -> [10] (upper triangle, row-major)", [N(5, 3)], lambda x: op(x, 2.0)),
        S("p=1 f32[4,2]", [N(4, 2)], lambda x: op(x, 1.0)),
        S("p=inf", [N(3, 4)], lambda x: op(x, INF)),
        S("p=0.5", [N(3, 2)], lambda x: op(x, 0.5)),
        S("single row f32[1,3] -> empty [0]", [N(1, 3)], lambda x: op(x, 2.0)),
    ]


reg("_cdist_forward.default", build_cdist, tol="red")
reg("_pdist_forward.default", build_pdist, tol="red")


# ---------------------------------------------------------------------------
# pooling, padding, resampling
# ---------------------------------------------------------------------------
def build_adaptive_avg2d():
    op = aten._adaptive_avg_pool2d.default
    return [
        S("f32[2,3,6,6] -> [3,3] (divisible)", [N(2, 3, 6, 6)], lambda x: op(x, [3, 3])),
        S("f32[1,2,5,7] -> [3,4] (overlapping, uneven windows)", [N(1, 2, 5, 7)],
          lambda x: op(x, [3, 4])),
        S("unbatched f32[3,5,5] -> [2,2]", [N(3, 5, 5)], lambda x: op(x, [2, 2])),
        S("f32[1,2,4,3] -> [1,1] (global)", [N(1, 2, 4, 3)], lambda x: op(x, [1, 1])),
        S("f32[1,1,2,2] -> [4,4] (upsampling)", [N(1, 1, 2, 2)], lambda x: op(x, [4, 4])),
        S("bf16[1,2,4,4] -> [2,2] (in .npy as f32)", [N(1, 2, 4, 4, dtype=BF16)],
          lambda x: op(x, [2, 2])),
    ]


def build_adaptive_avg2d_bwd():
    op = aten._adaptive_avg_pool2d_backward.default
    s = []
    for desc, shape, osz in [("f32[2,3,5,7] from output [3,4]", (2, 3, 5, 7), [3, 4]),
                             ("f32[1,2,6,6] from output [3,3]", (1, 2, 6, 6), [3, 3]),
                             ("unbatched f32[2,5,5] from output [2,2]", (2, 5, 5), [2, 2]),
                             ("f32[1,1,3,3] from output [1,1] (global)", (1, 1, 3, 3), [1, 1])]:
        x = N(*shape)
        g = N(*aten._adaptive_avg_pool2d.default(x, osz).shape)
        s.append(S(f"grad for input {desc}", [g, x], op))
    return s


def build_adaptive_avg3d():
    op = aten._adaptive_avg_pool3d.default
    return [
        S("f32[1,2,4,6,6] -> [2,3,3]", [N(1, 2, 4, 6, 6)], lambda x: op(x, [2, 3, 3])),
        S("unbatched f32[3,5,5,5] -> [2,2,2]", [N(3, 5, 5, 5)], lambda x: op(x, [2, 2, 2])),
        S("f32[1,1,3,5,7] -> [2,3,4] (uneven)", [N(1, 1, 3, 5, 7)], lambda x: op(x, [2, 3, 4])),
        S("f32[2,1,2,3,4] -> [1,1,1]", [N(2, 1, 2, 3, 4)], lambda x: op(x, [1, 1, 1])),
    ]


reg("_adaptive_avg_pool2d.default", build_adaptive_avg2d, tol="red")
reg("_adaptive_avg_pool2d_backward.default", build_adaptive_avg2d_bwd, tol="red", backward=True)
reg("_adaptive_avg_pool3d.default", build_adaptive_avg3d, tol="red")

MP2 = [  # desc, shape, kernel, stride, padding, dilation, ceil_mode
    ("k2 s2 f32[1,2,5,5] (floor)", (1, 2, 5, 5), [2, 2], [2, 2], [0, 0], [1, 1], False),
    ("k2 s2 ceil_mode=True f32[1,2,5,5]", (1, 2, 5, 5), [2, 2], [2, 2], [0, 0], [1, 1], True),
    ("k3 s2 padding 1 (overlapping) f32[2,1,6,6]", (2, 1, 6, 6), [3, 3], [2, 2], [1, 1], [1, 1], False),
    ("k(2,3) s1 dilation 2 f32[1,1,6,7]", (1, 1, 6, 7), [2, 3], [1, 1], [0, 0], [2, 2], False),
    ("unbatched f32[2,4,4] k2 stride [] (= kernel)", (2, 4, 4), [2, 2], [], [0, 0], [1, 1], False),
]


def build_maxpool2d():
    op = aten.max_pool2d_with_indices.default
    s = [S(desc, [N(*shape)], lambda x, a=args: op(x, *a)) for desc, shape, *args in MP2]
    s.append(S("ties (all equal, first index in window wins) and -inf/nan",
               [T([[[[1.0, 1.0, -INF, -INF], [1.0, 1.0, -INF, -INF],
                     [NAN, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, 2.0]]]])],
               lambda x: op(x, [2, 2], [2, 2])))
    s.append(S("values only (indices unused, as in inference), -inf/nan",
               [T([[[[1.0, 1.0, -INF, -INF], [1.0, 1.0, -INF, -INF],
                     [NAN, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, NAN]]]])],
               lambda x: op(x, [2, 2], [2, 2])[0]))
    s.append(S("f16[1,1,4,4] k2", [N(1, 1, 4, 4, dtype=F16)], lambda x: op(x, [2, 2])))
    s.append(S("i64[1,1,4,4] k2 (int input)", [I(-9, 9, 1, 1, 4, 4)], lambda x: op(x, [2, 2])))
    s.append(S("one-element tuples k(2,) s(1,) f32[1,1,4,6]", [N(1, 1, 4, 6)], lambda x: op(x, [2], [1])))
    return s


def build_maxpool2d_bwd():
    op = aten.max_pool2d_with_indices_backward.default
    fw = aten.max_pool2d_with_indices.default
    s = []
    for desc, shape, k, st, p, d, c in MP2:
        x = N(*shape)
        g = N(*fw(x, k, st, p, d, c)[0].shape)
        s.append(S(f"grad for {desc} (indices from max_pool2d_with_indices inside forward)", [g, x],
                   lambda g, x, a=(k, st, p, d, c): op(g, x, *a, fw(x, *a)[1])))
    return s


def build_maxpool3d():
    op = aten.max_pool3d_with_indices.default
    return [
        S("k2 s2 f32[1,1,4,4,4]", [N(1, 1, 4, 4, 4)], lambda x: op(x, [2, 2, 2], [2, 2, 2])),
        S("k2 s2 ceil_mode=True f32[1,2,3,5,5]", [N(1, 2, 3, 5, 5)],
          lambda x: op(x, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], True)),
        S("k3 s2 padding 1 f32[1,1,5,5,5]", [N(1, 1, 5, 5, 5)],
          lambda x: op(x, [3, 3, 3], [2, 2, 2], [1, 1, 1])),
        S("unbatched f32[2,4,4,4] k(1,2,2) dilation (1,2,1)", [N(2, 4, 4, 4)],
          lambda x: op(x, [1, 2, 2], [1, 1, 1], [0, 0, 0], [1, 2, 1])),
    ]


reg("max_pool2d_with_indices.default", build_maxpool2d)
reg("max_pool2d_with_indices_backward.default", build_maxpool2d_bwd, backward=True)
reg("max_pool3d_with_indices.default", build_maxpool3d)

AP2 = [  # desc, shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ("k2 stride [] (= kernel) f32[1,2,4,4]", (1, 2, 4, 4), [2, 2], [], [0, 0], False, True, None),
    ("k3 s2 padding 1 count_include_pad=True f32[1,1,5,5]", (1, 1, 5, 5), [3, 3], [2, 2], [1, 1],
     False, True, None),
    ("k3 s2 padding 1 count_include_pad=False f32[1,1,5,5]", (1, 1, 5, 5), [3, 3], [2, 2], [1, 1],
     False, False, None),
    ("k2 s2 ceil_mode=True f32[2,1,5,5] (partial last window)", (2, 1, 5, 5), [2, 2], [2, 2],
     [0, 0], True, True, None),
    ("k(2,3) s1 divisor_override=3 unbatched f32[2,4,5]", (2, 4, 5), [2, 3], [1, 1], [0, 0],
     False, True, 3),
    ("one-element tuples k(3,) s(2,) padding (1,) count_include_pad=False f32[1,1,7,6]",
     (1, 1, 7, 6), [3], [2], [1], False, False, None),
    ("k3 s2 padding 1 ceil_mode=True count_include_pad=True f32[1,1,6,6] (the overhang past "
     "the padding is not counted)", (1, 1, 6, 6), [3, 3], [2, 2], [1, 1], True, True, None),
    ("k3 s2 padding 1 ceil_mode=True count_include_pad=False f32[1,1,6,6]", (1, 1, 6, 6),
     [3, 3], [2, 2], [1, 1], True, False, None),
]


def build_avgpool2d():
    op = aten.avg_pool2d.default
    s = [S(desc, [N(*shape)], lambda x, a=args: op(x, *a)) for desc, shape, *args in AP2]
    s.append(S("bf16[1,1,4,4] k2 (in .npy as f32)", [N(1, 1, 4, 4, dtype=BF16)],
               lambda x: op(x, [2, 2])))
    return s


def build_avgpool2d_bwd():
    op = aten.avg_pool2d_backward.default
    fw = aten.avg_pool2d.default
    s = []
    for desc, shape, k, st, p, c, cip, div in AP2:
        x = N(*shape)
        g = N(*fw(x, k, st, p, c, cip, div).shape)
        s.append(S(f"grad for {desc}", [g, x],
                   lambda g, x, a=(k, st, p, c, cip, div): op(g, x, *a)))
    return s


def build_avgpool3d():
    op = aten.avg_pool3d.default
    return [
        S("k2 f32[1,1,4,4,4]", [N(1, 1, 4, 4, 4)], lambda x: op(x, [2, 2, 2])),
        S("k3 s2 padding 1 count_include_pad=False f32[1,2,5,5,5]", [N(1, 2, 5, 5, 5)],
          lambda x: op(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], False, False)),
        S("k2 s2 ceil_mode=True f32[1,1,3,5,5]", [N(1, 1, 3, 5, 5)],
          lambda x: op(x, [2, 2, 2], [2, 2, 2], [0, 0, 0], True)),
        S("unbatched f32[2,4,4,4] k2 divisor_override=5", [N(2, 4, 4, 4)],
          lambda x: op(x, [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, 5)),
    ]


reg("avg_pool2d.default", build_avgpool2d, tol="red")
reg("avg_pool2d_backward.default", build_avgpool2d_bwd, tol="red", backward=True)
reg("avg_pool3d.default", build_avgpool3d, tol="red")


def pad_op(name, ndim):
    op = opobj(name)

    def build():
        if ndim == 1:
            return [
                S("f32[2,3,5] pad (2,1)", [N(2, 3, 5)], lambda x: op(x, [2, 1])),
                S("unbatched f32[2,4] pad (0,3)", [N(2, 4)], lambda x: op(x, [0, 3])),
                S("i64[1,1,4] pad (1,1)", [I(-9, 9, 1, 1, 4)], lambda x: op(x, [1, 1])),
            ]
        if ndim == 2:
            return [
                S("f32[1,2,4,5] pad (l1,r2,t2,b0)", [N(1, 2, 4, 5)], lambda x: op(x, [1, 2, 2, 0])),
                S("unbatched f32[2,3,3] pad (2,2,2,2)", [N(2, 3, 3)], lambda x: op(x, [2, 2, 2, 2])),
                S("non-contiguous (x.transpose(2,3) of [1,1,5,4]) pad (1,0,0,1)", [N(1, 1, 5, 4)],
                  lambda x: op(x.transpose(2, 3), [1, 0, 0, 1])),
                S("f16[1,1,3,3] pad (1,1,1,1)", [N(1, 1, 3, 3, dtype=F16)],
                  lambda x: op(x, [1, 1, 1, 1])),
            ]
        return [
            S("f32[1,1,3,4,4] pad (1,1,2,0,0,2)", [N(1, 1, 3, 4, 4)],
              lambda x: op(x, [1, 1, 2, 0, 0, 2])),
            S("unbatched f32[2,3,3,3] pad (2,2,1,1,1,1)", [N(2, 3, 3, 3)],
              lambda x: op(x, [2, 2, 1, 1, 1, 1])),
            S("f32[2,1,2,2,3] pad (0,1,0,1,0,1)", [N(2, 1, 2, 2, 3)],
              lambda x: op(x, [0, 1, 0, 1, 0, 1])),
        ]
    reg(name, build)


pad_op("reflection_pad1d.default", 1)
pad_op("reflection_pad2d.default", 2)
pad_op("reflection_pad3d.default", 3)
pad_op("replication_pad2d.default", 2)
pad_op("replication_pad3d.default", 3)


def build_constant_pad():
    op = aten.constant_pad_nd.default
    return [
        S("f32[2,3] pad (1,2) last dim, value 0", [N(2, 3)], lambda x: op(x, [1, 2])),
        S("f32[2,3,4] pad 3 dims (1,0,0,2,1,1) value 1.5", [N(2, 3, 4)],
          lambda x: op(x, [1, 0, 0, 2, 1, 1], 1.5)),
        S("negative pads crop: (-1,2,-1,0)", [N(3, 4)], lambda x: op(x, [-1, 2, -1, 0])),
        S("i64[2,2] value 7 (int)", [I(-5, 5, 2, 2)], lambda x: op(x, [1, 1], 7)),
        S("bool[3] value True", [T([False, True, False], BOOL)], lambda x: op(x, [2, 0], True)),
        S("f32[2,3] value -inf", [N(2, 3)], lambda x: op(x, [0, 1, 1, 0], -INF)),
        S("zero-size f32[0,2] pad (1,1) -> [0,4]", [N(0, 2)], lambda x: op(x, [1, 1])),
        S("f32[2] pad (0,0) (identity)", [N(2)], lambda x: op(x, [0, 0])),
    ]


reg("constant_pad_nd.default", build_constant_pad)


def build_upsample_bilinear():
    op = aten.upsample_bilinear2d.vec
    return [
        S("output_size [6,8] align_corners=False f32[1,2,3,4]", [N(1, 2, 3, 4)],
          lambda x: op(x, [6, 8], False, None)),
        S("output_size [6,8] align_corners=True f32[1,2,3,4]", [N(1, 2, 3, 4)],
          lambda x: op(x, [6, 8], True, None)),
        S("scale_factors [2.0,1.5] (output_size None) align_corners=False", [N(2, 1, 3, 4)],
          lambda x: op(x, None, False, [2.0, 1.5])),
        S("downsample output_size [2,3] from [5,7] align_corners=False", [N(1, 1, 5, 7)],
          lambda x: op(x, [2, 3], False, None)),
        S("output_size [1,1] align_corners=True (corner)", [N(1, 1, 3, 3)],
          lambda x: op(x, [1, 1], True, None)),
        S("scale_factors [0.5,0.5] align_corners=True", [N(1, 1, 4, 6)],
          lambda x: op(x, None, True, [0.5, 0.5])),
    ]


def build_upsample_nearest():
    op = aten.upsample_nearest2d.vec
    return [
        S("output_size [4,6] f32[1,2,2,3]", [N(1, 2, 2, 3)], lambda x: op(x, [4, 6], None)),
        S("scale_factors [2.0,3.0]", [N(1, 1, 2, 2)], lambda x: op(x, None, [2.0, 3.0])),
        S("non-integer scale_factors [1.5,1.5] from [2,3]", [N(1, 1, 2, 3)],
          lambda x: op(x, None, [1.5, 1.5])),
        S("downsample output_size [2,3] from [5,7]", [N(1, 1, 5, 7)], lambda x: op(x, [2, 3], None)),
        S("output_size [5,5] from [3,3] (uneven)", [N(1, 1, 3, 3)], lambda x: op(x, [5, 5], None)),
        S("u8[1,1,2,2] -> [4,4] (int input)", [I(0, 255, 1, 1, 2, 2, dtype=U8)],
          lambda x: op(x, [4, 4], None)),
    ]


def build_grid_sampler():
    op = aten.grid_sampler_2d.default
    # grids mix inside [-1,1] and outside, so every padding mode shows
    def grid(n, h, w):
        return U(n, h, w, 2, lo=-1.4, hi=1.4)
    s = []
    for interp, iname in [(0, "bilinear"), (1, "nearest")]:
        for pad, pname in [(0, "zeros"), (1, "border"), (2, "reflection")]:
            ac = (interp + pad) % 2 == 1
            s.append(S(f"mode={iname} padding_mode={pname} align_corners={ac}",
                       [N(1, 2, 4, 5), grid(1, 3, 3)],
                       lambda x, g, a=(interp, pad, ac): op(x, g, *a)))
    s.append(S("mode=bicubic padding_mode=zeros align_corners=False, batch 2",
               [N(2, 1, 4, 4), grid(2, 2, 3)], lambda x, g: op(x, g, 2, 0, False)))
    s.append(S("mode=bilinear padding_mode=reflection align_corners=True", [N(1, 1, 3, 3), grid(1, 4, 2)],
               lambda x, g: op(x, g, 0, 2, True)))
    return s


reg("upsample_bilinear2d.vec", build_upsample_bilinear, tol="red")
reg("upsample_nearest2d.vec", build_upsample_nearest)
reg("grid_sampler_2d.default", build_grid_sampler, tol="red")


def build_col2im():
    op = aten.col2im.default
    return [
        S("[1, 2*2*2, 9] -> [1,2,4,4] kernel 2 stride 1", [N(1, 8, 9)],
          lambda x: op(x, [4, 4], [2, 2], [1, 1], [0, 0], [1, 1])),
        S("kernel 3 padding 1 stride 2 -> [1,1,5,5] (L=9)", [N(1, 9, 9)],
          lambda x: op(x, [5, 5], [3, 3], [1, 1], [1, 1], [2, 2])),
        S("kernel 2 dilation 2 -> [2,1,5,5] (L=9)", [N(2, 4, 9)],
          lambda x: op(x, [5, 5], [2, 2], [2, 2], [0, 0], [1, 1])),
        S("unbatched [3*1*2, 12] kernel (1,2) -> [3,3,5] (L=3*4)", [N(6, 12)],
          lambda x: op(x, [3, 5], [1, 2], [1, 1], [0, 0], [1, 1])),
    ]


reg("col2im.default", build_col2im, tol="red")


# ---------------------------------------------------------------------------
# indexing, scatter/gather
# ---------------------------------------------------------------------------
def build_gather():
    op = aten.gather.default
    return [
        S("dim=1 f32[3,4], index i64[3,2]", [N(3, 4), I(0, 4, 3, 2)], lambda x, i: op(x, 1, i)),
        S("dim=0 index smaller in other dims [2,2] of [3,4]", [N(3, 4), I(0, 3, 2, 2)],
          lambda x, i: op(x, 0, i)),
        S("dim=-1 3-d, repeated indices", [N(2, 2, 3), T([[[2, 2], [0, 0]], [[1, 1], [2, 0]]], I64)],
          lambda x, i: op(x, -1, i)),
        S("i64 self, index i64", [I(-9, 9, 2, 3), I(0, 3, 2, 3)], lambda x, i: op(x, 1, i)),
        S("zero-size index [3,0]", [N(3, 4), torch.zeros(3, 0, dtype=I64)], lambda x, i: op(x, 1, i)),
        S("non-contiguous self (x.t() of [4,3]) dim=0", [N(4, 3), I(0, 3, 2, 4)],
          lambda x, i: op(x.t(), 0, i)),
    ]


def perm_index(rows, cols, dim_size):
    """unique-per-column indices (scatter without collisions): [rows, cols] with values < dim_size"""
    return torch.stack([torch.randperm(dim_size)[:rows] for _ in range(cols)], 1)


def build_scatter_src():
    op = aten.scatter.src
    return [
        S("dim=0 f32[4,3], unique index [2,3], src [2,3]", [N(4, 3), perm_index(2, 3, 4), N(2, 3)],
          lambda x, i, s: op(x, 0, i, s)),
        S("dim=1 src larger than index (only index-shaped part used)",
          [N(3, 5), T([[4, 0], [1, 2], [3, 3]], I64)[:, :1].contiguous(), N(3, 4)],
          lambda x, i, s: op(x, 1, i, s)),
        S("dim=-1 i64 self", [I(-9, 9, 2, 4), T([[3, 1], [0, 2]], I64), I(-9, 9, 2, 2)],
          lambda x, i, s: op(x, -1, i, s)),
        S("zero-size index", [N(3), torch.zeros(0, dtype=I64), N(0)], lambda x, i, s: op(x, 0, i, s)),
    ]


def build_scatter_value():
    op = aten.scatter.value
    return [
        S("dim=0 f32[4,3] value 9.5", [N(4, 3), perm_index(2, 3, 4)], lambda x, i: op(x, 0, i, 9.5)),
        S("dim=1 value -inf", [N(3, 5), T([[4], [1], [3]], I64)], lambda x, i: op(x, 1, i, -INF)),
        S("i64 self with Python int 7", [I(-9, 9, 2, 4), T([[3, 1], [0, 2]], I64)],
          lambda x, i: op(x, -1, i, 7)),
        S("bool self with True", [torch.zeros(2, 3, dtype=BOOL), T([[0], [2]], I64)],
          lambda x, i: op(x, 1, i, True)),
    ]


def build_scatter_add():
    op = aten.scatter_add.default
    return [
        S("dim=0 duplicates accumulate f32[3,4]", [N(3, 4), T([[0, 1, 2, 0], [0, 1, 0, 2]], I64),
                                                   N(2, 4)], lambda x, i, s: op(x, 0, i, s)),
        S("dim=1 src larger than index", [N(2, 3), T([[0, 0], [2, 1]], I64), N(2, 5)],
          lambda x, i, s: op(x, 1, i, s)),
        S("i64 dim=-1", [I(-9, 9, 2, 3), T([[1, 1, 1], [0, 2, 0]], I64), I(-9, 9, 2, 3)],
          lambda x, i, s: op(x, -1, i, s)),
        S("f16 dim=0", [N(4, dtype=F16), T([0, 0, 3], I64), N(3, dtype=F16)],
          lambda x, i, s: op(x, 0, i, s)),
    ]


def build_scatter_reduce():
    op = aten.scatter_reduce.two
    s = []
    idx = T([[0, 1, 0, 2], [0, 1, 2, 2]], I64)  # row 3 of self is never hit
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            s.append(S(f"reduce='{red}' include_self={inc} dim=0 (duplicates; row 3 untouched)",
                       [U(4, 4, lo=0.5, hi=2), idx, U(2, 4, lo=0.5, hi=2)],
                       lambda x, i, src, r=red, inc=inc: op(x, 0, i, src, r, include_self=inc)))
    s.append(S("reduce='mean' include_self=True i64 (floor division)",
               [T([[1, 2], [3, 4]], I64), T([[0, 0], [0, 0]], I64), T([[2, 2], [5, 7]], I64)],
               lambda x, i, src: op(x, 0, i, src, "mean")))
    s.append(S("reduce='amax' include_self=False dim=1 with nan",
               [N(2, 3), T([[0, 0], [1, 1]], I64), T([[NAN, 1.0], [2.0, 3.0]])],
               lambda x, i, src: op(x, 1, i, src, "amax", include_self=False)))
    return s


def build_index():
    op = aten.index.Tensor
    return [
        S("x[idx] with idx i64[4] (repeats and -1)", [N(5, 3), T([0, 4, -1, 0], I64)],
          lambda x, i: op(x, [i])),
        S("x[i, j] broadcasting index i64[2,1] x i64[3]", [N(4, 5), T([[0], [3]], I64),
                                                         T([1, -2, 4], I64)],
          lambda x, i, j: op(x, [i, j])),
        S("x[:, idx] (None first)", [N(2, 4, 3), T([3, 0], I64)], lambda x, i: op(x, [None, i])),
        S("x[i, :, j] (separated indices -> index dims first)", [N(3, 4, 5), T([0, 2], I64),
                                                                 T([1, 4], I64)],
          lambda x, i, j: op(x, [i, None, j])),
        S("i32 index on i64 tensor", [I(-9, 9, 6), T([5, 1], I32)], lambda x, i: op(x, [i])),
        S("0-d index -> drops the dim", [N(4, 3), T(2, I64)], lambda x, i: op(x, [i])),
        S("x[mask] with a bool[3,4] mask (data-dependent length)", [N(3, 4, 2), B(3, 4)],
          lambda x, m: op(x, [m])),
        S("x[:, mask] with a bool[4] mask", [N(2, 4), T([True, False, True, True], BOOL)],
          lambda x, m: op(x, [None, m])),
    ]


def build_index_put():
    op = aten.index_put.default
    return [
        S("accumulate=False unique rows", [N(5, 3), T([0, 3], I64), N(2, 3)],
          lambda x, i, v: op(x, [i], v)),
        S("accumulate=True duplicates sum", [N(5, 3), T([1, 1, 4, -1], I64), N(4, 3)],
          lambda x, i, v: op(x, [i], v, True)),
        S("accumulate=False broadcast 0-d value, 2 indices", [N(3, 4), T([0, 2], I64),
                                                              T([1, 3], I64), T(7.5)],
          lambda x, i, j, v: op(x, [i, j], v)),
        S("accumulate=True x[:, idx] += v (None first)", [N(2, 4), T([0, 0, 3], I64), N(2, 3)],
          lambda x, i, v: op(x, [None, i], v, True)),
        S("accumulate=True i64 self", [I(-9, 9, 4), T([2, 2, 0], I64), T([1, 2, 3], I64)],
          lambda x, i, v: op(x, [i], v, True)),
        S("accumulate=False negative indices", [N(4), T([-1, -4], I64), N(2)],
          lambda x, i, v: op(x, [i], v)),
        S("boolean mask of rows (3 true) with a column index of 3: x[mask, idx] = v",
          [N(4, 5), T([True, False, True, True], BOOL), T([0, 2, 4], I64), N(3)],
          lambda x, m, i, v: op(x, [m, i], v)),
        S("accumulate=True, 2-d mask (2 true) over dims 0-1, index of 2 on dim 2",
          [N(2, 3, 4), T([[False, True, False], [False, False, True]], BOOL), T([3, 1], I64), N(2)],
          lambda x, m, i, v: op(x, [m, i], v, True)),
        S("boolean mask only, one row of values for every selected position: x[ids == 7] = e",
          [N(2, 3, 4), T([[True, False, True], [False, False, True]], BOOL), N(4)],
          lambda x, m, v: op(x, [m], v)),
        S("accumulate=True, boolean mask of all dims, 0-d value",
          [N(3, 2), T([[True, False], [False, False], [True, True]], BOOL), T(2.5)],
          lambda x, m, v: op(x, [m], v, True)),
    ]


def build_index_select():
    op = aten.index_select.default
    return [
        S("dim=0 f32[5,3] index [4,0,4]", [N(5, 3), T([4, 0, 4], I64)], lambda x, i: op(x, 0, i)),
        S("dim=-1", [N(2, 3, 4), T([3, 1], I64)], lambda x, i: op(x, -1, i)),
        S("i32 index on i64 tensor", [I(-9, 9, 6), T([5, 1, 1], I32)], lambda x, i: op(x, 0, i)),
        S("0-d index (dim kept, size 1)", [N(4, 3), T(2, I64)], lambda x, i: op(x, 1, i)),
        S("empty index -> [0,3]", [N(4, 3), torch.zeros(0, dtype=I64)], lambda x, i: op(x, 0, i)),
        S("bool self", [B(4, 2), T([1, 3], I64)], lambda x, i: op(x, 0, i)),
    ]


def build_embedding():
    op = aten.embedding.default
    return [
        S("weight f32[10,4], indices i64[2,3]", [N(10, 4), I(0, 10, 2, 3)], op),
        S("padding_idx=0 (forward unaffected)", [N(5, 3), T([0, 2, 0, 4], I64)],
          lambda w, i: op(w, i, 0)),
        S("i32 indices", [N(6, 2), T([5, 0, 3], I32)], op),
        S("0-d index -> [dim]", [N(4, 3), T(1, I64)], op),
        S("bf16 weight (in .npy as f32)", [N(4, 3, dtype=BF16), T([[3, 1]], I64)], op),
    ]


def build_embedding_bwd():
    op = aten.embedding_dense_backward.default
    return [
        S("num_weights=6, duplicates accumulate, padding_idx=-1 (none)", [N(2, 3, 4),
                                                                         T([[0, 2, 0], [5, 2, 2]], I64)],
          lambda g, i: op(g, i, 6, -1, False)),
        S("padding_idx=2 (its rows get zero grad)", [N(4, 3), T([2, 1, 2, 0], I64)],
          lambda g, i: op(g, i, 5, 2, False)),
        S("scale_grad_by_freq=True", [N(5, 2), T([1, 1, 1, 3, 0], I64)],
          lambda g, i: op(g, i, 4, -1, True)),
        S("i32 indices", [N(3, 2), T([0, 3, 3], I32)], lambda g, i: op(g, i, 4, -1, False)),
    ]


def build_embedding_bag():
    op = aten._embedding_bag.default
    w = N(6, 3)
    return [
        S("mode=0 (sum), offsets [0,2,2] (bag 1 empty), per_sample_weights; outputs "
          "(output, offset2bag, bag_size, max_indices)",
          [w, T([0, 2, 1, 5, 2], I64), T([0, 2, 2], I64), U(5)],
          lambda w, i, o, p: op(w, i, o, False, 0, False, p)),
        S("mode=1 (mean)", [w, T([0, 2, 1, 5, 2], I64), T([0, 3], I64)],
          lambda w, i, o: op(w, i, o, False, 1)),
        S("mode=2 (max)", [w, T([0, 2, 1, 5, 2], I64), T([0, 1, 3], I64)],
          lambda w, i, o: op(w, i, o, False, 2)),
        S("mode=0 include_last_offset=True", [w, T([4, 3, 1, 0], I64), T([0, 1, 4], I64)],
          lambda w, i, o: op(w, i, o, False, 0, False, None, True)),
        S("mode=1 padding_idx=2 (entries equal to 2 are skipped)",
          [w, T([2, 1, 2, 3], I64), T([0, 2], I64)],
          lambda w, i, o: op(w, i, o, False, 1, False, None, False, 2)),
    ]


def build_masked_scatter():
    op = aten.masked_scatter.default
    return [
        S("f32[2,3] mask bool[2,3] source f32[6] (consumed in row-major order)",
          [N(2, 3), T([[True, False, True], [False, True, True]], BOOL), N(6)], op),
        S("broadcast mask bool[3] over f32[2,3], source [2,4] (extra elements unused)",
          [N(2, 3), T([False, True, True], BOOL), N(2, 4)], op),
        S("all-false mask (self unchanged)", [N(4), torch.zeros(4, dtype=BOOL), N(4)], op),
        S("i64 self and source", [I(-9, 9, 5), T([True, True, False, False, True], BOOL),
                                  I(-9, 9, 5)], op),
    ]


reg("gather.default", build_gather)
reg("scatter.src", build_scatter_src)
reg("scatter.value", build_scatter_value)
reg("scatter_add.default", build_scatter_add, tol="red")
reg("scatter_reduce.two", build_scatter_reduce, tol="red")
reg("index.Tensor", build_index)
reg("index_put.default", build_index_put, tol="red")
reg("index_select.default", build_index_select)
reg("embedding.default", build_embedding)
reg("embedding_dense_backward.default", build_embedding_bwd, tol="red", backward=True)
reg("_embedding_bag.default", build_embedding_bag, tol="red",
    note="outputs 1-3 (offset2bag, bag_size, max_indices) are PyTorch CPU implementation details "
         "(e.g. offset2bag comes out empty for mode=sum); output 0 is the one that matters")
reg("masked_scatter.default", build_masked_scatter)


def build_select():
    op = aten.select.int
    return [
        S("dim=0 index 1 f32[3,4]", [N(3, 4)], lambda x: op(x, 0, 1)),
        S("dim=-1 index -1", [N(2, 3, 4)], lambda x: op(x, -1, -1)),
        S("1-d -> 0-d", [N(5)], lambda x: op(x, 0, 3)),
        S("i64 dim=1 index 0 of non-contiguous (x.t() of [4,3])", [I(-9, 9, 4, 3)],
          lambda x: op(x.t(), 1, 0)),
    ]


def build_select_scatter():
    op = aten.select_scatter.default
    return [
        S("dim=0 index 1 f32[3,4] src [4]", [N(3, 4), N(4)], lambda x, s: op(x, s, 0, 1)),
        S("dim=-1 index -1 src [2,3]", [N(2, 3, 4), N(2, 3)], lambda x, s: op(x, s, -1, -1)),
        S("1-d, src 0-d", [N(5), T(9.0)], lambda x, s: op(x, s, 0, 3)),
        S("i64", [I(-9, 9, 2, 3), I(-9, 9, 2)], lambda x, s: op(x, s, 1, 2)),
    ]


def build_slice():
    op = aten.slice.Tensor
    big = 2**63 - 1
    return [
        S("dim=1 start 1 end 3 f32[3,5]", [N(3, 5)], lambda x: op(x, 1, 1, 3)),
        S("dim=0 step 2, end INT64_MAX", [N(7, 2)], lambda x: op(x, 0, 0, big, 2)),
        S("dim=-1 negative start -3 (end None)", [N(2, 6)], lambda x: op(x, -1, -3)),
        S("start None, end -1", [N(5)], lambda x: op(x, 0, None, -1)),
        S("empty result (start 4 >= end 2)", [N(6)], lambda x: op(x, 0, 4, 2)),
        S("end beyond size (clamped), step 3", [N(8)], lambda x: op(x, 0, 1, 100, 3)),
        S("i64 dim=0 of non-contiguous (x.t())", [I(-9, 9, 3, 4)], lambda x: op(x.t(), 0, 1, 3)),
    ]


def build_slice_scatter():
    op = aten.slice_scatter.default
    big = 2**63 - 1
    return [
        S("dim=1 start 1 end 3 f32[3,5] src [3,2]", [N(3, 5), N(3, 2)],
          lambda x, s: op(x, s, 1, 1, 3)),
        S("dim=0 step 2 end INT64_MAX src [4,2]", [N(7, 2), N(4, 2)],
          lambda x, s: op(x, s, 0, 0, big, 2)),
        S("dim=-1 negative start -3 (end None)", [N(2, 6), N(2, 3)], lambda x, s: op(x, s, -1, -3)),
        S("empty slice (src [0])", [N(6), N(0)], lambda x, s: op(x, s, 0, 4, 4)),
        S("i64 start None end -1", [I(-9, 9, 5), I(-9, 9, 4)], lambda x, s: op(x, s, 0, None, -1)),
    ]


def build_split():
    op = aten.split_with_sizes.default
    return [
        S("[2,3] along dim 0 of f32[5,2] (list output: 2 tensors)", [N(5, 2)],
          lambda x: op(x, [2, 3])),
        S("[0,2,2] with a zero-size piece, dim -1", [N(3, 4)], lambda x: op(x, [0, 2, 2], -1)),
        S("[1,1,1] i64 dim 1", [I(-9, 9, 2, 3)], lambda x: op(x, [1, 1, 1], 1)),
        S("single piece [4]", [N(4)], lambda x: op(x, [4])),
    ]


def build_cat():
    op = aten.cat.default
    return [
        S("dim 0 of f32[2,3] and f32[1,3]", [N(2, 3), N(1, 3)], lambda a, b: op([a, b])),
        S("dim -1 of three tensors", [N(2, 1), N(2, 3), N(2, 2)], lambda a, b, c: op([a, b, c], -1)),
        S("mixed dtypes i64 + f32 -> f32", [I(-9, 9, 2), N(3)], lambda a, b: op([a, b])),
        S("zero-size piece [0,3]", [N(0, 3), N(2, 3)], lambda a, b: op([a, b], 0)),
        S("single tensor", [N(2, 2)], lambda a: op([a], 1)),
        S("bool and non-contiguous (a.t())", [B(3, 2), B(2, 3)], lambda a, b: op([a.t(), b], 0)),
        S("bf16 (in .npy as f32) dim 1", [N(2, 2, dtype=BF16), N(2, 1, dtype=BF16)],
          lambda a, b: op([a, b], 1)),
    ]


reg("select.int", build_select)
reg("select_scatter.default", build_select_scatter)
reg("slice.Tensor", build_slice)
reg("slice_scatter.default", build_slice_scatter)
reg("split_with_sizes.default", build_split)
reg("cat.default", build_cat)


def build_sort():
    op = aten.sort.default
    dup = T([3.0, 1.0, 2.0, 1.0, 3.0, 1.0, 2.0, 2.0])
    return [
        S("f32[3,5] default dim=-1 ascending", [N(3, 5)], op),
        S("descending dim=0", [N(4, 3)], lambda x: op(x, 0, True)),
        S("duplicates ascending (ties: reference is the stable order)", [dup], op),
        S("duplicates descending (ties: reference is the stable order)", [dup],
          lambda x: op(x, -1, True)),
        S("nan sorts last (ascending) / first (descending); infs",
          [T([NAN, 1.0, -INF, INF, 0.0, -0.5])], lambda x: op(x, 0, False)),
        S("nan descending", [T([NAN, 1.0, -INF, INF, 0.0, -0.5])], lambda x: op(x, 0, True)),
        S("i64", [I(-9, 9, 6)], op),
        S("0-d", [T(2.0)], op),
        S("non-contiguous (x.t() of [4,3]) dim=1", [N(4, 3)], lambda x: op(x.t(), 1)),
    ]


def build_topk():
    op = aten.topk.default
    return [
        S("k=2 largest dim=-1 f32[3,5]", [N(3, 5)], lambda x: op(x, 2)),
        S("k=3 smallest (largest=False) dim=0", [N(4, 3)], lambda x: op(x, 3, 0, False)),
        S("k=1", [N(6)], lambda x: op(x, 1)),
        S("k=0 -> empty", [N(2, 4)], lambda x: op(x, 0)),
        S("k = dim size (full sort)", [N(5)], lambda x: op(x, 5)),
        S("i64 k=2", [T([5, -1, 9, 3, 7], I64)], lambda x: op(x, 2)),
        S("with inf/-inf", [T([1.0, INF, -INF, 0.5, 2.0])], lambda x: op(x, 3)),
    ]


reg("sort.default", build_sort, note="sort.default has no `stable` argument (aten.sort.stable is a "
    "separate, non-core overload); PyTorch CPU gives the stable order for small inputs like these "
    "(checked), but not in general for n > 16")
reg("topk.default", build_topk)


# ---------------------------------------------------------------------------
# views and shape ops
# ---------------------------------------------------------------------------
def build_view():
    op = aten.view.default
    return [
        S("[2,3,4] -> [6,4]", [N(2, 3, 4)], lambda x: op(x, [6, 4])),
        S("[2,3] -> [-1]", [N(2, 3)], lambda x: op(x, [-1])),
        S("0-d -> [1,1]", [T(2.0)], lambda x: op(x, [1, 1])),
        S("[1] -> [] (0-d)", [T([3.0])], lambda x: op(x, [])),
        S("i64 [6] -> [3,-1]", [I(-9, 9, 6)], lambda x: op(x, [3, -1])),
        S("zero-size [0,3] -> [3,0]", [N(0, 3)], lambda x: op(x, [3, 0])),
    ]


def build_permute():
    op = aten.permute.default
    return [
        S("[2,3,4] dims [2,0,1]", [N(2, 3, 4)], lambda x: op(x, [2, 0, 1])),
        S("negative dims [-1,-2]", [N(3, 2)], lambda x: op(x, [-1, -2])),
        S("0-d dims []", [T(1.0)], lambda x: op(x, [])),
        S("bool [2,1,3] dims [1,2,0]", [B(2, 1, 3)], lambda x: op(x, [1, 2, 0])),
    ]


def build_expand():
    op = aten.expand.default
    return [
        S("[3,1] -> [3,4]", [N(3, 1)], lambda x: op(x, [3, 4])),
        S("-1 keeps a dim: [2,1] -> [-1,3]", [N(2, 1)], lambda x: op(x, [-1, 3])),
        S("new leading dims [3] -> [2,2,3]", [N(3)], lambda x: op(x, [2, 2, 3])),
        S("0-d -> [2,2]", [T(5.0)], lambda x: op(x, [2, 2])),
        S("i64 [1,3] -> [0,3] (zero-size)", [I(-9, 9, 1, 3)], lambda x: op(x, [0, 3])),
    ]


def build_repeat():
    op = aten.repeat.default
    return [
        S("[2,3] repeats [2,1]", [N(2, 3)], lambda x: op(x, [2, 1])),
        S("new leading dims [3] repeats [2,1,2]", [N(3)], lambda x: op(x, [2, 1, 2])),
        S("0-d repeats [3]", [T(4.0)], lambda x: op(x, [3])),
        S("repeat 0 -> zero-size", [N(2, 2)], lambda x: op(x, [0, 2])),
        S("i64 non-contiguous (x.t())", [I(-9, 9, 2, 3)], lambda x: op(x.t(), [1, 2])),
    ]


def build_flip():
    op = aten.flip.default
    return [
        S("dims [0] f32[3,4]", [N(3, 4)], lambda x: op(x, [0])),
        S("dims [-1,0]", [N(2, 3, 2)], lambda x: op(x, [-1, 0])),
        S("dims [] (identity)", [N(3)], lambda x: op(x, [])),
        S("bool dims [1]", [B(2, 3)], lambda x: op(x, [1])),
        S("i64 non-contiguous (x.t()) dims [1]", [I(-9, 9, 3, 2)], lambda x: op(x.t(), [1])),
    ]


def build_diagonal():
    op = aten.diagonal.default
    return [
        S("f32[3,4] offset 0", [N(3, 4)], op),
        S("offset 1", [N(3, 4)], lambda x: op(x, 1)),
        S("offset -2", [N(4, 3)], lambda x: op(x, -2)),
        S("3-d dims (-1, 0) -> diagonal appended last", [N(3, 2, 4)], lambda x: op(x, 0, -1, 0)),
        S("offset beyond size -> empty", [N(2, 2)], lambda x: op(x, 3)),
    ]


def build_squeeze_dim():
    op = aten.squeeze.dim
    return [
        S("[2,1,3] dim 1", [N(2, 1, 3)], lambda x: op(x, 1)),
        S("dim of size 3 (no-op)", [N(2, 3)], lambda x: op(x, 1)),
        S("negative dim -1 of [2,1]", [N(2, 1)], lambda x: op(x, -1)),
        S("0-d dim 0 (no-op)", [T(1.0)], lambda x: op(x, 0)),
    ]


def build_squeeze_dims():
    op = aten.squeeze.dims
    return [
        S("[1,2,1,3] dims [0,2]", [N(1, 2, 1, 3)], lambda x: op(x, [0, 2])),
        S("dims incl. a non-1 dim [0,1] of [1,3]", [N(1, 3)], lambda x: op(x, [0, 1])),
        S("negative dims [-1] of [2,1]", [N(2, 1)], lambda x: op(x, [-1])),
        S("dims [] (no-op)", [N(1, 2)], lambda x: op(x, [])),
    ]


def build_unsqueeze():
    op = aten.unsqueeze.default
    return [
        S("[2,3] dim 0", [N(2, 3)], lambda x: op(x, 0)),
        S("[2,3] dim -1", [N(2, 3)], lambda x: op(x, -1)),
        S("[2,3] dim 1", [N(2, 3)], lambda x: op(x, 1)),
        S("0-d dim 0", [T(1.0)], lambda x: op(x, 0)),
    ]


def build_as_strided():
    op = aten.as_strided.default
    return [
        S("sliding windows [3,3] strides [1,1] of f32[5] (overlapping)", [N(5)],
          lambda x: op(x, [3, 3], [1, 1])),
        S("transpose view [4,3] strides [1,4] of f32[3,4]", [N(3, 4)],
          lambda x: op(x, [4, 3], [1, 4])),
        S("storage_offset 2 [2,2] strides [3,1] of f32[9]", [N(9)],
          lambda x: op(x, [2, 2], [3, 1], 2)),
        S("stride 0 broadcast [2,3] strides [0,1]", [N(3)], lambda x: op(x, [2, 3], [0, 1])),
        S("i64 0-d result size [] offset 1", [I(-9, 9, 4)], lambda x: op(x, [], [], 1)),
        S("after a size-0 slice: [0,3] strides [3,1] of x[0:0]", [N(2, 3)], lambda x: op(x[0:0], [0, 3], [3, 1])),
        # Views: as_strided reads the storage under its operand, not its row-major copy.
        S("of t(x) (view, strides [1,3]): [3,2] strides [1,3] of arange(6).reshape(2,3) gives "
          "[0,3,1,4,2,5]", [torch.arange(6.0).reshape(2, 3)], lambda x: op(x.t(), [3, 2], [1, 3])),
        S("of permute(x, [2,0,1]) of f32[2,3,4]: [4,6] strides [1,4]", [N(2, 3, 4)],
          lambda x: op(x.permute(2, 0, 1), [4, 6], [1, 4])),
        S("of x.transpose(0,1) with storage_offset 1: [2,2] strides [2,1]", [N(3, 2)],
          lambda x: op(x.transpose(0, 1), [2, 2], [2, 1], 1)),
        S("of x.narrow(0, 1, 2) (storage offset 2; no offset given: the view's own)", [N(3, 2)],
          lambda x: op(x.narrow(0, 1, 2), [2, 2], [1, 2])),
        S("of a channels-last input f32[1,3,2,2]: [12] strides [1] is its NHWC storage",
          [N(1, 3, 2, 2).contiguous(memory_format=torch.channels_last)], lambda x: op(x, [12], [1])),
        S("nested: as_strided of as_strided(x, [3,2], [1,3]) (a transposed view), offset 1",
          [N(2, 3)], lambda x: op(op(x, [3, 2], [1, 3]), [2, 2], [2, 1], 1)),
    ]


reg("view.default", build_view)
reg("permute.default", build_permute)
reg("expand.default", build_expand)
reg("repeat.default", build_repeat)
reg("flip.default", build_flip)
reg("diagonal.default", build_diagonal)
reg("squeeze.dim", build_squeeze_dim)
reg("squeeze.dims", build_squeeze_dims)
reg("unsqueeze.default", build_unsqueeze)
reg("as_strided.default", build_as_strided,
    note="as_strided indexes the storage under its input: dense views (permuted, transposed, "
         "narrowed, channels-last) are permuted into storage order first; views with gaps are "
         "refused (check/as_strided_gaps.pt2)")


def build_alias():
    op = aten.alias.default
    return [S("f32[2,3]", [N(2, 3)], op), S("i64 0-d", [T(4, I64)], op),
            S("bool[3]", [B(3)], op)]


def build_clone():
    op = aten.clone.default
    return [
        S("f32[2,3]", [N(2, 3)], op),
        S("memory_format=channels_last f32[1,3,2,2] (same values)", [N(1, 3, 2, 2)],
          lambda x: op(x, memory_format=torch.channels_last)),
        S("non-contiguous (x.t()) -> contiguous_format", [N(3, 2)],
          lambda x: op(x.t(), memory_format=torch.contiguous_format)),
        S("i64 0-d", [T(4, I64)], op),
        S("bf16 (in .npy as f32)", [N(3, dtype=BF16)], op),
    ]


def build_copy():
    op = aten.copy.default
    return [
        S("same shape f32", [N(2, 3), N(2, 3)], op),
        S("broadcast src f32[3] into self f32[2,3]", [N(2, 3), N(3)], op),
        S("dtype: src i64 into self f32", [N(3), T([1, -2, 3], I64)], op),
        S("dtype: src f32 into self i64 (truncates toward zero)", [T([0, 0, 0, 0], I64),
                                                                   T([-1.7, 2.5, -0.5, 3.9])], op),
        S("dtype: src f32 into self bf16 (in .npy as f32; rounds)", [N(3, dtype=BF16),
                                                                     T([1.00390625, 3.14159, -2.7])],
          op),
        S("src non-contiguous (s.t())", [N(2, 3), N(3, 2)], lambda x, s: op(x, s.t())),
    ]


def build_to_copy():
    op = aten._to_copy.default
    return [
        S("f32 -> f16 (incl. overflow to inf)", [T([1.0, 65504.0, 70000.0, 1e-8, -2.5, NAN])],
          lambda x: op(x, dtype=F16)),
        S("f32 -> bf16 (round to nearest even; in .npy widened)", [T([1.0, 1.00390625, 1.01171875,
                                                                      3.14159, 1e38, -INF])],
          lambda x: op(x, dtype=BF16)),
        S("f32 -> i64 (truncates toward zero)", [T([-2.7, -0.5, 0.5, 2.7, 1e9])],
          lambda x: op(x, dtype=I64)),
        S("f32 -> bool (nonzero; nan -> true, -0 -> false)", [T([0.0, -0.0, NAN, 0.1, -INF])],
          lambda x: op(x, dtype=BOOL)),
        S("i64 -> f32", [T([1, -2, 2**40 + 1], I64)], lambda x: op(x, dtype=F32)),
        S("bool -> f32", [T([True, False], BOOL)], lambda x: op(x, dtype=F32)),
        S("i64 -> i32 (wraps)", [T([1, -2, 2**32 + 5], I64)], lambda x: op(x, dtype=I32)),
        S("bf16 -> f32 (input in .npy as f32)", [N(3, dtype=BF16)], lambda x: op(x, dtype=F32)),
        S("no dtype (plain copy) of non-contiguous (x.t())", [N(3, 2)], lambda x: op(x.t())),
        S("f16 -> u8 (in range)", [T([0.0, 1.5, 200.7, 255.0], F16)], lambda x: op(x, dtype=U8)),
    ]


reg("alias.default", build_alias)
reg("clone.default", build_clone)
reg("copy.default", build_copy)
reg("_to_copy.default", build_to_copy)


# ---------------------------------------------------------------------------
# factories (no tensor inputs)
# ---------------------------------------------------------------------------
def build_full():
    op = aten.full.default
    return [
        S("[2,3] fill 1.5 (Python float -> f32)", [], lambda: op([2, 3], 1.5)),
        S("[3] fill 7 (Python int -> i64)", [], lambda: op([3], 7)),
        S("[2] fill True (-> bool)", [], lambda: op([2], True)),
        S("[] (0-d) fill -inf dtype=f32", [], lambda: op([], -INF, dtype=F32)),
        S("[2,2] fill 0.1 dtype=f16", [], lambda: op([2, 2], 0.1, dtype=F16)),
        S("[0,3] fill 2.0 (zero-size)", [], lambda: op([0, 3], 2.0)),
    ]


def build_full_like():
    op = aten.full_like.default
    return [
        S("like f32[2,3] fill 1.5", [N(2, 3)], lambda x: op(x, 1.5)),
        S("like i64[3] fill 2.7 (cast to i64 -> 2)", [I(-9, 9, 3)], lambda x: op(x, 2.7)),
        S("like f32[2] fill 3 dtype=i32", [N(2)], lambda x: op(x, 3, dtype=I32)),
        S("like bool[2,2] fill True", [B(2, 2)], lambda x: op(x, True)),
        S("like f32 0-d fill nan", [T(1.0)], lambda x: op(x, NAN)),
        S("like bf16[3] (in .npy as f32) fill 0.1", [N(3, dtype=BF16)], lambda x: op(x, 0.1)),
    ]


def build_fill():
    op = aten.fill.Scalar
    return [
        S("f32[2,3] fill 2.5", [N(2, 3)], lambda x: op(x, 2.5)),
        S("i64[3] fill 3", [I(-9, 9, 3)], lambda x: op(x, 3)),
        S("i64[3] fill 2.9 (cast -> 2)", [I(-9, 9, 3)], lambda x: op(x, 2.9)),
        S("bool[2] fill True", [B(2)], lambda x: op(x, True)),
        S("f16 0-d fill -inf", [T(1.0, F16)], lambda x: op(x, -INF)),
    ]


def build_scalar_tensor():
    op = aten.scalar_tensor.default
    return [
        S("2.5 (-> f32 0-d)", [], lambda: op(2.5)),
        S("3 (Python int, still f32 by default)", [], lambda: op(3)),
        S("7 dtype=i64", [], lambda: op(7, dtype=I64)),
        S("True dtype=bool", [], lambda: op(True, dtype=BOOL)),
        S("-inf dtype=f16", [], lambda: op(-INF, dtype=F16)),
        S("0.1 dtype=f64", [], lambda: op(0.1, dtype=F64)),
    ]


def build_arange():
    op = aten.arange.start_step
    return [
        S("(0, 5, 1) ints -> i64", [], lambda: op(0, 5, 1)),
        S("(0.0, 1.0, 0.25) floats -> f32", [], lambda: op(0.0, 1.0, 0.25)),
        S("(5, -1, -2) negative step -> i64", [], lambda: op(5, -1, -2)),
        S("(1, 2.5, 0.5) mixed -> f32", [], lambda: op(1, 2.5, 0.5)),
        S("(0, 4, 1) dtype=f32", [], lambda: op(0, 4, 1, dtype=F32)),
        S("(-1.0, 1.0, 0.3) -> 7 elements (ceil((end-start)/step))", [], lambda: op(-1.0, 1.0, 0.3)),
        S("(3, 3, 1) -> empty", [], lambda: op(3, 3, 1)),
    ]


def build_empty():
    op = aten.empty.memory_format
    return [
        S("[2,3] (f32 default; values undefined)", [], lambda: op([2, 3])),
        S("[4] dtype=i64", [], lambda: op([4], dtype=I64)),
        S("[0,2] zero-size", [], lambda: op([0, 2])),
        S("[1,2,2,2] memory_format=channels_last", [],
          lambda: op([1, 2, 2, 2], memory_format=torch.channels_last)),
    ]


def build_empty_strided():
    op = aten.empty_strided.default
    return [
        S("[2,3] strides [3,1] (values undefined)", [], lambda: op([2, 3], [3, 1])),
        S("[2,3] strides [1,2] (column-major) dtype=i64", [], lambda: op([2, 3], [1, 2], dtype=I64)),
        S("[] strides [] dtype=bool", [], lambda: op([], [], dtype=BOOL)),
    ]


reg("full.default", build_full)
reg("full_like.default", build_full_like)
reg("fill.Scalar", build_fill)
reg("scalar_tensor.default", build_scalar_tensor)
reg("arange.start_step", build_arange)
reg("empty.memory_format", build_empty, compare="shape_dtype")
reg("empty_strided.default", build_empty_strided, compare="shape_dtype")


# ---------------------------------------------------------------------------
# random
# ---------------------------------------------------------------------------
UNIF = {"mean": 0.5, "std": 1 / math.sqrt(12), "min": 0.0, "max": 1.0}
NORM = {"mean": 0.0, "std": 1.0, "min": None, "max": None}


def build_rand():
    op = aten.rand.default
    return [
        S("[64,64] f32 uniform [0,1)", [], lambda: op([64, 64]), moments=UNIF),
        S("[4096] f16", [], lambda: op([4096], dtype=F16), moments=UNIF),
        S("[0,3] zero-size", [], lambda: op([0, 3]), moments=None),
    ]


def build_randn():
    op = aten.randn.default
    return [
        S("[64,64] f32 standard normal", [], lambda: op([64, 64]), moments=NORM),
        S("[4096] f64", [], lambda: op([4096], dtype=F64), moments=NORM),
        S("[] 0-d", [], lambda: op([]), moments=None),
    ]


def build_randperm():
    op = aten.randperm.default
    n = 4096
    return [
        S(f"n={n} (i64; a permutation of 0..n-1)", [], lambda: op(n),
          moments={"mean": (n - 1) / 2, "std": math.sqrt((n * n - 1) / 12), "min": 0, "max": n - 1,
                   "permutation": True}),
        S("n=1 -> [0]", [], lambda: op(1), moments={"mean": 0.0, "std": 0.0, "min": 0, "max": 0,
                                                   "permutation": True}),
        S("n=0 -> empty", [], lambda: op(0), moments=None),
        S("n=5 dtype=i32", [], lambda: op(5, dtype=I32),
          moments={"mean": 2.0, "std": math.sqrt(2.0), "min": 0, "max": 4, "permutation": True}),
    ]


def build_dropout():
    op = aten.native_dropout.default
    return [
        S("p=0.5 train=True on ones[64,64]: out in {0, 2}, mask bool (keep prob 0.5)",
          [torch.ones(64, 64)], lambda x: op(x, 0.5, True),
          moments=[{"mean": 1.0, "std": 1.0, "min": 0.0, "max": 2.0, "values": [0.0, 2.0]},
                   {"mean": 0.5, "std": 0.5, "min": 0, "max": 1}]),
        S("p=0.2 train=True on ones[4096]: out in {0, 1.25}", [torch.ones(4096)],
          lambda x: op(x, 0.2, True),
          moments=[{"mean": 1.0, "std": 0.5, "min": 0.0, "max": 1.25, "values": [0.0, 1.25]},
                   {"mean": 0.8, "std": 0.4, "min": 0, "max": 1}]),
        S("train=False: identity, mask all true (deterministic)", [N(3, 4)],
          lambda x: op(x, 0.5, False), moments="exact"),
        S("p=1.0 train=True: all zeros, mask all false (deterministic)", [N(2, 3)],
          lambda x: op(x, 1.0, True), moments="exact"),
        S("p=0.0 train=True: identity, mask all true (deterministic)", [N(2, 3)],
          lambda x: op(x, 0.0, True), moments="exact"),
    ]


def build_generator_overload(name, moments):
    """The `.generator` overload with `generator=None` (transformers' UnivNet calls
    `torch.randn(..., generator=generator)`): the default generator, as `.default`."""
    op = getattr(aten, name).generator
    return lambda: [S("[64,64] f32, generator=None", [], lambda: op([64, 64], generator=None), moments=moments)]


reg("rand.default", build_rand, random=True, compare="moments")
reg("randn.default", build_randn, random=True, compare="moments")
reg("rand.generator", build_generator_overload("rand", UNIF), random=True, compare="moments")
reg("randn.generator", build_generator_overload("randn", NORM), random=True, compare="moments")
reg("randperm.default", build_randperm, random=True, compare="moments")
reg("native_dropout.default", build_dropout, random=True, compare="moments")


# ---------------------------------------------------------------------------
# FFT (complex64)
# ---------------------------------------------------------------------------
def build_fft_r2c():
    op = aten._fft_r2c.default
    return [
        S("f32[4,8] dim [1] norm 0 (none) onesided -> c64[4,5]", [N(4, 8)],
          lambda x: op(x, [1], 0, True)),
        S("f32[2,6] dim [1] norm 2 (1/n) onesided=False -> c64[2,6]", [N(2, 6)],
          lambda x: op(x, [1], 2, False)),
        S("f32[4,6] dims [0,1] norm 1 (1/sqrt(n)) onesided", [N(4, 6)],
          lambda x: op(x, [0, 1], 1, True)),
        S("odd length f32[7] dim [0] onesided -> c64[4]", [N(7)], lambda x: op(x, [0], 0, True)),
    ]


def build_fft_c2r():
    op = aten._fft_c2r.default

    def cplx(*shape):
        return torch.complex(N(*shape), N(*shape))
    return [
        S("c64[4,5] dim [1] norm 0 last_dim_size 8 -> f32[4,8] (in .npy as complex64)",
          [cplx(4, 5)], lambda x: op(x, [1], 0, 8)),
        S("c64[2,4] dim [1] norm 2 last_dim_size 7 (odd)", [cplx(2, 4)], lambda x: op(x, [1], 2, 7)),
        S("c64[4,4] dims [0,1] norm 1 last_dim_size 6", [cplx(4, 4)],
          lambda x: op(x, [0, 1], 1, 6)),
        S("round trip: c2r(r2c(x)) of f32[6] inside forward, norm 2 (backward)", [N(6)],
          lambda x: op(aten._fft_r2c.default(x, [0], 0, True), [0], 2, 6)),
    ]


def build_fft_c2c():
    op = aten._fft_c2c.default

    def cplx(*shape):
        return torch.complex(N(*shape), N(*shape))
    return [
        S("c64[4,8] dim [1] norm 0 forward", [cplx(4, 8)], lambda z: op(z, [1], 0, True)),
        S("c64[4,6] dims [0,1] norm 2 (1/n) inverse", [cplx(4, 6)], lambda z: op(z, [0, 1], 2, False)),
        S("FNet mixing: real(fft2(x)) of f32[2,5,8] over dims [1,2], norm 1 (1/sqrt(n))", [N(2, 5, 8)],
          lambda x: torch.view_as_real(op(torch.complex(x, torch.zeros_like(x)), [1, 2], 1, True))[..., 0]),
    ]


reg("_fft_r2c.default", build_fft_r2c, tol="red")
reg("_fft_c2c.default", build_fft_c2c, tol="red")
reg("_fft_c2r.default", build_fft_c2r, tol="red",
    note="imaginary parts of the DC (and Nyquist) bins are ignored by c2r")


# ---------------------------------------------------------------------------
# complex values (beyond Core ATen: complex RoPE, spectra)
# ---------------------------------------------------------------------------
def cplx(*shape):
    return torch.complex(N(*shape), N(*shape))


def build_view_as_complex():
    op = aten.view_as_complex.default
    return [
        S("f32[3,4,2] -> c64[3,4]", [N(3, 4, 2)], op),
        S("complex RoPE: f32[2,5,8] viewed as [2,5,4,2], times unit rotations, back to real",
          [N(2, 5, 8), U(5, 4, lo=-3.0, hi=3.0)],
          lambda x, a: aten.view_as_real.default(
              op(x.view(2, 5, 4, 2)) * aten.polar.default(torch.ones(5, 4), a)).flatten(2)),
        S("f64[2,2] -> c128[2]", [N(2, 2, dtype=torch.float64)], op),
    ]


def build_view_as_real():
    op = aten.view_as_real.default
    return [
        S("c64[3,4] -> f32[3,4,2] (in .npy as complex64)", [cplx(3, 4)], op),
        S("c64 0-d -> f32[2]", [cplx()], op),
    ]


def build_complex():
    op = aten.complex.default
    return [
        S("f32[3,4] + i f32[3,4] -> c64", [N(3, 4), N(3, 4)], op),
        S("broadcast f32[3,1] + i f32[4]", [N(3, 1), N(4)], op),
        S("f64[2] -> c128", [N(2, dtype=torch.float64), N(2, dtype=torch.float64)], op),
    ]


def build_polar():
    op = aten.polar.default
    return [
        S("abs f32[3,4] >= 0, angle f32[3,4] in [-4, 4)", [U(3, 4, lo=0.0, hi=2.0), U(3, 4, lo=-4.0, hi=4.0)], op),
        S("Meta's freqs_cis: polar(ones, outer(t, freqs))", [U(6, 1, lo=0.0, hi=8.0), U(4, lo=0.0, hi=1.0)],
          lambda t, f: op(torch.ones(6, 4), t * f)),
    ]


def build_conj():
    op = aten._conj.default
    return [
        S("c64[3,4] (cloned: _conj is a lazy view in eager)", [cplx(3, 4)], lambda z: op(z).clone()),
        S("z * conj(z) = |z|^2 + 0i", [cplx(5)], lambda z: z * op(z).clone()),
    ]


def build_angle():
    op = aten.angle.default
    return [
        S("c64[3,4] -> f32", [cplx(3, 4)], op),
        S("c64 on the axes: 1, -1, i, -i, 0, -0", [torch.complex(T([1.0, -1.0, 0.0, 0.0, 0.0, -0.0]),
                                                               T([0.0, 0.0, 1.0, -1.0, 0.0, 0.0]))], op),
        S("f32 real: 0 or pi, NaN kept", [T([1.5, -2.0, 0.0, -0.0, NAN, INF, -INF])], op),
    ]


reg("view_as_complex.default", build_view_as_complex)
reg("view_as_real.default", build_view_as_real)
reg("complex.default", build_complex)
reg("polar.default", build_polar)
reg("_conj.default", build_conj)
reg("angle.default", build_angle)


# ---------------------------------------------------------------------------
# scalars, data-dependent, symbolic sizes
# ---------------------------------------------------------------------------
def build_local_scalar_dense():
    op = aten._local_scalar_dense.default
    return [
        S("f32 0-d -> Python float (out as 0-d f32)", [T(2.5)], op),
        S("i64 0-d -> Python int (out as 0-d i64)", [T(-7, I64)], op),
        S("f32[1,1] (one element) -> Python float", [T([[0.125]])], op),
        S("f32 0-d value feeds full([2], v) (tensor output)", [T(-1.5)],
          lambda x: aten.full.default([2], op(x))),
        S("i64 0-d value is the end of arange(0, v) (data-dependent output size)", [T(4, I64)],
          lambda x: aten.arange.start_step(0, op(x))),
    ]


def build_nonzero():
    op = aten.nonzero.default
    return [
        S("f32[3,4] with zeros -> i64[n,2] (row-major order)",
          [T([[0.0, 1.0, 0.0, NAN], [-0.0, 0.0, 0.0, 0.0], [2.0, 0.0, -3.0, 0.0]])], op),
        S("bool[5] -> i64[n,1]", [T([True, False, True, True, False], BOOL)], op),
        S("i64[2,2,2] -> i64[n,3]", [T([[[0, 1], [2, 0]], [[0, 0], [0, 5]]], I64)], op),
        S("all zeros -> i64[0,2]", [torch.zeros(2, 3)], op),
        S("0-d nonzero -> i64[1,0]", [T(5.0)], op),
    ]


def dyn_sample(desc, shape, dims, fn, k):
    """a sample whose input dims `dims` are dynamic (Dim d<k>_<i>, 2..64)"""
    spec = {d: Dim(f"d{k}_{d}", min=2, max=64) for d in dims}
    return S(desc, [N(*shape)], fn, dyn=[spec])


def build_sym_size():
    op = aten.sym_size.int
    return [
        dyn_sample("dim 0 of f32[s,4] (s dynamic, example 3) -> SymInt output", (3, 4), [0],
                   lambda x: op(x, 0), 0),
        dyn_sample("dim -1 of f32[2,s] (example 5)", (2, 5), [1], lambda x: op(x, -1), 1),
        dyn_sample("feeds full([s], 1.0): tensor output", (4, 2), [0],
                   lambda x: aten.full.default([op(x, 0)], 1.0), 2),
    ]


def build_sym_numel():
    op = aten.sym_numel.default
    return [dyn_sample("numel of f32[s,4] (example 3)", (3, 4), [0], op, 0),
            dyn_sample("numel of f32[s,t] (example 2x5)", (2, 5), [0, 1], op, 1)]


def build_sym_stride():
    op = aten.sym_stride.int
    return [dyn_sample("stride 0 of f32[3,s] (= s, example 5)", (3, 5), [1], lambda x: op(x, 0), 0),
            dyn_sample("stride 0 of f32[2,3,s] (= 3*s, example 4)", (2, 3, 4), [2],
                       lambda x: op(x, 0), 1)]


def build_sym_storage_offset():
    op = aten.sym_storage_offset.default
    return [dyn_sample("storage offset of x[1] for x f32[3,s] (= s, example 4)", (3, 4), [1],
                       lambda x: op(aten.select.int(x, 0, 1)), 0),
            dyn_sample("storage offset of x[2] for x f32[4,s] (= 2*s, example 3)", (4, 3), [1],
                       lambda x: op(aten.select.int(x, 0, 2)), 1)]


reg("_local_scalar_dense.default", build_local_scalar_dense, data_dependent=True,
    note="no bool sample: a SymBool graph output cannot be serialized by torch.export.save "
         "(AssertionError: TODO in serialize_argument_spec)")
reg("nonzero.default", build_nonzero, data_dependent=True)
reg("sym_size.int", build_sym_size)
reg("sym_numel.default", build_sym_numel)
reg("sym_stride.int", build_sym_stride)
reg("sym_storage_offset.default", build_sym_storage_offset)


def build_atan2_out():
    op = aten.atan2.out

    def f(a, b):
        out = torch.empty_like(a)
        return op(a, b, out=out)
    return [
        S("f32[3,4] x f32[3,4] into out=empty_like(a)", [U(3, 4), U(3, 4)], f),
        S("f32 specials", [T(BA), T(BB)], f),
    ]


reg("atan2.out", build_atan2_out)

# ---------------------------------------------------------------------------
# ops outside Core ATen that exported programs hold (quantization, prims, ops export keeps)
# ---------------------------------------------------------------------------
import torch.ao.quantization.fx._decomposed  # noqa: E402,F401  (registers quantized_decomposed)

qd = torch.ops.quantized_decomposed


def build_quantize_per_tensor():
    op = qd.quantize_per_tensor.default
    return [
        S("f32[3,4] scale 0.05 zero_point 3 -> int8 [-128, 127]", [U(3, 4, lo=-8, hi=8)],
          lambda x: op(x, 0.05, 3, -128, 127, I8)),
        S("ties round half to even: scale 0.5, x*2 in {0.5, 1.5, -0.5, 2.5, -2.5}",
          [T([0.25, 0.75, -0.25, 1.25, -1.25])], lambda x: op(x, 0.5, 0, -128, 127, I8)),
        S("uint8 [0, 255] zero_point 128, saturating", [U(2, 5, lo=-20, hi=20)],
          lambda x: op(x, 0.1, 128, 0, 255, U8)),
        S("bf16 input (widened to f32 first)", [U(6, lo=-2, hi=2, dtype=BF16)],
          lambda x: op(x, 0.02, -1, -128, 127, I8)),
    ]


def build_quantize_per_tensor_tensor():
    op = qd.quantize_per_tensor.tensor
    return [
        S("0-d f64 scale, 0-d i64 zero_point", [U(3, 4, lo=-4, hi=4), T(0.03, F64), T(2, I64)],
          lambda x, s, z: op(x, s, z, -128, 127, I8)),
        S("[1] f32 scale and zero_point -> uint8", [U(5, lo=-4, hi=4), T([0.05]), T([100], I64)],
          lambda x, s, z: op(x, s, z, 0, 255, U8)),
    ]


def build_dequantize_per_tensor():
    op = qd.dequantize_per_tensor.default
    return [
        S("int8[3,4] scale 0.05 zero_point 3", [I(-128, 128, 3, 4, dtype=I8)],
          lambda q: op(q, 0.05, 3, -128, 127, I8)),
        S("uint8 zero_point 128", [I(0, 256, 6, dtype=U8)], lambda q: op(q, 0.1, 128, 0, 255, U8)),
        S("out_dtype=f16", [I(-128, 128, 2, 3, dtype=I8)],
          lambda q: op(q, 0.25, -2, -128, 127, I8, out_dtype=F16)),
    ]


def build_dequantize_per_tensor_tensor():
    op = qd.dequantize_per_tensor.tensor
    return [
        S("0-d f64 scale, 0-d i64 zero_point", [I(-128, 128, 3, 4, dtype=I8), T(0.03, F64), T(2, I64)],
          lambda q, s, z: op(q, s, z, -128, 127, I8)),
        S("[1] f32 scale", [I(0, 256, 5, dtype=U8), T([0.05]), T([100], I64)],
          lambda q, s, z: op(q, s, z, 0, 255, U8)),
    ]


def build_quantize_per_channel():
    op = qd.quantize_per_channel.default
    return [
        S("f32[4,3,2] axis 1, f32 scales, i64 zero points -> int8", [U(4, 3, 2, lo=-3, hi=3),
                                                                    T([0.02, 0.05, 0.1]),
                                                                    T([0, 3, -5], I64)],
          lambda x, s, z: op(x, s, z, 1, -128, 127, I8)),
        S("axis 0, f64 scales (computed in f64, as PyTorch does) -> uint8",
          [U(3, 5, lo=-3, hi=3), T([0.01, 0.02, 0.03], F64), T([128, 120, 130], I64)],
          lambda x, s, z: op(x, s, z, 0, 0, 255, U8)),
    ]


def build_dequantize_per_channel():
    op = qd.dequantize_per_channel.default
    return [
        S("int8[4,3] axis 0", [I(-128, 128, 4, 3, dtype=I8), T([0.1, 0.2, 0.05, 0.5]),
                               T([0, 1, -2, 3], I64)],
          lambda q, s, z: op(q, s, z, 0, -128, 127, I8)),
        S("uint8[2,3,2] axis 1, no zero points", [I(0, 256, 2, 3, 2, dtype=U8), T([0.1, 0.2, 0.3])],
          lambda q, s: op(q, s, None, 1, 0, 255, U8)),
        S("axis 1 out_dtype=bf16", [I(-128, 128, 2, 3, dtype=I8), T([0.5, 0.25, 0.125]),
                                    T([1, 2, 3], I64)],
          lambda q, s, z: op(q, s, z, 1, -128, 127, I8, out_dtype=BF16)),
    ]


def build_fake_quantize_cachemask():
    op = aten.fake_quantize_per_tensor_affine_cachemask.default
    return [
        S("f32[3,5] scale 0.1 zero_point 2 range [-8, 7] (many clipped: mask false)",
          [U(3, 5, lo=-2, hi=2)], lambda x: op(x, 0.1, 2, -8, 7)),
        S("8-bit range, ties", [T([0.05, 0.15, -0.05, 1.0, 30.0])], lambda x: op(x, 0.1, 0, -128, 127)),
    ]


def build_var_mean():
    op = aten.var_mean.correction
    return [
        S("f32[3,4] dim [1]", [N(3, 4)], lambda x: op(x, [1])),
        S("f32[2,3,4] dims [0,2] correction 0 keepdim", [N(2, 3, 4)],
          lambda x: op(x, [0, 2], correction=0, keepdim=True)),
        S("every dim (dim=None)", [N(3, 5)], lambda x: op(x)),
        S("f16 (accumulated in f32)", [N(4, 8, dtype=F16)], lambda x: op(x, [1])),
    ]


def distinct(*shape):
    """distinct floats in random order (kthvalue's index is unique then)"""
    n = math.prod(shape)
    return (torch.randperm(n).float() * 0.5 - n / 4).reshape(shape)


def build_kthvalue():
    op = aten.kthvalue.default
    return [
        S("k=2 dim -1 f32[4,6]", [distinct(4, 6)], lambda x: op(x, 2)),
        S("k=3 dim 0 keepdim", [distinct(5, 3)], lambda x: op(x, 3, 0, True)),
        S("k=1 1-d i64", [torch.randperm(7)], lambda x: op(x, 1)),
        S("k=4 with NaN (sorted last)", [T([3.0, NAN, 1.0, 2.0])], lambda x: op(x, 4)),
    ]


def build_bucketize():
    op = aten.bucketize.Tensor
    b = T([-1.0, 0.0, 0.5, 1.5])
    return [
        S("f32[3,4] into 4 boundaries", [U(3, 4), b], lambda x, b: op(x, b)),
        S("ties with right=True", [T([-1.0, 0.0, 0.5, 1.5, 2.0, -3.0]), b],
          lambda x, b: op(x, b, right=True)),
        S("ties with right=False, out_int32", [T([-1.0, 0.0, 0.5, 1.5, 2.0, -3.0]), b],
          lambda x, b: op(x, b, out_int32=True)),
        S("i64 values and boundaries, 0-d input", [T(4, I64), T([1, 3, 5, 7], I64)],
          lambda x, b: op(x, b)),
    ]


def build_bucketize_scalar():
    op = aten.bucketize.Scalar
    return [
        S("scalar 0.7 into f32 boundaries", [T([-1.0, 0.0, 0.5, 1.5])], lambda b: op(0.7, b)),
        S("scalar 3 right=True into i64 boundaries", [T([1, 3, 5], I64)], lambda b: op(3, b, right=True)),
    ]


def build_trilinear():
    op = aten._trilinear.default
    return [
        S("bilinear layer: x1[2,3] W[4,3,5] x2[2,5] -> [2,4]", [N(2, 3), N(4, 3, 5), N(2, 5)],
          lambda a, w, c: op(a, w, c, [1, 3], [0], [1, 2], [2, 3])),
        S("no expanded dims: the triple product summed over dim 1", [N(2, 3), N(2, 3), N(2, 3)],
          lambda a, b, c: op(a, b, c, [], [], [], [1])),
        S("no summed dims: an outer product a[i] b[j] c[j]", [N(3), N(4), N(4)],
          lambda a, b, c: op(a, b, c, [1], [0], [0], [])),
    ]


def build_unfold():
    op = aten.unfold.default
    return [
        S("f32[2,7] dim 1 size 3 step 2 -> [2,3,3]", [N(2, 7)], lambda x: op(x, 1, 3, 2)),
        S("f32[6,2] dim 0 size 2 step 1", [N(6, 2)], lambda x: op(x, 0, 2, 1)),
        S("i64[2,5,3] dim -2 size 5 step 1 (one window)", [I(-9, 9, 2, 5, 3)], lambda x: op(x, -2, 5, 1)),
        S("step larger than size: f32[9] size 2 step 4", [N(9)], lambda x: op(x, 0, 2, 4)),
    ]


def build_tril_indices():
    op = aten.tril_indices.default
    return [
        S("4x5 offset 1", [], lambda: op(4, 5, 1)),
        S("3x3", [], lambda: op(3, 3)),
        S("5x3 offset -1 int32", [], lambda: op(5, 3, -1, dtype=I32)),
    ]


def build_triu_indices():
    op = aten.triu_indices.default
    return [
        S("4x5 offset 1", [], lambda: op(4, 5, 1)),
        S("3x3", [], lambda: op(3, 3)),
        S("5x3 offset -1", [], lambda: op(5, 3, -1)),
    ]


def build_collapse():
    op = torch.ops.prims.collapse.default
    return [
        S("f32[2,3,4,5] dims 1..2", [N(2, 3, 4, 5)], lambda x: op(x, 1, 2)),
        S("every dim of i64[2,3]", [I(-9, 9, 2, 3)], lambda x: op(x, 0, 1)),
    ]


def build_rrelu_with_noise():
    op = aten.rrelu_with_noise_functional.default
    lo, hi = 0.1, 0.3
    slope = {"mean": (lo + hi) / 2, "std": (hi - lo) / math.sqrt(12), "min": lo, "max": hi}
    neg = {"mean": -(lo + hi) / 2, "std": (hi - lo) / math.sqrt(12), "min": -hi, "max": -lo}
    return [
        S("eval: leaky ReLU with slope (lower+upper)/2, noise unchanged", [N(3, 4), torch.zeros(3, 4)],
          lambda x, n: op(x, n, lo, hi, False), moments="exact"),
        S("eval with default bounds", [N(5), torch.ones(5)], lambda x, n: op(x, n), moments="exact"),
        S("training on x = -1: outputs -slope and slope, slope uniform in [lower, upper)",
          [-torch.ones(64, 64), torch.zeros(64, 64)], lambda x, n: op(x, n, lo, hi, True),
          moments=[neg, slope]),
    ]


def build_rrelu_with_noise_backward():
    op = aten.rrelu_with_noise_backward.default
    return [
        S("eval: grad where x > 0, grad * (lower+upper)/2 elsewhere", [N(3, 4), N(3, 4), U(3, 4, lo=0.1, hi=0.3)],
          lambda g, x, n: op(g, x, n, 0.1, 0.3, False, False)),
        S("training: grad * noise", [N(3, 4), N(3, 4), U(3, 4, lo=0.1, hi=0.3)],
          lambda g, x, n: op(g, x, n, 0.1, 0.3, True, False)),
    ]


def build_adaptive_max2d():
    op = aten.adaptive_max_pool2d.default
    return [
        S("f32[1,2,8,9] -> (5,7) (overlapping windows of unequal size)", [N(1, 2, 8, 9)],
          lambda x: op(x, [5, 7])),
        S("f32[2,1,4,6] -> (2,3) (divides evenly: a max pool)", [N(2, 1, 4, 6)], lambda x: op(x, [2, 3])),
        S("unbatched f32[2,5,5] -> (3,3)", [N(2, 5, 5)], lambda x: op(x, [3, 3])),
        S("global f32[1,3,5,4] -> (1,1)", [N(1, 3, 5, 4)], lambda x: op(x, [1, 1])),
        S("ties: all equal, the first element of each window", [torch.ones(1, 1, 5, 5)],
          lambda x: op(x, [3, 2])),
        S("upsampling sizes f32[1,1,2,3] -> (4,5)", [N(1, 1, 2, 3)], lambda x: op(x, [4, 5])),
    ]


def build_adaptive_max3d():
    op = aten.adaptive_max_pool3d.default
    return [
        S("f32[1,1,4,5,6] -> (2,3,4)", [N(1, 1, 4, 5, 6)], lambda x: op(x, [2, 3, 4])),
        S("f32[1,2,4,4,4] -> (2,2,2) (a max pool)", [N(1, 2, 4, 4, 4)], lambda x: op(x, [2, 2, 2])),
        S("unbatched f32[1,3,3,5] -> (2,2,3)", [N(1, 3, 3, 5)], lambda x: op(x, [2, 2, 3])),
    ]


def build_exp2():
    op = aten.exp2.default
    return [
        S("f32 with specials", [T([0.0, 1.0, -1.0, 3.0, 0.5, -INF, INF, NAN, 10.0, -20.0])], lambda x: op(x)),
        S("f32[3,4] in [-4, 4]", [U(3, 4, lo=-4, hi=4)], lambda x: op(x)),
        S("i64 (-> f32)", [I(-5, 10, 6)], lambda x: op(x)),
        S("f16", [U(5, lo=-4, hi=4, dtype=F16)], lambda x: op(x)),
    ]


def shift_cases(op_t, op_ts, op_st):
    """shift amounts from 0 past the bit width, negative values, signed and unsigned types"""
    s = []
    for dt, bits in ((I64, 64), (I32, 32), (I8, 8), (U8, 8)):
        lo = 0 if dt == U8 else -100
        x = I(lo, 100, 2 * (bits + 4), dtype=dt)
        sh = torch.arange(0, bits + 4, dtype=dt).repeat(2)
        s.append(S(f"{DT[dt]} values, shifts 0..{bits + 3}", [x, sh], lambda x, y: op_t(x, y)))
    s.append(S("tensor by a scalar 3 (i32)", [I(-100, 100, 6, dtype=I32)], lambda x: op_ts(x, 3)))
    s.append(S("scalar 5 by a tensor (i64)", [T([0, 1, 2, 62, 63, 64], I64)], lambda y: op_st(5, y)))
    return s


def build_left_shift():
    return shift_cases(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
                       aten.bitwise_left_shift.Scalar_Tensor)


def build_right_shift():
    return shift_cases(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
                       aten.bitwise_right_shift.Scalar_Tensor)


def build_underscore_convolution():
    op = aten._convolution.default
    s = []
    for desc, x, w, b, *rest in conv_cases()[:4]:
        flags = (False, False, True, True)  # benchmark, deterministic, cudnn_enabled, allow_tf32
        if b is None:
            s.append(S(desc, [x, w], lambda x, w, r=rest: op(x, w, None, *r, *flags)))
        else:
            s.append(S(desc, [x, w, b], lambda x, w, b, r=rest: op(x, w, b, *r, *flags)))
    return s


def build_index_put_impl():
    op = aten._index_put_impl.default
    return [
        S("accumulate=False unique rows", [N(5, 3), T([0, 3], I64), N(2, 3)],
          lambda x, i, v: op(x, [i], v)),
        S("accumulate=True duplicates sum, unsafe=True", [N(5, 3), T([1, 1, 4, -1], I64), N(4, 3)],
          lambda x, i, v: op(x, [i], v, True, True)),
    ]


def build_max_default(name):
    op = opobj(name)

    def build():
        return [
            S("f32[3,4]", [N(3, 4)], lambda x: op(x)),
            S("NaN propagates", [T([1.0, NAN, 3.0])], lambda x: op(x)),
            S("i64[5]", [I(-9, 9, 5)], lambda x: op(x)),
            S("bool[4]", [T([False, True, False, False], BOOL)], lambda x: op(x)),
        ]
    return build


def build_upsample_nearest2d_default():
    op = aten.upsample_nearest2d.default
    return [
        S("f32[1,1,3,4] -> (6,8)", [N(1, 1, 3, 4)], lambda x: op(x, [6, 8])),
        S("f32[1,2,3,4] -> (5,7) (non-integer ratio)", [N(1, 2, 3, 4)], lambda x: op(x, [5, 7])),
        S("scales_h 2.5, scales_w unset -> (7,8)", [N(1, 1, 3, 4)], lambda x: op(x, [7, 8], 2.5)),
    ]


def build_upsample_nearest2d_backward():
    op = aten.upsample_nearest2d_backward.default
    s = []
    for desc, insz, outsz, scales in [("f32[1,1,3,4] -> (6,8)", (1, 1, 3, 4), [6, 8], ()),
                                      ("f32[1,2,3,4] -> (5,7) (non-integer ratio)", (1, 2, 3, 4), [5, 7], ()),
                                      ("f32[2,1,5,7] -> (2,3) (downsampling)", (2, 1, 5, 7), [2, 3], ()),
                                      ("scales_h 2.5, scales_w unset -> (7,8)", (1, 1, 3, 4), [7, 8], (2.5,))]:
        g = N(*insz[:2], *outsz)
        s.append(S(f"grad for {desc}", [g], lambda g, o=outsz, i=list(insz), sc=scales: op(g, o, i, *sc)))
    return s


def build_embedding_bag_forward_only():
    op = aten._embedding_bag_forward_only.default
    w = N(6, 3)
    return [
        S("mode=0 (sum), per_sample_weights", [w, T([0, 2, 1, 5, 2], I64), T([0, 2, 2], I64), U(5)],
          lambda w, i, o, p: op(w, i, o, False, 0, False, p)),
        S("mode=2 (max)", [w, T([0, 2, 1, 5, 2], I64), T([0, 1, 3], I64)],
          lambda w, i, o: op(w, i, o, False, 2)),
    ]


def build_cumprod():
    op = aten.cumprod.default
    return [
        S("f32[3,4] dim 1", [U(3, 4, lo=0.5, hi=1.5)], lambda x: op(x, 1)),
        S("f32[4,3] dim 0 with a zero", [T([[1.0, 2.0, 3.0], [0.0, 1.5, -1.0], [2.0, 2.0, 2.0], [1.0, 1.0, 0.5]])],
          lambda x: op(x, 0)),
        S("i32 -> i64", [I(-3, 4, 6, dtype=I32)], lambda x: op(x, 0)),
        S("f16 dim -1 (accumulated in f32)", [U(2, 8, lo=0.8, hi=1.2, dtype=F16)], lambda x: op(x, -1)),
    ]


def build_logcumsumexp():
    op = aten.logcumsumexp.default
    return [
        S("f32[3,5] dim 1", [N(3, 5)], lambda x: op(x, 1)),
        S("large values (no overflow) and -inf", [T([100.0, 100.0, -INF, 90.0, 200.0])], lambda x: op(x, 0)),
        S("all -inf stays -inf, then inf", [T([-INF, -INF, 1.0, INF, 2.0])], lambda x: op(x, 0)),
        S("f32[4,2] dim 0", [N(4, 2)], lambda x: op(x, 0)),
    ]


def build_cumulative_extremum(op):
    def build():
        return [
            S("f32[3,6] dim 1", [N(3, 6)], lambda x: op(x, 1)),
            S("ties go to the later index", [T([1.0, 3.0, 3.0, 2.0, 3.0, 0.5])], lambda x: op(x, 0)),
            S("NaN from the first on, the last NaN's index", [T([1.0, NAN, 5.0, NAN, -2.0])], lambda x: op(x, 0)),
            S("i64[4,3] dim 0", [I(-5, 5, 4, 3)], lambda x: op(x, 0)),
            S("f32[2,1,5] dim -1", [N(2, 1, 5)], lambda x: op(x, -1)),
        ]
    return build


def index_moments(pairs):
    """moments of an index drawn from [(index, probability)]"""
    mean = sum(i * q for i, q in pairs)
    std = math.sqrt(max(sum(i * i * q for i, q in pairs) - mean * mean, 0.0))
    values = sorted({float(i) for i, q in pairs if q > 0})
    return {"mean": mean, "std": std, "min": values[0], "max": values[-1], "values": values}


def without_replacement_moments(p, n):
    """moments of the indices of n draws without replacement from weights p (all positions
    pooled), by enumerating the ordered draws"""
    seen = {}

    def walk(prefix, prob):
        if len(prefix) == n:
            for i in prefix:
                seen[i] = seen.get(i, 0.0) + prob / n
            return
        left = sum(p[j] for j in range(len(p)) if j not in prefix)
        for j, w in enumerate(p):
            if j not in prefix and w > 0:
                walk(prefix + [j], prob * w / left)
    walk([], 1.0)
    return index_moments(sorted(seen.items()))


def build_multinomial():
    op = aten.multinomial.default
    p4 = [0.1, 0.2, 0.3, 0.4]
    pz = [0.0, 1.0, 1.0, 0.0, 2.0]
    perm = dict(index_moments([(i, 1 / 6) for i in range(6)]), permutation=True)
    return [
        S("with replacement: 4096 draws from [0.1, 0.2, 0.3, 0.4]", [T([p4])],
          lambda p: op(p, 4096, True), moments=index_moments(list(enumerate(p4)))),
        S("with replacement, unnormalized weights with zeros, 256 rows of 16 draws", [T([pz] * 256)],
          lambda p: op(p, 16, True), moments=index_moments([(i, w / 4) for i, w in enumerate(pz)])),
        S("without replacement: all 6 of 6 equal weights (a permutation)", [torch.ones(6)],
          lambda p: op(p, 6), moments=perm),
        S("without replacement: 2 of [0, 1, 1, 0, 2] per row, 512 rows", [T([pz] * 512)],
          lambda p: op(p, 2), moments=without_replacement_moments(pz, 2)),
    ]


def build_linalg_det():
    op = aten._linalg_det.default
    pivoting = T([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, -1.0, 2.0]])  # a zero first pivot
    return [
        S("f32[3,3] needing row swaps; outputs (det, LU, pivots)", [pivoting], lambda a: op(a)),
        S("batched f32[2,4,4]", [N(2, 4, 4)], lambda a: op(a)),
        S("f64[5,5]", [N(5, 5, dtype=F64)], lambda a: op(a)),
        S("1x1", [T([[2.5]])], lambda a: op(a)),
    ]


def build_rand_like():
    op = aten.rand_like.default
    return [
        S("like f32[64,64]", [N(64, 64)], lambda x: op(x), moments=UNIF),
        S("like f16[4096]", [N(4096, dtype=F16)], lambda x: op(x), moments=UNIF),
    ]


def build_randn_like():
    op = aten.randn_like.default
    return [S("like f32[64,64]", [N(64, 64)], lambda x: op(x), moments=NORM)]


def build_uniform():
    op = aten.uniform.default
    return [S("f32[64,64] in [-2, 3)", [N(64, 64)], lambda x: op(x, -2.0, 3.0),
              moments={"mean": 0.5, "std": 5 / math.sqrt(12), "min": -2.0, "max": 3.0})]


def build_bernoulli_p():
    op = aten.bernoulli.p
    return [S("f32[64,64] with p=0.3", [N(64, 64)], lambda x: op(x, 0.3),
              moments=index_moments([(0, 0.7), (1, 0.3)]))]


def build_bernoulli():
    op = aten.bernoulli.default
    return [S("f32[4096] probabilities of 0.25", [torch.full((4096,), 0.25)], lambda p: op(p),
              moments=index_moments([(0, 0.75), (1, 0.25)]))]


def build_randint_low():
    op = aten.randint.low
    return [S("i64[64,64] from 3 to 10", [], lambda: op(3, 10, [64, 64]),
              moments=index_moments([(i, 1 / 7) for i in range(3, 10)]))]


def build_randint():
    op = aten.randint.default
    return [S("i64[4096] below 5", [], lambda: op(5, [4096]),
              moments=index_moments([(i, 0.2) for i in range(5)]))]


def build_round_decimals():
    op = aten.round.decimals
    return [
        S("f32[3,4] to 2 decimals", [N(3, 4) * 10], lambda x: op(x, decimals=2)),
        S("to -1 decimals (tens)", [N(8) * 100], lambda x: op(x, decimals=-1)),
        S("halves and specials to 1 decimal", [T([0.25, 0.35, -2.25, INF, -INF, NAN, -0.0, 1e30])],
          lambda x: op(x, decimals=1)),
    ]


def build_addbmm():
    op = aten.addbmm.default
    return [
        S("f32 [3,5] + sum of 4 products [3,2]@[2,5]", [N(3, 5), N(4, 3, 2), N(4, 2, 5)], lambda x, a, b: op(x, a, b)),
        S("beta=0.5, alpha=2, self [5] broadcast", [N(5), N(2, 3, 4), N(2, 4, 5)],
          lambda x, a, b: op(x, a, b, beta=0.5, alpha=2)),
        S("beta=0: self's NaN not read", [T([[NAN, 1.0], [2.0, NAN]]), N(3, 2, 4), N(3, 4, 2)],
          lambda x, a, b: op(x, a, b, beta=0)),
    ]


def build_int_mm():
    op = aten._int_mm.default
    return [S("int8 [32,16] @ [16,8] -> int32", [I(-128, 128, 32, 16, dtype=I8), I(-128, 128, 16, 8, dtype=I8)],
              lambda a, b: op(a, b))]


def build_conv_tbc():
    op = aten.conv_tbc.default
    return [
        S("x [T=7, B=2, Cin=3], kernel 3, Cout 4, pad 1", [N(7, 2, 3), N(3, 3, 4), N(4)],
          lambda x, w, b: op(x, w, b, 1)),
        S("pad 0, kernel 2", [N(5, 1, 2), N(2, 2, 3), N(3)], lambda x, w, b: op(x, w, b, 0)),
    ]


def build_upsample_aa(name):
    def build():
        op = opobj(name)
        return [
            S("shrink f32[2,3,16,20] to 5x7", [N(2, 3, 16, 20)], lambda x: op(x, [5, 7], False, None, None)),
            S("grow f32[1,2,8,8] to 16x12", [N(1, 2, 8, 8)], lambda x: op(x, [16, 12], False, None, None)),
            S("align_corners, f32[1,1,9,7] to 3x3", [N(1, 1, 9, 7)], lambda x: op(x, [3, 3], True, None, None)),
            S("scales given (0.5, 0.25), f32[1,1,8,16] to 4x4", [N(1, 1, 8, 16)],
              lambda x: op(x, [4, 4], False, 0.5, 0.25)),
            S("same size", [N(1, 3, 5, 5)], lambda x: op(x, [5, 5], False, None, None)),
        ]
    return build


def build_linalg_slogdet():
    op = aten._linalg_slogdet.default
    pivoting = T([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, -1.0, 2.0]])  # a zero first pivot
    return [
        S("f32[3,3] needing row swaps; outputs (sign, logabsdet, LU, pivots)", [pivoting], lambda a: op(a)),
        S("batched f32[2,4,4]", [N(2, 4, 4)], lambda a: op(a)),
        S("singular: sign 0, logabsdet -inf", [T([[1.0, 2.0], [2.0, 4.0]])], lambda a: op(a)),
        S("1x1 negative", [T([[-2.5]])], lambda a: op(a)),
    ]


def build_signbit():
    op = aten.signbit.default
    return [
        S("f32 with -0.0, nan, -nan, infs", [T([1.0, -1.0, 0.0, -0.0, INF, -INF, NAN, -NAN, 1e-40, -1e-40])],
          lambda x: op(x)),
        S("f16[5]", [N(5, dtype=F16)], lambda x: op(x)),
        S("i64 and u8", [I(-5, 5, 6), I(0, 255, 4, dtype=U8)], lambda x, y: (op(x), op(y))),
        S("bool", [B(4)], lambda x: op(x)),
    ]


def build_masked_select():
    op = aten.masked_select.default
    return [
        S("f32[3,4] by a bool[3,4] mask (row-major order)", [N(3, 4), B(3, 4)], lambda x, m: op(x, m)),
        S("i64[2,3] by a broadcast bool[3] mask", [I(-5, 5, 2, 3), T([True, False, True], BOOL)],
          lambda x, m: op(x, m)),
        S("nothing selected -> f32[0]", [N(2, 3), torch.zeros(2, 3, dtype=torch.bool)], lambda x, m: op(x, m)),
    ]


def build_roi_align():
    import torchvision  # noqa: F401  (registers torchvision's ops)

    op = torch.ops.torchvision.roi_align.default
    # Regions inside, across an edge, wholly outside, tiny, and on the second image.
    rois = T([[0, 1.0, 1, 9, 7], [1, -3, 2, 4, 30], [0, 5, 5, 5.5, 5.2], [1, 18, 14, 22, 19], [0, -8, -8, -1, -2]])
    return [
        S("f32[2,3,8,10], 5 regions, 3x2 bins of 2x2 points, scale 0.5, aligned", [N(2, 3, 8, 10), rois],
          lambda f, r: op(f, r, 0.5, 3, 2, 2, True)),
        S("2x2 bins of 1 point, scale 1, not aligned (extents at least 1)", [N(2, 3, 8, 10), rois],
          lambda f, r: op(f, r, 1.0, 2, 2, 1, False)),
        S("4x3 bins of 3x3 points, scale 0.25", [N(2, 3, 8, 10), rois], lambda f, r: op(f, r, 0.25, 4, 3, 3, False)),
    ]


def build_ps_roi_align():
    import torchvision  # noqa: F401  (registers torchvision's ops)

    op = torch.ops.torchvision.ps_roi_align.default
    rois = T([[0, 1.0, 1, 9, 7], [1, -3, 2, 4, 30], [0, 5, 5, 5.5, 5.2], [1, 18, 14, 22, 19], [0, -8, -8, -1, -2]])
    return [
        S("f32[2,12,8,10] (3 groups of 2x2 bins), 5 regions, 2x2 points, scale 0.5", [N(2, 12, 8, 10), rois],
          lambda f, r: op(f, r, 0.5, 2, 2, 2)),
        S("f32[2,6,8,10], 3x2 bins of 1 point, scale 1", [N(2, 6, 8, 10), rois], lambda f, r: op(f, r, 1.0, 3, 2, 1)),
    ]


def build_roi_pool():
    import torchvision  # noqa: F401  (registers torchvision's ops)

    op = torch.ops.torchvision.roi_pool.default
    # Regions inside, across an edge, wholly outside (empty bins), one pixel, reversed, on
    # both images; corners at halves (rounded away from zero) and a map with repeated values
    # (ties: the first maximum's position).
    rois = T([[0, 1.0, 1, 9, 7], [1, -3, 2, 4, 30], [0, 5, 5, 5.5, 5.2], [1, 18, 14, 22, 19], [0, -8, -8, -1, -2],
              [1, 2.5, 1.5, 6.5, 3.5], [0, 7, 6, 2, 1]])
    ties = torch.randint(0, 3, (1, 2, 6, 7), generator=torch.Generator().manual_seed(3)).float()
    return [
        S("f32[2,3,8,10], 7 regions, 3x2 bins, scale 1", [N(2, 3, 8, 10), rois], lambda f, r: op(f, r, 1.0, 3, 2)),
        S("7x7 bins (more bins than pixels), scale 0.5", [N(2, 3, 8, 10), rois], lambda f, r: op(f, r, 0.5, 7, 7)),
        S("values 0..2 (ties), 2x3 bins, scale 0.75", [ties, rois[[0, 2, 4, 6]] * T([0, 1, 1, 1, 1])],
          lambda f, r: op(f, r, 0.75, 2, 3)),
    ]


def build_ps_roi_pool():
    import torchvision  # noqa: F401  (registers torchvision's ops)

    op = torch.ops.torchvision.ps_roi_pool.default
    rois = T([[0, 1.0, 1, 9, 7], [1, -3, 2, 4, 30], [0, 5, 5, 5.5, 5.2], [1, 18, 14, 22, 19], [0, -8, -8, -1, -2],
              [1, 2.5, 1.5, 6.5, 3.5], [0, 7, 6, 2, 1]])
    return [
        S("f32[2,12,8,10] (3 groups of 2x2 bins), 7 regions, scale 1", [N(2, 12, 8, 10), rois],
          lambda f, r: op(f, r, 1.0, 2, 2)),
        S("f32[2,6,8,10], 3x2 bins, scale 0.5 (more bins than pixels)", [N(2, 6, 8, 10), rois],
          lambda f, r: op(f, r, 0.5, 3, 2)),
    ]


def build_deform_conv2d():
    import torchvision  # noqa: F401  (registers torchvision's ops)

    op = torch.ops.torchvision.deform_conv2d.default

    def case(n, c, h, w, o, k, stride, pad, dil, groups, offset_groups, use_mask, spread):
        ho = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
        wo = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
        # Offsets of a few pixels: points inside, between pixels, and outside the map.
        offset = N(n, 2 * offset_groups * k * k, ho, wo) * spread
        return [N(n, c, h, w), N(o, c // groups, k, k), offset, U(n, offset_groups * k * k, ho, wo), N(o)], \
            lambda x, wt, off, m, b: op(x, wt, off, m, b, stride, stride, pad, pad, dil, dil, groups, offset_groups,
                                        use_mask)

    return [
        S("f32[2,4,7,9] 3x3, pad 1, offsets of ~2 px, mask", *case(2, 4, 7, 9, 6, 3, 1, 1, 1, 1, 1, True, 2.0)),
        S("stride 2, dilation 2, no mask, offsets of ~4 px (many outside)",
          *case(1, 3, 9, 8, 5, 3, 2, 2, 2, 1, 1, False, 4.0)),
        S("2 weight groups, 2 offset groups, 2x2 kernel, no padding",
          *case(2, 4, 6, 6, 4, 2, 1, 0, 1, 2, 2, True, 1.5)),
    ]


def build_nms():
    import torchvision  # noqa: F401  (registers torchvision's ops)

    op = torch.ops.torchvision.nms.default

    def boxes(n, spread, seed):
        g = torch.Generator().manual_seed(seed)
        xy = torch.rand(n, 2, generator=g) * spread
        return torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 10 + 1], 1), torch.rand(n, generator=g)

    crowded, sparse = boxes(16, 8, 1), boxes(12, 40, 2)
    return [
        S("16 crowded boxes, IoU above 0.5 suppressed (kept indices, highest score first)", list(crowded),
          lambda b, s: op(b, s, 0.5)),
        S("12 spread boxes, threshold 0.3", list(sparse), lambda b, s: op(b, s, 0.3)),
        S("threshold 0: any overlap suppresses", list(crowded), lambda b, s: op(b, s, 0.0)),
    ]


def build_unique():
    op = aten._unique2.default
    return [
        S("i64[2,3] with repeats: values, inverse, counts", [T([[3, 1, 2], [1, 3, 3]], I64)],
          lambda x: op(x, True, True, True)),
        S("f32[8] from a few values: values only", [T([0.5, -1.0, 0.5, 2.0, -1.0, -1.0, 7.0, 0.5])],
          lambda x: op(x, True, False, False)),
        S("all equal: one value counted 6 times", [T([[4, 4, 4], [4, 4, 4]], I64)], lambda x: op(x, True, False, True)),
        S("all different, unsorted input", [T([9, -2, 5, 0, 3], I64)], lambda x: op(x, True, True, False)),
    ]


def build_repeat_interleave():
    op = aten.repeat_interleave.Tensor
    return [
        S("counts [2, 0, 3, 1] with output_size 6", [T([2, 0, 3, 1], I64)], lambda r: op(r, output_size=6)),
        S("counts i32 [1, 1, 1] with output_size 3", [T([1, 1, 1], I32)], lambda r: op(r, output_size=3)),
    ]


def build_scaled_mm():
    op = aten._scaled_mm.default
    f8 = torch.float8_e4m3fn

    def tensorwise(a, b, sa, sb):  # fp8 made inside: .npy has no fp8; mat2 column-major
        return op(a.to(f8), b.to(f8).t(), sa, sb, out_dtype=F32)

    def rowwise(a, b, sa, sb, bias):
        return op(a.to(f8), b.to(f8).t(), sa, sb, bias, out_dtype=BF16)

    return [
        S("fp8 e4m3fn [16,32] @ [32,16], tensor-wise scales -> f32", [N(16, 32), N(16, 32), T(0.5), T(2.0)],
          tensorwise),
        S("row-wise scales [16,1] and [1,16], bias -> bf16 (in .npy as f32)",
          [N(16, 32), N(16, 32), U(16, 1, lo=0.5, hi=2.0), U(1, 16, lo=0.5, hi=2.0), N(16, dtype=BF16)], rowwise),
    ]


def build_convert_element_type():
    op = torch.ops.prims.convert_element_type.default
    return [
        S("f32 -> i32 (truncates)", [N(3, 4) * 5], lambda x: op(x, torch.int32)),
        S("i64 -> f16", [I(-100, 100, 6)], lambda x: op(x, F16)),
        S("f32 -> bool", [T([0.0, -0.0, 1.0, NAN])], lambda x: op(x, BOOL)),
    ]


EXTRA_LIST = """
quantized_decomposed.quantize_per_tensor.default quantized_decomposed.quantize_per_tensor.tensor
quantized_decomposed.dequantize_per_tensor.default quantized_decomposed.dequantize_per_tensor.tensor
quantized_decomposed.quantize_per_channel.default quantized_decomposed.dequantize_per_channel.default
fake_quantize_per_tensor_affine_cachemask.default _index_put_impl.default adaptive_max_pool2d.default
adaptive_max_pool3d.default _trilinear.default _convolution.default rrelu_with_noise_functional.default
rrelu_with_noise_backward.default unfold.default var_mean.correction kthvalue.default
bucketize.Tensor bucketize.Scalar prims.collapse.default upsample_nearest2d.default exp2.default
max.default min.default tril_indices.default triu_indices.default _embedding_bag_forward_only.default
cumprod.default logcumsumexp.default bitwise_left_shift.Tensor bitwise_right_shift.Tensor
multinomial.default _linalg_det.default upsample_nearest2d_backward.default
view_as_complex.default view_as_real.default complex.default polar.default _conj.default
angle.default _fft_c2c.default rand_like.default randn_like.default uniform.default bernoulli.p
bernoulli.default randint.low randint.default round.decimals addbmm.default _int_mm.default
conv_tbc.default prims.convert_element_type.default _upsample_bilinear2d_aa.default
_upsample_bicubic2d_aa.default _linalg_slogdet.default signbit.default repeat_interleave.Tensor _scaled_mm.default
masked_select.default torchvision.roi_align.default torchvision.nms.default _unique2.default
torchvision.ps_roi_align.default torchvision.deform_conv2d.default torchvision.roi_pool.default
torchvision.ps_roi_pool.default rand.generator randn.generator cummax.default cummin.default
""".split()

reg("quantized_decomposed.quantize_per_tensor.default", build_quantize_per_tensor)
reg("quantized_decomposed.quantize_per_tensor.tensor", build_quantize_per_tensor_tensor)
reg("quantized_decomposed.dequantize_per_tensor.default", build_dequantize_per_tensor)
reg("quantized_decomposed.dequantize_per_tensor.tensor", build_dequantize_per_tensor_tensor)
reg("quantized_decomposed.quantize_per_channel.default", build_quantize_per_channel)
reg("quantized_decomposed.dequantize_per_channel.default", build_dequantize_per_channel)
reg("fake_quantize_per_tensor_affine_cachemask.default", build_fake_quantize_cachemask)
reg("_index_put_impl.default", build_index_put_impl)
reg("adaptive_max_pool2d.default", build_adaptive_max2d)
reg("adaptive_max_pool3d.default", build_adaptive_max3d)
reg("_trilinear.default", build_trilinear, tol="red")
reg("_convolution.default", build_underscore_convolution, tol="red")
reg("rrelu_with_noise_functional.default", build_rrelu_with_noise, random=True)
reg("rrelu_with_noise_backward.default", build_rrelu_with_noise_backward, backward=True)
reg("unfold.default", build_unfold)
reg("var_mean.correction", build_var_mean, tol="red")
reg("kthvalue.default", build_kthvalue)
reg("bucketize.Tensor", build_bucketize)
reg("bucketize.Scalar", build_bucketize_scalar)
reg("prims.collapse.default", build_collapse)
reg("upsample_nearest2d.default", build_upsample_nearest2d_default)
reg("exp2.default", build_exp2)
reg("max.default", build_max_default("max.default"), tol="red")
reg("min.default", build_max_default("min.default"), tol="red")
reg("tril_indices.default", build_tril_indices)
reg("triu_indices.default", build_triu_indices)
reg("_embedding_bag_forward_only.default", build_embedding_bag_forward_only, tol="red")
reg("cumprod.default", build_cumprod, tol="red")
reg("logcumsumexp.default", build_logcumsumexp, tol="red")
reg("cummax.default", build_cumulative_extremum(aten.cummax.default))
reg("cummin.default", build_cumulative_extremum(aten.cummin.default))
reg("bitwise_left_shift.Tensor", build_left_shift)
reg("bitwise_right_shift.Tensor", build_right_shift)
reg("multinomial.default", build_multinomial, random=True)
reg("_linalg_det.default", build_linalg_det, tol="red")
reg("upsample_nearest2d_backward.default", build_upsample_nearest2d_backward, tol="red", backward=True)
reg("rand_like.default", build_rand_like, random=True, compare="moments")
reg("randn_like.default", build_randn_like, random=True, compare="moments")
reg("uniform.default", build_uniform, random=True, compare="moments")
reg("bernoulli.p", build_bernoulli_p, random=True, compare="moments")
reg("bernoulli.default", build_bernoulli, random=True, compare="moments")
reg("randint.low", build_randint_low, random=True, compare="moments")
reg("randint.default", build_randint, random=True, compare="moments")
reg("round.decimals", build_round_decimals)
reg("addbmm.default", build_addbmm, tol="red")
reg("_int_mm.default", build_int_mm)
reg("conv_tbc.default", build_conv_tbc, tol="red")
reg("prims.convert_element_type.default", build_convert_element_type)
reg("_linalg_slogdet.default", build_linalg_slogdet, tol="red")
reg("signbit.default", build_signbit)
reg("repeat_interleave.Tensor", build_repeat_interleave)
reg("masked_select.default", build_masked_select, data_dependent=True)
reg("torchvision.roi_align.default", build_roi_align, tol="red")
reg("torchvision.ps_roi_align.default", build_ps_roi_align, tol="red")
reg("torchvision.deform_conv2d.default", build_deform_conv2d, tol="red")
reg("torchvision.roi_pool.default", build_roi_pool)
reg("torchvision.ps_roi_pool.default", build_ps_roi_pool, tol="red")
reg("torchvision.nms.default", build_nms, data_dependent=True)
reg("_unique2.default", build_unique, data_dependent=True)
reg("_scaled_mm.default", build_scaled_mm, tol="red")
reg("_upsample_bilinear2d_aa.default", build_upsample_aa("_upsample_bilinear2d_aa.default"), tol="red")
reg("_upsample_bicubic2d_aa.default", build_upsample_aa("_upsample_bicubic2d_aa.default"), tol="red")

assert sorted(SPECS) == sorted(OP_LIST + EXTRA_LIST), (sorted(set(OP_LIST) - set(SPECS)),
                                                       sorted(set(SPECS) - set(OP_LIST)))


# ---------------------------------------------------------------------------
# export, reference data
# ---------------------------------------------------------------------------
class OpModule(nn.Module):
    """forward(*all sample inputs) -> flat tuple of every sample's outputs, in order."""

    def __init__(self, samples):
        super().__init__()
        self.samples = samples

    def forward(self, *args):
        outs, i = [], 0
        for s in self.samples:
            n = len(s.inputs)
            outs.extend(flat(s.fn(*args[i:i + n])))
            i += n
        return tuple(outs)


def flat(r):
    if isinstance(r, (tuple, list)):
        out = []
        for x in r:
            out.extend(flat(x))
        return out
    if r is None:  # masked-out results of backward ops
        return []
    return [r]


def dtype_name(t):
    if isinstance(t, torch.Tensor):
        return DT[t.dtype]
    if isinstance(t, bool):
        return "bool"
    if isinstance(t, int):
        return "i64"
    return "f32"


def to_numpy(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.dtype == BF16:
            t = t.float()
        return t.contiguous().numpy()
    # Python scalar (SymInt/SymFloat/SymBool output): 0-d array, dtype of the tensor it came from
    if isinstance(t, bool):
        return np.array(t, dtype=np.bool_)
    if isinstance(t, int):
        return np.array(t, dtype=np.int64)
    return np.array(t, dtype=np.float32)  # every float sample here comes from an f32 tensor


def same(a, b):
    """eager vs reloaded archive: identical up to 1e-5 relative, NaN where NaN"""
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    try:
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, equal_nan=True)
        return True
    except AssertionError:
        return False


def graph_targets(ep):
    ops = {}
    for n in ep.graph.nodes:
        if n.op == "call_function":
            t = str(n.target)
            ops[t] = ops.get(t, 0) + 1
    return dict(sorted(ops.items()))


def first_line(e):
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"


def moments_of(t):
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    x = t.double()
    return {"mean": float(x.mean()), "std": float(x.std()) if t.numel() > 1 else 0.0,
            "min": float(x.min()), "max": float(x.max())}


def generate(name, spec, outdir):
    torch.manual_seed(0)
    samples = spec["build"]()
    assert 1 <= len(samples), name
    inputs = [t for s in samples for t in s.inputs]
    dyn = [d for s in samples for d in s.dyn]
    module = OpModule(samples).eval()
    target = opobj(name)
    tname = qualified(name)

    entry = {"status": "ok", "reason": None, "archive": f"{name}.pt2", "graph_target": tname}

    # eager reference (seeded again so random ops are reproducible)
    torch.manual_seed(0)
    with torch.no_grad():
        eager = list(module(*inputs))

    d = os.path.join(outdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    path = os.path.join(outdir, f"{name}.pt2")
    if os.path.exists(path):
        os.remove(path)

    ep = None
    try:
        ds = (tuple(dyn),) if any(x is not None for x in dyn) else None
        ep = torch.export.export(module, tuple(inputs), dynamic_shapes=ds, strict=False)
        pre = graph_targets(ep)
        table = torch.export.default_decompositions()
        table.pop(target, None)
        ep = ep.run_decompositions(table)
    except Exception as e:  # noqa: BLE001 - recorded in cases.json
        entry.update(status="refused", reason=f"export failed: {first_line(e)}", archive=None,
                     graph_target=None)
        print(f"[{name}] REFUSED: {entry['reason']}", file=sys.stderr)

    if ep is not None:
        post = graph_targets(ep)
        if tname not in post:
            # what replaced it: new targets after run_decompositions, else all of export's
            where = "export itself" if tname not in pre else "run_decompositions"
            subst = sorted((set(post) - set(pre)) if tname in pre else set(post))
            subst = [t for t in subst if t != "<built-in function getitem>"]
            entry.update(status="refused", graph_target=subst[0] if len(subst) == 1 else subst,
                         reason=f"{tname} is not in the exported graph: {where} turns it into "
                                f"{', '.join(subst) or 'nothing'}")
            print(f"[{name}] REFUSED: {entry['reason']}", file=sys.stderr)
        entry["graph_ops"] = post
        strip_local_paths(ep)
        try:
            torch.export.save(ep, path)
        except Exception as e:  # noqa: BLE001 - recorded in cases.json
            entry.update(status="refused", reason=f"torch.export.save failed: {first_line(e)}",
                         archive=None)
            print(f"[{name}] REFUSED: {entry['reason']}", file=sys.stderr)
            if os.path.exists(path):
                os.remove(path)
            ep = None
    if ep is not None:
        # the archive must reproduce eager (except values of random/uninitialized outputs)
        loaded = torch.export.load(path).module()
        torch.manual_seed(0)
        with torch.no_grad():
            got = list(loaded(*inputs))
        assert len(got) == len(eager), (name, len(got), len(eager))
        n_out = len(ep.graph_signature.user_outputs)
        assert n_out == len(eager), (name, n_out, len(eager))
        in_names = list(ep.graph_signature.user_inputs)
        assert len(in_names) == len(inputs), (name, in_names)
        if spec["compare"] == "values":
            bad = [i for i, (a, b) in enumerate(zip(eager, got)) if not same(a, b)]
            assert not bad, f"{name}: reloaded archive differs from eager at outputs {bad}"
        else:
            for a, b in zip(eager, got):
                assert tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype, name

    for i, t in enumerate(inputs):
        np.save(os.path.join(d, f"in_{i}.npy"), to_numpy(t))
    for i, t in enumerate(eager):
        np.save(os.path.join(d, f"out_{i}.npy"), to_numpy(t))

    # per-sample bookkeeping
    out_samples, ii, oi = [], 0, 0
    torch.manual_seed(0)
    with torch.no_grad():
        for s in samples:
            n_in = len(s.inputs)
            n_out = len(flat(s.fn(*s.inputs)))
            outs = eager[oi:oi + n_out]
            rec = {"desc": s.desc,
                   "inputs": list(range(ii, ii + n_in)),
                   "outputs": list(range(oi, oi + n_out)),
                   "dtypes": [dtype_name(t) for t in s.inputs],
                   "shapes": [list(t.shape) for t in s.inputs],
                   "out_dtypes": [dtype_name(t) for t in outs],
                   "out_shapes": [list(t.shape) if isinstance(t, torch.Tensor) else [] for t in outs]}
            scal = [oi + k for k, t in enumerate(outs) if not isinstance(t, torch.Tensor)]
            if scal:
                rec["scalar_outputs"] = scal
                for k, t in enumerate(outs):
                    if not isinstance(t, torch.Tensor) and isinstance(t, float):
                        rec["out_dtypes"][k] = DT[s.inputs[0].dtype] if s.inputs[0].dtype != BF16 \
                            else "f32"
            if s.dyn and any(x is not None for x in s.dyn):
                rec["dynamic"] = [None if x is None else {str(k): [v.min, v.max]
                                                          for k, v in x.items()} for x in s.dyn]
            if spec["random"]:
                if s.moments == "exact":
                    rec["compare"] = "values"
                elif s.moments is not None:
                    rec["compare"] = "moments"
                    # one entry per output of the sample
                    rec["moments"] = s.moments if isinstance(s.moments, list) else [s.moments]
                    rec["observed"] = [moments_of(t) for t in outs]
                else:
                    rec["compare"] = "shape_dtype"
            if s.note:
                rec["note"] = s.note
            out_samples.append(rec)
            ii += n_in
            oi += n_out
    assert ii == len(inputs) and oi == len(eager), name

    # check the sort tie cases really are stable in the reference
    if name == "sort.default":
        for s, rec in zip(samples, out_samples):
            if "duplicates" in s.desc:
                x = s.inputs[0]
                desc = "descending" in s.desc
                ref = torch.sort(x, stable=True, descending=desc)[1]
                assert torch.equal(eager[rec["outputs"][1]], ref), s.desc

    out_dt = sorted({dt for r in out_samples for dt in r["out_dtypes"]})
    tol = {dt: TOL[spec["tol"]].get(dt, 0) for dt in out_dt}  # ints and bool: exact
    entry.update({
        "samples": out_samples,
        "tolerance": tol,
        "random": spec["random"],
        "data_dependent": spec["data_dependent"],
        "backward": spec["backward"],
        "compare": spec["compare"],
        "dynamic_shapes": any(x is not None for x in dyn),
        "schema": str(target._schema),
    })
    if spec["note"]:
        entry["note"] = spec["note"]
    if name in EXTRA_LIST:
        entry["extra"] = True  # not a Core ATen op: the table's second section
    size = os.path.getsize(path) if os.path.exists(path) else 0
    print(f"[{name}] {entry['status']}: {len(samples)} samples, {len(inputs)} inputs, "
          f"{len(eager)} outputs, archive {size} bytes")
    return entry


# ---------------------------------------------------------------------------
# edge sweep: 0-d, size-0 and size-1 operands of every op (testdata/ops_edge/)
# ---------------------------------------------------------------------------
def as_0d(t):
    return t.reshape(-1)[:1].reshape(()) if t.numel() else t.new_zeros(())


def as_size1(t):
    return t[tuple(slice(0, 1) for _ in range(t.dim()))]


# kind, what it does to one tensor (None: not applicable to that tensor)
EDGE_KINDS = [
    ("0-d", lambda t: as_0d(t) if t.dim() > 0 else None),
    ("size-0 dim 0", lambda t: t.narrow(0, 0, 0) if t.dim() > 0 else None),
    ("size-0 last dim", lambda t: t.narrow(-1, 0, 0) if t.dim() > 1 else None),
    ("size-1 every dim", lambda t: as_size1(t) if t.dim() > 0 and t.numel() > 1 else None),
]


def exports(sample, name, eager):
    """True when a module of this one sample exports with the op kept in the graph, and the
    program's own result types are eager's (for empty inputs some kernels return another
    dtype than their meta functions say, e.g. native_dropout's mask)"""
    try:
        ep = torch.export.export(OpModule([sample]).eval(), tuple(sample.inputs), strict=False)
        table = torch.export.default_decompositions()
        table.pop(opobj(name), None)
        ep = ep.run_decompositions(table)
        if qualified(name) not in graph_targets(ep):
            return False
        out = next(n for n in ep.graph.nodes if n.op == "output")
        declared = [a.meta.get("val") for a in out.args[0]]
        return all(getattr(d, "dtype", None) == t.dtype and tuple(d.shape) == tuple(t.shape)
                   for d, t in zip(declared, eager))
    except Exception:  # noqa: BLE001 - the variant is not a program torch makes
        return False


def edge_by_arguments():
    """edge samples of ops whose sizes are arguments, not operands, and one-element tuples
    for the int[N] parameters PyTorch expands (pooling, convolution, col2im)"""
    g, gb = aten.native_group_norm.default, aten.native_group_norm_backward.default
    mp2, mp3 = aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default
    ap2 = aten.avg_pool2d.default
    one = "one-element tuples"
    return {
        "max_pool3d_with_indices.default": [
            S(f"{one} k(2,) s(1,) p(0,) d(1,) f32[1,1,3,4,4]", [N(1, 1, 3, 4, 4)], lambda x: mp3(x, [2], [1], [0], [1]))],
        "avg_pool3d.default": [
            S(f"{one} k(2,) s(2,) p(1,) f32[1,2,4,4,4]", [N(1, 2, 4, 4, 4)],
              lambda x: aten.avg_pool3d.default(x, [2], [2], [1]))],
        "max_pool2d_with_indices_backward.default": [
            S(f"{one} k(2,) s(1,) p(0,) d(1,)", [N(1, 1, 3, 5), N(1, 1, 4, 6)],
              lambda gr, x: aten.max_pool2d_with_indices_backward.default(
                  gr, x, [2], [1], [0], [1], False, mp2(x, [2], [1], [0], [1])[1]))],
        "avg_pool2d_backward.default": [
            S(f"{one} k(3,) s(2,) p(1,)", [N(1, 1, 3, 3), N(1, 1, 6, 6)],
              lambda gr, x: aten.avg_pool2d_backward.default(gr, x, [3], [2], [1], False, True, None))],
        "avg_pool2d.default": [S(f"{one} k(2,) s(1,) p(0,)", [N(1, 1, 4, 5)], lambda x: ap2(x, [2], [1], [0]))],
        "_adaptive_avg_pool2d.default": [
            S(f"{one} output_size (2,)", [N(1, 2, 5, 4)], lambda x: aten._adaptive_avg_pool2d.default(x, [2]))],
        "adaptive_max_pool2d.default": [
            S(f"{one} output_size (2,)", [N(1, 2, 5, 4)], lambda x: aten.adaptive_max_pool2d.default(x, [2]))],
        "convolution.default": [
            S(f"{one} conv2d stride (2,) padding (1,) dilation (1,) output_padding (0,)",
              [N(1, 2, 5, 5), N(3, 2, 3, 3)],
              lambda x, w: aten.convolution.default(x, w, None, [2], [1], [1], False, [0], 1))],
        "col2im.default": [
            S(f"{one} kernel (2,) dilation (1,) padding (0,) stride (1,)", [N(1, 8, 9)],
              lambda x: aten.col2im.default(x, [4, 4], [2], [1], [0], [1]))],
        "arange.start_step": [S("empty range (3, 3, 1)", [], lambda: aten.arange.start_step(3, 3, 1)),
                              S("one element (2, 3, 1)", [], lambda: aten.arange.start_step(2, 3, 1))],
        "full.default": [S("size [0, 3]", [], lambda: aten.full.default([0, 3], 1.5)),
                         S("size [1, 1]", [], lambda: aten.full.default([1, 1], 7))],
        "empty.memory_format": [S("size [0, 2]", [], lambda: aten.empty.memory_format([0, 2])),
                                S("0-d", [], lambda: aten.empty.memory_format([]))],
        "empty_strided.default": [S("size [0, 3]", [], lambda: aten.empty_strided.default([0, 3], [3, 1])),
                                  S("0-d", [], lambda: aten.empty_strided.default([], []))],
        "rand.generator": [S("size [0, 2]", [], lambda: aten.rand.generator([0, 2], generator=None)),
                           S("0-d", [], lambda: aten.rand.generator([], generator=None))],
        "randn.generator": [S("size [0, 2]", [], lambda: aten.randn.generator([0, 2], generator=None)),
                            S("0-d", [], lambda: aten.randn.generator([], generator=None))],
        "rand.default": [S("0-d", [], lambda: aten.rand.default([])),
                         S("size [1, 1]", [], lambda: aten.rand.default([1, 1]))],
        "randn.default": [S("0-d", [], lambda: aten.randn.default([])),
                          S("size [0]", [], lambda: aten.randn.default([0]))],
        "randperm.default": [S("n = 0", [], lambda: aten.randperm.default(0)),
                             S("n = 1", [], lambda: aten.randperm.default(1))],
        "tril_indices.default": [S("0x0", [], lambda: aten.tril_indices.default(0, 0)),
                                 S("1x1", [], lambda: aten.tril_indices.default(1, 1)),
                                 S("3x0", [], lambda: aten.tril_indices.default(3, 0))],
        "triu_indices.default": [S("0x0", [], lambda: aten.triu_indices.default(0, 0)),
                                 S("1x1 offset 1 (empty)", [], lambda: aten.triu_indices.default(1, 1, 1))],
        "native_group_norm.default": [
            S("batch 0: f32[0,4,3]", [N(0, 4, 3)], lambda x: g(x, None, None, 0, 4, 3, 2, 1e-5)),
            S("one element per group: f32[2,4,1] groups 4", [N(2, 4, 1)], lambda x: g(x, None, None, 2, 4, 1, 4, 1e-5)),
        ],
        "native_group_norm_backward.default": [
            S("one element per group: f32[2,4,1] groups 4", [N(2, 4, 1), N(2, 4, 1)],
              lambda gr, x: gb(gr, x, *g(x, None, None, 2, 4, 1, 4, 1e-5)[1:], None, 2, 4, 1, 4,
                               [True, False, False])),
        ],
    }


def survives(fn, args):
    """True when fn(*args) returns in a forked child: some kernels (convolution_backward)
    crash the process on operands their checks let through"""
    pid = os.fork()
    if pid == 0:
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*args)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure means "not accepted"
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def edge_samples(name, spec):
    """For each edge kind, the first sample of the op (in its order) whose tensor operands,
    all changed that way (else only the first one), eager accepts and export keeps"""
    torch.manual_seed(0)
    base = [s for s in spec["build"]() if not any(d is not None for d in s.dyn)]
    out = []
    for kind, f in EDGE_KINDS:
        found = None
        for s in base:
            tensors = [k for k, t in enumerate(s.inputs) if isinstance(t, torch.Tensor)]
            for which in (tensors, tensors[:1]):
                new = list(s.inputs)
                changed = False
                for k in which:
                    v = f(s.inputs[k])
                    if v is not None:
                        new[k], changed = v.clone(), True
                if not changed:
                    continue
                if not survives(s.fn, new):
                    continue
                torch.manual_seed(0)
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = flat(s.fn(*new))
                if not r or not all(isinstance(t, torch.Tensor) for t in r):
                    continue
                what = "every operand" if len(which) > 1 else "operand 0"
                cand = S(f"{kind} ({what}) of `{s.desc}`", new, s.fn,
                         moments=None if spec["random"] else s.moments)
                if exports(cand, name, r):
                    found = cand
                    break
            if found:
                break
        if found:
            out.append(found)
    for cand in edge_by_arguments().get(name, []):
        torch.manual_seed(0)
        if survives(cand.fn, cand.inputs):
            with torch.no_grad():
                r = flat(cand.fn(*cand.inputs))
            if spec["random"]:
                cand.moments = None
            if exports(cand, name, r):
                out.append(cand)
    return out


def dir_size(p):
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output folder (default testdata/ops, with --edge testdata/ops_edge)")
    ap.add_argument("--edge", action="store_true",
                    help="the edge sweep: each op's samples with 0-d, size-0 and size-1 operands")
    ap.add_argument("ops", nargs="*", help="subset of the ops (name.overload)")
    a = ap.parse_args()
    out = a.out or os.path.join(HERE, "ops_edge" if a.edge else "ops")
    order = list(OP_LIST) + list(EXTRA_LIST)
    names = a.ops or order
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        ap.error(f"unknown op(s) {unknown}")
    os.makedirs(out, exist_ok=True)
    cases_path = os.path.join(out, "cases.json")
    cases = {}
    if a.ops and os.path.exists(cases_path):  # partial run: update the existing entries
        with open(cases_path) as f:
            cases = json.load(f)
    t0 = time.time()
    for n in names:
        spec = SPECS[n]
        if a.edge:
            torch.set_num_threads(1)  # survives() forks
            samples = edge_samples(n, spec)
            cases.pop(n, None)
            if not samples:
                print(f"[{n}] no edge variant that eager accepts and export keeps")
                continue
            spec = dict(spec, build=lambda s=samples: s)
        cases[n] = generate(n, spec, out)
    cases = {n: cases[n] for n in order if n in cases}
    with open(cases_path, "w") as f:
        f.write(compact_json(cases) + "\n")

    ok = [n for n, c in cases.items() if c["status"] == "ok"]
    refused = [n for n, c in cases.items() if c["status"] != "ok"]
    total = dir_size(out)
    budget = EDGE_BUDGET if a.edge else BUDGET
    print(f"\n{len(cases)} ops: {len(ok)} ok, {len(refused)} refused "
          f"({time.time() - t0:.0f} s)")
    for n in refused:
        print(f"  refused {n}: {cases[n]['reason']}")
    print(f"total size of {out}: {total} bytes ({total / 2**20:.2f} MiB; budget {budget / 1e6:.0f} MB)")
    if total >= budget:
        print("ERROR: over the budget", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
