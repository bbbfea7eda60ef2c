"""The check contract and what every check shares: the base classes and registry, verdicts, impossible-evidence
rules, params coercion, presentation declarations, parsers by kind, hardware profiles, the probe-based check,
the probe's sampling reader, fan-out groups and localisation by halves."""
