//! A session: an artifact opened and checked once, its weights put on the devices once, and
//! then called as often as wanted. The buffers and parameters the program updates (a KV cache,
//! BatchNorm statistics) stay on the devices from one call to the next: each call's new value
//! takes the place of the weight the next call reads. `reset` puts the artifact's values back.
//!
//! Where the program aliases an updated weight to its new value (`tf.aliasing_output`, see
//! the emitter's `signature`), the call donates the weight's buffer: XLA writes the update in
//! its memory rather than into a copy of the whole weight, so a KV cache costs its new entries
//! per call, not its size. Those buffers are therefore the session's own copies, never views
//! of the artifact's map.
//!
//! A session is `Send + Sync` (the PJRT objects are thread-safe); calls take it `&mut`,
//! because a program with state must see its calls in order: share it as `Mutex<Session>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use torchtpu_passes::ir::DType;

use super::device::DeviceKind;
use super::placement::Placement;
use super::weights::{self, DeviceWeights, Verification};
use super::{
    check_guards, client_for, parse_dtype, pick_bucket, real_dims, real_sizes, seed_key, smallest_bucket, to_device,
    RunError,
};
use crate::artifact::{Artifact, Bucket, Manifest};
use crate::npy::Array;
use crate::pjrt::{Buffer, Client, Donation, LoadedExecutable};
use crate::Error;

/// An open artifact with its weights on the devices. Fields drop in order: the buffers (which
/// may read the artifact's map in place) before the artifact.
pub struct Session {
    weights: DeviceWeights,
    executables: BTreeMap<String, LoadedExecutable>,
    client: Client,
    placement: Placement,
    /// Per weight the program updates: its slot among the weights and the output with its new
    /// value.
    updated: Vec<(usize, usize)>,
    /// Updated weights a pass changed the storage of: their state cannot be carried.
    uncarried: Vec<String>,
    /// The outputs a call copies to the host and returns: all but the updated weights in
    /// `updated`, which stay on the devices (read them with `state`).
    returned: Vec<usize>,
    calls: u64,
    /// Whether calls donate the updated weights' buffers.
    donation: Donation,
    /// Why the updated weights are lost: a call that donated them failed. `reset` mends it.
    broken: Option<String>,
    /// Why the session has no weights: a swap to another checkpoint failed after the old ones
    /// left the devices. Only a swap that succeeds mends it.
    unloaded: Option<String>,
    /// Inputs kept on the devices across calls (`hold_input`).
    held: Vec<Held>,
    /// Which target's executables run.
    target: usize,
    art: Artifact,
}

/// An input every call shares, kept on the devices (see [`Session::hold_input`]).
struct Held {
    index: usize,
    array: Array,
    /// Its pieces on each device, per bucket it ran in (padded to that bucket's dims).
    placed: BTreeMap<String, Vec<Buffer>>,
}

// A server may share one session between threads (its calls behind a mutex).
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Session>();
};

/// What one call gave.
pub struct Called {
    /// The bucket that ran.
    pub bucket: String,
    /// The outputs of [`Session::returned_outputs`], in order, at the real sizes.
    pub outputs: Vec<Array>,
    pub run_ms: f64,
}

impl Session {
    /// Opens the artifact at `path` for its executables of `device`'s kind on `plugin`
    /// (default: the set-up one), checks it and puts its weights on the devices, verified as
    /// `verification` says.
    pub fn open(
        path: &Path,
        device: DeviceKind,
        plugin: Option<&Path>,
        verification: &Verification,
    ) -> Result<Session, Error> {
        Session::with(Artifact::open_but_weights(path)?, device, plugin, verification)
    }

    /// [`Session::open`] on an artifact already opened (its weights not yet read).
    pub fn with(
        art: Artifact,
        device: DeviceKind,
        plugin: Option<&Path>,
        verification: &Verification,
    ) -> Result<Session, Error> {
        Session::assemble(art, device, plugin, |client, art, placement| {
            weights::load(client, art, placement, verification)
        })
    }

    /// [`Session::with`], with the weights of another checkpoint of the program instead of the
    /// artifact's (see [`Session::swap_weights`]).
    pub fn with_checkpoint(
        art: Artifact,
        device: DeviceKind,
        plugin: Option<&Path>,
        checkpoint: &Path,
    ) -> Result<Session, Error> {
        let refitted = if is_archive(checkpoint)? { Some(refitted(&art, checkpoint)?) } else { None };
        let checkpoint = weights::Checkpoint::open(&art, refitted.as_ref().map_or(checkpoint, |t| t.0.as_path()))?;
        Session::assemble(art, device, plugin, |client, art, placement| checkpoint.load(client, art, placement))
    }

