"""Lossy verify routing: two rules that narrow a verify batch's per-layer expert union (issue 30).

A verify decode of ``[tok, d1..dn]`` routes n+1 positions at every MoE layer, and the union of
their selections is what speculation costs in bytes (engine-docs: the widened verify batch is
97 % of speculation's bytes). These rules change the routing of such a batch so the union
narrows; they change the model's output, so every result that uses them is labelled **lossy**.
They are refsim's own experiment, not an engine flag. Both act on one layer's rows of one verify
decode (``(n, k)`` ids and weights, ``n >= 2``; a slot with id < 0 is not routed and is left
alone), and never on a single-position decode or a prefill (:meth:`VerifyRouter.applies`).

``cap:U`` (union cap)
    Sum each expert's weight over the batch's rows; keep the U experts of largest summed weight
    (equal sums: the lower id first). A slot whose expert is not kept is *dropped*: not read, its
    weight discarded; the forward pass applies the drop as ``--drop-cold-experts`` does
    (:func:`refsim.streaming.drop.apply_drop`: weight 0, id rewritten, survivors renormalised).
    U at or above the union size changes nothing.

``consensus:T`` (consensus routing)
    Rank the union's experts by summed weight as above. At each position after the first, visit
    its slots lightest first (equal weights: lower slot first); a slot whose weight share
    ``w / sum(row's weights)`` is below T is moved to the highest-ranked union expert the row
    does not select yet (if any), keeping its weight. The moved weight counts as discarded (it no
    longer reaches the expert the router chose). T = 0 changes nothing; the first position is
    never changed.

The same functions serve the trace study (:mod:`refsim.studies.spec_policy`, whole events via
:func:`cap_union` / :func:`consensus`) and the live pass (:class:`VerifyRouter`, handed to the
pass in :class:`refsim.streaming.hooks.LayerHooks` and called by
:meth:`refsim.forward.routing.Routing.route_layer`), so the rule is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.streaming.drop import apply_drop

KINDS = ("cap", "consensus")


def _ranked(ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of one layer's routed ids and each expert's summed weight (float32, summed in
    row-major slot order), ranked by decreasing sum, equal sums lower id first.
    Returns ``(experts (u,) int64, sums (u,) float32)``."""
    flat, w = ids.ravel().astype(np.int64), weights.ravel()
    ok = flat >= 0
    uniq = np.unique(flat[ok])
    tot = np.array([w[ok & (flat == e)].sum() for e in uniq], dtype=np.float32)
    order = np.argsort(-tot, kind="stable")
    return uniq[order], tot[order]


def cap_layer(ids: np.ndarray, weights: np.ndarray, cap: int) -> np.ndarray:
    """``cap:U`` on one layer's rows of a verify batch: which slots are dropped.

    Parameters
    ----------
    ids : (n, k) int ndarray
        Selected experts per row (< 0: not routed).
    weights : (n, k) float32 ndarray
        Their router weights.
    cap : int
        U, the experts kept (>= 1).

    Returns
    -------
    dropped : (n, k) bool ndarray
        Routed slots whose expert is not among the U of largest summed weight.
    """
    ids = np.asarray(ids)
    experts, _ = _ranked(ids, np.asarray(weights, np.float32))
    if experts.size <= cap:
        return np.zeros(ids.shape, bool)
    return np.isin(ids, experts[:cap], invert=True) & (ids >= 0)


def consensus_layer(ids: np.ndarray, weights: np.ndarray, share: float) -> np.ndarray:
    """``consensus:T`` on one layer's rows of a verify batch: the new selection.

    Parameters
    ----------
    ids : (n, k) int ndarray
        Selected experts per row (< 0: not routed); row 0 is the batch's first position.
    weights : (n, k) float32 ndarray
    share : float
        T: a slot below this share of its row's summed weight moves to a union expert.

    Returns
    -------
    (n, k) ndarray of ``ids``' dtype
        The selection after the moves (row 0 unchanged); ``!= ids`` marks the moved slots.
    """
    ids = np.asarray(ids)
    weights = np.asarray(weights, np.float32)
    out = ids.copy()
    order = [int(e) for e in _ranked(ids, weights)[0]]
    for j in range(1, ids.shape[0]):
        routed = ids[j] >= 0
        s = float(weights[j][routed].sum())
        have = set(out[j].tolist())
        for slot in np.argsort(weights[j], kind="stable"):
            if ids[j, slot] < 0 or s <= 0 or weights[j, slot] / s >= share:
                continue
            for e in order:
                if e not in have:
                    have.discard(int(out[j, slot]))
                    out[j, slot] = e
                    have.add(e)
                    break
    return out


def cap_union(routes: np.ndarray, weights: np.ndarray, cap: int) -> tuple[np.ndarray, float]:
    """``cap:U`` on a whole verify event: :func:`cap_layer` per layer.

    Parameters
    ----------
    routes : (n, n_layer, k) int16 ndarray; weights : (n, n_layer, k) float32 ndarray
    cap : int

    Returns
    -------
    dropped : (n, n_layer, k) bool ndarray
    discarded : float
        Summed weight of the dropped slots.
    """
    dropped = np.zeros(routes.shape, bool)
    for il in range(routes.shape[1]):
        dropped[:, il] = cap_layer(routes[:, il], weights[:, il], cap)
    return dropped, float(weights[dropped].sum())


