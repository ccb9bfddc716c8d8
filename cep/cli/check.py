"""``cep check``: validate rule files and list every error (and every warning, which does not fail)."""

from __future__ import annotations

import sys

from cep.cli.exit_codes import EXIT_OK, EXIT_USAGE
from patterns.errors import RuleErrors

__all__ = ["cmd_check"]


def cmd_check(args) -> int:
    from patterns.files import command_line_roots
    from patterns.rules import load_rules

    roots = command_line_roots(getattr(args, "queries_root", None))
    status = EXIT_OK
    for path in args.rules:
        try:
            rs = load_rules(path, queries_roots=roots)
        except RuleErrors as e:
            n = len(e.errors)
            print(str(e), file=sys.stderr)
            print(f"{path}: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        for w in rs.warnings:
            print(w.format(), file=sys.stderr)
        nw = len(rs.warnings)
        print(f"{path}: ok, {len(rs)} rule{'s' if len(rs) != 1 else ''} ({', '.join(rs.names())})"
              + (f", {nw} warning{'s' if nw != 1 else ''}" if nw else ""))
    return status

