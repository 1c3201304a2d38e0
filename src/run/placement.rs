//! Where a run's arrays go: the one device of a single-device program, or, for a program split
//! over a mesh (the manifest's `sharding`), each device its piece of every split argument and
//! the whole of every other one. A piece that is one contiguous run of the array (a split of
//! the first dim) is the array's own bytes, so weights split that way still go to the device
//! from the map; other pieces are gathered into a copy, one tensor at a time.

use std::borrow::Cow;
use std::ops::Range;

use torchtpu_passes::ir::{Mesh, Sharding};

use super::RunError;
use crate::artifact::Manifest;
use crate::Error;

/// The devices of a run and how the program splits its arguments over them.
pub(super) struct Placement {
    mesh: Option<Mesh>,
}

impl Placement {
    /// The placement the artifact's programs were compiled for.
    pub(super) fn of(m: &Manifest) -> Result<Placement, Error> {
        let mesh = match &m.sharding {
            Some(s) => Some(s.mesh().map_err(|e| RunError::Weights(format!("the manifest's mesh: {e}")))?),
            None => None,
        };
        Ok(Placement { mesh })
    }

    /// How many devices run the program.
    pub(super) fn devices(&self) -> usize {
        self.mesh.as_ref().map_or(1, |m| m.devices() as usize)
    }

    /// A split as the manifest writes it (per dim, the axes), for this placement's mesh.
    pub(super) fn split(&self, dims: Option<&Vec<Vec<String>>>) -> Option<Sharding> {
        let dims = dims?.clone();
        let s = Sharding { dims, open: Vec::new() };
        (self.mesh.is_some() && !s.is_replicated()).then_some(s)
    }

    /// The dims of each device's piece of an array of `dims` under `split` (`None`: whole).
    pub(super) fn piece_dims(&self, dims: &[i64], split: Option<&Sharding>) -> Vec<i64> {
        match (&self.mesh, split) {
            (Some(mesh), Some(split)) => split.shard_dims(dims, mesh),
            _ => dims.to_vec(),
        }
    }

    /// The piece of the row-major array `bytes` (`dims`, `element` bytes each) device `device`
    /// holds under `split` (`None`: the whole array), and its dims.
    pub(super) fn piece<'a>(
        &self,
        bytes: &'a [u8],
        dims: &[i64],
        element: usize,
        split: Option<&Sharding>,
        device: usize,
    ) -> Result<(Cow<'a, [u8]>, Vec<i64>), Error> {
        let (Some(mesh), Some(split)) = (&self.mesh, split) else { return Ok((Cow::Borrowed(bytes), dims.to_vec())) };
        split.check(dims, mesh).map_err(|e| RunError::Weights(format!("an argument of shape {dims:?}: {e}")))?;
        let shard = split.shard_dims(dims, mesh);
        let offsets = split.shard_offsets(dims, mesh, device as i64);
        Ok((gather(bytes, dims, element, &shard, &offsets), shard))
    }

    /// The whole row-major array of `dims` (`element` bytes each) from every device's piece
    /// under `split` (`pieces[d]`: device `d`'s); the inverse of [`Placement::piece`].
    pub(super) fn assemble(
        &self,
        pieces: &[Vec<u8>],
        dims: &[i64],
        element: usize,
        split: Option<&Sharding>,
    ) -> Vec<u8> {
        let (Some(mesh), Some(split)) = (&self.mesh, split) else { return pieces[0].clone() };
        let shard = split.shard_dims(dims, mesh);
        let mut whole = vec![0u8; dims.iter().product::<i64>() as usize * element];
        for (d, piece) in pieces.iter().enumerate() {
            let offsets = split.shard_offsets(dims, mesh, d as i64);
            let mut at = 0;
            for r in runs(dims, element, &shard, &offsets) {
                let len = r.len();
                whole[r].copy_from_slice(&piece[at..at + len]);
                at += len;
            }
        }
        whole
    }
}

