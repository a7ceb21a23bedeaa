"""``attest --verify`` reads every user file with a cap: an envelope or an allowed-signers
file that is ``/dev/zero`` (or past its size) is one line, never a MemoryError."""

from __future__ import annotations

import os
import shutil

import pytest
from test_attest import _cli, _first, signed  # noqa: F401  (signed is a fixture)

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen missing")
ZERO = "/dev/zero"


def test_an_envelope_that_never_ends_fails_on_one_line(signed, capsys):  # noqa: F811
    assert os.path.exists(ZERO)
    assert _cli("--verify", ZERO, "--allowed-signers", str(signed["allowed"])) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith(f"{ZERO}: not a readable JSON envelope")


def test_an_envelope_past_its_cap_fails_on_one_line(signed, tmp_path, capsys):  # noqa: F811
    big = tmp_path / "big.intoto.json"
    with big.open("wb") as handle:
        handle.truncate((16 << 20) + 1)  # sparse: no disk, no memory
    assert _cli("--verify", str(big), "--allowed-signers", str(signed["allowed"])) == 1
    assert "the limit is 16,777,216 bytes" in capsys.readouterr().out


def test_allowed_signers_that_never_end_are_one_line(signed, capsys):  # noqa: F811
    path, _ = _first(signed)
    assert _cli("--verify", str(path), "--allowed-signers", ZERO) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ZERO}: not a regular file" in err, err
