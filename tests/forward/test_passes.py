"""The table (arch, numerics) -> pass (refsim.forward.passes) and the target that picks from it
(refsim.spec.forward_target.ForwardTarget): which decode runs, which pass takes the streaming hooks."""

import numpy as np
import pytest

from refsim.errors import ConfigError
from refsim.forward import fused, gemma3, qwen3moe, qwen35moe
from refsim.forward.passes import ARCH_MODULES, PASSES, pass_for
from refsim.spec.forward_target import ForwardTarget
from refsim.spec.target import Target
from refsim.streaming.hooks import LayerHooks


def test_the_table_names_every_pass():
    assert set(PASSES) == {("qwen3moe", "exact"), ("qwen3moe", "ggml"), ("qwen35moe", "exact"),
                           ("qwen35moe", "ggml"), ("gemma3", "exact"), ("gemma3", "ggml"), ("gemma3", "llamacpp")}
    assert list(ARCH_MODULES) == ["qwen3moe", "qwen35moe", "gemma3"]
    want = {("qwen3moe", "exact"): (qwen3moe, qwen3moe.decode, True, None),
            ("qwen3moe", "ggml"): (qwen3moe, fused.qwen3moe_decode, True, None),
            ("qwen35moe", "exact"): (qwen35moe, qwen35moe.decode, True, qwen35moe.mtp_decode),
            ("qwen35moe", "ggml"): (qwen35moe, fused.qwen35moe_decode, True, fused.qwen35moe_mtp_decode),
            ("gemma3", "exact"): (gemma3, gemma3.decode, False, None),
            ("gemma3", "ggml"): (gemma3, gemma3.decode, False, None)}
    for (arch, num), (module, decode, hooks, mtp) in want.items():
        p = pass_for(arch, num)
        assert (p.arch, p.numerics, p.decode, p.hooks, p.mtp_decode) == (arch, num, decode, hooks, mtp)
        assert p.load_weights is module.load_weights and p.new_state is module.new_state
    from refsim.forward import gemma3_llamacpp
    from refsim.forward.passes import llamacpp_decode
    p = pass_for("gemma3", "llamacpp")
    assert (p.decode, p.load_weights, p.new_state, p.hooks) == (llamacpp_decode, gemma3_llamacpp.load_weights,
                                                                 gemma3_llamacpp.new_state, False)
    with pytest.raises(KeyError):
        pass_for("qwen3moe", "llamacpp")


def test_the_readable_passes_do_not_import_the_fused_one():
    # gemma3 no longer dispatches into gemma3_llamacpp (cycle C3), and no readable module imports fused
    import ast
    from pathlib import Path
    root = Path(qwen3moe.__file__).parent
    for name in ("layers", "routing", "loader", "qwen3moe", "qwen35moe", "gemma3"):
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m.endswith(("fused", "gemma3_llamacpp", "passes")) or m.startswith("refsim.spec")}, name


def test_forward_target_picks_its_pass_and_declares_its_hooks(tiny_models):
    m = tiny_models["Q4_0"]
    ggml, exact = ForwardTarget(m, "ggml"), ForwardTarget(m, "exact")
    assert ggml.passes.decode is fused.qwen3moe_decode and exact.passes.decode is qwen3moe.decode
    assert isinstance(ggml.hooks, LayerHooks) and ggml.hooks.idle and isinstance(ggml, Target)
    mine = LayerHooks()
    assert ForwardTarget(m, "exact", hooks=mine).hooks is mine
    toks = [3, 200, 17, 9]
    ra, rb = ggml.prefill(np.array(toks)), exact.prefill(np.array(toks))
    assert ra.routes.shape == rb.routes.shape == (4, 2, 2)


def test_a_pass_without_the_seam_has_no_hooks():
    # gemma3 is dense, its passes take no hooks: the target declares hooks = None, refuses hooks given
    # to it (before loading any weight), and the loop refuses --drop-cold-experts for it in one line
    from refsim.cache import ExpertCache
    from refsim.model import open_model
    from refsim.spec import run_generation
    from refsim.streaming.knobs import StreamKnobs
    from refsim.testing.targets import DocumentScript, ScriptedRouter, ScriptedTarget
    model = open_model(gemma3.gemma3_270m_path())
    with pytest.raises(ConfigError, match="^the gemma3 pass with ggml numerics takes no streaming hooks"):
        ForwardTarget(model, "ggml", hooks=LayerHooks())
    assert ForwardTarget(model, "ggml").hooks is None
    t = ScriptedTarget(DocumentScript([1, 2, 3, 4, 5, 6], eos=0), ScriptedRouter(2, 8, 2, seed=1))
    assert isinstance(t.hooks, LayerHooks)
    t.hooks = None
    cache = ExpertCache([100, 100], 8, 1000, StreamKnobs(drop_frac=0.5))
    with pytest.raises(ConfigError, match=r"^--drop-cold-experts: this target's forward pass has no drop seam"):
        run_generation(t, None, [1, 2], 3, cache=cache)


def test_bad_numerics_keep_their_one_line_errors(tiny_models):
    with pytest.raises(ConfigError, match="^--numerics: expected one of exact, ggml, got 'fast'$"):
        ForwardTarget(tiny_models["F32"], "fast")
    with pytest.raises(ConfigError, match="^--numerics llamacpp: implemented for gemma3 only"):
        ForwardTarget(tiny_models["F32"], "llamacpp")
    with pytest.raises(ConfigError, match="^kv_type 'f16': only the llamacpp numerics"):
        ForwardTarget(tiny_models["F32"], "exact", kv_type="f16")
