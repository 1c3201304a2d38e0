//! The guards' grammar on what torch 2.15 writes, and what it refuses.

use std::collections::BTreeMap;

use super::{Env, Guard};

fn holds(text: &str, shapes: &[(&str, &[i64])]) -> Result<bool, String> {
    let symbols = BTreeMap::new();
    let env = Env { shapes: shapes.to_vec(), symbols: &symbols };
    Guard::parse(text)?.holds(&env)
}

/// The guards torch 2.15 recorded for the test modules and transformers' ViT, at sizes they
/// allow and at sizes they exclude.
#[test]
fn torch_guards_read_and_decide() {
    let g = "L['x'].size()[1] != 16";
    assert_eq!(holds(g, &[("x", &[3, 8])]), Ok(true));
    assert_eq!(holds(g, &[("x", &[3, 16])]), Ok(false));
    let vit = "((L['pixel_values'].size()[3] // 8)*(L['pixel_values'].size()[2] // 8)) != 16";
    assert_eq!(holds(vit, &[("pixel_values", &[1, 3, 32, 32])]), Ok(false));
    assert_eq!(holds(vit, &[("pixel_values", &[1, 3, 48, 40])]), Ok(true));
    let trunc = "math.trunc(0.5*torch.sym_float(L['x'].size()[3])) >= 2";
    assert_eq!(holds(trunc, &[("x", &[2, 3, 16, 5])]), Ok(true));
    assert_eq!(holds(trunc, &[("x", &[2, 3, 16, 3])]), Ok(false));
    let nested = "L['pair'][1].size()[1] != torch.sym_max(1, L['mask'].size()[1] // 2)";
    assert_eq!(holds(nested, &[("pair_1", &[5, 4]), ("mask", &[6, 9])]), Ok(false));
    assert_eq!(holds(nested, &[("pair_1", &[5, 7]), ("mask", &[6, 9])]), Ok(true));
    let modulo = "((32 + 32*(L['p'].size()[3] // 8)) % (16 + 16*(L['p'].size()[3] // 8))) == 0";
    assert_eq!(holds(modulo, &[("p", &[1, 3, 8, 24])]), Ok(true));
    assert_eq!(holds("(L['p'].size()[0] % 4) != 0", &[("p", &[8])]), Ok(false));
}

#[test]
fn python_semantics() {
    let cases = [
        ("-7 // 2 == -4", true),
        ("-7 % 3 == 2", true),
        ("7 % -3 == -2", true),
        ("7 / 2 == 3.5", true),
        ("2 ** 3 ** 2 == 512", true),
        ("-2 ** 2 == -4", true),
        ("1 < 2 < 3", true),
        ("1 < 3 < 2", false),
        ("not 1 == 2 and True", true),
        ("False or 0 or 3 > 2", true),
        ("Eq(Mod(10, 4), 2)", true),
        ("Ne(min(3, 1, 2), 1)", false),
        ("math.floor(-0.5) == -1 and math.ceil(0.5) == 1 and int(-1.5) == -1", true),
        ("abs(-3) == 3", true),
        ("1e-05 < 0.001", true),
    ];
    for (text, want) in cases {
        assert_eq!(holds(text, &[]), Ok(want), "{text}");
    }
}

#[test]
fn strides_and_sizes_of_contiguous_inputs() {
    let x: &[i64] = &[2, 3, 4];
    assert_eq!(holds("L['x'].stride()[0] == 12 and L['x'].stride()[2] == 1", &[("x", x)]), Ok(true));
    assert_eq!(holds("L['x'].numel() == 24 and L['x'].dim() == 3", &[("x", x)]), Ok(true));
    assert_eq!(holds("L['x'].storage_offset() == 0", &[("x", x)]), Ok(true));
}

#[test]
fn relations_of_range_constraints_read_symbols() {
    let g = Guard::of_range("8*s52", Some(16), Some(64)).unwrap().unwrap();
    assert_eq!(g.text(), "16 <= 8*s52 <= 64");
    assert_eq!(g.symbols(), vec!["s52".to_string()]);
    let at = |v: i64| {
        let symbols = BTreeMap::from([("s52".to_string(), v)]);
        g.holds(&Env { shapes: Vec::new(), symbols: &symbols })
    };
    assert_eq!((at(2), at(8), at(9), at(1)), (Ok(true), Ok(true), Ok(false), Ok(false)));
    assert!(Guard::of_range("s1", None, None).is_none());
}

