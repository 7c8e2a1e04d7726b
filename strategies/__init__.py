"""Hypothesis strategies that generate traces of every spec area (spec/traces.md TR-13).

- ``common``: shared pieces (bounded times, i64 edges, restart points) and
  ``differential_traces(mix, count, seed)``, the seeded draw the differential tests and the
  vector export share.
- ``<area>``: one module per spec area, named like ``spec/<area>.md``: the area's strategies,
  its differential mix ``DIFFERENTIAL``, the ``CASES`` it must reach and ``cases_reached``.
- ``generator_coverage``: how often each area's draw reaches its cases
  (``python -m strategies.generator_coverage``).

Installed with the package, so the tool-only install can export generated vectors; it needs
Hypothesis (the ``generate`` extra). The property tests that use it live in ``properties/``.
"""