    /// A session of `art` on `device`, its weights put on the devices by `load`.
    fn assemble(
        art: Artifact,
        device: DeviceKind,
        plugin: Option<&Path>,
        load: impl FnOnce(&Client, &Artifact, &Placement) -> Result<DeviceWeights, Error>,
    ) -> Result<Session, Error> {
        let m = &art.manifest;
        let target = device.target(m)?;
        let placement = Placement::of(m)?;
        let client = client_for(&m.targets[target], device.plugin(plugin), placement.devices())?;
        let weights = load(&client, &art, &placement)?;
        let (mut updated, mut uncarried) = (Vec::new(), Vec::new());
        for (fqn, output, _) in super::state::updated(m) {
            match m.weights.order.iter().position(|n| *n == fqn) {
                Some(slot) => updated.push((slot, output)),
                None => uncarried.push(fqn),
            }
        }
        let executables = BTreeMap::new();
        let returned = (0..m.signature.outputs.len()).filter(|j| !updated.iter().any(|u| u.1 == *j)).collect();
        let donation = Donation::Aliased;
        let mut session = Session {
            weights,
            executables,
            client,
            placement,
            updated,
            uncarried,
            returned,
            calls: 0,
            donation,
            broken: None,
            unloaded: None,
            held: Vec::new(),
            target,
            art,
        };
        // The updated weights as owned copies, which a call may donate.
        session.reset()?;
        Ok(session)
    }

    /// Refuses to go on when a failed swap left the session without weights.
    fn loaded(&self) -> Result<(), Error> {
        match &self.unloaded {
            Some(reason) => {
                Err(RunError::State { path: self.art.path().display().to_string(), reason: reason.clone() }.into())
            }
            None => Ok(()),
        }
    }

    /// Whether calls donate the updated weights' buffers (the default) or leave them and
    /// write each update into a copy (for measuring what donation saves).
    pub fn set_donation(&mut self, donate: bool) {
        self.donation = if donate { Donation::Aliased } else { Donation::None };
    }

