//! Tests of deviceless TPU compilation through libtpu (no TPU needed). libtpu comes from
//! `TORCHTPU_LIBTPU`, else the `cargo xtask setup` location; a missing libtpu fails them.
//!
//! Run with `--nocapture` to see compile times, executable sizes and memory statistics.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;

/// Where `cargo xtask setup` unpacks libtpu, under `$HOME`.
const DEFAULT_LIBTPU: &str = ".cache/torchtpu-compile/plugins/libtpu-0.0.52/libtpu/libtpu.so";

/// `a · b + c` with `a: 128x256`, `b: 256x512`, `c: 128x512`, in the pretty StableHLO form.
const DOT_ADD: &str = r#"
func.func @main(%a: tensor<128x256xf32>, %b: tensor<256x512xf32>, %c: tensor<128x512xf32>) -> tensor<128x512xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<128x256xf32>, tensor<256x512xf32>) -> tensor<128x512xf32>
  %1 = stablehlo.add %0, %c : tensor<128x512xf32>
  return %1 : tensor<128x512xf32>
}
"#;

/// Bytes of the arguments and of the output of [`DOT_ADD`].
const ARGUMENT_BYTES: i64 = 4 * (128 * 256 + 256 * 512 + 128 * 512);
const OUTPUT_BYTES: i64 = 4 * 128 * 512;

/// Set in the environment of the child processes of
/// [`two_processes_compile_concurrently_and_identically`]: a folder they share, and their index.
const HELPER_DIR: &str = "TORCHTPU_TEST_LIBTPU_HELPER_DIR";
const HELPER_ID: &str = "TORCHTPU_TEST_LIBTPU_HELPER_ID";

fn libtpu_path() -> PathBuf {
    if let Some(path) = std::env::var_os("TORCHTPU_LIBTPU") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set");
    PathBuf::from(home).join(DEFAULT_LIBTPU)
}

/// libtpu, loaded as the binary does; panics with a setup hint when it is missing.
fn libtpu() -> Plugin {
    prepare_libtpu_environment();
    Plugin::load(&libtpu_path()).unwrap_or_else(|e| {
        panic!(
            "{e}\nthe TPU compile tests need libtpu: run `cargo xtask setup` \
             (or point TORCHTPU_LIBTPU at libtpu.so)"
        )
    })
}

fn topology(name: &str) -> Topology {
    libtpu().topology(name).unwrap_or_else(|e| panic!("topology {name}: {e}"))
}

/// Compiles [`DOT_ADD`] for `name` with one explicitly assigned partition, printing the time.
/// The topology is dropped before the executable, which does not need it.
fn compile_dot_add(name: &str) -> Executable {
    let topology = topology(name);
    let options = CompileOptions::partitions(1).expect("options");
    let start = Instant::now();
    let executable =
        topology.compile(DOT_ADD.as_bytes(), &options).unwrap_or_else(|e| panic!("compile for {name}: {e}"));
    eprintln!("{name}: compiled in {:?}", start.elapsed());
    executable
}

#[test]
fn deviceless_layouts_follow_the_header() {
    use super::ffi;
    use std::mem::offset_of;
    assert_eq!(ffi::PJRT_TopologyDescription_Create_Args::STRUCT_SIZE, 56);
    assert_eq!(ffi::PJRT_TopologyDescription_PlatformName_Args::STRUCT_SIZE, 40);
    assert_eq!(ffi::PJRT_Executable_NumPartitions_Args::STRUCT_SIZE, 32);
    assert_eq!(ffi::PJRT_Executable_SizeOfGeneratedCodeInBytes_Args::STRUCT_SIZE, 32);
    // Function slots start at byte 40, in header order.
    let slot = |offset: usize| (offset - 40) / 8;
    assert_eq!(slot(offset_of!(ffi::PJRT_Api, PJRT_Executable_NumPartitions)), 43);
    assert_eq!(slot(offset_of!(ffi::PJRT_Api, PJRT_Executable_SizeOfGeneratedCodeInBytes)), 45);
    assert_eq!(slot(offset_of!(ffi::PJRT_Api, PJRT_TopologyDescription_PlatformName)), 84);
}

