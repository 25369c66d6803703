//! Stage 5 (summary only): a pair's bodies -> the analytics columns, by interpreting the
//! exported layouts (`dissector/protocol/summary.py` semantics). OWNER: summary helper.
