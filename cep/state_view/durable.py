"""A durable run's state directory (``cep run --state DIR``) read into a :class:`StateView`.

The checkpoint holds the rule text in force when it was written (``rules_text``), so the state
is read with exactly the rules that wrote it; no rule file is needed. ``rules`` (``cep state
--rules FILE``) reads it with another file instead, which is how to ask whether a new rule file
keeps the state: a rule whose statement or options changed would start empty at the restart
(``Engine.reload``), and is refused here, by name.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from cep.state_view.model import NotAState, RuleMismatch, StateView, UnreadableState

__all__ = ["read_state_dir"]


def read_state_dir(path: str, rules: str | None = None, queries_roots: Sequence[str] | None = None) -> StateView:
    """The state a durable run left in ``path``: positions, then every rule's state.

    Raises :class:`NotAState` (not a state directory), :class:`UnreadableState` (damaged,
    crafted or of another version) or :class:`RuleMismatch` (``rules`` does not fit the state).
    """
    from cep.durable.checkpoint import CHECKPOINT, read_checkpoint
    from cep.durable.errors import DurableError
    from cep.engine import rule_fingerprint, with_time_unit
    from cep.state_view import snapshot_views
    from patterns.errors import RuleErrors
    from patterns.rules import parse_rules

    if not os.path.isdir(path):
        what = "does not exist" if not os.path.exists(path) else "is not a directory"
        raise NotAState(f"{path} {what}; give the --state directory of a durable run (cep run ... --state DIR)")
    try:
        ck = read_checkpoint(path)
    except DurableError as e:
        raise UnreadableState(str(e)) from None
    if ck is None:
        raise NotAState(
            f"{path} holds no {CHECKPOINT} file: it is not the state directory of a durable run "
            "(cep run ... --state DIR writes DIR/checkpoint when it starts)"
        )
    meta = ck.meta
    ck_path = os.path.join(path, CHECKPOINT)
    if not isinstance(meta, dict) or "rules_text" not in meta:
        raise UnreadableState(f"{ck_path} has no rule text: written by another version of cep")
    try:
        saved = parse_rules(meta["rules_text"], meta.get("rules_path") or "rules.yaml", queries_roots=queries_roots)
    except RuleErrors as e:
        raise UnreadableState(
            f"the rules recorded in {ck_path} no longer load here ({e.errors[0].message}); "
            "a search rule's queries_file outside the rule file's folder needs --queries-root"
        ) from None
    notes: list[str] = []
    use = saved
    if rules is not None:
        try:
            given = parse_rules(_read(rules), rules, queries_roots=queries_roots)
        except RuleErrors as e:
            raise RuleMismatch(str(e)) from None
        changed, other = _changed(saved, given, rule_fingerprint)
        notes += [f"{rules}: {x}" for x in other]
        if changed:
            raise RuleMismatch(
                f"{rules} does not fit the state in {path}: " + "; ".join(changed)
                + ". A restart with this file would start those rules empty; leave out --rules to see "
                "the state with the rules that wrote it"
            )
        use = given
    else:
        on_disk = meta.get("rules_path")
        if on_disk and os.path.isfile(on_disk):
            try:
                now = parse_rules(_read(on_disk), on_disk, queries_roots=queries_roots)
            except (RuleErrors, OSError):
                now = None
            changed, other = _changed(saved, now, rule_fingerprint) if now is not None else ([], [])
            changed += other
            if now is None:
                notes.append(f"{on_disk} no longer loads; shown with the rules recorded in the checkpoint")
            elif changed:
                notes.append(f"{on_disk} changed since the checkpoint (" + "; ".join(changed) + "); shown with "
                             "the rules recorded in the checkpoint, which a restart reloads from the file")
    views = snapshot_views(with_time_unit(use, meta.get("time_unit")), ck.snapshot)
    if meta.get("finished"):
        notes.append("the run was closed by --finish (end of input): every partial match and window was flushed")
    return StateView(_source(path, meta), views, notes)


def _read(path: str) -> str:
    from patterns.rules import read_rule_file

    return read_rule_file(path)


def _changed(saved: Any, given: Any, fingerprint: Any) -> tuple[list[str], list[str]]:
    """What differs between the checkpoint's rules and ``given``: rules whose state a restart would
    drop because they changed, and the other differences (rules gone: state dropped; new: empty)."""
    old = {r.name: r for r in saved}
    changed = []
    for r in given:
        prev = old.get(r.name)
        if prev is not None and fingerprint(prev) != fingerprint(r):
            changed.append(f"rule {r.name!r} changed (statement or options)")
    new = {r.name for r in given}
    other = [f"rule {n!r} is gone (its state would be dropped)" for n in old if n not in new]
    other += [f"rule {r.name!r} is new (it would start empty)" for r in given if r.name not in old]
    return changed, other


def _source(path: str, meta: dict[str, Any]) -> dict[str, Any]:
    offsets = {name: {"bytes": int(v[0]), "lines": int(v[1])} for name, v in sorted((meta.get("files") or {}).items())}
    outputs = {flag: {"path": p, "bytes": int(n)} for flag, (p, n) in sorted((meta.get("outputs") or {}).items())}
    return {
        "state": os.path.abspath(path),
        "kind": "durable",
        "checkpoint": meta.get("checkpoints"),
        "finished": bool(meta.get("finished")),
        "rules_path": meta.get("rules_path"),
        "input": meta.get("input"),
        "lines": meta.get("lines"),
        "batches": meta.get("batches"),
        "offsets": offsets,
        "outputs": outputs,
        "time_unit": meta.get("time_unit"),
    }
