"""Defects in the file layer: crash-safe writes (assay.atomic), bounded reads (assay.bounded)
and the export's staging (assay.adapters.export).

The ``atomic.*`` write faults break a write from inside ``write_all``: short writes and a kill
half-way through one file are the environment a correct writer must survive; trusting one short
write and writing in place (no temp + rename) are the defects the module exists to prevent.
They compose: any of them may be armed together, in any order.
"""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

_WRITE_ALL = "assay.atomic:write_all"
_VIEW = "    view = memoryview(data)\n"  # kept by every edit that inserts after it
_CHUNK = "view[written:]"  # the bytes handed to one os.write; each edit narrows it further

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "atomic.short_write",
        "every os.write takes at most N bytes (a legal short write; =N)",
        (
            Edit(_WRITE_ALL, _VIEW, _VIEW + '    limit = int("$VALUE" or 0)\n'),
            Edit(_WRITE_ALL, _CHUNK, _CHUNK + "[: limit if limit > 0 else None]"),
        ),
    ),
    Defect(
        "atomic.ignore_short_write",
        "the writer trusts one write call and drops what it did not take",
        (Edit(_WRITE_ALL, "    while written < len(view):\n", "    if written < len(view):\n"),),
    ),
    Defect(
        "atomic.kill_mid_write",
        "SIGKILL half-way through writing the file named NAME (=NAME)",
        (
            # The write that reaches the half-way byte stops there, and the process dies after it.
            Edit(_WRITE_ALL, "os.write(", "write_then_die("),
            Edit(
                _WRITE_ALL,
                _VIEW,
                _VIEW
                + """\
    # the file under write, by the name it will have (a staged temp name ends in its own)
    open_as = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    named = open_as == "$VALUE" or open_as.startswith(".$VALUE" + TMP_MARK)
    kill_at = len(view) // 2 if named else -1

    def write_then_die(fd, chunk):
        taken = os.write(fd, chunk)
        if kill_at >= 0 and written + taken >= kill_at:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return taken

""",
            ),
            Edit(
                _WRITE_ALL,
                _CHUNK,
                _CHUNK + "[: max(kill_at - written, 1) if kill_at >= 0 else None]",
            ),
        ),
    ),
    Defect(
        "atomic.flush_unnamed",
        "a full disk while a staged folder's files are flushed (fsync on a descriptor) is "
        "raised without the file's name, so the CLI prints 'error: No space left on device' "
        "naming nothing",
        (Edit("assay.atomic:_fsync_tree", "raise _named(exc, Path(path)) from None", "raise"),),
    ),
    Defect(
        "atomic.in_place",
        "atomic_write_bytes writes the destination directly, without temp + rename",
        (
            Edit(
                "assay.atomic:atomic_write_bytes",
                "    fd, tmp = tempfile.mkstemp(",
                """\
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    return
    fd, tmp = tempfile.mkstemp(""",
            ),
        ),
    ),
    Defect(
        "bounded.unbounded_aliases",
        "YAML aliases are expanded uncounted",
        (
            Edit(
                "assay.bounded:yaml_document",
                "nodes = count_expanded(node, YAML_NODES)",
                "nodes = 0",
            ),
        ),
    ),
    Defect(
        "bounded.long_integers_read",
        "integer literals of any length are read (Python's own limit raises a bare ValueError)",
        (Edit("assay.bounded:long_integer", "if count > INT_DIGITS:", "if False:"),),
    ),
    Defect(
        "bounded.split_lines_at_every_break",
        "JSON Lines split with str.splitlines, so U+2028 inside a string cuts an entry in two",
        (
            Edit(
                "assay.bounded:split_lines",
                '    lines = text.split("\\n")\n',
                '    lines = text.splitlines() or [""]\n',
            ),
        ),
    ),
    Defect(
        "adapters.export.in_place",
        "an export writes straight into --out, unstaged",
        (
            Edit(
                "assay.adapters.export:export",
                "    with staged_directory(target, replace=target.exists()) as staging:\n",
                """\
    import contextlib

    with contextlib.nullcontext(target) as staging:  # no staging folder
""",
            ),
        ),
    ),
    # assay.digest
    Defect(
        "digest.length_ignored",
        "feed reads to the end of the file when asked for a length, so a hash of a file's head "
        "(a GGUF seal's, a manifest's) covers the bytes after it too",
        (
            Edit(
                "assay.digest:feed",
                "block = handle.read(CHUNK if length is None else min(CHUNK, length - read))",
                "block = handle.read(CHUNK)",
            ),
        ),
    ),
    Defect(
        "digest.tail_after_first_chunk_dropped",
        "a short last block after the first chunk is not hashed, so a change in the tail of a "
        "file over 1 MiB (a checkpoint's, a model's) leaves its sha256 unchanged",
        (
            Edit(
                "assay.digest:feed",
                "        digest.update(block)\n",
                "        if len(block) == CHUNK or not read:\n            digest.update(block)\n",
            ),
        ),
    ),
    Defect(
        "digest.first_chunk_only",
        "file_sha256 hashes the first chunk of the file alone",
        (Edit("assay.digest:file_sha256", "feed(digest, handle)", "feed(digest, handle, CHUNK)"),),
    ),
)
