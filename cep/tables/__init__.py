"""Tables kept in sync by a changelog stream and read as of each event's time (temporal joins).

``store``: the versioned store (keys, versions, rows; vectorised as-of lookups); ``changelog``:
upsert and Debezium rows into changes; ``table``: one declared table at run time (watermark, late
changes, snapshot file, state); ``join``: a pattern rule's join (events released in time order);
``queue``: events waiting in arrival order for a table, and the lookup that joins a batch;
``window_join``: an analytics rule's join (search rules use the queue directly).
"""

from cep.tables.store import MIN_TIME, TableStats, VersionedTable, key_values, upper_bound
from cep.tables.table import Table, TableCounts

__all__ = ["VersionedTable", "TableStats", "MIN_TIME", "key_values", "upper_bound", "Table", "TableCounts"]
