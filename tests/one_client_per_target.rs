//! A compile makes each target's plugin objects once, whatever the number of buckets: one CPU
//! client and one TPU topology description for the dynamic tiny Llama (9 buckets, 18
//! executables). Its own test binary, so that no other test's clients are counted.
#![cfg(feature = "mlir")]

use std::path::Path;

use torchtpu_compile::internal::{cpu_plugin, tpu_plugin, Created, Plugin};
use torchtpu_compile::{compile, CompileRequest, Precision, Target};

#[test]
fn a_bucketed_compile_creates_one_client_and_one_topology() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/llama_tiny_dyn.pt2");
    let program = torchtpu_compile::import(&model).expect("import");
    let tpu = Target::Tpu { generation: "v6e".into(), topology: "1x1".into() };
    let req = CompileRequest::new(vec![Target::cpu(), tpu], Precision::Default);
    let out = std::env::temp_dir().join(format!("one-client-{}.tpuexe", std::process::id()));
    let summary = compile(&program, &model, &out, &req).expect("compile");
    let _ = std::fs::remove_file(&out);
    assert_eq!(summary.buckets.len(), 9, "buckets: {:?}", summary.buckets);
    assert_eq!(summary.targets.len(), 18);

    let cpu = Plugin::load(&cpu_plugin(None).path).expect("the CPU plugin (cargo xtask setup)");
    let libtpu = Plugin::load(&tpu_plugin().path).expect("libtpu (cargo xtask setup)");
    assert_eq!(cpu.created(), Created { clients: 1, topologies: 0 });
    assert_eq!(libtpu.created(), Created { clients: 0, topologies: 1 });
}
