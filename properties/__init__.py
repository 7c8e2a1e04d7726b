"""Hypothesis property suites: strategies, oracle invariants, differential tests."""
