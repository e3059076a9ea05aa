//! PyTorch's own weight files, as `torch.save(model.state_dict(), "x.pth")` and timm's
//! `save_pretrained(..., safe_serialization=False)` (`pytorch_model.bin`) write them, read
//! without running any of their code.
//!
//! Both formats `torch.save` writes are read: the zip archive (the default since PyTorch 1.6:
//! `NAME/data.pkl`, a pickle of the saved object whose tensors point by key at the stored
//! entries `NAME/data/KEY`) and the older sequential file (`_use_new_zipfile_serialization=
//! False`: magic number, protocol and system pickles, the object's pickle, the storage keys,
//! then each storage's bytes). A pickle is a program for Python's unpickler, which may call any
//! function it names; here it is interpreted by a small stack machine that knows a few of
//! PyTorch's names (the tensor rebuild functions, the storage types, `OrderedDict`) and never
//! calls anything: any other named object stays an opaque value, so a whole pickled model
//! (`torch.save(model)`, which only its own Python classes can rebuild) is recognised and
//! refused by its class name. The saved object may be a state dict or a training checkpoint
//! holding one (`{"state_dict": ...}`, `{"model": ...}`, `{"model_state_dict": ...}`).
//!
//! Every size is checked against the bytes that hold it before anything is allocated: the
//! pickle is read whole up to 64 MiB, every object it builds costs at least one
//! of its bytes, a storage's declared element count must match its stored bytes, and a
//! tensor's view (offset, shape, strides) must lie inside its storage and be no larger than
//! it. candle's own `pickle` module was not used because it panics on short argument tuples,
//! copies memoised objects (a few hundred bytes can ask for exponential memory), allocates a
//! string's declared length and a tensor's declared shape before reading them, prints to
//! stderr, reads no legacy files, and skips tensors it cannot read without saying so.

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// The largest pickle read (a ResNet-50's state dict pickles to about 40 KB).
const MAX_PICKLE_BYTES: u64 = 64 << 20;

/// `torch.serialization.MAGIC_NUMBER`, pickled first in a legacy file.
const LEGACY_MAGIC: u128 = 0x1950a86a20f9469cfc6c;

/// What the first bytes of a weights file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A safetensors file (a little-endian header length, then a JSON header).
    Safetensors,
    /// `torch.save`'s zip archive.
    TorchZip,
    /// `torch.save`'s legacy sequential file (a pickle first).
    TorchLegacy,
}

/// Recognises a weights file by its first bytes (`None`: none of the [`Format`]s).
pub fn sniff(path: &Path) -> Result<Option<Format>> {
    let mut head = [0u8; 10];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]).map_err(|e| Error::io(path, e))? {
            0 => break,
            k => n += k,
        }
    }
    let head = &head[..n];
    Ok(
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Format::TorchZip)
        } else if head.starts_with(&[0x80, 0x02, 0x8a, 0x0a]) {
            Some(Format::TorchLegacy)
        } else if n >= 9 && head[8] == b'{' {
            Some(Format::Safetensors)
        } else {
            None
        },
    )
}

/// Reads every tensor of a PyTorch weights file (either format) on the CPU, by its
/// state-dict name, in the dtype it was saved in.
pub fn read(path: &Path) -> Result<HashMap<String, Tensor>> {
    match sniff(path)? {
        Some(Format::TorchZip) => read_zip(path),
        Some(Format::TorchLegacy) => read_legacy(path),
        _ => Err(Error::state(
            path,
            "not a PyTorch file (neither torch.save's zip archive nor its legacy format)",
        )),
    }
}

/// A value the pickle built; objects live in an arena and are shared by index, as Python's
/// memo shares them.
#[derive(Debug, Clone)]
enum Obj {
    None,
    /// A boolean or a float: values a state dict's tensors never need.
    Scalar,
    Int(i64),
    Str(String),
    Tuple(Vec<usize>),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    /// A name (`module.name`) the pickle refers to; never looked up or called.
    Global(String),
    /// The result of calling a name we do not interpret: its class or function name.
    Opaque(String),
    /// A storage by key: `torch.save`'s persistent id.
    Storage(Box<StorageRef>),
    Tensor(Box<TensorRef>),
}

/// A storage as its persistent id declares it (boxed in [`Obj`], so that every value a pickle
/// builds costs 32 bytes at most and the arena's memory stays a small multiple of the
/// pickle's bytes).
#[derive(Debug, Clone)]
struct StorageRef {
    key: String,
    dtype: Option<DType>,
    type_name: String,
    numel: u64,
}