    /// The artifact's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.art.manifest
    }

    /// The artifact.
    pub fn artifact(&self) -> &Artifact {
        &self.art
    }

    /// Which outputs of the graph (indices into the signature's) a call returns: every one
    /// but the updated weights, which stay on the devices and are not copied to the host at
    /// each call (a KV cache would be, whole, every token); [`Session::state`] reads those.
    pub fn returned_outputs(&self) -> &[usize] {
        &self.returned
    }

    /// The updated weights start from `dir`'s `state_<fqn>.npy` files (see `state`).
    pub fn load_state(&mut self, dir: &Path) -> Result<(), Error> {
        self.loaded()?;
        super::state::load(&self.client, &self.placement, &self.art.manifest, &mut self.weights, dir).map(|_| ())
    }

    /// The updated weight `name` takes the value `a`, checked against its dtype and shape.
    pub fn set_state(&mut self, name: &str, a: Array) -> Result<(), Error> {
        self.loaded()?;
        super::state::set(&self.client, &self.placement, &self.art.manifest, &mut self.weights, name, a, name)
    }

    /// Runs the bucket that holds `inputs` (named by `labels` in messages: their files), with
    /// `seed` for random ops; the updated weights keep their new values for the next call.
    pub fn call(&mut self, inputs: &[Array], labels: &[PathBuf], seed: u64) -> Result<Called, Error> {
        if let (Some(fqn), true) = (self.uncarried.first(), self.calls > 0) {
            let reason = format!("the program updates `{fqn}`, stored changed by a pass: its state cannot be carried");
            return Err(RunError::State { path: self.art.path().display().to_string(), reason }.into());
        }
        self.loaded()?;
        if let Some(reason) = &self.broken {
            let reason = format!("{reason}; reset the session to start again from the weights' state");
            return Err(RunError::State { path: self.art.path().display().to_string(), reason }.into());
        }
        let inputs: Vec<&Array> = inputs
            .iter()
            .enumerate()
            .map(|(i, a)| self.held.iter().find(|h| h.index == i).map_or(a, |h| &h.array))
            .collect();
        let (bucket, real) = bucket_for_inputs(&self.art.manifest, &inputs, labels)?;
        self.calls += 1;
        let bucket = bucket.clone();
        let args = self.arguments(&bucket, &inputs, real.as_ref(), seed)?;
        self.place_held(&bucket)?;
        let started = Instant::now();
        self.load_executable(&bucket.name)?;
        let exe = &self.executables[&bucket.name];
        let refs: Vec<Vec<&Buffer>> = (0..args.len()).map(|d| self.device_arguments(&bucket, &args, d)).collect();
        let executed = exe.execute_on_devices(&refs, self.donation);
        drop(refs);
        let mut outs = match executed {
            Ok(outs) => outs,
            Err(e) => {
                if self.donation == Donation::Aliased && !self.updated.is_empty() {
                    self.broken = Some(format!("a call failed after it was given the state ({e})"));
                }
                return Err(RunError::Execute(e).into());
            }
        };
        let run_ms = started.elapsed().as_secs_f64() * 1e3;
        let real = self.with_computed_sizes(&bucket, real, &outs)?;
        let outputs = self.host_outputs(&bucket, real.as_ref(), &outs)?;
        self.keep_state(&bucket, &mut outs)?;
        Ok(Called { bucket: bucket.name, outputs, run_ms })
    }

    /// The weights' values back in the updated weights (only those are put on the devices
    /// again): the artifact's, or those of the checkpoint [`Session::swap_weights`] took.
    pub fn reset(&mut self) -> Result<(), Error> {
        self.loaded()?;
        if self.updated.is_empty() {
            return Ok(());
        }
        let order = &self.art.manifest.weights.order;
        let names: Vec<&str> = self.updated.iter().map(|&(slot, _)| order[slot].as_str()).collect();
        let fresh = weights::reload(&self.client, &self.art, &self.placement, &self.weights, &names)?;
        for (&(slot, _), pieces) in self.updated.iter().zip(fresh) {
            for (d, piece) in pieces.into_iter().enumerate() {
                self.weights.buffers[d][slot] = piece;
            }
        }
        self.broken = None;
        Ok(())
    }

    /// Takes the weights of another checkpoint of the same program, without recompiling: a
    /// `.pt2` of the same model with other values (its programs must lower to the artifact's;
    /// the weights the compiler derives are computed from it), or a `.safetensors` file with
    /// every weight of the artifact by name, dtype and shape (a state dict, where the compiler
    /// derived none). Everything is checked before anything changes: a checkpoint of another
    /// program is refused and the session keeps its weights. The updated weights (caches)
    /// restart from the checkpoint's values, and `reset` returns to them. The old weights leave
    /// the devices before the new ones arrive, so a swap needs no more device memory than the
    /// weights; if putting the new ones there fails, the session has none until a swap succeeds.
    pub fn swap_weights(&mut self, path: &Path) -> Result<(), Error> {
        let refitted = if is_archive(path)? { Some(refitted(&self.art, path)?) } else { None };
        let checkpoint = weights::Checkpoint::open(&self.art, refitted.as_ref().map_or(path, |t| t.0.as_path()))?;
        self.weights.buffers.iter_mut().for_each(Vec::clear);
        match checkpoint.load(&self.client, &self.art, &self.placement) {
            Ok(w) => self.weights = w,
            Err(e) => {
                let reason =
                    format!("swapping its weights to `{}` failed ({e}): swap to a checkpoint again", path.display());
                self.unloaded = Some(reason);
                return Err(e);
            }
        }
        self.unloaded = None;
        self.reset()
    }

    /// The current value of every weight the program updates, by name, whole.
    pub fn state(&self) -> Result<Vec<(String, Array)>, Error> {
        self.loaded()?;
        let m = &self.art.manifest;
        let mut out = Vec::with_capacity(self.updated.len());
        for &(slot, output) in &self.updated {
            let name = &m.weights.order[slot];
            let sig = &m.signature.outputs[output];
            let dtype = parse_dtype(&sig.dtype)
                .ok_or_else(|| RunError::Weights(format!("unknown dtype {} of `{name}`", sig.dtype)))?;
            let shape: Option<Vec<i64>> = sig.dims.iter().map(serde_json::Value::as_i64).collect();
            let shape = shape.ok_or_else(|| RunError::Weights(format!("`{name}` has no static shape")))?;
            let split = self.placement.split(m.sharding.as_ref().and_then(|s| s.weights.get(name)));
            let pieces = self.weights.buffers.iter().map(|b| b[slot].to_host()).collect::<Result<Vec<_>, _>>();
            let pieces = pieces.map_err(RunError::Execute)?;
            let data = self.placement.assemble(&pieces, &shape, dtype.size_bytes(), split.as_ref());
            out.push((name.clone(), Array { dtype, shape, data }));
        }
        Ok(out)
    }

    /// Keeps `array` as input `index` of the calls that follow, until [`Session::release_inputs`]:
    /// a value every call shares (an encoder's states, which each decoder step reads) goes to
    /// the devices once per bucket it runs in, not at every call. Those calls still give an
    /// array at `index`, which is not read (an empty one will do). Checked here against the
    /// input's dtype; its shape picks the bucket at each call, as a given input's would.
    pub fn hold_input(&mut self, index: usize, array: Array) -> Result<(), Error> {
        let m = &self.art.manifest;
        if index >= m.signature.inputs.len() {
            let reason =
                format!("the program takes {} inputs; there is no input {index} to hold", m.signature.inputs.len());
            return Err(RunError::Weights(reason).into());
        }
        super::check_dtype(m, index, &array, Path::new("the held input"))?;
        self.held.retain(|h| h.index != index);
        self.held.push(Held { index, array, placed: BTreeMap::new() });
        Ok(())
    }

    /// Every input [`Session::hold_input`] kept leaves the devices; calls read theirs again.
    pub fn release_inputs(&mut self) {
        self.held.clear();
    }

    /// How many inputs [`Session::hold_input`] keeps.
    pub fn held_inputs(&self) -> usize {
        self.held.len()
    }

    /// Puts the held inputs on the devices padded to `bucket`'s dims, where they are not yet.
    fn place_held(&mut self, bucket: &Bucket) -> Result<(), Error> {
        let splits = self.art.manifest.sharding.as_ref().map(|s| &s.inputs);
        for i in 0..self.held.len() {
            if self.held[i].placed.contains_key(&bucket.name) {
                continue;
            }
            let h = &self.held[i];
            let split = self.placement.split(splits.and_then(|s| s.get(h.index)));
            let a = h.array.resized(&bucket.input_dims[h.index]);
            let pieces = (0..self.placement.devices())
                .map(|d| self.to_device_piece(&a, split.as_ref(), d))
                .collect::<Result<Vec<_>, _>>()?;
            self.held[i].placed.insert(bucket.name.clone(), pieces);
        }
        Ok(())
    }

    /// The arguments of a call on device `d`: the weights, the user's inputs in order (the
    /// held ones from their place, the others from `args`), then the rest of `args`.
    fn device_arguments<'a>(&'a self, bucket: &Bucket, args: &'a [Vec<Buffer>], d: usize) -> Vec<&'a Buffer> {
        let mut given = args[d].iter();
        let mut out: Vec<&Buffer> = self.weights.buffers[d].iter().collect();
        for i in 0..bucket.input_dims.len() {
            match self.held.iter().find(|h| h.index == i) {
                Some(h) => out.push(&h.placed[&bucket.name][d]),
                None => out.extend(given.next()),
            }
        }
        out.extend(given);
        out
    }

    /// Device `d`'s piece of `a` (split as `split` says, or whole).
    fn to_device_piece(
        &self,
        a: &Array,
        split: Option<&torchtpu_passes::ir::Sharding>,
        d: usize,
    ) -> Result<Buffer, Error> {
        let (piece, dims) = self.placement.piece(&a.data, &a.shape, a.dtype.size_bytes(), split, d)?;
        to_device(&self.client, d, a.dtype, &piece, &dims)
    }

    /// The inputs of one call on each device that are not held: the user's, the seed, the
    /// real sizes.
    fn arguments(
        &self,
        bucket: &Bucket,
        inputs: &[&Array],
        real: Option<&BTreeMap<String, i64>>,
        seed: u64,
    ) -> Result<Vec<Vec<Buffer>>, Error> {
        let m = &self.art.manifest;
        let splits = m.sharding.as_ref().map(|s| &s.inputs);
        let mut arrays: Vec<(Array, Option<torchtpu_passes::ir::Sharding>)> = Vec::new();
        for (i, (a, dims)) in inputs.iter().zip(&bucket.input_dims).enumerate() {
            if !self.held.iter().any(|h| h.index == i) {
                arrays.push((a.resized(dims), self.placement.split(splits.and_then(|s| s.get(i)))));
            }
        }
        if m.signature.rng_seed {
            arrays.push((seed_key(seed), None));
        }
        for symbol in &bucket.sizes {
            let value = real.and_then(|r| r.get(symbol)).copied().unwrap_or_default();
            arrays.push((Array { dtype: DType::I64, shape: vec![], data: value.to_le_bytes().to_vec() }, None));
        }
        let mut buffers: Vec<Vec<Buffer>> = (0..self.placement.devices()).map(|_| Vec::new()).collect();
        for (a, split) in &arrays {
            for (d, list) in buffers.iter_mut().enumerate() {
                list.push(self.to_device_piece(a, split.as_ref(), d)?);
            }
        }
        Ok(buffers)
    }

    /// Loads every bucket's executable now rather than at its first call (so that a timed
    /// loop does not pay for it).
    pub fn load_executables(&mut self) -> Result<(), Error> {
        let buckets: Vec<String> = self.art.manifest.buckets.iter().map(|b| b.name.clone()).collect();
        buckets.iter().try_for_each(|b| self.load_executable(b))
    }

    /// Loads the executable of `bucket` (once), checked against the manifest's sha256.
    fn load_executable(&mut self, bucket: &str) -> Result<(), Error> {
        if !self.executables.contains_key(bucket) {
            let target = &self.art.manifest.targets[self.target];
            let entry = target.executables.iter().find(|e| e.bucket == bucket).ok_or_else(|| {
                RunError::NoCpuExecutable { targets: format!("{} without bucket `{bucket}`", target.target) }
            })?;
            let bytes = self.art.verified(&entry.entry, &entry.sha256)?;
            let exe = self.client.deserialize(bytes).map_err(RunError::Execute)?;
            self.executables.insert(bucket.to_string(), exe);
        }
        Ok(())
    }

    /// The returned outputs on the host, sliced back to the real sizes of a bucket's. Every
    /// result is whole on every device: the first device's are read.
    fn host_outputs(
        &self,
        bucket: &Bucket,
        real: Option<&BTreeMap<String, i64>>,
        outs: &[Vec<Buffer>],
    ) -> Result<Vec<Array>, Error> {
        let sig = &self.art.manifest.signature.outputs;
        let mut out = Vec::with_capacity(self.returned.len());
        for &j in &self.returned {
            let arr = self.host_output(bucket, &outs[0][j], j)?;
            out.push(match real.and_then(|r| real_dims(&sig[j], r)) {
                Some(d) if d != arr.shape => arr.resized(&d),
                _ => arr,
            });
        }
        Ok(out)
    }

    /// `real` with the sizes the program computed from data, read from the results after the
    /// outputs (see [`Bucket::computed`]).
    fn with_computed_sizes(
        &self,
        bucket: &Bucket,
        real: Option<RealSizes>,
        outs: &[Vec<Buffer>],
    ) -> Result<Option<RealSizes>, Error> {
        if bucket.computed.is_empty() {
            return Ok(real);
        }
        let first = self.art.manifest.signature.outputs.len();
        let mut real = real.unwrap_or_default();
        for (k, symbol) in bucket.computed.iter().enumerate() {
            let buffer = outs.first().and_then(|o| o.get(first + k)).ok_or_else(|| {
                RunError::Decode(format!("bucket {} returns no value for the size `{symbol}`", bucket.name))
            })?;
            let bytes = buffer.to_host().map_err(RunError::Execute)?;
            let value = <[u8; 8]>::try_from(bytes.as_slice())
                .map(i64::from_le_bytes)
                .map_err(|_| RunError::Decode(format!("the size `{symbol}` is not one i64")))?;
            let max = bucket.bindings.get(symbol).copied().unwrap_or(0);
            if !(0..=max).contains(&value) {
                return Err(RunError::ComputedSize { symbol: symbol.clone(), value, max }.into());
            }
            real.insert(symbol.clone(), value);
        }
        Ok(Some(real))
    }

    /// Output `j` of a bucket's results (`buffer`), on the host at the bucket's sizes.
    fn host_output(&self, bucket: &Bucket, buffer: &Buffer, j: usize) -> Result<Array, Error> {
        let sig = &self.art.manifest.signature.outputs[j];
        let dtype =
            parse_dtype(&sig.dtype).ok_or_else(|| RunError::Weights(format!("unknown output dtype {}", sig.dtype)))?;
        let data = buffer.to_host().map_err(RunError::Execute)?;
        Ok(Array { dtype, shape: bucket.output_dims[j].clone(), data })
    }

    /// Each updated weight takes its new value: the output buffers themselves where each
    /// device's result is its piece of the weight (a whole weight, or a split one that the
    /// program returns split alike: no copy), else each device's piece of the whole result
    /// (read once from the first device; artifacts compiled before results were split alike).
    fn keep_state(&mut self, bucket: &Bucket, outs: &mut [Vec<Buffer>]) -> Result<(), Error> {
        let m = &self.art.manifest;
        for &(slot, output) in &self.updated {
            let name = &m.weights.order[slot];
            let split = self.placement.split(m.sharding.as_ref().and_then(|s| s.weights.get(name)));
            let piece = self.placement.piece_dims(&bucket.output_dims[output], split.as_ref());
            let whole = match &split {
                Some(_) if outs[0][output].dims().map_err(RunError::Execute)? != piece => {
                    Some(self.host_output(bucket, &outs[0][output], output)?)
                }
                _ => None,
            };
            for (d, results) in outs.iter_mut().enumerate() {
                self.weights.buffers[d][slot] = match &whole {
                    None => std::mem::replace(&mut results[output], placeholder(&self.client, d)?),
                    Some(a) => {
                        let (piece, dims) =
                            self.placement.piece(&a.data, &a.shape, a.dtype.size_bytes(), split.as_ref(), d)?;
                        to_device(&self.client, d, a.dtype, &piece, &dims)?
                    }
                };
            }
        }
        Ok(())
    }
}

