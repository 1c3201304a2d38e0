//! Value types of the IR: element types, dimensions (static or symbolic) and tensor types.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::sym::SymExpr;

/// Precision of a contraction (`precision_config` of `dot_general` and `convolution`): on
/// TPU one bf16 pass, three, or full f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// One bf16 pass on TPU.
    #[default]
    Default,
    /// Three bf16 passes on TPU.
    High,
    /// Full f32 on TPU.
    Highest,
}

impl Precision {
    /// `default`, `high` or `highest`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Default => "default",
            Precision::High => "high",
            Precision::Highest => "highest",
        }
    }

    /// Parses [`Precision::name`].
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "default" => Precision::Default,
            "high" => Precision::High,
            "highest" => Precision::Highest,
            _ => return None,
        })
    }
}

/// Element type of a tensor, covering every dtype of the export schema's `ScalarType` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// `torch.bool`, one byte holding 0 or 1.
    Bool,
    /// `torch.uint8`.
    U8,
    /// `torch.int8`.
    I8,
    /// `torch.int16`.
    I16,
    /// `torch.int32`.
    I32,
    /// `torch.int64`.
    I64,
    /// `torch.uint16`.
    U16,
    /// `torch.uint32`.
    U32,
    /// `torch.uint64`.
    U64,
    /// `torch.float16` (IEEE binary16).
    F16,
    /// `torch.bfloat16`.
    BF16,
    /// `torch.float32`.
    F32,
    /// `torch.float64`.
    F64,
    /// `torch.float8_e4m3fn`.
    F8E4M3FN,
    /// `torch.float8_e5m2`.
    F8E5M2,
    /// `torch.float8_e4m3fnuz`.
    F8E4M3FNUZ,
    /// `torch.float8_e5m2fnuz`.
    F8E5M2FNUZ,
    /// `torch.float8_e8m0fnu`.
    F8E8M0FNU,
    /// `torch.complex32` (two f16).
    C32,
    /// `torch.complex64` (two f32).
    C64,
    /// `torch.complex128` (two f64).
    C128,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 21] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::F8E4M3FN,
        DType::F8E5M2,
        DType::F8E4M3FNUZ,
        DType::F8E5M2FNUZ,
        DType::F8E8M0FNU,
        DType::C32,
        DType::C64,
        DType::C128,
    ];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        use DType::*;
        match self {
            Bool | U8 | I8 | F8E4M3FN | F8E5M2 | F8E4M3FNUZ | F8E5M2FNUZ | F8E8M0FNU => 1,
            I16 | U16 | F16 | BF16 => 2,
            I32 | U32 | F32 | C32 => 4,
            I64 | U64 | F64 | C64 => 8,
            C128 => 16,
        }
    }

    /// Short lowercase name used by the printer, `inspect` and the manifest (`f32`, `bf16`, `i64`, …).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            Bool => "bool",
            U8 => "u8",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            U16 => "u16",
            U32 => "u32",
            U64 => "u64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
            F8E4M3FN => "f8e4m3fn",
            F8E5M2 => "f8e5m2",
            F8E4M3FNUZ => "f8e4m3fnuz",
            F8E5M2FNUZ => "f8e5m2fnuz",
            F8E8M0FNU => "f8e8m0fnu",
            C32 => "c32",
            C64 => "c64",
            C128 => "c128",
        }
    }

    /// Parses [`DType::name`].
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The lowest value of the dtype (`-inf` for floats, `false` for bool): the identity of
    /// `max`.
    pub fn lowest(self) -> Scalar {
        match self {
            DType::Bool => Scalar::Bool(false),
            DType::I8 => Scalar::Int(i64::from(i8::MIN)),
            DType::I16 => Scalar::Int(i64::from(i16::MIN)),
            DType::I32 => Scalar::Int(i64::from(i32::MIN)),
            DType::I64 => Scalar::Int(i64::MIN),
            d if d.is_integer() => Scalar::Int(0),
            _ => Scalar::Float(f64::NEG_INFINITY),
        }
    }

    /// The highest value of the dtype (`+inf` for floats, `true` for bool): the identity of
    /// `min`.
    pub fn highest(self) -> Scalar {
        match self {
            DType::Bool => Scalar::Bool(true),
            DType::I8 => Scalar::Int(i64::from(i8::MAX)),
            DType::I16 => Scalar::Int(i64::from(i16::MAX)),
            DType::I32 => Scalar::Int(i64::from(i32::MAX)),
            DType::I64 | DType::U64 => Scalar::Int(i64::MAX),
            DType::U8 => Scalar::Int(i64::from(u8::MAX)),
            DType::U16 => Scalar::Int(i64::from(u16::MAX)),
            DType::U32 => Scalar::Int(i64::from(u32::MAX)),
            _ => Scalar::Float(f64::INFINITY),
        }
    }

    /// `v` as a scalar of this dtype's kind: a float, a bool (`v != 0`) or an integer.
    pub fn scalar(self, v: i64) -> Scalar {
        if self == DType::Bool {
            Scalar::Bool(v != 0)
        } else if self.is_integer() {
            Scalar::Int(v)
        } else {
            Scalar::Float(v as f64)
        }
    }

    /// True for floating-point types (including fp8 and bf16), false for complex.
    pub fn is_float(self) -> bool {
        use DType::*;
        matches!(self, F16 | BF16 | F32 | F64 | F8E4M3FN | F8E5M2 | F8E4M3FNUZ | F8E5M2FNUZ | F8E8M0FNU)
    }

    /// True for complex types.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C32 | DType::C64 | DType::C128)
    }

    /// The type of the real and imaginary parts of a complex type; `None` for others.
    pub fn complex_part(self) -> Option<DType> {
        match self {
            DType::C32 => Some(DType::F16),
            DType::C64 => Some(DType::F32),
            DType::C128 => Some(DType::F64),
            _ => None,
        }
    }

    /// The complex type whose parts are of this type; `None` for others.
    pub fn complex_of(self) -> Option<DType> {
        match self {
            DType::F16 => Some(DType::C32),
            DType::F32 => Some(DType::C64),
            DType::F64 => Some(DType::C128),
            _ => None,
        }
    }

    /// True for signed and unsigned integer types (not bool).
    pub fn is_integer(self) -> bool {
        use DType::*;
        matches!(self, U8 | I8 | I16 | I32 | I64 | U16 | U32 | U64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension size: a known integer or a symbolic expression over bounded symbols.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    /// A size known at export time.
    Static(i64),
    /// A size that depends on symbols (e.g. `s70`, `2*s70`); bucketing specializes it.
    Sym(SymExpr),
}

impl Dim {
    /// Builds a dimension, folding constant expressions into `Static`.
    pub fn from_expr(expr: SymExpr) -> Dim {
        match expr.as_const() {
            Some(v) => Dim::Static(v),
            None => Dim::Sym(expr),
        }
    }

    /// The static size, if known.
    pub fn as_static(&self) -> Option<i64> {
        match self {
            Dim::Static(v) => Some(*v),
            Dim::Sym(_) => None,
        }
    }

    /// The dimension as an expression (a constant for static dims).
    pub fn to_expr(&self) -> SymExpr {
        match self {
            Dim::Static(v) => SymExpr::Int(*v),
            Dim::Sym(e) => e.clone(),
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(v) => write!(f, "{v}"),
            Dim::Sym(e) => write!(f, "{e}"),
        }
    }
}

/// The type of one value: an element type and a list of dimensions (empty for a 0-d tensor).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimension sizes, outermost first.
    pub dims: Vec<Dim>,
}

