"""The reader's fast path after the parse: every row rule checked and the rows framed into
decodes in one Numba pass, then scattered into one :class:`~refsim.events.EventBlock`.

:func:`frame_rows` accepts exactly the rows that a well-formed trace has, as the structure the
rules of docs/trace-format.md ("Validation") leave: the rows of a decode are its layers in order
(0, 1, ... the last routed layer), each layer holds the same consecutive steps, each step holds
``n_expert_used`` rows with slots 0..k-1 (distinct experts, weights all ``nan`` or none, not every
slot dropped), under the FINAL last-layer convention a prefill chunk routes the last layer at its
final step only and only when the chunk ends its turn's prefill (under EVERY at every step,
:mod:`refsim.trace.convention`; the reader tries both unless the arch fixes one), the residency
and ``expert_bytes`` rules hold per layer batch, and consecutive decodes follow the positions
rule. It never diagnoses: on anything else (or a trace routing a single layer, whose framing
differs) it returns a failure and the reader's per-line path (:func:`refsim.trace.reader._build`,
the readable reference) reads the file and gives the ``file:line`` message. So what this path accepts, the per-line path accepts
with the same events (tests/trace/test_fast_equals_slow.py checks it on every mutation of the
mutation campaign's seeds and on hypothesis-made traces).
"""

from __future__ import annotations

import numpy as np

from refsim.jit import njit

OK, FAIL = 0, 1

F_PREFILL_LAST = 1
"""Event flag: a prefill chunk that routes the last layer (it must end its turn's prefill)."""
F_NEEDS_MORE = 2
"""Event flag: a prefill chunk without the last layer (another chunk of its turn must follow)."""
F_DROPPED = 4
"""Event flag: some slot of the event is dropped."""


