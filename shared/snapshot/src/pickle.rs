//! A streaming reader of Python pickles, for PyTorch's memory snapshots
//! (`torch.cuda.memory._dump_snapshot`), which can be gigabytes.
//!
//! Why not a pickle crate: snapshots are a DAG — torch shares frame dicts, stack lists and key
//! strings between entries, and the pickle's memo refers back to them. serde-pickle deep-clones
//! every memo reference and, on snapshots, either refuses ("recursive structure") or silently
//! empties the shared frame dicts (both measured by `examples/serde_pickle_baseline.rs`). Here
//! values are reference-counted, so a shared object is one object however often it is referred
//! to, and the reader streams: each item appended to a list is first offered to a [`Visitor`],
//! which may take it (a trace entry, turned into a compact event) so that it is dropped at once
//! instead of being kept until the end. Memory then stays near the size of what the visitor keeps.
//!
//! Only the object kinds snapshots contain are read: dict, list, tuple, str, bytes, int (any size
//! up to 128 bits, so torch's 9-byte addresses are fine), float, bool and None, in protocols 2 to
//! 5 (including `FRAME`, `MEMOIZE` and the explicit, possibly sparse, `BINPUT` memo of torch's
//! C++ pickler). Anything else — a class, a global, a persistent id, an out-of-band buffer, the
//! text opcodes of protocols 0 and 1 — is an error naming the opcode and its offset. The reader
//! never panics and never allocates more than the input delivers: a declared length is read in
//! pieces as the bytes arrive.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::Read;
use std::rc::Rc;

/// A pickled value. Containers are shared (`Rc`): a memo reference is the same object.
#[derive(Debug, Clone)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int that fits `i64`.
    Int(i64),
    /// An int above `i64::MAX` that fits `u64` (a CUDA stream pointer pickles as 9 bytes).
    UInt(u64),
    /// Any other int wider than 64 bits; larger than 128 bits is an error. Boxed so that every
    /// value stays small: the memo holds millions.
    Long(Rc<i128>),
    /// A float.
    Float(f64),
    /// A str (invalid UTF-8, such as lone surrogates, decoded lossily). A thin pointer, as
    /// every variant: a value is 16 bytes, and the stack and the memo move millions.
    Str(Rc<String>),
    /// bytes or bytearray.
    Bytes(Rc<Vec<u8>>),
    /// A list.
    List(Rc<List>),
    /// A dict.
    Dict(Rc<Dict>),
    /// A tuple.
    Tuple(Rc<Tuple>),
    /// What a [`Visitor`] put in the memo in place of an object it took and keeps in its own
    /// form (an interned stack, say): later references to that object read this handle.
    Handle(u32),
}

/// No memo slot.
const NO_SLOT: u32 = u32::MAX;

/// A tuple's items.
#[derive(Debug, Default)]
pub struct Tuple(pub Vec<Value>);

/// Drops `values` and everything only they hold without recursion: a crafted pickle can nest
/// containers a million deep in a few megabytes (`TUPLE1` after `TUPLE1`), and dropping such a
/// chain recursively would overflow the stack.
fn drop_iteratively(mut values: Vec<Value>) {
    while let Some(v) = values.pop() {
        release(v, &mut values);
    }
}

/// Drops `v`; the containers only it held that could recurse go to `later` instead. Most drop
/// at once: a trace entry's stack list holds frames that are shared, so nothing is deferred
/// and nothing allocated.
fn release(v: Value, later: &mut Vec<Value>) {
    let mut keep = |x: Value| {
        if holds_alone(&x) {
            later.push(x);
        }
    };
    match v {
        Value::List(rc) => {
            if let Ok(mut l) = Rc::try_unwrap(rc) {
                l.items.get_mut().drain(..).for_each(&mut keep);
            }
        }
        Value::Dict(rc) => {
            if let Ok(mut d) = Rc::try_unwrap(rc) {
                d.items.get_mut().drain(..).for_each(&mut keep);
            }
        }
        Value::Tuple(rc) => {
            if let Ok(mut t) = Rc::try_unwrap(rc) {
                t.0.drain(..).for_each(&mut keep);
            }
        }
        _ => {}
    }
}

impl Drop for List {
    fn drop(&mut self) {
        drop_iteratively(std::mem::take(self.items.get_mut()));
    }
}

/// Whether dropping `v` could recurse (a container only it holds).
fn holds_alone(v: &Value) -> bool {
    match v {
        Value::List(rc) => Rc::strong_count(rc) == 1,
        Value::Dict(rc) => Rc::strong_count(rc) == 1,
        Value::Tuple(rc) => Rc::strong_count(rc) == 1,
        _ => false,
    }
}