/// The most values one pickle may hold at once, its stack, marks, memo entries and the
/// contents of its tuples, lists and dicts counted too: 2^21, under 100 MB whatever the file. A state dict's pickle holds a few per tensor (a
/// ResNet-50's about 3,000); without a bound, a pickle of one-byte opcodes that each build a
/// value would cost tens of bytes of memory per byte of file.
const MAX_VALUES: usize = 1 << 21;

#[derive(Debug, Clone)]
struct TensorRef {
    storage: usize,
    offset: u64,
    size: Vec<u64>,
    stride: Vec<u64>,
}

/// The restricted unpickler: a stack machine over the pickle's bytes.
struct Machine<'a> {
    code: &'a [u8],
    at: usize,
    objs: Vec<Obj>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: HashMap<u32, usize>,
    /// Values held inside tuples, lists and dicts (moved there from the stack).
    elements: usize,
}

type Step<T> = std::result::Result<T, String>;

impl<'a> Machine<'a> {
    fn new(code: &'a [u8]) -> Self {
        Machine {
            code,
            at: 0,
            objs: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            elements: 0,
        }
    }

    fn bytes(&mut self, n: usize) -> Step<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.code.len())
            .ok_or_else(|| format!("the pickle ends inside an operand at byte {}", self.at))?;
        let s = &self.code[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Step<u8> {
        Ok(self.bytes(1)?[0])
    }

    fn u32(&mut self) -> Step<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn line(&mut self) -> Step<String> {
        let rest = &self.code[self.at..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("a GLOBAL name without its newline")?;
        let s = std::str::from_utf8(&rest[..n]).map_err(|_| "a GLOBAL name is not UTF-8")?;
        self.at += n + 1;
        Ok(s.to_string())
    }

    fn text(&mut self, n: usize) -> Step<String> {
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| "a string is not UTF-8".to_string())
    }

    fn push(&mut self, o: Obj) {
        self.objs.push(o);
        self.stack.push(self.objs.len() - 1);
    }

    fn pop(&mut self) -> Step<usize> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("an opcode takes a value across a MARK".into());
        }
        self.stack.pop().ok_or_else(|| "the stack is empty".into())
    }

    fn pop_mark(&mut self) -> Step<Vec<usize>> {
        let m = self.marks.pop().ok_or("no MARK to pop to")?;
        let items = self.stack.split_off(m);
        // Every caller keeps them in a container.
        self.elements += items.len();
        Ok(items)
    }

    fn top(&self) -> Step<usize> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| "the stack is empty".into())
    }

    fn str_of(&self, i: usize) -> Option<&str> {
        match &self.objs[i] {
            Obj::Str(s) => Some(s),
            _ => None,
        }
    }

    fn int_of(&self, i: usize) -> Option<i64> {
        match self.objs[i] {
            Obj::Int(v) => Some(v),
            _ => None,
        }
    }

    fn tuple_of(&self, i: usize) -> Option<&[usize]> {
        match &self.objs[i] {
            Obj::Tuple(t) => Some(t),
            _ => None,
        }
    }

    fn counts(&self, i: usize) -> Option<Vec<u64>> {
        self.tuple_of(i)?
            .iter()
            .map(|&k| self.int_of(k).and_then(|v| u64::try_from(v).ok()))
            .collect()
    }

    /// Runs to STOP; returns the object the pickle built.
    fn run(&mut self) -> Step<usize> {
        loop {
            let held = self.objs.len() + self.stack.len() + self.memo.len();
            if held + self.marks.len() + self.elements > MAX_VALUES {
                return Err(format!(
                    "the pickle holds more than {MAX_VALUES} values by byte {} (a state dict \
                     holds a few per tensor)",
                    self.at
                ));
            }
            let op = self.u8()?;
            match op {
                0x80 => {
                    // PROTO
                    let v = self.u8()?;
                    if v > 5 {
                        return Err(format!("pickle protocol {v}"));
                    }
                }
                0x95 => {
                    // FRAME: a length hint
                    self.bytes(8)?;
                }
                b'.' => return self.pop(),
                b'(' => self.marks.push(self.stack.len()),
                b'N' => self.push(Obj::None),
                0x88 | 0x89 => self.push(Obj::Scalar),
                b'K' => {
                    let v = self.u8()?;
                    self.push(Obj::Int(v.into()))
                }
                b'M' => {
                    let b = self.bytes(2)?;
                    self.push(Obj::Int(u16::from_le_bytes([b[0], b[1]]).into()))
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Obj::Int(v.into()))
                }
                0x8a => {
                    // LONG1: a little-endian two's complement integer of n bytes
                    let n = self.u8()? as usize;
                    let b = self.bytes(n)?;
                    if n > 8 {
                        // Larger than any size or offset (the legacy magic number is one).
                        self.push(Obj::Opaque("a large integer".into()));
                        continue;
                    }
                    let mut v: i64 = 0;
                    for (k, &x) in b.iter().enumerate() {
                        v |= i64::from(x) << (8 * k);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    self.push(Obj::Int(v))
                }
                b'G' => {
                    self.bytes(8)?;
                    self.push(Obj::Scalar)
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let s = self.text(n)?;
                    self.push(Obj::Str(s))
                }
                0x8c => {
                    // SHORT_BINUNICODE
                    let n = self.u8()? as usize;
                    let s = self.text(n)?;
                    self.push(Obj::Str(s))
                }
                b'U' | b'C' => {
                    // SHORT_BINSTRING, SHORT_BINBYTES: kept as text where it is
                    let n = self.u8()? as usize;
                    let b = self.bytes(n)?;
                    self.push(Obj::Str(String::from_utf8_lossy(b).into_owned()))
                }
                b'T' | b'B' => {
                    // BINSTRING, BINBYTES
                    let n = self.u32()? as usize;
                    let b = self.bytes(n)?;
                    self.push(Obj::Str(String::from_utf8_lossy(b).into_owned()))
                }
                b')' => self.push(Obj::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::Tuple(items))
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.elements += n;
                    self.push(Obj::Tuple(items))
                }
                b']' => self.push(Obj::List(Vec::new())),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::List(items))
                }
                b'a' | b'e' => {
                    let items = if op == b'a' {
                        self.elements += 1;
                        vec![self.pop()?]
                    } else {
                        self.pop_mark()?
                    };
                    let list = self.top()?;
                    match &mut self.objs[list] {
                        Obj::List(l) => l.extend(items),
                        _ => return Err("APPEND to something that is not a list".into()),
                    }
                }
                b'}' => self.push(Obj::Dict(Vec::new())),
                b'd' | b's' | b'u' => {
                    let items = if op == b's' {
                        let v = self.pop()?;
                        let k = self.pop()?;
                        self.elements += 2;
                        vec![k, v]
                    } else {
                        self.pop_mark()?
                    };
                    if items.len() % 2 != 0 {
                        return Err("a dictionary with a key and no value".into());
                    }
                    let pairs = items.chunks(2).map(|p| (p[0], p[1]));
                    if op == b'd' {
                        let pairs = pairs.collect();
                        self.push(Obj::Dict(pairs));
                    } else {
                        let dict = self.top()?;
                        match &mut self.objs[dict] {
                            Obj::Dict(d) => d.extend(pairs),
                            _ => return Err("SETITEM on something that is not a dict".into()),
                        }
                    }
                }
                b'q' => {
                    let k = self.u8()?.into();
                    self.memo.insert(k, self.top()?);
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo.insert(k, self.top()?);
                }
                0x94 => {
                    // MEMOIZE
                    let k = u32::try_from(self.memo.len()).map_err(|_| "memo overflow")?;
                    self.memo.insert(k, self.top()?);
                }
                b'h' | b'j' => {
                    let k = if op == b'h' {
                        self.u8()?.into()
                    } else {
                        self.u32()?
                    };
                    let i = *self
                        .memo
                        .get(&k)
                        .ok_or_else(|| format!("memo entry {k} is read before it is written"))?;
                    self.stack.push(i);
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Obj::Global(format!("{module}.{name}")))
                }
                0x93 => {
                    // STACK_GLOBAL
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(m), Some(n)) = (self.str_of(module), self.str_of(name)) else {
                        return Err("STACK_GLOBAL of something that is not a name".into());
                    };
                    let g = format!("{m}.{n}");
                    self.push(Obj::Global(g))
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let o = self.storage(pid)?;
                    self.push(o)
                }
                b'R' | 0x81 => {
                    // REDUCE, NEWOBJ: `callable(*args)`, interpreted for known names only
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let o = self.call(f, args)?;
                    self.push(o)
                }
                b'b' => {
                    // BUILD: an object's state; a state dict's `_metadata` is not needed
                    self.pop()?;
                    self.top()?;
                }
                other => return Err(format!("opcode 0x{other:02x} at byte {}", self.at - 1)),
            }
        }
    }

    /// `torch.save`'s persistent id of a storage: `("storage", torch.FloatStorage, key,
    /// location, numel)` (the legacy format adds a view description, which is refused).
    fn storage(&self, pid: usize) -> Step<Obj> {
        let bad = || "a persistent id that is not a storage".to_string();
        let t = self.tuple_of(pid).ok_or_else(bad)?;
        if !(t.len() == 5 || t.len() == 6) || self.str_of(t[0]) != Some("storage") {
            return Err(bad());
        }
        if t.len() == 6 && !matches!(self.objs[t[5]], Obj::None) {
            return Err("a legacy storage view".into());
        }
        let type_name = match &self.objs[t[1]] {
            Obj::Global(g) => g.clone(),
            _ => return Err(bad()),
        };
        let key = self.str_of(t[2]).ok_or_else(bad)?.to_string();
        let numel = self
            .int_of(t[4])
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(bad)?;
        let dtype = match type_name.as_str() {
            "torch.FloatStorage" => Some(DType::F32),
            "torch.DoubleStorage" => Some(DType::F64),
            "torch.HalfStorage" => Some(DType::F16),
            "torch.BFloat16Storage" => Some(DType::BF16),
            "torch.LongStorage" => Some(DType::I64),
            "torch.IntStorage" => Some(DType::I32),
            "torch.ByteStorage" => Some(DType::U8),
            _ => None,
        };
        Ok(Obj::Storage(Box::new(StorageRef {
            key,
            dtype,
            type_name,
            numel,
        })))
    }

    /// What calling `f` with `args` gives, for the names a state dict uses; an opaque value
    /// naming `f` for any other (nothing is ever called).
    fn call(&self, f: usize, args: usize) -> Step<Obj> {
        let name = match &self.objs[f] {
            Obj::Global(g) => g.as_str(),
            _ => return Ok(Obj::Opaque("a value built by a call".into())),
        };
        let a = self.tuple_of(args).unwrap_or(&[]);
        match name {
            "collections.OrderedDict" if a.is_empty() => Ok(Obj::Dict(Vec::new())),
            "torch._utils._rebuild_tensor_v2" | "torch._utils._rebuild_tensor" => {
                let bad = || format!("{name} with arguments it does not take");
                if a.len() < 4 {
                    return Err(bad());
                }
                if !matches!(self.objs[a[0]], Obj::Storage(_)) {
                    return Err(bad());
                }
                let offset = self
                    .int_of(a[1])
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(bad)?;
                let size = self.counts(a[2]).ok_or_else(bad)?;
                let stride = self.counts(a[3]).ok_or_else(bad)?;
                if size.len() != stride.len() {
                    return Err(bad());
                }
                Ok(Obj::Tensor(Box::new(TensorRef {
                    storage: a[0],
                    offset,
                    size,
                    stride,
                })))
            }
            // `nn.Parameter`s (a state dict saved with `keep_vars=True`): the tensor inside.
            "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state"
                if !a.is_empty() && matches!(self.objs[a[0]], Obj::Tensor(_)) =>
            {
                Ok(self.objs[a[0]].clone())
            }
            // A tensor subclass: `(rebuild, type, args, state)`; plain tensors and parameters.
            "torch._tensor._rebuild_from_type_v2" if a.len() == 4 => {
                let ty = match &self.objs[a[1]] {
                    Obj::Global(t) => t.as_str(),
                    _ => "",
                };
                if !matches!(ty, "torch.Tensor" | "torch.nn.parameter.Parameter") {
                    return Ok(Obj::Opaque(ty.to_string()));
                }
                self.call(a[0], a[2])
            }
            _ => Ok(Obj::Opaque(name.to_string())),
        }
    }
}

