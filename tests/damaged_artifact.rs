//! An artifact damaged in transit: every region of a `.tpuexe` (each entry's local header,
//! its first, middle and last byte, the central directory, the end record) flipped, and the
//! file cut at each entry and inside the directory; and the external weights file flipped and
//! cut. `inspect` and `run` must refuse each with an error in the tool's words (exit 1), or, if
//! they accept it, give the right numbers: never a crash, a signal or wrong outputs.
#![cfg(feature = "mlir")]

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_torchtpu-compile"))
}

fn model_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/mlp")
}

/// Compiles the test MLP for CPU to `out`, with `extra` flags.
fn compile(out: &Path, extra: &[&str]) {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/mlp.pt2");
    let o = bin().arg(model).arg("-o").arg(out).args(["--target", "cpu", "--no-cache"]).args(extra).output();
    let o = o.expect("runs the binary");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// One way of damaging a file.
enum Damage {
    /// The byte at this offset, inverted.
    Flip(usize),
    /// The file cut to this length.
    Cut(usize),
}

/// The byte ranges of a zip's regions: each entry's local header and data, the central
/// directory, the end records.
fn regions(bytes: &[u8]) -> Vec<(String, Range<usize>)> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a zip");
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let f = zip.by_index(i).expect("an entry");
        let (header, data) = (f.header_start() as usize, f.data_start() as usize);
        out.push((format!("{} header", f.name()), header..data));
        out.push((format!("{} data", f.name()), data..data + f.size() as usize));
    }
    let directory = zip.central_directory_start() as usize;
    let end = bytes.len() - 22;
    out.push(("central directory".into(), directory..end));
    out.push(("end record".into(), end..bytes.len()));
    out
}

/// The damages tried on a region: its first, middle and last byte flipped, and the file cut
/// in its middle.
fn damages(r: &Range<usize>) -> Vec<Damage> {
    if r.is_empty() {
        return vec![];
    }
    let mid = r.start + r.len() / 2;
    vec![Damage::Flip(r.start), Damage::Flip(mid), Damage::Flip(r.end - 1), Damage::Cut(mid)]
}

fn damaged(bytes: &[u8], d: &Damage) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match *d {
        Damage::Flip(at) => b[at] ^= 0xff,
        Damage::Cut(len) => b.truncate(len),
    }
    b
}

/// The command's outcome is a refusal in the tool's words or, when `accepted` allows an exit
/// 0, the right result; never a signal or a panic.
fn refused_or_right(o: &Output, what: &str, accepted: impl Fn(&str) -> bool) -> bool {
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.code().is_some(), "{what}: killed by a signal ({})\n{text}", o.status);
    assert!(!text.contains("panicked"), "{what}: a panic\n{text}");
    assert!(!text.contains("DIFFERS from the reference"), "{what}: wrong numbers\n{text}");
    match o.status.code() {
        Some(0) => {
            assert!(accepted(&text), "{what}: accepted, with\n{text}");
            eprintln!("accepted, rightly: {what}");
            false
        }
        Some(1) => {
            assert!(text.contains("error: "), "{what}: exit 1 without an error\n{text}");
            true
        }
        other => panic!("{what}: exit {other:?}\n{text}"),
    }
}

/// `inspect` and `run` on the artifact at `art` (damaged as `what` says): how many refused.
fn try_damaged(art: &Path, what: &str, out_dir: &Path) -> usize {
    let inspect = bin().arg("inspect").arg(art).output().expect("runs inspect");
    let data = model_data();
    let run = bin()
        .arg("run")
        .arg(art)
        .arg(data.join("in_0.npy"))
        .arg("--out-dir")
        .arg(out_dir)
        .arg("--reference")
        .arg(&data)
        .output()
        .expect("runs run");
    usize::from(refused_or_right(&inspect, &format!("inspect, {what}"), |_| true))
        + usize::from(refused_or_right(&run, &format!("run, {what}"), |t| t.contains("matches the reference")))
}

#[test]
fn every_region_of_a_damaged_artifact_is_refused_or_harmless() {
    let dir = std::env::temp_dir().join(format!("damaged-artifact-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder");

    // The artifact with embedded weights, each region damaged in each way.
    let good = dir.join("good.tpuexe");
    compile(&good, &[]);
    let bytes = std::fs::read(&good).expect("the artifact");
    let art = dir.join("art.tpuexe");
    let (mut tried, mut refused) = (0, 0);
    for (region, range) in regions(&bytes) {
        for d in damages(&range) {
            let what = match d {
                Damage::Flip(at) => format!("{region}: byte {at} flipped"),
                Damage::Cut(len) => format!("{region}: cut to {len} bytes"),
            };
            std::fs::write(&art, damaged(&bytes, &d)).expect("writes");
            refused += try_damaged(&art, &what, &dir.join("out"));
            tried += 2;
        }
    }

    // External weights: the file beside the artifact flipped and cut.
    let ext = dir.join("ext.tpuexe");
    compile(&ext, &["--weights", "external"]);
    let weights_path = dir.join("ext.weights.safetensors");
    let weights = std::fs::read(&weights_path).expect("the external weights");
    for d in [
        Damage::Flip(0),
        Damage::Flip(weights.len() / 2),
        Damage::Flip(weights.len() - 1),
        Damage::Cut(weights.len() / 2),
    ] {
        std::fs::write(&weights_path, damaged(&weights, &d)).expect("writes");
        let what = match d {
            Damage::Flip(at) => format!("external weights: byte {at} flipped"),
            Damage::Cut(len) => format!("external weights: cut to {len} bytes"),
        };
        refused += try_damaged(&ext, &what, &dir.join("out"));
        tried += 2;
    }
    eprintln!("{tried} damaged inspect and run calls: {refused} refused, the rest gave the right result");
    assert!(refused * 2 > tried, "most damage is refused ({refused} of {tried})");
    let _ = std::fs::remove_dir_all(&dir);
}