impl Drop for Dict {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Drop for Tuple {
    fn drop(&mut self) {
        drop_iteratively(std::mem::take(&mut self.0));
    }
}

/// A list under construction or complete.
#[derive(Debug)]
pub struct List {
    /// Its items (those a visitor took are not here).
    pub items: RefCell<Vec<Value>>,
    /// Lists are numbered in the order they are created (0, 1, …).
    pub id: u32,
    memo: Cell<u32>,
    /// The visitor is still asked about this list's items.
    offered: Cell<bool>,
}

/// A dict, in insertion order.
#[derive(Debug)]
pub struct Dict {
    /// Keys and values alternating (`SETITEMS` then moves the stack's run of them in one copy;
    /// pairs cost a move per item through the stack, a tenth of reading a snapshot).
    items: RefCell<Vec<Value>>,
    memo: Cell<u32>,
    /// Free for the visitor: a number it gave this dict (an interned frame's id), so a shared
    /// dict met again costs no lookup. `u32::MAX` until set.
    pub tag: Cell<u32>,
}

impl Dict {
    /// Empties the dict, keeping its storage (for the next dict: trace entries are millions).
    fn clear(&self) {
        // Only the containers held alone here can recurse; the rest drop as usual.
        let mut nested = Vec::new();
        for v in self.items.borrow_mut().drain(..) {
            release(v, &mut nested);
        }
        drop_iteratively(nested);
    }

    /// Its (key, value) pairs, in insertion order, handed to `f`.
    pub fn with_pairs<T>(&self, f: impl FnOnce(Pairs<'_>) -> T) -> T {
        f(Pairs(self.items.borrow().chunks_exact(2)))
    }

    /// The value under the str key `key` (the last one set).
    pub fn get(&self, key: &str) -> Option<Value> {
        self.items
            .borrow()
            .chunks_exact(2)
            .rev()
            .find(|p| matches!(&p[0], Value::Str(s) if s.as_str() == key))
            .map(|p| p[1].clone())
    }

    /// The memo slot holding this dict, if it was memoized.
    pub fn memo_slot(&self) -> Option<u32> {
        slot(self.memo.get())
    }
}

/// A dict's (key, value) pairs ([`Dict::with_pairs`]).
#[derive(Debug)]
pub struct Pairs<'a>(std::slice::ChunksExact<'a, Value>);

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a Value, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|p| (&p[0], &p[1]))
    }
}

impl List {
    /// The memo slot holding this list, if it was memoized.
    pub fn memo_slot(&self) -> Option<u32> {
        slot(self.memo.get())
    }
}

fn slot(raw: u32) -> Option<u32> {
    (raw != NO_SLOT).then_some(raw)
}

impl Value {
    /// The int, when it is one that fits `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::UInt(u) => Some(*u),
            Value::Long(i) => u64::try_from(**i).ok(),
            Value::Bool(b) => Some(u64::from(*b)),
            _ => None,
        }
    }

    /// The int, when it is one that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number as a float (ints too).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::UInt(u) => Some(*u as f64),
            Value::Long(i) => Some(**i as f64),
            _ => None,
        }
    }

    /// The str.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The bool (ints 0 and 1 too).
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Int(0) => Some(false),
            Value::Int(1) => Some(true),
            _ => None,
        }
    }
}

/// The memo: pickle's table of objects that later opcodes refer back to.
#[derive(Debug, Default)]
pub struct Memo {
    slots: Vec<Option<Value>>,
}

impl Memo {
    /// Puts `value` in `slot` (a visitor's handle in place of an object it took, or `None` to
    /// forget an object no later opcode will refer to).
    pub fn replace(&mut self, slot: u32, value: Option<Value>) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = value;
        }
    }

    #[inline]
    fn put(&mut self, slot: u32, value: &Value) {
        match value {
            Value::List(l) if l.memo.get() == NO_SLOT => l.memo.set(slot),
            Value::Dict(d) if d.memo.get() == NO_SLOT => d.memo.set(slot),
            _ => {}
        }
        let i = slot as usize;
        if i == self.slots.len() {
            // MEMOIZE, and the usual BINPUT: the next slot.
            self.slots.push(Some(value.clone()));
            return;
        }
        if i > self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(value.clone());
    }

    fn get(&self, slot: u32) -> Option<&Value> {
        self.slots.get(slot as usize)?.as_ref()
    }
}

/// What a [`Visitor`] does with an item appended to a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Take it: it is not kept in the list, and its memo slot is emptied (pickles memoize each
    /// container once, and trace entries are never referred to again).
    Take,
    /// Keep it in the list.
    Keep,
    /// Keep it, and every later item of this list: the visitor is not asked about them (a stack
    /// list's frames, a segment's blocks).
    KeepList,
}

/// Sees items as they are appended to lists, and may take them.
pub trait Visitor {
    /// `item` is being appended to `list`. `memo` lets the visitor put handles in place of
    /// objects it keeps in its own form.
    fn appended(&mut self, list: &List, item: &Value, memo: &mut Memo) -> Offer;
}

/// A visitor that takes nothing: the whole value is built.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeepAll;

impl Visitor for KeepAll {
    fn appended(&mut self, _: &List, _: &Value, _: &mut Memo) -> Offer {
        Offer::KeepList
    }
}

