//! Exchanges + summaries -> column buffers. OWNER: lead.
