//! One test per family of type rules: what each infers, and what it refuses.

use super::*;
use crate::ir::ops::{
    Addmm, Arange, ArgReduce, AsStrided, AvgPool, BatchNormInference, Binary, Bmm, Cat, Complex, Convolution,
    ConvolutionBackward, Diagonal, Embedding, Expand, Gather, GroupedMm, Histc, Index, IndexSelect, LayerNorm, MaxPool,
    Mm, Pad, Permute, Polar, Reduce, Repeat, Select, Slice, SliceScatter, Softmax, SplitWithSizes, Squeeze, SymSize,
    TopK, Unsqueeze, View, ViewAsComplex, ViewAsReal, Where,
};
use crate::ir::{BinaryOp, DType, Dim, Operand, ReduceOp, Scalar, SymExpr, TensorType, UnaryOp};

fn t(d: DType, dims: &[i64]) -> TensorType {
    TensorType::new(d, dims)
}

fn f32(dims: &[i64]) -> TensorType {
    t(DType::F32, dims)
}

/// The single result's type, which the test expects to be fully determined.
fn exact(op: &Op, inputs: &[&TensorType]) -> String {
    let e = op.infer(inputs).expect("admits its operands");
    e.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn refused(op: &Op, inputs: &[&TensorType]) -> String {
    op.infer(inputs).expect_err("refuses its operands")
}

#[test]
fn promotion_follows_torch() {
    let (f32_, i64_, f16_, bool_) =
        (f32(&[2, 2]), t(DType::I64, &[2, 2]), t(DType::F16, &[2, 2]), t(DType::Bool, &[2]));
    // A float scalar keeps a half tensor half; an int scalar turns bool into long.
    assert_eq!(result_type(&[(Some(&f16_), None), (None, Some(Scalar::Float(0.5)))]), DType::F16);
    assert_eq!(result_type(&[(Some(&i64_), None), (None, Some(Scalar::Float(0.5)))]), DType::F32);
    assert_eq!(result_type(&[(Some(&bool_), None), (None, Some(Scalar::Int(1)))]), DType::I64);
    assert_eq!(result_type(&[(Some(&f32_), None), (Some(&i64_), None)]), DType::F32);
    // A 0-d f64 tensor does not widen a dimensioned f32 tensor.
    let zero_f64 = t(DType::F64, &[]);
    assert_eq!(result_type(&[(Some(&f32_), None), (Some(&zero_f64), None)]), DType::F32);
    assert_eq!(promote_types(DType::U8, DType::I8), DType::I16);
    assert_eq!(promote_types(DType::F16, DType::BF16), DType::F32);
}

#[test]
fn elementwise_broadcasts_and_promotes() {
    let add = Op::Binary(Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
    assert_eq!(exact(&add, &[&f32(&[4, 1]), &t(DType::I64, &[3])]), "f32[4,3]");
    let div = Op::Binary(Binary {
        op: BinaryOp::Div,
        lhs: Operand::Tensor,
        rhs: Operand::Scalar(Scalar::Int(2)),
        alpha: None,
    });
    assert_eq!(exact(&div, &[&t(DType::I64, &[3])]), "f32[3]");
    let lt = Op::Binary(Binary {
        op: BinaryOp::Lt,
        lhs: Operand::Tensor,
        rhs: Operand::Scalar(Scalar::Float(0.0)),
        alpha: None,
    });
    assert_eq!(exact(&lt, &[&f32(&[3])]), "bool[3]");
    assert_eq!(exact(&Op::Unary(UnaryOp::Exp), &[&t(DType::F16, &[2])]), "f16[2]");
    assert_eq!(exact(&Op::Unary(UnaryOp::Exp), &[&t(DType::I64, &[2])]), "?[2]");
    assert!(refused(&add, &[&f32(&[4, 3]), &f32(&[2])]).contains("do not broadcast"));
    let w = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Float(0.0)) });
    assert_eq!(exact(&w, &[&t(DType::Bool, &[2, 1]), &t(DType::F16, &[3])]), "f16[2,3]");
    assert_eq!(refused(&w, &[&f32(&[2]), &f32(&[2])]), "the condition is f32, not bool");
}