/// Runs a pickle to its object.
fn unpickle<'a>(code: &'a [u8], path: &Path) -> Result<(Machine<'a>, usize)> {
    let mut m = Machine::new(code);
    let root = m
        .run()
        .map_err(|e| Error::state(path, format!("not a PyTorch file this reads: {e}")))?;
    Ok((m, root))
}

/// Where a state dict sits in a saved training checkpoint, in the order looked for.
const STATE_DICT_KEYS: &[&str] = &["state_dict", "model_state_dict", "model", "module", "net"];

/// The state dict in the saved object: `(name, tensor)` pairs, refusing a whole model and any
/// entry that is not a tensor.
fn state_dict(m: &Machine, root: usize, path: &Path) -> Result<Vec<(String, TensorRef)>> {
    let whole_model = |class: &str| {
        Error::state(
            path,
            format!(
                "holds a whole pickled model (`{class}`), which only its own Python code can \
                 rebuild; alkit never runs code from a file. Save its weights instead: \
                 torch.save(model.state_dict(), \"model.pth\")"
            ),
        )
    };
    let dict = match &m.objs[root] {
        Obj::Dict(d) => d,
        Obj::Opaque(class) => return Err(whole_model(class)),
        _ => {
            return Err(Error::state(
                path,
                "holds neither a state dict nor a checkpoint dictionary",
            ))
        }
    };
    let is_tensor = |i: usize| matches!(m.objs[i], Obj::Tensor(_));
    let dict = if dict.iter().any(|&(_, v)| is_tensor(v)) {
        dict
    } else {
        let keys: Vec<&str> = dict.iter().filter_map(|&(k, _)| m.str_of(k)).collect();
        let found = STATE_DICT_KEYS.iter().find_map(|want| {
            dict.iter()
                .find(|&&(k, _)| m.str_of(k) == Some(want))
                .map(|&(_, v)| (*want, v))
        });
        match found.map(|(k, v)| (k, &m.objs[v])) {
            Some((_, Obj::Dict(d))) => d,
            Some((_, Obj::Opaque(class))) => return Err(whole_model(class)),
            Some((k, _)) => {
                return Err(Error::state(
                    path,
                    format!("the checkpoint's `{k}` is not a state dict"),
                ))
            }
            // A dictionary of objects in place of tensors: the first is named.
            None if dict
                .iter()
                .any(|&(_, v)| matches!(m.objs[v], Obj::Opaque(_))) =>
            {
                dict
            }
            None => {
                return Err(Error::state(
                    path,
                    format!(
                        "holds a dictionary of {keys:?} without tensors, and none of {:?} \
                         (where training checkpoints keep the state dict)",
                        STATE_DICT_KEYS
                    ),
                ))
            }
        }
    };
    dict.iter()
        .map(|&(k, v)| {
            let name = m
                .str_of(k)
                .ok_or_else(|| Error::state(path, "a state dict entry's name is not a string"))?;
            match &m.objs[v] {
                Obj::Tensor(t) => Ok((name.to_string(), TensorRef::clone(t))),
                Obj::Opaque(class) => Err(Error::state(
                    path,
                    format!("state dict entry `{name}` is a `{class}`, not a tensor"),
                )),
                _ => Err(Error::state(
                    path,
                    format!("state dict entry `{name}` is not a tensor"),
                )),
            }
        })
        .collect()
}

