"""Stage ``table``: pairs as a pandas DataFrame / Arrow table, and the Parquet, CSV and
JSON-lines files written from them."""
