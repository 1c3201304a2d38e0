//! Tests of the IR parser: round trips over the import snapshots and every op, and errors.

use crate::ir::ops::{Literal, Mm, Unsupported};
use std::collections::BTreeSet;
use std::path::Path;

use super::*;
use crate::ir::builder::Builder;
use crate::ir::{
    print, Bounds, Composite, DType, Dim, Graph, InputKind, Node, Op, OutputKind, Precision, Scalar, SymExpr,
    TensorType, ValueRef, WeightRecipe,
};

/// The printed IR of an insta snapshot: the text after its `---` header.
fn snapshot_ir(snap: &str) -> &str {
    let body = snap.strip_prefix("---\n").and_then(|s| s.split_once("\n---\n"));
    body.map(|(_, ir)| ir).expect("an insta header")
}

fn snapshots() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots/import");
    let mut paths: Vec<_> =
        std::fs::read_dir(&dir).expect("snapshots/import").map(|e| e.expect("entry").path()).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "snap"));
    paths.sort();
    let read = |p: &Path| snapshot_ir(&std::fs::read_to_string(p).expect("readable")).to_string();
    paths.iter().map(|p| (p.display().to_string(), read(p))).collect()
}

#[test]
fn every_import_snapshot_round_trips_and_verifies() {
    let all = snapshots();
    assert!(all.len() >= 19, "found {} snapshots", all.len());
    for (path, ir) in all {
        let graph = parse(&ir).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(print(&graph), ir, "{path}");
        crate::verify(&graph).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

fn sym(s: &str) -> SymExpr {
    SymExpr::sym(s)
}

fn int(v: i64) -> SymExpr {
    SymExpr::Int(v)
}

/// Expressions that exercise every precedence rule of `SymExpr`'s printer.
fn nested_dims() -> Vec<Dim> {
    let b = Box::new;
    let add = |xs: Vec<SymExpr>| SymExpr::Add(xs);
    let mul = |xs: Vec<SymExpr>| SymExpr::Mul(xs);
    let exprs = vec![
        mul(vec![int(4), add(vec![sym("s1"), int(1)])]),
        add(vec![SymExpr::FloorDiv(b(sym("s0")), b(int(2))), int(-3)]),
        add(vec![mul(vec![int(-2), sym("s0")]), sym("s1"), int(i64::MIN)]),
        add(vec![add(vec![sym("s0"), sym("s1")]), int(1)]),
        mul(vec![mul(vec![int(2), sym("s0")]), sym("s1")]),
        SymExpr::Mod(b(add(vec![sym("s0"), int(1)])), b(mul(vec![int(2), sym("s1")]))),
        SymExpr::FloorDiv(b(SymExpr::FloorDiv(b(mul(vec![int(2), sym("s0")])), b(int(3)))), b(int(5))),
        SymExpr::Pow(b(int(-2)), b(SymExpr::Pow(b(sym("s0")), b(int(2))))),
        SymExpr::Max(vec![sym("s0"), SymExpr::CeilDiv(b(sym("s1")), b(int(2))), SymExpr::Min(vec![])]),
        SymExpr::Min(vec![add(vec![sym("s0"), int(-1)]), mul(vec![SymExpr::Max(vec![sym("s1"), int(4)]), int(3)])]),
    ];
    exprs.into_iter().map(Dim::Sym).collect()
}

/// A graph with every input kind, every recipe, every output kind and odd strings.
fn odd_graph() -> Graph {
    let mut b = Builder::new("odd {graph}");
    let g = b.graph_mut();
    g.add_symbol("s0", Bounds { min: Some(2), max: Some(512) });
    g.add_symbol("s1", Bounds { min: None, max: Some(8) });
    g.add_symbol("s2", Bounds { min: None, max: None });
    let x = b.input("x", TensorType { dtype: DType::F32, dims: nested_dims() });
    let param = Op::Input(InputKind::Parameter { fqn: "a \"quoted\\\" fqn\n".into() });
    let w = b.graph_mut().add_weight_input(Node::new("w", param, [TensorType::new(DType::BF16, &[4])]));
    let w = ValueRef { node: w, slot: 0 };
    let weight = |s: &str| s.to_string();
    let recipes = [
        WeightRecipe::Cast { weight: weight("w") },
        WeightRecipe::ConcatRows { weights: vec![weight("q"), weight("k"), weight("v")] },
        WeightRecipe::ConcatRows { weights: vec![] },
        WeightRecipe::BnFoldedWeight { weight: weight("c.w"), gamma: None, var: weight("bn.v"), eps: 1e-5 },
        WeightRecipe::BnFoldedBias {
            bias: Some(weight("c.b")),
            gamma: Some(weight("bn.w")),
            beta: None,
            mean: weight("bn.m"),
            var: weight("bn.v"),
            eps: 0.001,
        },
        WeightRecipe::Narrow {
            source: Box::new(WeightRecipe::Cast { weight: weight("c_attn.w") }),
            dims: vec![64, 192],
            dim: 1,
            start: 128,
            len: 64,
        },
        WeightRecipe::Permute {
            source: Box::new(WeightRecipe::Cast { weight: weight("c.w") }),
            dims: vec![8, 3, 3, 3],
            perm: vec![2, 3, 1, 0],
        },
        WeightRecipe::Pad {
            source: Box::new(WeightRecipe::Pad {
                source: Box::new(WeightRecipe::Cast { weight: weight("w\u{1b}") }),
                dims: vec![10, 4],
                padded: vec![16, 4],
                blocks: vec![],
            }),
            dims: vec![16, 4],
            padded: vec![128, 4],
            blocks: vec![2, 1],
        },
    ];
    let graph = b.graph_mut();
    for (i, recipe) in recipes.into_iter().enumerate() {
        let op = Op::Input(InputKind::Derived { fqn: format!("d{i}"), recipe });
        graph.add_weight_input(Node::new(format!("derived_{i}"), op, [TensorType::new(DType::F32, &[4])]));
    }
    let inputs = [
        InputKind::Buffer { fqn: "bn.m".into(), persistent: true },
        InputKind::Buffer { fqn: "scale".into(), persistent: false },
        InputKind::Constant { fqn: "lifted_tensor_0".into() },
        InputKind::RngSeed,
        InputKind::Size { symbol: "s0".into() },
    ];
    for (i, kind) in inputs.into_iter().enumerate() {
        let ty = TensorType::new(DType::I64, &[]);
        let node = Node::new(format!("in_{i}"), Op::Input(kind), [ty]);
        if matches!(&node.op, Op::Input(k) if k.is_weight()) {
            graph.add_weight_input(node);
        } else {
            graph.add_input(node);
        }
    }
    let floats = [0.0, -0.0, 0.1, 1e-300, 5e-324, f64::MAX, f64::MIN_POSITIVE, 1e16, -1.5e-7];
    let nans = [f64::NAN, -f64::NAN, f64::from_bits(0x7ff0_0000_0000_0001), f64::from_bits(0xfff8_0000_dead_beef)];
    let mut values: Vec<Scalar> =
        floats.iter().chain(&nans).chain(&[f64::INFINITY, f64::NEG_INFINITY]).map(|&f| Scalar::Float(f)).collect();
    values.extend((-20..20).map(Scalar::Int));
    values.extend([Scalar::Bool(true), Scalar::Bool(false), Scalar::Int(i64::MIN), Scalar::Int(i64::MAX)]);
    let n = values.len() as i64;
    let lit = b.op("lit", Op::Literal(Literal { values }), &[], TensorType::new(DType::F32, &[n]));
    let unsupported = Op::Unsupported(Unsupported {
        target: "aten.odd<op>".into(),
        reason: Some("shape \"depends\"\non data\\".into()),
    });
    let u = b.op("\"quoted name", unsupported, &[x, w], TensorType::new(DType::F32, &[2]));
    let plain = Op::Unsupported(Unsupported { target: "aten.nonzero.default".into(), reason: None });
    let v = b.op("line\nbreak", plain, &[u], TensorType::new(DType::I64, &[2]));
    let m = b.op("mm", Op::Mm(Mm), &[u, u], TensorType::new(DType::F32, &[2]));
    let graph = b.graph_mut();
    graph.node_mut(m.node).precision = Some(Precision::Highest);
    graph.node_mut(m.node).composite = Some(Composite { name: crate::ir::SDPA, instance: 3 });
    graph.set_mesh(Some(crate::ir::Mesh::parse("dp=2,tp_1=4").expect("a mesh")));
    graph.node_mut(m.node).sharding =
        Some(crate::ir::Sharding { dims: vec![vec!["dp".into(), "tp_1".into()]], open: vec![true] });
    graph.node_mut(lit.node).sharding = Some(crate::ir::Sharding::replicated(1));
    let kinds = [
        OutputKind::User { index: 0 },
        OutputKind::BufferMutation { fqn: "bn.m".into() },
        OutputKind::ParameterMutation { fqn: "w\"".into() },
        OutputKind::UserInputMutation { input: "x".into() },
        OutputKind::Loss,
        OutputKind::GradientToParameter { fqn: "w".into() },
        OutputKind::GradientToUserInput { input: "x\t".into() },
    ];
    for (kind, value) in kinds.into_iter().zip([lit, u, v, m, lit, u, v]) {
        graph.add_output(value, kind);
    }
    b.finish()
}

/// Everything a graph holds, in topological order, as text (`Debug` tells -0.0 from 0.0).
fn contents(g: &Graph) -> String {
    let order = g.topo_order().expect("acyclic");
    let nodes: Vec<&Node> = order.iter().map(|&id| g.node(id)).collect();
    let inputs: Vec<&str> = g.graph_inputs().iter().map(|&id| g.node(id).name.as_str()).collect();
    let position = |v: &ValueRef| order.iter().position(|&id| id == v.node);
    let outputs: Vec<_> = g.outputs().iter().map(|o| (position(&o.value), o.value.slot, &o.kind)).collect();
    format!("{:?}\n{nodes:#?}\n{inputs:?}\n{outputs:?}\n{:?}\n{:?}", g.name, g.symbols(), g.mesh())
}

#[test]
fn every_input_recipe_output_and_odd_string_round_trips() {
    let g = odd_graph();
    let text = print(&g);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print(&back), text);
    assert_eq!(contents(&back), contents(&g));
    assert!(text.contains("(2*s0)*s1"), "{text}");
    assert!(text.contains(r#"unsupported<"aten.odd<op>">(%0, %1) {reason="shape \"depends\"\non data\\"}"#), "{text}");
    let recipe = r#"from pad(pad(cast("w\u{1b}"), dims=[10, 4], padded=[16, 4]), dims=[16, 4], padded=[128, 4], "#;
    assert!(text.contains(recipe) && text.contains("blocks=[2, 1]) : f32[4]"), "{text}");
}

#[test]
fn literals_keep_every_value_bit_for_bit() {
    let literal = |g: &Graph| -> Vec<Scalar> {
        let ops = g.node_ids().map(|id| g.node(id).op.clone());
        ops.filter_map(|op| if let Op::Literal(Literal { values }) = op { Some(values) } else { None })
            .next()
            .expect("a literal")
    };
    let g = odd_graph();
    let text = print(&g);
    let (got, want) = (literal(&parse(&text).expect("parses")), literal(&g));
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        match (a, b) {
            (Scalar::Float(a), Scalar::Float(b)) => assert_eq!(a.to_bits(), b.to_bits(), "{a} vs {b}"),
            _ => assert_eq!(a, b),
        }
    }
}

fn refused(text: &str) -> ParseError {
    parse(text).expect_err("refused")
}

/// A one-input graph with `line` as its third line.
fn with_line(line: &str) -> String {
    format!("graph g {{\n  %0 = input.user #0 : f32[2]  # x\n{line}\n}}\n")
}

#[test]
fn errors_name_the_line_and_what_was_expected() {
    assert_eq!(refused(""), ParseError { line: 1, message: "expected `graph NAME {`, found an empty text".into() });
    assert_eq!(refused("hello").to_string(), "line 1: expected `graph `, found `hello`");
    let cases = [
        ("  %1 = relu(%5) : f32[2]  # r", "`%5` is not defined by an earlier line"),
        ("  %1 = relu(%1) : f32[2]  # r", "`%1` is not defined by an earlier line"),
        ("  %1 = frobnicate(%0) : f32[2]  # r", "unknown op `frobnicate`"),
        ("  %1 = relu(%0) : q32[2]  # r", "expected a dtype, found `q32[2]  # r`"),
        ("  %1 = relu(%0) : f32[2  # r", "expected `]`, found `  # r`"),
        ("  %1, %2 = relu(%0) : f32[2]  # r", "expected as many types as results (2), found 1"),
        ("  %0 = relu(%0) : f32[2]  # r", "`%0` is defined twice"),
        ("  %1 = add(%0) : f32[2]  # r", "`add` takes 2 operands, found 1"),
        ("  %1 = relu(2) : f32[2]  # r", "operand 0 of `relu` is the scalar `2`, not a value"),
        ("  %1 = softmax(%0) {dim=-1} : f32[2]  # r", "expected `, log=`, found `} : f32[2]  # r`"),
        ("  %1 = copy(%0) {precision=low} : f32[2]  # r", "unknown precision `low`"),
        ("  %1 = copy(%0) {composite=my.op#0} : f32[2]  # r", "unknown composite `my.op`"),
        ("  %1 = input.param \"w : f32[2]  # r", "unterminated string"),
        ("  %1 = input.param \"w\\q\" : f32[2]  # r", "unknown escape in a string"),
        ("  %1 = input.derived \"d\" from frob(\"w\") : f32[2]  # r", "unknown weight recipe `frob`"),
        ("  %1 = relu(%0) : f32[ceildiv(s0)]  # r", "ceildiv takes 2 arguments, found 1"),
        ("  return user[0] = %9", "`%9` is not defined by an earlier line"),
        ("  return everything = %0", "unknown output kind `everything`"),
        ("  sym s0 in [1 2]", "expected `, `, found ` 2]`"),
    ];
    for (line, message) in cases {
        assert_eq!(refused(&with_line(line)), ParseError { line: 3, message: message.into() }, "{line}");
    }
    assert_eq!(refused("graph g {\n").line, 2);
    assert_eq!(refused("graph g {\n}\n}\n").message, "expected nothing after the `}` of line 2");
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    for depth in [65, 100_000] {
        let dim = format!("{}s0{}", "(".repeat(depth), ")".repeat(depth));
        let err = refused(&with_line(&format!("  %1 = relu(%0) : f32[{dim}]  # r")));
        assert_eq!(err, ParseError { line: 3, message: "the expression nests deeper than 64 levels".into() });
        let recipe = format!("{}cast(\"w\"){}", "pad(".repeat(depth), ", dims=[1], padded=[1])".repeat(depth));
        let err = refused(&with_line(&format!("  %1 = input.derived \"d\" from {recipe} : f32[1]  # r")));
        assert_eq!(err.message, "the recipe nests deeper than 64 levels");
    }
    let dim = format!("{}s0{}", "(".repeat(63), ")".repeat(63));
    assert!(parse(&with_line(&format!("  %1 = relu(%0) : f32[{dim}]  # r"))).is_ok());
}

/// `depth` maps nested in one another, the innermost returning its input.
fn nested_maps(depth: usize) -> String {
    let mut text = String::from("graph r {\n  %0 = input.user #0 : f32[2]  # x\n  return user[0] = %0\n}\n");
    for _ in 0..depth {
        let inner: String = text.lines().map(|l| format!("    {l}\n")).collect();
        text = format!(
            "graph r {{\n  %0 = input.user #0 : f32[2,2]  # x\n  %1 = scan(%0) {{carried=0, scanned=1}} : f32[2,2]  # m\n{inner}  return user[0] = %1\n}}\n"
        );
    }
    text
}

#[test]
fn regions_nest_at_most_sixteen_deep() {
    assert!(parse(&nested_maps(16)).is_ok());
    let err = parse(&nested_maps(17)).expect_err("too deep");
    assert!(err.message.contains("regions nest more than 16 deep"), "{err}");
    // Far deeper text is refused the same way, without overflowing the stack.
    assert!(parse(&nested_maps(300)).is_err());
}

#[test]
fn damaged_text_is_refused_without_panicking() {
    let (_, ir) = snapshots().into_iter().find(|(p, _)| p.ends_with("ir@edge_cases.pt2.snap")).expect("edge_cases");
    for (i, _) in ir.char_indices() {
        let _ = parse(&ir[..i]);
    }
    for line in EVERY_OP.lines() {
        for (i, c) in line.char_indices() {
            let _ = parse(&with_line(&format!("{}{}", &line[..i], &line[i + c.len_utf8()..])));
        }
    }
}

#[test]
fn scalars_read_back_bit_for_bit() {
    let floats = [0.0, -0.0, 1.0, 0.1, 1e-5, 1e16, 1e300, 5e-324, f64::MAX, f64::MIN, f64::INFINITY, f64::NEG_INFINITY];
    let nans = [f64::NAN, -f64::NAN, f64::from_bits(0x7ff0_0000_0000_0001), f64::from_bits(0xfff8_0000_0000_0042)];
    for x in floats.into_iter().chain(nans) {
        let text = Scalar::Float(x).to_string();
        let mut c = Cursor { rest: &text };
        let back = c.float().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!((back.to_bits(), c.rest), (x.to_bits(), ""), "{text}");
    }
    assert_eq!(Scalar::Float(-f64::NAN).to_string(), "-nan");
    assert_eq!(Scalar::Float(f64::from_bits(0x7ff0_0000_0000_0001)).to_string(), "nan(0x7ff0000000000001)");
    assert!(Cursor { rest: "nan(0x1)" }.scalar().is_err(), "the bits of a number, not a NaN");
}

/// One line per arm of the printer's `attributes()`, plus the node attributes.
const EVERY_OP: &str = r#"graph ops {
  sym s0 in [1, ?]
  %0 = input.user #0 : f32[2]  # x
  %1 = abs(%0) : f32[2]  # a1
  %2 = add(%0, %1) {alpha=2} : f32[2]  # a2
  %3 = sub(1.5, %0) : f32[2]  # a3
  %4 = where(%0, 0.0, %1) : f32[2]  # a4
  %5 = clamp(%0) {min=none, max=6} : f32[2]  # a5
  %6 = clamp_tensor(%0, %1) {min=true, max=false} : f32[2]  # a6
  %7 = elu(%0) {alpha=1.0, scale=1.0507, input_scale=2.0} : f32[2]  # a7
  %8 = leaky_relu(%0) {slope=0.01} : f32[2]  # a8
  %9 = mm(%0, %0) : f32[2]  # a9
  %10 = bmm(%0, %0) : f32[2]  # a10
  %11 = addmm(%0, %0, %0) {beta=1, alpha=0.5} : f32[2]  # a11
  %12 = grouped_mm(%0, %0, %0) : f32[2]  # a12
  %13 = histc(%0) {bins=10, min=0.0, max=1.0} : f32[10]  # a13
  %14 = convolution(%0, %0) {stride=[1, 2], padding=[0, 1], dilation=[2, 1], transposed=true, output_padding=[1, 0], groups=2, bias=false} : f32[2]  # a14
  %15, %16 = max_pool(%0) {kernel=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 2], ceil_mode=true} : f32[2], i64[2]  # a15
  %17 = avg_pool(%0) {kernel=[3], stride=[2], padding=[1], ceil_mode=false, count_include_pad=true, divisor=none} : f32[2]  # a16
  %18 = avg_pool(%0) {kernel=[2], stride=[2], padding=[0], ceil_mode=false, count_include_pad=false, divisor=3} : f32[2]  # a17
  %19 = adaptive_avg_pool(%0) {spatial=2} : f32[2]  # a18
  %20 = upsample(%0) {mode=bilinear, align_corners=false, scales=[2.0, 2.5]} : f32[2]  # a19
  %21 = upsample(%0) {mode=nearest, align_corners=true, scales=none} : f32[2]  # a20
  %22, %23, %24 = group_norm(%0, %0, %0) {groups=2, eps=1e-5, weight=true, bias=false} : f32[2], f32[2], f32[2]  # a21
  %25 = batch_norm_training(%0) {eps=1e-5, weight=true, bias=false, running_stats=true, momentum=0.1} : f32[2]  # a22
  %26 = batch_norm_training(%0) {eps=1e-5, weight=false, bias=false, running_stats=false, momentum=none} : f32[2]  # a23
  %27 = batch_norm_inference(%0) {eps=0.001, weight=true, bias=false} : f32[2]  # a24
  %28 = layer_norm(%0) {normalized_rank=1, eps=1e-5, weight=true, bias=false} : f32[2]  # a25
  %29 = softmax(%0) {dim=-1, log=false} : f32[2]  # a26
  %30 = softmax(%0) {dim=-1, log=true, safe=true} : f32[2]  # a27
  %31 = reduce_prod(%0) {dims=[], keepdim=false, dtype=f64} : f64[]  # a28
  %32 = argmax(%0) {dim=none, keepdim=false} : i64[]  # a29
  %33 = argmin(%0) {dim=0, keepdim=true} : i64[1]  # a30
  %34 = var(%0) {dims=[0], correction=1.0, keepdim=false} : f32[]  # a31
  %35, %36 = extremum_dim(%0) {max=true, dim=0, keepdim=false} : f32[], i64[]  # a32
  %37, %38 = sort(%0) {dim=-1, descending=true, stable=false} : f32[2], i64[2]  # a33
  %39, %40 = top_k(%0) {k=1, dim=-1, largest=false} : f32[1], i64[1]  # a34
  %41 = select(%0) {dim=0, index=1} : f32[]  # a35
  %42 = diagonal(%0) {offset=-1, dim1=0, dim2=1} : f32[2]  # a36
  %43 = flip(%0) {dims=[0]} : f32[2]  # a37
  %44 = repeat(%0) {repeats=[2]} : f32[4]  # a38
  %45 = pad(%0) {pad=[1, 1], value=-inf} : f32[4]  # a39
  %46 = pad_mode(%0) {pad=[1, 1], mode=reflect} : f32[4]  # a40
  %47 = pad_mode(%0) {pad=[1, 1], mode=replicate} : f32[4]  # a41
  %48 = copy_from(%0, %0) : f32[2]  # a42
  %49 = masked_scatter(%0, %0, %0) : f32[2]  # a43
  %50 = adaptive_avg_pool_backward(%0, %0) : f32[2]  # a44
  %51 = max_pool_backward(%0, %0, %16) {spatial=2} : f32[2]  # a45
  %52 = avg_pool_backward(%0, %0) {kernel=[2, 3], stride=[1, 2], padding=[1, 0], ceil_mode=true, count_include_pad=false, divisor=4} : f32[2]  # a46
  %53, %54, %55 = convolution_backward(%0, %0, %0) {stride=[2], padding=[0], dilation=[1], transposed=false, output_padding=[3], groups=1, bias=true, mask=[true, true, false]} : f32[2], f32[2], f32[2]  # a47
  %56, %57, %58 = group_norm_backward(%0, %0, %0, %0) {groups=2, weight=false, mask=[true, false, false]} : f32[2], f32[2], f32[2]  # a48
  %59, %60, %61 = layer_norm_backward(%0, %0, %0, %0, %0) {normalized_rank=1, weight=true, mask=[true, true, true]} : f32[2], f32[2], f32[2]  # a49
  %62 = as_strided(%0) {size=[2, 1], stride=[1, 3], offset=0} : f32[2,1]  # a50
  %63 = cdist(%0, %0) {p=2.0} : f32[2]  # a51
  %64 = pdist(%0) {p=inf} : f32[1]  # a52
  %65 = scatter(%0, %0, %0) {dim=0, reduce=amax, include_self=false, value=none} : f32[2]  # a53
  %66 = scatter(%0, %0) {dim=0, reduce=replace, include_self=true, value=1.5} : f32[2]  # a54
  %67 = index_put(%0, %0, %0) {indices=[:, idx], accumulate=true} : f32[2]  # a55
  %68 = slice_scatter(%0, %0) {dim=0, start=0, end=end, step=1} : f32[2]  # a56
  %69 = select_scatter(%0, %0) {dim=0, index=-1} : f32[2]  # a57
  %70 = embedding_backward(%0, %0) {num_weights=10, padding_idx=-1, scale_grad_by_freq=true} : f32[10,2]  # a58
  %71, %72, %73, %74 = embedding_bag(%0, %0, %0) {mode=max, per_sample_weights=false, include_last_offset=true, padding_idx=none} : f32[2], i64[2], i64[2], i64[2]  # a59
  %75 = embedding_bag(%0, %0, %0, %0) {mode=sum, per_sample_weights=true, include_last_offset=false, padding_idx=3} : f32[2]  # a60
  %76 = col2im(%0) {output_size=[4, 4], kernel=[2, 2], dilation=[1, 1], padding=[0, 0], stride=[3, 1]} : f32[1,1,4,4]  # a61
  %77 = grid_sampler(%0, %0) {mode=bicubic, padding=reflection, align_corners=true} : f32[2]  # a62
  %78 = fft(%0) {dims=[-1], normalization=2, inverse=false, onesided=true} : c64[2]  # a63
  %79 = input.rng_seed rng_seed : u64[2]  # seed
  %80 = rand(%79) {normal=true} : f32[2]  # a64
  %81 = rand_perm(%79) : i64[4]  # a65
  %82, %83 = dropout(%0, %79) {p=0.5, train=true} : f32[2], bool[2]  # a66
  %84 = cumsum(%0) {dim=0, dtype=none} : f32[2]  # a67
  %85 = logcumsumexp(%0) {dim=0, dtype=f32} : f32[2]  # a68
  %86 = view(%0) {size=[2, -1]} : f32[2,1]  # a69
  %87 = expand(%0) {size=[s0, 2*s0 + 1]} : f32[s0,2*s0 + 1]  # a70
  %88 = permute(%0) {dims=[1, 0]} : f32[2]  # a71
  %89 = unsqueeze(%0) {dim=0} : f32[1,2]  # a72
  %90 = index_select(%0, %0) {dim=0} : f32[2]  # a73
  %91 = gather(%0, %0) {dim=1} : f32[2]  # a74
  %92 = cat(%0, %0, %0) {dim=0} : f32[6]  # a75
  %93 = sym_size(%0) {dim=0} : i64[]  # a76
  %94 = squeeze(%0) {dims=[]} : f32[2]  # a77
  %95 = slice(%0) {dim=0, start=1, end=s0 - 1, step=2} : f32[1]  # a78
  %96 = slice(%0) {dim=0, start=0, end=end, step=1} : f32[2]  # a79
  %97, %98 = split_with_sizes(%0) {sizes=[1, s0 // 2], dim=0} : f32[1], f32[s0 // 2]  # a80
  %99 = index(%0, %0) {indices=[idx, :]} : f32[2]  # a81
  %100 = arange() {start=0, end=10.5, step=0.5} : f32[21]  # a82
  %101 = arange_sym() {start=0, end=s0, step=1} : i64[s0]  # a83
  %102 = full() {size=[2, s0], value=false} : bool[2,s0]  # a84
  %103 = literal() {values=[1, 2.5, true, -0.0, nan]} : f32[5]  # a85
  %104 = full_like(%0) {value=1} : f32[2]  # a86
  %105 = scalar_tensor() {value=-nan} : f32[]  # a87
  %106 = convert(%0) : f16[2]  # a88
  assert_metadata(%0) {dtype=none}  # a89
  %107 = sym_int() {value=max(s0, 4)} : i64[]  # a90
  %108 = unsupported<aten.nonzero.default>(%0) : i64[2]  # a91
  %109 = unsupported<aten.unique>(%0, %1) {reason="data-dependent \"shape\""} : f32[2]  # a92
  %110 = mm(%0, %0) {precision=highest, composite=torchtpu.sdpa#0} : f32[2]  # a93
  %111 = relu(%0) {precision=high} : f32[2]  # a94
  %112 = embedding(%0, %0) : f32[2]  # a95
  %113 = copy(%0) : f32[2]  # a96
  %114 = upsample_nearest_backward(%0) {input_size=[1, 2, s0, 3], scales=[2.5, 0.0]} : f32[1,2,s0,3]  # a97
  %115 = complex(%0, %0) : c64[2]  # a98
  %116 = polar(%0, %0) : c64[2]  # a99
  %117 = view_as_real(%115) : f32[2,2]  # a100
  %118 = view_as_complex(%117) : c64[2]  # a101
  %119 = conj(%118) : c64[2]  # a102
  %120 = angle(%119) : f32[2]  # a103
  %121 = nonzero(%0) {size=s0} : i64[s0,1]  # a107
  %122 = item(%93) {size=s0} : i64[]  # a108
  %123, %124 = nms_keep(%28, %0) {iou_threshold=0.5} : bool[2], i64[2]  # a109
  %125 = cond(%0, %0) : f32[2]  # a104
    graph then {
      %0 = input.user #0 : f32[2]  # x
      %1 = neg(%0) : f32[2]  # n
      return user[0] = %1
    }
    graph else {
      %0 = input.user #0 : f32[2]  # x
      return user[0] = %0
    }
  %126 = while_loop(%0, %1) {carried=1} : f32[2]  # a105
    graph cond {
      sym s0 in [1, ?]
      %0 = input.user #0 : f32[2]  # x
      %1 = input.user #1 : f32[2]  # y
      %2 = scan(%0, %1) {carried=0, scanned=1} : f32[2]  # inner
        graph body {
          %0 = input.user #0 : f32[]  # x
          return user[0] = %0
        }
      %3 = reduce_any(%2) {dims=[], keepdim=false, dtype=none} : bool[]  # any
      return user[0] = %3
    }
    graph body {
      %0 = input.user #0 : f32[2]  # x
      %1 = input.user #1 : f32[2]  # y
      return user[0] = %0
    }
  %127, %128 = scan(%0, %0) {carried=1, scanned=1} : f32[2], f32[2]  # a106
    graph body {
      %0 = input.user #0 : f32[2]  # c
      %1 = input.user #1 : f32[]  # x
      return user[0] = %0
      return user[1] = %1
    }
  %129 = after(%0, %1) : f32[2]  # a107
  return user[0] = %1
}
"#;

#[test]
fn every_op_the_printer_knows_round_trips() {
    let g = parse(EVERY_OP).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print(&g), EVERY_OP);
}

/// The variants of `Op`, read from the `ops!` list that declares them (one `Variant(Type),` a
/// line).
fn op_variants() -> BTreeSet<String> {
    let source = include_str!("../ops/mod.rs");
    let list = source.split_once("\nops! {").expect("the `ops!` list").1;
    let list = &list[..list.find("\n}").expect("the end of the `ops!` list")];
    list.lines().filter_map(|l| l.trim().strip_suffix("),")?.split_once('(')).map(|(v, _)| v.to_string()).collect()
}

#[test]
fn every_op_variant_is_in_every_op() {
    let g = parse(EVERY_OP).unwrap_or_else(|e| panic!("{e}"));
    let seen: BTreeSet<String> = g
        .node_ids()
        .map(|id| format!("{:?}", g.node(id).op).chars().take_while(char::is_ascii_alphanumeric).collect())
        .collect();
    let variants = op_variants();
    assert!(variants.len() > 50, "read only {} variants: {variants:?}", variants.len());
    let missing: Vec<&String> = variants.difference(&seen).collect();
    assert!(missing.is_empty(), "`Op` variants with no line in EVERY_OP: {missing:?}");
}
