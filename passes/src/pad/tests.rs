//! Tests of the pad pass on small graphs.

use super::Pad;
use crate::ir::builder::Builder;
use crate::ir::ops::{Binary, Bmm, Cat, LayerNorm, Mm, Permute, Reduce, Slice, Softmax, View};
use crate::ir::{print, BinaryOp, DType, Op, Operand, ReduceOp, TensorType, UnaryOp};
use crate::pass::{Pass, PassCx};

fn f32(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

fn run(g: &mut crate::ir::Graph) -> PassCx {
    let mut cx = PassCx::default();
    Pad { multiple: Some(128) }.run(g, &mut cx).expect("runs");
    crate::verify(g).expect("verifies");
    cx
}

/// `mean(relu(x @ w1ᵀ) @ w2ᵀ * x2, -1)`: both matmuls padded, the chain between them stays
/// padded, the mean divides by the true width; `y * exp(y)` is re-zeroed before the mean
/// (`exp`'s padding is 1, not known zero).
#[test]
fn chains_stay_padded_and_means_use_true_sizes() {
    let mut b = Builder::new("t");
    let w1 = b.param("w1", "w1", f32(&[100, 64]));
    let w2 = b.param("w2", "w2", f32(&[70, 100]));
    let x = b.input("x", f32(&[16, 64]));
    let t1 = b.op("t1", Op::Permute(Permute { dims: vec![1, 0] }), &[w1], f32(&[64, 100]));
    let h = b.op("h", Op::Mm(Mm), &[x, t1], f32(&[16, 100]));
    let r = b.op("r", Op::Unary(UnaryOp::Relu), &[h], f32(&[16, 100]));
    let t2 = b.op("t2", Op::Permute(Permute { dims: vec![1, 0] }), &[w2], f32(&[100, 70]));
    let y = b.op("y", Op::Mm(Mm), &[r, t2], f32(&[16, 70]));
    let e = b.op("e", Op::Unary(UnaryOp::Exp), &[y], f32(&[16, 70]));
    let mul = Op::Binary(Binary { op: BinaryOp::Mul, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
    let z = b.op("z", mul, &[y, e], f32(&[16, 70]));
    let mean = Op::Reduce(Reduce { op: ReduceOp::Mean, dims: vec![-1], keepdim: true, dtype: None });
    let m = b.op("m", mean, &[z], f32(&[16, 1]));
    b.output(m);
    b.output(e);
    let mut g = b.finish();
    let cx = run(&mut g);
    assert_eq!(cx.padded.len(), 2);
    assert_eq!(cx.padded[1].extra_flops, 2 * 16 * (128 * 128 - 100 * 70));
    insta::assert_snapshot!(print(&g), @r#"
    graph t {
      %0 = input.param "w1" : f32[100,64]  # w1
      %1 = input.param "w2" : f32[70,100]  # w2
      %2 = input.user #0 : f32[16,64]  # x
      %3 = permute(%0) {dims=[1, 0]} : f32[64,100]  # t1
      %4 = permute(%1) {dims=[1, 0]} : f32[100,70]  # t2
      %5 = input.derived "w1@pad128x64" from pad(cast("w1"), dims=[100, 64], padded=[128, 64], blocks=[1, 1]) : f32[128,64]  # w1@pad128x64
      %6 = permute(%5) {dims=[1, 0]} : f32[64,128]  # t1.pad.1
      %7 = mm(%2, %6) : f32[16,128]  # h
      %8 = relu(%7) : f32[16,128]  # r
      %9 = input.derived "w2@pad128x128" from pad(cast("w2"), dims=[70, 100], padded=[128, 128], blocks=[1, 1]) : f32[128,128]  # w2@pad128x128
      %10 = permute(%9) {dims=[1, 0]} : f32[128,128]  # t2.pad.2
      %11 = mm(%8, %10) : f32[16,128]  # y
      %12 = exp(%11) : f32[16,128]  # e
      %13 = mul(%11, %12) : f32[16,128]  # z
      %14 = slice(%13) {dim=1, start=0, end=70, step=1} : f32[16,70]  # z.pad.3
      %15 = pad(%14) {pad=[0, 58, 0, 0], value=0.0} : f32[16,128]  # z.pad.3.pad.4
      %16 = reduce_sum(%15) {dims=[-1], keepdim=true, dtype=none} : f32[16,1]  # m
      %17 = div(%16, 70.0) : f32[16,1]  # m.pad.5
      %18 = slice(%12) {dim=1, start=0, end=70, step=1} : f32[16,70]  # e.pad.6
      return user[0] = %17
      return user[1] = %18
    }
    "#);
}

/// Attention with two heads of 64: the Q/K/V projection pads each head to 128 in the
/// weight, the heads split off padded, both `bmm`s run at 128 and the output projection
/// reads the merged heads padded — no `pad` node, one slice (the graph output).
#[test]
fn attention_heads_are_padded_one_by_one() {
    use crate::ir::Dim;
    let mut b = Builder::new("t");
    let wqkv = b.param("wqkv", "wqkv", f32(&[384, 64]));
    let wo = b.param("wo", "wo", f32(&[64, 128]));
    let x = b.input("x", f32(&[16, 64]));
    let t = b.op("t", Op::Permute(Permute { dims: vec![1, 0] }), &[wqkv], f32(&[64, 384]));
    let qkv = b.op("qkv", Op::Mm(Mm), &[x, t], f32(&[16, 384]));
    let mut heads = Vec::new();
    for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
        let (start, end) = (Dim::Static(128 * i as i64), Dim::Static(128 * (i as i64 + 1)));
        let s = b.op(name, Op::Slice(Slice { dim: 1, start, end, step: 1 }), &[qkv], f32(&[16, 128]));
        let size = [16, 2, 64].map(Dim::Static).to_vec();
        let v = b.op(&format!("{name}.view"), Op::View(View { size }), &[s], f32(&[16, 2, 64]));
        heads.push(b.op(
            &format!("{name}.heads"),
            Op::Permute(Permute { dims: vec![1, 0, 2] }),
            &[v],
            f32(&[2, 16, 64]),
        ));
    }
    let kt = b.op("kt", Op::Permute(Permute { dims: vec![0, 2, 1] }), &[heads[1]], f32(&[2, 64, 16]));
    let scores = b.op("scores", Op::Bmm(Bmm), &[heads[0], kt], f32(&[2, 16, 16]));
    let p = b.op("p", Op::Softmax(Softmax { dim: -1, log: false, safe: false }), &[scores], f32(&[2, 16, 16]));
    let o = b.op("o", Op::Bmm(Bmm), &[p, heads[2]], f32(&[2, 16, 64]));
    let merged = b.op("merged", Op::Permute(Permute { dims: vec![1, 0, 2] }), &[o], f32(&[16, 2, 64]));
    let flat = b.op("flat", Op::View(View { size: [16, 128].map(Dim::Static).to_vec() }), &[merged], f32(&[16, 128]));
    let to = b.op("to", Op::Permute(Permute { dims: vec![1, 0] }), &[wo], f32(&[128, 64]));
    let y = b.op("y", Op::Mm(Mm), &[flat, to], f32(&[16, 64]));
    b.output(y);
    let mut g = b.finish();
    let cx = run(&mut g);
    let text = print(&g);
    assert!(!text.contains(" = pad("), "no activation is padded: {text}");
    assert_eq!(text.matches(" slice(").count(), 4, "the q/k/v splits and the output: {text}");
    let wqkv = "pad(cast(\"wqkv\"), dims=[384, 64], padded=[768, 64], blocks=[6, 1]) : f32[768,64]";
    assert!(text.contains(wqkv), "{text}");
    let wo = "pad(cast(\"wo\"), dims=[64, 128], padded=[128, 256], blocks=[1, 2]) : f32[128,256]";
    assert!(text.contains(wo), "{text}");
    assert!(text.contains("bmm(") && text.contains(": f32[2,16,128]  # o"), "{text}");
    let roles: Vec<String> = cx
        .padded
        .iter()
        .map(|c| c.dims.iter().map(|d| format!("{}:{}→{}", d.role, d.size, d.padded)).collect::<Vec<_>>().join(","))
        .collect();
    assert_eq!(roles, ["n:384→768", "k:64→128", "n:64→128", "k:128→256,n:64→128"]);
}

/// A layer norm on a padded hidden size stays padded: its statistics are taken over the
/// 100 true positions (a 0/1 mask on the centred values), its weight and bias are
/// zero-padded, and the next matmul contracts the padded dim: the only slice is the output.
#[test]
fn layer_norm_keeps_the_padding() {
    let mut b = Builder::new("t");
    let w1 = b.param("w1", "w1", f32(&[100, 64]));
    let gamma = b.param("gamma", "gamma", f32(&[100]));
    let beta = b.param("beta", "beta", f32(&[100]));
    let w2 = b.param("w2", "w2", f32(&[64, 100]));
    let x = b.input("x", f32(&[16, 64]));
    let t1 = b.op("t1", Op::Permute(Permute { dims: vec![1, 0] }), &[w1], f32(&[64, 100]));
    let h = b.op("h", Op::Mm(Mm), &[x, t1], f32(&[16, 100]));
    let ln = Op::LayerNorm(LayerNorm { normalized_rank: 1, eps: 1e-5, has_weight: true, has_bias: true });
    let outs = [f32(&[16, 100]), f32(&[16, 1]), f32(&[16, 1])];
    let ln = b.graph_mut().add_op(crate::ir::Node::new("ln", ln, outs), &[h, gamma, beta]);
    let normalized = crate::ir::ValueRef { node: ln, slot: 0 };
    let t2 = b.op("t2", Op::Permute(Permute { dims: vec![1, 0] }), &[w2], f32(&[100, 64]));
    let y = b.op("y", Op::Mm(Mm), &[normalized, t2], f32(&[16, 64]));
    b.output(y);
    let mut g = b.finish();
    let cx = run(&mut g);
    let text = print(&g);
    assert!(!text.contains("layer_norm("), "{text}");
    assert_eq!(text.matches(" slice(").count(), 1, "only the graph output: {text}");
    assert!(text.contains("lt(") && text.contains(": f32[128]  # gamma@pad128"), "{text}");
    assert_eq!(text.matches("div(").count(), 2, "mean and variance divide by 100: {text}");
    assert_eq!(cx.padded.len(), 2, "both matmuls");
}

/// Softmax and `amax` over a padded dim see -inf in the padding; the softmax's padding
/// comes out zero, so the next matmul contracts it padded. `cat` reads the true value.
#[test]
fn softmax_and_max_over_padding_see_their_identity() {
    let mut b = Builder::new("t");
    let w = b.param("w", "w", f32(&[100, 64]));
    let w2 = b.param("w2", "w2", f32(&[64, 100]));
    let x = b.input("x", f32(&[4, 64]));
    let t = b.op("t", Op::Permute(Permute { dims: vec![1, 0] }), &[w], f32(&[64, 100]));
    let y = b.op("y", Op::Mm(Mm), &[x, t], f32(&[4, 100]));
    let s = b.op("s", Op::Softmax(Softmax { dim: -1, log: false, safe: false }), &[y], f32(&[4, 100]));
    let t2 = b.op("t2", Op::Permute(Permute { dims: vec![1, 0] }), &[w2], f32(&[100, 64]));
    let z = b.op("z", Op::Mm(Mm), &[s, t2], f32(&[4, 64]));
    let amax = Op::Reduce(Reduce { op: ReduceOp::Max, dims: vec![-1], keepdim: false, dtype: None });
    let m = b.op("m", amax, &[y], f32(&[4]));
    let c = b.op("c", Op::Cat(Cat { dim: 0 }), &[y, y], f32(&[8, 100]));
    for v in [z, m, c] {
        b.output(v);
    }
    let mut g = b.finish();
    run(&mut g);
    let text = print(&g);
    assert!(text.contains("softmax(%") && text.contains("} : f32[4,128]  # s"), "{text}");
    assert!(text.contains("mm(%") && text.contains(": f32[4,128]  # z"), "s feeds z padded: {text}");
    assert_eq!(text.matches("where(").count(), 2, "-inf in the padding for s and m: {text}");
    assert!(text.contains("reduce_max(") && text.contains(": f32[4]  # m"), "{text}");
    assert!(text.contains(": f32[4,100]  # y.pad.") && text.contains("cat("), "cat reads sliced: {text}");
}
