"""Spark-side test machinery of the suites: killed queries and hostile rows.

- ``faults``: the parent side of the fault tests (spec/traces.md TR-17): plan kills, run the
  Spark engine's combined query in a child process, kill it at a point of a micro-batch,
  restart it and check the sink against the oracle.
- ``fault_child``: that child process (``python -m spark_impl.testing.fault_child WORKDIR``).
- ``lost_executor``: the parent side of the lost-executor run (TR-17): find a busy executor of a
  ``local-cluster`` child and kill its JVM and Python workers while the driver lives.
- ``hostile_rows``: typed tables of hostile rows at the operator boundary (TR-16), what each
  means, and one streaming query over all of them.

They live beside the operators because they drive Spark; the engine-agnostic harness
(``harness/``) imports none of them. ``faults`` and ``lost_executor`` need ``psutil`` and
``hostile_rows`` needs Hypothesis (the ``test`` extra).
"""
