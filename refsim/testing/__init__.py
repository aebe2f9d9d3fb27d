"""Hypothesis strategies and small reference models for testing refsim and ports of its rules.

Modules: ``traces`` (decode-event streams and route-trace headers), ``strategies`` and
scripted targets for the speculative loop (``refsim.spec``).
"""
