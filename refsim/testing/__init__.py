"""Hypothesis strategies and small reference models for testing refsim and ports of its rules.

Modules: ``traces`` (decode-event streams and route-trace headers), ``strategies`` and
scripted targets for the speculative loop (``refsim.spec``):

- :mod:`refsim.testing.strategies` — ``@st.composite`` strategies for the speculative loop
  (token streams, corpora with planted repeats, n-gram parameters, scripted targets).
- :mod:`refsim.testing.targets` — :class:`ScriptedTarget`, :class:`ScriptedRouter`,
  :class:`MarkovScript`, :class:`DocumentScript`, :func:`greedy_reference`,
  :func:`copy_heavy_document`.
"""

from refsim.testing.targets import (DocumentScript, MarkovScript, ScriptedRouter,
                                    ScriptedTarget, copy_heavy_document,
                                    greedy_reference)

__all__ = ["ScriptedTarget", "ScriptedRouter", "MarkovScript", "DocumentScript",
           "greedy_reference", "copy_heavy_document"]
