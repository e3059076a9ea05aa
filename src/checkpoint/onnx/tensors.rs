//! The constant tensors the last layer's search decodes: a `TensorProto` of f32, f64, f16 or
//! bf16 values to f32, from the model's bytes or an external data file, every count checked
//! against the bytes present before anything is kept.

use super::external::tensor_external;
use super::protobuf::{fields, int64, varint, Wire};
use std::path::Path;

/// A constant tensor, decoded to f32: its dims and values.
pub(super) struct Constant {
    pub(super) dims: Vec<usize>,
    pub(super) values: Vec<f32>,
}

/// An IEEE half-precision value's bits as f32.
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f32::from(h & 0x3ff);
    match exp {
        0 => sign * mant * 2f32.powi(-24),
        31 if mant == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + mant / 1024.0) * 2f32.powi(e - 15),
    }
}

/// Decodes a `TensorProto` of f32, f64, f16 or bf16 values, stored in the file (raw bytes or
/// typed fields) or, with `dir`, in an external data file below it; every count is checked
/// against the bytes present before anything is kept.
pub(super) fn decode_tensor(t: &[u8], dir: Option<&Path>) -> std::result::Result<Constant, String> {
    let external = tensor_external(t)?;
    let f = ValueFields::read(t)?;
    let dims: Vec<usize> = f
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d}")))
        .collect::<std::result::Result<_, _>>()?;
    let count = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("dimensions whose product overflows")?;
    let size = value_size(f.dtype)?;
    let read;
    let mut raw = f.raw;
    if let Some((_, ext)) = external {
        let dir = dir.ok_or("its values are kept in an external data file")?;
        let want = count
            .checked_mul(size)
            .ok_or("dimensions whose product overflows")?;
        read = ext.read(dir, want)?;
        raw = Some(&read[..]);
    }
    let values = match raw {
        Some(b) if Some(b.len()) != count.checked_mul(size) => {
            return Err(format!(
                "{} bytes of data for {count} values of {size} bytes",
                b.len()
            ))
        }
        Some(b) => from_raw(b, f.dtype),
        None => f.typed(),
    };
    if values.len() != count {
        return Err(format!("{} values for dimensions {dims:?}", values.len()));
    }
    Ok(Constant { dims, values })
}

/// The fields of a `TensorProto` that say its values: dims, data type, and the values in
/// whichever of its fields the writer used.
#[derive(Default)]
struct ValueFields<'a> {
    dims: Vec<i64>,
    dtype: i64,
    raw: Option<&'a [u8]>,
    floats: Vec<f32>,
    doubles: Vec<f32>,
    int32s: Vec<u32>,
}

impl<'a> ValueFields<'a> {
    fn read(t: &'a [u8]) -> std::result::Result<Self, String> {
        let mut v = ValueFields::default();
        for f in fields(t) {
            match f? {
                (1, Wire::Bytes(mut b)) => {
                    while !b.is_empty() {
                        v.dims.push(varint(&mut b)? as i64);
                    }
                }
                (1, w) => v.dims.push(int64(w, "a dimension")?),
                (2, w) => v.dtype = int64(w, "a data type")?,
                (4, Wire::Bytes(b)) => {
                    if b.len() % 4 != 0 {
                        return Err("float data of a length not a multiple of 4".into());
                    }
                    v.floats.extend(b.chunks_exact(4).map(le_f32));
                }
                (4, Wire::I32(x)) => v.floats.push(f32::from_bits(x)),
                (5, Wire::Bytes(mut b)) => {
                    while !b.is_empty() {
                        v.int32s.push(varint(&mut b)? as u32);
                    }
                }
                (5, Wire::Varint(x)) => v.int32s.push(x as u32),
                (9, Wire::Bytes(b)) => v.raw = Some(b),
                (10, Wire::Bytes(b)) => {
                    if b.len() % 8 != 0 {
                        return Err("double data of a length not a multiple of 8".into());
                    }
                    v.doubles.extend(b.chunks_exact(8).map(le_f64));
                }
                (10, Wire::I64(x)) => v.doubles.push(f64::from_bits(x) as f32),
                _ => {}
            }
        }
        Ok(v)
    }

    /// The values from the typed field of the data type ([`value_size`] checked it).
    fn typed(self) -> Vec<f32> {
        match self.dtype {
            1 => self.floats,
            11 => self.doubles,
            10 => self.int32s.iter().map(|&v| f16_to_f32(v as u16)).collect(),
            _ => self
                .int32s
                .iter()
                .map(|&v| f32::from_bits(v << 16))
                .collect(),
        }
    }
}

/// Bytes per value of the data types read: float (1), double (11), float16 (10), bfloat16 (16).
fn value_size(dtype: i64) -> std::result::Result<usize, String> {
    match dtype {
        1 => Ok(4),
        11 => Ok(8),
        10 | 16 => Ok(2),
        d => Err(format!(
            "data type {d} (alkit reads float, double, float16, bfloat16)"
        )),
    }
}

/// Raw little-endian bytes of `dtype` (its length checked) as f32 values.
fn from_raw(b: &[u8], dtype: i64) -> Vec<f32> {
    match dtype {
        1 => b.chunks_exact(4).map(le_f32).collect(),
        11 => b.chunks_exact(8).map(le_f64).collect(),
        10 => b
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        _ => b
            .chunks_exact(2)
            .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
            .collect(),
    }
}

fn le_f32(c: &[u8]) -> f32 {
    f32::from_le_bytes([c[0], c[1], c[2], c[3]])
}

fn le_f64(c: &[u8]) -> f32 {
    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
}
