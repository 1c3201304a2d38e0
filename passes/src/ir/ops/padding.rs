//! What an op does under padding: a program compiled for a size bucket runs every real size at
//! the bucket's size, its operands padded past their real size along a dynamic dim. Each op's
//! definition says it ([`OpDef::under_padding`](super::OpDef::under_padding)): exact, refused,
//! or a rule of the `bucket_masks` pass, named here with what the rule needs of the op. The pass
//! matches every [`PaddingRule`], so an op can only name a rule the pass has.

use super::{AvgPool, Convolution, Fft, GroupNorm, Pad, Slice, Upsample};
use crate::ir::{ArgReduceOp, Dim, ReduceOp};

/// How an op treats operands padded past their real size along a dynamic dim.
#[derive(Clone, Debug, PartialEq)]
pub enum Padding {
    /// Real results stay real whatever the padding holds, when the real positions of the dim
    /// are a prefix: each result position reads the same or earlier positions along a padded
    /// dim (moves of dims, running reductions), or no padded values at all (inputs,
    /// constants, shapes).
    Exact,
    /// Exact under this rule of the `bucket_masks` pass.
    Rule(PaddingRule),
    /// No padding-safe form: a bucket with this op along a dynamic dim is refused.
    Refused,
    /// Refused, for this reason (`"normalizes over a dynamic dim"`).
    RefusedBecause(&'static str),
}

/// A rule of the `bucket_masks` pass: what an op does along a padded dim it does not work along
/// position by position, with what the rule needs of the op (asked of the op as exported, its
/// sizes still symbolic).
// The variants' fields are the op's attributes of the same names, documented with the op.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq)]
pub enum PaddingRule {
    /// Regroups dims (`view`): each result dim takes a run of the operand's factors.
    View,
    /// A slice from a fixed start with step 1 along a prefix, or of whole pieces.
    Slice(Slice),
    /// An index valid at every size, or counted from the end.
    Select { dim: i64, index: i64 },
    /// A prefix when only the last piece is padded; a dim of pieces otherwise.
    Cat { dim: i64 },
    /// Parts of a dim of pieces (made by a `cat`) cut at the pieces' bounds: each part whole
    /// pieces.
    Split { dim: i64 },
    /// Statistics over the real positions of groups that span a padded dim.
    GroupNorm(GroupNorm),
    /// Reads at indices (`index`, `gather`, `index_select`): real positions, or numbers from
    /// data clamped into the real rows.
    Gather,
    /// Writes at indices (`index_put`): padded positions sent past the end, or written with
    /// padding.
    IndexPut { present: Vec<bool>, accumulate: bool },
    /// Contracts operand `lhs.0`'s dim `lhs.1` with operand `rhs.0`'s dim `rhs.1`: both zeroed
    /// past the real size.
    Contract { lhs: (usize, usize), rhs: (usize, usize) },
    /// Softmax along `dim`: the padding filled with −∞.
    Softmax { dim: i64 },
    /// A reduction over `dims`: the padding filled with its identity (a mean divides by the
    /// real count).
    Reduce { op: ReduceOp, dims: Vec<i64> },
    /// The index of an extremum along `dim`: the padding filled with the extremum's identity.
    ArgExtremum { op: ArgReduceOp, dim: i64 },
    /// `max.dim`/`min.dim` along `dim`: the values exact, the indices real along a prefix.
    Extremum { max: bool, dim: i64 },
    /// A sort or top-k along a padded dim (`what` it does, for messages): the padding sorts
    /// last.
    Sort { descending: bool, what: &'static str },
    /// A histogram: the padding set to NaN, which no bin counts.
    Histc,
    /// A convolution along a padded dim: zeros read past the real length, as its own padding.
    Convolution(Convolution),
    /// A max pool along a padded spatial dim: the padding −∞, its indices unused.
    MaxPool,
    /// An average pool along a padded spatial dim: zeros read past the real length, as its own
    /// padding, where every window's divisor stays eager's (no `ceil_mode`; a padded side
    /// counts its padding or has a fixed divisor).
    AvgPool(AvgPool),
    /// Resampling along padded spatial dims: each multiplied by the interpolation matrix of its
    /// real input and output lengths, built in the program.
    Upsample(Upsample),
    /// A constant pad on the right of a padded dim: its value written from the real length on.
    Pad(Pad),
    /// Copies of a padded dim one after the other: a dim of factors.
    Repeat { repeats: Vec<Dim> },
    /// A scatter along a padded prefix: its index's padding moved past the end.
    Scatter { dim: i64 },
    /// `x[mask] = values`: the mask false wherever it is padded.
    MaskedScatter,
    /// A Fourier transform along a padded dim: a product with the DFT matrix of the real length.
    Fourier(Fft),
    /// Non-maximum suppression: padded boxes sorted last.
    Nms,
    /// `nonzero`: a count from data, bounded at the bucket; rows past the real count masked.
    Nonzero,
    /// `item()`: a value from data used as a size, clamped into its range.
    Item,
}
