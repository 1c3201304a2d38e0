//! A thin layer over melior for building StableHLO as generic operations.
//!
//! StableHLO is not an upstream MLIR dialect, so every op is built by name with its attributes
//! parsed from their textual form (`#stablehlo.dot<…>`, `array<i64: …>`); the PJRT plugin's
//! parser is the real check of the result. Helpers here are the shared vocabulary of the
//! per-family lowerings: constants, broadcasts, conversions, reductions with regions.

use melior::ir::attribute::Attribute;
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationBuilder;
use melior::ir::r#type::Type;
use melior::ir::RegionLike;
use melior::ir::{Block, Identifier, Location, Region, Value};
use melior::Context;
use torchtpu_passes::ir::{DType, Dim, Scalar, TensorType};
pub(super) use torchtpu_passes::{bug, Fail};

/// The result of lowering one node: `Fail::Refused` for what the program asks and the emitter
/// does not provide, `Fail::Bug` (`bug(…)`) for a broken invariant.
pub(super) type LowerResult<T> = Result<T, Fail>;

/// Builds operations into one block.
pub(super) struct Builder<'c, 'b> {
    pub ctx: &'c Context,
    pub block: &'b Block<'c>,
    pub loc: Location<'c>,
}

/// The MLIR element type of a dtype.
pub(crate) fn element_type(d: DType) -> &'static str {
    use DType::*;
    match d {
        Bool => "i1",
        U8 => "ui8",
        I8 => "i8",
        I16 => "i16",
        I32 => "i32",
        I64 => "i64",
        U16 => "ui16",
        U32 => "ui32",
        U64 => "ui64",
        F16 => "f16",
        BF16 => "bf16",
        F32 => "f32",
        F64 => "f64",
        F8E4M3FN => "f8E4M3FN",
        F8E5M2 => "f8E5M2",
        F8E4M3FNUZ => "f8E4M3FNUZ",
        F8E5M2FNUZ => "f8E5M2FNUZ",
        F8E8M0FNU => "f8E8M0FNU",
        C32 => "complex<f16>",
        C64 => "complex<f32>",
        C128 => "complex<f64>",
    }
}

/// Static dims of a (specialized) tensor type.
pub(super) fn static_dims(ty: &TensorType) -> LowerResult<Vec<i64>> {
    ty.dims
        .iter()
        .map(|d| match d {
            Dim::Static(v) => Ok(*v),
            Dim::Sym(e) => Err(format!("dimension `{e}` is still symbolic").into()),
        })
        .collect()
}

/// The values of a list of sizes an op takes (`repeat`'s counts), static once specialized.
pub(super) fn static_list(dims: &[Dim], what: &str) -> LowerResult<Vec<i64>> {
    dims.iter()
        .map(|d| d.as_static().ok_or_else(|| Fail::from(format!("the {what} `{d}` is still symbolic"))))
        .collect()
}

/// `tensor<4x16xf32>`, `tensor<f32>`.
pub(super) fn tensor_type_text(dims: &[i64], dtype: DType) -> String {
    let mut s = String::from("tensor<");
    for d in dims {
        s.push_str(&format!("{d}x"));
    }
    s.push_str(element_type(dtype));
    s.push('>');
    s
}

/// `array<i64: 1, 2>`.
pub(super) fn i64_array(v: &[i64]) -> String {
    if v.is_empty() {
        return "array<i64>".to_string();
    }
    let items: Vec<String> = v.iter().map(ToString::to_string).collect();
    format!("array<i64: {}>", items.join(", "))
}

