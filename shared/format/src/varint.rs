//! LEB128 varints and zigzag mapping: the integer encoding of every record body.
//!
//! Memory counters change slowly, so after delta coding most values are tiny and take one byte.
//! The decoder has a one-byte fast path because that is by far the common case.

/// Appends `value` as an unsigned LEB128 varint (1–10 bytes).
#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Maps a signed integer to an unsigned one so that small magnitudes stay small.
#[inline]
pub(crate) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub(crate) fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Why a read from a [`Cursor`] failed. Carries no data: callers turn it into a warning that
/// names the record and the offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The body ended in the middle of a value.
    Short,
    /// A varint was longer than 10 bytes or overflowed 64 bits.
    Overlong,
}

/// A bounds-checked reader over one record body. Every read checks the remaining length, so a
/// hostile length or count can never make it read past the body.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Result<u64, ReadError> {
        let first = *self.buf.get(self.pos).ok_or(ReadError::Short)?;
        self.pos += 1;
        if first < 0x80 {
            return Ok(u64::from(first));
        }
        let mut value = u64::from(first & 0x7f);
        let mut shift = 7u32;
        loop {
            let byte = *self.buf.get(self.pos).ok_or(ReadError::Short)?;
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(ReadError::Overlong);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err(ReadError::Overlong);
            }
        }
    }

    #[inline]
    pub(crate) fn i64(&mut self) -> Result<i64, ReadError> {
        self.u64().map(unzigzag)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ReadError> {
        u32::try_from(self.u64()?).map_err(|_| ReadError::Overlong)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ReadError> {
        let byte = *self.buf.get(self.pos).ok_or(ReadError::Short)?;
        self.pos += 1;
        Ok(byte)
    }

    pub(crate) fn f64(&mut self) -> Result<f64, ReadError> {
        let bytes = self.bytes(8)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(bytes);
        Ok(f64::from_le_bytes(raw))
    }

    pub(crate) fn bytes(&mut self, len: usize) -> Result<&'a [u8], ReadError> {
        if len > self.remaining() {
            return Err(ReadError::Short);
        }
        let slice = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(slice)
    }

    /// A length-prefixed UTF-8 string; invalid UTF-8 is replaced, never rejected.
    pub(crate) fn string(&mut self) -> Result<String, ReadError> {
        let len = self.u64()?;
        let len = usize::try_from(len).map_err(|_| ReadError::Short)?;
        let bytes = self.bytes(len)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// A count of items that each take at least `min_item_bytes` bytes: a count larger than the
    /// rest of the body could hold is refused before anything is allocated for it.
    pub(crate) fn count(&mut self, min_item_bytes: usize) -> Result<usize, ReadError> {
        let count = self.u64()?;
        let bound = self.remaining() / min_item_bytes.max(1);
        match usize::try_from(count) {
            Ok(count) if count <= bound => Ok(count),
            _ => Err(ReadError::Short),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trips(values in proptest::collection::vec(any::<u64>(), 0..64)) {
            let mut out = Vec::new();
            for v in &values {
                put_u64(&mut out, *v);
            }
            let mut cursor = Cursor::new(&out);
            for v in &values {
                prop_assert_eq!(cursor.u64().unwrap(), *v);
            }
            prop_assert!(cursor.is_empty());
        }

        #[test]
        fn zigzag_round_trips(v in any::<i64>()) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn small_magnitudes_take_one_byte() {
        for v in -64i64..64 {
            let mut out = Vec::new();
            put_u64(&mut out, zigzag(v));
            assert_eq!(out.len(), 1, "{v}");
        }
    }

    #[test]
    fn overlong_and_short_varints_are_refused() {
        let overlong = [0xffu8; 11];
        assert_eq!(Cursor::new(&overlong).u64(), Err(ReadError::Overlong));
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(Cursor::new(&overflow).u64(), Err(ReadError::Overlong));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Cursor::new(&max).u64(), Ok(u64::MAX));
        assert_eq!(Cursor::new(&[0x80]).u64(), Err(ReadError::Short));
        assert_eq!(Cursor::new(&[]).u64(), Err(ReadError::Short));
    }

    #[test]
    fn counts_larger_than_the_body_are_refused() {
        let mut out = Vec::new();
        put_u64(&mut out, 1_000_000);
        out.extend_from_slice(&[0; 10]);
        assert_eq!(Cursor::new(&out).count(1), Err(ReadError::Short));
        let mut ok = Vec::new();
        put_u64(&mut ok, 5);
        ok.extend_from_slice(&[0; 10]);
        assert_eq!(Cursor::new(&ok).count(2), Ok(5));
    }
}