#[test]
fn complex_values_from_and_to_real_pairs() {
    let c64 = |dims: &[i64]| t(DType::C64, dims);
    assert_eq!(exact(&Op::ViewAsComplex(ViewAsComplex), &[&f32(&[3, 4, 2])]), "c64[3,4]");
    assert_eq!(exact(&Op::ViewAsReal(ViewAsReal), &[&c64(&[3, 4])]), "f32[3,4,2]");
    assert_eq!(exact(&Op::Complex(Complex), &[&f32(&[3, 1]), &f32(&[4])]), "c64[3,4]");
    assert_eq!(exact(&Op::Polar(Polar), &[&t(DType::F64, &[2]), &t(DType::F64, &[2])]), "c128[2]");
    assert_eq!(exact(&Op::Unary(UnaryOp::Abs), &[&c64(&[2])]), "f32[2]");
    assert_eq!(exact(&Op::Unary(UnaryOp::Conj), &[&c64(&[2])]), "c64[2]");
    assert!(refused(&Op::ViewAsComplex(ViewAsComplex), &[&f32(&[3, 4])]).contains("last dim of size 2"));
    assert!(refused(&Op::ViewAsComplex(ViewAsComplex), &[&t(DType::I64, &[3, 2])]).contains("takes floats"));
    assert!(refused(&Op::ViewAsReal(ViewAsReal), &[&f32(&[3])]).contains("complex values"));
    assert!(refused(&Op::Complex(Complex), &[&f32(&[2]), &t(DType::F64, &[2])]).contains("one dtype"));
    assert_eq!(promote_types(DType::C64, DType::F64), DType::C128);
    assert_eq!(promote_types(DType::F32, DType::C64), DType::C64);
}

#[test]
fn contractions_check_their_dims_and_dtype() {
    assert_eq!(exact(&Op::Mm(Mm), &[&f32(&[4, 16]), &f32(&[16, 8])]), "f32[4,8]");
    assert_eq!(refused(&Op::Mm(Mm), &[&f32(&[4, 16]), &f32(&[8, 8])]), "contracting dims differ: [4,16] and [8,8]");
    // An `addmm` declared i64 over f32 operands is refused by the comparison, not converted.
    let addmm = Op::Addmm(Addmm { beta: Scalar::Int(1), alpha: Scalar::Int(1) });
    assert_eq!(exact(&addmm, &[&f32(&[8]), &f32(&[4, 16]), &f32(&[16, 8])]), "f32[4,8]");
    assert!(refused(&Op::Bmm(Bmm), &[&f32(&[2, 4, 16]), &t(DType::F16, &[2, 16, 8])]).contains("one dtype"));
    assert!(refused(&Op::Bmm(Bmm), &[&f32(&[2, 4, 16]), &f32(&[3, 16, 8])]).contains("batch dims differ"));
}

fn conv(stride: i64, padding: i64, groups: i64, transposed: bool) -> Op {
    Op::Convolution(Convolution {
        stride: vec![stride; 2],
        padding: vec![padding; 2],
        dilation: vec![1; 2],
        transposed,
        output_padding: vec![0; 2],
        groups,
        has_bias: false,
    })
}