/// The literal of one element of `dtype` holding `value`, as MLIR parses it in `dense<…>`.
/// Floats are written as their exact bit pattern, so infinities, NaN and rounding to the
/// target precision (round to nearest even, as torch does) are all exact.
pub(super) fn scalar_literal(value: Scalar, dtype: DType) -> LowerResult<String> {
    let as_f64 = value.as_f64();
    let as_i64 = match value {
        Scalar::Bool(b) => i64::from(b),
        Scalar::Int(i) => i,
        Scalar::Float(f) => f as i64,
    };
    Ok(match dtype {
        DType::Bool => (if as_f64 != 0.0 { "true" } else { "false" }).to_string(),
        DType::F32 => format!("0x{:08X}", (as_f64 as f32).to_bits()),
        DType::F64 => format!("0x{:016X}", as_f64.to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(as_f64).to_bits()),
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(as_f64).to_bits()),
        // Zero is all bits clear in every fp8 format but E8M0 (which has no zero); other fp8
        // constants would need each format's rounding, and no lowering makes one.
        d if d.is_float()
            && d.size_bytes() == 1
            && as_f64 == 0.0
            && as_f64.is_sign_positive()
            && d != DType::F8E8M0FNU =>
        {
            "0x00".to_string()
        }
        d if d.is_integer() => as_i64.to_string(),
        // A real value as a complex one: (re, im), each part written exactly as above.
        DType::C64 => {
            format!("({}, {})", scalar_literal(value, DType::F32)?, scalar_literal(Scalar::Int(0), DType::F32)?)
        }
        DType::C128 => {
            format!("({}, {})", scalar_literal(value, DType::F64)?, scalar_literal(Scalar::Int(0), DType::F64)?)
        }
        d => return Err(format!("constants of dtype {d} are not supported").into()),
    })
}

