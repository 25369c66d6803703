//! Frames of a live run to a pcap or pcapng file (`live --write-pcap`).
//!
//! Written here, on the capture thread, so that saving the frames costs no Python call
//! per frame. Both layouts are a fixed header and one fixed record header per frame
//! (pcap: libpcap's file format; pcapng: one Section Header, one Interface Description
//! and an Enhanced Packet Block per frame), in this machine's byte order, timestamps in
//! microseconds (libpcap's live resolution, so they are kept exact). `capture/mod.rs` reads
//! both back; tshark reads them in the tests.

use std::fs::File;
use std::io::{BufWriter, Write};

/// Which layout to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Pcap,
    PcapNg,
}

impl Layout {
    /// `.pcapng` names pcapng, anything else classic pcap.
    pub fn for_path(path: &str) -> Layout {
        if path.to_lowercase().ends_with(".pcapng") {
            Layout::PcapNg
        } else {
            Layout::Pcap
        }
    }
}

pub struct PcapWriter<W: Write> {
    out: W,
    layout: Layout,
    pub frames: u64,
}

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const EPB: u32 = 0x0000_0006;

impl PcapWriter<BufWriter<File>> {
    pub fn create(path: &str, linktype: u32, snaplen: u32) -> std::io::Result<Self> {
        let file = File::create(path)?;
        PcapWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            Layout::for_path(path),
            linktype,
            snaplen,
        )
    }
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W, layout: Layout, linktype: u32, snaplen: u32) -> std::io::Result<Self> {
        match layout {
            Layout::Pcap => {
                let mut h = Vec::with_capacity(24);
                h.extend_from_slice(&0xA1B2_C3D4u32.to_ne_bytes()); // microseconds
                h.extend_from_slice(&2u16.to_ne_bytes());
                h.extend_from_slice(&4u16.to_ne_bytes());
                h.extend_from_slice(&0i32.to_ne_bytes()); // thiszone
                h.extend_from_slice(&0u32.to_ne_bytes()); // sigfigs
                h.extend_from_slice(&snaplen.to_ne_bytes());
                h.extend_from_slice(&linktype.to_ne_bytes());
                out.write_all(&h)?;
            }
            Layout::PcapNg => {
                // Section Header Block: byte-order magic, version 1.0, length unknown.
                let mut shb = Vec::with_capacity(28);
                shb.extend_from_slice(&SHB.to_ne_bytes());
                shb.extend_from_slice(&28u32.to_ne_bytes());
                shb.extend_from_slice(&0x1A2B_3C4Du32.to_ne_bytes());
                shb.extend_from_slice(&1u16.to_ne_bytes());
                shb.extend_from_slice(&0u16.to_ne_bytes());
                shb.extend_from_slice(&(-1i64).to_ne_bytes());
                shb.extend_from_slice(&28u32.to_ne_bytes());
                out.write_all(&shb)?;
                // Interface Description Block without options: if_tsresol defaults to
                // microseconds.
                let linktype16 = u16::try_from(linktype).unwrap_or(u16::MAX);
                let mut idb = Vec::with_capacity(20);
                idb.extend_from_slice(&IDB.to_ne_bytes());
                idb.extend_from_slice(&20u32.to_ne_bytes());
                idb.extend_from_slice(&linktype16.to_ne_bytes());
                idb.extend_from_slice(&0u16.to_ne_bytes());
                idb.extend_from_slice(&snaplen.to_ne_bytes());
                idb.extend_from_slice(&20u32.to_ne_bytes());
                out.write_all(&idb)?;
            }
        }
        Ok(PcapWriter {
            out,
            layout,
            frames: 0,
        })
    }

    /// One frame: its time (nanoseconds since the epoch, written as microseconds), its
    /// captured bytes and its length on the wire.
    pub fn write(&mut self, ts_ns: i64, data: &[u8], wire_len: u32) -> std::io::Result<()> {
        let usec = ts_ns.div_euclid(1_000);
        let caplen = data.len() as u32;
        match self.layout {
            Layout::Pcap => {
                let (sec, frac) = (usec.div_euclid(1_000_000), usec.rem_euclid(1_000_000));
                let mut h = [0u8; 16];
                h[0..4].copy_from_slice(&(sec as u32).to_ne_bytes());
                h[4..8].copy_from_slice(&(frac as u32).to_ne_bytes());
                h[8..12].copy_from_slice(&caplen.to_ne_bytes());
                h[12..16].copy_from_slice(&wire_len.to_ne_bytes());
                self.out.write_all(&h)?;
                self.out.write_all(data)?;
            }
            Layout::PcapNg => {
                let padded = data.len().div_ceil(4) * 4;
                let total = (32 + padded) as u32;
                let ticks = usec as u64;
                let mut h = [0u8; 28];
                h[0..4].copy_from_slice(&EPB.to_ne_bytes());
                h[4..8].copy_from_slice(&total.to_ne_bytes());
                h[8..12].copy_from_slice(&0u32.to_ne_bytes()); // interface 0
                h[12..16].copy_from_slice(&((ticks >> 32) as u32).to_ne_bytes());
                h[16..20].copy_from_slice(&(ticks as u32).to_ne_bytes());
                h[20..24].copy_from_slice(&caplen.to_ne_bytes());
                h[24..28].copy_from_slice(&wire_len.to_ne_bytes());
                self.out.write_all(&h)?;
                self.out.write_all(data)?;
                self.out.write_all(&[0u8; 3][..padded - data.len()])?;
                self.out.write_all(&total.to_ne_bytes())?;
            }
        }
        self.frames += 1;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::PacketReader;
    use crate::types::Counters;

    /// An Ethernet/IPv4/TCP frame with `payload`, ports 40000 -> 9092.
    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 20 + payload.len()) as u16;
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            6,
        ]);
        f.extend_from_slice(&[0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&9092u16.to_be_bytes());
        f.extend_from_slice(&1u32.to_be_bytes());
        f.extend_from_slice(&0u32.to_be_bytes());
        f.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn read_back(bytes: Vec<u8>) -> Vec<(i64, usize)> {
        let mut counters = Counters::default();
        let mut reader = PacketReader::new(Box::new(std::io::Cursor::new(bytes))).unwrap();
        let mut got = Vec::new();
        while let Some(p) = reader.next_packet(&mut counters) {
            got.push((p.ts_ns, p.payload.len()));
        }
        got
    }

    #[test]
    fn both_layouts_read_back_with_exact_microseconds() {
        for layout in [Layout::Pcap, Layout::PcapNg] {
            let mut buf = Vec::new();
            let mut w = PcapWriter::new(&mut buf, layout, 1, 65535).unwrap();
            // Payloads of 1..=4 bytes exercise every pcapng padding length.
            let times = [1_700_000_000_123_456_789i64, 1_700_000_001_000_001_000];
            for (i, ts) in times.iter().enumerate() {
                for n in 1..=4 {
                    let f = frame(&vec![b'k'; n + i]);
                    w.write(*ts, &f, f.len() as u32).unwrap();
                }
            }
            assert_eq!(w.frames, 8);
            let got = read_back(buf);
            assert_eq!(got.len(), 8, "{layout:?}");
            assert_eq!(got[0], (1_700_000_000_123_456_000, 1), "{layout:?}");
            assert_eq!(got[7], (1_700_000_001_000_001_000, 5), "{layout:?}");
        }
    }
}
