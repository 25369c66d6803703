//! The spec model as handed over by Python (`dissector/protocol/export.py`): layouts per
//! (api_key, version, direction), header versions, API and error names, and the few
//! protocol facts the wire stages need. OWNER: summary helper.