#[test]
fn convolution_arithmetic() {
    assert_eq!(exact(&conv(2, 1, 1, false), &[&f32(&[2, 3, 32, 32]), &f32(&[8, 3, 3, 3])]), "f32[2,8,16,16]");
    // Depthwise: 32 groups of one channel.
    assert_eq!(exact(&conv(1, 1, 32, false), &[&f32(&[1, 32, 8, 8]), &f32(&[32, 1, 3, 3])]), "f32[1,32,8,8]");
    assert_eq!(exact(&conv(2, 1, 1, true), &[&f32(&[1, 8, 4, 4]), &f32(&[8, 3, 3, 3])]), "f32[1,3,7,7]");
    // The broken fold that once reached XLA: a 1-D vector as the input.
    assert!(refused(&conv(1, 0, 1, false), &[&f32(&[8]), &f32(&[8, 8, 1, 1])]).contains("rank 4"));
    assert!(refused(&conv(1, 0, 1, false), &[&f32(&[1, 4, 8, 8]), &f32(&[8, 3, 1, 1])]).contains("4 channels"));
    assert!(refused(&conv(1, 0, 1, false), &[&f32(&[1, 3, 2, 2]), &f32(&[8, 3, 3, 3])]).contains("does not fit"));
}

#[test]
fn pooling_arithmetic_follows_torch() {
    let pool = |ceil_mode| {
        Op::MaxPool(MaxPool { kernel: vec![3, 3], stride: vec![2, 2], padding: vec![1], dilation: vec![1], ceil_mode })
    };
    assert_eq!(exact(&pool(false), &[&f32(&[2, 8, 32, 32])]), "f32[2,8,16,16], i64[2,8,16,16]");
    assert_eq!(exact(&pool(true), &[&f32(&[1, 1, 6, 6])]), "f32[1,1,4,4], i64[1,1,4,4]");
    assert_eq!(exact(&pool(false), &[&f32(&[1, 1, 6, 6])]), "f32[1,1,3,3], i64[1,1,3,3]");
    let wide = Op::AvgPool(AvgPool {
        kernel: vec![2],
        stride: vec![2],
        padding: vec![2],
        ceil_mode: false,
        count_include_pad: true,
        divisor_override: None,
    });
    assert!(refused(&wide, &[&f32(&[1, 4, 8])]).contains("at most half the kernel"));
}

#[test]
fn views_keep_the_element_count() {
    let view = |size: &[i64]| Op::View(View { size: size.iter().map(|&d| Dim::Static(d)).collect() });
    assert_eq!(exact(&view(&[4, -1]), &[&f32(&[2, 3, 4])]), "f32[4,6]");
    assert_eq!(refused(&view(&[5, 5]), &[&f32(&[2, 3, 4])]), "view of [2,3,4] (24 elements) as [5,5] (25 elements)");
    assert!(refused(&view(&[5, -1]), &[&f32(&[2, 3, 4])]).contains("does not divide"));
    assert!(refused(&view(&[-1, -1]), &[&f32(&[4])]).contains("more than one -1"));
    let huge = f32(&[1 << 40, 1 << 40]);
    assert!(refused(&view(&[-1]), &[&huge]).contains("more elements than fit"));
}

#[test]
fn slices_follow_their_bounds() {
    let slice = |start, end, step| Op::Slice(Slice { dim: 1, start: Dim::Static(start), end: Dim::Static(end), step });
    assert_eq!(exact(&slice(1, i64::MAX, 2), &[&f32(&[2, 10])]), "f32[2,5]");
    assert_eq!(exact(&slice(-3, -1, 1), &[&f32(&[2, 10])]), "f32[2,2]");
    assert_eq!(exact(&slice(8, 2, 1), &[&f32(&[2, 10])]), "f32[2,0]");
    assert_eq!(refused(&slice(0, 4, 0), &[&f32(&[2, 10])]), "slice step 0 must be positive");
    let s = Dim::Sym(SymExpr::sym("s0"));
    let sym = TensorType { dtype: DType::F32, dims: vec![s.clone()] };
    let whole = Op::Slice(Slice { dim: 0, start: Dim::Static(0), end: Dim::Static(i64::MAX), step: 1 });
    assert_eq!(exact(&whole, &[&sym]), "f32[s0]");
    let part = Op::Slice(Slice { dim: 0, start: Dim::Static(1), end: Dim::Static(i64::MAX), step: 1 });
    assert_eq!(exact(&part, &[&sym]), "f32[?]");
}

