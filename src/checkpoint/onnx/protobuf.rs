//! The protobuf wire format, as far as ONNX's graph needs it: a reader of one message's
//! fields that checks every length against what is left (an error ends the reading, never a
//! panic), the typed views of a field alkit reads, and the one writer a model's extra output
//! needs.

/// One field's value (wire types 0, 1, 2 and 5; the deprecated groups are refused).
#[derive(Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    I64(u64),
    Bytes(&'a [u8]),
    I32(u32),
}

/// The fields of one message, in order; an error ends the iteration.
pub(super) struct Fields<'a> {
    buf: &'a [u8],
    failed: bool,
}

/// The fields of the message `buf`.
pub(super) fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, failed: false }
}

/// One varint, taken off the front of `buf`.
pub(super) fn varint(buf: &mut &[u8]) -> std::result::Result<u64, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf
            .split_first()
            .ok_or_else(|| "a number runs past the end".to_string())?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a number longer than 10 bytes".into())
}

/// The next `n` bytes of `buf`, taken off its front.
fn take<'a>(buf: &mut &'a [u8], n: usize) -> std::result::Result<&'a [u8], String> {
    if n > buf.len() {
        return Err(format!(
            "a field of {n} bytes where {} are left (truncated?)",
            buf.len()
        ));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> std::result::Result<(u64, Wire<'a>), String> {
        let key = varint(&mut self.buf)?;
        let field = key >> 3;
        if field == 0 {
            return Err("field number 0".into());
        }
        let value = match key & 7 {
            0 => Wire::Varint(varint(&mut self.buf)?),
            1 => {
                let b = take(&mut self.buf, 8)?;
                Wire::I64(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?))
            }
            2 => {
                let n = varint(&mut self.buf)?;
                let n = usize::try_from(n).map_err(|_| format!("a length of {n}"))?;
                Wire::Bytes(take(&mut self.buf, n)?)
            }
            5 => {
                let b = take(&mut self.buf, 4)?;
                Wire::I32(u32::from_le_bytes(b.try_into().map_err(|_| "4 bytes")?))
            }
            w => return Err(format!("wire type {w} (not a protobuf message)")),
        };
        Ok((field, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = std::result::Result<(u64, Wire<'a>), String>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.buf.is_empty() {
            return None;
        }
        let r = self.read();
        self.failed = r.is_err();
        Some(r)
    }
}

/// A length-delimited field read as UTF-8 text.
pub(super) fn string(w: Wire<'_>, what: &str) -> std::result::Result<String, String> {
    match w {
        Wire::Bytes(b) => std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| format!("{what} is not UTF-8")),
        _ => Err(format!("{what} is not a string")),
    }
}

/// A length-delimited field's bytes (an embedded message).
pub(super) fn bytes<'a>(w: Wire<'a>, what: &str) -> std::result::Result<&'a [u8], String> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(format!("{what} is not a message")),
    }
}

/// A varint read as protobuf's `int64` (two's complement).
pub(super) fn int64(w: Wire<'_>, what: &str) -> std::result::Result<i64, String> {
    match w {
        Wire::Varint(v) => Ok(v as i64),
        _ => Err(format!("{what} is not an integer")),
    }
}

/// A length-delimited field `number` holding `payload`, as protobuf writes it.
pub(super) fn message_field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 12);
    write_varint((number << 3) | 2, &mut out);
    write_varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}
