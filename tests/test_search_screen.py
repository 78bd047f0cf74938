"""The layout search's screen (parallel_plan(..., screen=True), issue 16's speed goal): a
layout that does not fit comes back as its shortfall only, without its largest micro-batch
and step time. Expected values: the same layout planned in full (fit.py's Fit, the
unscreened path), not the screen's own number."""
from accounting import get_preset
from accounting.planning.gpus import interconnect
from accounting.planning.memory import get_precision
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.parallel.search import search
from accounting.planning.parallel.layout import Layout
from accounting.planning.plan import hardware

LLAMA = get_preset("meta-llama/Llama-3.1-8B")
BF16 = get_precision("bf16-mixed")


def test_screened_rejections_carry_the_full_plans_shortfall():
    # Llama-3.1-8B at 4,096 tokens on 8 A100-80GB: 8 layouts fit, 21 do not (ZeRO-0 to -3
    # of each (tp, pp) until one does not fit)
    hw, net = hardware("A100"), interconnect("A100")
    s = search(LLAMA, Layout(8, global_batch=64), 4096, precision=BF16, hardware=hw, net=net)
    planned = [r for r in s.rejected if r.reason == "does not fit"]
    assert len(planned) >= 10 and s.ranked
    for r in planned:
        full = parallel_plan(LLAMA, r.layout, 4096, precision=BF16, hardware=hw, net=net)
        assert r.shortfall > 0 and full.fit.shortfall == r.shortfall, r.layout.label()
        assert isinstance(parallel_plan(LLAMA, r.layout, 4096, precision=BF16, hardware=hw,
                                        net=net, screen=True), int)
    # a layout that fits is planned in full by the screen too (its time and largest batch)
    p = s.ranked[0]
    again = parallel_plan(LLAMA, p.layout, 4096, precision=BF16, hardware=hw, net=net)
    assert again.fit == p.fit and again.fit.shortfall == 0 and again.fit.largest >= 1
    assert again.step_seconds == p.step_seconds and p.time is not None