impl<'c, 'b> Builder<'c, 'b> {
    pub(super) fn mlir_type(&self, dims: &[i64], dtype: DType) -> LowerResult<Type<'c>> {
        let text = tensor_type_text(dims, dtype);
        Type::parse(self.ctx, &text).ok_or_else(|| bug(format!("cannot parse type `{text}`")))
    }

    pub(super) fn attr(&self, text: &str) -> LowerResult<Attribute<'c>> {
        Attribute::parse(self.ctx, text).ok_or_else(|| bug(format!("cannot parse attribute `{text}`")))
    }

    /// Appends `name(operands) {attrs}` with one result per entry of `results`.
    pub(super) fn op_n(
        &self,
        name: &str,
        operands: &[Value<'c, 'b>],
        results: &[(&[i64], DType)],
        attrs: &[(&str, String)],
        regions: Vec<Region<'c>>,
    ) -> LowerResult<Vec<Value<'c, 'b>>> {
        let types = results.iter().map(|(d, t)| self.mlir_type(d, *t)).collect::<LowerResult<Vec<_>>>()?;
        let attrs = attrs
            .iter()
            .map(|(k, v)| Ok((Identifier::new(self.ctx, k), self.attr(v)?)))
            .collect::<LowerResult<Vec<_>>>()?;
        let op = OperationBuilder::new(name, self.loc)
            .add_operands(operands)
            .add_results(&types)
            .add_attributes(&attrs)
            .add_regions_vec(regions)
            .build()
            .map_err(|e| bug(format!("cannot build `{name}`: {e}")))?;
        let op = self.block.append_operation(op);
        (0..results.len()).map(|i| op.result(i).map(Into::into).map_err(bug)).collect()
    }

    /// A single-result op.
    pub(super) fn op(
        &self,
        name: &str,
        operands: &[Value<'c, 'b>],
        dims: &[i64],
        dtype: DType,
        attrs: &[(&str, String)],
    ) -> LowerResult<Value<'c, 'b>> {
        Ok(self.op_n(name, operands, &[(dims, dtype)], attrs, vec![])?.remove(0))
    }

    /// `stablehlo.constant` of `value` broadcast to `dims`.
    pub(super) fn splat(&self, value: Scalar, dims: &[i64], dtype: DType) -> LowerResult<Value<'c, 'b>> {
        let lit = scalar_literal(value, dtype)?;
        let ty = tensor_type_text(dims, dtype);
        self.op("stablehlo.constant", &[], dims, dtype, &[("value", format!("dense<{lit}> : {ty}"))])
    }

    /// Converts `v` (of dtype `from`) to `to`; bool results compare against zero.
    ///
    /// Never from a complex to a real dtype: that would drop the imaginary part, so it is an
    /// error here (an op that reads a complex value reads both parts; `Convert` itself, whose
    /// meaning in torch is the real part, uses [`Builder::convert_taking_real_part`]).
    pub(super) fn convert(&self, v: Value<'c, 'b>, dims: &[i64], from: DType, to: DType) -> LowerResult<Value<'c, 'b>> {
        if from == to {
            return Ok(v);
        }
        if from.is_complex() && !to.is_complex() {
            return Err(format!("reads a {from} value as {to}, which would drop its imaginary part").into());
        }
        if to == DType::Bool {
            let zero = self.splat(Scalar::Int(0), dims, from)?;
            return self.compare(v, zero, dims, from, "NE");
        }
        self.op("stablehlo.convert", &[v], dims, to, &[])
    }

    /// `convert` that takes a complex value's real part to reach a real dtype (torch's cast of
    /// a complex tensor to a real dtype).
    pub(super) fn convert_taking_real_part(
        &self,
        v: Value<'c, 'b>,
        dims: &[i64],
        from: DType,
        to: DType,
    ) -> LowerResult<Value<'c, 'b>> {
        match from.complex_part() {
            Some(part) if !to.is_complex() => {
                let real = self.op("stablehlo.real", &[v], dims, part, &[])?;
                self.convert(real, dims, part, to)
            }
            _ => self.convert(v, dims, from, to),
        }
    }

    /// `stablehlo.compare` with the comparison type that matches `operand_dtype`.
    pub(super) fn compare(
        &self,
        a: Value<'c, 'b>,
        b: Value<'c, 'b>,
        dims: &[i64],
        operand_dtype: DType,
        direction: &str,
    ) -> LowerResult<Value<'c, 'b>> {
        let kind = if operand_dtype.is_float() {
            "FLOAT"
        } else if operand_dtype.is_integer()
            && !matches!(operand_dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64)
        {
            "SIGNED"
        } else {
            "UNSIGNED"
        };
        self.op(
            "stablehlo.compare",
            &[a, b],
            dims,
            DType::Bool,
            &[
                ("comparison_direction", format!("#stablehlo<comparison_direction {direction}>")),
                ("compare_type", format!("#stablehlo<comparison_type {kind}>")),
            ],
        )
    }

    /// `maximum`/`minimum`, which propagate NaN from either side as torch's do: StableHLO
    /// specifies IEEE-754 `maximum`, and CPU executables are compiled so that XLA:CPU keeps to it
    /// ([`crate::pjrt::CompileOptions::cpu`]).
    pub(super) fn extremum(
        &self,
        a: Value<'c, 'b>,
        b: Value<'c, 'b>,
        dims: &[i64],
        dt: DType,
        max: bool,
    ) -> LowerResult<Value<'c, 'b>> {
        let name = if max { "stablehlo.maximum" } else { "stablehlo.minimum" };
        self.op(name, &[a, b], dims, dt, &[])
    }

    /// True where `x` should win over `y` in an arg-max/min style scan: strictly better in
    /// `direction` (`GT`/`LT`), or NaN over a number (torch treats NaN as the extremum).
    pub(super) fn prefers(
        &self,
        x: Value<'c, 'b>,
        y: Value<'c, 'b>,
        dims: &[i64],
        dt: DType,
        direction: &str,
    ) -> LowerResult<Value<'c, 'b>> {
        let better = self.compare(x, y, dims, dt, direction)?;
        if !dt.is_float() {
            return Ok(better);
        }
        let x_nan = self.compare(x, x, dims, dt, "NE")?;
        let y_nan = self.compare(y, y, dims, dt, "NE")?;
        let y_num = self.op("stablehlo.not", &[y_nan], dims, DType::Bool, &[])?;
        let nan_wins = self.op("stablehlo.and", &[x_nan, y_num], dims, DType::Bool, &[])?;
        self.op("stablehlo.or", &[better, nan_wins], dims, DType::Bool, &[])
    }

    /// [`Builder::extremum`] against a scalar bound (a NaN bound makes every element NaN).
    pub(super) fn bound(
        &self,
        a: Value<'c, 'b>,
        bound: Scalar,
        dims: &[i64],
        dt: DType,
        max: bool,
    ) -> LowerResult<Value<'c, 'b>> {
        let c = self.splat(bound, dims, dt)?;
        if matches!(bound, Scalar::Float(f) if f.is_nan()) {
            return Ok(c);
        }
        self.extremum(a, c, dims, dt, max)
    }

    /// Broadcasts `v` of shape `from` to `to` with NumPy rules (trailing alignment).
    pub(super) fn broadcast_to(
        &self,
        v: Value<'c, 'b>,
        from: &[i64],
        to: &[i64],
        dtype: DType,
    ) -> LowerResult<Value<'c, 'b>> {
        if from == to {
            return Ok(v);
        }
        let lead = to.len().checked_sub(from.len()).ok_or_else(|| bug("broadcast to a lower rank"))?;
        // Size-1 dims that grow must be dropped first: broadcast_in_dim maps dims one to one.
        let mut kept_dims = Vec::new();
        let mut kept_map = Vec::new();
        for (i, &d) in from.iter().enumerate() {
            if d == to[lead + i] {
                kept_dims.push(d);
                kept_map.push((lead + i) as i64);
            } else if d != 1 {
                return Err(format!("cannot broadcast {from:?} to {to:?}").into());
            }
        }
        let v = if kept_dims.len() == from.len() { v } else { self.reshape(v, &kept_dims, dtype)? };
        self.op("stablehlo.broadcast_in_dim", &[v], to, dtype, &[("broadcast_dimensions", i64_array(&kept_map))])
    }

    pub(super) fn reshape(&self, v: Value<'c, 'b>, to: &[i64], dtype: DType) -> LowerResult<Value<'c, 'b>> {
        self.op("stablehlo.reshape", &[v], to, dtype, &[])
    }

    /// A region with one block of `n` scalar arguments of `dtypes`, whose body `body` builds
    /// and returns the values to yield (used by reduce, reduce_window, …).
    pub(super) fn scalar_region(
        &self,
        dtypes: &[DType],
        body: impl for<'x> FnOnce(&Builder<'c, 'x>, &[Value<'c, 'x>]) -> LowerResult<Vec<Value<'c, 'x>>>,
    ) -> LowerResult<Region<'c>> {
        let args: Vec<(&[i64], DType)> = dtypes.iter().map(|&d| (&[][..], d)).collect();
        self.block_region(&args, body)
    }

    /// A region with one block whose arguments have the shapes and dtypes `args`; `body` builds
    /// the values it yields (`stablehlo.return`).
    pub(super) fn block_region(
        &self,
        args: &[(&[i64], DType)],
        body: impl for<'x> FnOnce(&Builder<'c, 'x>, &[Value<'c, 'x>]) -> LowerResult<Vec<Value<'c, 'x>>>,
    ) -> LowerResult<Region<'c>> {
        let arg_types =
            args.iter().map(|(dims, d)| Ok((self.mlir_type(dims, *d)?, self.loc))).collect::<LowerResult<Vec<_>>>()?;
        let block = Block::new(&arg_types);
        {
            let inner = Builder { ctx: self.ctx, block: &block, loc: self.loc };
            let params = (0..args.len())
                .map(|i| block.argument(i).map(Into::into).map_err(bug))
                .collect::<LowerResult<Vec<Value>>>()?;
            let results = body(&inner, &params)?;
            let ret =
                OperationBuilder::new("stablehlo.return", self.loc).add_operands(&results).build().map_err(bug)?;
            block.append_operation(ret);
        }
        let region = Region::new();
        region.append_block(block);
        Ok(region)
    }

    /// `stablehlo.reduce` of `v` over `dims` with the binary combiner `combiner`
    /// (`stablehlo.add`, `stablehlo.maximum`, …) starting from `init`. Keep combiners plain ops:
    /// libtpu's cost model aborts the process on other reduction bodies.
    pub(super) fn reduce(
        &self,
        v: Value<'c, 'b>,
        shape: &[i64],
        dims: &[i64],
        dtype: DType,
        combiner: &str,
        init: Scalar,
    ) -> LowerResult<Value<'c, 'b>> {
        let init = self.splat(init, &[], dtype)?;
        let region = self.scalar_region(&[dtype, dtype], |b, args| {
            Ok(vec![b.op(combiner, &[args[0], args[1]], &[], dtype, &[])?])
        })?;
        let out: Vec<i64> =
            shape.iter().enumerate().filter(|(i, _)| !dims.contains(&(*i as i64))).map(|(_, &d)| d).collect();
        Ok(self
            .op_n("stablehlo.reduce", &[v, init], &[(&out, dtype)], &[("dimensions", i64_array(dims))], vec![region])?
            .remove(0))
    }
}

