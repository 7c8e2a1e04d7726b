"""Apache Beam's Python SDK as an engine under test (`python -m beam_engine`, tox -e beam)."""
