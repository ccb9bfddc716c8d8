"""Tables kept in sync by a changelog stream and read as of each event's time (temporal joins).

``store``: the versioned store (keys, versions, rows; vectorised as-of lookups); ``changelog``:
upsert and Debezium rows into changes; ``table``: one declared table at run time (watermark, late
changes, snapshot file, state).
"""

from cep.tables.store import MIN_TIME, TableStats, VersionedTable, key_values, upper_bound
from cep.tables.table import Table, TableCounts

__all__ = ["VersionedTable", "TableStats", "MIN_TIME", "key_values", "upper_bound", "Table", "TableCounts"]
