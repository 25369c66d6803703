"""One self-contained HTML report of a capture: facts, charts and tables.

The page inlines its charts as SVG (drawn without matplotlib: ``analytics.charts``)
and its style, so the single file opens offline in any browser. Output is
deterministic for a given input (no generation timestamp), so the example in
``reports/`` can be regenerated and diffed::

    kafka-dissector report captures/kafka-4-mixed.pcapng -o reports/kafka-4-mixed.html

The package, in the order data flows through it: ``run`` (one pass per capture: the
pairs and the analytics tables), ``model`` (what a report holds), ``derived`` (its
tables computed from the pairs and the analytics tables), ``formatting`` (cells),
``sections`` (the page's sections) and ``page`` (the HTML document).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissector.lazy import lazy_attributes

if TYPE_CHECKING:
    from dissector.analytics.report.derived import (
        by_service_time,
        capture_names,
        errors_by_code_and_api,
        hot_connections,
        lag_summary,
        partition_throughput,
        produce_to_fetch_summary,
        table_lag,
        throttling,
        timeline_rows,
        unanswered_by_api,
        version_skew,
    )
    from dissector.analytics.report.formatting import (
        fmt_bytes,
        fmt_capture,
        fmt_clock,
        fmt_duration,
        fmt_error,
        fmt_int,
        fmt_ms,
        fmt_ms_pair,
        fmt_pair,
        fmt_pct,
        fmt_rate,
        fmt_status,
        fmt_text,
        fmt_time,
        fmt_topics,
        frame_table,
        listed,
        pair_table,
        service_pair_table,
        sort_key,
    )
    from dissector.analytics.report.model import (
        CAPTURES_ATTR,
        CLIENT_SOFTWARE_ATTR,
        COLLAPSE_ROWS,
        FILTER_ATTR,
        FOLD_ITEMS,
        GROUPS_ATTR,
        NO_KAFKA_SECTION_IDS,
        PER_API_ROW_LIMIT,
        SECTION_IDS,
        SLOWEST_N,
        TABLE_ROW_LIMIT,
        TABLES_ATTR,
        TROUBLE_ROWS,
        VERSION_ROW_LIMIT,
        AnalyticsTables,
        Card,
        Chart,
        Folded,
        Header,
        Section,
        TableBlock,
    )
    from dissector.analytics.report.page import breakable, render, write_report
    from dissector.analytics.report.run import analyze, report_file, report_partition_columns
    from dissector.analytics.report.sections import NO_GROUP_OFFSETS, NOT_COLLECTED

# Each name from its module on first use (PEP 562), not all on import: ``from
# dissector.analytics import report`` (the CLI) then costs little, and the report's heavy
# modules (numpy, the charts) are imported while the core reads the capture
# (``run.analyze``).
_SUBMODULES: dict[str, str] = {
    "AnalyticsTables": "model",
    "CAPTURES_ATTR": "model",
    "CLIENT_SOFTWARE_ATTR": "model",
    "COLLAPSE_ROWS": "model",
    "Card": "model",
    "Chart": "model",
    "FILTER_ATTR": "model",
    "FOLD_ITEMS": "model",
    "Folded": "model",
    "GROUPS_ATTR": "model",
    "Header": "model",
    "NOT_COLLECTED": "sections",
    "NO_GROUP_OFFSETS": "sections",
    "NO_KAFKA_SECTION_IDS": "model",
    "PER_API_ROW_LIMIT": "model",
    "SECTION_IDS": "model",
    "SLOWEST_N": "model",
    "Section": "model",
    "TABLES_ATTR": "model",
    "TABLE_ROW_LIMIT": "model",
    "TROUBLE_ROWS": "model",
    "TableBlock": "model",
    "VERSION_ROW_LIMIT": "model",
    "analyze": "run",
    "breakable": "page",
    "by_service_time": "derived",
    "capture_names": "derived",
    "errors_by_code_and_api": "derived",
    "fmt_bytes": "formatting",
    "fmt_capture": "formatting",
    "fmt_clock": "formatting",
    "fmt_duration": "formatting",
    "fmt_error": "formatting",
    "fmt_int": "formatting",
    "fmt_ms": "formatting",
    "fmt_ms_pair": "formatting",
    "fmt_pair": "formatting",
    "fmt_pct": "formatting",
    "fmt_rate": "formatting",
    "fmt_status": "formatting",
    "fmt_text": "formatting",
    "fmt_time": "formatting",
    "fmt_topics": "formatting",
    "frame_table": "formatting",
    "hot_connections": "derived",
    "lag_summary": "derived",
    "listed": "formatting",
    "pair_table": "formatting",
    "partition_throughput": "derived",
    "produce_to_fetch_summary": "derived",
    "render": "page",
    "report_file": "run",
    "report_partition_columns": "run",
    "service_pair_table": "formatting",
    "sort_key": "formatting",
    "table_lag": "derived",
    "throttling": "derived",
    "timeline_rows": "derived",
    "unanswered_by_api": "derived",
    "version_skew": "derived",
    "write_report": "page",
}


__getattr__ = lazy_attributes(__name__, _SUBMODULES, globals())


__all__ = [
    "CAPTURES_ATTR", "CLIENT_SOFTWARE_ATTR", "COLLAPSE_ROWS", "FILTER_ATTR", "FOLD_ITEMS",
    "GROUPS_ATTR", "NOT_COLLECTED", "NO_GROUP_OFFSETS", "NO_KAFKA_SECTION_IDS",
    "PER_API_ROW_LIMIT", "SECTION_IDS", "SLOWEST_N", "TABLES_ATTR", "TABLE_ROW_LIMIT",
    "TROUBLE_ROWS", "VERSION_ROW_LIMIT", "AnalyticsTables", "Card", "Chart", "Folded",
    "Header", "Section", "TableBlock", "analyze", "breakable", "by_service_time",
    "capture_names", "errors_by_code_and_api", "fmt_bytes", "fmt_capture", "fmt_clock",
    "fmt_duration", "fmt_error", "fmt_int", "fmt_ms", "fmt_ms_pair", "fmt_pair", "fmt_pct",
    "fmt_rate", "fmt_status", "fmt_text", "fmt_time", "fmt_topics", "frame_table",
    "hot_connections", "lag_summary", "listed", "pair_table", "partition_throughput",
    "produce_to_fetch_summary", "render", "report_file", "report_partition_columns",
    "service_pair_table", "sort_key", "table_lag", "throttling",
    "timeline_rows", "unanswered_by_api", "version_skew", "write_report",
]  # fmt: skip