/// The block of `shard` elements starting at `offsets` of a row-major array of `dims`: the
/// bytes themselves when it is one run, else a copy of its runs.
fn gather<'a>(bytes: &'a [u8], dims: &[i64], element: usize, shard: &[i64], offsets: &[i64]) -> Cow<'a, [u8]> {
    let runs = runs(dims, element, shard, offsets);
    if let [one] = &runs[..] {
        return Cow::Borrowed(&bytes[one.clone()]);
    }
    let mut out = Vec::with_capacity(runs.iter().map(|r| r.len()).sum());
    for r in runs {
        out.extend_from_slice(&bytes[r]);
    }
    Cow::Owned(out)
}

/// The byte ranges of a row-major array of `dims` that the block of `shard` elements starting
/// at `offsets` covers, in the block's own row-major order (one range when it is contiguous).
fn runs(dims: &[i64], element: usize, shard: &[i64], offsets: &[i64]) -> Vec<Range<usize>> {
    let rank = dims.len();
    let whole = dims.iter().product::<i64>() as usize * element;
    // The last split dim: below it every piece is whole, so it and what follows are one run.
    let Some(k) = (0..rank).rev().find(|&d| shard[d] != dims[d]) else { return std::iter::once(0..whole).collect() };
    let stride = |d: usize| dims[d + 1..].iter().product::<i64>() as usize * element;
    let run = shard[k] as usize * stride(k);
    let start_of = |index: &[i64]| -> usize {
        (0..=k).map(|d| (offsets[d] + if d < k { index[d] } else { 0 }) as usize * stride(d)).sum()
    };
    let mut out = Vec::new();
    let mut index = vec![0i64; k];
    loop {
        let at = start_of(&index);
        out.push(at..at + run);
        // The next index over the leading dims' pieces, last dim fastest.
        let mut d = k;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shard[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{gather, Placement};
    use torchtpu_passes::ir::{Mesh, Sharding};

    /// A 4×6 array cut over a 2×2 mesh (rows by `dp`, columns by `tp`) and put back whole.
    #[test]
    fn pieces_assemble_into_the_whole() {
        let mesh = Mesh::parse("dp=2,tp=2").expect("a mesh");
        let placement = Placement { mesh: Some(mesh) };
        let split = Sharding { dims: vec![vec!["dp".into()], vec!["tp".into()]], open: Vec::new() };
        let bytes: Vec<u8> = (0..48).collect();
        let pieces: Vec<Vec<u8>> = (0..4)
            .map(|d| placement.piece(&bytes, &[4, 6], 2, Some(&split), d).expect("a piece").0.into_owned())
            .collect();
        assert!(pieces.iter().all(|p| p.len() == 12));
        assert_eq!(placement.assemble(&pieces, &[4, 6], 2, Some(&split)), bytes);
    }

    /// A 4×6 array of bytes 0..24, cut four ways.
    #[test]
    fn pieces_are_the_right_elements() {
        let bytes: Vec<u8> = (0..24).collect();
        // Rows 2..4: one run, borrowed.
        let rows = gather(&bytes, &[4, 6], 1, &[2, 6], &[2, 0]);
        assert!(matches!(rows, std::borrow::Cow::Borrowed(_)));
        assert_eq!(&rows[..], &(12..24).collect::<Vec<u8>>()[..]);
        // Columns 3..6: a run per row.
        assert_eq!(&gather(&bytes, &[4, 6], 1, &[4, 3], &[0, 3])[..], &[3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23]);
        // A block.
        assert_eq!(&gather(&bytes, &[4, 6], 1, &[2, 2], &[2, 4])[..], &[16, 17, 22, 23]);
        // Whole: the array itself.
        assert_eq!(gather(&bytes, &[4, 6], 1, &[4, 6], &[0, 0]).len(), 24);
        // Two-byte elements, 3-d, the middle dim split.
        let wide: Vec<u8> = (0..48).collect();
        assert_eq!(
            &gather(&wide, &[2, 2, 6], 2, &[2, 1, 6], &[0, 1, 0])[..],
            &[&wide[12..24], &wide[36..48]].concat()[..]
        );
    }
}