/// A tensor's bytes gathered from its storage's bytes, after checking that its view lies
/// inside them and is no larger than them.
fn tensor(
    m: &Machine,
    name: &str,
    t: &TensorRef,
    storages: &HashMap<String, Vec<u8>>,
    path: &Path,
) -> Result<Tensor> {
    let bad = |msg: String| Error::state(path, format!("tensor `{name}`: {msg}"));
    let Obj::Storage(storage) = &m.objs[t.storage] else {
        return Err(bad("no storage".into()));
    };
    let StorageRef {
        key,
        dtype,
        type_name,
        numel,
    } = storage.as_ref();
    let dtype = dtype.ok_or_else(|| bad(format!("its storage is a `{type_name}`")))?;
    let bytes = storages
        .get(key)
        .ok_or_else(|| bad(format!("its storage `{key}` is not in the file")))?;
    let elem = dtype.size_in_bytes();
    if (bytes.len() as u64) != numel.saturating_mul(elem as u64) {
        return Err(bad(format!(
            "its storage `{key}` declares {numel} elements of {elem} bytes and holds {} bytes",
            bytes.len()
        )));
    }
    let count = t
        .size
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&c| c <= *numel)
        .ok_or_else(|| {
            bad(format!(
                "shape {:?} is larger than its storage of {numel} elements",
                t.size
            ))
        })?;
    // The last element the view reaches must lie inside the storage.
    let inside = count == 0
        || t.size
            .iter()
            .zip(&t.stride)
            .try_fold(t.offset, |a, (&d, &s)| {
                (d - 1).checked_mul(s).and_then(|x| a.checked_add(x))
            })
            .is_some_and(|last| last < *numel);
    if !inside {
        return Err(bad(format!(
            "offset {} with shape {:?} and strides {:?} reaches past its storage of {numel} \
             elements",
            t.offset, t.size, t.stride
        )));
    }
    let shape: Vec<usize> = t.size.iter().map(|&d| d as usize).collect();
    let count = count as usize;
    let mut out = Vec::with_capacity(count * elem);
    let mut contiguous = true;
    let mut want = 1u64;
    for (&d, &s) in t.size.iter().zip(&t.stride).rev() {
        if d != 1 && s != want {
            contiguous = false;
        }
        want = want.saturating_mul(d);
    }
    if count == 0 {
        // Nothing to read (its offset is not checked against the storage then).
    } else if contiguous {
        let start = t.offset as usize * elem;
        out.extend_from_slice(&bytes[start..start + count * elem]);
    } else {
        // A strided view: elements in row-major order of its shape.
        let mut index = vec![0u64; shape.len()];
        for _ in 0..count {
            let at = t.offset + index.iter().zip(&t.stride).map(|(i, s)| i * s).sum::<u64>();
            let at = at as usize * elem;
            out.extend_from_slice(&bytes[at..at + elem]);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < t.size[d] {
                    break;
                }
                index[d] = 0;
            }
        }
    }
    Tensor::from_raw_buffer(&out, dtype, &shape, &Device::Cpu)
        .map_err(|e| bad(format!("cannot be built: {e}")))
}