impl TensorType {
    /// A tensor type with all-static dimensions.
    pub fn new(dtype: DType, dims: &[i64]) -> TensorType {
        TensorType { dtype, dims: dims.iter().map(|&d| Dim::Static(d)).collect() }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements when every dimension is static.
    pub fn static_numel(&self) -> Option<i64> {
        self.dims.iter().map(Dim::as_static).product()
    }

    /// True when no dimension is symbolic.
    pub fn is_static(&self) -> bool {
        self.dims.iter().all(|d| d.as_static().is_some())
    }

    /// The dimensions' sizes when every dimension is static.
    pub fn static_dims(&self) -> Option<Vec<i64>> {
        self.dims.iter().map(Dim::as_static).collect()
    }
}

/// A list for a message, `[1, 2, 3]`, with `sep` between items: up to 16 items whole, a longer
/// one as its first 12 and last 2 with how many there are (`[0, 1, …, 9999] (10000 items)`),
/// so that a message never echoes a list of thousands.
pub fn brief_list<T: fmt::Display>(items: &[T], sep: &str) -> String {
    const WHOLE: usize = 16;
    let show = |s: &[T]| s.iter().map(ToString::to_string).collect::<Vec<_>>().join(sep);
    if items.len() <= WHOLE {
        return format!("[{}]", show(items));
    }
    let (head, tail) = (&items[..12], &items[items.len() - 2..]);
    format!("[{}{sep}…{sep}{}] ({} items)", show(head), show(tail), items.len())
}

/// A possibly negative dimension index (`-1`: the last) as a position among `rank` dims.
pub fn norm_dim(d: i64, rank: usize) -> usize {
    (if d < 0 { d + rank as i64 } else { d }) as usize
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Inclusive range of values a symbol may take; `None` means unbounded on that side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bounds {
    /// Smallest allowed value.
    pub min: Option<i64>,
    /// Largest allowed value.
    pub max: Option<i64>,
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: Option<i64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        write!(f, "[{}, {}]", show(self.min), show(self.max))
    }
}

/// A Python scalar argument (`Scalar` in ATen schemas), as written in the export.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    /// A Python `bool`.
    Bool(bool),
    /// A Python `int`.
    Int(i64),
    /// A Python `float`; may be infinite or NaN.
    Float(f64),
}

impl Scalar {
    /// The value as a float (`true` is 1; large ints round as Python's `float()` does).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            // The default NaN and its negation by name, any other NaN by its bits: exact.
            Scalar::Float(x) if x.is_nan() => match x.to_bits() {
                b if b == f64::NAN.to_bits() => f.write_str("nan"),
                b if b == (-f64::NAN).to_bits() => f.write_str("-nan"),
                b => write!(f, "nan(0x{b:016x})"),
            },
            Scalar::Float(x) if x.is_infinite() => f.write_str(if *x > 0.0 { "inf" } else { "-inf" }),
            // `{:?}` always keeps a decimal point or exponent, so floats never print like ints.
            Scalar::Float(x) => write!(f, "{x:?}"),
        }
    }
}
