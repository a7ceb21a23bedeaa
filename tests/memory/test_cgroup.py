"""The memory limit a cgroup puts on the process: the tightest on the way to the root, with
page cache counted as free, for cgroup v1 and v2 trees."""

from __future__ import annotations

from pathlib import Path

from assay.memory.cgroup import group_memory


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def _proc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return path


def test_v1_takes_the_tightest_ancestor_and_counts_cache_as_free(tmp_path):
    root = tmp_path / "fs"
    unlimited = str(9223372036854771712)
    _write(root / "memory", memory_limit_in_bytes=unlimited, memory_usage_in_bytes="100")
    _write(
        root / "memory/a",
        memory_limit_in_bytes=str(3 << 30),
        memory_usage_in_bytes=str(2 << 30),
        memory_stat="total_cache 1073741824\n",
    )
    _write(
        root / "memory/a/b",
        memory_limit_in_bytes=str(4 << 30),
        memory_usage_in_bytes=str(1 << 30),
        memory_stat="total_cache 0\n",
    )
    found = group_memory(_proc(tmp_path, "4:memory:/a/b\n1:cpu:/\n"), root)
    assert found is not None
    assert (found.limit, found.used, found.free) == (3 << 30, 1 << 30, 2 << 30)
    assert found.path == root / "memory/a"


def test_v2_max_means_no_limit(tmp_path):
    root = tmp_path / "fs"
    _write(root / "g", memory_max="max\n", memory_current="5\n")
    assert group_memory(_proc(tmp_path, "0::/g\n"), root) is None
    _write(
        root / "g",
        memory_max=str(2 << 30),
        memory_current=str(1 << 30),
        memory_stat="anon 1\nfile 536870912\n",
    )
    found = group_memory(_proc(tmp_path, "0::/g\n"), root)
    assert found is not None and found.free == (2 << 30) - (1 << 29)


def test_no_cgroup_file_or_no_limit_is_none(tmp_path):
    assert group_memory(tmp_path / "absent", tmp_path) is None
    assert group_memory(_proc(tmp_path, "4:memory:/x\n"), tmp_path / "fs") is None


def test_usage_over_the_limit_leaves_nothing_free(tmp_path):
    root = tmp_path / "fs"
    _write(root / "memory/a", memory_limit_in_bytes="100", memory_usage_in_bytes="300")
    found = group_memory(_proc(tmp_path, "4:memory:/a\n"), root)
    assert found is not None and found.free == 0
