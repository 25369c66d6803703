//! The one reader of wire bytes: a bounds-checked cursor over a byte slice.
//!
//! Every stage that reads fields in sequence or at an offset (capture file headers,
//! Kafka headers and framing, record batches, bodies walked by the summary and the
//! tables, the test drivers' dumps) reads through `Cursor` or the `be_*`/`le_*` peeks
//! built on it, so a cut-off value is a `Fault::Short`, never an index panic. Only
//! fixed headers already cut to their length (IP, TCP, a TLS record header) are read in
//! place. Kafka writes big-endian; the `_le` reads serve pcap's either-order headers,
//! checksums and the drivers' dumps. What a fault means to a stage (a Python-visible
//! error name, a counter, a skipped record) is the stage's business: it maps the `Fault`.

/// The most bytes of a Kafka varint (int32 range) and varlong (int64 range).
pub const VARINT_BYTES: u32 = 5;
pub const VARLONG_BYTES: u32 = 10;

/// Why a read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The bytes end before the value does.
    Short,
    /// A varint ran on past the number of bytes its type allows.
    LongVarint,
}

#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

macro_rules! fixed {
    ($($be:ident, $le:ident: $t:ty;)*) => {$(
        #[inline]
        pub fn $be(&mut self) -> Result<$t, Fault> {
            Ok(<$t>::from_be_bytes(self.array()?))
        }

        #[inline]
        pub fn $le(&mut self) -> Result<$t, Fault> {
            Ok(<$t>::from_le_bytes(self.array()?))
        }
    )*};
}

impl<'a> Cursor<'a> {
    /// A cursor at `pos` of `buf` (`pos` may lie beyond the end: every read is then short).
    #[inline]
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos }
    }

    /// The offset of the next read, from the start of the slice.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    pub fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Fault> {
        let end = self.pos.checked_add(n).ok_or(Fault::Short)?;
        let bytes = self.buf.get(self.pos..end).ok_or(Fault::Short)?;
        self.pos = end;
        Ok(bytes)
    }

    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), Fault> {
        if n > self.left() {
            return Err(Fault::Short);
        }
        self.pos += n;
        Ok(())
    }

    /// Steps over `byte` if it comes next; says whether it did.
    #[inline]
    pub fn eat(&mut self, byte: u8) -> bool {
        let next = self.buf.get(self.pos) == Some(&byte);
        self.pos += usize::from(next);
        next
    }

    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Fault> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, Fault> {
        let b = *self.buf.get(self.pos).ok_or(Fault::Short)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub fn i8(&mut self) -> Result<i8, Fault> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    fixed! {
        u16, u16_le: u16;
        i16, i16_le: i16;
        u32, u32_le: u32;
        i32, i32_le: i32;
        u64, u64_le: u64;
        i64, i64_le: i64;
    }

    /// An unsigned LEB128 varint of at most `max_bytes` bytes (Kafka: 5 for a varint,
    /// 10 for a varlong); bits beyond 64 are dropped.
    #[inline]
    pub fn uvarint(&mut self, max_bytes: u32) -> Result<u64, Fault> {
        let mut value = 0u64;
        for i in 0..max_bytes {
            let b = self.u8()?;
            value |= u64::from(b & 0x7f).checked_shl(7 * i).unwrap_or(0);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(Fault::LongVarint)
    }

    /// A zigzag varint (Kafka's record fields) of at most `max_bytes` bytes.
    #[inline]
    pub fn varint(&mut self, max_bytes: u32) -> Result<i64, Fault> {
        let raw = self.uvarint(max_bytes)?;
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }
}

/// Peeks at a fixed offset, for code that reads a field where a format puts it
/// rather than in sequence: None when the slice ends before the value.
macro_rules! peeks {
    ($($name:ident: $read:ident -> $t:ty;)*) => {$(
        #[inline]
        pub fn $name(buf: &[u8], at: usize) -> Option<$t> {
            Cursor::new(buf, at).$read().ok()
        }
    )*};
}

peeks! {
    be_u16: u16 -> u16;
    be_i16: i16 -> i16;
    be_u32: u32 -> u32;
    be_i32: i32 -> i32;
    be_i64: i64 -> i64;
    le_u16: u16_le -> u16;
    le_u32: u32_le -> u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_reads_move_on_and_stop_short() {
        let mut c = Cursor::new(&[0x01, 0x02, 0x03, 0x04, 0x05], 0);
        assert_eq!(c.i16(), Ok(0x0102));
        assert_eq!(c.u16_le(), Ok(0x0403));
        assert_eq!(c.i32(), Err(Fault::Short));
        assert_eq!(c.pos(), 4); // a short read leaves the cursor where it was
        assert_eq!(c.u8(), Ok(5));
        assert_eq!(c.u8(), Err(Fault::Short));
    }

    #[test]
    fn peeks_read_at_an_offset_without_overflow() {
        let buf = [0xff, 0xff, 0xff, 0xfe, 0x00];
        assert_eq!(be_i32(&buf, 0), Some(-2));
        assert_eq!(le_u32(&buf, 1), Some(0x00fe_ffff));
        assert_eq!(be_i32(&buf, 2), None);
        assert_eq!(be_i32(&buf, usize::MAX), None);
        assert_eq!(Cursor::new(&buf, usize::MAX).take(2), Err(Fault::Short));
    }

    #[test]
    fn varints_as_kafka_writes_them() {
        // 300 = 0b10_0101100: 0xac 0x02; zigzag 1 -> -1, 2 -> 1.
        assert_eq!(Cursor::new(&[0xac, 0x02], 0).uvarint(5), Ok(300));
        assert_eq!(Cursor::new(&[0x01], 0).varint(5), Ok(-1));
        assert_eq!(Cursor::new(&[0x02], 0).varint(5), Ok(1));
        assert_eq!(Cursor::new(&[0x80, 0x80], 0).uvarint(5), Err(Fault::Short));
        let long = [0xff; 10];
        assert_eq!(Cursor::new(&long, 0).uvarint(5), Err(Fault::LongVarint));
        let mut max = [0xff; 10];
        max[9] = 0x01;
        assert_eq!(Cursor::new(&max, 0).uvarint(10), Ok(u64::MAX));
    }

    #[test]
    fn eat_steps_over_only_the_byte_asked_for() {
        let mut c = Cursor::new(&[0, 1], 0);
        assert!(c.eat(0));
        assert!(!c.eat(0));
        assert_eq!(c.pos(), 1);
        assert!(c.eat(1));
        assert!(!c.eat(1)); // at the end
    }
}
