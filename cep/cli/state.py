"""``cep state STATE_DIR``: show what a durable run's checkpoint holds, per rule and key (text or JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cep.cli.exit_codes import EXIT_OK, EXIT_USAGE

__all__ = ["add_arguments", "cmd_state", "add_view_options", "print_view"]

DEFAULT_LIMIT = 20


def add_view_options(p: argparse.ArgumentParser) -> None:
    """The options ``cep state`` and ``cep spark state`` share: which rule and key, how much, JSON."""
    p.add_argument("--rule", metavar="NAME", help="show this rule only (an unknown name is a usage error)")
    p.add_argument("--key", metavar="K", help="show this key only: its value (AAPL), or col=value,... for a key "
                   "of several PARTITION BY / GROUP BY columns, () for a rule without keys")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout instead of text")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                   help=f"at most N keys per rule and N partial matches, buffered events or windows per key "
                   f"(default {DEFAULT_LIMIT}; 0 shows everything); what is left out is counted")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("state", metavar="STATE_DIR", help="the --state directory of a durable run (cep run ... --state DIR)")
    p.add_argument("--rules", metavar="FILE", help="read the state with this rule file instead of the rules recorded "
                   "in the checkpoint: refused, naming the rule, when a rule changed in a way a restart would "
                   "start it empty")
    add_view_options(p)


def print_view(view: Any, args: Any, who: str) -> int:
    """Filter ``view`` by the options and print it; the exit code."""
    from cep.state_view import StateViewError, select
    from cep.state_view.render import render_text

    if args.limit is not None and args.limit < 0:
        print(f"{who}: --limit must not be negative (0 shows everything)", file=sys.stderr)
        return EXIT_USAGE
    try:
        shown = select(view, rule=args.rule, key=args.key, limit=args.limit or None)
    except StateViewError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        print(json.dumps(shown.to_json(), ensure_ascii=False, default=str))
    else:
        print(render_text(shown))
    return EXIT_OK


def cmd_state(args: Any) -> int:
    from cep.state_view import StateViewError
    from cep.state_view.durable import read_state_dir
    from patterns.files import command_line_roots

    try:
        view = read_state_dir(args.state, rules=args.rules, queries_roots=command_line_roots(args.queries_root))
    except StateViewError as e:
        print(f"cep state: {e}", file=sys.stderr)
        return e.exit_code
    return print_view(view, args, "cep state")
