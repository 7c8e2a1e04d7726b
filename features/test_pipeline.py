"""The oxirs pipeline: features/pipeline.feature on every engine.

Every step is shared (harness.steps): the configuration is a ``configured with:`` table whose
values are the operators' JSON settings, events name their ingress ``stream`` and carry their
message id, and ``the <table> table is:`` reads the area's tables (spec/pipeline.md OXP-R10).
"""

from __future__ import annotations

from pytest_bdd import scenarios

scenarios("pipeline.feature")
