"""Moved to :mod:`refsim.streaming.knobs` (issue 27). This name re-exports it for code written
against the old path on other branches; refsim itself imports :mod:`refsim.streaming.knobs`."""

from refsim.streaming.knobs import (DROP_LOW_TOPK_WARN, MAX_PREFETCH, PREDICT_SPEC_MAX_DEFAULT,  # noqa: F401
                                    StreamKnobs, low_topk_warning)