@njit(cache=True)
def _frame(turn, phase, step, layer, slot, expert, weight, residency, charged, dropped,
           has_dropped, n_layer, k, n_expert, cut_last, expert_bytes, ev_row, ev_first, ev_n,
           ev_flags):
    """Check and frame the rows; returns (status, number of events, last routed layer).

    Writes per event (arrays of at least ``n_rows // k + 1``): ``ev_row`` its first row
    (``ev_row[n_events]`` = n_rows), ``ev_first`` its first step, ``ev_n`` its positions,
    ``ev_flags`` the ``F_*`` flags.
    """
    n = layer.size
    if n == 0 or n % k != 0:
        return FAIL, 0, -1
    seen = np.zeros(n_layer, np.bool_)
    for i in range(n):
        seen[layer[i]] = True
    last = n_layer - 1 if seen[n_layer - 1] else n_layer - 2
    if last < 1:
        return FAIL, 0, -1            # one routed layer: the per-line path frames it
    for il in range(last + 1):
        if not seen[il]:
            return FAIL, 0, -1
    g_stamp = np.zeros(n_expert, np.int64)      # group (position, layer) of an expert's last row
    b_stamp = np.zeros(n_expert, np.int64)      # batch (decode, layer) of an expert's first row
    b_looked = np.zeros(n_expert, np.int64)     # batch of its first non-dropped row
    b_res = np.zeros(n_expert, np.uint8)        # its residency in that batch
    n_ev = 0
    g = 0
    b = 0
    s0 = 0
    npos = 0
    cl = -1                            # the current decode's layer and step
    cs = 0
    cut = False
    i = 0
    while i < n:
        t, ph, s, il = turn[i], phase[i], step[i], layer[i]
        for j in range(k):             # a (position, layer) group: k rows, slots 0..k-1
            r = i + j
            if (slot[r] != j or turn[r] != t or phase[r] != ph or step[r] != s
                    or layer[r] != il):
                return FAIL, 0, -1
        cont = (n_ev > 0 and t == turn[i - 1] and ph == phase[i - 1]
                and (il > cl or (il == cl and s > cs)))
        if cont:
            if il == cl:
                if s != cs + 1 or (il > 0 and s > s0 + npos - 1):
                    return FAIL, 0, -1
            else:
                if il != cl + 1:
                    return FAIL, 0, -1
                if cl == 0:
                    npos = cs - s0 + 1
                elif cs != s0 + npos - 1:
                    return FAIL, 0, -1
                if cut and il == last:
                    if s != s0 + npos - 1:
                        return FAIL, 0, -1
                elif s != s0:
                    return FAIL, 0, -1
                b += 1
        else:
            if n_ev > 0:               # close the decode before
                if cl == 0:
                    npos = cs - s0 + 1
                e = n_ev - 1
                if cut and cl == last:
                    ev_flags[e] |= F_PREFILL_LAST
                elif cut and cl == last - 1 and cs == s0 + npos - 1:
                    ev_flags[e] |= F_NEEDS_MORE
                elif cl != last or cs != s0 + npos - 1:
                    return FAIL, 0, -1
                ev_n[e] = npos
                # the positions rule between the decode before (e) and this one
                more = t == turn[i - 1] and ph == 0 and phase[i - 1] == 0
                if (ev_flags[e] & F_NEEDS_MORE) != 0 and not more:
                    return FAIL, 0, -1
                if (ev_flags[e] & F_PREFILL_LAST) != 0 and more:
                    return FAIL, 0, -1
                if t < turn[i - 1]:
                    return FAIL, 0, -1
                if t == turn[i - 1]:
                    if phase[i - 1] == 1 and ph == 0:
                        return FAIL, 0, -1
                    hi = ev_first[e] + npos
                    lo = hi if phase[i - 1] == 0 else ev_first[e] + 1
                    if s < lo or s > hi:
                        return FAIL, 0, -1
            if il != 0:
                return FAIL, 0, -1
            ev_row[n_ev] = i
            ev_first[n_ev] = s
            ev_flags[n_ev] = 0
            n_ev += 1
            s0 = s
            npos = 0
            cut = cut_last and ph == 0
            b += 1
        cl = il
        cs = s
        g += 1
        n_nan = 0
        n_drop = 0
        for j in range(k):
            r = i + j
            e = expert[r]
            if g_stamp[e] == g:
                return FAIL, 0, -1     # an expert twice among a position's top-k
            g_stamp[e] = g
            w = weight[r]
            if w != w:
                n_nan += 1
            elif w < 0:
                return FAIL, 0, -1
            res = residency[r]
            drop = has_dropped and dropped[r] != 0
            if drop:
                n_drop += 1
                if res != 0:
                    return FAIL, 0, -1
            if b_stamp[e] != b:
                b_stamp[e] = b
                b_res[e] = res
            elif res != b_res[e]:
                return FAIL, 0, -1
            want = 0
            if not drop and b_looked[e] != b:
                b_looked[e] = b
                if res == 0:
                    want = expert_bytes[il]
            if charged[r] != want:
                return FAIL, 0, -1
        if (n_nan != 0 and n_nan != k) or n_drop == k:
            return FAIL, 0, -1
        if n_drop:
            ev_flags[n_ev - 1] |= F_DROPPED
        i += k
    if cl == 0:                        # close the last decode
        npos = cs - s0 + 1
    e = n_ev - 1
    if cut and cl == last:
        ev_flags[e] |= F_PREFILL_LAST
    elif cl != last or cs != s0 + npos - 1:
        return FAIL, 0, -1             # (a prefill chunk without the last layer ends the rows)
    ev_n[e] = npos
    ev_row[n_ev] = n
    return OK, n_ev, last


@njit(cache=True)
def _pack(step, layer, slot, expert, weight, residency, charged, dropped, has_dropped, lines,
          ev_row, ev_first, ev_pos, routes, weights, res_out, charged_out, lines_out, drop_out):
    """Scatter the framed rows into the (position, layer, slot) arrays (filled beforehand with
    their not-routed values)."""
    for e in range(ev_row.size - 1):
        p0 = ev_pos[e] - ev_first[e]
        for r in range(ev_row[e], ev_row[e + 1]):
            p = p0 + step[r]
            il = layer[r]
            s = slot[r]
            routes[p, il, s] = expert[r]
            weights[p, il, s] = weight[r]
            res_out[p, il, s] = residency[r]
            charged_out[p, il, s] = charged[r]
            lines_out[p, il, s] = lines[r]
            if has_dropped:
                drop_out[p, il, s] = dropped[r] != 0


