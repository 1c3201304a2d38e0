//! Complex values made from real ones and seen as real ones: `complex(re, im)`,
//! `polar(abs, angle)`, `view_as_complex` (a last dim of 2 read as (real, imaginary)) and
//! `view_as_real` (the reverse). Arithmetic on complex values is the element-wise ops'; `conj`
//! and `angle` are unary functions.

use super::rule::*;
use super::*;
use crate::ir::types::*;

/// The complex dtype of two real parts: both of one float dtype, as torch requires.
fn complex_of_parts(name: &str, a: &TensorType, b: &TensorType) -> Result<DType, String> {
    if a.dtype != b.dtype {
        return Err(format!("`{name}` takes parts of one dtype, found {} and {}", a.dtype, b.dtype));
    }
    a.dtype.complex_of().ok_or_else(|| format!("`{name}` takes float parts, found {}", a.dtype))
}

op! {
    /// `complex(real, imag)`: inputs `[real, imag]` of one float dtype, broadcast.
    pub struct Complex = "complex";
}

impl OpDef for Complex {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let dtype = complex_of_parts("complex", inputs[0], inputs[1])?;
        let dims = broadcast(&[&inputs[0].dims, &inputs[1].dims])?;
        one(Expected::exact(dtype, &dims))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `polar(abs, angle)`: `abs·cos(angle) + i·abs·sin(angle)`; inputs `[abs, angle]` of one
    /// float dtype, broadcast.
    pub struct Polar = "polar";
}

impl OpDef for Polar {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let dtype = complex_of_parts("polar", inputs[0], inputs[1])?;
        let dims = broadcast(&[&inputs[0].dims, &inputs[1].dims])?;
        one(Expected::exact(dtype, &dims))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `view_as_complex`: inputs `[x]` of a float dtype whose last dim is 2 (real, imaginary);
    /// the complex result drops that dim.
    pub struct ViewAsComplex = "view_as_complex";
}

impl OpDef for ViewAsComplex {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Some((last, rest)) = x.dims.split_last() else {
            return Err("`view_as_complex` needs a last dim of size 2, the operand is 0-d".into());
        };
        if last.as_static() != Some(2) {
            return Err(format!("`view_as_complex` needs a last dim of size 2, found {last}"));
        }
        let dtype = x.dtype.complex_of().ok_or_else(|| format!("`view_as_complex` takes floats, found {}", x.dtype))?;
        one(Expected::exact(dtype, rest))
    }

    /// Every dim but the pair.
    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank().saturating_sub(1);
        (0..rank).map(|dim| Along { slot: 0, dim, out: 0, out_dim: dim }).collect()
    }
}

op! {
    /// `view_as_real`: inputs `[z]` complex; the result has a last dim of 2 more, (real,
    /// imaginary), of the parts' dtype.
    pub struct ViewAsReal = "view_as_real";
}

impl OpDef for ViewAsReal {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let z = inputs[0];
        let part =
            z.dtype.complex_part().ok_or_else(|| format!("`view_as_real` takes complex values, found {}", z.dtype))?;
        let mut dims = z.dims.clone();
        dims.push(Dim::Static(2));
        one(Expected::exact(part, &dims))
    }

    /// Every dim of the operand.
    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        (0..inputs[0].rank()).map(|dim| Along { slot: 0, dim, out: 0, out_dim: dim }).collect()
    }
}
