"""Writes the fraud examples' seeded synthetic data: card transactions, authorisations, online payments, a customers changelog.

Real card transactions are private, so this script makes a small, realistic-looking stream:
150 cards over four weeks of March 2024, each with a home country and a handful of regular
merchants, a few trips abroad and some cross-border online shopping (the honest traffic that
fraud rules must live with), plus two injected kinds of fraud, labelled in ``label``:

* ``cloned_card``: a card is used at home and, less than an hour before or after, in a shop in
  another country (``rules/fraud.yaml``, rule ``two_countries_within_an_hour``);
* ``card_testing``: a stolen card is tried at several merchants it never used, in a country it
  never visited, minutes apart, with small amounts (rule ``new_country_merchant_burst``).

Fields: ``id`` (t00001...), ``card``, ``ts`` (epoch milliseconds, UTC), ``amount`` (EUR),
``merchant`` (country-category-number), ``country`` (ISO 3166 alpha-2), ``label`` (null for
honest transactions). Rows are sorted by ``ts``.

The second file holds a stream of its own, authorisations and captures at pay-at-the-pump fuel
stations, EV chargers and car parks of the same cards: the terminal authorises a fixed amount
(``type: auth``), then captures what was used (``type: capture``, the same ``auth_id``) when the
session ends, minutes later. Labelled in ``label`` (on every row of the authorisation):

* ``never_captured``: an authorisation with no capture (a stuck terminal, or a stolen card
  tested with a hold and never used);
* ``captured_late``: a capture 30 minutes or more after its authorisation (two of them exactly
  30 minutes after, which "within 30 minutes" does not include); rule
  ``authorised_not_captured`` of ``rules/fraud.yaml`` finds both kinds.

Fields: ``id`` (a00001...), ``auth_id`` (au0001...), ``card``, ``ts``, ``type``, ``amount`` (held
or captured, EUR), ``merchant``, ``country``, ``label``. The first file's rows are exactly those
it had before the second was added (the second draws from its own random stream). The same seed
gives the same files, byte for byte (``tests/cep/test_examples.py`` checks the committed files
against this script)::

    python3 rules/data/make_transactions.py   # rewrites the four files: transactions, authorisations, payments, customer changes

A third pair of files, from a random stream of its own again, holds online-banking payments of
80 customers (``payments.jsonl``) and the changelog of the customers table they are joined with
(``customer_changes.jsonl``): each customer's account opening (``op: insert``, before March),
home countries changing when customers move (``op: update``), accounts closed (``op: delete``)
and one closed account opened again. A payment's ``country`` is where it was made from (the
geolocated device). Honest traffic: payments from home, large ones included, and small payments
(under 300 EUR) on trips abroad. Labelled cases, each a payment that a rule must flag when it
reads the customer's row **as of the payment's time** (a join with the table's latest row, or
with its first, gets the cases around a change wrong):

* ``away_from_home``: 500 EUR or more from a country that is not the customer's home country
  (rule ``payment_outside_home_country``);
* ``old_home_after_move``: 500 EUR or more from the country the customer has just left (minutes
  after the move; one exactly at the move's time, which the payment sees);
* ``new_home_before_move``: 500 EUR or more from the country the customer moves to, minutes
  before the move takes effect (the home is still the old one);
* ``closed_account``: a payment on an account after it was closed, and before it was opened
  again (rule ``payment_on_closed_account``).

Unlabelled on purpose, next to them: large payments from the new home minutes after a move (one
exactly at its time) and from the old home minutes before it, and payments minutes before an
account is closed and after it is opened again.

Fields of ``payments.jsonl``: ``id`` (p00001...), ``customer`` (cu001...), ``ts``, ``amount``
(EUR), ``payee``, ``country``, ``label``. Of ``customer_changes.jsonl``: ``customer``, ``ts``,
``op`` (``insert``, ``update`` or ``delete``), ``home_country`` (null on a delete), ``segment``.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["generate", "generate_authorisations", "generate_payments", "dumps", "main"]

SEED = 20240301
START_MS = int(datetime(2024, 3, 1, tzinfo=timezone.utc).timestamp() * 1000)
DAYS = 28
CARDS = 150
MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000

HOME_COUNTRIES = ["GB", "DE", "FR", "NL", "ES", "IT", "IE", "BE", "SE", "PL"]
ABROAD = HOME_COUNTRIES + ["US", "PT", "GR", "CH", "AT", "TR", "MA", "TH"]
ONLINE_COUNTRIES = ["IE", "LU", "NL", "US"]  # where web shops book card payments
CATEGORIES = ["grocery", "fuel", "cafe", "pharmacy", "books", "clothes", "electronics", "restaurant"]
MERCHANTS_PER_CATEGORY = 6


def _merchant(rnd: random.Random, country: str, category: str | None = None) -> str:
    cat = category or rnd.choice(CATEGORIES)
    return f"{country}-{cat}-{rnd.randrange(MERCHANTS_PER_CATEGORY):02d}"


def _daytime(rnd: random.Random, day: int) -> int:
    """A time on ``day`` between 07:00 and 22:00 UTC, to the second."""
    return START_MS + day * DAY + rnd.randrange(7 * 3600, 22 * 3600) * 1000


def _amount(rnd: random.Random, low: float, high: float) -> float:
    return round(rnd.uniform(low, high), 2)


def generate(seed: int = SEED) -> list[dict]:
    """The transactions of one seed, sorted by time (ties keep generation order).

    Example:
        >>> rows = generate(1)
        >>> rows == generate(1), rows[0]["id"], sorted(rows[0])
        (True, 't00001', ['amount', 'card', 'country', 'id', 'label', 'merchant', 'ts'])
    """
    rnd = random.Random(seed)
    rows: list[dict] = []

    def add(card: str, ts: int, amount: float, merchant: str, label: str | None = None) -> None:
        rows.append({"card": card, "ts": ts, "amount": amount, "merchant": merchant,
                     "country": merchant[:2], "label": label})

    cards = [f"card-{i:04d}" for i in range(CARDS)]
    homes = {c: rnd.choice(HOME_COUNTRIES) for c in cards}
    for card in cards:
        home = homes[card]
        regulars = [_merchant(rnd, home) for _ in range(rnd.randint(4, 8))]
        per_day = rnd.uniform(0.4, 1.6)
        trip: tuple[int, int, str] | None = None
        if rnd.random() < 0.2:  # a holiday: days abroad, reached by a flight of several hours
            first = rnd.randrange(2, DAYS - 6)
            trip = (first, first + rnd.randint(2, 5), rnd.choice([c for c in ABROAD if c != home]))
        for day in range(DAYS):
            for _ in range(int(per_day) + (rnd.random() < per_day % 1)):
                ts = _daytime(rnd, day)
                if trip and trip[0] <= day < trip[1]:
                    add(card, ts, _amount(rnd, 4, 120), _merchant(rnd, trip[2]))
                elif rnd.random() < 0.05:  # cross-border online shopping
                    add(card, ts, _amount(rnd, 8, 90), _merchant(rnd, rnd.choice(ONLINE_COUNTRIES), "online"))
                elif rnd.random() < 0.85:
                    add(card, ts, _amount(rnd, 2, 80), rnd.choice(regulars))
                else:  # a shop at home the card had not used before
                    add(card, ts, _amount(rnd, 2, 80), _merchant(rnd, home))

    victims = rnd.sample(cards, 22)
    for card in victims[:12]:  # cloned: the copy is used abroad while the owner shops at home
        home = homes[card]
        t = _daytime(rnd, rnd.randrange(DAYS))
        add(card, t, _amount(rnd, 5, 60), _merchant(rnd, home))
        shift = rnd.randint(5, 55) * MINUTE * rnd.choice([-1, 1])
        add(card, t + shift, _amount(rnd, 200, 900), _merchant(rnd, rnd.choice([c for c in ABROAD if c != home])),
            "cloned_card")
    for card in victims[12:]:  # card testing: small charges at new shops in a new country
        visited = {homes[card]} | {r["country"] for r in rows if r["card"] == card}
        country = rnd.choice([c for c in ABROAD if c not in visited])
        t = _daytime(rnd, rnd.randrange(DAYS))
        shops = rnd.sample(CATEGORIES, rnd.randint(3, 5))
        for k, cat in enumerate(shops):
            amount = _amount(rnd, 1, 3) if k < len(shops) - 1 else _amount(rnd, 300, 1200)
            add(card, t, amount, f"{country}-{cat}-{rnd.randrange(MERCHANTS_PER_CATEGORY):02d}", "card_testing")
            t += rnd.randint(1, 6) * MINUTE + rnd.randrange(60) * 1000

    rows.sort(key=lambda r: r["ts"])
    return [{"id": f"t{i + 1:05d}", **r} for i, r in enumerate(rows)]


AUTHORISATIONS = 300
# category: (amount held, smallest and largest share of it captured, capture delay in seconds)
AUTH_CATEGORIES = {
    "fuel": (150.0, 0.15, 0.6, (90, 12 * 60)),
    "ev_charging": (60.0, 0.2, 0.9, (10 * 60, 29 * 60 + 59)),
    "parking": (40.0, 0.05, 0.5, (3 * 60, 25 * 60)),
}


def generate_authorisations(seed: int = SEED) -> list[dict]:
    """Authorisations and their captures for the cards of :func:`generate`, sorted by time.

    Example:
        >>> rows = generate_authorisations(1)
        >>> rows == generate_authorisations(1), rows[0]["id"], sorted(rows[0])
        (True, 'a00001', ['amount', 'auth_id', 'card', 'country', 'id', 'label', 'merchant', 'ts', 'type'])
        >>> {r["label"] for r in rows} == {None, "captured_late", "never_captured"}
        True
    """
    homes: dict[str, dict[str, int]] = {}
    for t in generate(seed):  # each card's home: the country of most of its payments
        homes.setdefault(t["card"], {}).setdefault(t["country"], 0)
        homes[t["card"]][t["country"]] += 1
    home = {c: max(sorted(n), key=n.__getitem__) for c, n in homes.items()}
    cards = sorted(home)
    rnd = random.Random(seed * 31 + 7)  # a stream of its own: the payments above do not move
    rows: list[dict] = []
    labels = ["never_captured"] * 12 + ["captured_late"] * 10 + ["exactly_30"] * 2 + ["just_in_time"] * 2
    labels += [None] * (AUTHORISATIONS - len(labels))
    rnd.shuffle(labels)
    for k, label in enumerate(labels):
        card = rnd.choice(cards)
        cat = rnd.choice(sorted(AUTH_CATEGORIES))
        held, low, high, (d0, d1) = AUTH_CATEGORIES[cat]
        merchant = _merchant(rnd, home[card], cat)
        auth_id = f"au{k + 1:04d}"
        t = _daytime(rnd, rnd.randrange(DAYS))
        delay = rnd.randint(d0, d1) * 1000
        if label == "captured_late":
            delay = rnd.randint(31 * 60, 4 * 3600) * 1000
        elif label == "exactly_30":  # "within 30 minutes" means before the 30th minute ends
            label, delay = "captured_late", 30 * MINUTE
        elif label == "just_in_time":
            label, delay = None, 30 * MINUTE - 1000
        base = {"auth_id": auth_id, "card": card, "merchant": merchant, "country": merchant[:2], "label": label}
        rows.append({"ts": t, "type": "auth", "amount": held, **base})
        if label != "never_captured":
            rows.append({"ts": t + delay, "type": "capture", "amount": _amount(rnd, held * low, held * high), **base})
    rows.sort(key=lambda r: r["ts"])
    order = ["auth_id", "card", "ts", "type", "amount", "merchant", "country", "label"]
    return [{"id": f"a{i + 1:05d}", **{f: r[f] for f in order}} for i, r in enumerate(rows)]


CUSTOMERS = 80
MOVERS, CLOSERS = 8, 5
LARGE = 500.0  # payment_outside_home_country flags payments from abroad from this amount on


def generate_payments(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """Online-banking payments of :data:`CUSTOMERS` customers and their customers-table changelog.

    Returns ``(payments, changes)``, each sorted by time (ties keep generation order; a change
    and a payment at the same time are both kept, the payment sees the change).

    Example:
        >>> payments, changes = generate_payments(1)
        >>> (payments, changes) == generate_payments(1), sorted(payments[0]), sorted(changes[0])
        (True, ['amount', 'country', 'customer', 'id', 'label', 'payee', 'ts'], ['customer', 'home_country', 'op', 'segment', 'ts'])
        >>> sorted({c["op"] for c in changes}), sorted({p["label"] for p in payments if p["label"]})
        (['delete', 'insert', 'update'], ['away_from_home', 'closed_account', 'new_home_before_move', 'old_home_after_move'])
    """
    rnd = random.Random(seed * 53 + 11)  # a stream of its own: the files above do not move
    payments: list[dict] = []
    changes: list[dict] = []

    def pay(customer: str, ts: int, amount: float, country: str, label: str | None = None) -> None:
        payee = f"{country}-payee-{rnd.randrange(40):02d}"
        payments.append({"customer": customer, "ts": ts, "amount": amount, "payee": payee, "country": country,
                         "label": label})

    def change(customer: str, ts: int, op: str, home: str | None, segment: str | None) -> None:
        changes.append({"customer": customer, "ts": ts, "op": op, "home_country": home, "segment": segment})

    customers = [f"cu{i + 1:03d}" for i in range(CUSTOMERS)]
    special = rnd.sample(customers, MOVERS + CLOSERS)
    movers, closers = set(special[:MOVERS]), special[MOVERS:]
    for c in customers:  # every account opened before March
        change(c, START_MS - rnd.randint(1, 400) * DAY + rnd.randrange(DAY), "insert", rnd.choice(HOME_COUNTRIES),
               rnd.choice(["retail", "premium", "business"]))
    home = {c["customer"]: c["home_country"] for c in changes}
    segment = {c["customer"]: c["segment"] for c in changes}

    def honest(c: str, home_country: str, first: int, last: int, trips: bool) -> None:
        """A customer's everyday payments on days first..last-1, from home, with a trip abroad sometimes."""
        trip = None
        if trips and last - first > 8 and rnd.random() < 0.25:
            day0 = rnd.randrange(first, last - 5)
            trip = (day0, day0 + rnd.randint(2, 4), rnd.choice([x for x in ABROAD if x != home_country]))
        for day in range(first, last):
            for _ in range(rnd.randint(0, 1)):
                ts = _daytime(rnd, day)
                if trip and trip[0] <= day < trip[1]:
                    pay(c, ts, _amount(rnd, 5, 290), trip[2])
                elif rnd.random() < 0.12:  # rent, a car, a holiday booked from home
                    pay(c, ts, _amount(rnd, 500, 3000), home_country)
                else:
                    pay(c, ts, _amount(rnd, 5, 450), home_country)

    for c in customers:
        if c in movers:
            continue
        closer = c in closers
        honest(c, home[c], 0, (10 + closers.index(c) * 3) if closer else DAYS, trips=not closer)
    # movers: a change of home country on a day in the middle of the month; the payments before it
    # are from the old home, after it from the new one, and four large ones lie on either side
    for k, c in enumerate(sorted(movers)):
        old = home[c]
        new = rnd.choice([x for x in HOME_COUNTRIES if x != old])
        day = 6 + 2 * k
        honest(c, old, 0, day, trips=False)
        moved = _daytime(rnd, day)
        change(c, moved, "update", new, segment[c])
        honest(c, new, day + 1, DAYS, trips=False)
        gap = rnd.randint(2, 40) * MINUTE
        pay(c, moved - gap, _amount(rnd, 500, 2000), new, "new_home_before_move")
        pay(c, moved - gap - rnd.randint(1, 30) * MINUTE, _amount(rnd, 500, 2000), old)  # still home: honest
        if k % 2 == 0:  # at the move's very time: the payment sees the change
            pay(c, moved, _amount(rnd, 500, 2000), old, "old_home_after_move")
            pay(c, moved, _amount(rnd, 500, 2000), new)
        else:
            pay(c, moved + rnd.randint(1, 30) * MINUTE, _amount(rnd, 500, 2000), old, "old_home_after_move")
            pay(c, moved + rnd.randint(1, 30) * MINUTE, _amount(rnd, 500, 2000), new)
    # account takeovers: a large payment from abroad, on customers who neither move nor close
    steady = [c for c in customers if c not in movers and c not in closers]
    for c in rnd.sample(steady, 10):
        pay(c, _daytime(rnd, rnd.randrange(DAYS)), _amount(rnd, 600, 4000),
            rnd.choice([x for x in ABROAD if x != home[c]]), "away_from_home")
    # closed accounts: the last honest payment minutes before the closing, then payments on the
    # closed account; the last closer opens it again, and pays from home once more
    for k, c in enumerate(closers):
        closed = _daytime(rnd, 10 + k * 3)
        pay(c, closed - rnd.randint(1, 20) * MINUTE, _amount(rnd, 5, 450), home[c])
        change(c, closed, "delete", None, None)
        for _ in range(rnd.randint(1, 2)):
            pay(c, closed + rnd.randint(1, 48 * 60) * MINUTE, _amount(rnd, 5, 900), home[c], "closed_account")
        if k == len(closers) - 1:
            reopened = closed + 3 * DAY
            change(c, reopened, "insert", home[c], segment[c])
            pay(c, reopened + rnd.randint(1, 120) * MINUTE, _amount(rnd, 5, 450), home[c])
    payments.sort(key=lambda r: r["ts"])
    changes.sort(key=lambda r: r["ts"])
    order = ["customer", "ts", "amount", "payee", "country", "label"]
    return [{"id": f"p{i + 1:05d}", **{f: r[f] for f in order}} for i, r in enumerate(payments)], changes


