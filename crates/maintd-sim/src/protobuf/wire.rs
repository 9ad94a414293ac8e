//! The protobuf wire format, read field by field: the few rules (varints,
//! lengths, fixed-width numbers) every message is made of. Nothing here
//! trusts its input: a truncated or oversized field is an error, not a panic.

/// One field as it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WireValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl WireValue<'_> {
    /// The wire type's name, for error messages.
    pub fn wire_name(&self) -> &'static str {
        match self {
            WireValue::Varint(_) => "varint",
            WireValue::Fixed64(_) => "64-bit",
            WireValue::Bytes(_) => "length-delimited",
            WireValue::Fixed32(_) => "32-bit",
        }
    }
}

/// Reads the fields of one message in order: (field number, value).
pub struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Fields { buf }
    }

    fn next_field(&mut self) -> Result<(u32, WireValue<'a>), String> {
        let key = read_varint(&mut self.buf)?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n != 0 && *n < (1 << 29))
            .ok_or_else(|| format!("invalid field number {}", key >> 3))?;
        let value = match key & 7 {
            0 => WireValue::Varint(read_varint(&mut self.buf)?),
            1 => WireValue::Fixed64(u64::from_le_bytes(take_array(&mut self.buf, number)?)),
            2 => {
                let len = read_varint(&mut self.buf)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= self.buf.len())
                    .ok_or_else(|| {
                        format!(
                            "field {number} says it is {len} bytes long, {} are left",
                            self.buf.len()
                        )
                    })?;
                let (bytes, rest) = self.buf.split_at(len);
                self.buf = rest;
                WireValue::Bytes(bytes)
            }
            5 => WireValue::Fixed32(u32::from_le_bytes(take_array(&mut self.buf, number)?)),
            // 3 and 4 are proto2 groups, which no Kubernetes message uses.
            t => return Err(format!("field {number} has the unsupported wire type {t}")),
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, WireValue<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let item = self.next_field();
        if item.is_err() {
            // Stop after the first error: what follows is not aligned.
            self.buf = &[];
        }
        Some(item)
    }
}

/// A varint (at most 10 bytes), advancing `buf` past it.
pub fn read_varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for (i, byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Ok(value);
        }
    }
    Err(if buf.len() < 10 {
        "the body ends inside a number".to_string()
    } else {
        "a number is longer than 10 bytes".to_string()
    })
}

fn take_array<const N: usize>(buf: &mut &[u8], number: u32) -> Result<[u8; N], String> {
    let (head, rest) = buf
        .split_first_chunk::<N>()
        .ok_or_else(|| format!("the body ends inside field {number}"))?;
    *buf = rest;
    Ok(*head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(buf: &[u8]) -> Vec<Result<(u32, WireValue<'_>), String>> {
        Fields::new(buf).collect()
    }

    #[test]
    fn reads_each_wire_type() {
        let buf = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x12, 0x02, b'h', b'i', // 2: "hi"
            0x19, 1, 0, 0, 0, 0, 0, 0, 0, // 3: fixed64 1
            0x25, 2, 0, 0, 0, // 4: fixed32 2
        ];
        let got: Vec<_> = fields(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![
                (1, WireValue::Varint(150)),
                (2, WireValue::Bytes(b"hi")),
                (3, WireValue::Fixed64(1)),
                (4, WireValue::Fixed32(2)),
            ]
        );
    }

    #[test]
    fn a_negative_int_is_ten_bytes() {
        let mut buf: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read_varint(&mut buf).map(|v| v as i64), Ok(-1));
        assert!(buf.is_empty());
    }

    #[test]
    fn malformed_input_is_an_error_and_ends_the_message() {
        for (buf, says) in [
            (&[0x12, 0x05, b'a'][..], "5 bytes long, 1 are left"),
            (&[0x08, 0x80][..], "ends inside a number"),
            (&[0x08; 1][..], "ends inside a number"),
            (&[0x19, 1, 2][..], "ends inside field 3"),
            (&[0x0b][..], "unsupported wire type 3"),
            (&[0x00, 0x00][..], "invalid field number 0"),
            (&[0x88; 12][..], "longer than 10 bytes"),
        ] {
            let got = fields(buf);
            assert_eq!(got.len(), 1, "{buf:?}: {got:?}");
            let err = got[0].clone().unwrap_err();
            assert!(err.contains(says), "{buf:?}: {err}");
        }
    }
}
