//! IPv4 and IPv6 fragment reassembly for the capture stage (`capture/mod.rs`).
//!
//! Captures taken where the MTU is smaller than the senders' (tunnels, mirror ports,
//! jumbo-frame hosts behind ordinary links) carry IP fragments; a TCP segment split
//! into fragments is only whole again here. State is bounded and every fragment that
//! does not end up in a datagram is counted with the reason:
//!
//! * `ip_fragments_timeout`: its datagram was not complete after the reassembly
//!   timeout of capture time (30 s for IPv4 as Linux's `ipfrag_time`, 60 s for IPv6 as
//!   RFC 8200 says);
//! * `ip_fragments_evicted`: more datagrams (`MAX_DATAGRAMS`) or bytes (`MAX_BYTES`)
//!   were pending than the bounds allow, and its datagram was the oldest;
//! * `ip_fragments_bad`: its datagram could not be made consistently (overlapping
//!   fragments that disagree, as RFC 5722 forbids; two different ends; past 65,535
//!   bytes);
//! * `ip_fragments_incomplete`: the capture ended before its datagram was complete.
//!
//! Duplicate fragments (the same bytes twice, as a capture on two interfaces shows)
//! are harmless and ignored. The capture stage counts fragments cut by the snap length
//! (`ip_fragments_cut`) itself: their bytes cannot be placed.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::counter::Counter;
use crate::types::{Counters, Ts};

/// Datagrams being reassembled at once; beyond it the oldest is dropped.
pub const MAX_DATAGRAMS: usize = 4096;
/// Bytes held for datagrams being reassembled; beyond it the oldest are dropped.
pub const MAX_BYTES: usize = 32 << 20;
/// Largest reassembled payload: an IP length field cannot say more.
const MAX_PAYLOAD: usize = 65_535;
pub const TIMEOUT_V4_NS: Ts = 30_000_000_000;
pub const TIMEOUT_V6_NS: Ts = 60_000_000_000;

/// What tells one datagram's fragments from another's (RFC 791 / RFC 8200).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub id: u32,
    /// IPv4: the protocol (part of the key); IPv6: 0 (the next header is not).
    pub proto: u8,
}

/// One fragment as the IP layer found it.
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    pub key: FragKey,
    /// Protocol of the reassembled payload (IPv6: the fragment header's next header).
    pub proto: u8,
    pub offset: usize,
    pub more: bool,
    pub bytes: &'a [u8],
    pub ts: Ts,
}

/// A reassembled datagram: its payload (after the IP header) and protocol.
#[derive(Debug)]
pub struct Datagram {
    pub proto: u8,
    pub payload: Vec<u8>,
}

#[derive(Debug)]
struct Pending {
    generation: u64,
    first_ts: Ts,
    timeout: Ts,
    proto: Option<u8>, // from the fragment at offset 0
    data: Vec<u8>,
    have: Vec<(usize, usize)>, // disjoint, sorted ranges received
    total: Option<usize>,      // known once the last fragment came
    fragments: u64,
}

impl Pending {
    /// Add one fragment; Err when the datagram cannot be made consistently.
    fn add(&mut self, f: &Fragment<'_>) -> Result<(), ()> {
        self.fragments += 1;
        let end = f.offset.checked_add(f.bytes.len()).ok_or(())?;
        if end > MAX_PAYLOAD {
            return Err(());
        }
        if !f.more {
            match self.total {
                Some(t) if t != end => return Err(()),
                _ => self.total = Some(end),
            }
        }
        if self.total.is_some_and(|t| end > t) {
            return Err(());
        }
        if f.offset == 0 {
            self.proto = Some(f.proto);
        }
        // Overlaps must agree with what is held (then they add nothing there).
        for &(lo, hi) in &self.have {
            let (a, b) = (lo.max(f.offset), hi.min(end));
            if a < b && self.data[a..b] != f.bytes[a - f.offset..b - f.offset] {
                return Err(());
            }
        }
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[f.offset..end].copy_from_slice(f.bytes);
        self.have.push((f.offset, end));
        self.have.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.have.len());
        for &(lo, hi) in &self.have {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        self.have = merged;
        Ok(())
    }

    fn complete(&self) -> bool {
        match (self.total, self.have.as_slice()) {
            (Some(t), [(0, hi)]) => *hi == t,
            (Some(0), []) => true,
            _ => false,
        }
    }
}

/// Datagrams being reassembled, oldest first.
#[derive(Debug, Default)]
pub struct Defrag {
    pending: HashMap<FragKey, Pending>,
    order: VecDeque<(FragKey, u64)>, // creation order; stale entries skipped
    bytes: usize,
    generation: u64,
    clock: Ts, // latest capture time seen: times that run backwards do not expire anything
}

