"""The committed drover.v1 stubs are exactly what proto/generate.py makes from proto/."""

from __future__ import annotations

import importlib.util
import pathlib

from tests.conftest import ROOT

COMMITTED = ROOT / "sdk" / "drover" / "v1"
HINT = "the stubs are stale: run `python proto/generate.py` and commit sdk/drover/v1"


def _generate(out_dir: pathlib.Path) -> pathlib.Path:
    spec = importlib.util.spec_from_file_location("drover_proto_generate", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(out_dir)
    return out_dir / "drover" / "v1"


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_committed_stubs_match_the_generated_ones(tmp_path: pathlib.Path) -> None:
    generated = _files(_generate(tmp_path))
    committed = {name: data for name, data in _files(COMMITTED).items() if name != "__init__.py"}
    assert generated, "protoc generated nothing"

    missing = sorted(generated.keys() - committed.keys())
    extra = sorted(committed.keys() - generated.keys())
    differ = sorted(name for name in generated.keys() & committed.keys() if generated[name] != committed[name])
    assert not missing, f"not committed: {missing}; {HINT}"
    assert not extra, f"committed but no longer generated: {extra}; {HINT}"
    assert not differ, f"differ from the generated stubs: {differ}; {HINT}"