/// Why a pickle could not be read (to the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickleError {
    /// Byte offset of the opcode (or the read) that failed.
    pub offset: u64,
    /// What went wrong.
    pub kind: PickleErrorKind,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickleErrorKind {
    /// The input ended before `STOP`.
    Truncated,
    /// An opcode for something snapshots never hold (a class, a global, a buffer, …).
    Unsupported {
        /// The opcode byte.
        opcode: u8,
        /// Its name in Python's `pickletools`.
        name: &'static str,
    },
    /// A byte that is no pickle opcode.
    UnknownOpcode(u8),
    /// A protocol other than 2–5.
    Protocol(u8),
    /// The pickle is malformed (stack or memo misuse).
    Malformed(&'static str),
    /// An int wider than 128 bits.
    IntTooLarge,
    /// Reading failed.
    Io(String),
    /// A [`Resumable`] read has no more bytes yet (never an error of [`read`]).
    Pending,
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.offset;
        match &self.kind {
            PickleErrorKind::Truncated => write!(f, "the pickle ends at byte {at} before its end"),
            PickleErrorKind::Unsupported { opcode, name } => write!(
                f,
                "unsupported pickle opcode {name} (0x{opcode:02x}) at byte {at}: a memory \
                 snapshot holds only dicts, lists, tuples, strings, numbers, booleans and None"
            ),
            PickleErrorKind::UnknownOpcode(op) => {
                write!(f, "byte 0x{op:02x} at {at} is not a pickle opcode")
            }
            PickleErrorKind::Protocol(p) => write!(
                f,
                "pickle protocol {p} at byte {at}: only protocols 2 to 5 are read"
            ),
            PickleErrorKind::Malformed(what) => {
                write!(f, "malformed pickle at byte {at}: {what}")
            }
            PickleErrorKind::IntTooLarge => {
                write!(f, "an integer wider than 128 bits at byte {at}")
            }
            PickleErrorKind::Io(e) => write!(f, "reading the pickle failed at byte {at}: {e}"),
            PickleErrorKind::Pending => write!(f, "the pickle's bytes stop at byte {at} for now"),
        }
    }
}

impl std::error::Error for PickleError {}

/// The reader's state when it stopped: what was on its stack and in its memo. After an error
/// (a cut-short file), the stack holds the containers under construction, so a caller can keep
/// the prefix that was read.
#[derive(Debug, Default)]
pub struct Leftover {
    /// The stack, bottom first (marks removed).
    pub stack: Vec<Value>,
}

/// Reads one pickle from `input` to its `STOP`, offering list items to `visitor`. Returns the
/// value, or the error with what was on the stack when it happened.
pub fn read<R: Read, V: Visitor>(
    input: R,
    visitor: &mut V,
) -> Result<Value, (PickleError, Leftover)> {
    let mut m = Machine::new(Input::new(input));
    let result = m.run(visitor);
    m.outcome(result)
}

/// A pickle read from bytes handed over as they arrive — a file read in slices by a page that
/// must stay responsive, showing progress — instead of pulled from a reader. Each
/// [`Resumable::resume`] reads as far as the bytes given so far allow; an opcode cut by the end
/// of a slice is read again whole once the next slice is there.
pub struct Resumable<V> {
    machine: Machine<Slices>,
    /// What is offered the list items.
    pub visitor: V,
}

/// The slices handed over and not read yet; `WouldBlock` when there are none (yet).
#[derive(Default)]
struct Slices {
    queue: std::collections::VecDeque<Vec<u8>>,
    offset: usize,
    finished: bool,
}

impl Read for Slices {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while let Some(front) = self.queue.front() {
            if self.offset < front.len() {
                let n = (front.len() - self.offset).min(out.len());
                out[..n].copy_from_slice(&front[self.offset..self.offset + n]);
                self.offset += n;
                return Ok(n);
            }
            self.queue.pop_front();
            self.offset = 0;
        }
        if self.finished {
            Ok(0)
        } else {
            Err(std::io::ErrorKind::WouldBlock.into())
        }
    }
}

impl<V> Resumable<V> {
    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.machine.input.opcode_at()
    }
}

impl<V> fmt::Debug for Resumable<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resumable")
            .field("bytes_read", &self.bytes_read())
            .finish_non_exhaustive()
    }
}

impl<V: Visitor> Resumable<V> {
    /// A read that has been given nothing yet.
    pub fn new(visitor: V) -> Resumable<V> {
        let mut input = Input::new(Slices::default());
        input.resumable = true;
        Resumable {
            machine: Machine::new(input),
            visitor,
        }
    }

    /// The next bytes of the pickle.
    pub fn push(&mut self, bytes: Vec<u8>) {
        self.machine.input.inner.queue.push_back(bytes);
    }

    /// Says that no more bytes will come: a pickle cut short is then read as [`read`] reads it.
    pub fn finish(&mut self) {
        self.machine.input.inner.finished = true;
    }

