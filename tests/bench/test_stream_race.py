"""The copy-race measurement gate-cuda runs on CUDA, on CPU: the threaded prefetch path is
bit-exact against resident, and an injected defect is applied and reported by name."""

from __future__ import annotations

from assay_bench.stream_race import stream_errors

SKIP_RELEASE_WAIT = "stream.pool.skip_release_wait"


def test_streamed_equals_resident_on_cpu_and_faults_are_reported():
    errors = stream_errors("cpu", layers=3, seq=16, faults=(SKIP_RELEASE_WAIT,))
    assert errors["clean"] == 0.0
    # on CPU the copy stream does not exist, so skipping its wait changes nothing
    assert errors[SKIP_RELEASE_WAIT] == 0.0