#[test]
fn shape_ops_check_their_dims() {
    assert_eq!(exact(&Op::Permute(Permute { dims: vec![2, 0, 1] }), &[&f32(&[2, 3, 4])]), "f32[4,2,3]");
    assert!(refused(&Op::Permute(Permute { dims: vec![0, 0, 1] }), &[&f32(&[2, 3, 4])]).contains("not a permutation"));
    assert_eq!(exact(&Op::Unsqueeze(Unsqueeze { dim: -1 }), &[&f32(&[2, 3])]), "f32[2,3,1]");
    assert_eq!(exact(&Op::Squeeze(Squeeze { dims: vec![] }), &[&f32(&[1, 3, 1])]), "f32[3]");
    assert_eq!(exact(&Op::Select(Select { dim: 0, index: -1 }), &[&f32(&[2, 3])]), "f32[3]");
    assert!(refused(&Op::Select(Select { dim: 0, index: 2 }), &[&f32(&[2, 3])]).contains("out of range"));
    let expand = Op::Expand(Expand { size: [4, -1, 3].map(Dim::Static).to_vec() });
    assert_eq!(exact(&expand, &[&f32(&[2, 1])]), "f32[4,2,3]");
    assert!(refused(&expand, &[&f32(&[2, 2])]).contains("cannot grow"));
    assert_eq!(exact(&Op::Cat(Cat { dim: -1 }), &[&f32(&[2, 3]), &t(DType::F16, &[2, 5]), &f32(&[0])]), "f32[2,8]");
    assert!(refused(&Op::Cat(Cat { dim: 0 }), &[&f32(&[2, 3]), &f32(&[2, 4])]).contains("differ outside dim 0"));
    assert_eq!(
        exact(&Op::Repeat(Repeat { repeats: vec![Dim::Static(2), Dim::Static(1), Dim::Static(3)] }), &[&f32(&[4, 5])]),
        "f32[2,4,15]"
    );
    assert_eq!(
        exact(&Op::Pad(Pad { pad: vec![1, 2, -1, 0], value: Scalar::Float(0.0) }), &[&f32(&[3, 4])]),
        "f32[2,7]"
    );
    let split = Op::SplitWithSizes(SplitWithSizes { sizes: vec![Dim::Static(2), Dim::Static(3)], dim: 0 });
    assert_eq!(exact(&split, &[&f32(&[5, 2])]), "f32[2,2], f32[3,2]");
    assert!(refused(&split, &[&f32(&[6, 2])]).contains("add up to 5"));
}

#[test]
fn reductions_drop_or_keep_their_dims() {
    let sum = |dims: Vec<i64>, keepdim| Op::Reduce(Reduce { op: ReduceOp::Sum, dims, keepdim, dtype: None });
    assert_eq!(exact(&sum(vec![-1], false), &[&f32(&[2, 3])]), "f32[2]");
    assert_eq!(exact(&sum(vec![0], true), &[&t(DType::Bool, &[2, 3])]), "i64[1,3]");
    assert_eq!(exact(&sum(vec![], false), &[&f32(&[2, 3])]), "f32[]");
    // A 0-d operand accepts dim 0 and -1 (PyTorch does), and stays 0-d.
    assert_eq!(exact(&sum(vec![0], false), &[&f32(&[])]), "f32[]");
    assert_eq!(exact(&sum(vec![-1], true), &[&f32(&[])]), "f32[]");
    assert!(refused(&sum(vec![2], false), &[&f32(&[2, 3])]).contains("out of range"));
    assert!(refused(&sum(vec![1, -1], false), &[&f32(&[2, 3])]).contains("more than once"));
    let argmax = Op::ArgReduce(ArgReduce { op: crate::ir::ArgReduceOp::Argmax, dim: Some(1), keepdim: false });
    assert_eq!(exact(&argmax, &[&f32(&[2, 3])]), "i64[2]");
    assert_eq!(
        exact(&Op::TopK(TopK { k: Dim::Static(2), dim: -1, largest: true }), &[&f32(&[4, 5])]),
        "f32[4,2], i64[4,2]"
    );
    assert!(refused(&Op::TopK(TopK { k: Dim::Static(6), dim: -1, largest: true }), &[&f32(&[4, 5])])
        .contains("out of range"));
    // A softmax declared f16 over f32 values is refused by the comparison.
    assert_eq!(exact(&Op::Softmax(Softmax { dim: -1, log: false, safe: false }), &[&f32(&[2, 3])]), "f32[2,3]");
}

