//! Device meshes and shardings: how a program for several devices splits its tensors.
//!
//! A [`Mesh`] names the axes of the device grid (`dp=2, tp=4`: 8 devices, device `d` at
//! coordinates `(d / 4, d % 4)`, row-major). A [`Sharding`] says, per tensor dim, which mesh axes
//! split it (major to minor); a dim no axis splits is whole on every device, and an axis that
//! splits no dim replicates the tensor along it. This is Shardy's model (`#sdy.sharding`), which
//! the emitter writes out as it is.

use std::fmt;

/// One named axis of a device mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MeshAxis {
    /// `dp`, `fsdp`, `tp`, …: letters, digits and `_`.
    pub name: String,
    /// Devices along it, at least 1.
    pub size: i64,
}

/// The device grid of a multi-device program: its axes, major to minor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    /// Invariant (checked by [`Mesh::new`]): non-empty, names unique, sizes ≥ 1.
    pub axes: Vec<MeshAxis>,
}

impl Mesh {
    /// A mesh of `axes`, checked: at least one axis, names of letters, digits and `_` that do not
    /// repeat, sizes from 1 to 65536 and at most 65536 devices in all.
    pub fn new(axes: Vec<MeshAxis>) -> Result<Mesh, String> {
        if axes.is_empty() {
            return Err("a mesh needs at least one axis".into());
        }
        let mut devices: i64 = 1;
        for (i, a) in axes.iter().enumerate() {
            let valid = !a.name.is_empty() && a.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!("mesh axis `{}`: names are letters, digits and `_`", a.name.escape_debug()));
            }
            if axes[..i].iter().any(|b| b.name == a.name) {
                return Err(format!("mesh axis `{}` is named twice", a.name));
            }
            if !(1..=65536).contains(&a.size) {
                return Err(format!("mesh axis `{}` has {} devices; 1 to 65536", a.name, a.size));
            }
            devices = devices.saturating_mul(a.size);
        }
        if devices > 65536 {
            return Err(format!("the mesh has {devices} devices; at most 65536"));
        }
        Ok(Mesh { axes })
    }

    /// `dp=2,tp=4` (the command line's `--mesh`).
    pub fn parse(text: &str) -> Result<Mesh, String> {
        let mut axes = Vec::new();
        for part in text.split(',') {
            let (name, size) = part
                .split_once('=')
                .ok_or_else(|| format!("mesh axis `{}` is not AXIS=N", part.trim().escape_debug()))?;
            let size: i64 = size
                .trim()
                .parse()
                .map_err(|_| format!("mesh axis `{}`: `{}` is not a number", name.trim(), size.trim()))?;
            axes.push(MeshAxis { name: name.trim().to_string(), size });
        }
        Mesh::new(axes)
    }

    /// The number of devices: the product of the axis sizes.
    pub fn devices(&self) -> i64 {
        self.axes.iter().map(|a| a.size).product()
    }

    /// The axis named `name`.
    pub fn axis(&self, name: &str) -> Option<&MeshAxis> {
        self.axes.iter().find(|a| a.name == name)
    }

    /// The size of axis `name`, 1 when the mesh has no such axis.
    pub fn size(&self, name: &str) -> i64 {
        self.axis(name).map_or(1, |a| a.size)
    }

    /// Device `device`'s coordinate along each axis (row-major over the axes).
    pub fn coordinates(&self, device: i64) -> Vec<i64> {
        let mut rest = device;
        let mut coords = vec![0; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            coords[i] = rest % a.size;
            rest /= a.size;
        }
        coords
    }
}

impl Mesh {
    /// `dp=2,tp=4`, as `--mesh` takes it.
    pub fn flag_text(&self) -> String {
        self.axes.iter().map(|a| format!("{}={}", a.name, a.size)).collect::<Vec<_>>().join(",")
    }
}

