//! Record batches inside `records` fields: counts, bytes, codecs, CRC checks, budgets.
//! Port of the summary-relevant part of `dissector/protocol/records.py`. OWNER: summary helper.