#[test]
fn what_cannot_be_decided_says_why() {
    assert_eq!(holds("L['y'].size()[0] == 1", &[("x", &[1])]), Err("no input is named `y`".into()));
    assert_eq!(holds("L['x'].size()[2] == 1", &[("x", &[1])]), Err("input `x` has 1 dims, not 3".into()));
    assert_eq!(holds("L['x'].size()[0] // 0 == 1", &[("x", &[1])]), Err("it divides by zero".into()));
    assert_eq!(holds("9223372036854775807 + 1 > 0", &[]), Err("the arithmetic overflows".into()));
    let g = Guard::parse("L['pair'][0].size()[1] == L['mask'].size()[0]").unwrap();
    assert_eq!(g.inputs(), vec![("pair_0".to_string(), Some(1)), ("mask".to_string(), Some(0))]);
}

/// What is not in the grammar is an error naming it, never a guard skipped.
#[test]
fn what_is_outside_the_grammar_is_named() {
    let refused = [
        ("L['x'].size()[1] != 16 if True else 0", "unexpected `if` after a complete condition"),
        ("sqrt(2) > 1", "`sqrt` is not a function guards may call"),
        ("x > 1", "`x` is neither a size nor a symbol"),
        ("os.system('true')", "`os.system` is not a function guards may call"),
        ("L['x'].dtype == 1", "`.dtype` of an input is not a size guards may read"),
        ("L['x'].size()[1] !", "`!` is not part of the grammar of guards"),
        ("(1 == 1", "it ends too early"),
        ("1 == 1)", "unexpected `)` after a complete condition"),
        ("Eq(1)", "`Eq` takes 2 argument(s), given 1"),
        ("L['x'].size()[-1] == 1", "unexpected `-` as a dim"),
        ("'a\\'b' == 1", "the string 'a\\' has an escape, which no input name has"),
    ];
    for (text, why) in refused {
        assert_eq!(Guard::parse(text).map(|_| ()), Err(why.to_string()), "{text}");
    }
    let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
    assert_eq!(Guard::parse(&deep).map(|_| ()), Err("it nests deeper than 64 levels".into()));
    let unary = format!("{}1 == 1", "-".repeat(100_000));
    assert!(Guard::parse(&unary).is_err());
}

#[test]
fn the_manifest_keeps_the_text_and_reads_it_back() {
    let g = Guard::parse("L['x'].size()[1] != 16").unwrap();
    let json = serde_json::to_string(&g).unwrap();
    assert_eq!(json, "\"L['x'].size()[1] != 16\"");
    assert_eq!(serde_json::from_str::<Guard>(&json).unwrap(), g);
    let bad = serde_json::from_str::<Guard>("\"L['x'].size()[1] !\"").unwrap_err().to_string();
    assert!(bad.contains("`!` is not part of the grammar"), "{bad}");
}

/// A strict (Dynamo) export names the inputs by their position among the flattened arguments
/// (transformers' static-cache recipe: `L['flat_args'][1].size()[0] == L['flat_args'][0].size()[1]`):
/// they are read in the program's order.
#[test]
fn positional_inputs_of_a_strict_export_are_read_in_order() {
    let g = "L['flat_args'][1].size()[0] == L['flat_args'][0].size()[1]";
    let inputs = |t: i64| [("input_ids", vec![4, 3]), ("cache_position", vec![t])];
    let check = |t: i64| {
        let owned = inputs(t);
        let shapes: Vec<(&str, &[i64])> = owned.iter().map(|(n, s)| (*n, s.as_slice())).collect();
        holds(g, &shapes)
    };
    assert_eq!((check(3), check(2)), (Ok(true), Ok(false)));
    assert_eq!(
        holds("L['flat_args'][2].size()[0] == 1", &[("x", &[1])]),
        Err("no input is named `flat_args_2`".into())
    );
    assert_eq!(super::input_index("flat_args_0", &["x"]), Some(0));
    assert_eq!(super::input_index("x", &["y", "x"]), Some(1));
}