impl fmt::Display for Mesh {
    /// `["dp"=2, "tp"=4]`, Shardy's form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axes: Vec<String> = self.axes.iter().map(|a| format!("\"{}\"={}", a.name, a.size)).collect();
        write!(f, "[{}]", axes.join(", "))
    }
}

/// How one tensor is split over a mesh: per dim, the axes that split it, major to minor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sharding {
    /// One entry per tensor dim. Invariant (checked by [`Sharding::check`]): every axis is the
    /// mesh's and appears at most once in all.
    pub dims: Vec<Vec<String>>,
    /// Per dim: whether the partitioner may split it along further axes (Shardy's open dims,
    /// `{?}`); a closed dim is split along exactly its axes. Empty: every dim closed. Only
    /// constraints on op results have open dims (a constraint that splits the features along
    /// `tp` leaves the batch free to be split along `dp`).
    pub open: Vec<bool>,
}

impl Sharding {
    /// Whole on every device.
    pub fn replicated(rank: usize) -> Sharding {
        Sharding { dims: vec![Vec::new(); rank], open: Vec::new() }
    }

    /// `self` with every dim that no axis splits left open, but `closed`.
    pub fn open_but(mut self, closed: &[usize]) -> Sharding {
        self.open = (0..self.dims.len()).map(|d| self.dims[d].is_empty() && !closed.contains(&d)).collect();
        if !self.open.contains(&true) {
            self.open.clear(); // every dim closed: the plain form, as the parser reads it back
        }
        self
    }

    /// Whether dim `d` is open.
    pub fn is_open(&self, d: usize) -> bool {
        self.open.get(d).copied().unwrap_or(false)
    }

    /// Dim `dim` split along `axis`, the others whole.
    pub fn split(rank: usize, dim: usize, axis: &str) -> Sharding {
        let mut s = Sharding::replicated(rank);
        if let Some(d) = s.dims.get_mut(dim) {
            d.push(axis.to_string());
        }
        s
    }

    /// True when no dim is split.
    pub fn is_replicated(&self) -> bool {
        self.dims.iter().all(Vec::is_empty)
    }

    /// How many pieces dim `dim` is split into on `mesh`.
    pub fn pieces(&self, dim: usize, mesh: &Mesh) -> i64 {
        self.dims.get(dim).map_or(1, |axes| axes.iter().map(|a| mesh.size(a)).product())
    }

    /// Checks the sharding against a tensor of `dims` on `mesh`: one entry per dim, known axes
    /// used once, and every split dim a multiple of its pieces (shards are equal).
    pub fn check(&self, dims: &[i64], mesh: &Mesh) -> Result<(), String> {
        if self.dims.len() != dims.len() {
            return Err(format!("sharding {self} has {} dims, the tensor {}", self.dims.len(), dims.len()));
        }
        if !self.open.is_empty() && self.open.len() != dims.len() {
            return Err(format!(
                "sharding {self} marks {} dims open or closed, the tensor has {}",
                self.open.len(),
                dims.len()
            ));
        }
        let mut seen: Vec<&str> = Vec::new();
        for (d, axes) in self.dims.iter().enumerate() {
            for a in axes {
                if mesh.axis(a).is_none() {
                    return Err(format!("sharding {self} names axis `{a}`, which the mesh {mesh} lacks"));
                }
                if seen.contains(&a.as_str()) {
                    return Err(format!("sharding {self} uses axis `{a}` twice"));
                }
                seen.push(a);
            }
            let pieces = self.pieces(d, mesh);
            if dims[d] % pieces != 0 {
                return Err(format!(
                    "dim {d} (size {}) does not divide into {pieces} pieces along {}",
                    dims[d],
                    axes.join("×")
                ));
            }
        }
        Ok(())
    }

    /// The shape of one device's piece of a tensor of `dims`.
    pub fn shard_dims(&self, dims: &[i64], mesh: &Mesh) -> Vec<i64> {
        dims.iter().enumerate().map(|(d, &n)| n / self.pieces(d, mesh).max(1)).collect()
    }

