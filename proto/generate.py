"""Generate the drover.v1 stubs: python proto/generate.py [OUT_DIR] (default sdk/)."""

import pathlib
import sys

import grpc_tools
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def generate(out_dir: pathlib.Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in (PROTO_DIR / "drover" / "v1").glob("*.proto"))
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            *protos,
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with {code}")


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "sdk")
