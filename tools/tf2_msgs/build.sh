#!/usr/bin/env bash
# Build tf2_msgs (TFMessage) with the PyPI rosidl wheels and install it into the venv VENV (default
# ../../.venv): the Python package into its site-packages, the type support libraries into VENV/lib
# (on the ROS wheels' library path), the .msg/.json type description into VENV/share/tf2_msgs.
# Needs cmake, ninja or make and a C/C++ compiler. Idempotent; exits 0 at once when tf2_msgs imports.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=$(cd "${1:-$here/../../.venv}" && pwd)
if "$V/bin/python" -c "import tf2_msgs.msg" 2>/dev/null; then
  exit 0
fi
for tool in cmake cc c++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "tf2_msgs: $tool not found" >&2; exit 1; }
done
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
"$V/bin/python" -m pip install -q -r "$here/requirements.txt"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
export AMENT_PREFIX_PATH="$V${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}" PATH="$V/bin:$PATH"
cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$V" -DCMAKE_INSTALL_PREFIX="$V" \
  -DPython3_EXECUTABLE="$V/bin/python" -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release >"$build/configure.log" 2>&1 \
  || { tail -30 "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j 2 >"$build/build.log" 2>&1 || { tail -30 "$build/build.log" >&2; exit 1; }
cmake --install "$build" >"$build/install.log" 2>&1 || { tail -30 "$build/install.log" >&2; exit 1; }
"$V/bin/python" -c "import tf2_msgs.msg" || { echo "tf2_msgs: built, but does not import" >&2; exit 1; }
echo "tf2_msgs: built and installed into $V"