/// The value of each symbol at a call's real sizes.
type RealSizes = BTreeMap<String, i64>;

/// The bucket that runs `inputs` (named by `labels` in messages) and the real sizes of a
/// dynamic program, after checking their shapes.
pub(super) fn bucket_for_inputs<'m>(
    m: &'m Manifest,
    inputs: &[&Array],
    labels: &[PathBuf],
) -> Result<(&'m Bucket, Option<RealSizes>), Error> {
    super::check_count(m, inputs.len())?;
    if labels.len() != inputs.len() {
        return Err(RunError::Weights(format!("{} labels for {} inputs", labels.len(), inputs.len())).into());
    }
    for (index, (a, label)) in inputs.iter().zip(labels).enumerate() {
        super::check_dtype(m, index, a, label)?;
    }
    let shapes: Vec<&[i64]> = inputs.iter().map(|a| a.shape.as_slice()).collect();
    if m.buckets.iter().any(|b| !b.sizes.is_empty()) {
        let real = real_sizes(m, &shapes, labels)?;
        let bucket = smallest_bucket(m, &real, inputs, labels)?;
        check_guards(m, &shapes, Some(&real))?;
        Ok((bucket, Some(real)))
    } else {
        let bucket = pick_bucket(&m.buckets, inputs, labels, m)?;
        check_guards(m, &shapes, None)?;
        Ok((bucket, None))
    }
}