#[test]
fn norms_state_their_normalized_value() {
    let ln = Op::LayerNorm(LayerNorm { normalized_rank: 1, eps: 1e-5, has_weight: true, has_bias: true });
    assert_eq!(exact(&ln, &[&f32(&[2, 4, 8]), &f32(&[8]), &f32(&[8])]), "f32[2,4,8], ?[2,4,1], ?[2,4,1]");
    let bn = Op::BatchNormInference(BatchNormInference { eps: 1e-5, has_weight: true, has_bias: true });
    let c = f32(&[8]);
    assert_eq!(exact(&bn, &[&f32(&[2, 8, 4, 4]), &c, &c, &c, &c]), "f32[2,8,4,4]");
    assert!(refused(&bn, &[&c, &c, &c, &c, &c]).contains("batch of channels"));
}

#[test]
fn gathers_and_scatters() {
    let i64_ = |dims: &[i64]| t(DType::I64, dims);
    // x[:, idx] keeps the indexed dim's place; x[idx, :, idx2] puts the index shape in front.
    let x = f32(&[2, 3, 4]);
    assert_eq!(exact(&Op::Index(Index { present: vec![false, true] }), &[&x, &i64_(&[5, 6])]), "f32[2,5,6,4]");
    assert_eq!(
        exact(&Op::Index(Index { present: vec![true, false, true] }), &[&x, &i64_(&[5]), &i64_(&[1])]),
        "f32[5,3]"
    );
    assert_eq!(exact(&Op::Index(Index { present: vec![true] }), &[&x, &t(DType::Bool, &[2])]), "f32[…]");
    assert_eq!(exact(&Op::IndexSelect(IndexSelect { dim: -1 }), &[&x, &i64_(&[7])]), "f32[2,3,7]");
    assert!(refused(&Op::IndexSelect(IndexSelect { dim: 0 }), &[&x, &f32(&[7])]).contains("integer indices"));
    assert_eq!(exact(&Op::Gather(Gather { dim: 1 }), &[&x, &i64_(&[2, 1, 4])]), "f32[2,1,4]");
    assert!(refused(&Op::Gather(Gather { dim: 1 }), &[&x, &i64_(&[2, 1])]).contains("differ in rank"));
    assert_eq!(exact(&Op::Embedding(Embedding), &[&f32(&[100, 8]), &i64_(&[2, 5])]), "f32[2,5,8]");
    let scatter = Op::SliceScatter(SliceScatter { dim: 1, start: Dim::Static(0), end: Dim::Static(2), step: 1 });
    assert_eq!(exact(&scatter, &[&x, &f32(&[2, 2, 4])]), "f32[2,3,4]");
    assert!(refused(&scatter, &[&x, &f32(&[2, 3, 4])]).contains("does not fill the slice"));
}

