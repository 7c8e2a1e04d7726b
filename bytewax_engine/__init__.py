"""Bytewax as an engine under test (python -m bytewax_engine)."""
