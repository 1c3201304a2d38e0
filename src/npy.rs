//! NumPy `.npy` files: the input and output format of `run`.
//!
//! Reads format versions 1–3 (little-endian; C order, or Fortran order turned row-major) and
//! writes version 1 in C order. numpy has no
//! bfloat16 or fp8: such outputs are written widened to float32 (exactly), and float32 inputs
//! are accepted for them (rounded to nearest even).

use std::path::Path;

use thiserror::Error;
use torchtpu_passes::ir::DType;

/// A dense array: dtype, shape and little-endian row-major bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// The element type.
    pub dtype: DType,
    /// The dims, outermost first.
    pub shape: Vec<i64>,
    /// The elements, row-major, little-endian.
    pub data: Vec<u8>,
}

#[derive(Debug, Error)]
pub enum NpyError {
    #[error("cannot read `{path}`: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("`{path}` is not a valid .npy file: {reason}")]
    Format { path: String, reason: String },
}

/// The numpy `descr` of a dtype, if numpy has one.
fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::C64 => "<c8",
        DType::C128 => "<c16",
        _ => return None,
    })
}

fn dtype_of_descr(s: &str) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&d| descr(d) == Some(s) || descr(d).map(|x| x.replace('<', "|")) == Some(s.to_string()))
}

impl Array {
    /// The array resized to `dims` (same rank): positions inside both shapes keep their
    /// values, new positions are zero — padding up to a bucket and slicing back in one.
    pub fn resized(&self, dims: &[i64]) -> Array {
        let elem = self.dtype.size_bytes();
        let rank = dims.len();
        let numel = |d: &[i64]| d.iter().product::<i64>().max(0) as usize;
        let mut data = vec![0u8; numel(dims) * elem];
        if rank == 0 || rank != self.shape.len() {
            let n = data.len().min(self.data.len());
            data[..n].copy_from_slice(&self.data[..n]);
            return Array { dtype: self.dtype, shape: dims.to_vec(), data };
        }
        let common: Vec<i64> = dims.iter().zip(&self.shape).map(|(&a, &b)| a.min(b)).collect();
        let row = common[rank - 1].max(0) as usize * elem;
        for r in 0..numel(&common[..rank - 1]) {
            let (mut rest, mut src, mut dst) = (r, 0usize, 0usize);
            let (mut src_stride, mut dst_stride) = (self.shape[rank - 1] as usize, dims[rank - 1] as usize);
            for d in (0..rank - 1).rev() {
                let i = rest % common[d] as usize;
                rest /= common[d] as usize;
                src += i * src_stride;
                dst += i * dst_stride;
                src_stride *= self.shape[d] as usize;
                dst_stride *= dims[d] as usize;
            }
            data[dst * elem..dst * elem + row].copy_from_slice(&self.data[src * elem..src * elem + row]);
        }
        Array { dtype: self.dtype, shape: dims.to_vec(), data }
    }

    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }

    /// Reads a `.npy` file.
    pub fn read(path: &Path) -> Result<Array, NpyError> {
        let bytes = std::fs::read(path).map_err(|source| NpyError::Io { path: path.display().to_string(), source })?;
        Array::parse(&bytes).map_err(|reason| NpyError::Format { path: path.display().to_string(), reason })
    }

    /// Parses the bytes of a `.npy` file.
    pub fn parse(bytes: &[u8]) -> Result<Array, String> {
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err("missing the \\x93NUMPY magic".into());
        }
        let (header_len, start) = match bytes[6] {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
            v => return Err(format!("unsupported format version {v}")),
        };
        let header = bytes.get(start..start + header_len).ok_or("truncated header")?;
        let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
        let descr = dict_value(header, "descr").and_then(quoted).ok_or("header has no 'descr' string")?;
        let dtype = dtype_of_descr(descr).ok_or_else(|| format!("unsupported dtype '{descr}'"))?;
        let fortran = dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True"));
        let shape_text = dict_value(header, "shape").ok_or("header has no 'shape'")?;
        let shape = parse_shape(shape_text)?;
        let data = &bytes[start + header_len..];
        let want = shape
            .iter()
            .try_fold(dtype.size_bytes(), |n, &d| n.checked_mul(d as usize))
            .ok_or_else(|| format!("shape {shape:?} of {dtype} is too large"))?;
        if data.len() != want {
            return Err(format!("shape {shape:?} of {dtype} needs {want} data bytes, the file has {}", data.len()));
        }
        let data = if fortran { row_major(data, &shape, dtype.size_bytes()) } else { data.to_vec() };
        Ok(Array { dtype, shape, data })
    }

    /// The `.npy` bytes (format version 1). Dtypes numpy lacks (bf16, fp8) are widened to f32.
    pub fn to_npy(&self) -> Vec<u8> {
        let wide;
        let arr = if descr(self.dtype).is_none() {
            wide = self.widened_to_f32();
            &wide
        } else {
            self
        };
        let shape: Vec<String> = arr.shape.iter().map(ToString::to_string).collect();
        let shape = if shape.len() == 1 { format!("({},)", shape[0]) } else { format!("({})", shape.join(", ")) };
        let mut header =
            format!("{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}", descr(arr.dtype).unwrap_or("<f4"));
        // Pad with spaces so that the data starts on a 64-byte boundary, ending in '\n'.
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + arr.data.len());
        out.extend_from_slice(b"\x93NUMPY\x01\x00");
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&arr.data);
        out
    }

    /// Writes a `.npy` file.
    pub fn write(&self, path: &Path) -> Result<(), NpyError> {
        std::fs::write(path, self.to_npy()).map_err(|source| NpyError::Io { path: path.display().to_string(), source })
    }

    /// The same values as f32 (exact for bf16, f16 and the fp8 formats that fit).
    fn widened_to_f32(&self) -> Array {
        let data: Vec<u8> = match self.dtype {
            DType::BF16 => self
                .data
                .chunks_exact(2)
                .flat_map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32().to_le_bytes())
                .collect(),
            _ => self.data.clone(),
        };
        Array { dtype: DType::F32, shape: self.shape.clone(), data }
    }

    /// Converts an f32 array to bf16 with round-to-nearest-even (the accepted form of bf16 inputs).
    pub fn f32_to_bf16(&self) -> Option<Array> {
        if self.dtype != DType::F32 {
            return None;
        }
        let data = self
            .data
            .chunks_exact(4)
            .flat_map(|c| half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
            .collect();
        Some(Array { dtype: DType::BF16, shape: self.shape.clone(), data })
    }

    /// A complex array as its real and imaginary parts: a float array with a trailing dim of 2
    /// over the same bytes; `None` for other dtypes.
    pub fn complex_parts(&self) -> Option<Array> {
        let part = self.dtype.complex_part()?;
        let mut shape = self.shape.clone();
        shape.push(2);
        Some(Array { dtype: part, shape, data: self.data.clone() })
    }

    /// Elements `start..start + len` as f32, the dtype matched once rather than per element
    /// (a decode step's logits row: 128k values a call); `None` past the end or for complex
    /// dtypes.
    pub fn f32_range(&self, start: usize, len: usize) -> Option<Vec<f32>> {
        let es = self.dtype.size_bytes();
        let bytes = self.data.get(start.checked_mul(es)?..start.checked_add(len)?.checked_mul(es)?)?;
        Some(match self.dtype {
            DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            DType::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            DType::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            _ => (start..start + len).map(|i| self.get_f64(i).map(|v| v as f32)).collect::<Option<_>>()?,
        })
    }

    /// Element `i` as f64 (for comparisons), `None` for complex dtypes.
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        let es = self.dtype.size_bytes();
        let b = self.data.get(i * es..(i + 1) * es)?;
        Some(match self.dtype {
            DType::Bool | DType::U8 => f64::from(b[0]),
            DType::I8 => f64::from(b[0] as i8),
            DType::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
            DType::U16 => f64::from(u16::from_le_bytes([b[0], b[1]])),
            DType::I32 => f64::from(i32::from_le_bytes(b.try_into().ok()?)),
            DType::U32 => f64::from(u32::from_le_bytes(b.try_into().ok()?)),
            DType::I64 => i64::from_le_bytes(b.try_into().ok()?) as f64,
            DType::U64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
            DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::F32 => f64::from(f32::from_le_bytes(b.try_into().ok()?)),
            DType::F64 => f64::from_le_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
}

/// The text after `'key':` in a Python dict literal, up to the end of the value.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'")).or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    Some(rest.trim_start().strip_prefix(':')?.trim_start())
}

/// The content of a leading quoted string.
fn quoted(text: &str) -> Option<&str> {
    let q = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    text[1..].split(q).next()
}

fn parse_shape(text: &str) -> Result<Vec<i64>, String> {
    let inner = text.strip_prefix('(').and_then(|t| t.split_once(')')).map(|(s, _)| s).ok_or("bad shape")?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.trim_end_matches('L').parse::<i64>() {
            Ok(d) if d >= 0 => Ok(d),
            _ => Err(format!("bad shape entry '{s}'")),
        })
        .collect()
}