    /// Reads as far as the bytes given allow: `None` while more are needed, then what [`read`]
    /// returns.
    pub fn resume(&mut self) -> Option<Result<Value, (PickleError, Leftover)>> {
        let result = self.machine.run(&mut self.visitor);
        if matches!(result, Err(PickleErrorKind::Pending)) {
            // The opcode that ran out is read again from its start next time.
            self.machine.input.start = self.machine.input.mark;
            return None;
        }
        Some(self.machine.outcome(result))
    }
}

/// Reads a whole pickle held in memory, keeping everything (tests and small files).
pub fn from_slice(bytes: &[u8]) -> Result<Value, PickleError> {
    read(bytes, &mut KeepAll).map_err(|(e, _)| e)
}

/// Buffered input that counts bytes.
struct Input<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the input before `buf[0]`.
    base: u64,
    /// Where the current opcode starts in `buf`.
    mark: usize,
    /// Keep the current opcode's bytes when refilling, so that it can be read again once more
    /// bytes arrive ([`Resumable`]).
    resumable: bool,
}

const BUFFER_BYTES: usize = 256 << 10;

impl<R: Read> Input<R> {
    fn new(inner: R) -> Input<R> {
        Input {
            inner,
            buf: vec![0; BUFFER_BYTES],
            start: 0,
            end: 0,
            base: 0,
            mark: 0,
            resumable: false,
        }
    }

    /// Where the current opcode starts in the input.
    fn opcode_at(&self) -> u64 {
        self.base + self.mark as u64
    }

    #[inline]
    fn fill(&mut self) -> Result<bool, PickleErrorKind> {
        if self.start < self.end {
            return Ok(true);
        }
        self.refill()
    }

    /// Reads more after what the buffer holds, first dropping what was read (all of it, or when
    /// resumable, what came before the current opcode). `Ok(false)` at the end of the input;
    /// [`PickleErrorKind::Pending`] when a resumable input has no more bytes yet.
    #[cold]
    #[inline(never)]
    fn refill(&mut self) -> Result<bool, PickleErrorKind> {
        let keep_from = if self.resumable {
            self.mark.min(self.start)
        } else {
            self.start
        };
        if keep_from > 0 {
            self.buf.copy_within(keep_from..self.end, 0);
            self.base += keep_from as u64;
            self.end -= keep_from;
            self.start -= keep_from;
            self.mark = self.mark.saturating_sub(keep_from);
        }
        if self.end == self.buf.len() {
            // An opcode longer than the buffer, kept whole for a resumable read.
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(PickleErrorKind::Pending);
                }
                Err(e) => return Err(PickleErrorKind::Io(e.to_string())),
            }
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, PickleErrorKind> {
        if let Some(&b) = self.buf[..self.end].get(self.start) {
            self.start += 1;
            return Ok(b);
        }
        if !self.refill()? {
            return Err(PickleErrorKind::Truncated);
        }
        let b = self.buf[self.start];
        self.start += 1;
        Ok(b)
    }

    /// Exactly `N` bytes.
    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleErrorKind> {
        let mut out = [0u8; N];
        if self.end - self.start >= N {
            out.copy_from_slice(&self.buf[self.start..self.start + N]);
            self.start += N;
            return Ok(out);
        }
        for b in &mut out {
            *b = self.byte()?;
        }
        Ok(out)
    }

    /// `len` bytes, read in pieces as they arrive (a damaged length never allocates more than
    /// the input holds).
    fn bytes(&mut self, len: u64) -> Result<Vec<u8>, PickleErrorKind> {
        let mut out = Vec::with_capacity(len.min(BUFFER_BYTES as u64) as usize);
        let mut left = len;
        while left > 0 {
            if !self.fill()? {
                return Err(PickleErrorKind::Truncated);
            }
            let n = ((self.end - self.start) as u64).min(left) as usize;
            out.extend_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            left -= n as u64;
        }
        Ok(out)
    }

    /// `len` bytes handed to `f`: straight from the buffer when they are all in it.
    #[inline(always)]
    fn with_bytes<T>(
        &mut self,
        len: u64,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, PickleErrorKind> {
        if (self.end - self.start) as u64 >= len {
            let len = len as usize;
            let out = f(&self.buf[self.start..self.start + len]);
            self.start += len;
            return Ok(out);
        }
        let bytes = self.bytes(len)?;
        Ok(f(&bytes))
    }

    fn skip(&mut self, len: u64) -> Result<(), PickleErrorKind> {
        let mut left = len;
        while left > 0 {
            if !self.fill()? {
                return Err(PickleErrorKind::Truncated);
            }
            let n = ((self.end - self.start) as u64).min(left) as usize;
            self.start += n;
            left -= n as u64;
        }
        Ok(())
    }
}

struct Machine<R> {
    input: Input<R>,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Memo,
    lists: u32,
    /// A dict a visitor took, emptied, for the next `EMPTY_DICT` (saves two allocations and
    /// frees per trace entry).
    spare_dict: Option<Rc<Dict>>,
}

/// Python's names for the opcodes snapshots never use, for the error message.
fn unsupported_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        b'I' => "INT",
        b'L' => "LONG",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'F' => "FLOAT",
        b'g' => "GET",
        b'p' => "PUT",
        _ => return None,
    })
}

