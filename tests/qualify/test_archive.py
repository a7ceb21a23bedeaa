"""Receipts made on a GPU box come home as one archive (assay.qualify.ledger.archive) and join the
ledger the box chained onto, beside the CPU receipts of the same gate."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from gatekit import SEES_CUDA, TINY_PNG

from assay.cli import main
from assay.errors import AssayError
from assay.qualify import verify_all
from assay.qualify.judging.standing import gate_standing
from assay.qualify.ledger.archive import pack, read_archive
from assay.qualify.ledger.chain import chain_head, read_ledger

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DEVICE_GATE = """
def test_diff(gate):
    claim = gate.claim("diff", "outputs agree", kind="correctness",
                       threshold=Threshold("<=", 1e-3, tolerance=0.1), unit="max abs")
    claim.measure(1e-4)
    claim.ran_on(f"{gate.device}:0")
    claim.control("broken subject", 0.5)
    tokens = gate.claim("tokens", "tokenizer agrees", kind="correctness",
                        threshold=Threshold("==", 0), unit="mismatches")
    tokens.measure(0)
    tokens.ran_on("cpu")
    tokens.control("broken tokenizer", 3)
"""


def _box_run(gates, tmp_path: Path) -> tuple[Path, Path]:
    """Seed a box folder from the home receipts, as the kit does, run there as cuda and pack."""
    gates.pytester.makeconftest(SEES_CUDA)
    box = tmp_path / "box"
    shutil.copytree(gates.receipts, box / "receipts")
    base = chain_head(box / "receipts", "alpha")
    provenance = tmp_path / "provenance.json"
    provenance.write_text(json.dumps({"commit": COMMIT, "dirty": False, "tree_sha256": "a" * 64}))
    gates.run(
        "--gate-no-render",
        "--gate-device=cuda",
        f"--gate-records={box / 'records'}",
        f"--gate-provenance={provenance}",
        receipts=box / "receipts",
    ).assert_outcomes(passed=1)
    archive = tmp_path / "assay-gpu-test.tar.gz"
    pack(
        archive,
        box / "receipts",
        box / "records",
        {"alpha": base},
        {"commit": COMMIT},
        extra={"summary.tsv": b"gate\trc\nalpha\t0\n"},
    )
    return archive, box


@pytest.fixture
def home(gates):
    """A home ledger that already holds a CPU receipt of gate alpha."""
    gates.write("alpha", DEVICE_GATE)
    gates.run().assert_outcomes(passed=1)
    return gates


def _import(archive: Path, receipts: Path, *extra: str) -> int:
    return main(["import-gpu", str(archive), "--receipts", str(receipts), *extra])


def test_box_receipts_join_beside_the_cpu_ones_and_verify(home, tmp_path, capsys):
    archive, _ = _box_run(home, tmp_path)
    assert _import(archive, home.receipts) == 0, capsys.readouterr()
    entries, _ = read_ledger(home.receipts / "alpha" / "LEDGER")
    assert len(entries) == 2
    assert verify_all(home.receipts, home.records) == []
    standing = gate_standing(home.receipts, "alpha", home.records)
    assert [d.device for d in standing.devices] == ["cpu", "cuda"]
    assert all(d.head is not None for d in standing.devices)
    cuda = standing.device("cuda").head
    assert cuda["code"]["commit"] == COMMIT and cuda["code"]["commit_source"] == "kit manifest"
    assert {c["id"]: c["device"] for c in cuda["claims"]} == {"diff": "cuda", "tokens": "cpu"}
    record = (home.records / "alpha.md").read_text()
    assert "| cuda | pass |" in record and "ran on cpu" in record
    from assay.qualify.publishing.wording import commit_text

    assert "from the GPU kit's manifest" in commit_text(cuda["code"])
    # the same archive again: nothing to do, still verifies
    assert _import(archive, home.receipts) == 0
    assert "already in the ledger" in capsys.readouterr().out
    assert len(read_ledger(home.receipts / "alpha" / "LEDGER")[0]) == 2


def test_a_receipt_with_a_figure_comes_home_byte_for_byte(gates, tmp_path, capsys):
    """A box receipt that carries a figure: the receipt lands as the box wrote it and the figure
    beside it (the import once wrote the figure's bytes in the receipt's place)."""
    png = tmp_path / "plot.png"
    png.write_bytes(TINY_PNG)
    figure = f"    gate.figure({str(png)!r}, 'error by layer')\n"
    gates.write("alpha", DEVICE_GATE.replace("    claim.measure", figure + "    claim.measure", 1))
    gates.run().assert_outcomes(passed=1)
    archive, box = _box_run(gates, tmp_path)
    assert _import(archive, gates.receipts) == 0, capsys.readouterr()
    written = {p.name: p.read_bytes() for p in (box / "receipts" / "alpha").glob("*.json")}
    home = {p.name: p.read_bytes() for p in (gates.receipts / "alpha").glob("*.json")}
    assert written.items() <= home.items()
    receipt = json.loads(home[max(written)])
    assert (
        receipt["figures"]
        and (gates.records / receipt["figures"][0]["path"]).read_bytes() == TINY_PNG
    )
    assert verify_all(gates.receipts, gates.records) == []


def _rewrite(archive: Path, change) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}
    change(members)
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _receipt_member(members: dict[str, bytes]) -> str:
    return next(n for n in members if n.startswith("receipts/"))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "tamper",
    [
        "edited receipt, manifest kept",
        "edited receipt, manifest updated",
        "member added",
        "path escapes",
        "malformed manifest",
        "receipt listed under no gate",
        "manifest bytes wrong",
        "gzip trailer corrupt",
        "garbage after the gzip stream",
    ],
)
def test_a_tampered_archive_is_refused_and_writes_nothing(home, tmp_path, capsys, tamper):
    archive, _ = _box_run(home, tmp_path)

    def change(members):
        name = _receipt_member(members)
        if tamper.startswith("edited receipt"):
            data = json.loads(members[name])
            data["claims"][0]["measurement"]["value"] = 0.0
            members[name] = json.dumps(data).encode()
            if tamper.endswith("updated"):
                manifest = json.loads(members["manifest.json"])
                for f in manifest["files"]:
                    if f["path"] == name:
                        f["sha256"] = hashlib.sha256(members[name]).hexdigest()
                members["manifest.json"] = json.dumps(manifest).encode()
        elif tamper == "member added":
            members["receipts/alpha/extra.json"] = b"{}"
        elif tamper == "path escapes":  # listed in the manifest too: only the name check stops it
            members["figures/../../evil.json"] = b"{}"
            manifest = json.loads(members["manifest.json"])
            manifest["files"].append(
                {
                    "path": "figures/../../evil.json",
                    "bytes": 2,
                    "sha256": hashlib.sha256(b"{}").hexdigest(),
                }
            )
            members["manifest.json"] = json.dumps(manifest).encode()
        elif tamper == "receipt listed under no gate":
            manifest = json.loads(members["manifest.json"])
            manifest["gates"] = {}
            members["manifest.json"] = json.dumps(manifest).encode()
        elif tamper == "manifest bytes wrong":
            manifest = json.loads(members["manifest.json"])
            manifest["files"][0]["bytes"] += 1
            members["manifest.json"] = json.dumps(manifest).encode()
        elif tamper == "malformed manifest":  # a manifest whose gate entry is malformed
            manifest = json.loads(members["manifest.json"])
            manifest["gates"]["alpha"]["receipts"] = "not a list"
            members["manifest.json"] = json.dumps(manifest).encode()

    if "gzip" in tamper:
        data = bytearray(archive.read_bytes())
        if tamper == "gzip trailer corrupt":
            data[-8] ^= 0xFF  # the CRC32 of the gzip trailer
        else:
            data += b"trailing garbage"
        archive.write_bytes(bytes(data))
    else:
        _rewrite(archive, change)
    before = _snapshot(home.records)
    assert _import(archive, home.receipts) == 2
    err = capsys.readouterr().err
    assert err.startswith("assay import-gpu: ") and len(err.strip().splitlines()) == 1
    assert str(archive) in err
    assert _snapshot(home.records) == before


def test_a_moved_head_is_refused_with_one_line(home, tmp_path, capsys):
    archive, _ = _box_run(home, tmp_path)
    home.run().assert_outcomes(passed=1)  # another CPU run lands while the box was out
    before = _snapshot(home.records)
    assert _import(archive, home.receipts) == 2
    err = capsys.readouterr().err
    assert "head moved since the kit was built" in err and "LEDGER" in err
    assert _snapshot(home.records) == before


def _rerun_on_box(gates, box: Path, base: str, archive: Path) -> Path:
    """A second call on the same box: its receipt chains onto the first call's; the archive
    holds every receipt the box made since ``base``."""
    gates.pytester.makeconftest(SEES_CUDA)
    gates.run(
        "--gate-no-render",
        "--gate-device=cuda",
        f"--gate-records={box / 'records'}",
        receipts=box / "receipts",
    ).assert_outcomes(passed=1)
    pack(archive, box / "receipts", box / "records", {"alpha": base}, {"commit": COMMIT})
    return archive


def test_a_rerun_on_the_box_extends_the_archive_and_imports_after_the_first(home, tmp_path):
    archive, box = _box_run(home, tmp_path)
    assert _import(archive, home.receipts) == 0
    base = read_ledger(home.receipts / "alpha" / "LEDGER")[0][0][0]
    second = _rerun_on_box(home, box, base, tmp_path / "second.tar.gz")
    assert [len(g["receipts"]) for g in read_archive(second)[0]["gates"].values()] == [2]
    assert _import(second, home.receipts) == 0
    assert len(read_ledger(home.receipts / "alpha" / "LEDGER")[0]) == 3
    assert verify_all(home.receipts, home.records) == []


def test_an_older_archive_after_its_superset_is_already_home(home, tmp_path, capsys):
    first, box = _box_run(home, tmp_path)
    superset = _rerun_on_box(home, box, chain_head(home.receipts, "alpha"), tmp_path / "s.tar.gz")
    assert _import(superset, home.receipts) == 0
    before = _snapshot(home.records)
    assert _import(first, home.receipts) == 0  # everything in it is already in the ledger
    assert "already in the ledger" in capsys.readouterr().out
    assert _snapshot(home.records) == before


def test_a_gate_that_gained_nothing_is_left_out_of_the_archive(home, tmp_path):
    archive, box = _box_run(home, tmp_path)
    beta = box / "receipts" / "beta"
    beta.mkdir()
    heads = {"alpha": chain_head(home.receipts, "alpha"), "beta": None}
    pack(archive, box / "receipts", box / "records", heads, {"commit": COMMIT})
    assert list(read_archive(archive)[0]["gates"]) == ["alpha"]


def test_bad_provenance_is_a_one_line_usage_error(home, tmp_path):
    from assay.qualify.plugin.environment import provenance_state

    path = tmp_path / "p.json"
    path.write_text(json.dumps({"commit": "nothex", "dirty": False}))
    with pytest.raises(AssayError, match=r"p\.json: commit: expected"):
        provenance_state(path)
    path.write_text("[]")
    with pytest.raises(AssayError, match="expected a JSON object"):
        provenance_state(path)
    result = home.run(f"--gate-provenance={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gate-provenance: *expected a JSON object*"])
    assert "Traceback" not in result.stderr.str()


def test_a_cpu_run_is_never_compared_with_a_cuda_baseline(home, tmp_path):
    from assay.qualify.judging.baseline import find_baseline

    archive, _ = _box_run(home, tmp_path)
    assert _import(archive, home.receipts) == 0
    newest = find_baseline(home.receipts, "alpha")[1]
    assert newest["run"]["device"] == "cuda"
    assert find_baseline(home.receipts, "alpha", "cpu")[1]["run"]["device"] == "cpu"
    assert find_baseline(home.receipts, "alpha", "mps") is None


def test_claim_device_must_be_a_device_type(gates):
    gates.write(
        "beta",
        """
        def test_x(gate):
            c = gate.claim("x", "s", kind="correctness", threshold=Threshold("<=", 1))
            c.ran_on("not a device!")
        """,
    )
    result = gates.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected a device type*"])