def consensus(routes: np.ndarray, weights: np.ndarray, share: float) -> tuple[np.ndarray, float]:
    """``consensus:T`` on a whole verify event: :func:`consensus_layer` per layer.

    Parameters
    ----------
    routes : (n, n_layer, k) int16 ndarray; weights : (n, n_layer, k) float32 ndarray
    share : float

    Returns
    -------
    routes : (n, n_layer, k) ndarray
        The new routing (weights unchanged).
    discarded : float
        Summed weight of the moved slots.
    """
    out = routes.copy()
    for il in range(routes.shape[1]):
        out[:, il] = consensus_layer(routes[:, il], weights[:, il], share)
    moved = out != routes
    return out, float(weights[moved].astype(np.float64).sum())


@dataclass(frozen=True)
class VerifyRouting:
    """One lossy verify-routing rule, as ``cap:U`` or ``consensus:T`` names it.

    Attributes
    ----------
    kind : {'cap', 'consensus'}
    value : float
        U (an integer >= 1) for ``cap``; T in [0, 1] for ``consensus``.

    Raises
    ------
    ConfigError
        An unknown kind or a value out of range.
    """

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"verify routing: expected cap:U or consensus:T, got kind {self.kind!r}")
        v = self.value
        if self.kind == "cap" and not (float(v).is_integer() and v >= 1):
            raise ConfigError(f"verify routing cap:U: expected an integer U >= 1, got {v!r}")
        if self.kind == "consensus" and not 0.0 <= v <= 1.0:
            raise ConfigError(f"verify routing consensus:T: expected a share T in [0, 1], got {v!r}")

    @property
    def label(self) -> str:
        """``cap:12`` / ``consensus:0.1``, as parsed."""
        return f"{self.kind}:{int(self.value) if self.kind == 'cap' else self.value:g}"

    def layer(self, ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rule on one layer's rows: ``(recorded ids, dropped)``. ``cap`` keeps the router's
        ids and drops slots; ``consensus`` moves slots and drops none."""
        if self.kind == "cap":
            return ids, cap_layer(ids, weights, int(self.value))
        return consensus_layer(ids, weights, float(self.value)), np.zeros(np.shape(ids), bool)

    def event(self, routes: np.ndarray, weights: np.ndarray):
        """The rule on a whole verify event: ``(routes, dropped or None, discarded weight)``."""
        if self.kind == "cap":
            dropped, lost = cap_union(routes, weights, int(self.value))
            return routes, dropped, lost
        new, lost = consensus(routes, weights, float(self.value))
        return new, None, lost


def parse_verify_routing(text: str) -> VerifyRouting:
    """``'cap:12'`` -> ``VerifyRouting('cap', 12)``; ``'consensus:0.1'`` likewise.

    Raises
    ------
    ConfigError
        Not ``KIND:VALUE`` with a known kind and a number in range.
    """
    kind, sep, val = str(text).partition(":")
    if not sep or kind not in KINDS or not val:
        raise ConfigError(f"verify routing: expected cap:U or consensus:T, got {text!r}")
    try:
        v = float(val)
    except ValueError:
        raise ConfigError(f"verify routing {kind}: expected a number after ':', got {val!r}") from None
    return VerifyRouting(kind, v)


class VerifyRouter:
    """The live side: the rule a forward pass applies to verify decodes, and what it discarded.

    Parameters
    ----------
    rule : VerifyRouting or str

    Attributes
    ----------
    rule : VerifyRouting
    layers : int
        Layer batches the rule was applied to (verify decodes x MoE layers).
    changed : int
        Slots dropped (cap) or moved (consensus).
    weight_total, weight_discarded : float
        Summed router weight of the rows it saw, and of the changed slots.
    """

    def __init__(self, rule: VerifyRouting | str):
        self.rule = rule if isinstance(rule, VerifyRouting) else parse_verify_routing(rule)
        self.layers = self.changed = 0
        self.weight_total = self.weight_discarded = 0.0

    @staticmethod
    def applies(phase: int, n_rows: int) -> bool:
        """A decode graph (phase 1) routing more than one row: a verify decode."""
        return phase == 1 and n_rows > 1

    @property
    def discarded_pct(self) -> float:
        """Percent of the seen routing weight the rule discarded (0 before any verify)."""
        return 100.0 * self.weight_discarded / self.weight_total if self.weight_total else 0.0

    def layer(self, ids: np.ndarray, weights: np.ndarray, renorm: bool = True):
        """Apply the rule to one layer's rows of a verify decode.

        Parameters
        ----------
        ids : (n, k) int16 ndarray; weights : (n, k) float32 ndarray
            The router's selection (after ``--route-ahead``'s commit, if any).
        renorm : bool
            Rescale a capped row's survivors (as ``--drop-cold-experts`` does by default).

        Returns
        -------
        recorded : (n, k) ndarray
            The routing the trace records (the router's for cap, the moved one for consensus).
        run_ids, run_w : (n, k) ndarrays
            What the layer's experts run.
        dropped : (n, k) bool ndarray
            Slots not read (cap).
        """
        rec, dropped = self.rule.layer(ids, weights)
        changed = dropped | (rec != ids)
        self.layers += 1
        self.changed += int(changed.sum())
        routed = ids >= 0
        self.weight_total += float(np.asarray(weights, np.float64)[routed].sum())
        self.weight_discarded += float(np.asarray(weights, np.float64)[changed].sum())
        if dropped.any():
            run_ids, run_w = apply_drop(rec, weights, dropped, renorm)
            return rec, run_ids, run_w, dropped
        return rec, rec, weights, dropped


__all__ = ["VerifyRouting", "VerifyRouter", "parse_verify_routing", "cap_layer", "consensus_layer",
           "cap_union", "consensus"]
