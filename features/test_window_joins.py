"""Window joins (oxirs): features/window_joins.feature on every engine.

Every step is shared (harness.steps): events name their input in a ``side`` column,
``the join watermark reaches N ms`` gives the join its watermark, and ``the pairs are:``
and ``the late events are:`` read the area's tables. The ``@oracle-only`` scenarios are
streams too: they exercise saturation at the bounds of time (TR-2).
"""

from __future__ import annotations

from pytest_bdd import scenarios

scenarios("window_joins.feature")
