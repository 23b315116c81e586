#!/usr/bin/env bash
# Regenerates the committed Python modules from the .proto files beside this script:
# <name>_pb2.py (messages), <name>_pb2_grpc.py (stubs and servicers) and their type stubs
# <name>_pb2.pyi and <name>_pb2_grpc.pyi (mypy-protobuf).
# Needs the test extra (grpcio-tools, mypy-protobuf) in the environment whose bin/ holds PYTHON.
#   PYTHON=.venv/bin/python src/hetsched/k8s/dra/api/regenerate.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../../../.." && pwd)"
python="${PYTHON:-python}"
bin="$(dirname "$(command -v "$python")")"
PATH="$bin:$PATH" "$python" -m grpc_tools.protoc -I "$src" \
    --python_out="$src" --grpc_python_out="$src" \
    --mypy_out="$src" --mypy_grpc_out="$src" \
    "$here"/*.proto
