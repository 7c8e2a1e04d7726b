"""Watermark generation, alignment and propagation (oxirs): features/watermark_propagation.feature
on every engine.

The scenarios use only the shared steps of harness.steps (installed by features/conftest.py):
the graph is a ``configured with:`` table, the stream is ``these items arrive`` tables and the
outputs are ``the <table> table is:`` tables.
"""

from __future__ import annotations

from pytest_bdd import scenarios

scenarios("watermark_propagation.feature")