/// Builds every tensor of the state dict from the storages' bytes.
fn tensors(
    m: &Machine,
    sd: &[(String, TensorRef)],
    storages: &HashMap<String, Vec<u8>>,
    path: &Path,
) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (name, t) in sd {
        let x = tensor(m, name, t, storages, path)?;
        if out.insert(name.clone(), x).is_some() {
            return Err(Error::state(
                path,
                format!("tensor `{name}` is given twice"),
            ));
        }
    }
    Ok(out)
}

/// Bytes per element of a storage type, for skipping storages the state dict does not use
/// (a checkpoint's optimiser state) in a legacy file.
fn element_bytes(type_name: &str) -> Option<u64> {
    Some(match type_name.strip_prefix("torch.")? {
        "BoolStorage" | "ByteStorage" | "CharStorage" => 1,
        "ShortStorage" | "HalfStorage" | "BFloat16Storage" => 2,
        "IntStorage" | "FloatStorage" => 4,
        "LongStorage" | "DoubleStorage" | "ComplexFloatStorage" => 8,
        "ComplexDoubleStorage" => 16,
        _ => return None,
    })
}

fn read_zip(path: &Path) -> Result<HashMap<String, Tensor>> {
    let bad = |m: String| Error::state(path, m);
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| bad(format!("not a readable zip archive: {e}")))?;
    // torch.save writes `NAME/data.pkl` (NAME: the file's stem when it was saved).
    let pkl: Vec<String> = zip
        .file_names()
        .filter(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .map(str::to_string)
        .collect();
    let [pkl] = &pkl[..] else {
        return Err(bad(format!(
            "a zip archive with {} `NAME/data.pkl` entries, not one as torch.save writes",
            pkl.len()
        )));
    };
    let prefix = pkl.trim_end_matches("data.pkl").to_string();
    let mut entry = |name: &str, limit: u64| -> Result<Vec<u8>> {
        let mut f = zip
            .by_name(name)
            .map_err(|e| bad(format!("entry `{name}`: {e}")))?;
        let size = f.size();
        if size > limit || size > file_len {
            return Err(bad(format!(
                "entry `{name}` declares {size} bytes, more than {}",
                limit.min(file_len)
            )));
        }
        let mut out = Vec::with_capacity(size as usize);
        (&mut f)
            .take(size)
            .read_to_end(&mut out)
            .map_err(|e| bad(format!("entry `{name}`: {e}")))?;
        if out.len() as u64 != size {
            return Err(bad(format!("entry `{name}` is cut short")));
        }
        Ok(out)
    };
    if let Ok(order) = entry(&format!("{prefix}byteorder"), 16) {
        if order != b"little" {
            return Err(bad(format!(
                "stored {} byte order; little-endian files are read",
                String::from_utf8_lossy(&order)
            )));
        }
    }
    let code = entry(pkl, MAX_PICKLE_BYTES)?;
    let (m, root) = unpickle(&code, path)?;
    let sd = state_dict(&m, root, path)?;
    // Only the storages the state dict uses are read (not a checkpoint's optimiser state).
    let mut storages = HashMap::new();
    for (_, t) in &sd {
        if let Obj::Storage(s) = &m.objs[t.storage] {
            let StorageRef {
                key,
                dtype: Some(d),
                numel,
                ..
            } = s.as_ref()
            else {
                continue;
            };
            if !storages.contains_key(key) {
                let size = numel.saturating_mul(d.size_in_bytes() as u64);
                storages.insert(key.clone(), entry(&format!("{prefix}data/{key}"), size)?);
            }
        }
    }
    tensors(&m, &sd, &storages, path)
}

