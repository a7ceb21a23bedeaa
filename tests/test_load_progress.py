"""The load status line: on stderr only, only when asked for and slower than the threshold."""

from __future__ import annotations

import io
import time

from assay.cli.load_progress import load_progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_slow_load_shows_a_status_line(monkeypatch):
    monkeypatch.delenv("ASSAY_PROGRESS", raising=False)
    err = _Tty()
    with load_progress("model", after=0.05, stream=err):
        time.sleep(0.3)
    text = err.getvalue()
    assert "assay: loading model ..." in text and "assay: loaded model in" in text


def test_a_fast_load_or_a_pipe_shows_nothing(monkeypatch):
    monkeypatch.delenv("ASSAY_PROGRESS", raising=False)
    err = _Tty()
    with load_progress("model", after=5.0, stream=err):
        pass
    pipe = io.StringIO()
    with load_progress("model", after=0.0, stream=pipe):
        time.sleep(0.05)
    assert err.getvalue() == "" and pipe.getvalue() == ""


def test_the_environment_forces_it_on_or_off(monkeypatch):
    pipe = io.StringIO()
    monkeypatch.setenv("ASSAY_PROGRESS", "1")
    with load_progress("data", after=0.0, stream=pipe):
        time.sleep(0.05)
    assert "loading data" in pipe.getvalue()
    monkeypatch.setenv("ASSAY_PROGRESS", "0")
    tty = _Tty()
    with load_progress("data", after=0.0, stream=tty):
        time.sleep(0.05)
    assert tty.getvalue() == ""


def test_info_json_keeps_stdout_pure(tiny_models, capsys, monkeypatch):
    import json

    from assay.cli import main

    monkeypatch.setenv("ASSAY_PROGRESS", "1")
    assert main(["info", str(tiny_models["llama3"]["gguf"]), "--json"]) == 0
    out = capsys.readouterr().out
    json.loads(out)  # one JSON document, the status (if any) went to stderr


def _until_shown(stream: io.StringIO) -> None:
    deadline = time.monotonic() + 30
    while "loading" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_an_interrupted_load_never_says_it_loaded(monkeypatch):
    import pytest

    monkeypatch.setenv("ASSAY_PROGRESS", "1")
    for stream in (io.StringIO(), _Tty()):
        with pytest.raises(KeyboardInterrupt), load_progress("model", after=0.0, stream=stream):
            _until_shown(stream)
            raise KeyboardInterrupt
        text = stream.getvalue()
        assert "loading model" in text and "loaded" not in text, text
        assert text.endswith("\n" if not stream.isatty() else "\x1b[K")
