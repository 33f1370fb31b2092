"""GpuContention's decision (no GPU needed): the probe's timings are scripted, the logic is the real one."""

from evalbot.measure.gpu_contention import GpuContention


def scripted(times, limit=1e-3, settle=3, timeout_s=5.0):
    g = GpuContention.__new__(GpuContention)  # skip the CUDA set-up; every other line is the class's own
    it = iter(times)
    g.probe = lambda: next(it)
    g.limit, g.settle, g.timeout_s = limit, settle, timeout_s
    return g


def test_quiet_after_settle_fast_probes_in_a_row():
    assert scripted([5e-3, 1e-4, 1e-4, 5e-3, 1e-4, 1e-4, 1e-4]).wait_quiet()


def test_a_gpu_that_stays_busy_is_reported_after_the_timeout():
    g = scripted(iter(lambda: 5e-3, None), timeout_s=0.05)  # every probe slow: kernels keep running
    assert not g.wait_quiet()


def test_a_slow_probe_resets_the_run_of_fast_ones():
    seen = []

    def probe():
        t = [1e-4, 1e-4, 5e-3, 1e-4, 1e-4, 1e-4][len(seen)]
        seen.append(t)
        return t

    g = scripted([])
    g.probe = probe
    assert g.wait_quiet() and len(seen) == 6  # 2 fast, 1 slow (reset), then 3 fast
