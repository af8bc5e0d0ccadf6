#!/usr/bin/env bash
# Set up (if needed) and run the default test suite. Long experiments are marked `slow` and skipped
# here; run them with `./run_tests.sh -m slow`.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( (RANDOM % 100) + 101 ))}
exec .venv/bin/python -m pytest -q "$@"