fn str_value(bytes: &[u8]) -> Value {
    Value::Str(match std::str::from_utf8(bytes) {
        Ok(s) => Rc::new(s.to_owned()),
        Err(_) => Rc::new(String::from_utf8_lossy(bytes).into_owned()),
    })
}

fn int_value(v: i128) -> Value {
    if let Ok(small) = i64::try_from(v) {
        Value::Int(small)
    } else if let Ok(u) = u64::try_from(v) {
        Value::UInt(u)
    } else {
        Value::Long(Rc::new(v))
    }
}

/// A little-endian two's-complement int of up to 16 bytes (LONG1/LONG4).
fn long(bytes: &[u8]) -> Result<i128, PickleErrorKind> {
    if bytes.is_empty() {
        return Ok(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    // Drop sign-extension bytes beyond 16: a 17-byte 0x00…-padded value still fits.
    let mut used = bytes;
    while used.len() > 16 {
        let last = used[used.len() - 1];
        if last != if negative { 0xff } else { 0 } {
            return Err(PickleErrorKind::IntTooLarge);
        }
        used = &used[..used.len() - 1];
    }
    let mut full = [if negative { 0xff } else { 0 }; 16];
    full[..used.len()].copy_from_slice(used);
    let v = i128::from_le_bytes(full);
    // Sign-extension dropped above must not change the sign.
    if (v < 0) != negative {
        return Err(PickleErrorKind::IntTooLarge);
    }
    Ok(v)
}

impl<R: Read> Machine<R> {
    fn new(input: Input<R>) -> Machine<R> {
        Machine {
            input,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            lists: 0,
            spare_dict: None,
        }
    }

    /// What a read returns: the value, or the error with what was on the stack.
    fn outcome(
        &mut self,
        result: Result<Value, PickleErrorKind>,
    ) -> Result<Value, (PickleError, Leftover)> {
        result.map_err(|kind| {
            (
                PickleError {
                    offset: self.input.opcode_at(),
                    kind,
                },
                Leftover {
                    stack: std::mem::take(&mut self.stack),
                },
            )
        })
    }

    fn pop(&mut self) -> Result<Value, PickleErrorKind> {
        if self.marks.last().is_some_and(|m| *m >= self.stack.len()) {
            return Err(PickleErrorKind::Malformed("pop across a mark"));
        }
        self.stack
            .pop()
            .ok_or(PickleErrorKind::Malformed("stack underflow"))
    }

    fn top(&self) -> Result<&Value, PickleErrorKind> {
        if self.marks.last().is_some_and(|m| *m >= self.stack.len()) {
            return Err(PickleErrorKind::Malformed("no value above the mark"));
        }
        self.stack
            .last()
            .ok_or(PickleErrorKind::Malformed("empty stack"))
    }

    /// The items above the last mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleErrorKind> {
        let mark = self
            .marks
            .pop()
            .ok_or(PickleErrorKind::Malformed("no mark"))?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn new_list(&mut self, items: Vec<Value>) -> Value {
        let id = self.lists;
        self.lists = self.lists.wrapping_add(1);
        Value::List(Rc::new(List {
            items: RefCell::new(items),
            id,
            memo: Cell::new(NO_SLOT),
            offered: Cell::new(true),
        }))
    }

    fn new_dict(items: Vec<Value>) -> Value {
        Value::Dict(Rc::new(Dict {
            items: RefCell::new(items),
            memo: Cell::new(NO_SLOT),
            tag: Cell::new(u32::MAX),
        }))
    }

    /// Appends the stack's items from `from` on to the list below them, offering each to the
    /// visitor while it wants them.
    fn append<V: Visitor>(&mut self, from: usize, visitor: &mut V) -> Result<(), PickleErrorKind> {
        let Some(Value::List(list)) = from.checked_sub(1).map(|i| &self.stack[i]) else {
            return Err(PickleErrorKind::Malformed("APPEND to something not a list"));
        };
        let list = list.clone();
        let mut items = list.items.borrow_mut();
        if !list.offered.get() {
            items.extend(self.stack.drain(from..));
            return Ok(());
        }
        items.reserve(self.stack.len() - from);
        for item in self.stack.drain(from..) {
            if !list.offered.get() {
                items.push(item);
                continue;
            }
            match visitor.appended(&list, &item, &mut self.memo) {
                Offer::Take => {
                    let slot = match &item {
                        Value::Dict(d) => d.memo_slot(),
                        Value::List(l) => l.memo_slot(),
                        _ => None,
                    };
                    if let Some(s) = slot {
                        self.memo.replace(s, None);
                    }
                    if let Value::Dict(d) = item
                        && Rc::strong_count(&d) == 1
                    {
                        d.clear();
                        d.memo.set(NO_SLOT);
                        d.tag.set(u32::MAX);
                        self.spare_dict = Some(d);
                    }
                }
                Offer::Keep => items.push(item),
                Offer::KeepList => {
                    list.offered.set(false);
                    items.push(item);
                }
            }
        }
        Ok(())
    }

    fn set_items(&mut self, items: Vec<Value>) -> Result<(), PickleErrorKind> {
        if !items.len().is_multiple_of(2) {
            return Err(PickleErrorKind::Malformed("SETITEMS with an odd count"));
        }
        let Value::Dict(dict) = self.top()?.clone() else {
            return Err(PickleErrorKind::Malformed(
                "SETITEM on something not a dict",
            ));
        };
        dict.items.borrow_mut().extend(items);
        Ok(())
    }

    fn run<V: Visitor>(&mut self, visitor: &mut V) -> Result<Value, PickleErrorKind> {
        loop {
            self.input.mark = self.input.start;
            let op = self.input.byte()?;
            match op {
                0x80 => {
                    let p = self.input.byte()?;
                    if !(2..=5).contains(&p) {
                        return Err(PickleErrorKind::Protocol(p));
                    }
                }
                // FRAME: a length prefix for buffering; the bytes are read as they come.
                0x95 => {
                    self.input.array::<8>()?;
                }
                b'.' => return self.pop(),
                b'('
                | b'}'
                | b']'
                | b')'
                | b'd'
                | b'l'
                | b's'
                | b'u'
                | b'a'
                | b'e'
                | b't'
                | 0x85..=0x87
                | b'0'
                | b'1'
                | b'2' => self.structure(op, visitor)?,
                0x94 | b'q' | b'r' | b'h' | b'j' => self.memo_op(op)?,
                _ => self.scalar(op)?,
            }
        }
    }

    /// The opcodes that build containers and move the stack: marks, dicts, lists, tuples, their
    /// items, and popping or duplicating.
    #[inline(always)]
    fn structure<V: Visitor>(&mut self, op: u8, visitor: &mut V) -> Result<(), PickleErrorKind> {
        match op {
            b'(' => self.marks.push(self.stack.len()),
            b'}' => {
                let d = match self.spare_dict.take() {
                    Some(d) => Value::Dict(d),
                    None => Self::new_dict(Vec::new()),
                };
                self.stack.push(d);
            }
            b']' => {
                let l = self.new_list(Vec::new());
                self.stack.push(l);
            }
            b')' => self.stack.push(Value::Tuple(Rc::new(Tuple::default()))),
            b'd' => {
                let items = self.pop_mark()?;
                if !items.len().is_multiple_of(2) {
                    return Err(PickleErrorKind::Malformed("DICT with an odd count"));
                }
                self.stack.push(Self::new_dict(items));
            }
            b'l' => {
                let items = self.pop_mark()?;
                let l = self.new_list(items);
                self.stack.push(l);
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                self.set_items(vec![k, v])?;
            }
            b'u' => {
                let mark = self
                    .marks
                    .pop()
                    .ok_or(PickleErrorKind::Malformed("no mark"))?
                    .min(self.stack.len());
                if !(self.stack.len() - mark).is_multiple_of(2) {
                    return Err(PickleErrorKind::Malformed("SETITEMS with an odd count"));
                }
                let Some(Value::Dict(dict)) = mark.checked_sub(1).map(|i| &self.stack[i]) else {
                    return Err(PickleErrorKind::Malformed(
                        "SETITEM on something not a dict",
                    ));
                };
                let dict = dict.clone();
                let mut items = dict.items.borrow_mut();
                if items.is_empty() {
                    *items = self.stack.split_off(mark);
                } else {
                    items.append(&mut self.stack.split_off(mark));
                }
            }
            b'a' => {
                // The item must lie above the last mark; the list is just below it.
                self.top()?;
                self.append(self.stack.len() - 1, visitor)?;
            }
            b'e' => {
                let mark = self
                    .marks
                    .pop()
                    .ok_or(PickleErrorKind::Malformed("no mark"))?
                    .min(self.stack.len());
                self.append(mark, visitor)?;
            }
            b't' => {
                let items = self.pop_mark()?;
                self.stack.push(Value::Tuple(Rc::new(Tuple(items))));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if self.stack.len() < n
                    || self.marks.last().is_some_and(|m| *m > self.stack.len() - n)
                {
                    return Err(PickleErrorKind::Malformed("TUPLE of missing values"));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.stack.push(Value::Tuple(Rc::new(Tuple(items))));
            }
            b'0' => {
                if self.marks.last() == Some(&self.stack.len()) {
                    self.marks.pop();
                } else {
                    self.pop()?;
                }
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let v = self.top()?.clone();
                self.stack.push(v);
            }
            _ => unreachable!("run hands over the structure opcodes only"),
        }
        Ok(())
    }

    /// The memo's opcodes: keeping the top of the stack in a slot, and fetching one.
    #[inline(always)]
    fn memo_op(&mut self, op: u8) -> Result<(), PickleErrorKind> {
        match op {
            0x94 => {
                let slot = u32::try_from(self.memo.slots.len())
                    .map_err(|_| PickleErrorKind::Malformed("memo too large"))?;
                let v = self.top()?.clone();
                self.memo.put(slot, &v);
            }
            b'q' | b'r' => {
                let slot = if op == b'q' {
                    u32::from(self.input.byte()?)
                } else {
                    u32::from_le_bytes(self.input.array::<4>()?)
                };
                // Memo ids are sequential in practice (sparse in torch's C++ pickler only by
                // a little): a far jump is damage, not a reason to allocate a huge table.
                if slot == NO_SLOT || slot as usize > self.memo.slots.len() + (1 << 16) {
                    return Err(PickleErrorKind::Malformed("memo slot out of range"));
                }
                let v = self.top()?.clone();
                self.memo.put(slot, &v);
            }
            b'h' | b'j' => {
                let slot = if op == b'h' {
                    u32::from(self.input.byte()?)
                } else {
                    u32::from_le_bytes(self.input.array::<4>()?)
                };
                let v = self
                    .memo
                    .get(slot)
                    .ok_or(PickleErrorKind::Malformed(
                        "reference to an empty memo slot",
                    ))?
                    .clone();
                self.stack.push(v);
            }
            _ => unreachable!("run hands over the memo opcodes only"),
        }
        Ok(())
    }

    /// The opcodes that push one scalar (a string, bytes, an int, a float, a constant); any other
    /// opcode is unsupported or unknown.
    #[inline(always)]
    fn scalar(&mut self, op: u8) -> Result<(), PickleErrorKind> {
        match op {
            // Strings and bytes, by the width of their length prefix.
            0x8c | b'X' | 0x8d | b'C' | b'B' | 0x8e | 0x96 => {
                let len = match op {
                    0x8c | b'C' => u64::from(self.input.byte()?),
                    b'X' | b'B' => u64::from(u32::from_le_bytes(self.input.array::<4>()?)),
                    _ => u64::from_le_bytes(self.input.array::<8>()?),
                };
                let text = matches!(op, 0x8c | b'X' | 0x8d);
                let v = self.input.with_bytes(len, |b| {
                    if text {
                        str_value(b)
                    } else {
                        Value::Bytes(Rc::new(b.to_vec()))
                    }
                })?;
                self.stack.push(v);
            }
            b'J' => {
                let v = i32::from_le_bytes(self.input.array::<4>()?);
                self.stack.push(Value::Int(i64::from(v)));
            }
            b'K' => {
                let v = self.input.byte()?;
                self.stack.push(Value::Int(i64::from(v)));
            }
            b'M' => {
                let v = u16::from_le_bytes(self.input.array::<2>()?);
                self.stack.push(Value::Int(i64::from(v)));
            }
            0x8a => {
                let n = self.input.byte()?;
                let v = self.input.with_bytes(u64::from(n), long)??;
                self.stack.push(int_value(v));
            }
            0x8b => {
                let n = u32::from_le_bytes(self.input.array::<4>()?);
                if n > 64 {
                    // Wider than any int this reader keeps: read it to say so.
                    self.input.skip(u64::from(n))?;
                    return Err(PickleErrorKind::IntTooLarge);
                }
                let v = self.input.with_bytes(u64::from(n), long)??;
                self.stack.push(int_value(v));
            }
            b'G' => {
                let v = f64::from_be_bytes(self.input.array::<8>()?);
                self.stack.push(Value::Float(v));
            }
            b'N' => self.stack.push(Value::None),
            0x88 => self.stack.push(Value::Bool(true)),
            0x89 => self.stack.push(Value::Bool(false)),
            _ => {
                return Err(match unsupported_name(op) {
                    Some(name) => PickleErrorKind::Unsupported { opcode: op, name },
                    None => PickleErrorKind::UnknownOpcode(op),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_two_words() {
        assert_eq!(size_of::<Value>(), 16);
        assert_eq!(size_of::<Option<Value>>(), 16);
    }

    /// `pickle.dumps({"a": [1, -2, 3.5, True, None], "b": (1, 2), "c": "é", "d": b"x"},
    /// protocol=4)` from CPython 3.11.
    const PROTOCOL_4: &[u8] = b"\x80\x04\x95:\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00\x88Ne\x8c\x01b\x94K\x01K\x02\x86\x94\x8c\x01c\x94\x8c\x02\xc3\xa9\x94\x8c\x01d\x94C\x01x\x94u.";

    #[test]
    fn a_protocol_4_pickle_reads_as_python_wrote_it() {
        let Value::Dict(d) = from_slice(PROTOCOL_4).unwrap() else {
            panic!("a dict")
        };
        let Some(Value::List(a)) = d.get("a") else {
            panic!("a list")
        };
        let a = a.items.borrow();
        assert_eq!(a[0].as_i64(), Some(1));
        assert_eq!(a[1].as_i64(), Some(-2));
        assert_eq!(a[2].as_f64(), Some(3.5));
        assert_eq!(a[3].as_bool(), Some(true));
        assert!(matches!(a[4], Value::None));
        let Some(Value::Tuple(b)) = d.get("b") else {
            panic!("a tuple")
        };
        assert_eq!(b.0.len(), 2);
        assert_eq!(d.get("c").unwrap().as_str(), Some("é"));
        assert!(matches!(d.get("d"), Some(Value::Bytes(x)) if x.as_slice() == b"x"));
    }

    #[test]
    fn every_cut_of_a_pickle_is_an_error_never_a_panic() {
        for cut in 0..PROTOCOL_4.len() {
            let (e, _) = read(&PROTOCOL_4[..cut], &mut KeepAll).unwrap_err();
            assert_eq!(e.kind, PickleErrorKind::Truncated, "cut at {cut}");
        }
    }

    #[test]
    fn a_million_nested_tuples_drop_without_recursion() {
        let mut p = vec![0x80, 4, b'K', 1];
        p.extend(std::iter::repeat_n(0x85u8, 1_000_000));
        p.push(b'.');
        assert!(matches!(from_slice(&p), Ok(Value::Tuple(_))));
        // Lists nested through APPEND, and the same cut short (dropped from the error path).
        let mut p = vec![0x80, 4];
        p.extend(std::iter::repeat_n(b']', 200_000));
        p.extend(std::iter::repeat_n(b'a', 199_999));
        assert!(from_slice(&p).is_err());
        p.push(b'.');
        assert!(matches!(from_slice(&p), Ok(Value::List(_))));
    }

    #[test]
    fn nine_byte_ints_and_negative_longs() {
        assert_eq!(long(&[0xff; 8]).unwrap(), -1);
        let mut nine = [0xff; 9];
        nine[8] = 0;
        assert_eq!(long(&nine).unwrap(), i128::from(u64::MAX));
        assert_eq!(long(&[0x00, 0x80]).unwrap(), -32768);
        assert_eq!(long(&[]).unwrap(), 0);
        let mut wide = [0u8; 17];
        wide[16] = 1;
        assert_eq!(long(&wide), Err(PickleErrorKind::IntTooLarge));
        // 0x80 LONG1 9 bytes = 2**64 - 1, then STOP.
        let mut p = vec![0x80, 2, 0x8a, 9];
        p.extend_from_slice(&nine);
        p.push(b'.');
        assert_eq!(from_slice(&p).unwrap().as_u64(), Some(u64::MAX));
    }

    #[test]
    fn classes_and_globals_are_named_in_the_error() {
        // pickle.dumps(collections.OrderedDict(), protocol=2)
        let p = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01.";
        let e = from_slice(p).unwrap_err();
        assert_eq!(
            e.kind,
            PickleErrorKind::Unsupported {
                opcode: b'c',
                name: "GLOBAL"
            }
        );
        assert!(e.to_string().contains("GLOBAL (0x63) at byte 2"), "{e}");
        let e = from_slice(b"\x80\x01.").unwrap_err();
        assert_eq!(e.kind, PickleErrorKind::Protocol(1));
        assert!(matches!(
            from_slice(b"\x80\x04\xff").unwrap_err().kind,
            PickleErrorKind::UnknownOpcode(0xff)
        ));
    }

    #[test]
    fn a_shared_object_is_one_object() {
        // fr = {"f": 1}; pickle.dumps([[fr], [fr]], protocol=2): BINPUT/BINGET share `fr`.
        let p = b"\x80\x02]q\x00(]q\x01}q\x02X\x01\x00\x00\x00fq\x03K\x01sa]q\x04h\x02ae.";
        let Value::List(outer) = from_slice(p).unwrap() else {
            panic!()
        };
        let outer = outer.items.borrow();
        let first = |i: usize| match &outer[i] {
            Value::List(l) => match &l.items.borrow()[0] {
                Value::Dict(d) => d.clone(),
                _ => panic!(),
            },
            _ => panic!(),
        };
        assert!(Rc::ptr_eq(&first(0), &first(1)));
        assert_eq!(first(1).get("f").unwrap().as_u64(), Some(1));
    }

    #[test]
    fn a_visitor_takes_items_and_they_are_forgotten() {
        struct TakeDicts(usize);
        impl Visitor for TakeDicts {
            fn appended(&mut self, _: &List, item: &Value, _: &mut Memo) -> Offer {
                let take = matches!(item, Value::Dict(_));
                self.0 += usize::from(take);
                if take { Offer::Take } else { Offer::Keep }
            }
        }
        let mut v = TakeDicts(0);
        let Value::Dict(d) = read(PROTOCOL_4, &mut v).unwrap() else {
            panic!()
        };
        assert_eq!(v.0, 0, "no dict in a list there");
        assert!(d.get("a").is_some());
        // [{}, 1, {}] in protocol 4: both dicts taken, the int kept.
        let p = b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94K\x01}\x94e.";
        let mut v = TakeDicts(0);
        let Value::List(l) = read(&p[..], &mut v).unwrap() else {
            panic!()
        };
        assert_eq!(v.0, 2);
        assert_eq!(l.items.borrow().len(), 1);
    }
}
