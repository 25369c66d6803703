"""Stage ``analytics``: metrics (``stats``), charts (``plots``), the HTML report, the CLI
summary table, and the partitions, groups and versions tables."""