def dumps(rows: list[dict]) -> str:
    """The file's text: one JSON object per line, keys in a fixed order."""
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    """Write the files of ``--seed`` (default the committed one): transactions, authorisations, payments, customer changes."""
    import argparse

    p = argparse.ArgumentParser(description="Write seeded synthetic card transactions and authorisations as JSON lines.")
    p.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED}, the committed files)")
    p.add_argument("--output", default=str(Path(__file__).with_name("transactions.jsonl")),
                   help="payments file (default rules/data/transactions.jsonl)")
    p.add_argument("--auth-output", default=str(Path(__file__).with_name("authorisations.jsonl")),
                   help="authorisations and captures file (default rules/data/authorisations.jsonl)")
    p.add_argument("--payments-output", default=str(Path(__file__).with_name("payments.jsonl")),
                   help="online-banking payments file (default rules/data/payments.jsonl)")
    p.add_argument("--customers-output", default=str(Path(__file__).with_name("customer_changes.jsonl")),
                   help="customers changelog file (default rules/data/customer_changes.jsonl)")
    args = p.parse_args(argv)
    rows = generate(args.seed)
    Path(args.output).write_text(dumps(rows))
    print(f"{args.output}: {len(rows)} transactions, {sum(r['label'] is not None for r in rows)} labelled fraud",
          file=sys.stderr)
    auths = generate_authorisations(args.seed)
    Path(args.auth_output).write_text(dumps(auths))
    labelled = {r["auth_id"] for r in auths if r["label"] is not None}
    print(f"{args.auth_output}: {sum(r['type'] == 'auth' for r in auths)} authorisations, "
          f"{sum(r['type'] == 'capture' for r in auths)} captures, {len(labelled)} labelled", file=sys.stderr)
    payments, changes = generate_payments(args.seed)
    Path(args.payments_output).write_text(dumps(payments))
    Path(args.customers_output).write_text(dumps(changes))
    print(f"{args.payments_output}: {len(payments)} payments, {sum(p['label'] is not None for p in payments)} labelled; "
          f"{args.customers_output}: {len(changes)} customer changes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