#[test]
fn topologies_report_their_generation() {
    let cases = [
        ("v5e:1x1", "v5 lite"),
        ("v5e:2x2", "v5 lite"),
        ("v6e:1x1", "v6 lite"),
        ("v5p:2x2x1", "v5"),
        ("tpu7x:1x1x1", "7x"),
    ];
    for (name, hint) in cases {
        let topology = topology(name);
        eprintln!("{name}: {:?}", topology.platform_version());
        assert_eq!(topology.name(), name);
        assert_eq!(topology.platform_name(), "tpu", "{name}");
        assert!(
            topology.platform_version().contains(hint),
            "{name}: {:?} does not mention {hint:?}",
            topology.platform_version()
        );
    }
}

#[test]
fn compiles_dot_add_for_each_generation() {
    for name in ["v5e:1x1", "v6e:1x1", "v5p:2x2x1", "tpu7x:1x1x1"] {
        let executable = compile_dot_add(name);
        let bytes = executable.serialize().expect("serialize");
        let code = executable.generated_code_bytes().expect("code size");
        let stats = executable.memory_stats().expect("memory stats");
        eprintln!("{name}: {} serialized bytes, {code} bytes of code, {stats:?}", bytes.len());
        assert!(!bytes.is_empty(), "{name}");
        assert!(code > 0, "{name}: {code}");
        assert_eq!(executable.num_partitions().expect("partitions"), 1);
        assert_eq!(executable.num_outputs().expect("outputs"), 1);
        assert_eq!(stats.argument_size_in_bytes, ARGUMENT_BYTES, "{name}");
        assert_eq!(stats.output_size_in_bytes, OUTPUT_BYTES, "{name}");
        assert_eq!(stats.alias_size_in_bytes, 0, "{name}");
        assert!(stats.peak_memory_in_bytes >= ARGUMENT_BYTES + OUTPUT_BYTES, "{name}: {stats:?}");
        assert!(stats.generated_code_size_in_bytes > 0, "{name}: {stats:?}");
    }
}

#[test]
fn multi_chip_topology_compiles_one_partition() {
    let executable = compile_dot_add("v5e:2x2");
    assert_eq!(executable.num_partitions().expect("partitions"), 1);
    assert!(!executable.serialize().expect("serialize").is_empty());
}

#[test]
fn single_device_options_compile_too() {
    let executable =
        topology("v6e:1x1").compile(DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    assert_eq!(executable.num_partitions().expect("partitions"), 1);
    assert!(!executable.serialize().expect("serialize").is_empty());
}

/// The CPU plugin has no deviceless compile (a clean error), and reports the memory statistics
/// of its executables: the 6 + 6 + 4 f32 arguments and 4-f32 output of a small dot plus add.
#[test]
fn cpu_plugin_reports_memory_but_has_no_topologies() {
    use super::tests::{client, plugin, DOT_ADD as SMALL_DOT_ADD};
    let error = plugin().topology("v5e:1x1").expect_err("no CPU topologies");
    assert_eq!(error.code(), Some(ErrorCode::Unimplemented), "{error}");
    let executable = client().compile(SMALL_DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    assert!(executable.generated_code_bytes().expect("code size") >= 0);
    let stats = executable.memory_stats().expect("memory stats");
    assert_eq!(stats.argument_size_in_bytes, 64, "{stats:?}");
    assert_eq!(stats.output_size_in_bytes, 16, "{stats:?}");
    assert!(stats.peak_memory_in_bytes >= 80, "{stats:?}");
}

#[test]
fn threads_compile_concurrently() {
    let topology = topology("v6e:1x1");
    let options = CompileOptions::partitions(1).expect("options");
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let executable = topology.compile(DOT_ADD.as_bytes(), &options).expect("compile");
                assert!(executable.generated_code_bytes().expect("code size") > 0);
            });
        }
    });
}

#[test]
fn unknown_topology_is_a_call_error() {
    let plugin = libtpu();
    match plugin.topology("v9:1x1") {
        Err(PjrtError::Call { call, code, message }) => {
            // libtpu 0.0.52: "Invalid TPU external name: TPU v9".
            assert_eq!(call, "PJRT_TopologyDescription_Create");
            assert_eq!(code, Some(ErrorCode::InvalidArgument), "{message}");
            assert!(message.contains("v9"), "{message}");
        }
        other => panic!("expected a call error, got {other:?}"),
    }
    assert!(matches!(plugin.topology(""), Err(PjrtError::InvalidArgument(_))));
}

