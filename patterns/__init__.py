"""The languages: rule files, the MATCH_RECOGNIZE parser and compiler, their ASTs."""

from patterns.errors import CepError, CepSyntaxError, RuleError, RuleErrors
from patterns.rules import Rule, RuleSet, load_rules, parse_rule_text, parse_rules

__all__ = [
    "CepError",
    "CepSyntaxError",
    "RuleError",
    "RuleErrors",
    "Rule",
    "RuleSet",
    "load_rules",
    "parse_rules",
    "parse_rule_text",
]