    /// Where device `device`'s piece starts, per dim (in elements).
    pub fn shard_offsets(&self, dims: &[i64], mesh: &Mesh, device: i64) -> Vec<i64> {
        let coords = mesh.coordinates(device);
        let coordinate = |axis: &str| mesh.axes.iter().position(|a| a.name == axis).map_or(0, |i| coords[i]);
        let shard = self.shard_dims(dims, mesh);
        self.dims
            .iter()
            .enumerate()
            .map(|(d, axes)| {
                // Axes major to minor: the piece index is their coordinates in mixed radix.
                let piece = axes.iter().fold(0, |acc, a| acc * mesh.size(a) + coordinate(a));
                piece * shard[d]
            })
            .collect()
    }
}

impl fmt::Display for Sharding {
    /// `[{"tp"}, {}]`, Shardy's form (`{?}` for an open dim).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self
            .dims
            .iter()
            .enumerate()
            .map(|(d, axes)| {
                let mut names: Vec<String> = axes.iter().map(|a| format!("\"{a}\"")).collect();
                if self.is_open(d) {
                    names.push("?".into());
                }
                format!("{{{}}}", names.join(", "))
            })
            .collect();
        write!(f, "[{}]", dims.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::{Mesh, Sharding};

    #[test]
    fn meshes_parse_and_refuse_what_is_not_one() {
        let m = Mesh::parse("dp=2,tp=4").expect("parses");
        assert_eq!((m.devices(), m.to_string()), (8, "[\"dp\"=2, \"tp\"=4]".to_string()));
        assert_eq!(m.coordinates(6), [1, 2]);
        assert!(Mesh::parse("tp").unwrap_err().contains("not AXIS=N"));
        assert!(Mesh::parse("tp=x").unwrap_err().contains("not a number"));
        assert!(Mesh::parse("tp=2,tp=2").unwrap_err().contains("named twice"));
        assert!(Mesh::parse("tp=0").unwrap_err().contains("1 to 65536"));
        assert!(Mesh::parse("a b=2").unwrap_err().contains("letters, digits"));
        assert!(Mesh::parse("a=65536,b=2").unwrap_err().contains("at most 65536"));
    }

    #[test]
    fn shards_have_shapes_and_offsets() {
        let m = Mesh::parse("dp=2,tp=2").expect("parses");
        let s = Sharding { dims: vec![vec!["tp".into()], vec![]], open: vec![] };
        assert_eq!(s.to_string(), "[{\"tp\"}, {}]");
        assert_eq!(s.shard_dims(&[8, 3], &m), [4, 3]);
        // Devices 0..4 are (dp, tp) = (0,0) (0,1) (1,0) (1,1): tp picks the rows.
        let offsets: Vec<Vec<i64>> = (0..4).map(|d| s.shard_offsets(&[8, 3], &m, d)).collect();
        assert_eq!(offsets, [[0, 0], [4, 0], [0, 0], [4, 0]]);
        let both = Sharding { dims: vec![vec!["dp".into(), "tp".into()]], open: vec![] };
        assert_eq!(Sharding::split(3, 2, "tp").open_but(&[]).to_string(), "[{?}, {?}, {\"tp\"}]");
        assert_eq!((0..4).map(|d| both.shard_offsets(&[8], &m, d)[0]).collect::<Vec<_>>(), [0, 2, 4, 6]);
        assert!(s.check(&[8, 3], &m).is_ok());
        assert!(s.check(&[7, 3], &m).unwrap_err().contains("does not divide into 2 pieces"));
        assert!(Sharding::split(2, 0, "ep").check(&[8, 3], &m).unwrap_err().contains("lacks"));
        assert!(Sharding { dims: vec![vec!["tp".into()], vec!["tp".into()]], open: vec![] }
            .check(&[8, 4], &m)
            .is_err());
    }
}