#[test]
fn invalid_program_reports_the_compiler_diagnostic() {
    let topology = topology("v5e:1x1");
    let options = CompileOptions::partitions(1).expect("options");
    let program = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n\
                   %0 = stablehlo.frobnicate %x : tensor<2xf32>\n\
                   return %0 : tensor<2xf32>\n}\n";
    match topology.compile(program.as_bytes(), &options) {
        Err(PjrtError::Call { call, message, .. }) => {
            assert_eq!(call, "PJRT_Compile");
            assert!(message.contains("stablehlo.frobnicate"), "{message}");
        }
        other => panic!("expected a call error, got {other:?}"),
    }
    assert!(matches!(topology.compile(b"", &options), Err(PjrtError::InvalidArgument(_))));
}

/// Two processes that both hold libtpu initialized compile at the same time, to the same
/// bytes. Without `ALLOW_MULTIPLE_LIBTPU_LOAD` (which `Plugin::load` sets) the second fails to
/// initialize on `/tmp/libtpu_lockfile`.
///
/// Determinism is checked across processes: within one, every compile gets the next HLO module
/// id from a process-wide counter, which the serialized executable records (with hashes over
/// it), so the second compile of a program in a process differs from the first.
#[test]
fn two_processes_compile_concurrently_and_identically() {
    let dir = std::env::temp_dir().join(format!("torchtpu-libtpu-helper-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the helper folder");
    // The helper's name as the test harness filters it: the module path without the crate.
    let module = module_path!().split_once("::").expect("a crate path").1;
    let helper = format!("{module}::concurrent_compile_helper");
    let spawn = |id: usize| {
        let log = |stream: &str| std::fs::File::create(dir.join(format!("{stream}-{id}"))).expect("create a log");
        Command::new(std::env::current_exe().expect("test binary"))
            .args([helper.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(HELPER_DIR, &dir)
            .env(HELPER_ID, id.to_string())
            .env_remove("TPU_SKIP_MDS_QUERY")
            .env_remove("ALLOW_MULTIPLE_LIBTPU_LOAD")
            .stdout(log("stdout"))
            .stderr(log("stderr"))
            .spawn()
            .expect("spawn a helper")
    };
    let mut children = [spawn(0), spawn(1)];
    // Wait for both; once one fails, the other would wait for it in vain.
    let mut statuses = [None, None];
    while statuses.iter().any(Option::is_none) {
        for (child, status) in children.iter_mut().zip(&mut statuses) {
            if status.is_none() {
                *status = child.try_wait().expect("wait for a helper");
            }
        }
        if statuses.iter().flatten().any(|s| !s.success()) {
            for child in &mut children {
                let _ = child.kill();
            }
            for (child, status) in children.iter_mut().zip(&mut statuses) {
                *status = Some(child.wait().expect("wait for a helper"));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let read = |name: String| std::fs::read(dir.join(name));
    let executables: Vec<_> = (0..2).map(|id| read(format!("executable-{id}"))).collect();
    let failures: Vec<String> = statuses
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(id, status)| {
            let text = |stream: &str| {
                String::from_utf8_lossy(&read(format!("{stream}-{id}")).unwrap_or_default()).into_owned()
            };
            let stdout = text("stdout");
            let passed = status.success() && stdout.contains("1 passed");
            (!passed).then(|| format!("helper {id} failed ({status}):\n{stdout}\n{}", text("stderr")))
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let [Ok(first), Ok(second)] = &executables[..] else {
        panic!("a helper wrote no executable: {executables:?}");
    };
    assert!(!first.is_empty());
    assert!(first == second, "two processes compiled one program to different bytes");
}

/// One side of [`two_processes_compile_concurrently_and_identically`]: initializes libtpu,
/// waits until the other process has too, then compiles once and writes the executable. Does
/// nothing outside that test.
#[test]
fn concurrent_compile_helper() {
    let (Some(dir), Ok(id)) = (std::env::var_os(HELPER_DIR), std::env::var(HELPER_ID)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    // Without `prepare_libtpu_environment`: `Plugin::load` must set the variables itself.
    let topology = Plugin::load(&libtpu_path()).expect("load libtpu").topology("v5e:1x1").expect("topology");
    std::fs::write(dir.join(format!("ready-{id}")), b"").expect("mark ready");
    let other = dir.join(format!("ready-{}", if id == "0" { 1 } else { 0 }));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !other.exists() {
        assert!(Instant::now() < deadline, "the other helper never initialized libtpu");
        std::thread::sleep(Duration::from_millis(20));
    }
    let options = CompileOptions::partitions(1).expect("options");
    let executable = topology.compile(DOT_ADD.as_bytes(), &options).expect("compile");
    let bytes = executable.serialize().expect("serialize");
    std::fs::write(dir.join(format!("executable-{id}")), bytes).expect("write the executable");
}
