#!/usr/bin/env bash
# Set up everything legged_wbc needs on a fresh machine (idempotent): a venv in .venv with the
# pinned requirements and the package installed in editable mode.
set -euo pipefail
cd "$(dirname "$0")"
# Offscreen OpenGL for `legged-wbc render` (MuJoCo through EGL; Mesa renders in software without a
# GPU). Skipped when installed; never fatal: without it `legged-wbc render` says what is missing.
gl_missing=""
if command -v dpkg-query >/dev/null 2>&1; then
  for pkg in libegl1 libegl-mesa0 libgl1-mesa-dri; do
    st=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$st" = "install ok installed" ] || gl_missing="$gl_missing $pkg"
  done
fi
if [ -n "$gl_missing" ]; then
  as_root=""
  [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && as_root="sudo -n"; }
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$as_root" ]; }; then
    echo "setup.sh: installing$gl_missing (offscreen rendering)"
    { $as_root apt-get update -qq && $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends $gl_missing; } >/dev/null 2>&1 \
      || echo "setup.sh: warning: could not install$gl_missing; legged-wbc render will not work" >&2
  else
    echo "setup.sh: warning:$gl_missing not installed (needs apt-get as root); legged-wbc render will not work" >&2
  fi
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements.txt setup.py | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
# tf2_msgs (/tf, /tf_static) has no wheel on PyPI: generate and build its TFMessage with the rosidl wheels
# (tools/tf2_msgs, ~30 s once; skipped when it imports). Never fatal: without it the nodes publish no TF.
tools/tf2_msgs/build.sh .venv \
  || echo "setup.sh: warning: could not build tf2_msgs (see above); the stack runs without /tf and /tf_static" >&2
# Compile the numba kernels of the estimator and controller into their on-disk cache (__pycache__
# next to them) so the first launch does not: ~20-75 s (by the machine) after an install, a change of a kernel
# module or of numba, or on another CPU (says so in one line); < 1 s when the cache is valid, so it
# runs on every call.
.venv/bin/python -m legged_wbc.tools.bench.warmup || { echo "setup.sh: compiling the numba kernels failed (see above)" >&2; exit 1; }