fn read_legacy(path: &Path) -> Result<HashMap<String, Tensor>> {
    let bad = |m: String| Error::state(path, m);
    let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if read_int(&data) != Some(LEGACY_MAGIC) {
        return Err(bad("not a torch.save file (no magic number)".into()));
    }
    // Five pickles in a row: the magic number, the protocol version, system information, the
    // saved object, the storage keys; then the storages themselves.
    let mut at = 0;
    let mut parts = Vec::new();
    for what in [
        "magic number",
        "protocol version",
        "system information",
        "saved object",
        "storage keys",
    ] {
        let code = &data[at..];
        let mut m = Machine::new(&code[..code.len().min(MAX_PICKLE_BYTES as usize)]);
        let root = m.run().map_err(|e| {
            bad(format!(
                "a legacy torch.save file whose {what} is unreadable: {e}"
            ))
        })?;
        at += m.at;
        parts.push((m, root));
    }
    let (km, kroot) = &parts[4];
    let keys: Vec<String> = match &km.objs[*kroot] {
        Obj::List(l) => l
            .iter()
            .map(|&i| km.str_of(i).map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("the storage keys are not strings".into()))?,
        _ => return Err(bad("no list of storage keys".into())),
    };
    let (m, root) = &parts[3];
    let sd = state_dict(m, *root, path)?;
    let declared: HashMap<&str, (u64, &str)> = m
        .objs
        .iter()
        .filter_map(|o| match o {
            Obj::Storage(s) => Some((s.key.as_str(), (s.numel, s.type_name.as_str()))),
            _ => None,
        })
        .collect();
    // Each storage: its element count (8 bytes, little-endian), then its bytes.
    let mut storages = HashMap::new();
    for key in keys {
        let (numel, type_name) = *declared
            .get(key.as_str())
            .ok_or_else(|| bad(format!("storage `{key}` is stored but never used")))?;
        let elem = element_bytes(type_name)
            .ok_or_else(|| bad(format!("storage `{key}` is a `{type_name}`")))?;
        let n = data
            .get(at..at.saturating_add(8))
            .ok_or_else(|| bad(format!("storage `{key}` is cut short")))?;
        let n = u64::from_le_bytes(n.try_into().unwrap_or([0; 8]));
        if n != numel {
            return Err(bad(format!(
                "storage `{key}` holds {n} elements where the pickle declares {numel}"
            )));
        }
        let bytes = n
            .checked_mul(elem)
            .and_then(|l| usize::try_from(l).ok())
            .and_then(|len| data.get(at + 8..(at + 8).checked_add(len)?))
            .ok_or_else(|| bad(format!("storage `{key}` is cut short")))?;
        at += 8 + bytes.len();
        storages.insert(key, bytes.to_vec());
    }
    tensors(m, &sd, &storages, path)
}

/// The integer the first pickle holds when it is one LONG1 (the legacy magic number).
fn read_int(code: &[u8]) -> Option<u128> {
    let code = code.strip_prefix(&[0x80, 0x02, 0x8a])?;
    let (&n, rest) = code.split_first()?;
    if n > 16 {
        return None;
    }
    let b = rest.get(..usize::from(n))?;
    Some(
        b.iter()
            .enumerate()
            .fold(0u128, |a, (k, &x)| a | (u128::from(x) << (8 * k))),
    )
}