def frame_rows(cols: dict, lines: np.ndarray, n_layer: int, k: int, n_expert: int,
               cut_last: bool, expert_bytes: np.ndarray):
    """Check and pack the parsed rows of a trace (or of one turn of it).

    Parameters
    ----------
    cols : dict of str to ndarray
        :func:`refsim.trace.fastparse.parse_rows`'s columns (``dropped`` optional).
    lines : (n_rows,) int32 ndarray
        1-based line of each row.
    cut_last : bool
        Check the :data:`~refsim.trace.convention.FINAL` convention (a prefill routes its last
        layer at the output position only); False: :data:`~refsim.trace.convention.EVERY`.
    expert_bytes : (n_layer,) int64 ndarray

    Returns
    -------
    tuple or None
        ``(block, residency, charged, lines)``: the :class:`~refsim.events.EventBlock` and the
        recorded residency (P, n_layer, k) int8 (-1 not routed), ``expert_bytes`` (P, n_layer, k)
        int64 and line numbers (P, n_layer, k) int32 (0 not routed); None when a rule fails.
    """
    from refsim.events import DecodeKind, EventBlock

    if lines.size == 0:
        return None                    # no rows: the per-line path
    turn, phase, step, layer = cols["turn"], cols["phase"], cols["step"], cols["layer"]
    slot, expert, weight = cols["slot"], cols["expert"], cols["weight"]
    residency, charged = cols["residency"], cols["expert_bytes"]
    has_dropped = "dropped" in cols
    dropped = cols["dropped"] if has_dropped else np.zeros(0, np.uint8)
    n_rows = layer.size
    cap = n_rows // k + 1
    ev_row = np.empty(cap + 1, np.int64)
    ev_first = np.empty(cap, np.int64)
    ev_n = np.empty(cap, np.int64)
    ev_flags = np.empty(cap, np.int64)
    status, n_ev, _ = _frame(turn, phase, step, layer, slot, expert, weight, residency, charged,
                             dropped, has_dropped, n_layer, k, n_expert, cut_last,
                             np.asarray(expert_bytes, np.int64), ev_row, ev_first, ev_n, ev_flags)
    if status != OK:
        return None
    ev_row, ev_first, ev_n, ev_flags = ev_row[:n_ev + 1], ev_first[:n_ev], ev_n[:n_ev], ev_flags[:n_ev]
    ev_pos = np.zeros(n_ev + 1, np.int64)
    np.cumsum(ev_n, out=ev_pos[1:])
    n_pos = int(ev_pos[-1])
    shape = (n_pos, n_layer, k)
    routes = np.full(shape, -1, np.int16)
    weights = np.full(shape, np.nan, np.float32)
    res = np.full(shape, -1, np.int8)
    chg = np.zeros(shape, np.int64)
    lns = np.zeros(shape, np.int32)
    drop = np.zeros(shape if has_dropped else (0, n_layer, k), np.bool_)
    _pack(step, layer, slot, expert, weight, residency, charged, dropped, has_dropped, lines,
          ev_row, ev_first, ev_pos, routes, weights, res, chg, lns, drop)
    ev_phase = phase[ev_row[:-1]]
    kind = np.where(ev_phase == 0, int(DecodeKind.PREFILL),
                    np.where(ev_n == 1, int(DecodeKind.PLAIN), int(DecodeKind.VERIFY))).astype(np.int8)
    ev_turn = turn[ev_row[:-1]].astype(np.int64)
    # a verify decode's next decode (same turn) starts after its accepted drafts
    accepted = np.full(n_ev, -1, np.int64)
    if n_ev > 1:
        nxt = (kind[:-1] == DecodeKind.VERIFY) & (ev_phase[1:] == 1) & (ev_turn[1:] == ev_turn[:-1])
        accepted[:-1] = np.where(nxt, ev_first[1:] - ev_first[:-1] - 1, -1)
    positions = np.arange(n_pos, dtype=np.int64) - np.repeat(ev_pos[:-1] - ev_first, ev_n)
    block = EventBlock(positions=positions, routes=routes, weights=weights,
                       dropped=drop if has_dropped else None, event_start=ev_pos, kind=kind,
                       turn=ev_turn, accepted=accepted,
                       has_dropped=(ev_flags & F_DROPPED) != 0)
    return block, res, chg, lns
