"""``hbtool debug --auto`` (issue 34): what runs before the search's first round -- the int16 prices (two costed
programs) and the gains pass (one masked evaluation per node) -- runs on the ``--workers`` processes, in chunks, and
gives bit for bit the numbers of the serial pass (so the search's decisions cannot depend on the worker count).

On the all-int8 PP-OCRv5 recogniser the 222 gains and the prices took 50-71 s on the coordinator while the
workers idled; the whole command's ratio of 2 workers to 1 was held down by it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tests' transformer calibrated all-int8 (``auto_int16: false``), its quantized nodes and candidates."""
    from hbtool.debug.auto import int16_groups
    from tests.debug_models import all_int8_session

    session = all_int8_session(tmp_path_factory.mktemp("prepass"))
    names = [n.name for n in session.switchable().nodes]
    return session, names, int16_groups(session, names)[-1]


def test_gains_in_chunks_on_two_workers_equal_the_serial_pass_bit_for_bit(tiny, monkeypatch):
    import hbtool.debug.sensitivity as sensitivity
    from hbtool.debug.sensitivity import ActivationGains, activation_losses
    from hbtool.debug.trials import TrialRunner

    session, names, _ = tiny
    k = 4
    total = len(session.samples)
    # one onnxruntime thread everywhere: the float sums differ in the last bits with the thread count (1.5e-7 on
    # the PP-OCRv5 recogniser), which would make the values, and the decisions, depend on the worker count
    single = session.switchable().single_threaded()
    assert single.threads == 1 and single.graph is session.switchable().graph and single is session.switchable().single_threaded()
    serial = activation_losses(single, session.samples[:k], session.output_names,
                               {o: v[: k * (v.shape[0] // total)] for o, v in session.float_outputs.items()},
                               session.metric, names)
    assert len(serial) == len(names) and max(serial.values()) > 0     # real losses, not a no-op
    monkeypatch.setattr(sensitivity, "GAIN_CHUNK", 5)     # several chunks on the tiny model: the workers share them
    gains = ActivationGains(session, k)
    jobs = gains.jobs(names)
    assert len(jobs) > 2 and [n for j in jobs for n in j.names] == names
    with TrialRunner(session, workers=2) as runner:
        parts = list(runner.jobs(jobs))
    there = {n: v for part in parts for n, v in part.items()}
    assert list(there) == list(serial) and all(there[n] == serial[n] for n in names)   # ==, not approx
    assert gains(names) == serial                                                       # the serial chunks too


def test_prices_on_two_workers_equal_the_serial_prices(tiny):
    from hbtool.debug.price import price_int16, pricing_programs, prices_from
    from hbtool.debug.trials import TrialRunner

    session, _, order = tiny
    here = price_int16(session, {}, order)
    with TrialRunner(session, workers=2) as runner:
        there = prices_from(list(runner.jobs(pricing_programs({}, order))), order)
    assert there.cycles == here.cycles and there.ddr_bytes == here.ddr_bytes and there.fps(order) == here.fps(order)
    assert here.fps(order) < here.fps([])


def test_the_search_records_the_prepass_and_runs_it_through_the_runner(tiny, monkeypatch):
    """The search asks the runner for the prices and the gains as one batch (pricing programs first), and says how
    long it took; the budget set it builds from them is the same with 1 and 2 workers."""
    from hbtool.debug.auto import run_auto
    from hbtool.debug.price import PricingProgram
    from hbtool.debug.sensitivity import ActivationGains, ActivationLossJob, FloatActivationsJob, evaluate
    from hbtool.debug.trials import TrialRunner

    session, names, _ = tiny
    batches = []
    original = TrialRunner.jobs

    def spy(self, jobs):
        batches.append([type(j) for j in jobs])
        return original(self, jobs)

    monkeypatch.setattr(TrialRunner, "jobs", spy)
    ideal = session.metric.value(session.float_outputs, session.float_outputs)
    results = [run_auto(session, [], 0.999, 0.10, ideal, nodes=names, int16_gains=ActivationGains(session, 4), workers=w)
               for w in (1, 2)]
    # per run: the prices and gains as one batch, then the activation reference
    assert len(batches) == 4 and all(b[:2] == [PricingProgram, PricingProgram] and set(b[2:]) == {ActivationLossJob}
                                     for b in batches[::2])
    assert batches[1] == batches[3] == [FloatActivationsJob]
    assert all("prices_and_gains" in r.seconds and "base_measure" in r.seconds for r in results)
    one, two = ([(s.remedy, s.node, s.cosine, s.fps, s.kept) for s in r.steps] for r in results)
    assert one == two and len(one) > 2, one
    # the activation reference: float activations on 15 % of the nodes (the most activation loss), the same on 2 workers
    bound = results[0].activation_reference
    assert bound == results[1].activation_reference and bound["nodes"] == int(0.15 * len(names)) == len(bound["names"])
    model = session.switchable()
    full = evaluate(model, session.samples, model.mask(off=[]), session.output_names, session.float_outputs, session.metric)[1]
    assert full < bound["cosine"] <= 1.0           # float activations on the worst nodes recover part of the loss
    assert bound["reaches_target"] == (bound["cosine"] >= 0.999)
    assert any(n.startswith("activation reference:") and "not a proof" in n for n in results[0].notes)


def test_gains_and_prices_on_a_local_ray_cluster_equal_the_serial_pass(tiny, monkeypatch):
    """The same tasks on Ray (its workers run the initializer once each): the same numbers, bit for bit."""
    pytest.importorskip("ray")
    import hbtool.debug.sensitivity as sensitivity
    from hbtool.debug.price import price_int16, pricing_programs, prices_from
    from hbtool.debug.sensitivity import ActivationGains
    from hbtool.debug.trials import TrialRunner

    session, names, order = tiny
    monkeypatch.setattr(sensitivity, "GAIN_CHUNK", 8)
    gains = ActivationGains(session, 4)
    here = gains(names)
    jobs = pricing_programs({}, order)
    with TrialRunner(session, workers=2, cluster="local") as runner:
        results = list(runner.jobs(jobs + gains.jobs(names)))
    there = {n: v for part in results[2:] for n, v in part.items()}
    assert there == here
    assert prices_from(results[:2], order).cycles == price_int16(session, {}, order).cycles