#[test]
fn constants_strided_views_and_backward_ops() {
    let arange = |start, end, step| Op::Arange(Arange { start, end, step });
    assert_eq!(exact(&arange(Scalar::Int(0), Scalar::Int(10), Scalar::Int(3)), &[]), "?[4]");
    assert_eq!(exact(&arange(Scalar::Int(5), Scalar::Int(0), Scalar::Int(-2)), &[]), "?[3]");
    assert_eq!(exact(&arange(Scalar::Float(0.0), Scalar::Float(1.0), Scalar::Float(0.3)), &[]), "?[4]");
    assert!(refused(&arange(Scalar::Int(0), Scalar::Int(4), Scalar::Int(0)), &[]).contains("step 0"));
    let strided = |size: Vec<i64>, stride: Vec<i64>, offset| Op::AsStrided(AsStrided { size, stride, offset });
    assert_eq!(exact(&strided(vec![3, 2], vec![1, 3], 0), &[&f32(&[2, 3])]), "f32[3,2]");
    assert!(refused(&strided(vec![3, 2], vec![1, 3], 1), &[&f32(&[2, 3])]).contains("reads element 6"));
    assert_eq!(exact(&Op::Diagonal(Diagonal { offset: 1, dim1: 0, dim2: 1 }), &[&f32(&[3, 4, 5])]), "f32[5,3]");
    let conv = Convolution {
        stride: vec![1],
        padding: vec![0],
        dilation: vec![1],
        transposed: false,
        output_padding: vec![0],
        groups: 1,
        has_bias: true,
    };
    let back = Op::ConvolutionBackward(ConvolutionBackward { forward: conv, mask: [false, true, true] });
    let (g, x, w) = (f32(&[2, 4, 6]), f32(&[2, 3, 8]), f32(&[4, 3, 3]));
    assert_eq!(exact(&back, &[&g, &x, &w]), "?[…], f32[4,3,3], f32[4]");
    assert_eq!(exact(&Op::SymSize(SymSize { dim: -1 }), &[&x]), "i64[]");
}

#[test]
fn mixture_of_experts_ops() {
    let offs = t(DType::I32, &[4]);
    assert_eq!(exact(&Op::GroupedMm(GroupedMm), &[&f32(&[32, 64]), &f32(&[4, 64, 16]), &offs]), "f32[32,16]");
    assert!(refused(&Op::GroupedMm(GroupedMm), &[&f32(&[32, 64]), &f32(&[4, 32, 16]), &offs]).contains("K or G differ"));
    assert!(refused(&Op::GroupedMm(GroupedMm), &[&f32(&[32, 64]), &f32(&[4, 64, 16]), &t(DType::I64, &[4])])
        .contains("i32 offsets"));
    let histc = |bins, min, max| Op::Histc(Histc { bins, min, max });
    assert_eq!(exact(&histc(4, 0.0, 3.0), &[&f32(&[32])]), "f32[4]");
    assert!(refused(&histc(4, 3.0, 3.0), &[&f32(&[32])]).contains("min < max"));
    // Integers count too (an MoE's expert ids, as transformers counts them on accelerators);
    // booleans are no numbers to bin.
    assert_eq!(exact(&histc(4, 0.0, 3.0), &[&t(DType::I32, &[32])]), "i32[4]");
    assert!(refused(&histc(4, 0.0, 3.0), &[&t(DType::Bool, &[32])]).contains("real numbers"));
}

/// A message never echoes a list of thousands: the first items, the last, and the count.
#[test]
fn long_lists_are_cut_short_in_messages() {
    let dims: Vec<i64> = (0..10_000).rev().collect();
    let x = f32(&[2, 3]);
    let e = refused(&Op::Permute(Permute { dims }), &[&x]);
    assert!(e.starts_with("[9999, 9998, 9997,") && e.contains(", …, 1, 0] (10000 items)"), "{e}");
    assert!(e.len() < 150, "{} characters: {e}", e.len());
    let wide = TensorType::new(DType::F32, &[2; 5000]);
    let e = refused(
        &Op::Binary(Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None }),
        &[&wide, &f32(&[2, 3])],
    );
    assert!(e.len() < 200, "{} characters: {e}", e.len());
}