/// The elements of a Fortran-order (column-major) array of `shape`, in row-major order.
fn row_major(column_major: &[u8], shape: &[i64], elem: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let mut strides = vec![1usize; dims.len()];
    for k in 1..dims.len() {
        strides[k] = strides[k - 1] * dims[k - 1];
    }
    let mut out = Vec::with_capacity(column_major.len());
    let mut index = vec![0usize; dims.len()];
    for _ in 0..column_major.len() / elem.max(1) {
        let src = index.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>() * elem;
        out.extend_from_slice(&column_major[src..src + elem]);
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_widens_bf16() {
        let a = Array {
            dtype: DType::I64,
            shape: vec![2, 1],
            data: [7i64, -3].iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let bytes = a.to_npy();
        assert_eq!(bytes.len() % 64, 16, "data starts 64-byte aligned");
        assert_eq!(Array::parse(&bytes).unwrap(), a);
        let one = Array { dtype: DType::BF16, shape: vec![1], data: half::bf16::from_f32(1.5).to_le_bytes().to_vec() };
        let back = Array::parse(&one.to_npy()).unwrap();
        assert_eq!((back.dtype, back.get_f64(0)), (DType::F32, Some(1.5)));
        assert_eq!(back.f32_to_bf16().unwrap(), one);
        let scalar = Array { dtype: DType::Bool, shape: vec![], data: vec![1] };
        assert_eq!(Array::parse(&scalar.to_npy()).unwrap(), scalar);
    }

    #[test]
    fn rejects_malformed_files() {
        assert!(Array::parse(b"not npy").unwrap_err().contains("magic"));
        let mut bytes = Array { dtype: DType::F32, shape: vec![4], data: vec![0; 16] }.to_npy();
        bytes.truncate(bytes.len() - 1);
        assert!(Array::parse(&bytes).unwrap_err().contains("needs 16 data bytes"));
        let huge = Array { dtype: DType::F32, shape: vec![1 << 62, 1 << 62], data: vec![] }.to_npy();
        assert!(Array::parse(&huge).unwrap_err().contains("too large"));
        let negative = Array { dtype: DType::F32, shape: vec![-1], data: vec![] }.to_npy();
        assert!(Array::parse(&negative).unwrap_err().contains("bad shape entry '-1'"));
    }

    #[test]
    fn reads_fortran_order_as_row_major() {
        // np.asfortranarray([[1, 2, 3], [4, 5, 6]]) stores its columns one after another.
        let column_major = Array { dtype: DType::U8, shape: vec![2, 3], data: vec![1, 4, 2, 5, 3, 6] };
        let mut bytes = column_major.to_npy();
        let at = bytes.windows(5).position(|w| w == b"False").unwrap();
        bytes[at..at + 5].copy_from_slice(b"True ");
        assert_eq!(Array::parse(&bytes).unwrap().data, [1, 2, 3, 4, 5, 6]);
    }
}

#[cfg(test)]
mod resize_tests {
    use super::Array;
    use torchtpu_passes::ir::DType;

    #[test]
    fn pads_with_zeros_and_slices_back() {
        let a = Array { dtype: DType::U8, shape: vec![2, 3], data: vec![1, 2, 3, 4, 5, 6] };
        let p = a.resized(&[3, 4]);
        assert_eq!(p.data, [1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0]);
        assert_eq!(p.resized(&[2, 3]).data, a.data);
        assert_eq!(a.resized(&[1, 2]).data, [1, 2]);
    }
}