/// Whether `path` is a zip archive (a `.pt2`), by its first bytes.
fn is_archive(path: &Path) -> Result<bool, Error> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut magic));
    let n = read.map_err(|e| RunError::Checkpoint { path: path.display().to_string(), reason: e.to_string() })?;
    Ok(n == 4 && magic == *b"PK\x03\x04")
}

/// A file removed when dropped (a mapped file stays readable until it is unmapped).
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The weights of the `.pt2` at `model` for `art`'s programs, written to a temporary file
/// (under `$TMPDIR`; it needs the weights' size).
#[cfg(feature = "mlir")]
fn refitted(art: &crate::artifact::Artifact, model: &Path) -> Result<Removed, Error> {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let program = crate::import::import(model)?;
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file =
        Removed(std::env::temp_dir().join(format!("torchtpu-checkpoint-{}-{n}.safetensors", std::process::id())));
    crate::compile::refit(&program, model, art, &file.0)?;
    Ok(file)
}

#[cfg(not(feature = "mlir"))]
fn refitted(_: &crate::artifact::Artifact, model: &Path) -> Result<Removed, Error> {
    Err(Error::Unsupported(format!(
        "`{}` is a `.pt2`: taking its weights lowers it, and this build has no compiler (the `mlir` feature)",
        model.display()
    )))
}

/// A one-byte buffer left where an output buffer was taken out of the results.
fn placeholder(client: &Client, device: usize) -> Result<Buffer, Error> {
    to_device(client, device, DType::U8, &[0], &[])
}