impl Defrag {
    /// Add a fragment; the datagram when it is now complete.
    pub fn add(
        &mut self,
        f: Fragment<'_>,
        timeout: Ts,
        counters: &mut Counters,
    ) -> Option<Datagram> {
        counters.inc(Counter::IpFragment);
        self.clock = self.clock.max(f.ts);
        self.expire(counters);
        if !self.pending.contains_key(&f.key) {
            self.generation += 1;
            self.pending.insert(
                f.key,
                Pending {
                    generation: self.generation,
                    first_ts: f.ts,
                    timeout,
                    proto: None,
                    data: Vec::new(),
                    have: Vec::new(),
                    total: None,
                    fragments: 0,
                },
            );
            self.order.push_back((f.key, self.generation));
        }
        let entry = self.pending.get_mut(&f.key)?;
        let before = entry.data.len();
        if entry.add(&f).is_err() {
            let dropped = entry.fragments;
            self.remove(&f.key);
            counters.add(Counter::IpFragmentsBad, dropped);
            return None;
        }
        self.bytes = self.bytes + entry.data.len() - before;
        if entry.complete() {
            let done = self.remove(&f.key)?;
            counters.inc(Counter::IpReassembled);
            let mut payload = done.data;
            payload.truncate(done.total.unwrap_or(0));
            return Some(Datagram {
                proto: done.proto.unwrap_or(f.proto),
                payload,
            });
        }
        self.bound(counters);
        None
    }

    /// The capture ended: what is still pending never completed.
    pub fn finish(&mut self, counters: &mut Counters) {
        let left: u64 = self.pending.values().map(|p| p.fragments).sum();
        if left > 0 {
            counters.add(Counter::IpFragmentsIncomplete, left);
        }
        self.pending.clear();
        self.order.clear();
        self.bytes = 0;
    }

    fn remove(&mut self, key: &FragKey) -> Option<Pending> {
        let p = self.pending.remove(key)?;
        self.bytes -= p.data.len();
        Some(p)
    }

    /// Drop datagrams older than their timeout (oldest first; stop at the first live one).
    fn expire(&mut self, counters: &mut Counters) {
        while let Some(&(key, generation)) = self.order.front() {
            match self.pending.get(&key) {
                Some(p) if p.generation == generation => {
                    if self.clock.saturating_sub(p.first_ts) <= p.timeout {
                        return;
                    }
                    let n = p.fragments;
                    self.remove(&key);
                    counters.add(Counter::IpFragmentsTimeout, n);
                }
                _ => {}
            }
            self.order.pop_front();
        }
    }

    /// Over a bound: drop the oldest datagrams until back under it.
    fn bound(&mut self, counters: &mut Counters) {
        while self.pending.len() > MAX_DATAGRAMS || self.bytes > MAX_BYTES {
            let Some((key, generation)) = self.order.pop_front() else {
                return;
            };
            if self
                .pending
                .get(&key)
                .is_some_and(|p| p.generation == generation)
            {
                if let Some(p) = self.remove(&key) {
                    counters.add(Counter::IpFragmentsEvicted, p.fragments);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn key(id: u32) -> FragKey {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        FragKey {
            src: a,
            dst: a,
            id,
            proto: 6,
        }
    }

    fn frag(id: u32, offset: usize, more: bool, bytes: &[u8], ts: Ts) -> Fragment<'_> {
        Fragment {
            key: key(id),
            proto: 6,
            offset,
            more,
            bytes,
            ts,
        }
    }

    #[test]
    fn any_order_and_duplicates() {
        let mut d = Defrag::default();
        let mut c = Counters::default();
        assert!(d
            .add(frag(1, 8, false, b"world!!!", 2), TIMEOUT_V4_NS, &mut c)
            .is_none());
        assert!(d
            .add(frag(1, 8, false, b"world!!!", 2), TIMEOUT_V4_NS, &mut c)
            .is_none());
        let got = d.add(frag(1, 0, true, b"hello, w", 3), TIMEOUT_V4_NS, &mut c);
        assert_eq!(got.map(|g| g.payload), Some(b"hello, wworld!!!".to_vec()));
        assert_eq!(
            (c.get(Counter::IpFragment), c.get(Counter::IpReassembled)),
            (3, 1)
        );
        assert_eq!(d.bytes, 0);
    }

    #[test]
    fn conflicting_overlap_drops_the_datagram() {
        let mut d = Defrag::default();
        let mut c = Counters::default();
        d.add(frag(1, 0, true, b"aaaaaaaa", 1), TIMEOUT_V4_NS, &mut c);
        assert!(d
            .add(frag(1, 0, false, b"bbbbbbbb", 1), TIMEOUT_V4_NS, &mut c)
            .is_none());
        assert_eq!(c.get(Counter::IpFragmentsBad), 2);
        assert!(d.pending.is_empty());
    }

    #[test]
    fn timeout_and_bounds_count_what_they_drop() {
        let mut d = Defrag::default();
        let mut c = Counters::default();
        d.add(frag(1, 0, true, b"aaaaaaaa", 0), TIMEOUT_V4_NS, &mut c);
        d.add(
            frag(2, 0, true, b"aaaaaaaa", TIMEOUT_V4_NS + 1),
            TIMEOUT_V4_NS,
            &mut c,
        );
        assert_eq!(c.get(Counter::IpFragmentsTimeout), 1);
        for id in 3..(MAX_DATAGRAMS as u32 + 10) {
            d.add(
                frag(id, 0, true, b"x", TIMEOUT_V4_NS + 1),
                TIMEOUT_V4_NS,
                &mut c,
            );
        }
        assert!(d.pending.len() <= MAX_DATAGRAMS);
        // Datagram 2 and 3.. MAX_DATAGRAMS + 9: eight more than the bound, oldest first.
        assert_eq!(c.get(Counter::IpFragmentsEvicted), 8);
        assert!(!d.pending.contains_key(&key(9)) && d.pending.contains_key(&key(10)));
        d.finish(&mut c);
        assert_eq!(c.get(Counter::IpFragmentsIncomplete), MAX_DATAGRAMS as u64);
    }
}