/// Element-wise arithmetic on values of one shape and dtype.
pub(super) struct Ew<'a, 'c, 'b> {
    pub b: &'a Builder<'c, 'b>,
    pub dims: Vec<i64>,
    pub dt: DType,
}

impl<'c, 'b> Ew<'_, 'c, 'b> {
    pub(super) fn c(&self, v: f64) -> LowerResult<Value<'c, 'b>> {
        self.b.splat(Scalar::Float(v), &self.dims, self.dt)
    }
    pub(super) fn bin(&self, name: &str, x: Value<'c, 'b>, y: Value<'c, 'b>) -> LowerResult<Value<'c, 'b>> {
        self.b.op(&format!("stablehlo.{name}"), &[x, y], &self.dims, self.dt, &[])
    }
    pub(super) fn add(&self, x: Value<'c, 'b>, y: Value<'c, 'b>) -> LowerResult<Value<'c, 'b>> {
        self.bin("add", x, y)
    }
    pub(super) fn sub(&self, x: Value<'c, 'b>, y: Value<'c, 'b>) -> LowerResult<Value<'c, 'b>> {
        self.bin("subtract", x, y)
    }
    pub(super) fn mul(&self, x: Value<'c, 'b>, y: Value<'c, 'b>) -> LowerResult<Value<'c, 'b>> {
        self.bin("multiply", x, y)
    }
    /// `x * k + a`.
    pub(super) fn affine(&self, x: Value<'c, 'b>, k: f64, a: f64) -> LowerResult<Value<'c, 'b>> {
        self.add(self.mul(x, self.c(k)?)?, self.c(a)?)
    }
    pub(super) fn unary(&self, name: &str, x: Value<'c, 'b>) -> LowerResult<Value<'c, 'b>> {
        self.b.op(&format!("stablehlo.{name}"), &[x], &self.dims, self.dt, &[])
    }
    pub(super) fn cmp(&self, x: Value<'c, 'b>, y: Value<'c, 'b>, direction: &str) -> LowerResult<Value<'c, 'b>> {
        self.b.compare(x, y, &self.dims, self.dt, direction)
    }
    pub(super) fn select(&self, c: Value<'c, 'b>, t: Value<'c, 'b>, f: Value<'c, 'b>) -> LowerResult<Value<'c, 'b>> {
        self.b.op("stablehlo.select", &[c, t, f], &self.dims, self.dt, &[])
    }
    pub(super) fn clamp(&self, x: Value<'c, 'b>, lo: f64, hi: f64) -> LowerResult<Value<'c, 'b>> {
        self.b.op("stablehlo.clamp", &[self.c(lo)?, x, self.c(hi)?], &self.dims, self.dt, &[])
    }
}

/// The size of dim `dim` (possibly negative) of `dims`; an error for a 0-d tensor, which has
/// no dim to slice or select along.
pub(super) fn dim_size(dims: &[i64], dim: i64) -> LowerResult<(usize, i64)> {
    let axis = norm_dim(dim, dims.len())? as usize;
    let size = *dims.get(axis).ok_or_else(|| format!("dim {dim} of a 0-d tensor: it has no dims"))?;
    Ok((axis, size))
}

/// Normalizes a possibly negative dim against `rank`.
pub(super) fn norm_dim(dim: i64, rank: usize) -> LowerResult<i64> {
    // A 0-d tensor takes dim 0 and -1, as PyTorch wraps dims by max(rank, 1).
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if (0..r).contains(&d) {
        Ok(d)
    } else {
        Err(format!("dim {dim} is out of range for rank {rank}").into())
    }
}

/// The dtype sums and statistics of `dt` values accumulate in, as PyTorch's kernels do: f32
/// for f16 and bf16 (whose sums lose digits fast and whose largest values, 65504 for f16, are
/// below common element counts), `dt` itself otherwise.
pub(super) fn accumulation_dtype(dt: DType) -> DType {
    match dt {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}
