//! The queueing state's bounds: a connection whose first request never completes keeps
//! every later row waiting; past MAX_HELD_ROWS rows are taken anyway and counted, and the
//! state stays bounded.

use _core::rows::queueing::{Queueing, Timing, MAX_ANSWERS, MAX_HELD_ROWS};

fn answered(request: i64, response: i64) -> Timing {
    Timing {
        request: Some(request),
        response: Some(response),
        throttle_ms: None,
        waits: true,
    }
}

#[test]
fn rows_waiting_past_the_bound_are_taken_and_counted() {
    let mut q: Queueing<u64> = Queueing::default();
    let n = MAX_HELD_ROWS as u64 + 100;
    let mut out = Vec::new();
    // seq 0 never arrives: later rows wait for it until MAX_HELD_ROWS are waiting; then
    // the oldest is taken without it, and the rest follow in their turn.
    for seq in 1..=n {
        let t = answered(seq as i64 * 10, seq as i64 * 10 + 5);
        if q.ready(7, Some(seq)) {
            out.push((seq, q.take(7, Some(seq), &t)));
        } else {
            q.hold(7, seq, t, seq);
            q.drain(7, false, &mut out);
        }
        if seq <= MAX_HELD_ROWS as u64 {
            assert!(out.is_empty(), "row {seq} taken before the bound");
        }
    }
    assert_eq!(
        q.bounded.rows_forced, 1,
        "one row skipped the missing request"
    );
    let order: Vec<u64> = out.iter().map(|(row, _)| *row).collect();
    assert_eq!(order, (1..=n).collect::<Vec<_>>(), "every row, in order");
    // The missing request stays unanswered: nothing else is in flight after the flush.
    assert_eq!(out.last().map(|(_, q)| q.inflight), Some(Some(0)));
}

#[test]
fn response_times_past_the_bound_are_forgotten_and_counted() {
    let mut q: Queueing<u64> = Queueing::default();
    // One request, then many responses ahead of the next request: pipelined far deeper
    // than any client does.
    let n = MAX_ANSWERS as u64 + 10;
    for seq in 0..n {
        assert!(q.ready(3, Some(seq)));
        q.take(3, Some(seq), &answered(1, 1_000_000 + seq as i64));
    }
    assert_eq!(q.bounded.answers_dropped, 10);
}
