"""Writes orders.jsonl: seeded synthetic order events for the order-processing examples.

The order-processing example of the stream-processing literature: a web shop's orders are
placed, then shipped from a warehouse, usually within a day or so; a few are cancelled first. The
question is what did not happen: "an order placed and not shipped within 2 days". Labelled in
``label`` (on every event of the order):

* ``never_shipped``: placed, then nothing (lost in the warehouse system);
* ``shipped_late``: shipped 2 days or more after it was placed (two of them exactly 48 hours
  after, which "within 2 days" does not include);
* ``cancelled``: cancelled by the customer before shipping (a reason not to ship).

Events: ``id`` (e0001...), ``order_id`` (o0001...), ``ts`` (epoch milliseconds, UTC), ``type``
(``placed``, ``shipped`` or ``cancelled``), ``customer``, ``warehouse``, ``amount`` (EUR, the
order's total, on each of its events), ``label``. Rows are sorted by ``ts``. The same seed gives
the same file, byte for byte (``tests/cep/test_absence_examples.py`` checks the committed file
against this script)::

    python3 rules/data/make_orders.py            # rewrites rules/data/orders.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["generate", "dumps", "main"]

SEED = 20240401
START_MS = int(datetime(2024, 4, 1, tzinfo=timezone.utc).timestamp() * 1000)
DAYS = 21
ORDERS = 320
CUSTOMERS = 120
HOUR, DAY = 3_600_000, 86_400_000
WAREHOUSES = ["AMS", "LYS", "LBA"]


def generate(seed: int = SEED) -> list[dict]:
    """The order events of one seed, sorted by time (ties keep generation order).

    Example:
        >>> rows = generate(1)
        >>> rows == generate(1), rows[0]["id"], rows[0]["type"], sorted(rows[0])
        (True, 'e0001', 'placed', ['amount', 'customer', 'id', 'label', 'order_id', 'ts', 'type', 'warehouse'])
    """
    rnd = random.Random(seed)
    labels = ["never_shipped"] * 9 + ["shipped_late"] * 10 + ["exactly_48h"] * 2 + ["cancelled"] * 14
    labels += [None] * (ORDERS - len(labels))
    rnd.shuffle(labels)
    rows: list[dict] = []
    for k, label in enumerate(labels):
        placed = START_MS + rnd.randrange(DAYS * DAY // 1000) * 1000
        base = {"order_id": f"o{k + 1:04d}", "customer": f"c{rnd.randrange(CUSTOMERS):03d}",
                "warehouse": rnd.choice(WAREHOUSES), "amount": round(rnd.uniform(9, 400), 2)}
        if label == "exactly_48h":
            label = "shipped_late"
            events = [("shipped", 2 * DAY)]
        elif label == "shipped_late":
            events = [("shipped", rnd.randrange(49 * 3600, 6 * 24 * 3600) * 1000)]
        elif label == "never_shipped":
            events = []
        elif label == "cancelled":  # cancelled within hours, before the warehouse got to it
            events = [("cancelled", rnd.randrange(10 * 60, 30 * 3600) * 1000)]
        else:  # picked and shipped on the next warehouse shift: 2 to 47 hours
            events = [("shipped", rnd.randrange(2 * 3600, 47 * 3600) * 1000)]
        rows.append({"ts": placed, "type": "placed", **base, "label": label})
        rows += [{"ts": placed + after, "type": kind, **base, "label": label} for kind, after in events]
    rows.sort(key=lambda r: r["ts"])
    order = ["order_id", "ts", "type", "customer", "warehouse", "amount", "label"]
    return [{"id": f"e{i + 1:04d}", **{f: r[f] for f in order}} for i, r in enumerate(rows)]


def dumps(rows: list[dict]) -> str:
    """The file's text: one JSON object per line, keys in a fixed order."""
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    """Write the order events of ``--seed`` (default the committed one) to ``--output``."""
    import argparse

    p = argparse.ArgumentParser(description="Write seeded synthetic order events as JSON lines.")
    p.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED}, the committed file)")
    p.add_argument("--output", default=str(Path(__file__).with_name("orders.jsonl")),
                   help="output file (default rules/data/orders.jsonl)")
    args = p.parse_args(argv)
    rows = generate(args.seed)
    Path(args.output).write_text(dumps(rows))
    kinds = {t: sum(r["type"] == t for r in rows) for t in ("placed", "shipped", "cancelled")}
    print(f"{args.output}: {len(rows)} events: {kinds['placed']} orders placed, {kinds['shipped']} shipped, "
          f"{kinds['cancelled']} cancelled", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
