"""Each claim records its own code files; a listed module its test never imports errors it."""

from __future__ import annotations

CODE = """
def test_c(gate):
    import json.decoder
    c = gate.claim("c", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code={code})
    c.measure(0)
    c.control("broken", 2)
"""


def test_claim_code_files_start_with_the_gate_module_and_union_into_code_files(gates):
    gates.write("code", CODE.format(code='["json.decoder"]'))
    assert gates.run().ret == 0
    receipt = gates.only_receipt("code")
    paths = [f["path"] for f in receipt["claims"][0]["code_files"]]
    assert paths[0] == "gate_code.py" and paths[1].endswith("json/decoder.py")
    assert {f["path"] for f in receipt["code"]["files"]} == set(paths)
    record = (gates.records / "code.md").read_text()
    assert "test `gate\\_code.py::test\\_c`" in record


def test_a_module_the_test_never_imported_is_a_stale_declaration(gates):
    gates.write("stale", CODE.format(code='["xml.dom.minidom"]'))
    result = gates.run()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*module 'xml.dom.minidom' was never imported by its test*"])
